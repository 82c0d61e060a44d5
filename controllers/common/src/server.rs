//! The HTTP server of a controller: `/metrics`, `/healthz` (the process is alive) and
//! `/readyz` (the controller is connected, its CRD is established and it is reconciling or
//! standing by for leadership).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// What the endpoints report.
pub struct Health {
    pub metrics: Arc<Metrics>,
    ready: AtomicBool,
}

impl Health {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self { metrics, ready: AtomicBool::new(false) })
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], health.metrics.encode())
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.is_ready() { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "starting") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio_util::sync::CancellationToken;

    async fn get_text(address: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let status = response.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, response)
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics() {
        let health = Health::new(Arc::new(Metrics::new("test")));
        drop(health.metrics.reconcile_started());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn({
            let shutdown = shutdown.clone();
            let router = router(health.clone());
            async move { axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await }
        });

        assert_eq!(get_text(address, "/healthz").await.0, 200);
        assert_eq!(get_text(address, "/readyz").await.0, 503);
        health.set_ready(true);
        assert_eq!(get_text(address, "/readyz").await.0, 200);
        let (status, body) = get_text(address, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("visitors_operator_reconciles_total{controller=\"test\"} 1"), "{body}");

        shutdown.cancel();
        server.await.unwrap().unwrap();
    }
}
