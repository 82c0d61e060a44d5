//! `deletionPolicy: Delete` against the mock API server, which asserts every request in order:
//! the finalizer, the delete Job after the backup Job's end, the finalizer removed only when
//! the delete Job succeeded, a refused delete kept with a condition, an Event and a retry, and
//! `Retain` letting the run go.

use std::sync::Arc;
use std::time::Duration;

use backup_controller::cleanup::FINALIZER;
use backup_controller::context::Context;
use backup_controller::reconcile::reconcile;
use controller_common::operation::AgentSettings;
use controller_common::testing::shop::{self, EVENTS_PATH, JOBS_PATH, LEASE_PATH, PODS_PATH};
use controller_common::testing::{MockApiServer, mock_runtime, not_found, with_applied_status};
use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use visitors_agent_contract::summary::{AgentSummary, Operation};
use visitors_api::MySQLBackup;

const BACKUP_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlbackups/b1";
const STATUS_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlbackups/b1/status";
const BACKUP_JOB_PATH: &str = "/apis/batch/v1/namespaces/shop/jobs/b1-backup";
const DELETE_JOB_PATH: &str = "/apis/batch/v1/namespaces/shop/jobs/b1-delete";

fn context() -> (Arc<Context>, MockApiServer) {
    let (runtime, server) = mock_runtime("backup-controller");
    let settings = AgentSettings { agent_image: "registry/visitors-operator:1.0".into(), otlp_endpoint: None };
    (Arc::new(Context::new(Arc::new(runtime), settings)), server)
}

/// Run b1 with `policy`, succeeded (its backup Job ran), with `finalizers`, being deleted or not.
fn succeeded_run(policy: &str, finalizers: &[&str], deleting: bool) -> MySQLBackup {
    let mut metadata = json!({"name": "b1", "namespace": "shop", "uid": "u-1", "generation": 1,
                              "resourceVersion": "42", "finalizers": finalizers});
    if deleting {
        metadata["deletionTimestamp"] = json!("2026-11-23T11:00:00Z");
    }
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "MySQLBackup",
        "metadata": metadata,
        "spec": {
            "source": {"visitorsApp": "ex"},
            "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
            "deletionPolicy": policy,
        },
        "status": {"phase": "Succeeded", "jobName": "b1-backup", "location": "pvc://backups/shop/ex/b1"},
    }))
    .unwrap()
}

fn job(name: &str, conditions: Value) -> Value {
    shop::job(name, "MySQLBackup", "b1", "u-1", conditions)
}

fn deleting_condition(status: &Value) -> Value {
    status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Deleting").cloned().unwrap_or_default()
}

/// The requests of a deleted run before its delete Job is looked at: the backup Job (ended,
/// pods ended) and the database lock (not held).
async fn backup_job_ended(server: &mut MockApiServer) {
    let complete = json!([{"type": "Complete", "status": "True"}]);
    server.expect(Method::GET, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", complete)).await;
    let pods = shop::agent_pod_with_message("b1-backup-x", "{}", 0);
    let listed = server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods).await;
    assert!(listed.uri.contains("job-name%3Db1-backup"), "{}", listed.uri);
    server.expect(Method::GET, LEASE_PATH, StatusCode::NOT_FOUND, not_found()).await;
}

#[tokio::test]
async fn a_run_with_delete_gets_the_finalizer_and_one_with_retain_does_not() {
    let (context, mut server) = context();
    let run = succeeded_run("Delete", &[], false);
    let task = tokio::spawn(reconcile(Arc::new(run.clone()), context.clone()));
    let patch = server.expect(Method::PATCH, BACKUP_PATH, StatusCode::OK, serde_json::to_value(&run).unwrap()).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!([FINALIZER]));
    assert_eq!(patch.body["metadata"]["resourceVersion"], "42", "a conditional patch");
    task.await.unwrap().unwrap();

    let retained = succeeded_run("Retain", &[], false);
    let task = tokio::spawn(reconcile(Arc::new(retained), context.clone()));
    server.expect_no_request(Duration::from_millis(100)).await;
    task.await.unwrap().unwrap();

    // Switched to Retain while alive: the finalizer goes, other finalizers stay.
    let switched = succeeded_run("Retain", &["example.com/other", FINALIZER], false);
    let task = tokio::spawn(reconcile(Arc::new(switched.clone()), context));
    let patch =
        server.expect(Method::PATCH, BACKUP_PATH, StatusCode::OK, serde_json::to_value(&switched).unwrap()).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!(["example.com/other"]));
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_deleted_run_starts_the_delete_job_and_keeps_the_finalizer_while_it_runs() {
    let (context, mut server) = context();
    let run = succeeded_run("Delete", &[FINALIZER], true);
    let task = tokio::spawn(reconcile(Arc::new(run.clone()), context.clone()));
    backup_job_ended(&mut server).await;
    server.expect(Method::GET, DELETE_JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let created = server.expect_echo(Method::POST, JOBS_PATH).await;
    assert_eq!(created.body["metadata"]["name"], "b1-delete");
    let args = created.body["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains(r#""delete","file:///backup/shop/ex/b1","--break-lock""#), "{args}");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "Started");
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&run)).await;
    let deleting = deleting_condition(&written.body["status"]);
    assert_eq!((deleting["status"].as_str(), deleting["reason"].as_str()), (Some("True"), Some("DeletingStorage")));
    assert_eq!(written.body["status"]["phase"], "Succeeded", "the run's record is unchanged");
    assert_eq!(task.await.unwrap().unwrap(), Action::requeue(Duration::from_secs(600)), "the Job watch wakes it");

    // While the delete Job runs: nothing is removed.
    let task = tokio::spawn(reconcile(Arc::new(run), context));
    backup_job_ended(&mut server).await;
    server.expect(Method::GET, DELETE_JOB_PATH, StatusCode::OK, job("b1-delete", json!([]))).await;
    server.expect_no_request(Duration::from_millis(100)).await;
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_finalizer_goes_only_when_the_delete_job_succeeded() {
    let (context, mut server) = context();
    let run = succeeded_run("Delete", &[FINALIZER], true);
    let task = tokio::spawn(reconcile(Arc::new(run.clone()), context));
    backup_job_ended(&mut server).await;
    let complete = json!([{"type": "Complete", "status": "True"}]);
    server.expect(Method::GET, DELETE_JOB_PATH, StatusCode::OK, job("b1-delete", complete)).await;
    let patch = server.expect(Method::PATCH, BACKUP_PATH, StatusCode::OK, serde_json::to_value(&run).unwrap()).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]));
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!((event.body["reason"].as_str(), event.body["type"].as_str()), (Some("StorageDeleted"), Some("Normal")));
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
}

#[tokio::test]
async fn a_refused_delete_keeps_the_finalizer_says_why_and_retries_after_a_backoff() {
    let (context, mut server) = context();
    let run = succeeded_run("Delete", &[FINALIZER], true);
    let task = tokio::spawn(reconcile(Arc::new(run.clone()), context.clone()));
    backup_job_ended(&mut server).await;
    let failed = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "failed"}]);
    server.expect(Method::GET, DELETE_JOB_PATH, StatusCode::OK, job("b1-delete", failed.clone())).await;
    let summary = AgentSummary {
        operation: Some(Operation::Delete),
        ok: false,
        error: Some("the object storage rejected the credentials for s3://b/x (AccessDenied)".into()),
        error_kind: Some("storageCredentialsRejected".into()),
        ..AgentSummary::default()
    };
    let pods = shop::agent_pod_with_message("b1-delete-x", &summary.to_line(), 1);
    let listed = server.expect(Method::GET, PODS_PATH, StatusCode::OK, pods).await;
    assert!(listed.uri.contains("job-name%3Db1-delete"), "{}", listed.uri);
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&run)).await;
    let deleting = deleting_condition(&written.body["status"]);
    assert_eq!(
        (deleting["status"].as_str(), deleting["reason"].as_str()),
        (Some("False"), Some("StorageDeleteFailed"))
    );
    let message = deleting["message"].as_str().unwrap();
    assert!(message.contains("AccessDenied") && message.contains("storageCredentialsRejected"), "{message}");
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(
        (event.body["reason"].as_str(), event.body["type"].as_str()),
        (Some("StorageDeleteFailed"), Some("Warning"))
    );
    let action = task.await.unwrap().unwrap();
    assert_ne!(action, Action::await_change());
    assert!(format!("{action:?}").contains("Some("), "comes back after a backoff: {action:?}");

    // Back after the backoff, with the failure reported: the failed Job is removed, so that the
    // Job watch starts the next attempt; the finalizer stays throughout.
    let reported = with_status(&run, written.body["status"].clone());
    let task = tokio::spawn(reconcile(Arc::new(reported), context));
    backup_job_ended(&mut server).await;
    server.expect(Method::GET, DELETE_JOB_PATH, StatusCode::OK, job("b1-delete", failed)).await;
    server
        .expect(Method::GET, PODS_PATH, StatusCode::OK, shop::agent_pod_with_message("p", &summary.to_line(), 1))
        .await;
    server.expect(Method::DELETE, DELETE_JOB_PATH, StatusCode::OK, job("b1-delete", json!([]))).await;
    server.expect_no_request(Duration::from_millis(100)).await;
    task.await.unwrap().unwrap();
}

fn with_status(run: &MySQLBackup, status: Value) -> MySQLBackup {
    let mut run = run.clone();
    run.status = Some(serde_json::from_value(status).unwrap());
    run
}

#[tokio::test]
async fn retain_or_a_run_that_never_stored_anything_lets_the_run_go_without_a_job() {
    let (context, mut server) = context();
    let switched = succeeded_run("Retain", &[FINALIZER], true);
    let task = tokio::spawn(reconcile(Arc::new(switched.clone()), context.clone()));
    let patch =
        server.expect(Method::PATCH, BACKUP_PATH, StatusCode::OK, serde_json::to_value(&switched).unwrap()).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]));
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "StorageRetained");
    assert!(event.body["note"].as_str().unwrap().contains("pvc://backups/shop/ex/b1"), "{}", event.body);
    task.await.unwrap().unwrap();

    let mut never_started = succeeded_run("Delete", &[FINALIZER], true);
    never_started.status = Some(serde_json::from_value(json!({"phase": "Pending"})).unwrap());
    let task = tokio::spawn(reconcile(Arc::new(never_started.clone()), context));
    server.expect(Method::GET, BACKUP_JOB_PATH, StatusCode::NOT_FOUND, not_found()).await;
    let patch =
        server.expect(Method::PATCH, BACKUP_PATH, StatusCode::OK, serde_json::to_value(&never_started).unwrap()).await;
    assert_eq!(patch.body["metadata"]["finalizers"], json!([]));
    assert_eq!(server.expect_echo(Method::POST, EVENTS_PATH).await.body["reason"], "NothingStored");
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_backup_job_still_running_is_stopped_before_any_delete() {
    let (context, mut server) = context();
    let mut run = succeeded_run("Delete", &[FINALIZER], true);
    run.status = Some(serde_json::from_value(json!({"phase": "Running", "jobName": "b1-backup"})).unwrap());
    let task = tokio::spawn(reconcile(Arc::new(run), context));
    server.expect(Method::GET, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", json!([]))).await;
    let deleted = server.expect(Method::DELETE, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", json!([]))).await;
    assert!(deleted.body.to_string().contains("Background"), "{}", deleted.body);
    server.expect_no_request(Duration::from_millis(100)).await;
    let action = task.await.unwrap().unwrap();
    assert!(format!("{action:?}").contains("Some("), "waits for the pods to go: {action:?}");
}

#[tokio::test]
async fn a_run_whose_spec_points_elsewhere_now_deletes_nothing() {
    let (context, mut server) = context();
    let mut edited = succeeded_run("Delete", &[FINALIZER], true);
    edited.spec.source.visitors_app = "other".into();
    let task = tokio::spawn(reconcile(Arc::new(edited.clone()), context));
    let status = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&edited)).await;
    let deleting = &status.body["status"]["conditions"][0];
    assert_eq!((deleting["type"].as_str(), deleting["status"].as_str()), (Some("Deleting"), Some("False")));
    assert_eq!(deleting["reason"], "StorageLocationChanged");
    let message = deleting["message"].as_str().unwrap();
    assert!(
        message.contains("pvc://backups/shop/ex/b1") && message.contains("pvc://backups/shop/other/b1"),
        "{message}"
    );
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "StorageLocationChanged");
    assert_eq!(task.await.unwrap().unwrap(), Action::await_change(), "a spec change wakes it");
    server.expect_no_request(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn a_run_deleted_before_its_started_job_was_recorded_still_stops_it_and_deletes() {
    let (context, mut server) = context();
    let mut unrecorded = succeeded_run("Delete", &[FINALIZER], true);
    unrecorded.status = Some(serde_json::from_value(json!({"phase": "Pending"})).unwrap());
    let task = tokio::spawn(reconcile(Arc::new(unrecorded), context));
    server.expect(Method::GET, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", json!([]))).await;
    server.expect(Method::GET, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", json!([]))).await;
    let deleted = server.expect(Method::DELETE, BACKUP_JOB_PATH, StatusCode::OK, job("b1-backup", json!([]))).await;
    assert!(deleted.body.to_string().contains("Background"), "{}", deleted.body);
    task.await.unwrap().unwrap();
    server.expect_no_request(Duration::from_millis(100)).await;
}
