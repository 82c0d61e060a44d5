//! A schedule of runs: at each fire time one run object (see [`crate::build::scheduled_run`]); missed
//! fire times give at most one catch-up run, within `startingDeadlineSeconds`; `Forbid` skips
//! a fire time while a run is active, `Replace` stops the active run first; `suspend` creates
//! and touches nothing. Retention runs at every reconcile, which every run's end triggers.
//! A schedule with `spec.pointInTime` also runs its binary-log archiver ([`crate::archiving`]);
//! one with `spec.drill.cron` asks its newest successful run for a restore drill at each drill
//! fire time ([`crate::schedule_drills`]), suspended or not (`suspend` stops runs, not drills).
//! The reconcile requeues itself for the next fire time (and, while archiving, to read the
//! archiver's reports).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use visitors_api::backup::{BackupPhase, ConcurrencyPolicy, MySQLBackupStatus, Retention, condition, reason};
use visitors_api::conditions::{self, Desired, READY, Status};
use visitors_api::labels::{names, runs_of_schedule};
use visitors_api::{InvalidSpec, MySQLBackup};

use controller_common::apply::delete_if_present;
use controller_common::error::{ApiError, api_err};

use crate::build::scheduled_run::scheduled_run;
use crate::context::{Context, Error};
use crate::metrics::ScheduleLabels;
use crate::retention::{self, RunFacts};
use crate::timing::{created, until};
use crate::{status, validate};

/// A schedule being deleted: its runs go with it (they are owned by it); its metrics go now.
pub fn reconcile_deleted(schedule: &MySQLBackup, namespace: &str, ctx: &Context) -> Action {
    ctx.metrics.schedule_deleted(&labels(schedule, namespace));
    ctx.runtime.forget(schedule);
    Action::await_change()
}

fn labels(schedule: &MySQLBackup, namespace: &str) -> ScheduleLabels {
    ScheduleLabels { namespace: namespace.to_string(), schedule: schedule.name_any() }
}

pub async fn reconcile(schedule: &MySQLBackup, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    let labels = labels(schedule, namespace);
    let plan = match validate::schedule(schedule) {
        Ok(plan) => plan,
        Err(invalid) => return reject(schedule, ctx, &invalid).await,
    };
    let spec = schedule.spec.schedule.clone().unwrap_or_default();
    let api: Api<MySQLBackup> = Api::namespaced(ctx.runtime.client.clone(), namespace);
    let now = Timestamp::now();
    let mut runs = own_runs(&api, schedule).await?;

    let retention = spec.retention.clone().unwrap_or_default();
    for name in doomed(&runs, &retention, now) {
        delete_run(&api, &name).await?;
        let note = format!("deleted run {name} (retention)");
        ctx.runtime.events.normal(schedule, "RetentionDeleted", "Retention", note).await;
        runs.retain(|run| run.name_any() != name);
    }

    let mut state = schedule.status.clone().unwrap_or_default();
    if !spec.suspended() {
        let since = state.last_schedule_time.as_ref().map(|t| t.0).or_else(|| created(schedule)).unwrap_or(now);
        if let Some(fire) = plan.latest_due(since, now) {
            state.last_schedule_time = Some(Time(fire));
            if let Some(created) = fire_time(schedule, &api, &runs, &spec, fire, now, ctx).await? {
                runs.push(created);
            }
        }
        state.next_schedule_time = plan.next_after(now).map(Time);
    } else {
        state.next_schedule_time = None;
    }

    let drill_refresh = crate::schedule_drills::fire_drills(schedule, &api, &runs, &mut state, now, ctx).await?;
    let mut desired = schedule_status(schedule, state, &runs, spec.suspended(), Time(now));
    // The schedule's own status is written even when archiving could not be reconciled.
    let archived = crate::archiving::reconcile(schedule, namespace, ctx, &runs, &mut desired).await;
    let interval = plan.interval(now);
    ctx.metrics.schedule_last_run(labels.clone(), last_run_failed(&desired));
    ctx.metrics.schedule_overdue(labels.clone(), overdue(schedule, &runs, interval, now));
    crate::schedule_drills::export(schedule, labels, &runs, now, ctx);
    ctx.runtime
        .write_status(schedule, schedule.status.as_ref(), &desired)
        .await
        .map_err(api_err(format!("writing the status of MySQLBackup {}", schedule.name_any())))?;
    let archive_refresh = archived?;
    let next_fire = desired.next_schedule_time.as_ref().map(|next| until(now, next.0).min(ctx.runtime.resync));
    Ok(match [next_fire, archive_refresh, drill_refresh].into_iter().flatten().min() {
        Some(after) => Action::requeue(after),
        None => ctx.runtime.converged(schedule),
    })
}

async fn reject(schedule: &MySQLBackup, ctx: &Context, invalid: &InvalidSpec) -> Result<Action, Error> {
    let now = Time(Timestamp::now());
    let mut desired = status::invalid(schedule, invalid, now.clone());
    let bad_schedule: Vec<String> = invalid
        .0
        .iter()
        .filter(|e| e.field.starts_with("spec.schedule.cron") || e.field.starts_with("spec.schedule.timeZone"))
        .map(|e| format!("{}: {}", e.field, e.problem))
        .collect();
    let valid = if bad_schedule.is_empty() {
        Desired {
            type_: condition::SCHEDULE_VALID,
            status: Status::True,
            reason: reason::VALID,
            message: "the cron expression and time zone are valid".into(),
        }
    } else {
        Desired {
            type_: condition::SCHEDULE_VALID,
            status: Status::False,
            reason: reason::INVALID_SCHEDULE,
            message: bad_schedule.join("; "),
        }
    };
    conditions::set(&mut desired.conditions, valid, schedule.metadata.generation, now);
    desired.next_schedule_time = None;
    let wrote = ctx
        .runtime
        .write_status(schedule, schedule.status.as_ref(), &desired)
        .await
        .map_err(api_err(format!("writing the status of MySQLBackup {}", schedule.name_any())))?;
    if wrote {
        ctx.runtime.report_invalid_spec(schedule, invalid).await;
    }
    Ok(ctx.runtime.until_spec_changes(schedule))
}

/// The runs this schedule created (labelled with its name and owned by it).
async fn own_runs(api: &Api<MySQLBackup>, schedule: &MySQLBackup) -> Result<Vec<MySQLBackup>, Error> {
    let listed = api
        .list(&ListParams::default().labels_from(&runs_of_schedule(&schedule.name_any())))
        .await
        .map_err(api_err(format!("listing the runs of schedule {}", schedule.name_any())))?;
    let uid = schedule.uid();
    Ok(listed
        .items
        .into_iter()
        .filter(|run| run.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
        .collect())
}

fn facts(run: &MySQLBackup) -> RunFacts {
    let status = run.status.as_ref();
    let at = status
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0)
        .or_else(|| created(run))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let drilling = status.and_then(|s| s.drill.as_ref()).is_some_and(|d| !d.has_ended());
    RunFacts { name: run.name_any(), phase: status.and_then(|s| s.phase), at, verified: run.is_verified(), drilling }
}

fn doomed(runs: &[MySQLBackup], retention: &Retention, now: Timestamp) -> Vec<String> {
    let facts: Vec<RunFacts> = runs.iter().filter(|r| r.metadata.deletion_timestamp.is_none()).map(facts).collect();
    retention::doomed(&facts, retention, now)
}

fn is_active(run: &MySQLBackup) -> bool {
    run.metadata.deletion_timestamp.is_none() && !run.has_ended()
}

async fn delete_run(api: &Api<MySQLBackup>, name: &str) -> Result<(), Error> {
    Ok(delete_if_present(api, "MySQLBackup", name).await?)
}

/// Handles fire time `fire`: starts its run unless it is too late or a run is active (Forbid),
/// or after stopping the active run (Replace). Returns the run it created.
async fn fire_time(
    schedule: &MySQLBackup,
    api: &Api<MySQLBackup>,
    runs: &[MySQLBackup],
    spec: &visitors_api::backup::BackupSchedule,
    fire: Timestamp,
    now: Timestamp,
    ctx: &Context,
) -> Result<Option<MySQLBackup>, Error> {
    let events = &ctx.runtime.events;
    if let Some(deadline) = spec.starting_deadline_seconds
        && until(fire, now) > Duration::from_secs(u64::try_from(deadline).unwrap_or(0))
    {
        let note =
            format!("fire time {fire} missed by more than startingDeadlineSeconds ({deadline}); no run started for it");
        events.warning(schedule, "MissedSchedule", "Schedule", note).await;
        return Ok(None);
    }
    let run = scheduled_run(schedule, fire);
    if runs.iter().any(|r| r.name_any() == run.name_any()) {
        return Ok(None);
    }
    if let Some(active) = runs.iter().find(|r| is_active(r)) {
        let active_name = active.name_any();
        match spec.concurrency_policy() {
            ConcurrencyPolicy::Forbid => {
                let note =
                    format!("fire time {fire} skipped: run {active_name} is still active (concurrencyPolicy Forbid)");
                events.normal(schedule, "Skipped", "Schedule", note).await;
                return Ok(None);
            }
            ConcurrencyPolicy::Replace => {
                stop(api, active, ctx).await?;
                let note = format!("stopped run {active_name} for fire time {fire} (concurrencyPolicy Replace)");
                events.normal(schedule, "Replaced", "Schedule", note).await;
            }
        }
    }
    let params = PostParams { field_manager: Some(ctx.runtime.field_manager.clone()), ..PostParams::default() };
    let created = match api.create(&params, &run).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
        Err(source) => {
            return Err(Error::Api(ApiError { action: format!("creating MySQLBackup {}", run.name_any()), source }));
        }
    };
    events.normal(schedule, "Created", "Schedule", format!("run {} for fire time {fire}", run.name_any())).await;
    Ok(Some(created))
}

/// Stops an active run: a running one loses its Job (it ends `Failed`, reason `JobDeleted`,
/// and keeps its record); one that has not started yet is deleted.
async fn stop(api: &Api<MySQLBackup>, run: &MySQLBackup, ctx: &Context) -> Result<(), Error> {
    let started = run.status.as_ref().is_some_and(|s| s.job_name.is_some());
    if !started {
        return delete_run(api, &run.name_any()).await;
    }
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(ctx.runtime.client.clone(), &run.namespace().unwrap_or_default());
    Ok(delete_if_present(&jobs, "Job", &names::backup_job(&run.name_any())).await?)
}

fn newest(runs: &[MySQLBackup], phase: BackupPhase) -> Option<&MySQLBackup> {
    runs.iter()
        .filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(phase))
        .max_by_key(|r| (facts(r).at, r.name_any()))
}

/// The schedule's status from its runs.
pub fn schedule_status(
    schedule: &MySQLBackup,
    mut status: MySQLBackupStatus,
    runs: &[MySQLBackup],
    suspended: bool,
    now: Time,
) -> MySQLBackupStatus {
    let generation = schedule.metadata.generation;
    status.observed_generation = generation;
    status.phase = None;
    status.error = None;
    let succeeded = newest(runs, BackupPhase::Succeeded);
    let failed = newest(runs, BackupPhase::Failed);
    status.last_successful_run = succeeded.map(ResourceExt::name_any).or(status.last_successful_run);
    status.last_failed_run = failed.map(ResourceExt::name_any).or(status.last_failed_run);
    status.active_run = runs.iter().filter(|r| is_active(r)).max_by_key(|r| r.name_any()).map(ResourceExt::name_any);
    crate::schedule_drills::verified_status(&mut status, runs);
    let mut set = |desired: Desired<'_>| conditions::set(&mut status.conditions, desired, generation, now.clone());
    set(Desired {
        type_: condition::SCHEDULE_VALID,
        status: Status::True,
        reason: reason::VALID,
        message: "the cron expression and time zone are valid".into(),
    });
    let last = [succeeded, failed].into_iter().flatten().max_by_key(|r| (facts(r).at, r.name_any()));
    set(last_backup(last));
    set(if suspended {
        Desired {
            type_: READY,
            status: Status::True,
            reason: reason::SUSPENDED,
            message: "suspend is true: no new runs are created".into(),
        }
    } else {
        Desired {
            type_: READY,
            status: Status::True,
            reason: reason::SCHEDULED,
            message: "runs are created at each fire time".into(),
        }
    });
    status
}

fn last_backup(last: Option<&MySQLBackup>) -> Desired<'static> {
    let type_ = condition::LAST_BACKUP_SUCCEEDED;
    let Some(run) = last else {
        return Desired {
            type_,
            status: Status::Unknown,
            reason: reason::NO_RUN_FINISHED,
            message: "no run has finished yet".into(),
        };
    };
    let name = run.name_any();
    let status = run.status.clone().unwrap_or_default();
    if status.phase == Some(BackupPhase::Succeeded) {
        return Desired {
            type_,
            status: Status::True,
            reason: conditions::reason::SUCCEEDED,
            message: format!("run {name} succeeded"),
        };
    }
    let error = status.error.unwrap_or_else(|| "no error recorded".into());
    Desired { type_, status: Status::False, reason: reason::FAILED, message: format!("run {name} failed: {error}") }
}

/// Whether the newest finished run failed, as the `LastBackupSucceeded` condition says;
/// `None` while no run has finished.
fn last_run_failed(status: &MySQLBackupStatus) -> Option<bool> {
    match conditions::find(&status.conditions, condition::LAST_BACKUP_SUCCEEDED)?.status.as_str() {
        "True" => Some(false),
        "False" => Some(true),
        _ => None,
    }
}

/// Whether the newest success is older than twice the schedule's interval (a schedule younger
/// than that is not overdue yet).
fn overdue(schedule: &MySQLBackup, runs: &[MySQLBackup], interval: Option<Duration>, now: Timestamp) -> bool {
    let Some(interval) = interval else { return false };
    let since = newest(runs, BackupPhase::Succeeded).map(|r| facts(r).at).or_else(|| created(schedule));
    since.is_some_and(|since| until(since, now) > interval * 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;

    fn finished(name: &str, phase: BackupPhase, second: i64, error: Option<&str>) -> MySQLBackup {
        let mut backup = run();
        backup.metadata.name = Some(name.into());
        backup.status = Some(MySQLBackupStatus {
            phase: Some(phase),
            completion_time: Some(Time(Timestamp::from_second(second).unwrap())),
            error: error.map(Into::into),
            ..Default::default()
        });
        backup
    }

    #[test]
    fn status_names_the_last_runs_and_the_last_result() {
        let schedule = run();
        let runs = [
            finished("n-1", BackupPhase::Succeeded, 100, None),
            finished("n-2", BackupPhase::Failed, 200, Some("wrong password")),
            run(),
        ];
        let status = schedule_status(
            &schedule,
            MySQLBackupStatus::default(),
            &runs,
            false,
            Time(Timestamp::from_second(300).unwrap()),
        );
        assert_eq!(status.last_successful_run.as_deref(), Some("n-1"));
        assert_eq!(status.last_failed_run.as_deref(), Some("n-2"));
        assert_eq!(status.active_run.as_deref(), Some("b1"));
        let last = conditions::find(&status.conditions, condition::LAST_BACKUP_SUCCEEDED).unwrap();
        assert_eq!(last.status, "False");
        assert!(last.message.contains("wrong password"), "{}", last.message);
        assert!(conditions::is_true(&status.conditions, condition::SCHEDULE_VALID));
        assert_eq!(last_run_failed(&status), Some(true), "the metric follows the condition");
    }

    #[test]
    fn the_last_run_metric_is_absent_until_a_run_finishes_and_clears_on_success() {
        let schedule = run();
        let at = || Time(Timestamp::from_second(300).unwrap());
        let none = schedule_status(&schedule, MySQLBackupStatus::default(), &[run()], false, at());
        assert_eq!(last_run_failed(&none), None);
        let runs = [
            finished("n-1", BackupPhase::Failed, 100, Some("wrong password")),
            finished("n-2", BackupPhase::Succeeded, 200, None),
        ];
        let fixed = schedule_status(&schedule, MySQLBackupStatus::default(), &runs, false, at());
        assert_eq!(last_run_failed(&fixed), Some(false));
    }

    #[test]
    fn overdue_after_two_intervals_without_success() {
        let mut schedule = run();
        schedule.metadata.creation_timestamp = Some(Time(Timestamp::from_second(0).unwrap()));
        let hour = Some(Duration::from_secs(3600));
        let runs = [finished("n-1", BackupPhase::Succeeded, 10_000, None)];
        assert!(!overdue(&schedule, &runs, hour, Timestamp::from_second(10_000 + 7_000).unwrap()));
        assert!(overdue(&schedule, &runs, hour, Timestamp::from_second(10_000 + 7_300).unwrap()));
        assert!(overdue(&schedule, &[], hour, Timestamp::from_second(7_300).unwrap()));
    }
}
