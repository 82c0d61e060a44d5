//! Facts state in, `VisitorsAppStatus` out. Pure: the controller gathers the observations
//! (workload statuses from the apply responses, the database check) and passes the clock.
//!
//! Messages hold no time and no counter, so an unchanged state computes an identical status and
//! the status write is skipped or is a no-op.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use visitors_api::conditions::{
    self, BACKEND_READY, DATABASE_READY, Desired, FRONTEND_READY, READY, REASON_INVALID_SPEC, REPLICA_FALLING_BEHIND,
    REPLICATING, Status, WRITES_ACKNOWLEDGED,
};
use visitors_api::labels::names;
use visitors_api::visitors_app::{
    BACKEND_PORT, DATABASE_USER, Durability, Endpoints, FRONTEND_PORT, MYSQL_PORT, ReplicationMember,
    ReplicationStatus, TlsMode, TlsStatus, reason,
};
use visitors_api::{VisitorsApp, VisitorsAppStatus};

use crate::build::mysql::client_host;
use crate::build::tls::ServingTls;
pub use crate::database::check::Database;
use crate::replication::model::reason as replication_reason;
use crate::replication::report::Report;
pub use crate::wake::workload::Workload;

/// Everything one reconcile found out about the app: the facts its status is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub secret: String,
    pub mysql: Workload,
    pub database: Database,
    /// The backend as it is; `None` while it has never been rolled out.
    pub backend: Option<Workload>,
    /// The backend was not applied this time because the database is not ready.
    pub backend_held: bool,
    /// The MySQLRestore that keeps the backend stopped (at 0 replicas) while it restores the
    /// database, if any.
    pub quiesced_by: Option<String>,
    pub frontend: Workload,
    /// Children that could not be applied or repaired: what was done and the API's answer.
    pub failed_children: Vec<String>,
    /// The TLS MySQL serves; `None` for plain text.
    pub tls: Option<ServingTls>,
    /// How a replicated app's MySQL servers stand; `None` for a single server.
    pub replication: Option<Report>,
}

impl Facts {
    /// The app waits for the controller's own `SELECT 1`, which no watch reports: it has to be
    /// polled. Everything else it can wait for (pods, rollouts) shows in a workload's status.
    pub fn waits_for_the_query(&self) -> bool {
        matches!(self.database, Database::QueryFailed(_))
    }
}

/// The `BackendReady` (and `Ready`) reason while a restore keeps the backend stopped.
pub const QUIESCED: &str = reason::QUIESCED;

/// The `Ready` reason while a child cannot be applied or repaired.
pub const CHILD_APPLY_FAILED: &str = reason::CHILD_APPLY_FAILED;

/// The status after a reconcile that applied the children.
pub fn compute(app: &VisitorsApp, observed: &Facts, now: Time) -> VisitorsAppStatus {
    let mut status = app.status.clone().unwrap_or_default();
    let generation = app.metadata.generation;
    let name = app.name_any();
    let database = database_condition(&name, &observed.database);
    let backend = match &observed.quiesced_by {
        Some(restore) => quiesced_condition(restore, observed.backend.as_ref()),
        None => backend_condition(observed.backend.as_ref(), observed.backend_held),
    };
    let frontend = workload_condition(FRONTEND_READY, "frontend", Some(&observed.frontend));
    let ready = match observed.failed_children.as_slice() {
        [] => ready_condition([&database, &backend, &frontend]),
        failed => Desired::unmet(READY, CHILD_APPLY_FAILED, failed.join("; ")),
    };
    for desired in [ready, database, backend, frontend] {
        conditions::set(&mut status.conditions, desired, generation, now.clone());
    }
    status.observed_generation = generation;
    status.mysql_image = observed.mysql.image.clone();
    status.mysql_ready_replicas = Some(observed.mysql.ready);
    status.backend_image = observed.backend.as_ref().and_then(|b| b.image.clone());
    status.backend_ready_replicas = observed.backend.as_ref().map(|b| b.ready);
    status.frontend_image = observed.frontend.image.clone();
    status.frontend_ready_replicas = Some(observed.frontend.ready);
    status.credentials_secret = Some(observed.secret.clone());
    status.endpoints = Some(endpoints(app));
    status.tls = Some(tls_status(observed.tls.as_ref()));
    replication_status(app, &mut status, observed.replication.as_ref(), now);
    status
}

/// The positions and rates of a replicated app's status are measured again at most this often while
/// nothing else of it changes: under writes they change at every look, and a status write every
/// 2 s per app is load on the API server that tells nobody anything.
const MEASUREMENT_REFRESH_SECONDS: f64 = 10.0;

/// The replication part of the status, and its three conditions; none for a single server.
fn replication_status(app: &VisitorsApp, status: &mut VisitorsAppStatus, report: Option<&Report>, now: Time) {
    let Some(report) = report else {
        status.replication = None;
        status
            .conditions
            .retain(|c| ![REPLICATING, WRITES_ACKNOWLEDGED, REPLICA_FALLING_BEHIND].contains(&c.type_.as_str()));
        return;
    };
    let previous = status.replication.take().unwrap_or_default();
    let mut replication = ReplicationStatus {
        primary: report.primary.clone(),
        ready_replicas: Some(report.ready_replicas),
        members: report.members.clone(),
        last_failover: report.failover.clone().or(previous.last_failover.clone()),
        last_switchover: report.switchover.clone().or(previous.last_switchover.clone()),
        answered_switchover_request: report.answered_request.clone().or(previous.answered_switchover_request.clone()),
        commit_rate: report.commit_rate,
        expected_failover_wait_seconds: report.expected_failover_wait,
        measured_time: Some(now.clone()),
    };
    let due = previous
        .measured_time
        .as_ref()
        .is_none_or(|read| now.0.duration_since(read.0).as_secs_f64() >= MEASUREMENT_REFRESH_SECONDS);
    if !due {
        keep_the_measurements(&mut replication, &previous);
    }
    status.replication = Some(Box::new(replication));
    let primary = report.primary.as_deref().unwrap_or("none yet");
    let replicating = match &report.problem {
        Some((reason, message)) => {
            Desired { type_: REPLICATING, status: Status::False, reason, message: message.clone() }
        }
        None => Desired::met(
            REPLICATING,
            replication_reason::REPLICATING,
            format!("every replica replicates from primary {primary}"),
        ),
    };
    let acknowledged = match (app.spec.durability(), report.acknowledged) {
        (Durability::Asynchronous, _) => Desired::unmet(
            WRITES_ACKNOWLEDGED,
            reason::ASYNCHRONOUS,
            "spec.mysql.replication.durability is Asynchronous: commits do not wait for a replica, and a failover can lose the last ones",
        ),
        (Durability::Acknowledged, true) => Desired::met(
            WRITES_ACKNOWLEDGED,
            reason::ACKNOWLEDGED,
            format!("a replica acknowledges every commit of primary {primary} before the client hears of it"),
        ),
        (Durability::Acknowledged, false) => Desired::unmet(
            WRITES_ACKNOWLEDGED,
            replication_reason::NO_ACKNOWLEDGING_REPLICA,
            format!("no replica acknowledges the commits of primary {primary}: writes wait until one does"),
        ),
    };
    let falling_behind = match report.falling_behind.as_slice() {
        [] => Desired::unmet(
            REPLICA_FALLING_BEHIND,
            reason::KEEPING_UP,
            format!("every replica applies what primary {primary} commits"),
        ),
        behind => {
            let (replicas, them, their) = match behind.len() {
                1 => ("replica", "it", "its"),
                _ => ("replicas", "them", "their"),
            };
            let message = format!(
                "{replicas} {} applied fewer transactions than primary {primary} committed, falling further behind for minutes: a failover to {them} would wait for {their} backlog (status.replication.members says how far and how fast)",
                behind.join(", ")
            );
            Desired::met(REPLICA_FALLING_BEHIND, reason::FALLING_BEHIND, message)
        }
    };
    for desired in [replicating, acknowledged, falling_behind] {
        conditions::set(&mut status.conditions, desired, app.metadata.generation, now.clone());
    }
}

/// Keeps the positions and rates `previous` showed, and when they were read, for the members
/// still in the same role: they are not due for a refresh yet.
fn keep_the_measurements(replication: &mut ReplicationStatus, previous: &ReplicationStatus) {
    replication.commit_rate = previous.commit_rate;
    replication.expected_failover_wait_seconds = previous.expected_failover_wait_seconds;
    replication.measured_time = previous.measured_time.clone();
    for member in &mut replication.members {
        let before = previous.members.iter().find(|m| m.name == member.name && m.role == member.role);
        let kept = before.cloned().unwrap_or_default();
        *member = ReplicationMember {
            received: kept.received,
            applied: kept.applied,
            backlog: kept.backlog,
            behind_primary: kept.behind_primary,
            apply_rate: kept.apply_rate,
            catch_up_seconds: kept.catch_up_seconds,
            lag_seconds: if before.is_some() { kept.lag_seconds } else { member.lag_seconds },
            ..member.clone()
        };
    }
}

fn tls_status(tls: Option<&ServingTls>) -> TlsStatus {
    match tls {
        Some(tls) => TlsStatus {
            mode: TlsMode::Required,
            secret_name: Some(tls.secret_name.clone()),
            not_after: Some(Time(tls.not_after)),
        },
        None => TlsStatus { mode: TlsMode::Disabled, secret_name: None, not_after: None },
    }
}

/// The status when the app cannot be reconciled (a step stopped for `reason`, saying
/// `message`): `Ready=False` with the reason, and the other conditions `Unknown` for the same
/// reason; the rest of the status is left as it was.
pub fn stopped(app: &VisitorsApp, reason: &'static str, message: String, now: Time) -> VisitorsAppStatus {
    let mut status = app.status.clone().unwrap_or_default();
    let generation = app.metadata.generation;
    conditions::set(&mut status.conditions, Desired::unmet(READY, reason, message), generation, now.clone());
    for type_ in [DATABASE_READY, BACKEND_READY, FRONTEND_READY] {
        let message = "not reconciled until the problem in the Ready condition is fixed".to_string();
        conditions::set(
            &mut status.conditions,
            Desired { type_, status: Status::Unknown, reason, message },
            generation,
            now.clone(),
        );
    }
    status.observed_generation = generation;
    status
}

/// The Event that tells a user of a change of the Ready condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    Normal { reason: String, note: String },
    Warning { reason: String, note: String },
}

/// Reasons that need a user's action (the rest are progress).
const PROBLEMS: [&str; 4] = [
    REASON_INVALID_SPEC,
    reason::INVALID_CREDENTIALS_SECRET,
    reason::CREDENTIALS_LOST,
    reason::CREDENTIALS_SECRET_CONFLICT,
];

/// How a change of the Ready condition from `before` to `after` is told, when it matters to a
/// user: a problem (Warning), becoming ready, and losing readiness. The progress of a new app
/// is in its status only: at scale an Event per app and step is thousands of writes to the API
/// server. A child that cannot be applied is told by the error policy's Warning, with the API
/// error.
pub fn announcement(before: Option<&Condition>, after: &Condition) -> Option<Announcement> {
    let same = |b: &Condition| (&b.status, &b.reason, &b.message) == (&after.status, &after.reason, &after.message);
    if before.is_some_and(same) {
        return None;
    }
    let was_ready = before.is_some_and(|b| b.status == "True");
    let (reason, note) = (after.reason.clone(), after.message.clone());
    match (after.status.as_str(), after.reason.as_str()) {
        (_, CHILD_APPLY_FAILED) => None,
        ("True", _) => Some(Announcement::Normal { reason: reason::READY.to_string(), note }),
        (_, problem) if PROBLEMS.contains(&problem) => Some(Announcement::Warning { reason, note }),
        _ if was_ready => Some(Announcement::Normal { reason, note }),
        _ => None,
    }
}

fn database_condition(app: &str, database: &Database) -> Desired<'static> {
    let service = names::mysql(app);
    let (status, reason, message) = match database {
        Database::PodNotReady => (
            Status::False,
            reason::WAITING_FOR_MYSQL_POD,
            format!("waiting for the MySQL pod to pass its readiness probe (SELECT 1 as user {DATABASE_USER})"),
        ),
        Database::QueryFailed(why) => (
            Status::False,
            reason::WAITING_FOR_CONNECTION,
            format!("the MySQL pod is ready; waiting for the controller's SELECT 1 through Service {service}: {why}"),
        ),
        Database::Connected => {
            (Status::True, reason::CONNECTED, format!("SELECT 1 through Service {service} succeeds"))
        }
        Database::PodReady => (
            Status::True,
            reason::POD_READY,
            "the MySQL pod passes its readiness probe (the controller's own query is switched off)".to_string(),
        ),
    };
    Desired { type_: DATABASE_READY, status, reason, message }
}

fn backend_condition(backend: Option<&Workload>, held: bool) -> Desired<'static> {
    if held && backend.is_none() {
        return Desired::unmet(
            BACKEND_READY,
            reason::WAITING_FOR_DATABASE,
            "the backend is rolled out once the database is ready",
        );
    }
    let mut desired = workload_condition(BACKEND_READY, "backend", backend);
    if held && desired.status != Status::True {
        desired.message.push_str("; spec changes wait until the database is ready");
    }
    desired
}

/// The backend is stopped for a restore: not ready, and saying which restore and until when.
fn quiesced_condition(restore: &str, backend: Option<&Workload>) -> Desired<'static> {
    let stopped = backend.is_none_or(|b| b.total == 0);
    let state = if stopped { "is stopped" } else { "is stopping" };
    Desired::unmet(
        BACKEND_READY,
        QUIESCED,
        format!(
            "MySQLRestore {restore} is restoring the database: the backend {state} (0 replicas) until the restore ends"
        ),
    )
}

fn workload_condition(type_: &'static str, tier: &str, workload: Option<&Workload>) -> Desired<'static> {
    let (status, reason, message) = match workload {
        Some(w) if w.desired == 0 && w.rolled_out() => {
            (Status::True, reason::SCALED_TO_ZERO, format!("the {tier} is scaled to zero replicas"))
        }
        Some(w) if w.rolled_out() => (Status::True, reason::AVAILABLE, format!("every {tier} replica is ready")),
        Some(w) if !w.current || w.updated < w.desired => {
            (Status::False, reason::ROLLING_OUT, format!("the {tier} is rolling out its latest spec"))
        }
        Some(_) => {
            (Status::False, reason::WAITING_FOR_REPLICAS, format!("waiting for {tier} replicas to become ready"))
        }
        None => (Status::False, reason::NOT_CREATED, format!("the {tier} does not exist yet")),
    };
    Desired { type_, status, reason, message }
}

fn ready_condition(parts: [&Desired<'static>; 3]) -> Desired<'static> {
    match parts.into_iter().find(|c| c.status != Status::True) {
        Some(blocking) => Desired::unmet(READY, blocking.reason, blocking.message.clone()),
        None => Desired::met(READY, reason::READY, "the database, the backend and the frontend are ready"),
    }
}

fn endpoints(app: &VisitorsApp) -> Endpoints {
    let name = app.name_any();
    let namespace = app.namespace().unwrap_or_default();
    Endpoints {
        database: Some(format!("{}:{MYSQL_PORT}", client_host(app))),
        backend: Some(format!("http://{}.{namespace}.svc:{BACKEND_PORT}", names::backend(&name))),
        frontend: Some(format!("http://{}.{namespace}.svc:{FRONTEND_PORT}", names::frontend(&name))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;
    use visitors_api::conditions::{find, is_true};

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn ready(replicas: i32, image: &str) -> Workload {
        Workload {
            desired: replicas,
            ready: replicas,
            updated: replicas,
            total: replicas,
            available: replicas,
            current: true,
            image: Some(image.into()),
        }
    }

    fn converged() -> Facts {
        Facts {
            secret: "ex-mysql-credentials".into(),
            mysql: ready(1, "mysql:8.4"),
            database: Database::Connected,
            backend: Some(ready(1, "jdob/visitors-service:1.0.0")),
            backend_held: false,
            quiesced_by: None,
            frontend: ready(1, "jdob/visitors-webui:1.0.0"),
            failed_children: Vec::new(),
            tls: None,
            replication: None,
        }
    }

    #[test]
    fn converged_app_is_ready() {
        let status = compute(&book_app(), &converged(), at(1));
        for type_ in [READY, DATABASE_READY, BACKEND_READY, FRONTEND_READY] {
            assert!(is_true(&status.conditions, type_), "{type_}: {:?}", status.conditions);
        }
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.backend_image.as_deref(), Some("jdob/visitors-service:1.0.0"));
        assert_eq!(status.backend_ready_replicas, Some(1));
        assert_eq!(status.credentials_secret.as_deref(), Some("ex-mysql-credentials"));
        assert_eq!(status.endpoints.unwrap().database.as_deref(), Some("ex-mysql.shop.svc:3306"));
    }

    #[test]
    fn waiting_for_the_pod_names_the_check() {
        let observed = Facts {
            mysql: Workload { ready: 0, ..ready(1, "mysql:8.4") },
            database: Database::PodNotReady,
            backend: None,
            backend_held: true,
            ..converged()
        };
        let status = compute(&book_app(), &observed, at(1));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "WaitingForMysqlPod"));
        assert!(ready.message.contains("readiness probe"), "{}", ready.message);
        assert_eq!(find(&status.conditions, BACKEND_READY).unwrap().reason, "WaitingForDatabase");
        assert_eq!(status.backend_image, None);
    }

    #[test]
    fn waiting_for_the_query_says_why() {
        let observed = Facts {
            database: Database::QueryFailed("access denied".into()),
            backend: None,
            backend_held: true,
            ..converged()
        };
        let status = compute(&book_app(), &observed, at(1));
        let db = find(&status.conditions, DATABASE_READY).unwrap();
        assert_eq!(db.reason, "WaitingForConnection");
        assert!(db.message.contains("SELECT 1") && db.message.ends_with("access denied"), "{}", db.message);
    }

    #[test]
    fn a_child_that_cannot_be_applied_is_named_while_the_rest_is_reported() {
        let failure = "applying Service ex-mysql failed: the API server rejected it: Service \"ex-mysql\" is invalid: spec.ports[1].name: Duplicate value: \"mysql\"";
        let observed = Facts { failed_children: vec![failure.to_string()], ..converged() };
        let status = compute(&book_app(), &observed, at(1));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", CHILD_APPLY_FAILED));
        assert_eq!(ready.message, failure);
        assert!(is_true(&status.conditions, DATABASE_READY), "the other children are still reported");
        assert_eq!(status.frontend_ready_replicas, Some(1));
    }

    #[test]
    fn scaling_up_is_not_ready_until_replicas_are() {
        let observed =
            Facts { backend: Some(Workload { desired: 3, ready: 1, updated: 3, ..ready(3, "b") }), ..converged() };
        let status = compute(&book_app(), &observed, at(1));
        assert_eq!(find(&status.conditions, READY).unwrap().reason, "WaitingForReplicas");
        let stale = Facts { backend: Some(Workload { current: false, ..ready(3, "b") }), ..converged() };
        assert!(!stale.backend.as_ref().unwrap().rolled_out());
        // A new template that crash-loops while the old pod still serves: ready counts the
        // old pod, but one pod of the old template is left.
        let stuck = Workload { desired: 1, ready: 1, updated: 1, total: 2, available: 1, ..ready(1, "b:new") };
        assert!(!stuck.rolled_out(), "a rollout with an old pod left is not done");
        assert_eq!(find(&compute(&book_app(), &stale, at(1)).conditions, BACKEND_READY).unwrap().reason, "RollingOut");
    }

    #[test]
    fn a_restore_stops_the_backend_and_says_so() {
        let stopping = Facts { quiesced_by: Some("r1".into()), ..converged() };
        let status = compute(&book_app(), &stopping, at(1));
        let backend = find(&status.conditions, BACKEND_READY).unwrap();
        assert_eq!((backend.status.as_str(), backend.reason.as_str()), ("False", QUIESCED));
        assert!(
            backend.message.contains("MySQLRestore r1") && backend.message.contains("is stopping"),
            "{}",
            backend.message
        );
        assert_eq!(find(&status.conditions, READY).unwrap().reason, QUIESCED);

        let stopped = Facts { backend: Some(Workload { total: 0, ..ready(0, "b") }), ..stopping };
        let status = compute(&book_app(), &stopped, at(1));
        assert!(find(&status.conditions, BACKEND_READY).unwrap().message.contains("is stopped"));
    }

    #[test]
    fn size_zero_is_ready() {
        let observed = Facts { backend: Some(ready(0, "b")), ..converged() };
        let status = compute(&book_app(), &observed, at(1));
        assert_eq!(find(&status.conditions, BACKEND_READY).unwrap().reason, "ScaledToZero");
        assert!(is_true(&status.conditions, READY));
    }

    #[test]
    fn recomputing_an_unchanged_state_changes_nothing() {
        let mut app = book_app();
        app.status = Some(compute(&app, &converged(), at(1)));
        let again = compute(&app, &converged(), at(500));
        assert_eq!(Some(again), app.status, "same observations must give the same status, times included");
    }

    /// A replicated app whose replica `ex-mysql-1` is `behind` transactions behind, applying
    /// `rate` a second, falling behind or not.
    fn replicated(behind: i64, rate: f64, falling_behind: bool) -> (VisitorsApp, Facts) {
        let mut app = book_app();
        app.spec.mysql =
            Some(Box::new(visitors_api::visitors_app::MysqlSpec { replicas: Some(2), ..Default::default() }));
        let member = |name: &str, role| ReplicationMember { name: name.into(), role, ..ReplicationMember::default() };
        let report = Report {
            primary: Some("ex-mysql-0".into()),
            members: vec![
                member("ex-mysql-0", visitors_api::visitors_app::MemberRole::Primary),
                ReplicationMember {
                    behind_primary: Some(behind),
                    apply_rate: Some(rate),
                    falling_behind,
                    lag_seconds: Some(behind / 1000),
                    ..member("ex-mysql-1", visitors_api::visitors_app::MemberRole::Replica)
                },
            ],
            ready_replicas: 1,
            acknowledged: true,
            commit_rate: Some(rate),
            falling_behind: if falling_behind { vec!["ex-mysql-1".into()] } else { Vec::new() },
            ..Report::default()
        };
        (app, Facts { replication: Some(report), ..converged() })
    }

    /// Positions and rates change at every look under writes: they are written at most every
    /// 10 s while nothing else changes, and a replica falling behind is a condition at once.
    #[test]
    fn positions_and_rates_are_measured_again_every_ten_seconds_and_a_replica_falling_behind_is_a_condition() {
        let (mut app, observed) = replicated(40, 1500.0, false);
        app.status = Some(compute(&app, &observed, at(100)));
        let falling = find(&app.status.as_ref().unwrap().conditions, REPLICA_FALLING_BEHIND).cloned().unwrap();
        assert_eq!((falling.status.as_str(), falling.reason.as_str()), ("False", reason::KEEPING_UP));

        let (_, moved) = replicated(90, 1520.0, false);
        let soon = compute(&app, &moved, at(105));
        assert_eq!(Some(&soon), app.status.as_ref(), "5 s later the same status: nothing to write");
        let later = compute(&app, &moved, at(110));
        let replica = &later.replication.as_ref().unwrap().members[1];
        assert_eq!((replica.behind_primary, replica.apply_rate), (Some(90), Some(1520.0)), "10 s later, refreshed");
        assert_eq!(later.replication.as_ref().unwrap().measured_time, Some(at(110)));

        let (_, behind) = replicated(120_000, 900.0, true);
        let status = compute(&app, &behind, at(103));
        let falling = find(&status.conditions, REPLICA_FALLING_BEHIND).cloned().unwrap();
        assert_eq!((falling.status.as_str(), falling.reason.as_str()), ("True", reason::FALLING_BEHIND));
        assert!(
            falling.message.contains("ex-mysql-1") && !falling.message.contains("120"),
            "no counter: {}",
            falling.message
        );
        assert!(status.replication.as_ref().unwrap().members[1].falling_behind, "the member says so at once");
    }

    #[test]
    fn invalid_spec_sets_every_condition() {
        let mut app = book_app();
        app.metadata.generation = Some(4);
        app.spec.size = 99;
        let err = crate::validate::app(&app).unwrap_err();
        let status = stopped(&app, err.reason(), err.to_string(), at(1));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidSpec"));
        assert!(ready.message.contains("spec.size"), "{}", ready.message);
        assert_eq!(find(&status.conditions, BACKEND_READY).unwrap().status, "Unknown");
        assert_eq!(status.observed_generation, Some(4));
    }

    fn ready_condition_as(status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: at(1),
            observed_generation: None,
        }
    }

    /// Which changes of the Ready condition a user hears of, and how.
    #[test]
    fn problems_readiness_and_its_loss_are_announced_and_progress_is_not() {
        let ready = ready_condition_as("True", "Ready", "all ready");
        let rolling = ready_condition_as("False", "RollingOut", "the backend is rolling out");
        let bad_secret = ready_condition_as("False", "InvalidCredentialsSecret", "Secret x is missing");
        let failed_child = ready_condition_as("False", CHILD_APPLY_FAILED, "applying Service x failed");
        let normal = |reason: &str, note: &str| Some(Announcement::Normal { reason: reason.into(), note: note.into() });
        let cases = [
            (None, &rolling, None),
            (Some(&rolling), &ready, normal("Ready", "all ready")),
            (Some(&ready), &ready, None),
            (Some(&ready), &rolling, normal("RollingOut", "the backend is rolling out")),
            (
                None,
                &bad_secret,
                Some(Announcement::Warning {
                    reason: "InvalidCredentialsSecret".into(),
                    note: "Secret x is missing".into(),
                }),
            ),
            (Some(&bad_secret), &bad_secret, None),
            (Some(&ready), &failed_child, None),
        ];
        for (before, after, told) in cases {
            assert_eq!(announcement(before, after), told, "{before:?} -> {after:?}");
        }
    }

    #[test]
    fn workload_state_is_read_from_objects() {
        use k8s_openapi::api::apps::v1::DeploymentStatus;
        let app = book_app();
        let mut deployment = crate::build::backend::deployment(&app, "c", None);
        deployment.metadata.generation = Some(2);
        deployment.status = Some(DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(1),
            ready_replicas: Some(1),
            updated_replicas: Some(1),
            available_replicas: Some(1),
            ..DeploymentStatus::default()
        });
        let workload = Workload::from_deployment(&deployment);
        assert!(workload.rolled_out());
        assert_eq!(workload.image.as_deref(), Some("jdob/visitors-service:1.0.0"));
        deployment.metadata.generation = Some(3);
        assert!(!Workload::from_deployment(&deployment).rolled_out());
    }

    #[test]
    fn a_statefulset_updated_on_delete_is_rolled_out_once_every_pod_is_at_the_update_revision() {
        use k8s_openapi::api::apps::v1::StatefulSetStatus;
        use visitors_api::visitors_app::MysqlSpec;
        let mut app = book_app();
        app.spec.mysql = Some(Box::new(MysqlSpec { replicas: Some(3), ..MysqlSpec::default() }));
        let mut sts = crate::build::mysql::statefulset(&app, "c", Default::default(), None);
        sts.metadata.generation = Some(2);
        let status = |updated| StatefulSetStatus {
            observed_generation: Some(2),
            replicas: 3,
            ready_replicas: Some(3),
            available_replicas: Some(3),
            updated_replicas: Some(updated),
            // `OnDelete`: the StatefulSet controller never moves it.
            current_revision: Some("ex-mysql-old".into()),
            update_revision: Some("ex-mysql-new".into()),
            ..StatefulSetStatus::default()
        };
        sts.status = Some(status(2));
        assert!(!Workload::from_statefulset(&sts).rolled_out(), "one pod is not updated yet");
        sts.status = Some(status(3));
        assert!(Workload::from_statefulset(&sts).rolled_out());
    }
}
