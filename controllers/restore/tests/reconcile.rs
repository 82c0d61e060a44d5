//! MySQLRestore reconciles against the mock API server, which asserts every request in order.

use std::sync::Arc;
use std::time::Duration;

use controller_common::operation::AgentSettings;
use controller_common::testing::shop::{
    self, APP_PATH, CLAIM_PATH, EVENTS_PATH, JOBS_PATH, LEASE_PATH, LEASES_PATH, PODS_PATH, SECRET_PATH,
};
use controller_common::testing::{MockApiServer, mock_runtime, not_found, with_applied_status};
use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use restore_controller::cleanup::FINALIZER;
use restore_controller::context::Context;
use restore_controller::metrics::RestoreMetrics;
use restore_controller::reconcile::reconcile;
use serde_json::{Value, json};
use visitors_agent_contract::summary::{AgentSummary, Operation};
use visitors_api::MySQLRestore;

const RESTORE_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlrestores/r1";
const STATUS_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlrestores/r1/status";
const JOB_PATH: &str = "/apis/batch/v1/namespaces/shop/jobs/r1-restore";
const BACKUP_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlbackups/b1";
const BACKEND_PATH: &str = "/apis/apps/v1/namespaces/shop/deployments/ex-backend";
const SHA: &str = "abababababababababababababababababababababababababababababababab";

fn context() -> (Arc<Context>, MockApiServer) {
    let (runtime, server) = mock_runtime("restore-controller");
    let settings = AgentSettings { agent_image: "registry/visitors-operator:1.0".into(), otlp_endpoint: None };
    let metrics = RestoreMetrics::default();
    metrics.register(&runtime.metrics);
    (Arc::new(Context { runtime: Arc::new(runtime), settings, metrics }), server)
}

/// The value of `visitors_operator_restore_failed` for restore r1, if exported.
fn restore_failed_metric(context: &Context) -> Option<String> {
    let text = context.runtime.metrics.encode();
    let prefix = r#"visitors_operator_restore_failed{namespace="shop",restore="r1"} "#;
    text.lines().find_map(|line| line.strip_prefix(prefix)).map(str::to_string)
}

/// A restore of run b1 into app ex that already carries the finalizer.
fn restore() -> MySQLRestore {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore",
        "metadata": {"name": "r1", "namespace": "shop", "uid": "r-1", "generation": 1, "finalizers": [FINALIZER]},
        "spec": {"source": {"backup": "b1"}, "target": {"visitorsApp": "ex"}},
    }))
    .unwrap()
}

fn with_status(mut restore: MySQLRestore, status: Value) -> MySQLRestore {
    restore.status = Some(serde_json::from_value(status).unwrap());
    restore
}

fn run(status: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup",
           "metadata": {"name": "b1", "namespace": "shop", "uid": "u-1"},
           "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
           "status": status})
}

fn succeeded_run() -> Value {
    run(json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1", "manifestSha256": SHA,
               "completionTime": "2026-11-23T09:00:00Z", "tables": 2, "rows": 7}))
}

fn backend(replicas: i32, pods: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ex-backend", "namespace": "shop"},
           "spec": {"replicas": replicas, "selector": {}, "template": {}},
           "status": {"replicas": pods, "readyReplicas": pods}})
}

fn pods_with_message(message: &str, exit_code: i32) -> Value {
    shop::agent_pod_with_message("r1-restore-x", message, exit_code)
}

fn running_status() -> Value {
    json!({"phase": "Running", "jobName": "r1-restore", "backupName": "b1", "restoredFrom": "pvc://backups/shop/ex/b1",
           "manifestSha256": SHA, "backupCompletionTime": "2026-11-23T09:00:00Z", "startTime": "2026-11-23T10:00:00Z"})
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == type_).unwrap_or_else(|| panic!("no {type_}"))
}

/// The requests before the lock, for a restore of the succeeded run b1.
async fn resolves_run_and_target(server: &mut MockApiServer) {
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    server.expect(Method::GET, BACKUP_PATH, StatusCode::OK, succeeded_run()).await;
    server.expect(Method::GET, CLAIM_PATH, StatusCode::OK, shop::claim()).await;
    server.expect(Method::GET, APP_PATH, StatusCode::OK, shop::app(2)).await;
    server.expect(Method::GET, SECRET_PATH, StatusCode::OK, shop::credentials_secret()).await;
}

#[tokio::test]
async fn the_finalizer_comes_first() {
    let (context, mut server) = context();
    let mut fresh = restore();
    fresh.metadata.finalizers = None;
    let task = tokio::spawn(reconcile(Arc::new(fresh.clone()), context));
    let patch =
        server.expect(Method::PATCH, RESTORE_PATH, StatusCode::OK, serde_json::to_value(restore()).unwrap()).await;
    assert!(patch.body.to_string().contains(FINALIZER), "{}", patch.body);
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_failed_run_is_refused_and_nothing_is_touched() {
    let (context, mut server) = context();
    let restore = restore();
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let failed = run(json!({"phase": "Failed", "error": "MySQL rejected user root"}));
    server.expect(Method::GET, BACKUP_PATH, StatusCode::OK, failed).await;
    // Only the lock is looked at (to release it if it held it): no lease taken, no Job.
    server.expect(Method::GET, LEASE_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Failed");
    let ready = condition(status, "Ready");
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("BackupFailed")));
    let message = ready["message"].as_str().unwrap();
    assert!(message.contains("MySQLBackup b1") && message.contains("nothing was touched"), "{message}");
    assert!(status["error"].as_str().unwrap().contains("rejected user root"));
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!((event.body["reason"].as_str(), event.body["type"].as_str()), (Some("BackupFailed"), Some("Warning")));
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    assert_eq!(restore_failed_metric(&context).as_deref(), Some("1"), "the restore-failed alert's gauge");
}

#[tokio::test]
async fn a_running_run_is_waited_for_with_a_pending_condition() {
    let (context, mut server) = context();
    let restore = restore();
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    server.expect(Method::GET, BACKUP_PATH, StatusCode::OK, run(json!({"phase": "Running"}))).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Pending");
    let pending = condition(status, "Pending");
    assert_eq!((pending["status"].as_str(), pending["reason"].as_str()), (Some("True"), Some("BackupNotFinished")));
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "BackupNotFinished");
    let action = task.await.unwrap().unwrap();
    assert_ne!(action, Action::await_change(), "a wait looks again");
}

#[tokio::test]
async fn a_busy_database_is_waited_for() {
    let (context, mut server) = context();
    let restore = restore();
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    resolves_run_and_target(&mut server).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLBackup/nightly-1/u-9")).await;
    let running = run(json!({"phase": "Running"}));
    server
        .expect(Method::GET, "/apis/example.com/v1/namespaces/shop/mysqlbackups/nightly-1", StatusCode::OK, {
            let mut r = running;
            r["metadata"]["name"] = json!("nightly-1");
            r["metadata"]["uid"] = json!("u-9");
            r
        })
        .await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let pending = condition(&written.body["status"], "Pending");
    assert_eq!(pending["reason"], "WaitingForDatabaseLock");
    assert!(pending["message"].as_str().unwrap().contains("MySQLBackup nightly-1"));
    server.expect_echo(Method::POST, EVENTS_PATH).await;
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn with_the_lock_it_waits_for_the_backend_to_stop() {
    let (context, mut server) = context();
    let restore = restore();
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    resolves_run_and_target(&mut server).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let lease = server.expect_echo(Method::POST, LEASES_PATH).await;
    assert_eq!(lease.body["spec"]["holderIdentity"], "MySQLRestore/r1/r-1");
    server.expect(Method::GET, BACKEND_PATH, StatusCode::OK, backend(2, 2)).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Quiescing", "the phase the VisitorsApp controller scales the backend to 0 on");
    assert_eq!(status["backupName"], "b1");
    assert_eq!(status["restoredFrom"], "pvc://backups/shop/ex/b1");
    assert_eq!(condition(status, "Quiesced")["status"], "False");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "Quiescing");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_stopped_backend_lets_the_job_start_with_the_runs_manifest() {
    let (context, mut server) = context();
    let restore = with_status(restore(), json!({"phase": "Quiescing"}));
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    resolves_run_and_target(&mut server).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::GET, BACKEND_PATH, StatusCode::OK, backend(0, 0)).await;
    let created = server.expect_echo(Method::POST, JOBS_PATH).await;
    let job = &created.body;
    assert_eq!(job["metadata"]["name"], "r1-restore");
    assert_eq!(job["spec"]["backoffLimit"], 0);
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let args = args.join(" ");
    assert!(args.contains("restore --from file:///backup/shop/ex/b1 --drop-existing"), "{args}");
    assert!(args.contains(&format!("--expect-manifest-sha256 {SHA}")), "{args}");
    assert!(!job.to_string().contains("c2VjcmV0"), "no secret value in the Job");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "Started");
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["jobName"], "r1-restore");
    assert_eq!(condition(status, "Quiesced")["status"], "True");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_agents_summary_ends_the_restore_and_frees_the_database() {
    let (context, mut server) = context();
    let restore = with_status(restore(), running_status());
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context.clone()));
    assert_eq!(restore_failed_metric(&context), None, "a running restore exports nothing");
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(json!([{"type": "Complete", "status": "True"}]))).await;
    let summary = AgentSummary {
        operation: Some(Operation::Restore),
        ok: true,
        tables: Some(2),
        rows: Some(7),
        manifest_sha256: Some(SHA.into()),
        finished_at: Some("2026-11-23T10:01:00Z".into()),
        ..AgentSummary::default()
    };
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods_with_message(&summary.to_line(), 0)).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::DELETE, LEASE_PATH, StatusCode::OK, shop::lease("")).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!((status["tables"].as_i64(), status["rows"].as_i64()), (Some(2), Some(7)));
    assert_eq!(status["durationSeconds"], 60.0);
    assert_eq!(status["backupCompletionTime"], "2026-11-23T09:00:00Z");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "Succeeded");
    assert!(event.body["note"].as_str().unwrap().contains("2 tables, 7 rows"));
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    assert_eq!(restore_failed_metric(&context).as_deref(), Some("0"));
}

/// The agent's summary of a restore that found a chunk changed since the backup.
fn corrupt_backup_summary() -> AgentSummary {
    AgentSummary {
        operation: Some(Operation::Restore),
        ok: false,
        error: Some("file shop/t/000001.tsv.zst has SHA-256 x, the manifest says y".into()),
        error_kind: Some("checksumMismatch".into()),
        ..AgentSummary::default()
    }
}

#[tokio::test]
async fn a_corrupt_backup_fails_with_the_agents_error() {
    let (context, mut server) = context();
    let restore = with_status(restore(), running_status());
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    let failed = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]);
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(failed)).await;
    let summary = corrupt_backup_summary();
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods_with_message(&summary.to_line(), 1)).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::DELETE, LEASE_PATH, StatusCode::OK, shop::lease("")).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Failed");
    assert!(status["error"].as_str().unwrap().contains("(checksumMismatch)"));
    assert_eq!(condition(status, "Ready")["reason"], "AgentFailed");
    assert_eq!(condition(status, "Quiesced")["reason"], "Released");
    server.expect_echo(Method::POST, EVENTS_PATH).await;
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_deleted_job_fails_the_restore_with_a_reason() {
    let (context, mut server) = context();
    let restore = with_status(restore(), running_status());
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::DELETE, LEASE_PATH, StatusCode::OK, shop::lease("")).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    assert_eq!(written.body["status"]["phase"], "Failed");
    assert_eq!(condition(&written.body["status"], "Ready")["reason"], "JobDeleted");
    server.expect_echo(Method::POST, EVENTS_PATH).await;
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_ended_restore_is_a_record() {
    let (context, mut server) = context();
    let mut ended = with_status(restore(), json!({"phase": "Succeeded", "observedGeneration": 1}));
    let task = tokio::spawn(reconcile(Arc::new(ended.clone()), context.clone()));
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    server.expect_no_request(Duration::from_millis(50)).await;
    // A restarted controller exports the ended restore again.
    assert_eq!(restore_failed_metric(&context).as_deref(), Some("0"));

    ended.metadata.generation = Some(2);
    let task = tokio::spawn(reconcile(Arc::new(ended.clone()), context));
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&ended)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(condition(status, "SpecChangeIgnored")["status"], "True");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "SpecChangeIgnored");
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
}

fn deleting_mid_way() -> MySQLRestore {
    let mut deleting = with_status(restore(), running_status());
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
    deleting
}

#[tokio::test]
async fn a_restore_deleted_mid_way_stops_its_job_and_holds_the_database_until_its_pod_stopped() {
    let (context, mut server) = context();
    let deleting = deleting_mid_way();

    let task = tokio::spawn(reconcile(Arc::new(deleting.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(json!([]))).await;
    let deleted = server.expect(Method::DELETE, JOB_PATH, StatusCode::OK, job(json!([]))).await;
    assert_eq!(deleted.body["propagationPolicy"], "Background", "the Job's pod goes too");
    assert_eq!(task.await.unwrap().unwrap(), Action::requeue(Duration::from_secs(600)));
    server.expect_no_request(Duration::from_millis(100)).await;

    // The Job is gone but its pod still runs the agent: the lock and the finalizer stay.
    let task = tokio::spawn(reconcile(Arc::new(deleting), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let running = json!({"running": {"startedAt": "2026-11-23T10:00:01Z"}});
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods_in_step(running.clone(), json!({"waiting": {}}))).await;
    assert_eq!(task.await.unwrap().unwrap(), Action::requeue(Duration::from_secs(600)));
    server.expect_no_request(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_deleted_restore_whose_pod_stopped_frees_the_database() {
    let (context, mut server) = context();
    let deleting = deleting_mid_way();
    context.metrics.observe(
        restore_controller::metrics::RestoreLabels { namespace: "shop".into(), restore: "r1".into() },
        Some(&visitors_api::restore::MySQLRestoreStatus {
            phase: Some(visitors_api::restore::RestorePhase::Failed),
            ..Default::default()
        }),
    );
    let task = tokio::spawn(reconcile(Arc::new(deleting.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let empty = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []});
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, empty).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::DELETE, LEASE_PATH, StatusCode::OK, shop::lease("")).await;
    let mut released = serde_json::to_value(&deleting).unwrap();
    released["metadata"]["finalizers"] = json!([]);
    let patch = server.expect(Method::PATCH, RESTORE_PATH, StatusCode::OK, released).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]), "the finalizer goes, and no other: {}", patch.body);
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
    assert_eq!(restore_failed_metric(&context), None, "a deleted restore is forgotten");
}

fn job(conditions: Value) -> Value {
    shop::job("r1-restore", "MySQLRestore", "r1", "r-1", conditions)
}

/// The pods of an active restore Job: the staging init container `stage` in `stage_state`,
/// the agent container waiting or running.
fn pods_in_step(stage_state: Value, agent_state: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [{
        "metadata": {"name": "r1-restore-x", "namespace": "shop"},
        "status": {
            "initContainerStatuses": [{"name": "stage", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": stage_state}],
            "containerStatuses": [{"name": "agent", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": agent_state}]}
    }]})
}

#[tokio::test]
async fn the_end_of_the_staging_step_shows_verifying_with_the_backend_still_stopped() {
    // While the init container stages, the restore stays Running.
    let (context, mut server) = context();
    let restore = with_status(restore(), running_status());
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(json!([]))).await;
    let staging = pods_in_step(
        json!({"running": {"startedAt": "2026-11-23T10:00:01Z"}}),
        json!({"waiting": {"reason": "PodInitializing"}}),
    );
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, staging).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    assert_eq!(written.body["status"]["phase"], "Running");
    task.await.unwrap().unwrap();

    // The staging step ended well, the agent container checks and swaps: Verifying, said once.
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(json!([]))).await;
    let verifying = pods_in_step(
        json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": "{\"ok\":true}"}}),
        json!({"running": {"startedAt": "2026-11-23T10:05:00Z"}}),
    );
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, verifying.clone()).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = written.body["status"].clone();
    assert_eq!(status["phase"], "Verifying");
    assert_eq!(condition(&status, "Ready")["reason"], "Verifying");
    assert_eq!(condition(&status, "Quiesced")["status"], "True", "the backend stays stopped");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!((event.body["reason"].as_str(), event.body["type"].as_str()), (Some("Verifying"), Some("Normal")));
    task.await.unwrap().unwrap();

    // Seen again: no new status write, no second Event.
    let verifying_restore = with_status(restore, status);
    assert!(verifying_restore.quiesces_app());
    let task = tokio::spawn(reconcile(Arc::new(verifying_restore), context));
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(json!([]))).await;
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, verifying).await;
    task.await.unwrap().unwrap();
    server.expect_no_request(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_corrupt_backup_refused_by_the_staging_step_fails_with_its_error() {
    let (context, mut server) = context();
    let restore = with_status(restore(), running_status());
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    let failed = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]);
    server.expect(Method::GET, JOB_PATH, StatusCode::OK, job(failed)).await;
    let summary = corrupt_backup_summary();
    let refused = json!({"terminated": {"exitCode": 1, "reason": "Error", "message": summary.to_line()}});
    let pods = pods_in_step(refused, json!({"waiting": {"reason": "PodInitializing"}}));
    server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::OK, shop::lease("MySQLRestore/r1/r-1")).await;
    server.expect(Method::DELETE, LEASE_PATH, StatusCode::OK, shop::lease("")).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Failed");
    assert!(
        status["error"].as_str().unwrap().contains("SHA-256 x, the manifest says y (checksumMismatch)"),
        "{status}"
    );
    assert_eq!(condition(status, "Ready")["reason"], "AgentFailed");
    server.expect_echo(Method::POST, EVENTS_PATH).await;
    task.await.unwrap().unwrap();
}

/// A restore of schedule `nightly` to `target` (a `pointInTime` source), with its finalizer.
fn to_a_point(target: Value) -> MySQLRestore {
    let mut source = json!({"backup": "nightly"});
    source.as_object_mut().unwrap().extend(target.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore",
        "metadata": {"name": "r1", "namespace": "shop", "uid": "r-1", "generation": 1, "finalizers": [FINALIZER]},
        "spec": {"source": {"pointInTime": source}, "target": {"visitorsApp": "ex"}},
    }))
    .unwrap()
}

fn archiving_schedule(recoverable: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup",
           "metadata": {"name": "nightly", "namespace": "shop", "uid": "s-1"},
           "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
                    "schedule": {"cron": "0 3 * * *"}, "pointInTime": {}},
           "status": {"pointInTime": {"lastRecoverableTime": recoverable},
                      "conditions": [{"type": "Archiving", "status": "True", "reason": "Archiving", "message": "",
                                      "lastTransitionTime": "2026-11-23T00:00:00Z"}]}})
}

fn schedule_runs(snapshot: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackupList", "metadata": {}, "items": [{
        "apiVersion": "example.com/v1", "kind": "MySQLBackup",
        "metadata": {"name": "nightly-1", "namespace": "shop", "uid": "u-1",
                     "labels": {"example.com/backup-schedule": "nightly"},
                     "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "MySQLBackup", "name": "nightly", "uid": "s-1", "controller": true}]},
        "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
        "status": {"phase": "Succeeded", "location": "file:///backup/shop/ex/nightly-1", "manifestSha256": SHA,
                   "completionTime": "2026-11-23T03:00:30Z",
                   "snapshot": {"time": snapshot, "binlogFile": "binlog.000003", "binlogPosition": 1234, "gtid": "0-1-90"}}}]})
}

#[tokio::test]
async fn a_restore_to_a_point_replays_the_archive_after_the_newest_run_before_it() {
    let (context, mut server) = context();
    let restore = to_a_point(json!({"targetTime": "2026-11-23T04:00:00Z"}));
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let schedule_path = "/apis/example.com/v1/namespaces/shop/mysqlbackups/nightly";
    server.expect(Method::GET, schedule_path, StatusCode::OK, archiving_schedule("2026-11-23T05:00:00Z")).await;
    let runs_path = "/apis/example.com/v1/namespaces/shop/mysqlbackups";
    let listed = server.expect(Method::GET, runs_path, StatusCode::OK, schedule_runs("2026-11-23T03:00:05Z")).await;
    assert!(listed.uri.contains("example.com%2Fbackup-schedule%3Dnightly"), "{}", listed.uri);
    server.expect(Method::GET, CLAIM_PATH, StatusCode::OK, shop::claim()).await;
    server.expect(Method::GET, APP_PATH, StatusCode::OK, shop::app(0)).await;
    server.expect(Method::GET, SECRET_PATH, StatusCode::OK, shop::credentials_secret()).await;
    server.expect(Method::GET, LEASE_PATH, StatusCode::NOT_FOUND, not_found()).await;
    server.expect_echo(Method::POST, LEASES_PATH).await;
    server.expect(Method::GET, BACKEND_PATH, StatusCode::OK, backend(0, 0)).await;
    let created = server.expect_echo(Method::POST, JOBS_PATH).await;
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(created.body.clone()).unwrap();
    let parsed = controller_common::testing::agent_contract_of(&job);
    for cli in &parsed {
        let visitors_agent_contract::Command::Restore(args) = &cli.command else { panic!("{cli:?}") };
        assert_eq!(args.from, "file:///backup/shop/ex/nightly-1", "the newest run before the target");
        assert_eq!(args.expect_manifest_sha256.as_deref(), Some(SHA));
        assert_eq!(args.point_in_time.binlog_archive.as_deref(), Some("file:///backup/shop/ex/_binlog/nightly"));
        assert_eq!(args.point_in_time.until_time.as_deref(), Some("2026-11-23T04:00:00Z"));
    }
    server.expect_echo(Method::POST, EVENTS_PATH).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["backupName"], "nightly-1");
    assert_eq!(status["pointInTime"]["target"], "2026-11-23T04:00:00Z");
    assert_eq!(status["pointInTime"]["baseSnapshotTime"], "2026-11-23T03:00:05Z");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_target_in_the_future_is_refused_before_anything_is_touched() {
    let (context, mut server) = context();
    let restore = to_a_point(json!({"targetTime": "2999-01-01T00:00:00Z"}));
    let task = tokio::spawn(reconcile(Arc::new(restore.clone()), context.clone()));
    server.expect(Method::GET, JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let schedule_path = "/apis/example.com/v1/namespaces/shop/mysqlbackups/nightly";
    server.expect(Method::GET, schedule_path, StatusCode::OK, archiving_schedule("2026-11-23T05:00:00Z")).await;
    let runs_path = "/apis/example.com/v1/namespaces/shop/mysqlbackups";
    server.expect(Method::GET, runs_path, StatusCode::OK, schedule_runs("2026-11-23T03:00:05Z")).await;
    // Refused: the lock is released (it was never taken), no Job, the end written.
    server.expect(Method::GET, LEASE_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&restore)).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Failed");
    let ready = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
    assert_eq!(ready["reason"], "TargetInTheFuture");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(
        (event.body["reason"].as_str(), event.body["type"].as_str()),
        (Some("TargetInTheFuture"), Some("Warning"))
    );
    server.expect_no_request(Duration::from_millis(100)).await;
    task.await.unwrap().unwrap();
}
