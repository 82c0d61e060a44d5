//! The binary explains why it cannot start: no cluster configured or reachable, or no agent
//! image configured.

#[test]
fn explains_missing_and_unreachable_clusters() {
    // The agent image is required configuration; this test is about the cluster.
    // SAFETY: set before any thread of this test process reads the environment.
    unsafe { std::env::set_var("AGENT_IMAGE", "registry.example/visitors-operator:test") };
    controller_common::testing::assert_binary_explains_startup_failures(env!("CARGO_BIN_EXE_restore-controller"));
}

#[test]
fn refuses_to_start_without_an_agent_image() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_restore-controller"))
        .args(["--leader-election", "false", "--metrics-address", "127.0.0.1:0"])
        .env_remove("AGENT_IMAGE")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--agent-image <AGENT_IMAGE>"), "{stderr}");
}
