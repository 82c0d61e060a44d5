//! The decisions behind `backup` and `restore`, as pure functions of what was read: which
//! schedule, which run, whether a time can be reached, what a restore will do; and the objects
//! they create.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use visitors_api::labels::{DATABASE_LABEL, SCHEDULE_LABEL, names};
use visitors_api::point_in_time::PointInTimeSource;
use visitors_api::recovery;
use visitors_api::restore::{RestoreSource, RestoreTarget};
use visitors_api::{MySQLBackup, MySQLRestore, MySQLRestoreSpec, VisitorsApp};

use crate::error::Error;
use crate::runbook;
use crate::snapshot::AppSnapshot;
use crate::snapshot::schedule_of;
use crate::view::expected_restore_seconds;

/// Annotation on what the plugin creates: who asked.
pub const REQUESTED_BY: &str = "example.com/requested-by";
const PLUGIN: &str = "kubectl-visitors";

/// How long after the archive's last recoverable time a target may be when archiving is
/// healthy: the restore controller waits up to this long for the archive to reach it.
const ARCHIVE_CATCH_UP_SECONDS: i64 = 60;

/// The schedule a command uses: the one asked for, else the app's only one (among those that
/// archive, when `archiving`).
pub fn pick_schedule<'a>(
    snapshot: &'a AppSnapshot,
    asked: Option<&str>,
    archiving: bool,
) -> Result<&'a MySQLBackup, Error> {
    let app = snapshot.app.name_any();
    let schedules: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| b.spec.is_schedule()).collect();
    if let Some(asked) = asked {
        let found = schedules.iter().copied().find(|s| s.name_any() == asked).ok_or_else(|| {
            Error::Refused(format!("VisitorsApp {app} has no backup schedule {asked} (it has: {})", listed(&schedules)))
        })?;
        if archiving && found.spec.archiving().is_none() {
            return Err(Error::Refused(format!(
                "schedule {asked} does not archive the binary log (spec.pointInTime): it can only be restored to one of its runs (--run)"
            )));
        }
        return Ok(found);
    }
    let candidates: Vec<&MySQLBackup> =
        schedules.iter().copied().filter(|s| !archiving || s.spec.archiving().is_some()).collect();
    match candidates.as_slice() {
        [only] => Ok(only),
        [] if archiving => Err(Error::Refused(format!(
            "no backup schedule of VisitorsApp {app} archives the binary log (spec.pointInTime): restore one of its runs with --run (see `kubectl visitors runs {app}`), or turn archiving on (deploy/examples/)"
        ))),
        [] => Err(Error::Refused(format!(
            "VisitorsApp {app} has no backup schedule to take the storage and options from: create one (deploy/examples/mysqlbackup-nightly-pvc.yaml)"
        ))),
        several => Err(Error::Refused(format!(
            "VisitorsApp {app} has several schedules ({}): choose one with --schedule",
            listed(several)
        ))),
    }
}

fn listed(schedules: &[&MySQLBackup]) -> String {
    let names: Vec<String> = schedules.iter().map(|s| s.name_any()).collect();
    if names.is_empty() { "none".to_string() } else { names.join(", ") }
}

/// A run of `schedule` taken now: the schedule's storage and options, owned by and labelled
/// with the schedule as its own runs are, so that its retention, its restores to a point in
/// time and `status` count it.
pub fn backup_run(schedule: &MySQLBackup, now: Timestamp) -> MySQLBackup {
    let name = format!("{}-now-{}", schedule.name_any(), now.as_second());
    let mut run = MySQLBackup::new(&name, schedule.spec.for_run());
    run.metadata = ObjectMeta {
        name: Some(name),
        namespace: schedule.namespace(),
        labels: Some(BTreeMap::from([
            (SCHEDULE_LABEL.to_string(), schedule.name_any()),
            (DATABASE_LABEL.to_string(), schedule.spec.source.visitors_app.clone()),
        ])),
        annotations: Some(BTreeMap::from([(REQUESTED_BY.to_string(), PLUGIN.to_string())])),
        owner_references: schedule.controller_owner_ref(&()).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    };
    run
}

/// What to restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Run(String),
    Time(Timestamp),
    Latest,
}

/// What a restore will do, shown before it is created.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestorePlan {
    pub namespace: String,
    /// The app whose backups are read.
    pub app: String,
    /// The app whose database is replaced.
    pub into: String,
    pub base_run: String,
    pub base_backed_up: Option<Timestamp>,
    pub base_size_bytes: Option<i64>,
    pub base_verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
    /// The writers stopped while it runs (and started again after).
    pub writers_stopped: Vec<String>,
    /// From the restore time the newest drill measured; the replay comes on top.
    pub estimated_seconds: Option<f64>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    pub schedule: String,
    pub from: Timestamp,
    pub to: Timestamp,
    /// The archive reaches the target within seconds: the restore waits for it.
    pub waits_for_archive: bool,
}

pub fn plan_restore(
    snapshot: &AppSnapshot,
    into: &VisitorsApp,
    target: &Target,
    schedule: Option<&str>,
    now: Timestamp,
) -> Result<RestorePlan, Error> {
    let (base, replay) = match target {
        Target::Run(run) => (run_to_restore(snapshot, run)?, None),
        Target::Time(time) => {
            let schedule = pick_schedule(snapshot, schedule, true)?;
            time_base(snapshot, schedule, *time, now)?
        }
        Target::Latest => latest(snapshot, schedule, now)?,
    };
    let status = base.status.clone().unwrap_or_default();
    let backend = names::backend(&into.name_any());
    Ok(RestorePlan {
        namespace: snapshot.app.namespace().unwrap_or_default(),
        app: snapshot.app.name_any(),
        into: into.name_any(),
        base_run: base.name_any(),
        base_backed_up: status.completion_time.as_ref().map(|t| t.0),
        base_size_bytes: status.size_bytes,
        base_verified: base.is_verified(),
        replay,
        writers_stopped: vec![format!("Deployment {backend} ({})", replicas(into.spec.size))],
        estimated_seconds: status
            .drill
            .as_ref()
            .filter(|_| base.is_verified())
            .and_then(|d| d.restore_seconds)
            .or_else(|| expected_restore_seconds(&snapshot.backups)),
    })
}

fn replicas(count: i32) -> String {
    if count == 1 { "1 replica".to_string() } else { format!("{count} replicas") }
}

fn run_to_restore<'a>(snapshot: &'a AppSnapshot, name: &str) -> Result<&'a MySQLBackup, Error> {
    let app = snapshot.app.name_any();
    let run = snapshot.backups.iter().find(|b| b.name_any() == name).ok_or_else(|| {
        Error::Refused(format!("VisitorsApp {app} has no backup run {name}: `kubectl visitors runs {app}` lists them"))
    })?;
    if run.spec.is_schedule() {
        return Err(Error::Refused(format!(
            "{name} is a schedule, not a run: restore one of its runs (--run), or a time (--time)"
        )));
    }
    if run.failed_drill() {
        return Err(refusal(
            "BackupFailedDrill",
            format!("run {name} failed its restore drill: it does not restore what was backed up"),
        ));
    }
    if !run.is_kept_success() {
        let phase = run.status.as_ref().and_then(|s| s.phase).map_or("Pending".to_string(), |p| format!("{p:?}"));
        return Err(Error::Refused(format!("run {name} is {phase}: only a run that succeeded can be restored")));
    }
    Ok(run)
}

fn time_base<'a>(
    snapshot: &'a AppSnapshot,
    schedule: &MySQLBackup,
    target: Timestamp,
    now: Timestamp,
) -> Result<(&'a MySQLBackup, Option<Replay>), Error> {
    let name = schedule.name_any();
    let runs: Vec<MySQLBackup> =
        snapshot.backups.iter().filter(|b| schedule_of(b) == Some(name.as_str())).cloned().collect();
    let (base_name, from, waits_for_archive) = match recovery::base_for_time(schedule, &runs, target, now) {
        Ok(base) => (base.run.name_any(), base.snapshot_time, false),
        Err(refusal) if refusal.is_not_archived_yet() && archive_catches_up(schedule, target) => {
            // The controller waits for the archive to reach a target a few seconds ahead of it.
            let latest =
                recovery::base_before(&name, &runs, target).map_err(|_| Error::Refused(refusal.message.clone()))?;
            (latest.run.name_any(), latest.snapshot_time, true)
        }
        Err(refused) => {
            let window = window_text(schedule);
            return Err(refusal(refused.reason, format!("{}{window}", refused.message)));
        }
    };
    let found = snapshot.backups.iter().find(|b| b.name_any() == base_name);
    let base = found.ok_or_else(|| Error::Refused(format!("run {base_name} is gone")))?;
    Ok((base, Some(Replay { schedule: name, from, to: target, waits_for_archive })))
}

fn archive_catches_up(schedule: &MySQLBackup, target: Timestamp) -> bool {
    let status = schedule.status.as_ref();
    let archiving = status
        .is_some_and(|s| visitors_api::conditions::is_true(&s.conditions, visitors_api::backup::condition::ARCHIVING));
    let newest = status.and_then(|s| s.point_in_time.as_ref()).and_then(|p| p.last_recoverable_time.as_ref());
    archiving && newest.is_some_and(|newest| target.duration_since(newest.0).as_secs() <= ARCHIVE_CATCH_UP_SECONDS)
}

fn window_text(schedule: &MySQLBackup) -> String {
    let archive = schedule.status.as_ref().and_then(|s| s.point_in_time.as_ref());
    let oldest = archive.and_then(|a| a.oldest_recoverable_time.as_ref()).map(|t| t.0.to_string());
    let newest = archive.and_then(|a| a.last_recoverable_time.as_ref()).map(|t| t.0.to_string());
    match (oldest, newest) {
        (Some(oldest), Some(newest)) => format!("\n  the window of {} is {oldest} … {newest}", schedule.name_any()),
        _ => String::new(),
    }
}

fn latest<'a>(
    snapshot: &'a AppSnapshot,
    schedule: Option<&str>,
    now: Timestamp,
) -> Result<(&'a MySQLBackup, Option<Replay>), Error> {
    let archiving = pick_schedule(snapshot, schedule, true).ok();
    let newest_recoverable =
        archiving.and_then(|s| s.status.as_ref()?.point_in_time.as_ref()?.last_recoverable_time.as_ref()).map(|t| t.0);
    if let (Some(schedule), Some(newest)) = (archiving, newest_recoverable) {
        return time_base(snapshot, schedule, newest, now);
    }
    let newest_run = snapshot
        .backups
        .iter()
        .filter(|b| !b.spec.is_schedule() && b.is_kept_success() && !b.failed_drill())
        .filter(|b| schedule.is_none_or(|s| schedule_of(b) == Some(s)))
        .max_by_key(|b| (b.status.as_ref().and_then(|s| s.completion_time.as_ref()).map(|t| t.0), b.name_any()))
        .ok_or_else(|| {
            Error::Refused(format!("VisitorsApp {} has no backup run that succeeded", snapshot.app.name_any()))
        })?;
    Ok((newest_run, None))
}

fn refusal(reason: &str, message: String) -> Error {
    let what = runbook::what_to_do(reason).map(|w| format!("\n  {reason}: {w}")).unwrap_or_default();
    Error::Refused(format!("{message}: nothing was created{what}"))
}

/// The MySQLRestore of `plan`.
pub fn restore_object(plan: &RestorePlan, now: Timestamp) -> MySQLRestore {
    let source = match &plan.replay {
        Some(replay) => RestoreSource {
            point_in_time: Some(PointInTimeSource {
                backup: replay.schedule.clone(),
                target_time: Some(Time(replay.to)),
                target_gtid: None,
            }),
            ..RestoreSource::default()
        },
        None => RestoreSource { backup: Some(plan.base_run.clone()), ..RestoreSource::default() },
    };
    let name = format!("{}-restore-{}", plan.into, now.as_second());
    let spec = MySQLRestoreSpec {
        source,
        target: RestoreTarget { visitors_app: plan.into.clone() },
        quiesce: None,
        verify: None,
        parallelism: None,
        active_deadline_seconds: None,
    };
    let mut restore = MySQLRestore::new(&name, spec);
    restore.metadata.namespace = Some(plan.namespace.clone());
    restore.metadata.annotations = Some(BTreeMap::from([(REQUESTED_BY.to_string(), PLUGIN.to_string())]));
    restore
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn app(name: &str) -> VisitorsApp {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "VisitorsApp",
            "metadata": {"name": name, "namespace": "shop"}, "spec": {"size": 2}}))
        .unwrap()
    }

    fn schedule(name: &str, archiving: bool, recoverable: i64) -> MySQLBackup {
        let mut spec = serde_json::json!({"source": {"visitorsApp": "ex"},
            "storage": {"persistentVolumeClaim": {"claimName": "backups"}}, "schedule": {"cron": "0 3 * * *"},
            "drill": {}});
        if archiving {
            spec["pointInTime"] = serde_json::json!({});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")}, "spec": spec,
            "status": {"conditions": [{"type": "Archiving", "status": "True", "reason": "Archiving", "message": "",
                "lastTransitionTime": at(0).to_string()}],
                "pointInTime": {"lastRecoverableTime": at(recoverable).to_string(),
                    "oldestRecoverableTime": at(100).to_string()}},
        }))
        .unwrap()
    }

    fn run(name: &str, schedule: &str, snapshot: i64, drill: Option<f64>) -> MySQLBackup {
        let mut status = serde_json::json!({"phase": "Succeeded", "completionTime": at(snapshot + 20).to_string(),
            "sizeBytes": 1000, "snapshot": {"time": at(snapshot).to_string(), "binlogFile": "b.000001", "binlogPosition": 4}});
        if let Some(seconds) = drill {
            status["verifiedTime"] = serde_json::json!(at(snapshot + 60).to_string());
            status["drill"] = serde_json::json!({"phase": "Succeeded", "requestedAt": at(snapshot + 20).to_string(),
                "restoreSeconds": seconds});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "shop", "labels": {SCHEDULE_LABEL: schedule},
                "creationTimestamp": at(snapshot).to_string()},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": status,
        }))
        .unwrap()
    }

    fn snapshot(backups: Vec<MySQLBackup>) -> AppSnapshot {
        AppSnapshot { app: app("ex"), backups, restores: Vec::new() }
    }

    #[test]
    fn the_schedule_is_the_one_asked_for_or_the_only_one() {
        let two = snapshot(vec![schedule("nightly", true, 400), schedule("hourly", false, 0)]);
        let one = snapshot(vec![schedule("nightly", false, 0)]);
        let none = snapshot(vec![]);
        type Case<'a> = (&'a AppSnapshot, Option<&'a str>, bool, Result<&'a str, &'a str>);
        let cases: [Case; 7] = [
            (&one, None, false, Ok("nightly")),
            (&two, Some("hourly"), false, Ok("hourly")),
            (&two, None, true, Ok("nightly")),
            (&two, None, false, Err("several schedules")),
            (&two, Some("weekly"), false, Err("no backup schedule weekly")),
            (&two, Some("hourly"), true, Err("does not archive")),
            (&none, None, false, Err("has no backup schedule")),
        ];
        for (snapshot, asked, archiving, expected) in cases {
            let got = pick_schedule(snapshot, asked, archiving).map(|s| s.name_any()).map_err(|e| e.to_string());
            match (got, expected) {
                (Ok(got), Ok(expected)) => assert_eq!(got, expected),
                (Err(got), Err(expected)) => assert!(got.contains(expected), "{got}"),
                (got, expected) => panic!("{asked:?}/{archiving}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_run_taken_now_is_a_run_of_its_schedule() {
        let nightly = schedule("nightly", true, 400);
        let taken = backup_run(&nightly, at(0));
        assert_eq!(taken.name_any(), "nightly-now-1800000000");
        assert_eq!(taken.labels()[SCHEDULE_LABEL], "nightly");
        assert_eq!(taken.labels()[DATABASE_LABEL], "ex");
        assert_eq!(taken.owner_references()[0].uid, "uid-nightly");
        assert!(taken.spec.schedule.is_none() && taken.spec.point_in_time.is_none(), "a run, archiving nothing");
        assert!(taken.spec.drill.as_ref().is_some_and(|d| d.after_each_run()), "drilled as the schedule's runs are");
    }

    #[test]
    fn each_restore_target_gets_its_plan_or_a_refusal_before_anything_is_created() {
        let backups = vec![
            schedule("nightly", true, 400),
            run("nightly-1", "nightly", 100, Some(41.0)),
            run("nightly-2", "nightly", 250, None),
        ];
        let snapshot = snapshot(backups);
        let into = app("ex");
        let now = at(500);
        let plan = |target: Target| plan_restore(&snapshot, &into, &target, None, now);

        let by_run = plan(Target::Run("nightly-1".into())).unwrap();
        assert_eq!((by_run.base_run.as_str(), by_run.replay.is_none()), ("nightly-1", true));
        assert_eq!(by_run.estimated_seconds, Some(41.0), "the run's own drill");
        assert_eq!(by_run.writers_stopped, ["Deployment ex-backend (2 replicas)"]);

        let by_time = plan(Target::Time(at(300))).unwrap();
        let replay = by_time.replay.clone().unwrap();
        assert_eq!((by_time.base_run.as_str(), replay.from, replay.to), ("nightly-2", at(250), at(300)));
        assert_eq!(by_time.estimated_seconds, Some(41.0), "the newest drill's restore time");

        let newest = plan(Target::Latest).unwrap();
        assert_eq!(newest.replay.unwrap().to, at(400), "the archive's last recoverable time");

        let catching_up = plan(Target::Time(at(430))).unwrap();
        assert!(catching_up.replay.unwrap().waits_for_archive);

        for (target, refused) in [
            (Target::Time(at(50)), "TargetBeforeOldestBackup"),
            (Target::Time(at(490)), "not yet"),
            (Target::Time(at(900)), "in the future"),
            (Target::Run("nightly".into()), "is a schedule"),
            (Target::Run("weekly-1".into()), "has no backup run"),
        ] {
            let error = plan(target.clone()).unwrap_err().to_string();
            assert!(error.contains(refused), "{target:?}: {error}");
        }
        let outside = plan(Target::Time(at(50))).unwrap_err().to_string();
        assert!(outside.contains("nothing was created") && outside.contains("window"), "{outside}");
    }

    #[test]
    fn the_restore_object_reads_the_planned_source() {
        let snapshot = snapshot(vec![schedule("nightly", true, 400), run("nightly-1", "nightly", 100, Some(41.0))]);
        let plan = plan_restore(&snapshot, &app("copy"), &Target::Time(at(300)), None, at(500)).unwrap();
        let restore = restore_object(&plan, at(500));
        assert_eq!(restore.name_any(), "copy-restore-1800000500");
        assert_eq!(restore.spec.target.visitors_app, "copy");
        let point = restore.spec.source.point_in_time.unwrap();
        assert_eq!((point.backup.as_str(), point.target_time), ("nightly", Some(Time(at(300)))));
    }
}
