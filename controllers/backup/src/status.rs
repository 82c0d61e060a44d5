//! Observed state → MySQLBackup status. Pure: the reconcile passes what it saw and the time.

use controller_common::job::RunEnd;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::InvalidSpec;
use visitors_api::agent_summary::{AgentSummary, seconds_between, status_count};
use visitors_api::backup::{BackupPhase, MySQLBackup, MySQLBackupStatus, condition};
use visitors_api::conditions::{self, Desired, READY, REASON_INVALID_SPEC, Status};

/// The current status, or an empty one, with `observedGeneration` of this spec.
fn base(backup: &MySQLBackup) -> MySQLBackupStatus {
    let mut status = backup.status.clone().unwrap_or_default();
    status.observed_generation = backup.metadata.generation;
    status
}

fn set(status: &mut MySQLBackupStatus, generation: Option<i64>, now: &Time, desired: Desired<'_>) {
    conditions::set(&mut status.conditions, desired, generation, now.clone());
}

/// Whether the run has ended for good (an invalid spec can still be fixed).
pub fn is_finished(backup: &MySQLBackup) -> bool {
    let Some(status) = &backup.status else { return false };
    let invalid = conditions::find(&status.conditions, READY).is_some_and(|c| c.reason == REASON_INVALID_SPEC);
    matches!(status.phase, Some(BackupPhase::Succeeded | BackupPhase::Failed)) && !invalid
}

/// The spec is invalid: `Ready=False` naming the fields; a run is `Failed` (it can never
/// succeed as it is), a schedule only says so.
pub fn invalid(backup: &MySQLBackup, invalid: &InvalidSpec, now: Time) -> MySQLBackupStatus {
    let mut status = base(backup);
    let generation = backup.metadata.generation;
    set(&mut status, generation, &now, conditions::invalid_spec(invalid));
    if !backup.spec.is_schedule() {
        status.phase = Some(BackupPhase::Failed);
        status.error = Some(invalid.to_string());
    }
    status
}

/// The run waits for something (`reason`, `message` say what) before it can start its Job.
pub fn pending(backup: &MySQLBackup, reason: &str, message: String, now: Time) -> MySQLBackupStatus {
    let mut status = base(backup);
    let generation = backup.metadata.generation;
    status.phase = Some(BackupPhase::Pending);
    status.error = None;
    set(
        &mut status,
        generation,
        &now,
        Desired { type_: condition::PENDING, status: Status::True, reason, message: message.clone() },
    );
    set(&mut status, generation, &now, Desired { type_: READY, status: Status::False, reason, message });
    status
}

/// The run's Job exists and has not ended.
pub fn running(
    backup: &MySQLBackup,
    job: &str,
    location: String,
    started: Option<Time>,
    now: Time,
) -> MySQLBackupStatus {
    let mut status = base(backup);
    let generation = backup.metadata.generation;
    status.phase = Some(BackupPhase::Running);
    status.job_name = Some(job.to_string());
    status.location = Some(location);
    status.error = None;
    if status.start_time.is_none() {
        status.start_time = started;
    }
    let message = format!("Job {job} runs the backup");
    set(
        &mut status,
        generation,
        &now,
        Desired { type_: condition::PENDING, status: Status::False, reason: "Started", message: message.clone() },
    );
    set(&mut status, generation, &now, Desired { type_: READY, status: Status::False, reason: "Running", message });
    status
}

/// The run ended. Success needs the agent's own summary; every field comes from it.
pub fn finished(backup: &MySQLBackup, job: &str, end: &RunEnd, location: String, now: Time) -> MySQLBackupStatus {
    let mut status = base(backup);
    let generation = backup.metadata.generation;
    status.job_name = Some(job.to_string());
    status.location = Some(location);
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
    let ready = match end {
        RunEnd::Succeeded(_) => {
            status.phase = Some(BackupPhase::Succeeded);
            status.error = None;
            Desired {
                type_: READY,
                status: Status::True,
                reason: "Succeeded",
                message: "the backup is stored and complete".into(),
            }
        }
        RunEnd::Failed { reason, message, .. } => {
            status.phase = Some(BackupPhase::Failed);
            status.error = Some(message.clone());
            Desired { type_: READY, status: Status::False, reason, message: message.clone() }
        }
    };
    set(&mut status, generation, &now, ready);
    status
}

fn fill_from_summary(status: &mut MySQLBackupStatus, summary: &AgentSummary) {
    if let Some(start) = summary.started() {
        status.start_time = Some(start);
    }
    if let Some(end) = summary.finished() {
        status.completion_time = Some(end);
    }
    let (tables, rows) = summary.counts();
    status.duration_seconds = summary.duration_seconds.or(status.duration_seconds);
    status.location = summary.location.clone().or(status.location.take());
    status.size_bytes = status_count(summary.stored_bytes);
    status.tables = tables;
    status.rows = rows;
    status.manifest_sha256 = summary.manifest_sha256.clone();
    status.server_version = summary.server_version.clone();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;
    use visitors_api::agent_summary::{AgentSummary, Operation};

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn summary() -> AgentSummary {
        AgentSummary {
            operation: Some(Operation::Backup),
            ok: true,
            location: Some("file:///backup/mysql/shop/ex/b1".into()),
            started_at: Some("2026-11-23T10:00:00Z".into()),
            finished_at: Some("2026-11-23T10:01:30Z".into()),
            duration_seconds: Some(90.0),
            server_version: Some("11.8.3-MariaDB".into()),
            tables: Some(3),
            rows: Some(1200),
            stored_bytes: Some(4096),
            manifest_sha256: Some("ab".repeat(32)),
            ..AgentSummary::default()
        }
    }

    #[test]
    fn success_fills_every_field_from_the_summary() {
        let status =
            finished(&run(), "b1-backup", &RunEnd::Succeeded(summary()), "pvc://backups/x".into(), at(2_000_000_000));
        assert_eq!(status.phase, Some(BackupPhase::Succeeded));
        assert_eq!(status.size_bytes, Some(4096));
        assert_eq!((status.tables, status.rows), (Some(3), Some(1200)));
        assert_eq!(status.manifest_sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!(status.server_version.as_deref(), Some("11.8.3-MariaDB"));
        assert_eq!(status.duration_seconds, Some(90.0));
        assert_eq!(status.start_time, Some(Time("2026-11-23T10:00:00Z".parse().unwrap())));
        assert_eq!(status.location.as_deref(), Some("file:///backup/mysql/shop/ex/b1"));
        assert!(conditions::is_true(&status.conditions, READY));
        assert_eq!(status.error, None);
    }

    #[test]
    fn failure_keeps_the_reason_and_never_looks_successful() {
        let end = RunEnd::Failed { reason: "DeadlineExceeded", message: "too slow".into(), summary: None };
        let mut backup = run();
        backup.status = Some(running(&backup, "b1-backup", "pvc://backups/x".into(), Some(at(1_000)), at(1_000)));
        let status = finished(&backup, "b1-backup", &end, "pvc://backups/x".into(), at(1_090));
        assert_eq!(status.phase, Some(BackupPhase::Failed));
        assert_eq!(status.error.as_deref(), Some("too slow"));
        assert_eq!(status.manifest_sha256, None);
        assert_eq!(status.duration_seconds, Some(90.0));
        let ready = conditions::find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "DeadlineExceeded"));
        backup.status = Some(status);
        assert!(is_finished(&backup));
    }

    #[test]
    fn pending_names_what_it_waits_for_and_is_stable() {
        let mut backup = run();
        let first = pending(&backup, "WaitingForVisitorsApp", "VisitorsApp ex does not exist".into(), at(10));
        let condition = conditions::find(&first.conditions, condition::PENDING).unwrap();
        assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("True", "WaitingForVisitorsApp"));
        backup.status = Some(first.clone());
        assert_eq!(pending(&backup, "WaitingForVisitorsApp", "VisitorsApp ex does not exist".into(), at(99)), first);
        assert!(!is_finished(&backup));
    }

    #[test]
    fn an_invalid_run_fails_until_its_spec_is_fixed() {
        let mut backup = run();
        backup.spec.source.visitors_app = "Bad Name".into();
        let status = invalid(&backup, &backup.spec.validate().unwrap_err(), at(10));
        assert_eq!(status.phase, Some(BackupPhase::Failed));
        assert!(status.error.as_deref().unwrap().contains("spec.source.visitorsApp"));
        backup.status = Some(status);
        assert!(!is_finished(&backup), "a fixed spec gets another chance");
    }
}
