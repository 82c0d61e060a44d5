//! The last-success gauge after a controller restart: the new process never saw the runs end,
//! but it reconciles every run at start-up and exports the gauge from their status again.

use std::sync::Arc;
use std::time::Duration;

use backup_controller::context::Context;
use backup_controller::reconcile::reconcile;
use controller_common::operation::AgentSettings;
use controller_common::testing::mock_runtime;
use serde_json::json;
use visitors_api::MySQLBackup;

fn finished_run(name: &str, phase: &str, completed: &str) -> MySQLBackup {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "MySQLBackup",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"), "generation": 1},
        "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
        "status": {"phase": phase, "jobName": format!("{name}-backup"), "startTime": "2026-11-23T09:59:00Z",
                   "completionTime": completed},
    }))
    .unwrap()
}

#[tokio::test]
async fn a_restarted_controller_exports_the_last_success_from_finished_runs() {
    let (runtime, mut server) = mock_runtime("backup-controller");
    let settings = AgentSettings { agent_image: "registry/visitors-operator:1.0".into(), otlp_endpoint: None };
    let context = Arc::new(Context::new(Arc::new(runtime), settings));

    for run in [
        finished_run("newer", "Succeeded", "2026-11-23T10:00:00Z"),
        finished_run("older", "Succeeded", "2026-11-22T10:00:00Z"),
        finished_run("failed-later", "Failed", "2026-11-23T11:00:00Z"),
    ] {
        reconcile(Arc::new(run), context.clone()).await.unwrap();
    }
    server.expect_no_request(Duration::from_millis(100)).await;
    let text = context.runtime.metrics.encode();
    let newest = jiff::Timestamp::from_second(1_795_428_000).unwrap();
    assert_eq!(newest.to_string(), "2026-11-23T10:00:00Z");
    let expected =
        r#"visitors_operator_backup_last_success_timestamp_seconds{namespace="shop",visitors_app="ex"} 1795428000.0"#;
    assert!(text.contains(expected), "the newest success, not the older one nor the failure:\n{text}");
    assert!(!text.contains(r#"backup_runs_total{result="#), "no run is counted twice:\n{text}");
}
