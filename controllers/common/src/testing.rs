//! A scripted mock of the Kubernetes API server (on kube's tower-test mock), for reconcile
//! tests without a cluster: each test states the requests it expects, in order, and what the
//! server answers; a request the script did not expect fails the test.

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::Value;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// The server side of a mock client.
pub struct MockApiServer {
    handle: Handle,
}

/// One request the code under test sent.
#[derive(Debug)]
pub struct Received {
    pub method: Method,
    /// Path and query, for example `/apis/example.com/v1/namespaces/ns/visitorsapps/ex/status?...`.
    pub uri: String,
    /// The JSON body (Null when empty).
    pub body: Value,
}

impl Received {
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or(&self.uri)
    }
}

/// A client whose requests go to the returned mock server.
pub fn mock_client() -> (Client, MockApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), MockApiServer { handle })
}

impl MockApiServer {
    /// Waits for the next request, checks its method and path, answers `status` with
    /// `response`, and returns what was received.
    pub async fn expect(&mut self, method: Method, path: &str, status: StatusCode, response: Value) -> Received {
        let received = self.next_request(status, response).await;
        assert_eq!((&received.method, received.path()), (&method, path), "unexpected request: {received:?}");
        received
    }

    /// Like [`Self::expect`] but answers 200 with the request's own body (what an apply or an
    /// update of an unchanged object returns).
    pub async fn expect_echo(&mut self, method: Method, path: &str) -> Received {
        let (request, send) = self.handle.next_request().await.expect("the code under test sent no request");
        let received = into_received(request).await;
        assert_eq!((&received.method, received.path()), (&method, path), "unexpected request: {received:?}");
        send.send_response(json_response(StatusCode::OK, &received.body));
        received
    }

    /// Waits for the next request, checks its method and path, and answers with what `answer`
    /// makes of it (for example the stored object with the applied status merged in).
    pub async fn expect_with(
        &mut self,
        method: Method,
        path: &str,
        answer: impl FnOnce(&Received) -> (StatusCode, Value),
    ) -> Received {
        let (request, send) = self.handle.next_request().await.expect("the code under test sent no request");
        let received = into_received(request).await;
        assert_eq!((&received.method, received.path()), (&method, path), "unexpected request: {received:?}");
        let (status, body) = answer(&received);
        send.send_response(json_response(status, &body));
        received
    }

    /// Answers whatever comes next with `status` and `response`.
    pub async fn next_request(&mut self, status: StatusCode, response: Value) -> Received {
        let (request, send) = self.handle.next_request().await.expect("the code under test sent no request");
        let received = into_received(request).await;
        send.send_response(json_response(status, &response));
        received
    }

    /// Asserts that no request arrives within `wait`.
    pub async fn expect_no_request(&mut self, wait: Duration) {
        if let Ok(Some((request, _))) = tokio::time::timeout(wait, self.handle.next_request()).await {
            panic!("unexpected request: {} {}", request.method(), request.uri());
        }
    }
}

async fn into_received(request: Request<Body>) -> Received {
    let method = request.method().clone();
    let uri = request.uri().path_and_query().map(ToString::to_string).unwrap_or_default();
    let bytes = request.into_body().collect_bytes().await.expect("a readable request body");
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
    Received { method, uri, body }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(body).expect("JSON serialises")))
        .expect("a valid response")
}

/// A Kubernetes `Status` body for error answers, for example a 404.
pub fn status_error(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message})
}

/// Runs a controller binary with no cluster configured, then with an unreachable one, and
/// checks that it exits non-zero with one line saying why; also that `--help` documents the
/// environment. Used by each controller crate's tests against its real binary.
pub fn assert_binary_explains_startup_failures(binary: &str) {
    let dir = std::env::temp_dir().join(format!("startup-check-{}-{}", std::process::id(), binary.len()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let run = |kubeconfig: &std::path::Path| {
        std::process::Command::new(binary)
            .args(["--leader-election", "false", "--metrics-address", "127.0.0.1:0"])
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", &dir)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .output()
            .expect("the binary runs")
    };

    let missing = run(&dir.join("no-such-kubeconfig"));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no Kubernetes cluster is configured: set KUBECONFIG"), "{stderr}");

    let unreachable_config = dir.join("unreachable-kubeconfig");
    std::fs::write(&unreachable_config, UNREACHABLE_KUBECONFIG).expect("a kubeconfig file");
    let unreachable = run(&unreachable_config);
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach the Kubernetes API server at https://127.0.0.1:9/"), "{stderr}");

    let help = std::process::Command::new(binary).arg("--help").output().expect("the binary runs");
    let help = String::from_utf8_lossy(&help.stdout);
    for documented in [
        "--namespace",
        "WATCH_NAMESPACE",
        "--metrics-address",
        "--log-format",
        "LEADER_ELECTION",
        "KUBECONFIG",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "RUST_LOG",
    ] {
        assert!(help.contains(documented), "--help does not mention {documented}:\n{help}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kubeconfig naming a port nothing listens on (9, discard).
const UNREACHABLE_KUBECONFIG: &str = "apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster:
    server: https://127.0.0.1:9
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-real-token
contexts:
- name: nowhere
  context:
    cluster: nowhere
    user: nobody
current-context: nowhere
";
