//! Which backup a restore reads: a MySQLBackup run that succeeded (its recorded location and
//! manifest), or an explicit storage location. A run that failed is refused, one that has not
//! finished is waited for.

use controller_common::step::Step;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use visitors_agent_contract::gtid::GtidSet;
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupMethod, BackupPhase, condition as backup_condition};
use visitors_api::conditions;
use visitors_api::point_in_time::{PointInTimeSource, archive_path};
use visitors_api::recovery;
use visitors_api::restore::reason;
use visitors_api::storage::agent_location_of_recorded;

use crate::build::{Backup, PointInTimePlan, display_location};

/// How long a restore to a time the archive has not reached yet waits for it, while the
/// archiver reports: the last few seconds of a healthy archive are on their way.
pub const ARCHIVE_WAIT_SECONDS: i64 = 120;

/// The backup of run `run`, if it can be restored: a `Succeeded` run with a recorded location
/// and manifest; a failed one, or one whose restore drill found it defective, is refused; one
/// still to finish is waited for.
pub fn backup_of_run(run: &MySQLBackup) -> Step<Backup> {
    let name = run.name_any();
    if run.spec.is_schedule() {
        let message = format!(
            "MySQLBackup {name} (spec.source.backup) is a schedule, not a run: name one of its runs (status.lastSuccessfulRun)"
        );
        return Step::blocked(reason::BACKUP_IS_SCHEDULE, message);
    }
    let status = run.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Succeeded) => {}
        Some(BackupPhase::Failed) => {
            let why = status.error.map(|e| format!(": {e}")).unwrap_or_default();
            let message = format!(
                "MySQLBackup {name} (spec.source.backup) failed{why}; a failed backup is never restored, nothing was touched"
            );
            return Step::blocked(reason::BACKUP_FAILED, message);
        }
        phase => {
            let phase = phase.map(|p| format!("{p:?}")).unwrap_or_else(|| "not started".into());
            let message =
                format!("MySQLBackup {name} (spec.source.backup) is {phase}; the restore waits until it succeeds");
            return Step::wait(reason::BACKUP_NOT_FINISHED, message);
        }
    }
    if run.spec.method() == BackupMethod::Physical {
        let message = format!(
            "MySQLBackup {name} (spec.source.backup) is a physical run, and restoring physical runs is not built yet (docs/disaster-recovery.md restores one by hand); nothing was touched"
        );
        return Step::blocked(reason::BACKUP_IS_PHYSICAL, message);
    }
    if run.failed_drill() {
        let why = status.drill.as_ref().and_then(|d| d.message.clone()).map(|m| format!(": {m}")).unwrap_or_default();
        let message = format!(
            "MySQLBackup {name} (spec.source.backup) failed its restore drill{why}; it does not restore what was dumped, so it is never restored, nothing was touched"
        );
        return Step::blocked(reason::BACKUP_FAILED_DRILL, message);
    }
    let recorded = status.location.clone().unwrap_or_default();
    let Some(agent_location) = agent_location_of_recorded(&recorded) else {
        let message = format!("MySQLBackup {name} records no location the restore can read ({recorded:?})");
        return Step::blocked(reason::BACKUP_LOCATION_UNKNOWN, message);
    };
    let Some(manifest_sha256) = status.manifest_sha256.clone() else {
        let message = format!(
            "MySQLBackup {name} records no manifestSha256, so a backup changed in storage could not be detected"
        );
        return Step::blocked(reason::BACKUP_UNVERIFIABLE, message);
    };
    Step::Ready(Backup {
        location: display_location(&run.spec.storage, &agent_location),
        agent_location,
        storage: run.spec.storage.clone(),
        run: Some(name),
        manifest_sha256: Some(manifest_sha256),
        completion_time: status.completion_time,
        tables: status.tables,
        rows: status.rows,
        point_in_time: None,
        key_secret: run.spec.encryption.as_ref().map(|e| e.key_secret.clone()),
    })
}

/// A restore to the point in time `source` names, from `schedule` and its `runs`: the newest
/// successful run before the target, with the archive to replay after it. Refused, before
/// anything is touched, when the schedule does not archive, when the target is in the future,
/// before every run, or across a gap; waited for (a while) when the archive has not reached it.
pub fn backup_of_point_in_time(
    schedule: &MySQLBackup,
    runs: &[MySQLBackup],
    source: &PointInTimeSource,
    restore_age_seconds: i64,
    now: Timestamp,
) -> Step<Backup> {
    let target = source.target_text();
    let (base, base_time) = match (&source.target_time, &source.target_gtid) {
        (Some(time), _) => match recovery::base_for_time(schedule, runs, time.0, now) {
            Ok(base) => (base.run.clone(), base.snapshot_time),
            Err(refusal) if refusal.is_not_archived_yet() => {
                let archiving = schedule
                    .status
                    .as_ref()
                    .is_some_and(|s| conditions::is_true(&s.conditions, backup_condition::ARCHIVING));
                if archiving && restore_age_seconds < ARCHIVE_WAIT_SECONDS {
                    let message = format!("{}; the restore waits for it", refusal.message);
                    return Step::wait(reason::WAITING_FOR_ARCHIVE, message);
                }
                return Step::blocked(refusal.reason, format!("{}: nothing was touched", refusal.message));
            }
            Err(refusal) => return Step::blocked(refusal.reason, refusal.message),
        },
        (None, Some(gtid)) => {
            if let Err(refusal) = recovery::schedule_archives(schedule) {
                return Step::blocked(refusal.reason, refusal.message);
            }
            match base_before_gtids(&schedule.name_any(), runs, gtid).into_ready() {
                Ok(base) => base,
                Err(stopped) => return stopped,
            }
        }
        (None, None) => return Step::blocked(reason::TARGET_NOT_ARCHIVED, "no target"),
    };
    let name = schedule.name_any();
    let mut backup = match backup_of_run(&base).into_ready() {
        Ok(backup) => backup,
        Err(stopped) => return stopped,
    };
    // Segments archived since the schedule was encrypted need its keys even when the base
    // run was not encrypted.
    backup.key_secret = backup.key_secret.or_else(|| schedule.spec.encryption.as_ref().map(|e| e.key_secret.clone()));
    let folder = archive_path(&schedule.namespace().unwrap_or_default(), &schedule.spec.source.visitors_app, &name);
    backup.point_in_time = Some(PointInTimePlan {
        archive: schedule.spec.storage.agent_location(&folder),
        until_time: source.target_time.as_ref().map(|t| t.0.to_string()),
        until_gtid: source.target_gtid.clone(),
        target,
        base_snapshot_time: Some(Time(base_time)),
    });
    Step::Ready(backup)
}

fn base_before_gtids(schedule: &str, runs: &[MySQLBackup], target: &str) -> Step<(MySQLBackup, Timestamp)> {
    let target_set = match GtidSet::parse(target) {
        Ok(set) => set,
        Err(problem) => return Step::blocked(reason::TARGET_NOT_ARCHIVED, problem),
    };
    let gtids_of = |run: &MySQLBackup| {
        run.status.as_ref()?.snapshot.as_ref()?.gtid.as_deref().and_then(|g| GtidSet::parse(g).ok())
    };
    let base = recovery::bases(runs)
        .into_iter()
        .filter(|base| gtids_of(base.run).is_some_and(|gtids| target_set.includes(&gtids)))
        .max_by_key(|base| (base.snapshot_time, base.run.name_any()));
    match base {
        Some(base) => Step::Ready((base.run.clone(), base.snapshot_time)),
        None => {
            let message = format!(
                "no successful run of MySQLBackup {schedule} has a snapshot within the target gtid {target}: nothing was touched"
            );
            Step::blocked(reason::TARGET_BEFORE_OLDEST_BACKUP, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use controller_common::step::{Blocked, Wait};

    use super::*;

    fn run(status: serde_json::Value) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "b1", "namespace": "shop", "uid": "u-1"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_a_succeeded_run_is_restored_and_a_failed_one_is_refused() {
        let succeeded = run(serde_json::json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1",
            "manifestSha256": "ab".repeat(32), "completionTime": "2026-11-23T10:00:00Z", "tables": 2, "rows": 7}));
        let backup = backup_of_run(&succeeded).ready().unwrap();
        assert_eq!(backup.agent_location, "file:///backup/shop/ex/b1");
        assert_eq!(backup.location, "pvc://backups/shop/ex/b1");
        assert_eq!(backup.manifest_sha256, Some("ab".repeat(32)));
        assert_eq!((backup.tables, backup.rows), (Some(2), Some(7)));

        let failed = run(serde_json::json!({"phase": "Failed", "error": "MySQL rejected user root"}));
        let Step::Blocked(Blocked { reason, message }) = backup_of_run(&failed) else {
            panic!("a failed run is refused")
        };
        assert_eq!(reason, "BackupFailed");
        assert!(message.contains("MySQLBackup b1") && message.contains("rejected user root"), "{message}");

        for phase in ["Running", "Pending"] {
            let unfinished = run(serde_json::json!({"phase": phase}));
            assert!(matches!(backup_of_run(&unfinished), Step::Wait(Wait { reason: "BackupNotFinished", .. })));
        }
        let defective = run(serde_json::json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1",
            "manifestSha256": "ab".repeat(32), "drill": {"phase": "Failed", "requestedAt": "2026-11-23T10:00:00Z",
            "reason": "BackupDefect", "message": "the restored table `d`.`t` does not hold what was backed up"}}));
        let Step::Blocked(Blocked { reason, message }) = backup_of_run(&defective) else {
            panic!("a run that failed its drill is refused")
        };
        assert_eq!(reason, "BackupFailedDrill");
        assert!(message.contains("`d`.`t`"), "{message}");
        let drill_trouble = run(serde_json::json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1",
            "manifestSha256": "ab".repeat(32), "drill": {"phase": "Failed", "requestedAt": "2026-11-23T10:00:00Z",
            "reason": "DatabaseLost"}}));
        assert!(backup_of_run(&drill_trouble).is_ready(), "a drill that could not run proves nothing");
        let unverifiable = run(serde_json::json!({"phase": "Succeeded", "location": "s3://b/x"}));
        assert!(matches!(backup_of_run(&unverifiable), Step::Blocked(Blocked { reason: "BackupUnverifiable", .. })));
        let mut physical = succeeded.clone();
        physical.spec.method = Some(BackupMethod::Physical);
        assert!(matches!(backup_of_run(&physical), Step::Blocked(Blocked { reason: "BackupIsPhysical", .. })));
    }
}

#[cfg(test)]
mod point_in_time_tests {
    use controller_common::step::{Blocked, Wait};

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn schedule(archive: serde_json::Value, archiving: bool) -> MySQLBackup {
        let condition = serde_json::json!({"type": "Archiving", "status": if archiving { "True" } else { "False" },
            "reason": "Archiving", "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"});
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "nightly", "namespace": "shop", "uid": "s-1"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
                     "schedule": {"cron": "0 3 * * *"}, "pointInTime": {}},
            "status": {"pointInTime": archive, "conditions": [condition]},
        }))
        .unwrap()
    }

    fn succeeded(name: &str, snapshot: i64, gtid: &str) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}")},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": {"phase": "Succeeded", "location": format!("pvc://backups/shop/ex/{name}"),
                       "manifestSha256": "ab".repeat(32), "completionTime": at(snapshot + 30).to_string(),
                       "snapshot": {"time": at(snapshot).to_string(), "binlogFile": "binlog.000002",
                                    "binlogPosition": 100, "gtid": gtid}},
        }))
        .unwrap()
    }

    fn to_time(second: i64) -> PointInTimeSource {
        PointInTimeSource { backup: "nightly".into(), target_time: Some(Time(at(second))), target_gtid: None }
    }

    fn archive(recoverable: i64) -> serde_json::Value {
        serde_json::json!({"lastRecoverableTime": at(recoverable).to_string()})
    }

    fn refused(result: Step<Backup>) -> &'static str {
        match result {
            Step::Blocked(Blocked { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_newest_run_before_the_target_is_the_base_and_the_archive_is_replayed_after_it() {
        let runs = [succeeded("n-1", 0, "0-1-10"), succeeded("n-2", 100, "0-1-50"), succeeded("n-3", 300, "0-1-90")];
        let backup =
            backup_of_point_in_time(&schedule(archive(400), true), &runs, &to_time(250), 0, at(500)).ready().unwrap();
        assert_eq!(backup.run.as_deref(), Some("n-2"));
        let plan = backup.point_in_time.unwrap();
        assert_eq!(plan.archive, "file:///backup/shop/ex/_binlog/nightly");
        assert_eq!(plan.until_time.as_deref(), Some(at(250).to_string().as_str()));
        assert_eq!(plan.base_snapshot_time, Some(Time(at(100))));
        let by_gtid = PointInTimeSource { target_time: None, target_gtid: Some("0-1-60".into()), ..to_time(0) };
        let backup =
            backup_of_point_in_time(&schedule(archive(400), true), &runs, &by_gtid, 0, at(500)).ready().unwrap();
        assert_eq!(backup.run.as_deref(), Some("n-2"));
    }

    /// A base run taken before the schedule was encrypted needs no key, but the segments
    /// archived since do: the schedule's key Secret is mounted; an encrypted base's own wins.
    #[test]
    fn an_encrypted_schedules_keys_reach_a_restore_from_a_base_without_its_own() {
        use visitors_api::encryption::BackupEncryption;
        let key = |secret: &str| Some(BackupEncryption { key_secret: secret.into(), key_id: "k1".into() });
        let mut sched = schedule(archive(400), true);
        let plain_base = [succeeded("n-1", 100, "0-1-10")];
        let backup = backup_of_point_in_time(&sched, &plain_base, &to_time(200), 0, at(500)).ready().unwrap();
        assert_eq!(backup.key_secret, None, "nothing encrypted, nothing mounted");
        sched.spec.encryption = key("schedule-keys");
        let backup = backup_of_point_in_time(&sched, &plain_base, &to_time(200), 0, at(500)).ready().unwrap();
        assert_eq!(backup.key_secret.as_deref(), Some("schedule-keys"));
        let mut encrypted_base = plain_base.clone();
        encrypted_base[0].spec.encryption = key("run-keys");
        let backup = backup_of_point_in_time(&sched, &encrypted_base, &to_time(200), 0, at(500)).ready().unwrap();
        assert_eq!(backup.key_secret.as_deref(), Some("run-keys"));
    }

    #[test]
    fn targets_in_the_future_before_every_run_or_across_a_gap_are_refused() {
        let runs = [succeeded("n-1", 100, "0-1-10")];
        let sched = schedule(archive(400), true);
        assert_eq!(refused(backup_of_point_in_time(&sched, &runs, &to_time(600), 0, at(500))), "TargetInTheFuture");
        assert_eq!(
            refused(backup_of_point_in_time(&sched, &runs, &to_time(50), 0, at(500))),
            "TargetBeforeOldestBackup"
        );
        let gapped = serde_json::json!({"lastRecoverableTime": at(400).to_string(), "gaps": [{
            "reason": "BinlogPurged", "message": "purged", "afterTime": at(150).to_string(), "beforeTime": at(200).to_string()}]});
        let sched = schedule(gapped, true);
        assert_eq!(refused(backup_of_point_in_time(&sched, &runs, &to_time(300), 0, at(500))), "AcrossArchiveGap");
        assert!(backup_of_point_in_time(&sched, &runs, &to_time(149), 0, at(500)).is_ready(), "before the gap is fine");
        assert_eq!(
            refused(backup_of_point_in_time(&sched, &runs, &to_time(150), 0, at(500))),
            "AcrossArchiveGap",
            "the second of the last archived transaction may not be whole"
        );
        let after_gap = [succeeded("n-1", 100, "0-1-10"), succeeded("n-2", 250, "0-1-20")];
        assert!(
            backup_of_point_in_time(&sched, &after_gap, &to_time(300), 0, at(500)).is_ready(),
            "a base after the gap"
        );
    }

    #[test]
    fn a_run_without_a_binary_log_position_is_no_base() {
        let mut before_binlog = succeeded("n-2", 200, "0-1-10");
        let snapshot = before_binlog.status.as_mut().unwrap().snapshot.as_mut().unwrap();
        (snapshot.binlog_file, snapshot.binlog_position) = (None, None);
        let runs = [succeeded("n-1", 100, "0-1-5"), before_binlog];
        let backup =
            backup_of_point_in_time(&schedule(archive(400), true), &runs, &to_time(300), 0, at(500)).ready().unwrap();
        assert_eq!(backup.run.as_deref(), Some("n-1"), "the newer run cannot be found in the archive");
        let only = [runs[1].clone()];
        let refusal = backup_of_point_in_time(&schedule(archive(400), true), &only, &to_time(300), 0, at(500));
        assert_eq!(refused(refusal), "TargetBeforeOldestBackup");
    }

    #[test]
    fn a_target_the_archive_has_not_reached_is_waited_for_a_while_then_refused() {
        let runs = [succeeded("n-1", 100, "0-1-10")];
        let waiting = backup_of_point_in_time(&schedule(archive(400), true), &runs, &to_time(450), 10, at(500));
        assert!(matches!(waiting, Step::Wait(Wait { reason: "WaitingForArchive", .. })), "{waiting:?}");
        let late = backup_of_point_in_time(&schedule(archive(400), true), &runs, &to_time(450), 500, at(500));
        assert_eq!(refused(late), "TargetNotArchived");
        let down = backup_of_point_in_time(&schedule(archive(400), false), &runs, &to_time(450), 10, at(500));
        assert_eq!(refused(down), "TargetNotArchived", "nothing to wait for when the archiver is not archiving");
    }

    #[test]
    fn only_a_schedule_that_archives_is_restored_to_a_point_in_time() {
        let mut run_only = succeeded("n-1", 100, "0-1-10");
        run_only.metadata.name = Some("nightly".into());
        assert_eq!(refused(backup_of_point_in_time(&run_only, &[], &to_time(150), 0, at(500))), "BackupNotSchedule");
        let mut plain = schedule(archive(400), true);
        plain.spec.point_in_time = None;
        assert_eq!(refused(backup_of_point_in_time(&plain, &[], &to_time(150), 0, at(500))), "PointInTimeNotEnabled");
    }
}
