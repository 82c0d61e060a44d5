//! A schedule's restore drills: at each fire time of `spec.drill.cron` its newest successful run
//! is asked for a drill (the [`DRILL_REQUESTED_AT`] annotation; the run's own reconcile drills
//! it, see [`crate::drill`]); its status names the newest verified run; its gauges say whether
//! the newest drill failed and whether the newest verified run is too old.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use visitors_api::MySQLBackup;
use visitors_api::backup::MySQLBackupStatus;
use visitors_api::drill::{DRILL_REQUESTED_AT, Drill, DrillPhase, DrillStatus};
use visitors_api::validation::Problems;

use controller_common::error::api_err;

use crate::context::{Context, Error};
use crate::metrics::{DrillGauges, ScheduleLabels};
use crate::timing::{created, until};

/// Runs the drill cron of `schedule` (when it has one): at a fire time, asks its newest
/// successful run for a drill. Updates the drill times in `state`; returns when to look again.
pub async fn fire_drills(
    schedule: &MySQLBackup,
    api: &Api<MySQLBackup>,
    runs: &[MySQLBackup],
    state: &mut MySQLBackupStatus,
    now: Timestamp,
    ctx: &Context,
) -> Result<Option<Duration>, Error> {
    let Some(plan) = drill_settings(schedule).and_then(|drill| drill.plan(&mut Problems::default())) else {
        state.last_drill_schedule_time = None;
        state.next_drill_time = None;
        return Ok(None);
    };
    let since = state.last_drill_schedule_time.as_ref().map(|t| t.0).or_else(|| created(schedule)).unwrap_or(now);
    if let Some(fire) = plan.latest_due(since, now) {
        state.last_drill_schedule_time = Some(Time(fire));
        match newest_success(runs) {
            Some(run) => request_drill(api, run, fire, schedule, ctx).await?,
            None => {
                let note = format!("drill fire time {fire}: no successful run to drill yet");
                ctx.runtime.events.normal(schedule, "DrillSkipped", "Drill", note).await;
            }
        }
    }
    state.next_drill_time = plan.next_after(now).map(Time);
    Ok(state.next_drill_time.as_ref().map(|next| until(now, next.0)))
}

async fn request_drill(
    api: &Api<MySQLBackup>,
    run: &MySQLBackup,
    fire: Timestamp,
    schedule: &MySQLBackup,
    ctx: &Context,
) -> Result<(), Error> {
    let name = run.name_any();
    let patch =
        serde_json::json!({"metadata": {"annotations": BTreeMap::from([(DRILL_REQUESTED_AT, fire.to_string())])}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(api_err(format!("asking run {name} for a drill")))?;
    let note = format!("drill fire time {fire}: run {name} is drilled");
    ctx.runtime.events.normal(schedule, "DrillRequested", "Drill", note).await;
    Ok(())
}

/// Sets the newest verified run (the newest by completion, as retention keeps it) and when its
/// drill passed in a schedule's status.
pub fn verified_status(status: &mut MySQLBackupStatus, runs: &[MySQLBackup]) {
    let verified = newest_verified(runs);
    status.last_verified_run = verified.map(ResourceExt::name_any);
    status.last_verified_time = verified.and_then(|run| run.status.as_ref()?.verified_time.clone());
}

/// The drill gauges of a schedule that drills; `None` for one that does not.
pub fn gauges(schedule: &MySQLBackup, runs: &[MySQLBackup], now: Timestamp) -> Option<DrillGauges> {
    let drill = drill_settings(schedule)?;
    let verified = newest_verified(runs);
    let last_verified = verified.and_then(|run| run.status.as_ref()?.verified_time.as_ref()).map(|t| t.0);
    let since = last_verified.or_else(|| created(schedule))?;
    let last_failed = runs
        .iter()
        .filter_map(drill_of)
        .filter(|d| d.has_ended())
        .max_by_key(|d| d.completion_time.as_ref().map(|t| t.0))
        .map(|d| d.phase == DrillPhase::Failed);
    let restore_seconds =
        verified.and_then(drill_of).filter(|d| d.phase == DrillPhase::Succeeded).and_then(|d| d.restore_seconds);
    Some(DrillGauges {
        last_failed,
        last_verified: last_verified.map(|t| t.as_millisecond() as f64 / 1000.0),
        unverified: until(since, now) > drill.max_unverified_age(),
        restore_seconds,
    })
}

/// Exports the gauges of `schedule`, or forgets them when it does not drill.
pub fn export(schedule: &MySQLBackup, labels: ScheduleLabels, runs: &[MySQLBackup], now: Timestamp, ctx: &Context) {
    match gauges(schedule, runs, now) {
        Some(gauges) => ctx.metrics.drills_observed(labels, &gauges),
        None => ctx.metrics.drills_forgotten(&labels),
    }
}

fn drill_settings(schedule: &MySQLBackup) -> Option<&Drill> {
    schedule.spec.drill.as_ref().filter(|drill| drill.enabled())
}

fn drill_of(run: &MySQLBackup) -> Option<&DrillStatus> {
    run.status.as_ref()?.drill.as_ref()
}

/// The newest verified run, by completion: the one retention keeps.
fn newest_verified(runs: &[MySQLBackup]) -> Option<&MySQLBackup> {
    runs.iter().filter(|run| run.is_verified()).max_by_key(|run| (completion(run), run.name_any()))
}

/// The newest successful run not proven defective: the one a drill cron asks.
fn newest_success(runs: &[MySQLBackup]) -> Option<&MySQLBackup> {
    runs.iter()
        .filter(|run| run.is_kept_success() && !run.failed_drill())
        .max_by_key(|run| (completion(run), run.name_any()))
}

fn completion(run: &MySQLBackup) -> Option<Timestamp> {
    run.status.as_ref()?.completion_time.as_ref().map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    fn drilled(name: &str, completed: i64, drill: Option<(&str, i64, Option<f64>)>) -> MySQLBackup {
        let mut backup = run();
        backup.metadata.name = Some(name.into());
        let drill = drill.map(|(phase, done, restore)| {
            serde_json::json!({"phase": phase, "requestedAt": at(completed).to_string(),
                "completionTime": at(done).to_string(), "restoreSeconds": restore})
        });
        let verified = drill.as_ref().filter(|d| d["phase"] == "Succeeded").map(|d| d["completionTime"].clone());
        backup.status = Some(
            serde_json::from_value(serde_json::json!({"phase": "Succeeded",
                "completionTime": at(completed).to_string(), "drill": drill, "verifiedTime": verified}))
            .unwrap(),
        );
        backup
    }

    fn drilling_schedule() -> MySQLBackup {
        let mut schedule = run();
        schedule.metadata.creation_timestamp = Some(Time(at(0)));
        schedule.spec.drill = Some(Drill { max_unverified_age: Some("1h".into()), ..Drill::default() });
        schedule
    }

    #[test]
    fn the_newest_verified_run_is_named_and_its_age_watched() {
        let runs = [
            drilled("r1", 100, Some(("Succeeded", 200, Some(4.5)))),
            drilled("r2", 1000, Some(("Failed", 1100, None))),
            drilled("r3", 2000, None),
        ];
        let mut status = MySQLBackupStatus::default();
        verified_status(&mut status, &runs);
        assert_eq!(status.last_verified_run.as_deref(), Some("r1"));
        assert_eq!(status.last_verified_time, Some(Time(at(200))));

        let fresh = gauges(&drilling_schedule(), &runs, at(200 + 3000)).unwrap();
        assert_eq!(
            fresh,
            DrillGauges {
                last_failed: Some(true),
                last_verified: Some(200.0),
                unverified: false,
                restore_seconds: Some(4.5)
            }
        );
        assert!(gauges(&drilling_schedule(), &runs, at(200 + 3601)).unwrap().unverified, "older than maxUnverifiedAge");
        let never = gauges(&drilling_schedule(), &[], at(3601)).unwrap();
        assert!(never.unverified && never.last_failed.is_none(), "no verified run, the schedule older than 1h");
        assert_eq!(gauges(&run(), &runs, at(0)), None, "a schedule without drills exports none");
    }
}
