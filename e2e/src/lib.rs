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
    // The workspace links both of rustls' providers; name one (see controller_common::startup).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        Client::try_default().await.expect("no usable KUBECONFIG or in-cluster configuration for the e2e cluster");
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
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create the test namespace");
        Self { name, client: client.clone() }
    }

    /// Deletes the namespace, unless `E2E_KEEP_NAMESPACE=1` asks to keep it for inspection.
    pub async fn delete(self) {
        if std::env::var("E2E_KEEP_NAMESPACE").is_ok_and(|v| v == "1") {
            eprintln!("keeping namespace {}", self.name);
            return;
        }
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

/// How long one wait may take: `E2E_TIMEOUT_SECONDS`, default 600 (images may need pulling).
pub fn timeout() -> Duration {
    let seconds = std::env::var("E2E_TIMEOUT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    Duration::from_secs(seconds)
}

/// Polls `check` every few seconds until it returns `Ok`; after [`timeout`] fails naming
/// `what` and the last state `check` reported.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout();
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {:?} waiting for {what}; last seen: {last}",
            timeout()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}
