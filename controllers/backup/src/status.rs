//! Observed state → MySQLBackup status. Pure: the reconcile passes what it saw and the time.
//! What a run shares with a restore is written by [`controller_common::status::Update`]; this
//! module adds where the backup is stored and what the agent counted.

use controller_common::agent_job::JobEnd;
use controller_common::status::{Update, seconds_between, status_count, summary_counts, summary_started};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_agent_contract::summary::AgentSummary;
use visitors_api::InvalidSpec;
use visitors_api::backup::{MySQLBackup, MySQLBackupStatus, TakenFrom, condition};
use visitors_api::conditions::{self, Desired, READY, REASON_INVALID_SPEC, Status};
use visitors_api::drill::{DEFECT_ERROR_KINDS, DrillCheck, DrillPhase, DrillStatus, reason as drill_reason};
use visitors_api::point_in_time::SnapshotPosition;

/// Whether the run has ended for good (an invalid spec can still be fixed).
pub fn is_finished(backup: &MySQLBackup) -> bool {
    let Some(status) = &backup.status else { return false };
    let invalid = conditions::find(&status.conditions, READY).is_some_and(|c| c.reason == REASON_INVALID_SPEC);
    backup.has_ended() && !invalid
}

/// The spec is invalid: `Ready=False` naming the fields; a run is `Failed` (it can never
/// succeed as it is), a schedule only says so.
pub fn invalid(backup: &MySQLBackup, invalid: &InvalidSpec, now: Time) -> MySQLBackupStatus {
    let mut update = Update::of(backup, now);
    if backup.spec.is_schedule() {
        update.invalid(invalid);
    } else {
        update.failed_for(invalid);
    }
    update.done()
}

/// The run waits for something (`reason`, `message` say what) before it can start its Job.
pub fn pending(backup: &MySQLBackup, reason: &str, message: String, now: Time) -> MySQLBackupStatus {
    let mut update = Update::of(backup, now);
    update.pending(reason, message);
    update.done()
}

/// The run's Job exists and has not ended.
pub fn running(
    backup: &MySQLBackup,
    job: &str,
    location: String,
    started: Option<Time>,
    taken_from: Option<TakenFrom>,
    now: Time,
) -> MySQLBackupStatus {
    let mut update = Update::of(backup, now);
    update.status.location = Some(location);
    if taken_from.is_some() {
        update.status.taken_from = taken_from;
    }
    update.started(job, started).running(job);
    update.done()
}

/// The run ended. Success needs the agent's own summary; every field comes from it.
pub fn finished(backup: &MySQLBackup, job: &str, end: &JobEnd, location: String, now: Time) -> MySQLBackupStatus {
    let mut update = Update::of(backup, now);
    update.status.location = Some(location);
    update.ended(Some(job), end, "the backup is stored and complete", fill_from_summary);
    update.done()
}

/// The agent's account of the run, its start included: the agent's start is the backup's.
fn fill_from_summary(status: &mut MySQLBackupStatus, summary: &AgentSummary) {
    if let Some(start) = summary_started(summary) {
        status.start_time = Some(start);
    }
    let (tables, rows) = summary_counts(summary);
    status.location = summary.location.clone().or(status.location.take());
    status.size_bytes = status_count(summary.stored_bytes);
    status.data_bytes = status_count(summary.data_bytes);
    status.tables = tables;
    status.rows = rows;
    status.manifest_sha256 = summary.manifest_sha256.clone();
    status.encryption_key_id = summary.encryption_key_id.clone();
    status.server_version = summary.server_version.clone();
    status.snapshot = summary.snapshot.as_ref().map(|snapshot| SnapshotPosition {
        time: snapshot.time.as_deref().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(Time),
        binlog_file: snapshot.binlog_file.clone(),
        binlog_position: snapshot.binlog_position.and_then(|p| i64::try_from(p).ok()),
        gtid: snapshot.gtid.clone(),
    });
}

/// A run's status with its drill set to `drill`, and the `Verified` condition that says it.
pub fn with_drill(run: &MySQLBackup, drill: DrillStatus, now: Time) -> MySQLBackupStatus {
    let mut status = run.status.clone().unwrap_or_default();
    if drill.found_defect() {
        status.drill_defect = drill.message.clone().or_else(|| Some("a drill found the backup defective".into()));
        status.verified_time = None;
    } else if drill.phase == DrillPhase::Succeeded && status.drill_defect.is_none() {
        status.verified_time = drill.completion_time.clone();
    }
    let verified = verified_condition(status.drill_defect.clone(), &drill);
    conditions::set(&mut status.conditions, verified, run.metadata.generation, now);
    status.drill = Some(drill);
    status
}

/// `Verified`: False for good once a drill found a defect; else the newest drill's state.
fn verified_condition(defect: Option<String>, drill: &DrillStatus) -> Desired<'_> {
    let type_ = condition::VERIFIED;
    if let Some(defect) = defect {
        return Desired { type_, status: Status::False, reason: drill_reason::BACKUP_DEFECT, message: defect };
    }
    match drill.phase {
        DrillPhase::Pending | DrillPhase::Running => Desired {
            type_,
            status: Status::Unknown,
            reason: drill_reason::DRILL_RUNNING,
            message: "a restore drill of this run is running".into(),
        },
        DrillPhase::Succeeded => Desired {
            type_,
            status: Status::True,
            reason: drill_reason::VERIFIED,
            message: if drill.check == Some(DrillCheck::Tables) {
                "the newest restore drill restored this run and every table passed CHECK TABLE; its rows were not compared with the source (a physical run of a primary records none)".into()
            } else {
                "the newest restore drill restored this run and every table matched what was dumped".into()
            },
        },
        DrillPhase::Failed => Desired {
            type_,
            status: Status::False,
            reason: drill.reason.as_deref().unwrap_or(drill_reason::DRILL_ERROR),
            message: drill.message.clone().unwrap_or_else(|| "the restore drill failed".into()),
        },
    }
}

/// A new drill answering the request of `requested_at`: its database is starting. `job` is
/// named from the start, so that a drill that ends before its Job runs is still cleaned up.
pub fn drill_pending(requested_at: Time, job: &str, now: Time) -> DrillStatus {
    DrillStatus {
        phase: DrillPhase::Pending,
        requested_at,
        start_time: Some(now),
        completion_time: None,
        restore_seconds: None,
        duration_seconds: None,
        tables: None,
        rows: None,
        reason: None,
        message: None,
        job_name: Some(job.to_string()),
        check: None,
    }
}

/// The drill's Job `job` runs.
pub fn drill_running(mut drill: DrillStatus, job: &str) -> DrillStatus {
    drill.phase = DrillPhase::Running;
    drill.job_name = Some(job.to_string());
    drill
}

/// The drill ended as its Job did: the agent's counts on success; on failure `BackupDefect`
/// when the agent proved the backup wrong, else the failure's own reason.
pub fn drill_ended(drill: DrillStatus, end: &JobEnd, now: Time) -> DrillStatus {
    match end {
        JobEnd::Succeeded(summary) => {
            let (tables, rows) = summary_counts(summary);
            let check = if summary.content_compared == Some(false) { DrillCheck::Tables } else { DrillCheck::Content };
            DrillStatus {
                phase: DrillPhase::Succeeded,
                restore_seconds: summary.restore_seconds,
                check: Some(check),
                tables,
                rows,
                reason: None,
                message: None,
                ..finish(drill, now)
            }
        }
        JobEnd::Failed { reason, message, summary } => {
            let defect = summary
                .as_ref()
                .and_then(|s| s.error_kind.as_deref())
                .is_some_and(|kind| DEFECT_ERROR_KINDS.contains(&kind));
            let reason = if defect {
                drill_reason::BACKUP_DEFECT
            } else if *reason == visitors_api::conditions::reason::DEADLINE_EXCEEDED {
                drill_reason::DEADLINE_EXCEEDED
            } else {
                drill_reason::DRILL_ERROR
            };
            drill_failed(drill, reason, message.clone(), now)
        }
    }
}

/// The drill failed for `reason`.
pub fn drill_failed(drill: DrillStatus, reason: &str, message: String, now: Time) -> DrillStatus {
    DrillStatus {
        phase: DrillPhase::Failed,
        reason: Some(reason.to_string()),
        message: Some(message),
        ..finish(drill, now)
    }
}

fn finish(drill: DrillStatus, now: Time) -> DrillStatus {
    let duration_seconds = drill.start_time.as_ref().map(|start| seconds_between(start, &now));
    DrillStatus { completion_time: Some(now), duration_seconds, ..drill }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;
    use visitors_agent_contract::summary::Operation;
    use visitors_api::backup::{BackupPhase, condition};

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
            snapshot: Some(visitors_agent_contract::summary::Snapshot {
                time: Some("2026-11-23T10:00:01Z".into()),
                binlog_file: Some("binlog.000002".into()),
                binlog_position: Some(4711),
                gtid: Some("0-1-42".into()),
            }),
            ..AgentSummary::default()
        }
    }

    #[test]
    fn success_fills_every_field_from_the_summary() {
        let status =
            finished(&run(), "b1-backup", &JobEnd::Succeeded(summary()), "pvc://backups/x".into(), at(2_000_000_000));
        assert_eq!(status.phase, Some(BackupPhase::Succeeded));
        assert_eq!(status.size_bytes, Some(4096));
        assert_eq!((status.tables, status.rows), (Some(3), Some(1200)));
        assert_eq!(status.manifest_sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!(status.server_version.as_deref(), Some("11.8.3-MariaDB"));
        assert_eq!(status.duration_seconds, Some(90.0));
        assert_eq!(status.start_time, Some(Time("2026-11-23T10:00:00Z".parse().unwrap())));
        assert_eq!(status.location.as_deref(), Some("file:///backup/mysql/shop/ex/b1"));
        let snapshot = status.snapshot.clone().unwrap();
        assert_eq!(snapshot.time, Some(Time("2026-11-23T10:00:01Z".parse().unwrap())));
        assert_eq!((snapshot.binlog_file.as_deref(), snapshot.binlog_position), (Some("binlog.000002"), Some(4711)));
        assert_eq!(snapshot.gtid.as_deref(), Some("0-1-42"));
        assert!(conditions::is_true(&status.conditions, READY));
        assert_eq!(status.error, None);
    }

    #[test]
    fn failure_keeps_the_reason_and_never_looks_successful() {
        let end = JobEnd::Failed { reason: "DeadlineExceeded", message: "too slow".into(), summary: None };
        let mut backup = run();
        let replica = TakenFrom { pod: "ex-mysql-2".into(), role: visitors_api::backup::ServerRole::Replica };
        let started =
            running(&backup, "b1-backup", "pvc://backups/x".into(), Some(at(1_000)), Some(replica.clone()), at(1_000));
        backup.status = Some(started);
        let status = finished(&backup, "b1-backup", &end, "pvc://backups/x".into(), at(1_090));
        assert_eq!(status.taken_from, Some(replica), "the server read stays named");
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
