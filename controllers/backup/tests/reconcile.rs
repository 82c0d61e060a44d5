//! MySQLBackup reconciles against the mock API server.

use std::sync::Arc;
use std::time::Duration;

use backup_controller::controller::{Context, reconcile};
use controller_common::Runtime;
use controller_common::backoff::ObjectBackoff;
use controller_common::events::Events;
use controller_common::metrics::Metrics;
use controller_common::testing::{MockApiServer, mock_client};
use http::{Method, StatusCode};
use kube::runtime::controller::Action;
use visitors_api::MySQLBackup;

const STATUS_PATH: &str = "/apis/example.com/v1/namespaces/shop/mysqlbackups/nightly/status";
const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";

fn context() -> (Arc<Context>, MockApiServer) {
    let (client, server) = mock_client();
    let runtime = Runtime {
        client: client.clone(),
        metrics: Arc::new(Metrics::new("backup-controller")),
        backoff: ObjectBackoff::new(Duration::from_millis(500), Duration::from_secs(300)),
        events: Events::new(client, "backup-controller", None),
        field_manager: "backup-controller".into(),
        resync: Duration::from_secs(600),
    };
    (Arc::new(Context { runtime: Arc::new(runtime) }), server)
}

/// The stored object with the applied status, as the API server answers a status apply.
fn with_applied_status(
    backup: &MySQLBackup,
) -> impl FnOnce(&controller_common::testing::Received) -> (StatusCode, serde_json::Value) {
    let mut stored = serde_json::to_value(backup).unwrap();
    move |received| {
        stored["status"] = received.body["status"].clone();
        (StatusCode::OK, stored)
    }
}

fn backup(app: &str) -> MySQLBackup {
    let mut backup: MySQLBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1",
        "kind": "MySQLBackup",
        "metadata": {"name": "nightly", "namespace": "shop", "uid": "u-1", "generation": 1},
        "spec": {
            "source": {"visitorsApp": app},
            "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
        },
    }))
    .unwrap();
    backup.status = None;
    backup
}

#[tokio::test]
async fn invalid_spec_gets_a_condition_and_an_event_and_no_retry() {
    let (context, mut server) = context();
    let backup = backup("Bad_Name");
    let task = tokio::spawn(reconcile(Arc::new(backup.clone()), context));

    let status = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&backup)).await;
    let ready = &status.body["status"]["conditions"][0];
    assert_eq!(ready["type"], "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "InvalidSpec");
    assert!(ready["message"].as_str().unwrap().contains("spec.source.visitorsApp"));
    let event = server.expect_echo(Method::POST, EVENTS_PATH).await;
    assert_eq!(event.body["reason"], "InvalidSpec");
    assert_eq!(event.body["type"], "Warning");
    assert!(event.body["note"].as_str().unwrap().contains("spec.source.visitorsApp"));

    assert_eq!(task.await.unwrap().unwrap(), Action::await_change());
}

#[tokio::test]
async fn unchanged_status_is_not_written_again() {
    let (context, mut server) = context();
    let first = tokio::spawn(reconcile(Arc::new(backup("ex")), context.clone()));
    let written = server.expect_with(Method::PATCH, STATUS_PATH, with_applied_status(&backup("ex"))).await;
    assert_eq!(written.body["status"]["phase"], "Pending");
    assert_eq!(first.await.unwrap().unwrap(), Action::requeue(Duration::from_secs(600)));

    let mut converged = backup("ex");
    converged.status = Some(serde_json::from_value(written.body["status"].clone()).unwrap());
    let second = tokio::spawn(reconcile(Arc::new(converged), context));
    server.expect_no_request(Duration::from_millis(200)).await;
    assert_eq!(second.await.unwrap().unwrap(), Action::requeue(Duration::from_secs(600)));
}
