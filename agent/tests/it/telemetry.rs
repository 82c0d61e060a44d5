//! An invocation started with `TRACEPARENT` and `OTEL_EXPORTER_OTLP_ENDPOINT` exports its
//! spans as children of that trace context: the operation's span, and a span per table dumped
//! or chunk loaded under it.

use std::process::Command;
use std::time::Duration;

use visitors_test_support::otlp::{OtlpReceiver, ReceivedSpan};

use crate::file_location;
use crate::support::{MariaDb, PASSWORD, USER};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";

/// Every span received once one named `root` has arrived (30 s at most).
fn spans_after(receiver: &OtlpReceiver, root: &str) -> Vec<ReceivedSpan> {
    receiver
        .wait_for(Duration::from_secs(30), |spans| spans.iter().any(|s| s.span.name == root).then(|| spans.to_vec()))
        .unwrap_or_else(|| panic!("no {root} span arrived"))
}

fn agent(receiver: &OtlpReceiver, server: &MariaDb, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_visitors-agent"))
        .args(args)
        .args(["--host", "127.0.0.1", "--port", &server.port.to_string(), "--user", USER])
        .env("MYSQL_PWD", PASSWORD)
        .env("TRACEPARENT", format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_and_restore_spans_join_the_callers_trace() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE app; CREATE TABLE app.a (id INT PRIMARY KEY); INSERT INTO app.a VALUES (1), (2);
         CREATE TABLE app.b (id INT PRIMARY KEY); INSERT INTO app.b VALUES (3);",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let receiver = OtlpReceiver::start("127.0.0.1:0").unwrap();

    let output = agent(&receiver, &server, &["backup", "--to", &location, "--database", "app"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let spans = spans_after(&receiver, "backup");
    let root = spans.iter().find(|s| s.span.name == "backup").unwrap();
    assert_eq!(root.service, "visitors-agent");
    assert_eq!(root.trace_id(), TRACE_ID, "in the caller's trace");
    assert_eq!(root.parent_span_id(), PARENT_SPAN_ID, "a child of the caller's span");
    let mut dumped: Vec<&str> = spans
        .iter()
        .filter(|s| s.span.name == "dump")
        .inspect(|s| assert_eq!(s.parent_span_id(), root.span_id(), "a table's dump is a child of the backup"))
        .filter_map(|s| s.attribute("table"))
        .collect();
    dumped.sort();
    assert_eq!(dumped, ["a", "b"]);
    assert!(!format!("{spans:?}").contains(PASSWORD), "no secret in a span");

    server.sql("DROP DATABASE app");
    let output = agent(&receiver, &server, &["restore", "--from", &location]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let spans = spans_after(&receiver, "restore");
    let root = spans.iter().find(|s| s.span.name == "restore").unwrap();
    assert_eq!(root.trace_id(), TRACE_ID);
    assert_eq!(root.parent_span_id(), PARENT_SPAN_ID);
    let database = spans.iter().find(|s| s.span.name == "restore.database").expect("a span per database");
    assert_eq!(database.parent_span_id(), root.span_id());
    let loads: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.span.name == "load").collect();
    assert_eq!(loads.len(), 2, "one span per chunk loaded");
    assert!(loads.iter().all(|s| s.parent_span_id() == database.span_id() && s.trace_id() == TRACE_ID));
}
