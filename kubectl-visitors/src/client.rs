//! The caller's own Kubernetes client: their kubeconfig, context and RBAC, nothing of ours;
//! with `-v`, each request printed to stderr as it ends, and their count at exit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower_http::trace::TraceLayer;

use crate::cli::Global;
use crate::error::Error;

static REQUESTS: AtomicUsize = AtomicUsize::new(0);

/// The API requests this process has sent.
pub fn requests_sent() -> usize {
    REQUESTS.load(Ordering::Relaxed)
}

/// A client and the namespace commands act in.
pub struct Session {
    pub client: Client,
    pub namespace: String,
}

pub async fn connect(global: &Global) -> Result<Session, Error> {
    let mut config = config(global).await?;
    if let Some(user) = &global.as_user {
        config.auth_info.impersonate = Some(user.clone());
        if !global.as_groups.is_empty() {
            config.auth_info.impersonate_groups = Some(global.as_groups.clone());
        }
    }
    config.read_timeout = Some(Duration::from_secs(30));
    let namespace = global.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let verbose = global.verbose;
    let counting = TraceLayer::new_for_http()
        // No tracing subscriber here: a disabled span costs nothing.
        .make_span_with(|_: &http::Request<kube::client::Body>| tracing::Span::none())
        .on_request(move |request: &http::Request<kube::client::Body>, _: &tracing::Span| {
            REQUESTS.fetch_add(1, Ordering::Relaxed);
            if verbose {
                eprintln!("> {} {}", request.method(), request.uri().path_and_query().map_or("", |p| p.as_str()));
            }
        })
        .on_response(move |response: &http::Response<_>, latency: Duration, _: &tracing::Span| {
            if verbose {
                eprintln!("< {} in {} ms", response.status().as_u16(), latency.as_millis());
            }
        });
    let client = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| Error::Kubeconfig(e.to_string()))?
        .with_layer(&counting)
        .build();
    Ok(Session { client, namespace })
}

async fn config(global: &Global) -> Result<Config, Error> {
    let options = KubeConfigOptions { context: global.context.clone(), ..KubeConfigOptions::default() };
    let kubeconfig_error = |e: kube::config::KubeconfigError| Error::Kubeconfig(e.to_string());
    match global.kubeconfig.as_deref().filter(|path| !path.is_empty()) {
        Some(paths) => {
            let mut merged: Option<Kubeconfig> = None;
            for path in std::env::split_paths(paths) {
                let file = Kubeconfig::read_from(&path).map_err(kubeconfig_error)?;
                merged = Some(match merged {
                    Some(earlier) => earlier.merge(file).map_err(kubeconfig_error)?,
                    None => file,
                });
            }
            let merged = merged.ok_or_else(|| Error::Kubeconfig(format!("no file in {paths:?}")))?;
            Config::from_custom_kubeconfig(merged, &options).await.map_err(kubeconfig_error)
        }
        None if global.context.is_some() => Config::from_kubeconfig(&options).await.map_err(kubeconfig_error),
        None => Config::infer().await.map_err(|e| Error::Kubeconfig(e.to_string())),
    }
}
