//! Observed state → MySQLRestore status. Pure: the reconcile passes what it saw and the time.

use controller_common::job::RunEnd;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::InvalidSpec;
use visitors_api::agent_summary::{AgentSummary, seconds_between};
use visitors_api::conditions::{self, Desired, READY, Status};
use visitors_api::restore::{MySQLRestore, MySQLRestoreStatus, RestorePhase};

use crate::build::Backup;

/// Condition types of a restore beyond `Ready`.
pub mod condition {
    /// True while the restore waits before its Job (for its backup, its app, the lock).
    pub const PENDING: &str = "Pending";
    /// True once the app's backend is stopped for the restore.
    pub const QUIESCED: &str = "Quiesced";
    /// True when the spec changed after the restore ended: the change did nothing.
    pub const SPEC_IGNORED: &str = "SpecChangeIgnored";
}

/// The current status, or an empty one, with `observedGeneration` of this spec.
fn base(restore: &MySQLRestore) -> MySQLRestoreStatus {
    let mut status = restore.status.clone().unwrap_or_default();
    status.observed_generation = restore.metadata.generation;
    status
}

fn set(status: &mut MySQLRestoreStatus, generation: Option<i64>, now: &Time, desired: Desired<'_>) {
    conditions::set(&mut status.conditions, desired, generation, now.clone());
}

fn ready(reason: &str, message: String) -> Desired<'_> {
    Desired { type_: READY, status: Status::False, reason, message }
}

/// The spec is invalid, and a restore's spec cannot change: `Failed`, naming the fields.
pub fn invalid(restore: &MySQLRestore, invalid: &InvalidSpec, now: Time) -> MySQLRestoreStatus {
    let mut status = base(restore);
    set(&mut status, restore.metadata.generation, &now, conditions::invalid_spec(invalid));
    status.phase = Some(RestorePhase::Failed);
    status.error = Some(invalid.to_string());
    if status.completion_time.is_none() {
        status.completion_time = Some(now);
    }
    status
}

/// The restore waits (`reason`, `message` say for what) before it can start.
pub fn pending(restore: &MySQLRestore, reason: &str, message: String, now: Time) -> MySQLRestoreStatus {
    let mut status = base(restore);
    let generation = restore.metadata.generation;
    status.phase = Some(RestorePhase::Pending);
    let pending = Desired { type_: condition::PENDING, status: Status::True, reason, message: message.clone() };
    set(&mut status, generation, &now, pending);
    set(&mut status, generation, &now, ready(reason, message));
    status
}

/// The restore holds the database and waits for the app's backend to stop.
pub fn quiescing(restore: &MySQLRestore, backup: &Backup, message: String, now: Time) -> MySQLRestoreStatus {
    let mut status = base(restore);
    let generation = restore.metadata.generation;
    status.phase = Some(RestorePhase::Quiescing);
    record_backup(&mut status, backup);
    let started = Desired {
        type_: condition::PENDING,
        status: Status::False,
        reason: "DatabaseLocked",
        message: "the restore holds the database".into(),
    };
    set(&mut status, generation, &now, started);
    let quiesced =
        Desired { type_: condition::QUIESCED, status: Status::False, reason: "Stopping", message: message.clone() };
    set(&mut status, generation, &now, quiesced);
    set(&mut status, generation, &now, ready("Quiescing", message));
    status
}

/// The restore Job exists and has not ended.
pub fn running(
    restore: &MySQLRestore,
    job: &str,
    backup: &Backup,
    started: Option<Time>,
    now: Time,
) -> MySQLRestoreStatus {
    let mut status = base(restore);
    let generation = restore.metadata.generation;
    status.phase = Some(RestorePhase::Running);
    status.job_name = Some(job.to_string());
    record_backup(&mut status, backup);
    if status.start_time.is_none() {
        status.start_time = Some(started.unwrap_or_else(|| now.clone()));
    }
    let started = Desired {
        type_: condition::PENDING,
        status: Status::False,
        reason: "Started",
        message: format!("Job {job} runs the restore"),
    };
    set(&mut status, generation, &now, started);
    if restore.spec.quiesce() {
        let quiesced = Desired {
            type_: condition::QUIESCED,
            status: Status::True,
            reason: "BackendStopped",
            message: format!("the backend of VisitorsApp {} is stopped", restore.spec.target.visitors_app),
        };
        set(&mut status, generation, &now, quiesced);
    }
    set(&mut status, generation, &now, ready("Running", format!("Job {job} runs the restore")));
    status
}

/// The Job's first step has loaded the backup into staging schemas and checked it there; its
/// second checks the staged copy against the manifest again and swaps it in. The backend stays
/// stopped as while `Running`.
pub fn verifying(
    restore: &MySQLRestore,
    job: &str,
    backup: &Backup,
    started: Option<Time>,
    now: Time,
) -> MySQLRestoreStatus {
    let mut status = running(restore, job, backup, started, now.clone());
    status.phase = Some(RestorePhase::Verifying);
    let message = format!(
        "the backup is loaded and checked in staging schemas; Job {job} checks the staged copy against the manifest again (row counts, checksums) and swaps it in"
    );
    set(&mut status, restore.metadata.generation, &now, ready("Verifying", message));
    status
}

/// The restore ended. Success needs the agent's own summary; the counts come from it.
pub fn finished(
    restore: &MySQLRestore,
    job: Option<&str>,
    backup: &Backup,
    end: &RunEnd,
    now: Time,
) -> MySQLRestoreStatus {
    let mut status = base(restore);
    let generation = restore.metadata.generation;
    if let Some(job) = job {
        status.job_name = Some(job.to_string());
    }
    record_backup(&mut status, backup);
    if let Some(summary) = end.summary() {
        fill_from_summary(&mut status, summary);
    }
    if status.completion_time.is_none() {
        status.completion_time = Some(now.clone());
    }
    if status.duration_seconds.is_none()
        && let (Some(start), Some(end)) = (&status.start_time, &status.completion_time)
    {
        status.duration_seconds = Some(seconds_between(start, end));
    }
    let desired = match end {
        RunEnd::Succeeded(_) => {
            status.phase = Some(RestorePhase::Succeeded);
            status.error = None;
            Desired {
                type_: READY,
                status: Status::True,
                reason: "Succeeded",
                message: "the database holds the backup, checked against its manifest".into(),
            }
        }
        RunEnd::Failed { reason, message, .. } => {
            status.phase = Some(RestorePhase::Failed);
            status.error = Some(message.clone());
            ready(reason, message.clone())
        }
    };
    set(&mut status, generation, &now, desired);
    if restore.spec.quiesce() {
        let released = Desired {
            type_: condition::QUIESCED,
            status: Status::False,
            reason: "Released",
            message: "the restore ended; the backend runs again at the app's size".into(),
        };
        set(&mut status, generation, &now, released);
    }
    status
}

/// The restore has ended and its spec changed since: nothing happens but this condition.
pub fn spec_ignored(restore: &MySQLRestore, now: Time) -> MySQLRestoreStatus {
    let mut status = restore.status.clone().unwrap_or_default();
    let phase = status.phase.map(|p| format!("{p:?}")).unwrap_or_default();
    let message = format!(
        "the restore has ended ({phase}) and is a record: a change to its spec does nothing; create a new MySQLRestore to restore again"
    );
    let ignored = Desired { type_: condition::SPEC_IGNORED, status: Status::True, reason: "RestoreEnded", message };
    set(&mut status, restore.metadata.generation, &now, ignored);
    status
}

fn record_backup(status: &mut MySQLRestoreStatus, backup: &Backup) {
    status.backup_name = backup.run.clone();
    status.backup_completion_time = backup.completion_time.clone();
    status.restored_from = Some(backup.location.clone()).filter(|l| !l.is_empty());
    if backup.manifest_sha256.is_some() {
        status.manifest_sha256 = backup.manifest_sha256.clone();
    }
}

fn fill_from_summary(status: &mut MySQLRestoreStatus, summary: &AgentSummary) {
    if status.start_time.is_none() {
        status.start_time = summary.started();
    }
    if let Some(end) = summary.finished() {
        status.completion_time = Some(end);
    }
    let (tables, rows) = summary.counts();
    status.duration_seconds = summary.duration_seconds.or(status.duration_seconds);
    status.tables = tables.or(status.tables);
    status.rows = rows.or(status.rows);
    if summary.manifest_sha256.is_some() {
        status.manifest_sha256 = summary.manifest_sha256.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::from_run;
    use visitors_api::agent_summary::Operation;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn backup() -> Backup {
        Backup {
            location: "pvc://backups/shop/ex/b1".into(),
            run: Some("b1".into()),
            manifest_sha256: Some("ab".repeat(32)),
            completion_time: Some(at(500)),
            ..Backup::default()
        }
    }

    #[test]
    fn success_records_the_backup_and_the_counts() {
        let mut restore = from_run();
        restore.status = Some(running(&restore, "r1-restore", &backup(), Some(at(1_000)), at(1_000)));
        let summary = AgentSummary {
            operation: Some(Operation::Restore),
            ok: true,
            tables: Some(3),
            rows: Some(1200),
            ..AgentSummary::default()
        };
        let status = finished(&restore, Some("r1-restore"), &backup(), &RunEnd::Succeeded(summary), at(1_090));
        assert_eq!(status.phase, Some(RestorePhase::Succeeded));
        assert_eq!((status.tables, status.rows), (Some(3), Some(1200)));
        assert_eq!(status.backup_name.as_deref(), Some("b1"));
        assert_eq!(status.backup_completion_time, Some(at(500)));
        assert_eq!(status.restored_from.as_deref(), Some("pvc://backups/shop/ex/b1"));
        assert_eq!(status.duration_seconds, Some(90.0));
        assert!(conditions::is_true(&status.conditions, READY));
        let quiesced = conditions::find(&status.conditions, condition::QUIESCED).unwrap();
        assert_eq!((quiesced.status.as_str(), quiesced.reason.as_str()), ("False", "Released"));
    }

    #[test]
    fn verifying_follows_running_with_the_backend_still_stopped_and_is_stable() {
        let mut restore = from_run();
        restore.status = Some(running(&restore, "r1-restore", &backup(), Some(at(1_000)), at(1_000)));
        let status = verifying(&restore, "r1-restore", &backup(), Some(at(1_000)), at(1_050));
        assert_eq!(status.phase, Some(RestorePhase::Verifying));
        assert_eq!(status.start_time, Some(at(1_000)), "the start is the Job's");
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Verifying"));
        assert!(ready.message.contains("checks the staged copy against the manifest"), "{}", ready.message);
        let quiesced = conditions::find(&status.conditions, condition::QUIESCED).unwrap();
        assert_eq!((quiesced.status.as_str(), quiesced.reason.as_str()), ("True", "BackendStopped"));
        restore.status = Some(status.clone());
        assert!(restore.quiesces_app(), "the VisitorsApp controller keeps the backend stopped");
        assert_eq!(verifying(&restore, "r1-restore", &backup(), Some(at(1_000)), at(1_090)), status);
    }

    #[test]
    fn a_failure_keeps_its_reason_and_never_looks_successful() {
        let restore = from_run();
        let end =
            RunEnd::Failed { reason: "AgentFailed", message: "chunk corrupt (checksumMismatch)".into(), summary: None };
        let status = finished(&restore, Some("r1-restore"), &backup(), &end, at(10));
        assert_eq!(status.phase, Some(RestorePhase::Failed));
        assert_eq!(status.error.as_deref(), Some("chunk corrupt (checksumMismatch)"));
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "AgentFailed"));
        assert_eq!(status.tables, None);
    }

    #[test]
    fn waiting_is_stable_and_a_changed_spec_after_the_end_is_only_noted() {
        let mut restore = from_run();
        let first = pending(&restore, "BackupRunning", "MySQLBackup b1 is Running".into(), at(10));
        restore.status = Some(first.clone());
        assert_eq!(pending(&restore, "BackupRunning", "MySQLBackup b1 is Running".into(), at(99)), first);

        let end = RunEnd::Failed { reason: "JobDeleted", message: "gone".into(), summary: None };
        restore.status = Some(finished(&restore, None, &backup(), &end, at(100)));
        restore.metadata.generation = Some(2);
        let noted = spec_ignored(&restore, at(200));
        assert_eq!(noted.observed_generation, Some(1), "the status still describes the spec that ran");
        assert_eq!(noted.phase, Some(RestorePhase::Failed));
        let ignored = conditions::find(&noted.conditions, condition::SPEC_IGNORED).unwrap();
        assert!(ignored.message.contains("create a new MySQLRestore"), "{}", ignored.message);
    }
}
