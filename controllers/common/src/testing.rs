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

/// Asserts that controller `binary` refuses to start without an agent image, naming the flag.
pub fn assert_binary_needs_an_agent_image(binary: &str) {
    let output = std::process::Command::new(binary)
        .args(["--leader-election", "false", "--metrics-address", "127.0.0.1:0"])
        .env_remove("AGENT_IMAGE")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--agent-image <AGENT_IMAGE>"), "{stderr}");
}

/// A [`crate::Runtime`] of controller `name` for reconcile tests, talking to a mock API server.
pub fn mock_runtime(name: &str) -> (crate::Runtime, MockApiServer) {
    let (client, server) = mock_client();
    let runtime = crate::Runtime {
        client: client.clone(),
        metrics: std::sync::Arc::new(crate::metrics::Metrics::new(name)),
        backoff: crate::backoff::ObjectBackoff::new(Duration::from_millis(500), Duration::from_secs(300)),
        events: crate::events::Events::new(client, name, None),
        field_manager: name.into(),
        resync: Duration::from_secs(600),
    };
    (runtime, server)
}

/// The stored `object` with the applied status, as the API server answers a status apply.
pub fn with_applied_status<K: serde::Serialize>(object: &K) -> impl FnOnce(&Received) -> (StatusCode, Value) + use<K> {
    let mut stored = serde_json::to_value(object).expect("a Kubernetes object serializes");
    move |received| {
        stored["status"] = received.body["status"].clone();
        (StatusCode::OK, stored)
    }
}

pub fn not_found() -> Value {
    status_error(404, "NotFound", "not found")
}

/// What agent runs on VisitorsApp `ex` in namespace `shop` read, as the API server returns it:
/// the app, its credentials Secret, the backup claim `backups`, its database Lease, Jobs and
/// the agent's pods.
pub mod shop {
    use serde_json::{Value, json};

    pub const APP_PATH: &str = "/apis/example.com/v1/namespaces/shop/visitorsapps/ex";
    pub const SECRET_PATH: &str = "/api/v1/namespaces/shop/secrets/ex-mysql-credentials";
    pub const CLAIM_PATH: &str = "/api/v1/namespaces/shop/persistentvolumeclaims/backups";
    pub const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/ex-mysql-operations";
    pub const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";
    pub const EVENTS_PATH: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";
    pub const JOBS_PATH: &str = "/apis/batch/v1/namespaces/shop/jobs";
    pub const PODS_PATH: &str = "/api/v1/namespaces/shop/pods";

    /// VisitorsApp `ex` with `size` backend replicas, its MySQL serving TLS from the generated
    /// Secret `ex-mysql-tls`.
    pub fn app(size: i32) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp",
               "metadata": {"name": "ex", "namespace": "shop", "uid": "app-1"}, "spec": {"size": size},
               "status": {"tls": {"mode": "Required", "secretName": "ex-mysql-tls"},
                          "conditions": [{"type": "DatabaseReady", "status": "True", "reason": "Connected",
                                          "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    }

    pub fn credentials_secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ex-mysql-credentials", "namespace": "shop"},
               "data": {"root-password": "c2VjcmV0"}})
    }

    /// The metadata of claim `backups`.
    pub fn claim() -> Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
               "metadata": {"name": "backups", "namespace": "shop"}})
    }

    /// The database Lease of `ex`, held by `holder` (an identity, or "" when free).
    pub fn lease(holder: &str) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "ex-mysql-operations", "namespace": "shop", "resourceVersion": "5", "uid": "l-1"},
               "spec": {"holderIdentity": holder}})
    }

    /// Job `name` of the `kind` object `owner` (UID `uid`), started, with Job `conditions`.
    pub fn job(name: &str, kind: &str, owner: &str, uid: &str, conditions: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": "shop",
                            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": kind, "name": owner, "uid": uid, "controller": true}]},
               "spec": {"template": {"spec": {"containers": []}}},
               "status": {"startTime": "2026-11-23T10:00:00Z", "conditions": conditions}})
    }

    /// The pod list of a Job whose agent container in `pod` exited with `exit_code` and
    /// termination `message`.
    pub fn agent_pod_with_message(pod: &str, message: &str, exit_code: i32) -> Value {
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [{
            "metadata": {"name": pod, "namespace": "shop"},
            "status": {"containerStatuses": [{"name": "agent", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "reason": "Completed", "message": message}}}]}
        }]})
    }
}

/// What the agent reads from each container of agent Job `job` (its init containers first),
/// parsed by the agent's own parser: the arguments, which must parse, and the environment,
/// whose every variable must be one the agent reads, a secret only by Secret reference.
pub fn agent_contract_of(job: &k8s_openapi::api::batch::v1::Job) -> Vec<visitors_agent_contract::AgentCli> {
    use clap::Parser;
    use visitors_agent_contract::env;
    let pod = job.spec.as_ref().and_then(|s| s.template.spec.as_ref()).expect("a Job has a pod template");
    let containers = pod.init_containers.iter().flatten().chain(&pod.containers);
    containers
        .map(|container| {
            let command = container.command.clone().unwrap_or_default();
            assert_eq!(command, [crate::agent_job::AGENT_BINARY], "{} runs the agent", container.name);
            let argv = command.into_iter().chain(container.args.clone().unwrap_or_default());
            let cli = visitors_agent_contract::AgentCli::try_parse_from(argv)
                .unwrap_or_else(|error| panic!("the agent cannot parse {}'s arguments: {error}", container.name));
            for var in container.env.iter().flatten() {
                assert!(env::ALL.contains(&var.name.as_str()), "{} is not a variable the agent reads", var.name);
                if env::SECRETS.contains(&var.name.as_str()) {
                    assert!(var.value.is_none(), "{} must come from a Secret, never as a value", var.name);
                }
            }
            cli
        })
        .collect()
}
