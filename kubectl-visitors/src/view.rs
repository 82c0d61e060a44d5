//! What the screens show, as data: built from a snapshot of the resources and the time, with no
//! I/O. `-o json|yaml` prints these; the text renderer draws them.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use serde::Serialize;
use visitors_api::backup::BackupPhase;
use visitors_api::drill::DrillPhase;
use visitors_api::visitors_app::{MemberRole, RoleChange};
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp, conditions};

use crate::problems::{Problem, problems_of};
use crate::snapshot::{AppSnapshot, ManySnapshot, newest, schedule_of};

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    pub namespace: String,
    pub name: String,
    /// When this was read: the ages on screen count from it.
    pub read_at: Timestamp,
    pub ready: bool,
    /// `Ready`, or the reason of the first condition that is not.
    pub state: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    pub conditions: Vec<ConditionView>,
    pub mysql: Mysql,
    pub backend: Tier,
    pub frontend: Tier,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<Replication>,
    pub schedules: Vec<Schedule>,
    /// The newest backup run not of a schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_on_demand: Option<Run>,
    /// The newest run a restore drill has proven restorable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<Verified>,
    pub point_in_time: Vec<Window>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_restore: Option<Restore>,
    pub running: Vec<Activity>,
    pub problems: Vec<Problem>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: Timestamp,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Mysql {
    pub image: Option<String>,
    pub ready_replicas: i32,
    pub replicas: i32,
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    pub mode: String,
    pub secret: Option<String>,
    pub not_after: Option<Timestamp>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Tier {
    pub image: Option<String>,
    pub ready_replicas: i32,
    pub replicas: i32,
    pub endpoint: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Replication {
    pub primary: Option<String>,
    pub members: Vec<Member>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<Handover>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_switchover: Option<Handover>,
    /// The primary's commits a second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_rate: Option<f64>,
    /// What a failover now would wait for its new primary to apply, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_failover_wait_seconds: Option<f64>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub name: String,
    pub role: String,
    pub healthy: bool,
    pub lag_seconds: Option<i64>,
    pub message: Option<String>,
    /// Transactions the primary committed that it has not applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind_primary: Option<i64>,
    /// Transactions it received and has not applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog: Option<i64>,
    /// Transactions it applies a second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apply_rate: Option<f64>,
    /// Seconds until it holds what the primary holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up_seconds: Option<f64>,
    pub falling_behind: bool,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Handover {
    pub time: Timestamp,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    pub write_gap_seconds: Option<f64>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    pub name: String,
    pub cron: String,
    pub time_zone: Option<String>,
    pub suspended: bool,
    pub next_run: Option<Timestamp>,
    pub archiving: bool,
    /// `after each run`, the drill cron, or none.
    pub drill: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Run>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<Verified>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub name: String,
    pub schedule: Option<String>,
    pub phase: String,
    /// `Logical` or `Physical` (`spec.method`).
    pub method: String,
    pub created: Option<Timestamp>,
    pub completed: Option<Timestamp>,
    pub size_bytes: Option<i64>,
    pub duration_seconds: Option<f64>,
    pub tables: Option<i64>,
    pub rows: Option<i64>,
    pub taken_from: Option<String>,
    pub encrypted: bool,
    pub verification: Verification,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum Verification {
    /// No drill has proven it yet.
    Unverified,
    /// A drill is on its way.
    Drilling { phase: String },
    /// A drill restored it and everything matched.
    Verified {
        at: Option<Timestamp>,
        #[serde(rename = "restoreSeconds")]
        restore_seconds: Option<f64>,
    },
    /// The newest drill failed; `BackupDefect` proves the backup wrong for good.
    DrillFailed { reason: String, message: String },
    /// Not a run that can be drilled (failed or unfinished).
    NotApplicable,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    pub run: String,
    pub backed_up: Option<Timestamp>,
    pub verified: Option<Timestamp>,
    /// The restore's own time in its drill: what a restore of it costs.
    pub restore_seconds: Option<f64>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub schedule: String,
    pub oldest_recoverable: Option<Timestamp>,
    pub newest_recoverable: Option<Timestamp>,
    pub archive_lag_seconds: Option<f64>,
    pub segments: Option<i64>,
    pub stored_bytes: Option<i64>,
    /// The `Archiving` condition's reason.
    pub state: Option<String>,
    pub gaps: Vec<Gap>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Gap {
    pub reason: String,
    pub after: Option<Timestamp>,
    pub before: Option<Timestamp>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Restore {
    pub name: String,
    pub phase: String,
    pub source: String,
    pub started: Option<Timestamp>,
    pub completed: Option<Timestamp>,
    pub duration_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ActivityKind {
    Backup,
    Restore,
    Drill,
}

/// Something running now, with how far it got when that can be told.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    pub kind: ActivityKind,
    pub name: String,
    pub phase: String,
    pub started: Option<Timestamp>,
    pub elapsed_seconds: Option<f64>,
    /// What the same work took last time (a backup: the schedule's last run; a restore: the
    /// newest drill's restore time; a drill: the run's last drill).
    pub expected_seconds: Option<f64>,
    /// 0 to 1: a point-in-time replay's share of its span of time, else elapsed over expected
    /// (at most 0.99 until it ends).
    pub progress: Option<f64>,
    pub detail: Option<String>,
}

/// One line of `status` without an app.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppLine {
    pub namespace: String,
    pub name: String,
    pub ready: bool,
    pub state: String,
    pub mysql: String,
    pub last_backup: Option<Run>,
    pub last_verified: Option<Verified>,
    pub newest_recoverable: Option<Timestamp>,
    pub running: usize,
    pub problems: usize,
}

pub fn app_status(snapshot: &AppSnapshot, now: Timestamp) -> AppStatus {
    let app = &snapshot.app;
    let status = app.status.clone().unwrap_or_default();
    let ready = conditions::find(&status.conditions, conditions::READY);
    let schedules: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| b.spec.is_schedule()).collect();
    let runs: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| !b.spec.is_schedule()).collect();
    AppStatus {
        namespace: app.namespace().unwrap_or_default(),
        name: app.name_any(),
        read_at: now,
        ready: ready.is_some_and(|c| c.status == "True"),
        state: ready.map_or_else(|| "NotReconciled".to_string(), |c| c.reason.clone()),
        generation: app.metadata.generation,
        observed_generation: status.observed_generation,
        conditions: status.conditions.iter().map(condition_view).collect(),
        mysql: mysql(app),
        backend: tier(
            status.backend_image.clone(),
            status.backend_ready_replicas,
            app.spec.size,
            status.endpoints.as_ref().and_then(|e| e.backend.clone()),
        ),
        frontend: tier(
            status.frontend_image.clone(),
            status.frontend_ready_replicas,
            app.spec.size,
            status.endpoints.as_ref().and_then(|e| e.frontend.clone()),
        ),
        replication: status.replication.as_deref().filter(|r| !r.members.is_empty()).map(replication),
        schedules: schedules.iter().map(|s| schedule(s, &runs)).collect(),
        last_on_demand: newest(runs.iter().copied().filter(|r| schedule_of(r).is_none())).map(run),
        last_verified: newest_verified(runs.iter().copied()),
        point_in_time: schedules.iter().filter(|s| s.spec.archiving().is_some()).map(|s| window(s)).collect(),
        last_restore: newest(snapshot.restores.iter()).map(restore),
        running: running(&runs, &snapshot.restores, now),
        problems: problems_of(snapshot, now),
    }
}

pub fn app_line(snapshot: &AppSnapshot, now: Timestamp) -> AppLine {
    let status = app_status(snapshot, now);
    let runs = snapshot.backups.iter().filter(|b| !b.spec.is_schedule());
    AppLine {
        namespace: status.namespace,
        name: status.name,
        ready: status.ready,
        state: status.state,
        mysql: match &status.replication {
            Some(replication) => {
                let healthy = replication.members.iter().filter(|m| m.healthy).count();
                format!("{healthy}/{} replicating", replication.members.len())
            }
            None => format!("{}/{}", status.mysql.ready_replicas, status.mysql.replicas),
        },
        last_backup: newest(runs.filter(|r| r.has_ended())).map(run),
        last_verified: status.last_verified,
        newest_recoverable: status.point_in_time.iter().filter_map(|w| w.newest_recoverable).max(),
        running: status.running.len(),
        problems: status.problems.len(),
    }
}

pub fn app_lines(snapshot: &ManySnapshot, now: Timestamp) -> Vec<AppLine> {
    snapshot.per_app().iter().map(|app| app_line(app, now)).collect()
}

/// Every run of the app, newest first.
pub fn runs(snapshot: &AppSnapshot) -> Vec<Run> {
    let mut runs: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| !b.spec.is_schedule()).collect();
    runs.sort_by_key(|r| std::cmp::Reverse((created(*r), r.name_any())));
    runs.into_iter().map(run).collect()
}

fn condition_view(condition: &Condition) -> ConditionView {
    ConditionView {
        type_: condition.type_.clone(),
        status: condition.status.clone(),
        reason: condition.reason.clone(),
        message: condition.message.clone(),
        since: condition.last_transition_time.0,
    }
}

fn mysql(app: &VisitorsApp) -> Mysql {
    let status = app.status.as_ref();
    let replicas = app.spec.mysql.as_ref().and_then(|m| m.replicas).unwrap_or(1);
    Mysql {
        image: status.and_then(|s| s.mysql_image.clone()),
        ready_replicas: status.and_then(|s| s.mysql_ready_replicas).unwrap_or(0),
        replicas,
        endpoint: status.and_then(|s| s.endpoints.as_ref()).and_then(|e| e.database.clone()),
        tls: status.and_then(|s| s.tls.as_ref()).map(|tls| Tls {
            mode: format!("{:?}", tls.mode),
            secret: tls.secret_name.clone(),
            not_after: tls.not_after.as_ref().map(|t| t.0),
        }),
    }
}

fn tier(image: Option<String>, ready: Option<i32>, replicas: i32, endpoint: Option<String>) -> Tier {
    Tier { image, ready_replicas: ready.unwrap_or(0), replicas, endpoint }
}

fn replication(status: &visitors_api::visitors_app::ReplicationStatus) -> Replication {
    Replication {
        primary: status.primary.clone(),
        members: status
            .members
            .iter()
            .map(|m| Member {
                name: m.name.clone(),
                role: format!("{:?}", m.role),
                healthy: matches!(m.role, MemberRole::Primary | MemberRole::Replica),
                lag_seconds: m.lag_seconds,
                message: m.message.clone(),
                behind_primary: m.behind_primary,
                backlog: m.backlog,
                apply_rate: m.apply_rate,
                catch_up_seconds: m.catch_up_seconds,
                falling_behind: m.falling_behind,
            })
            .collect(),
        last_failover: status.last_failover.as_ref().map(handover),
        last_switchover: status.last_switchover.as_ref().map(handover),
        commit_rate: status.commit_rate,
        expected_failover_wait_seconds: status.expected_failover_wait_seconds,
    }
}

fn handover(change: &RoleChange) -> Handover {
    Handover {
        time: change.time.0,
        from: change.from.clone(),
        to: change.to.clone(),
        reason: change.reason.clone(),
        write_gap_seconds: change.write_gap_seconds,
    }
}

fn schedule(schedule: &MySQLBackup, runs: &[&MySQLBackup]) -> Schedule {
    let name = schedule.name_any();
    let own: Vec<&MySQLBackup> = runs.iter().copied().filter(|r| schedule_of(r) == Some(name.as_str())).collect();
    let spec = schedule.spec.schedule.clone().unwrap_or_default();
    let drill = schedule.spec.drill.as_ref().filter(|d| d.enabled());
    Schedule {
        cron: spec.cron.clone(),
        time_zone: spec.time_zone.clone(),
        suspended: spec.suspended(),
        next_run: schedule.status.as_ref().and_then(|s| s.next_schedule_time.as_ref()).map(|t| t.0),
        archiving: schedule.spec.archiving().is_some(),
        drill: drill.map(|d| d.cron.clone().unwrap_or_else(|| "after each run".to_string())),
        last_run: newest(own.iter().copied().filter(|r| r.has_ended())).map(run),
        last_verified: newest_verified(own.iter().copied()),
        name,
    }
}

fn created<K: ResourceExt>(object: &K) -> Option<Timestamp> {
    object.meta().creation_timestamp.as_ref().map(|t| t.0)
}

fn time(t: &Option<Time>) -> Option<Timestamp> {
    t.as_ref().map(|t| t.0)
}

fn newest_verified<'a>(runs: impl Iterator<Item = &'a MySQLBackup>) -> Option<Verified> {
    let run = runs.filter(|r| r.is_verified()).max_by_key(|r| (verified_time(r), r.name_any()))?;
    let status = run.status.as_ref();
    Some(Verified {
        run: run.name_any(),
        backed_up: status.and_then(|s| time(&s.completion_time)),
        verified: verified_time(run),
        restore_seconds: status
            .and_then(|s| s.drill.as_ref())
            .filter(|d| d.phase == DrillPhase::Succeeded)
            .and_then(|d| d.restore_seconds),
    })
}

fn verified_time(run: &MySQLBackup) -> Option<Timestamp> {
    run.status.as_ref().and_then(|s| time(&s.verified_time))
}

pub fn run(run: &MySQLBackup) -> Run {
    let status = run.status.clone().unwrap_or_default();
    Run {
        name: run.name_any(),
        schedule: schedule_of(run).map(str::to_string),
        phase: status.phase.map_or_else(|| "Pending".to_string(), |p| format!("{p:?}")),
        method: format!("{:?}", run.spec.method()),
        created: created(run),
        completed: time(&status.completion_time),
        size_bytes: status.size_bytes,
        duration_seconds: status.duration_seconds,
        tables: status.tables,
        rows: status.rows,
        taken_from: status.taken_from.as_ref().map(|t| format!("{} ({:?})", t.pod, t.role).to_lowercase()),
        encrypted: status.encryption_key_id.is_some(),
        verification: verification(run),
        error: status.error.clone(),
    }
}

fn verification(run: &MySQLBackup) -> Verification {
    let status = run.status.as_ref();
    if status.and_then(|s| s.phase) != Some(BackupPhase::Succeeded) {
        return Verification::NotApplicable;
    }
    let drill = status.and_then(|s| s.drill.as_ref());
    if let Some(drill) = drill.filter(|d| !d.has_ended()) {
        return Verification::Drilling { phase: format!("{:?}", drill.phase) };
    }
    if let Some(drill) = drill.filter(|d| d.phase == DrillPhase::Failed) {
        return Verification::DrillFailed {
            reason: drill.reason.clone().unwrap_or_else(|| "DrillError".to_string()),
            message: drill.message.clone().unwrap_or_default(),
        };
    }
    if run.is_verified() {
        return Verification::Verified {
            at: verified_time(run),
            restore_seconds: drill.and_then(|d| d.restore_seconds),
        };
    }
    Verification::Unverified
}

fn window(schedule: &MySQLBackup) -> Window {
    let status = schedule.status.as_ref();
    let archive = status.and_then(|s| s.point_in_time.clone()).unwrap_or_default();
    Window {
        schedule: schedule.name_any(),
        oldest_recoverable: time(&archive.oldest_recoverable_time),
        newest_recoverable: time(&archive.last_recoverable_time),
        archive_lag_seconds: archive.archive_lag_seconds,
        segments: archive.segments,
        stored_bytes: archive.stored_bytes,
        state: status
            .and_then(|s| conditions::find(&s.conditions, visitors_api::backup::condition::ARCHIVING))
            .map(|c| c.reason.clone()),
        gaps: archive
            .gaps
            .iter()
            .map(|g| Gap { reason: g.reason.clone(), after: time(&g.after_time), before: time(&g.before_time) })
            .collect(),
    }
}

fn restore(restore: &MySQLRestore) -> Restore {
    let status = restore.status.clone().unwrap_or_default();
    Restore {
        name: restore.name_any(),
        phase: status.phase.map_or_else(|| "Pending".to_string(), |p| format!("{p:?}")),
        source: restore_source(restore),
        started: time(&status.start_time),
        completed: time(&status.completion_time),
        duration_seconds: status.duration_seconds,
        error: status.error.clone(),
    }
}

/// What a restore reads, in a few words.
pub fn restore_source(restore: &MySQLRestore) -> String {
    let source = &restore.spec.source;
    if let Some(point) = &source.point_in_time {
        return format!("{} to {}", point.backup, point.target_text());
    }
    if let Some(run) = &source.backup {
        return format!("run {run}");
    }
    source.path.as_ref().map_or_else(|| "a storage location".to_string(), |path| format!("location {path}"))
}

fn running(runs: &[&MySQLBackup], restores: &[MySQLRestore], now: Timestamp) -> Vec<Activity> {
    let mut activities: Vec<Activity> = Vec::new();
    let durations = last_durations(runs);
    for run in runs.iter().filter(|r| !r.has_ended() && r.metadata.deletion_timestamp.is_none()) {
        let status = run.status.clone().unwrap_or_default();
        let started = time(&status.start_time).or_else(|| created(*run));
        let expected = durations.get(&schedule_of(run).map(str::to_string)).copied();
        activities.push(activity(ActivityKind::Backup, run.name_any(), status.phase, started, expected, now));
    }
    for run in runs {
        let Some(drill) = run.status.as_ref().and_then(|s| s.drill.as_ref()).filter(|d| !d.has_ended()) else {
            continue;
        };
        let started = time(&drill.start_time).or(Some(drill.requested_at.0));
        let mut drilling = activity(ActivityKind::Drill, run.name_any(), Some(drill.phase), started, None, now);
        drilling.detail = drill.message.clone();
        activities.push(drilling);
    }
    let expected_restore = newest_verified(runs.iter().copied()).and_then(|v| v.restore_seconds);
    for restore in restores.iter().filter(|r| !r.has_ended()) {
        activities.push(restore_progress(restore, expected_restore, now));
    }
    activities
}

/// A restore's progress: its point-in-time replay's share of its span, else its time so far
/// against `expected`.
pub fn restore_progress(restore: &MySQLRestore, expected: Option<f64>, now: Timestamp) -> Activity {
    let status = restore.status.clone().unwrap_or_default();
    let started = time(&status.start_time).or_else(|| created(restore));
    let mut activity = activity(ActivityKind::Restore, restore.name_any(), status.phase, started, expected, now);
    let waiting = conditions::find(&status.conditions, conditions::READY).filter(|c| c.status != "True");
    activity.detail = waiting.map(|c| format!("{}: {}", c.reason, c.message));
    if let Some(replay) = status.point_in_time.as_ref() {
        let base = time(&replay.base_snapshot_time);
        let applied = time(&replay.last_applied_time);
        let target = restore.spec.source.point_in_time.as_ref().and_then(|p| time(&p.target_time));
        if let (Some(base), Some(applied), Some(target)) = (base, applied, target) {
            let span = target.duration_since(base).as_secs_f64();
            let done = applied.duration_since(base).as_secs_f64();
            activity.progress = (span > 0.0).then(|| (done / span).clamp(0.0, 0.99));
            activity.detail = Some(format!("replayed the archive up to {applied}"));
        }
    }
    activity
}

fn activity<P: std::fmt::Debug>(
    kind: ActivityKind,
    name: String,
    phase: Option<P>,
    started: Option<Timestamp>,
    expected: Option<f64>,
    now: Timestamp,
) -> Activity {
    let elapsed = started.map(|s| now.duration_since(s).as_secs_f64().max(0.0));
    let progress = match (elapsed, expected) {
        (Some(elapsed), Some(expected)) if expected > 0.0 => Some((elapsed / expected).min(0.99)),
        _ => None,
    };
    Activity {
        kind,
        name,
        phase: phase.map_or_else(|| "Pending".to_string(), |p| format!("{p:?}")),
        started,
        elapsed_seconds: elapsed,
        expected_seconds: expected,
        progress,
        detail: None,
    }
}

/// The duration of the newest successful run of each schedule (`None`: on-demand runs).
fn last_durations(runs: &[&MySQLBackup]) -> BTreeMap<Option<String>, f64> {
    let mut newest: BTreeMap<Option<String>, (Option<Timestamp>, f64)> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Succeeded)) {
        let Some(duration) = run.status.as_ref().and_then(|s| s.duration_seconds) else { continue };
        let key = schedule_of(run).map(str::to_string);
        let at = created(*run);
        if newest.get(&key).is_none_or(|(seen, _)| at > *seen) {
            newest.insert(key, (at, duration));
        }
    }
    newest.into_iter().map(|(key, (_, duration))| (key, duration)).collect()
}

/// The expected duration of a backup of `schedule`: its newest successful run's.
pub fn expected_backup_seconds(backups: &[MySQLBackup], schedule: Option<&str>) -> Option<f64> {
    let runs: Vec<&MySQLBackup> = backups.iter().filter(|b| !b.spec.is_schedule()).collect();
    let durations = last_durations(&runs);
    durations.get(&schedule.map(str::to_string)).or_else(|| durations.values().next()).copied()
}

/// The restore time the newest verified run's drill measured, among `backups`.
pub fn expected_restore_seconds(backups: &[MySQLBackup]) -> Option<f64> {
    newest_verified(backups.iter().filter(|b| !b.spec.is_schedule())).and_then(|v| v.restore_seconds)
}
