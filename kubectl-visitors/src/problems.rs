//! Everything wrong with an app and its backups, each with what to do: a pure reading of the
//! resources' conditions and statuses.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use serde::Serialize;
use visitors_api::backup::{BackupPhase, condition as backup_condition};
use visitors_api::drill::DrillPhase;
use visitors_api::restore::RestorePhase;
use visitors_api::visitors_app::MemberRole;
use visitors_api::{MySQLBackup, MySQLRestore, conditions};

use crate::runbook;
use crate::snapshot::{AppSnapshot, newest, schedule_of};

/// A certificate this close to its expiry is a problem: the controller renews the ones it
/// generates well before (docs/visitors-controller.md), so this means renewal is not happening.
const CERTIFICATE_WARNING_DAYS: i64 = 7;

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// `Kind/name`.
    pub object: String,
    pub reason: String,
    pub message: String,
    pub what_to_do: Option<String>,
    pub runbook: Option<String>,
}

impl Problem {
    fn new(object: String, reason: &str, message: String) -> Self {
        Problem {
            object,
            reason: reason.to_string(),
            message,
            what_to_do: runbook::what_to_do(reason),
            runbook: runbook::what_to_do(reason).map(|_| runbook::link(reason)),
        }
    }
}

pub fn problems_of(snapshot: &AppSnapshot, now: Timestamp) -> Vec<Problem> {
    let mut problems = app_problems(snapshot, now);
    let schedules: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| b.spec.is_schedule()).collect();
    let runs: Vec<&MySQLBackup> = snapshot.backups.iter().filter(|b| !b.spec.is_schedule()).collect();
    for schedule in &schedules {
        problems.extend(schedule_problems(schedule, &runs, now));
    }
    if let Some(run) = newest(runs.iter().copied().filter(|r| schedule_of(r).is_none())) {
        problems.extend(run_problems(run));
    }
    problems.extend(restore_problem(&snapshot.restores));
    problems
}

fn app_problems(snapshot: &AppSnapshot, now: Timestamp) -> Vec<Problem> {
    let app = &snapshot.app;
    let object = format!("VisitorsApp/{}", app.name_any());
    let Some(status) = app.status.as_ref() else {
        let message = "no status yet: is the visitors-controller running? (`kubectl get pods -n <operator namespace>`)";
        return vec![Problem::new(object, "NotReconciled", message.to_string())];
    };
    let mut problems: Vec<Problem> = failing(&status.conditions, &[conditions::READY])
        .map(|c| Problem::new(object.clone(), &c.reason, c.message.clone()))
        .collect();
    if let Some(ready) = conditions::find(&status.conditions, conditions::READY)
        && ready.status != "True"
        && !problems.iter().any(|p| p.reason == ready.reason)
    {
        problems.insert(0, Problem::new(object.clone(), &ready.reason, ready.message.clone()));
    }
    for member in status.replication.iter().flat_map(|r| &r.members) {
        let reason = format!("{:?}", member.role);
        // A condition with the same reason already names the server.
        let told = problems.iter().any(|p| p.reason == reason);
        if !matches!(member.role, MemberRole::Primary | MemberRole::Replica) && !told {
            let message = format!("{}: {}", member.name, member.message.clone().unwrap_or_default());
            problems.push(Problem::new(format!("Pod/{}", member.name), &reason, message));
        }
    }
    if let Some(not_after) = status.tls.as_ref().and_then(|t| t.not_after.as_ref()).map(|t| t.0) {
        let left = not_after.duration_since(now);
        if left < SignedDuration::from_hours(24 * CERTIFICATE_WARNING_DAYS) {
            let message = format!(
                "the MySQL server certificate expires at {not_after}: a certificate the controller generated is renewed long before (see its log); one from your own Secret (spec.tls.secretName) must be renewed by you"
            );
            problems.push(Problem::new(object, "CertificateExpiring", message));
        }
    }
    problems
}

/// Conditions that tell of a problem (see `conditions::tells_a_problem`), but not of the types in `skip`.
fn failing<'a>(all: &'a [Condition], skip: &'a [&str]) -> impl Iterator<Item = &'a Condition> {
    all.iter().filter(move |c| conditions::tells_a_problem(c) && !skip.contains(&c.type_.as_str()))
}

fn schedule_problems(schedule: &MySQLBackup, runs: &[&MySQLBackup], now: Timestamp) -> Vec<Problem> {
    let name = schedule.name_any();
    let object = format!("MySQLBackup/{name}");
    let status = schedule.status.clone().unwrap_or_default();
    // The newest run speaks for LastBackupSucceeded, with its own reason and error.
    let skip = [conditions::READY, backup_condition::LAST_BACKUP_SUCCEEDED];
    let mut problems: Vec<Problem> = failing(&status.conditions, &skip)
        .filter(|c| c.type_ != backup_condition::ARCHIVING || schedule.spec.archiving().is_some())
        .map(|c| Problem::new(object.clone(), &c.reason, c.message.clone()))
        .collect();
    if let Some(ready) = conditions::find(&status.conditions, conditions::READY).filter(|c| c.status == "False")
        && !problems.iter().any(|p| p.reason == ready.reason)
    {
        problems.push(Problem::new(object.clone(), &ready.reason, ready.message.clone()));
    }
    let own: Vec<&MySQLBackup> = runs.iter().copied().filter(|r| schedule_of(r) == Some(name.as_str())).collect();
    if let Some(newest) = newest(own.iter().copied().filter(|r| r.has_ended())) {
        problems.extend(run_problems(newest));
    }
    if let Some(drilled) = newest_drilled(&own) {
        problems.extend(drill_problem(drilled));
    }
    problems.extend(unverified_problem(schedule, &own, now));
    problems
}

fn run_problems(run: &MySQLBackup) -> Option<Problem> {
    let status = run.status.as_ref()?;
    if status.phase != Some(BackupPhase::Failed) {
        return None;
    }
    let object = format!("MySQLBackup/{}", run.name_any());
    Some(failed(object, &status.conditions, status.error.as_deref(), "BackupFailed"))
}

fn newest_drilled<'a>(runs: &[&'a MySQLBackup]) -> Option<&'a MySQLBackup> {
    runs.iter()
        .copied()
        .filter(|r| r.status.as_ref().and_then(|s| s.drill.as_ref()).is_some_and(|d| d.has_ended()))
        .max_by_key(|r| r.status.as_ref().and_then(|s| s.drill.as_ref()).map(|d| d.requested_at.0))
}

fn drill_problem(run: &MySQLBackup) -> Option<Problem> {
    let drill = run.status.as_ref()?.drill.as_ref()?;
    if drill.phase != DrillPhase::Failed {
        return None;
    }
    let reason = drill.reason.clone().unwrap_or_else(|| "DrillError".to_string());
    let message = format!("its restore drill failed: {}", drill.message.clone().unwrap_or_default());
    Some(Problem::new(format!("MySQLBackup/{}", run.name_any()), &reason, message))
}

/// A drilling schedule whose newest verified run is older than `maxUnverifiedAge`.
fn unverified_problem(schedule: &MySQLBackup, runs: &[&MySQLBackup], now: Timestamp) -> Option<Problem> {
    let drill = schedule.spec.drill.as_ref().filter(|d| d.enabled())?;
    let limit = SignedDuration::try_from(drill.max_unverified_age()).ok()?;
    let verified = runs.iter().filter_map(|r| r.status.as_ref()?.verified_time.as_ref().map(|t| t.0)).max();
    let since = verified.or_else(|| schedule.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    if now.duration_since(since) <= limit {
        return None;
    }
    let message = match verified {
        Some(at) => format!("no run of this schedule was proven restorable since {at} (maxUnverifiedAge {limit:#})"),
        None => format!("no run of this schedule was ever proven restorable (maxUnverifiedAge {limit:#})"),
    };
    Some(Problem::new(format!("MySQLBackup/{}", schedule.name_any()), "VisitorsBackupUnverified", message))
}

fn restore_problem(restores: &[MySQLRestore]) -> Option<Problem> {
    let newest = newest(restores.iter())?;
    let status = newest.status.as_ref()?;
    if status.phase != Some(RestorePhase::Failed) {
        return None;
    }
    let object = format!("MySQLRestore/{}", newest.name_any());
    Some(failed(object, &status.conditions, status.error.as_deref(), "RestoreFailed"))
}

/// An operation that ended `Failed`: the reason of its `Ready` condition, and its error.
fn failed(object: String, all: &[Condition], error: Option<&str>, otherwise: &str) -> Problem {
    let reason = conditions::find(all, conditions::READY).map_or(otherwise, |c| c.reason.as_str());
    Problem::new(object, reason, error.unwrap_or("it failed without an error message").to_string())
}

/// `\n  What to do: ...` for a reason the runbook explains, else nothing.
pub fn what_to_do_line(reason: &str) -> String {
    runbook::what_to_do(reason).map(|w| format!("\n  What to do: {w}\n  {}", runbook::link(reason))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const NOW: &str = "2026-11-28T12:00:00Z";

    fn condition(type_: &str, status: &str, reason: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": format!("{reason} happened"),
               "lastTransitionTime": "2026-11-28T00:00:00Z"})
    }

    fn app(status: Option<Value>) -> visitors_api::VisitorsApp {
        let mut app = json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp",
            "metadata": {"name": "shop", "namespace": "prod"}, "spec": {"size": 1}});
        if let Some(status) = status {
            app["status"] = status;
        }
        serde_json::from_value(app).unwrap()
    }

    fn healthy() -> Value {
        json!({"conditions": [condition("Ready", "True", "Ready")],
               "tls": {"mode": "Required", "notAfter": "2027-02-01T00:00:00Z"}})
    }

    fn schedule(created: &str, conditions: Vec<Value>) -> MySQLBackup {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "nightly", "namespace": "prod", "creationTimestamp": created},
            "spec": {"source": {"visitorsApp": "shop"}, "storage": {"persistentVolumeClaim": {"claimName": "b"}},
                     "schedule": {"cron": "0 3 * * *"}, "pointInTime": {}, "drill": {}},
            "status": {"conditions": conditions}}))
        .unwrap()
    }

    fn run(name: &str, created: &str, status: Value) -> MySQLBackup {
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": name, "namespace": "prod", "creationTimestamp": created,
                         "labels": {"example.com/backup-schedule": "nightly"}},
            "spec": {"source": {"visitorsApp": "shop"}, "storage": {"persistentVolumeClaim": {"claimName": "b"}}},
            "status": status}))
        .unwrap()
    }

    fn verified(name: &str, at: &str) -> MySQLBackup {
        run(
            name,
            at,
            json!({"phase": "Succeeded", "verifiedTime": at,
            "drill": {"phase": "Succeeded", "requestedAt": at}}),
        )
    }

    fn reasons(app: visitors_api::VisitorsApp, backups: Vec<MySQLBackup>, restores: Vec<MySQLRestore>) -> Vec<String> {
        let snapshot = AppSnapshot { app, backups, restores };
        problems_of(&snapshot, NOW.parse().unwrap()).into_iter().map(|p| format!("{} {}", p.object, p.reason)).collect()
    }

    #[test]
    fn each_kind_of_trouble_is_one_problem_and_a_healthy_app_has_none() {
        let fresh = "2026-11-28T03:00:00Z";
        let ok_schedule = || schedule(fresh, vec![condition("Ready", "True", "Scheduled")]);
        let failed_restore: MySQLRestore = serde_json::from_value(json!({"apiVersion": "example.com/v1",
            "kind": "MySQLRestore", "metadata": {"name": "r1", "namespace": "prod"},
            "spec": {"source": {"backup": "x"}, "target": {"visitorsApp": "shop"}},
            "status": {"phase": "Failed", "error": "checksum", "conditions": [condition("Ready", "False", "AgentFailed")]}}))
        .unwrap();
        let expiring = json!({"conditions": [condition("Ready", "True", "Ready")],
            "tls": {"mode": "Required", "notAfter": "2026-11-30T00:00:00Z"}});
        let not_ready = json!({"conditions": [condition("Ready", "False", "WaitingForMysqlPod"),
            condition("DatabaseReady", "False", "WaitingForMysqlPod")]});
        let cases: Vec<(&str, Vec<String>, Vec<&str>)> = vec![
            ("healthy", reasons(app(Some(healthy())), vec![ok_schedule(), verified("n-1", fresh)], vec![]), vec![]),
            ("no status", reasons(app(None), vec![], vec![]), vec!["VisitorsApp/shop NotReconciled"]),
            (
                "not ready, said once",
                reasons(app(Some(not_ready)), vec![], vec![]),
                vec!["VisitorsApp/shop WaitingForMysqlPod"],
            ),
            ("certificate", reasons(app(Some(expiring)), vec![], vec![]), vec!["VisitorsApp/shop CertificateExpiring"]),
            (
                "invalid schedule, said once",
                reasons(
                    app(Some(healthy())),
                    vec![schedule(
                        fresh,
                        vec![
                            condition("Ready", "False", "InvalidSchedule"),
                            condition("ScheduleValid", "False", "InvalidSchedule"),
                        ],
                    )],
                    vec![],
                ),
                vec!["MySQLBackup/nightly InvalidSchedule"],
            ),
            (
                "archiver down",
                reasons(
                    app(Some(healthy())),
                    vec![
                        schedule(fresh, vec![condition("Archiving", "False", "ArchiverDown")]),
                        verified("n-1", fresh),
                    ],
                    vec![],
                ),
                vec!["MySQLBackup/nightly ArchiverDown"],
            ),
            (
                "newest run failed, an older one's failure forgotten",
                reasons(
                    app(Some(healthy())),
                    vec![
                        ok_schedule(),
                        run("n-1", "2026-11-26T03:00:00Z", json!({"phase": "Failed", "error": "old"})),
                        verified("n-2", "2026-11-27T03:00:00Z"),
                        run(
                            "n-3",
                            fresh,
                            json!({"phase": "Failed", "error": "disk full",
                            "conditions": [condition("Ready", "False", "AgentFailed")]}),
                        ),
                    ],
                    vec![],
                ),
                vec!["MySQLBackup/n-3 AgentFailed"],
            ),
            (
                "defective backup",
                reasons(
                    app(Some(healthy())),
                    vec![
                        ok_schedule(),
                        verified("n-1", fresh),
                        run(
                            "n-2",
                            fresh,
                            json!({"phase": "Succeeded",
                        "drill": {"phase": "Failed", "requestedAt": "2026-11-28T04:00:00Z", "reason": "BackupDefect"}}),
                        ),
                    ],
                    vec![],
                ),
                vec!["MySQLBackup/n-2 BackupDefect"],
            ),
            (
                "unverified for too long",
                reasons(
                    app(Some(healthy())),
                    vec![schedule("2026-11-20T00:00:00Z", vec![]), verified("n-1", "2026-11-24T00:00:00Z")],
                    vec![],
                ),
                vec!["MySQLBackup/nightly VisitorsBackupUnverified"],
            ),
            (
                "failed restore",
                reasons(app(Some(healthy())), vec![], vec![failed_restore]),
                vec!["MySQLRestore/r1 AgentFailed"],
            ),
        ];
        for (case, got, expected) in cases {
            assert_eq!(got, expected, "{case}");
        }
    }
}
