//! A schedule's binary-log archiving (`spec.pointInTime`): its archiver applied (or removed),
//! and what the archiver reports through its Lease turned into the schedule's
//! `status.pointInTime`, its `Archiving` condition and the archive metrics. The Lease also
//! carries retention's answer back: where the oldest kept run's snapshot is.
//!
//! Nothing watches the archiver's reports (a Lease renewed every few seconds would wake the
//! schedule as often): a schedule that archives is reconciled every [`REFRESH`] instead.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use visitors_agent_contract::archive::{ArchiveStatus, ArchiverState, PruneBefore, STATUS_ANNOTATION};
use visitors_api::MySQLBackup;
use visitors_api::backup::{MySQLBackupStatus, condition, reason};
use visitors_api::conditions::{self, Desired, Status};
use visitors_api::point_in_time::{ArchiveGap, PointInTimeStatus};

use controller_common::agent_job::{self, DatabaseAccess, JobState};
use controller_common::apply::{apply, delete_if_present};
use controller_common::error::{ApiError, api_err};
use controller_common::operation::DatabaseOperation;
use controller_common::ready;
use controller_common::step::Step;

use crate::build::archiver::{Archiver, TEMPLATE_ANNOTATION, archive_location, archiver, archiver_name};
use crate::context::{Context, Error};
use crate::metrics::{ArchiveGauges, ScheduleLabels};

/// How often a schedule that archives is reconciled to read its archiver's reports.
pub const REFRESH: Duration = Duration::from_secs(15);
/// An archiver that has not renewed its Lease for this long is taken for down.
pub const DOWN_AFTER: Duration = Duration::from_secs(60);

/// Applies or removes the archiver of `schedule` and writes what it reports into `status`;
/// returns how soon to look again.
pub async fn reconcile(
    schedule: &MySQLBackup,
    namespace: &str,
    ctx: &Context,
    runs: &[MySQLBackup],
    status: &mut MySQLBackupStatus,
) -> Result<Option<Duration>, Error> {
    let labels = ScheduleLabels { namespace: namespace.to_string(), schedule: schedule.name_any() };
    let generation = schedule.metadata.generation;
    let now = Timestamp::now();
    let archiving_condition = conditions::find(&status.conditions, condition::ARCHIVING).map(|c| c.reason.clone());
    let Some(point_in_time) = &schedule.spec.point_in_time else {
        // What an earlier spec started goes (once: the status then says nothing of it).
        if status.point_in_time.is_some() || archiving_condition.is_some() {
            remove_archiver(schedule, namespace, ctx, true).await?;
            status.point_in_time = None;
            status.conditions.retain(|c| c.type_ != condition::ARCHIVING);
            ctx.metrics.archive_forgotten(&labels);
        }
        return Ok(None);
    };
    if !point_in_time.enabled() {
        if archiving_condition.as_deref() != Some(reason::ARCHIVING_DISABLED) {
            remove_archiver(schedule, namespace, ctx, false).await?;
        }
        let message = "spec.pointInTime.enabled is false: the archiver is stopped and the archive kept".into();
        let off =
            Desired { type_: condition::ARCHIVING, status: Status::False, reason: reason::ARCHIVING_DISABLED, message };
        conditions::set(&mut status.conditions, off, generation, Time(now));
        ctx.metrics.archive_forgotten(&labels);
        return Ok(None);
    }
    let op = DatabaseOperation::of(schedule, &ctx.runtime, namespace);
    let credentials = match archiver_access(schedule, &op).await? {
        Step::Ready(credentials) => credentials,
        stopped => {
            let (reason, message) = stopped.stopped_because().unwrap_or_default();
            let waiting = Desired { type_: condition::ARCHIVING, status: Status::False, reason, message };
            conditions::set(&mut status.conditions, waiting, generation, Time(now));
            return Ok(Some(REFRESH));
        }
    };
    let prune = prune_before(runs);
    let children = archiver(schedule, &ctx.settings.inputs(), &credentials, prune.as_ref());
    let lease = apply_archiver(namespace, ctx, children).await?;
    let observed = ArchiverReport::of(&lease);
    let report = archive_report(schedule, &observed, runs, now);
    ctx.metrics.archive_observed(labels, &report.gauges);
    status.point_in_time = Some(report.status);
    conditions::set(&mut status.conditions, report.condition, generation, Time(now));
    Ok(Some(REFRESH))
}

/// How the archiver reaches the app's MySQL, once the app and its credentials are there, and
/// the storage the archive goes to and, for an encrypted schedule, the key its segments are
/// encrypted with: without them the archiver's pod could not start.
async fn archiver_access(
    schedule: &MySQLBackup,
    op: &DatabaseOperation<'_, MySQLBackup>,
) -> Result<Step<DatabaseAccess>, ApiError> {
    let access = ready!(op.app_access("spec.source.visitorsApp").await?);
    if let Some(encryption) = &schedule.spec.encryption {
        ready!(op.encryption_keys_ready(&encryption.key_secret, Some(&encryption.key_id), "spec.encryption").await?);
    }
    let claim_field = "spec.storage.persistentVolumeClaim.claimName";
    Ok(op.storage_ready(&schedule.spec.storage, claim_field).await?.map(|()| access))
}

/// Applies the archiver's objects (the Role before what uses it) and makes sure its Job runs
/// the current template; returns the Lease as it is.
async fn apply_archiver(namespace: &str, ctx: &Context, children: Archiver) -> Result<Lease, ApiError> {
    let client = ctx.runtime.client.clone();
    let manager = &ctx.runtime.field_manager;
    let name = children.job.name_any();
    let applying = |kind: &str| api_err(format!("applying {kind} {name}"));
    apply(&Api::<ServiceAccount>::namespaced(client.clone(), namespace), manager, &children.service_account)
        .await
        .map_err(applying("ServiceAccount"))?;
    apply(&Api::<Role>::namespaced(client.clone(), namespace), manager, &children.role)
        .await
        .map_err(applying("Role"))?;
    apply(&Api::<RoleBinding>::namespaced(client.clone(), namespace), manager, &children.role_binding)
        .await
        .map_err(applying("RoleBinding"))?;
    let lease = apply(&Api::<Lease>::namespaced(client.clone(), namespace), manager, &children.lease)
        .await
        .map_err(applying("Lease"))?;
    ensure_job(&Api::<Job>::namespaced(client, namespace), manager, &children.job).await?;
    Ok(lease)
}

/// Creates the archiver's Job when there is none; replaces one that ended (the archiver never
/// ends on its own: its pods were lost too often, or it stopped on SIGTERM and the Job counted
/// that) or whose template is not the spec's (a Job's template cannot change in place).
async fn ensure_job(api: &Api<Job>, manager: &str, desired: &Job) -> Result<(), ApiError> {
    let name = desired.name_any();
    let existing = api.get_opt(&name).await.map_err(api_err(format!("reading Job {name}")))?;
    if let Some(existing) = existing {
        let template = |job: &Job| job.annotations().get(TEMPLATE_ANNOTATION).cloned();
        let ended = agent_job::job_state(&existing) != JobState::Active;
        if !ended && template(&existing) == template(desired) {
            return Ok(());
        }
        tracing::info!(ended, "replacing the archiver's Job {name}");
        delete_if_present(api, "Job", &name).await?;
    }
    let params = PostParams { field_manager: Some(manager.to_string()), ..PostParams::default() };
    match api.create(&params, desired).await {
        Ok(_) => Ok(()),
        // The one being deleted is not gone yet: the next reconcile creates it.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(ApiError { action: format!("creating Job {name}"), source }),
    }
}

/// Stops the archiver; with `everything`, also removes its account and Lease. The archive in
/// the storage is kept either way.
async fn remove_archiver(
    schedule: &MySQLBackup,
    namespace: &str,
    ctx: &Context,
    everything: bool,
) -> Result<(), ApiError> {
    let client = ctx.runtime.client.clone();
    let name = archiver_name(schedule);
    delete_if_present(&Api::<Job>::namespaced(client.clone(), namespace), "Job", &name).await?;
    if everything {
        delete_if_present(&Api::<RoleBinding>::namespaced(client.clone(), namespace), "RoleBinding", &name).await?;
        delete_if_present(&Api::<Role>::namespaced(client.clone(), namespace), "Role", &name).await?;
        delete_if_present(&Api::<ServiceAccount>::namespaced(client.clone(), namespace), "ServiceAccount", &name)
            .await?;
        delete_if_present(&Api::<Lease>::namespaced(client, namespace), "Lease", &name).await?;
    }
    Ok(())
}

/// What the archiver's Lease tells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArchiverReport {
    pub status: Option<ArchiveStatus>,
    /// When the archiver last renewed the Lease.
    pub heartbeat: Option<Timestamp>,
}

impl ArchiverReport {
    pub fn of(lease: &Lease) -> Self {
        let status = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STATUS_ANNOTATION))
            .and_then(|text| serde_json::from_str(text).ok());
        let heartbeat = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        ArchiverReport { status, heartbeat }
    }
}

/// The schedule's view of its archive.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveReport {
    pub status: PointInTimeStatus,
    pub condition: Desired<'static>,
    pub gauges: ArchiveGauges,
}

/// What `observed` means for `schedule` and its `runs` at `now`.
pub fn archive_report(
    schedule: &MySQLBackup,
    observed: &ArchiverReport,
    runs: &[MySQLBackup],
    now: Timestamp,
) -> ArchiveReport {
    let report = observed.status.clone().unwrap_or_default();
    let time = |text: &Option<String>| text.as_deref().and_then(|t| t.parse::<Timestamp>().ok());
    let last_recoverable = time(&report.last_recoverable_time);
    let down = observed.heartbeat.is_none_or(|beat| now.as_second() - beat.as_second() > DOWN_AFTER.as_secs() as i64);
    let lag = match (down, last_recoverable) {
        // Nobody stores anything: everything since the last stored transaction is at risk.
        (true, Some(last)) => (now.as_second() - last.as_second()).max(0) as f64,
        _ => report.lag_seconds,
    };
    let bases = base_snapshot_times(runs);
    let gaps: Vec<ArchiveGap> = report
        .epochs
        .iter()
        .filter_map(|epoch| {
            let gap = epoch.gap_before.as_ref()?;
            Some(ArchiveGap {
                reason: camel(&gap.reason),
                message: gap.message.clone(),
                after_time: time(&gap.after_time).map(Time),
                before_time: time(&Some(epoch.start_time.clone())).map(Time),
                detected_time: time(&Some(gap.detected_time.clone())).map(Time),
            })
        })
        .collect();
    let first_epoch_start = report.epochs.first().and_then(|e| time(&Some(e.start_time.clone())));
    let oldest_recoverable =
        bases.iter().copied().filter(|base| first_epoch_start.is_none_or(|start| *base >= start)).min();
    // A gap keeps restores from crossing it until a run has succeeded after it.
    let unbridged = report.epochs.last().and_then(|epoch| {
        let gap = epoch.gap_before.as_ref()?;
        let start = time(&Some(epoch.start_time.clone()))?;
        (!bases.iter().any(|base| *base >= start)).then_some(gap)
    });
    let (status, reason, message) = if observed.status.is_none() {
        (Status::False, reason::ARCHIVER_STARTING, "the archiver has not reported yet".to_string())
    } else if down {
        (
            Status::False,
            reason::ARCHIVER_DOWN,
            format!(
                "the archiver has not renewed its Lease for more than {}s: its pod is gone, stuck or cannot reach the API server",
                DOWN_AFTER.as_secs()
            ),
        )
    } else if let Some(gap) = unbridged {
        let reason = if gap.reason == "serverChanged" { reason::SERVER_CHANGED } else { reason::BINLOG_PURGED };
        (
            Status::False,
            reason,
            format!(
                "{}; no restore replays across the gap, and none reaches past it until a run succeeds after it",
                gap.message
            ),
        )
    } else {
        match report.state {
            ArchiverState::Failed => {
                (Status::False, reason::ARCHIVE_FAILED, report.message.clone().unwrap_or_default())
            }
            ArchiverState::Retrying => {
                (Status::False, reason::ARCHIVER_RETRYING, report.message.clone().unwrap_or_default())
            }
            ArchiverState::Starting => (Status::False, reason::ARCHIVER_STARTING, "the archiver is starting".into()),
            ArchiverState::Archiving => {
                let flush = schedule.spec.point_in_time.as_ref().map_or(5, |p| p.flush_seconds());
                let encrypted =
                    report.encryption_key_id.as_ref().map_or(String::new(), |id| format!(", encrypted with key {id}"));
                (
                    Status::True,
                    reason::ARCHIVING,
                    format!(
                        "the binary log is archived{encrypted}, a segment at least every {flush}s while there are writes"
                    ),
                )
            }
        }
    };
    let point_in_time = PointInTimeStatus {
        location: Some(archive_location(schedule)),
        last_recoverable_time: last_recoverable.map(Time),
        last_recoverable_gtid: report.last_gtid.clone(),
        oldest_recoverable_time: oldest_recoverable.map(Time),
        archive_lag_seconds: observed.status.as_ref().map(|_| lag.round()),
        segments: observed.status.as_ref().map(|s| i64::try_from(s.segments).unwrap_or(i64::MAX)),
        stored_bytes: observed.status.as_ref().map(|s| i64::try_from(s.stored_bytes).unwrap_or(i64::MAX)),
        last_heartbeat_time: observed.heartbeat.map(Time),
        encryption_key_id: report.encryption_key_id.clone(),
        gaps,
    };
    let gauges = ArchiveGauges {
        lag_seconds: lag,
        up: !down && observed.status.is_some(),
        gap: unbridged.is_some(),
        last_recoverable: last_recoverable.map(|t| t.as_second() as f64),
    };
    let condition = Desired { type_: condition::ARCHIVING, status, reason, message };
    ArchiveReport { status: point_in_time, condition, gauges }
}

/// `binlogPurged` → `BinlogPurged`.
fn camel(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// The snapshot times of the runs a restore to a point in time can start from.
fn base_snapshot_times(runs: &[MySQLBackup]) -> Vec<Timestamp> {
    runs.iter().filter_map(|run| run.base_snapshot()).map(|base| base.time).collect()
}

/// The snapshot of the oldest successful run kept, when every kept run knows its own: the
/// archiver may then delete what is wholly before it. A run that does not (taken before the
/// archive existed, or by an older agent) keeps everything; a run a drill proved wrong is no
/// base, and holds nothing back.
pub fn prune_before(runs: &[MySQLBackup]) -> Option<PruneBefore> {
    let mut oldest: Option<(String, visitors_api::backup::BaseSnapshot<'_>)> = None;
    for run in runs.iter().filter(|run| run.is_kept_success() && !run.failed_drill()) {
        let base = run.base_snapshot()?;
        if oldest.as_ref().is_none_or(|(_, o)| base.time < o.time) {
            oldest = Some((run.name_any(), base));
        }
    }
    oldest.map(|(run, base)| PruneBefore {
        run,
        time: base.time.to_string(),
        binlog_file: base.binlog_file.to_string(),
        binlog_position: base.binlog_position,
        gtid: base.gtid.map(Into::into),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::run;
    use visitors_agent_contract::archive::{EpochStatus, Gap};
    use visitors_api::backup::BackupPhase;
    use visitors_api::point_in_time::SnapshotPosition;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn schedule() -> MySQLBackup {
        let mut schedule = run();
        schedule.metadata.name = Some("nightly".into());
        schedule.spec.schedule = Some(serde_json::from_value(serde_json::json!({"cron": "0 3 * * *"})).unwrap());
        schedule.spec.point_in_time = Some(Default::default());
        schedule
    }

    fn succeeded(name: &str, snapshot: Option<i64>) -> MySQLBackup {
        let mut run = run();
        run.metadata.name = Some(name.into());
        run.status = Some(MySQLBackupStatus {
            phase: Some(BackupPhase::Succeeded),
            snapshot: snapshot.map(|second| SnapshotPosition {
                time: Some(Time(at(second))),
                binlog_file: Some("binlog.000002".into()),
                binlog_position: Some(100 + second),
                gtid: Some(format!("0-1-{second}")),
            }),
            ..Default::default()
        });
        run
    }

    fn reporting(state: ArchiverState, epochs: Vec<EpochStatus>) -> ArchiveStatus {
        ArchiveStatus {
            state,
            location: "s3://b/p".into(),
            last_recoverable_time: Some(at(100).to_string()),
            last_gtid: Some("0-1-500".into()),
            lag_seconds: 1.4,
            segments: 12,
            stored_bytes: 3000,
            epochs,
            updated_time: at(100).to_string(),
            ..Default::default()
        }
    }

    fn epoch(n: u64, start: i64, gap: Option<&str>) -> EpochStatus {
        EpochStatus {
            epoch: n,
            start_time: at(start).to_string(),
            last_transaction_time: None,
            gap_before: gap.map(|reason| Gap {
                reason: reason.into(),
                message: "the server no longer has binlog.000003".into(),
                detected_time: at(start).to_string(),
                after_time: Some(at(start - 30).to_string()),
            }),
        }
    }

    #[test]
    fn a_reporting_archiver_is_archiving_with_its_recoverable_window() {
        let observed = ArchiverReport {
            status: Some(reporting(ArchiverState::Archiving, vec![epoch(0, -100, None)])),
            heartbeat: Some(at(95)),
        };
        let runs = [succeeded("n-1", Some(-50)), succeeded("n-2", Some(20)), succeeded("old", Some(-200))];
        let report = archive_report(&schedule(), &observed, &runs, at(100));
        assert_eq!((report.condition.status, report.condition.reason), (Status::True, reason::ARCHIVING));
        assert_eq!(report.status.last_recoverable_time, Some(Time(at(100))));
        assert_eq!(
            report.status.oldest_recoverable_time,
            Some(Time(at(-50))),
            "a run before the archive began is no base"
        );
        assert_eq!(report.status.archive_lag_seconds, Some(1.0));
        assert_eq!(report.status.location.as_deref(), Some("pvc://backups/mysql/shop/ex/_binlog/nightly"));
        assert!(report.gauges.up && !report.gauges.gap);
        assert_eq!(report.status.encryption_key_id, None);
        assert!(!report.condition.message.contains("encrypted"), "{}", report.condition.message);
    }

    #[test]
    fn the_key_an_archiver_encrypts_with_is_in_the_status_and_the_condition() {
        let mut status = reporting(ArchiverState::Archiving, vec![epoch(0, -100, None)]);
        status.encryption_key_id = Some("k2".into());
        let observed = ArchiverReport { status: Some(status), heartbeat: Some(at(95)) };
        let report = archive_report(&schedule(), &observed, &[], at(100));
        assert_eq!(report.status.encryption_key_id.as_deref(), Some("k2"));
        assert!(report.condition.message.contains("encrypted with key k2"), "{}", report.condition.message);
    }

    #[test]
    fn an_archiver_that_stopped_reporting_is_down_and_its_lag_grows() {
        let observed =
            ArchiverReport { status: Some(reporting(ArchiverState::Archiving, vec![])), heartbeat: Some(at(0)) };
        let report = archive_report(&schedule(), &observed, &[], at(100 + 61));
        assert_eq!(report.condition.reason, reason::ARCHIVER_DOWN);
        assert!(!report.gauges.up);
        assert_eq!(report.gauges.lag_seconds, 61.0);
        let never = archive_report(&schedule(), &ArchiverReport::default(), &[], at(0));
        assert_eq!(never.condition.reason, reason::ARCHIVER_STARTING);
        assert_eq!(never.status.archive_lag_seconds, None);
    }

    #[test]
    fn a_gap_holds_until_a_run_succeeds_after_it() {
        let epochs = vec![epoch(0, -1000, None), epoch(1, 50, Some("binlogPurged"))];
        let observed =
            ArchiverReport { status: Some(reporting(ArchiverState::Archiving, epochs)), heartbeat: Some(at(99)) };
        let before = archive_report(&schedule(), &observed, &[succeeded("n-1", Some(10))], at(100));
        assert_eq!((before.condition.status, before.condition.reason), (Status::False, reason::BINLOG_PURGED));
        assert!(before.gauges.gap);
        assert_eq!(before.status.gaps.len(), 1);
        assert_eq!(before.status.gaps[0].reason, "BinlogPurged");
        assert_eq!(before.status.gaps[0].after_time, Some(Time(at(20))));
        let after =
            archive_report(&schedule(), &observed, &[succeeded("n-1", Some(10)), succeeded("n-2", Some(60))], at(100));
        assert_eq!(after.condition.reason, reason::ARCHIVING);
        assert!(!after.gauges.gap);
        assert_eq!(after.status.gaps.len(), 1, "the gap stays on record");
    }

    #[test]
    fn retention_prunes_before_the_oldest_kept_run_only_when_every_run_knows_its_snapshot() {
        let runs = [succeeded("n-2", Some(20)), succeeded("n-1", Some(10))];
        let prune = prune_before(&runs).unwrap();
        assert_eq!((prune.run.as_str(), prune.binlog_position), ("n-1", 110));
        let with_unknown = [succeeded("n-2", Some(20)), succeeded("n-0", None)];
        assert_eq!(prune_before(&with_unknown), None);
        assert_eq!(prune_before(&[]), None);
        // A run a drill proved wrong is no base: it holds nothing back (before, it kept all).
        let mut defective = succeeded("n-0", Some(5));
        defective.status.as_mut().unwrap().drill_defect = Some("a chunk's SHA-256 differs".into());
        let prune = prune_before(&[succeeded("n-2", Some(20)), defective]).unwrap();
        assert_eq!(prune.run, "n-2");
    }
}
