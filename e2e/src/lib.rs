//! Shared set-up of the end-to-end tests. They create and delete real objects in the cluster
//! of `KUBECONFIG`, which must have the suite installed (see e2e/README.md), so every test is
//! `#[ignore]`d with the reason, and runs only when asked: `e2e/run.sh`, which skips with a
//! message when no cluster is configured, or `cargo test -p visitors-e2e -- --ignored`.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};


/// A client for the e2e cluster. The tests were asked for explicitly, so a missing or
/// unreachable cluster is a failure with the reason, never a silent pass.
pub async fn cluster() -> Client {
    let client = Client::try_default().await.expect("no usable KUBECONFIG or in-cluster configuration for the e2e cluster");
    client.apiserver_version().await.expect("the e2e cluster's API server does not answer");
    client
}

/// A fresh namespace for one test, deleted by [`TestNamespace::delete`].
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", unique_suffix());
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "visitors-e2e"}}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &namespace).await.expect("create the test namespace");
        Self { name, client: client.clone() }
    }

    pub async fn delete(self) {
        let _ = Api::<Namespace>::all(self.client).delete(&self.name, &DeleteParams::background()).await;
    }
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{}-{nanos:x}", std::process::id())
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Polls `check` every second until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
