//! Whether a schedule can be restored to a time, and from which of its runs: the one decision
//! the restore controller acts on and `kubectl visitors restore --time` shows before anything is
//! created.

use jiff::Timestamp;
use kube::ResourceExt;

use crate::MySQLBackup;
use crate::backup::BackupMethod;
use crate::point_in_time::ArchiveGap;
use crate::restore::reason;

/// The run a restore to a time starts from, and the server time of its snapshot: the archive is
/// replayed from there to the target.
#[derive(Debug, Clone, Copy)]
pub struct TimeBase<'a> {
    pub run: &'a MySQLBackup,
    pub snapshot_time: Timestamp,
}

/// Why a time cannot be restored: the condition reason a restore reports, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    fn new(reason: &'static str, message: String) -> Self {
        Refusal { reason, message }
    }

    /// The target is in the past but the archive does not reach it (yet): the only refusal that
    /// time can lift.
    pub fn is_not_archived_yet(&self) -> bool {
        self.reason == reason::TARGET_NOT_ARCHIVED
    }
}

/// The base of a restore of `schedule` to `target`, from its `runs`: the newest successful run
/// whose snapshot is at or before the target, provided the archive reaches the target from it
/// without crossing a gap. A refusal when the schedule does not archive, when the target is in
/// the future, before every run, across a gap, or later than the archive's last recoverable time.
pub fn base_for_time<'a>(
    schedule: &MySQLBackup,
    runs: &'a [MySQLBackup],
    target: Timestamp,
    now: Timestamp,
) -> Result<TimeBase<'a>, Refusal> {
    schedule_archives(schedule)?;
    let name = schedule.name_any();
    if target > now {
        let message = format!("the target {target} is in the future (now is {now}): nothing was touched");
        return Err(Refusal::new(reason::TARGET_IN_THE_FUTURE, message));
    }
    let base = base_before(&name, runs, target)?;
    let archive = schedule.status.as_ref().and_then(|s| s.point_in_time.as_ref());
    let gaps = archive.map(|a| a.gaps.as_slice()).unwrap_or_default();
    if let Some(gap) = gap_crossed(gaps, base.snapshot_time, target) {
        let message = format!(
            "reaching {target} from run {} would cross a gap in the archive ({}: {}); choose a target before the gap, or wait for a run after it",
            base.run.name_any(),
            gap.reason,
            gap.message
        );
        return Err(Refusal::new(reason::ACROSS_ARCHIVE_GAP, message));
    }
    let recoverable = archive.and_then(|a| a.last_recoverable_time.as_ref()).map(|t| t.0);
    if recoverable.is_none_or(|recoverable| target > recoverable) {
        let until = recoverable.map_or("nothing yet".to_string(), |t| t.to_string());
        let message =
            format!("the archive of MySQLBackup {name} holds every transaction up to {until}, not yet {target}");
        return Err(Refusal::new(reason::TARGET_NOT_ARCHIVED, message));
    }
    Ok(base)
}

/// Refused unless `schedule` is a schedule that archives its binary log: only those can be
/// restored to a point in time.
pub fn schedule_archives(schedule: &MySQLBackup) -> Result<(), Refusal> {
    let name = schedule.name_any();
    if !schedule.spec.is_schedule() {
        let message =
            format!("MySQLBackup {name} (spec.source.pointInTime.backup) is a run, not a schedule with pointInTime");
        return Err(Refusal::new(reason::BACKUP_NOT_SCHEDULE, message));
    }
    if schedule.spec.point_in_time.is_none() {
        let message = format!(
            "MySQLBackup {name} does not archive its binary log (spec.pointInTime is unset): it can only be restored to one of its runs"
        );
        return Err(Refusal::new(reason::POINT_IN_TIME_NOT_ENABLED, message));
    }
    Ok(())
}

/// The runs a restore to a point in time can start from, with the server time of their
/// snapshots (a run without a known snapshot position is none: the agent could not find it in
/// the archive; nor is a physical run, which the agent does not restore yet).
pub fn bases(runs: &[MySQLBackup]) -> Vec<TimeBase<'_>> {
    runs.iter()
        .filter(|run| run.spec.method() == BackupMethod::Logical)
        .filter_map(|run| run.base_snapshot().map(|base| TimeBase { run, snapshot_time: base.time }))
        .collect()
}

/// The newest base at or before `target`, among the runs of schedule `schedule`.
pub fn base_before<'a>(schedule: &str, runs: &'a [MySQLBackup], target: Timestamp) -> Result<TimeBase<'a>, Refusal> {
    let all = bases(runs);
    let newest_before = all
        .iter()
        .filter(|base| base.snapshot_time <= target)
        .max_by_key(|base| (base.snapshot_time, base.run.name_any()));
    if let Some(base) = newest_before {
        return Ok(*base);
    }
    let message = match all.iter().map(|base| base.snapshot_time).min() {
        Some(oldest) => format!(
            "the target {target} is before the oldest successful run of MySQLBackup {schedule} (its snapshot is at {oldest}): nothing was touched"
        ),
        None => format!(
            "MySQLBackup {schedule} has no successful run with a recorded binary log position to start from: nothing was touched"
        ),
    };
    Err(Refusal::new(reason::TARGET_BEFORE_OLDEST_BACKUP, message))
}

/// The gap of the archive between a base snapshot at `base_time` and `target`.
pub fn gap_crossed(gaps: &[ArchiveGap], base_time: Timestamp, target: Timestamp) -> Option<&ArchiveGap> {
    gaps.iter().find(|gap| {
        let after = gap.after_time.as_ref().map(|t| t.0);
        let before = gap.before_time.as_ref().map(|t| t.0);
        // The gap's last archived second may not be whole: a target at it crosses too.
        before.is_some_and(|before| base_time < before) && after.is_none_or(|after| target >= after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn schedule(archive: serde_json::Value) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "nightly", "namespace": "shop"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
                     "schedule": {"cron": "0 3 * * *"}, "pointInTime": {}},
            "status": {"pointInTime": archive},
        }))
        .unwrap()
    }

    fn succeeded(name: &str, snapshot: i64) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": {"phase": "Succeeded", "snapshot": {"time": at(snapshot).to_string(),
                       "binlogFile": "binlog.000002", "binlogPosition": 100}},
        }))
        .unwrap()
    }

    fn gap(after: i64, before: i64) -> serde_json::Value {
        serde_json::json!({"reason": "BinlogPurged", "message": "purged",
            "afterTime": at(after).to_string(), "beforeTime": at(before).to_string()})
    }

    #[test]
    fn each_target_gets_its_base_or_the_reason_it_has_none() {
        let runs = [succeeded("n-1", 100), succeeded("n-2", 250)];
        let plain = schedule(serde_json::json!({"lastRecoverableTime": at(400).to_string()}));
        let gapped = schedule(serde_json::json!({"lastRecoverableTime": at(400).to_string(), "gaps": [gap(150, 200)]}));
        let cases: [(&MySQLBackup, i64, Result<&str, &str>); 9] = [
            (&plain, 100, Ok("n-1")),
            (&plain, 249, Ok("n-1")),
            (&plain, 250, Ok("n-2")),
            (&plain, 400, Ok("n-2")),
            (&plain, 401, Err("TargetNotArchived")),
            (&plain, 99, Err("TargetBeforeOldestBackup")),
            (&plain, 600, Err("TargetInTheFuture")),
            (&gapped, 150, Err("AcrossArchiveGap")),
            (&gapped, 149, Ok("n-1")),
        ];
        for (schedule, target, expected) in cases {
            let got = base_for_time(schedule, &runs, at(target), at(500));
            let got = got.as_ref().map(|base| base.run.name_any()).map_err(|refusal| refusal.reason);
            assert_eq!(got.as_deref().map_err(|r| *r), expected, "target {target}");
        }
        let mut physical = succeeded("n-3", 300);
        physical.spec.method = Some(crate::backup::BackupMethod::Physical);
        let with_physical = [runs[0].clone(), runs[1].clone(), physical];
        let base = base_for_time(&plain, &with_physical, at(350), at(500)).unwrap();
        assert_eq!(base.run.name_any(), "n-2", "a physical run is no base yet");
    }
}
