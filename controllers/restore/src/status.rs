//! Observed state → MySQLRestore status. Pure: the reconcile passes what it saw and the time.
//! What a restore shares with a backup run is written by [`controller_common::status::Update`];
//! this module adds the backup it reads, the quiescing of the app and the verifying step.

use controller_common::agent_job::JobEnd;
use controller_common::status::{Update, summary_counts, summary_started};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_agent_contract::summary::AgentSummary;
use visitors_api::InvalidSpec;
use visitors_api::conditions::{self, Desired, READY, Status};
use visitors_api::point_in_time::PointInTimeRestoreStatus;
use visitors_api::restore::{MySQLRestore, MySQLRestoreStatus, RestorePhase, condition, reason};

use crate::build::Backup;

/// The spec is invalid, and a restore's spec cannot change: `Failed`, naming the fields.
pub fn invalid(restore: &MySQLRestore, invalid: &InvalidSpec, now: Time) -> MySQLRestoreStatus {
    let mut update = Update::of(restore, now.clone());
    update.failed_for(invalid);
    let mut status = update.done();
    if status.completion_time.is_none() {
        status.completion_time = Some(now);
    }
    status
}

/// The restore waits (`reason`, `message` say for what) before it can start.
pub fn pending(restore: &MySQLRestore, reason: &str, message: String, now: Time) -> MySQLRestoreStatus {
    let mut update = Update::of(restore, now);
    update.pending(reason, message);
    update.done()
}

/// The restore holds the database and waits for the app's backend to stop.
pub fn quiescing(restore: &MySQLRestore, backup: &Backup, message: String, now: Time) -> MySQLRestoreStatus {
    let mut update = Update::of(restore, now);
    update.status.phase = Some(RestorePhase::Quiescing);
    record_backup(&mut update.status, backup);
    update
        .set(Desired {
            type_: condition::PENDING,
            status: Status::False,
            reason: reason::DATABASE_LOCKED,
            message: "the restore holds the database".into(),
        })
        .set(quiesced(Status::False, reason::STOPPING, message.clone()))
        .not_ready(reason::QUIESCING, message);
    update.done()
}

/// The restore Job exists and has not ended.
pub fn running(
    restore: &MySQLRestore,
    job: &str,
    backup: &Backup,
    started: Option<Time>,
    now: Time,
) -> MySQLRestoreStatus {
    let mut update = Update::of(restore, now.clone());
    record_backup(&mut update.status, backup);
    update.started(job, Some(started.unwrap_or(now)));
    if restore.spec.quiesce() {
        let message = format!("the backend of VisitorsApp {} is stopped", restore.spec.target.visitors_app);
        update.set(quiesced(Status::True, reason::BACKEND_STOPPED, message));
    }
    update.running(job);
    update.done()
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
    let ready = Desired { type_: READY, status: Status::False, reason: reason::VERIFYING, message };
    conditions::set(&mut status.conditions, ready, restore.metadata.generation, now);
    status
}

/// The restore ended. Success needs the agent's own summary; the counts come from it.
pub fn finished(
    restore: &MySQLRestore,
    job: Option<&str>,
    backup: &Backup,
    end: &JobEnd,
    now: Time,
) -> MySQLRestoreStatus {
    let mut update = Update::of(restore, now);
    record_backup(&mut update.status, backup);
    update.ended(job, end, "the database holds the backup, checked against its manifest", fill_from_summary);
    if restore.spec.quiesce() {
        let message = "the restore ended; the backend runs again at the app's size".to_string();
        update.set(quiesced(Status::False, reason::RELEASED, message));
    }
    update.done()
}

/// The restore has ended and its spec changed since: nothing happens but this condition.
pub fn spec_ignored(restore: &MySQLRestore, now: Time) -> MySQLRestoreStatus {
    let mut status = restore.status.clone().unwrap_or_default();
    let phase = status.phase.map(|p| format!("{p:?}")).unwrap_or_default();
    let message = format!(
        "the restore has ended ({phase}) and is a record: a change to its spec does nothing; create a new MySQLRestore to restore again"
    );
    let ignored =
        Desired { type_: condition::SPEC_IGNORED, status: Status::True, reason: reason::RESTORE_ENDED, message };
    conditions::set(&mut status.conditions, ignored, restore.metadata.generation, now);
    status
}

/// Whether the app's backend is stopped for the restore.
fn quiesced(status: Status, reason: &str, message: String) -> Desired<'_> {
    Desired { type_: condition::QUIESCED, status, reason, message }
}

fn record_backup(status: &mut MySQLRestoreStatus, backup: &Backup) {
    status.backup_name = backup.run.clone();
    status.backup_completion_time = backup.completion_time.clone();
    status.restored_from = Some(backup.location.clone()).filter(|l| !l.is_empty());
    if backup.manifest_sha256.is_some() {
        status.manifest_sha256 = backup.manifest_sha256.clone();
    }
    if let Some(plan) = &backup.point_in_time {
        let recorded = status.point_in_time.take().unwrap_or_default();
        status.point_in_time = Some(PointInTimeRestoreStatus {
            target: Some(plan.target.clone()),
            base_snapshot_time: plan.base_snapshot_time.clone(),
            ..recorded
        });
    }
}

/// The agent's account of the restore. The restore's start is its Job's: the agent's summary
/// is that of the Job's last step.
fn fill_from_summary(status: &mut MySQLRestoreStatus, summary: &AgentSummary) {
    if status.start_time.is_none() {
        status.start_time = summary_started(summary);
    }
    let (tables, rows) = summary_counts(summary);
    status.tables = tables.or(status.tables);
    status.rows = rows.or(status.rows);
    if summary.manifest_sha256.is_some() {
        status.manifest_sha256 = summary.manifest_sha256.clone();
    }
    if let Some(replay) = &summary.replay {
        let recorded = status.point_in_time.take().unwrap_or_default();
        let count = |n: u64| Some(i64::try_from(n).unwrap_or(i64::MAX));
        status.point_in_time = Some(PointInTimeRestoreStatus {
            last_applied_time: replay
                .last_applied_time
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(Time),
            last_applied_gtid: replay.last_applied_gtid.clone(),
            transactions_applied: count(replay.transactions),
            events_applied: count(replay.events),
            segments_applied: count(replay.segments),
            ..recorded
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::from_run;
    use visitors_agent_contract::summary::Operation;

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
        let status = finished(&restore, Some("r1-restore"), &backup(), &JobEnd::Succeeded(summary), at(1_090));
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
            JobEnd::Failed { reason: "AgentFailed", message: "chunk corrupt (checksumMismatch)".into(), summary: None };
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

        let end = JobEnd::Failed { reason: "JobDeleted", message: "gone".into(), summary: None };
        restore.status = Some(finished(&restore, None, &backup(), &end, at(100)));
        restore.metadata.generation = Some(2);
        let noted = spec_ignored(&restore, at(200));
        assert_eq!(noted.observed_generation, Some(1), "the status still describes the spec that ran");
        assert_eq!(noted.phase, Some(RestorePhase::Failed));
        let ignored = conditions::find(&noted.conditions, condition::SPEC_IGNORED).unwrap();
        assert!(ignored.message.contains("create a new MySQLRestore"), "{}", ignored.message);
    }
}
