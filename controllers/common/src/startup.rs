//! Startup checks with errors that say what to do: is a cluster configured and reachable, is
//! the controller's CRD installed and established.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::client::ClientBuilder;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, Config};

use crate::metrics::ApiRequests;

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(
        "no Kubernetes cluster is configured: set KUBECONFIG to a kubeconfig file, create ~/.kube/config, or run inside a pod ({0})"
    )]
    NoCluster(String),
    #[error("cannot use the Kubernetes configuration: {0}")]
    BadConfig(String),
    #[error("cannot reach the Kubernetes API server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "CustomResourceDefinition {0} is not installed; install the CRDs (`kubectl apply -f deploy/crds/`) or the Helm chart first"
    )]
    CrdMissing(String),
    #[error(
        "CustomResourceDefinition {name} was not established within {seconds} s; check `kubectl describe crd {name}`"
    )]
    CrdNotEstablished { name: String, seconds: u64 },
    #[error(
        "cannot read CustomResourceDefinition {name}: {reason} (the controller's RBAC needs get/list/watch on customresourcedefinitions)"
    )]
    CrdUnreadable { name: String, reason: String },
    #[error("leader election failed: {0}")]
    LeaderElection(String),
    #[error("cannot serve metrics and health on {address}: {reason}")]
    Server { address: String, reason: String },
}

/// Installs ring as the process's TLS crypto provider. Builds that link both ring and
/// aws-lc-rs (the whole workspace, the release image) leave rustls unable to choose one, and the
/// first TLS client would panic. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Connects to the cluster given by KUBECONFIG, ~/.kube/config or the in-cluster environment,
/// and checks that its API server answers. Requests made during a reconcile get their own
/// trace spans ([`crate::telemetry::request_spans`]); every request is counted into `requests`.
pub async fn connect(requests: &ApiRequests) -> Result<Client, StartupError> {
    install_crypto_provider();
    let config = Config::infer().await.map_err(|e| StartupError::NoCluster(e.to_string()))?;
    let url = config.cluster_url.to_string();
    let client = ClientBuilder::try_from(config)
        .map_err(|e| StartupError::BadConfig(e.to_string()))?
        .with_layer(&crate::telemetry::request_spans(requests))
        .build();
    let version = client
        .apiserver_version()
        .await
        .map_err(|e| StartupError::Unreachable { url: url.clone(), reason: e.to_string() })?;
    tracing::info!(%url, version = %version.git_version, "connected to the Kubernetes API server");
    Ok(client)
}

/// Waits until CRD `name` is established, for at most `timeout`.
pub async fn wait_for_crd(client: Client, name: &str, timeout: Duration) -> Result<(), StartupError> {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let exists = api
        .get_opt(name)
        .await
        .map_err(|e| StartupError::CrdUnreadable { name: name.into(), reason: e.to_string() })?;
    if exists.is_none() {
        tracing::info!(crd = name, "waiting for the CustomResourceDefinition to be installed");
    }
    match tokio::time::timeout(timeout, await_condition(api, name, conditions::is_crd_established())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(StartupError::CrdUnreadable { name: name.into(), reason: e.to_string() }),
        Err(_) if exists.is_none() => Err(StartupError::CrdMissing(name.into())),
        Err(_) => Err(StartupError::CrdNotEstablished { name: name.into(), seconds: timeout.as_secs() }),
    }
}
