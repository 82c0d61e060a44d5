//! The binary explains why it cannot start: no cluster configured or reachable, or no agent
//! image configured.

use controller_common::testing::{assert_binary_explains_startup_failures, assert_binary_needs_an_agent_image};

const BINARY: &str = env!("CARGO_BIN_EXE_backup-controller");

#[test]
fn explains_missing_and_unreachable_clusters() {
    // The agent image is required configuration; this test is about the cluster.
    // SAFETY: set before any thread of this test process reads the environment.
    unsafe { std::env::set_var("AGENT_IMAGE", "registry.example/visitors-operator:test") };
    assert_binary_explains_startup_failures(BINARY);
}

#[test]
fn refuses_to_start_without_an_agent_image() {
    assert_binary_needs_an_agent_image(BINARY);
}
