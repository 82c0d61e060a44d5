//! The binary explains why it cannot start when no cluster is configured or reachable.

#[test]
fn explains_missing_and_unreachable_clusters() {
    controller_common::testing::assert_binary_explains_startup_failures(env!("CARGO_BIN_EXE_visitors-controller"));
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_visitors-controller"))
        .args(["--leader-election", "false", "--metrics-address", "127.0.0.1:0", "--log-format", "text"])
        .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
        .env("HOME", dir.path())
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("the binary runs");
    let logs = String::from_utf8_lossy(&output.stdout);
    assert!(logs.contains("cannot start"), "the start-up failure is logged: {logs}");
    assert!(!logs.contains('\u{1b}'), "escape sequences in logs written to a pipe: {logs:?}");
}
