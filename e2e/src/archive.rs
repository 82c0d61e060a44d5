//! Waiting on a schedule's binary-log archive and its runs, as point-in-time scenarios do.

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupPhase, condition as backup_condition};
use visitors_api::conditions;

use crate::wait_for;

/// `Ok` once schedule `name`'s `Archiving` condition has `status` and `reason`.
pub async fn archiving_is(
    backups: &Api<MySQLBackup>,
    name: &str,
    status: &str,
    reason: &str,
) -> Result<MySQLBackup, String> {
    let schedule = backups.get(name).await.map_err(|e| e.to_string())?;
    let conditions = schedule.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    match conditions::find(&conditions, backup_condition::ARCHIVING) {
        Some(c) if c.status == status && c.reason == reason => Ok(schedule),
        Some(c) => Err(format!("Archiving={} {}: {}", c.status, c.reason, c.message)),
        None => Err("no Archiving condition yet".into()),
    }
}

/// The successful runs of schedule `name`, with their snapshot times (Unix seconds), oldest first.
pub async fn successful_runs(backups: &Api<MySQLBackup>, name: &str) -> Vec<(String, i64)> {
    let listed = backups
        .list(&ListParams::default().labels(&format!("example.com/backup-schedule={name}")))
        .await
        .expect("list the runs");
    let mut runs: Vec<(String, i64)> = listed
        .items
        .iter()
        .filter_map(|run| {
            let status = run.status.as_ref()?;
            (status.phase == Some(BackupPhase::Succeeded)).then_some(())?;
            let time = status.snapshot.as_ref()?.time.as_ref()?.0.as_second();
            Some((run.name_any(), time))
        })
        .collect();
    runs.sort_by_key(|(_, time)| *time);
    runs
}

/// The newest successful run of schedule `name`, once there is one.
pub async fn a_successful_run(backups: &Api<MySQLBackup>, name: &str) -> (String, i64) {
    wait_for("a successful run of the schedule", || async {
        successful_runs(backups, name).await.into_iter().next_back().ok_or_else(|| "none yet".to_string())
    })
    .await
}

/// Waits until schedule `name`'s archive holds everything committed up to `unix_seconds`.
pub async fn archived_until(backups: &Api<MySQLBackup>, name: &str, unix_seconds: i64) {
    wait_for(&format!("the archive to reach {unix_seconds}"), || async {
        let schedule = backups.get(name).await.map_err(|e| e.to_string())?;
        let archive = schedule.status.and_then(|s| s.point_in_time).unwrap_or_default();
        match archive.last_recoverable_time {
            Some(t) if t.0.as_second() >= unix_seconds => Ok(()),
            other => Err(format!("last recoverable time {other:?}")),
        }
    })
    .await;
}

/// A time as a restore's `targetTime` takes it.
pub fn rfc3339(unix_seconds: i64) -> String {
    jiff::Timestamp::from_second(unix_seconds).unwrap().to_string()
}
