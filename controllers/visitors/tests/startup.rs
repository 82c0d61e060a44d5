//! The binary explains why it cannot start when no cluster is configured or reachable.

#[test]
fn explains_missing_and_unreachable_clusters() {
    controller_common::testing::assert_binary_explains_startup_failures(env!("CARGO_BIN_EXE_visitors-controller"));
}
