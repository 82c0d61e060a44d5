//! Starts an in-process OTLP/HTTP receiver, exports a reconcile span to it through the same
//! code the controllers use, and checks what arrived.

use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use controller_common::telemetry::{otel_layer, reconcile_span, request_spans, trace_id, tracer_provider};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tracing_subscriber::layer::SubscriberExt;
use visitors_api::VisitorsApp;

/// Runs an OTLP/HTTP receiver on a free port in its own thread; every export request body is
/// decoded and sent down the returned channel.
fn start_receiver() -> (String, mpsc::Receiver<ExportTraceServiceRequest>) {
    let (sender, receiver) = mpsc::channel();
    let (address_sender, address_receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            address_sender.send(listener.local_addr().unwrap()).unwrap();
            let app = Router::new().route(
                "/v1/traces",
                post(move |body: Bytes| {
                    let sender = sender.clone();
                    async move {
                        let request = ExportTraceServiceRequest::decode(body).expect("a valid OTLP protobuf body");
                        let _ = sender.send(request);
                        ""
                    }
                }),
            );
            axum::serve(listener, app).await.unwrap();
        });
    });
    let address = address_receiver.recv_timeout(Duration::from_secs(10)).expect("the receiver starts");
    (format!("http://{address}"), receiver)
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

fn string(value: Option<&Value>) -> Option<&str> {
    match value {
        Some(Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

#[test]
fn reconcile_span_is_exported_with_object_attributes() {
    let (endpoint, received) = start_receiver();
    let provider = tracer_provider(&endpoint, "visitors-controller-test").unwrap();
    let subscriber = tracing_subscriber::registry().with(otel_layer(&provider, "visitors-controller-test"));

    let mut app = VisitorsApp::new("ex", Default::default());
    app.metadata.namespace = Some("shop".into());
    app.metadata.generation = Some(7);
    let recorded_trace_id = tracing::subscriber::with_default(subscriber, || {
        let span = reconcile_span(&app);
        let _entered = span.enter();
        tracing::info!("reconciling");
        trace_id(&span).expect("an exported span has a valid trace id")
    });
    provider.force_flush().unwrap();

    let request = received.recv_timeout(Duration::from_secs(20)).expect("the exporter sent the span");
    let resource_spans = &request.resource_spans[0];
    let resource = resource_spans.resource.as_ref().unwrap();
    assert_eq!(string(attribute(&resource.attributes, "service.name")), Some("visitors-controller-test"));

    let span = resource_spans
        .scope_spans
        .iter()
        .flat_map(|s| &s.spans)
        .find(|s| s.name == "reconcile")
        .expect("a reconcile span");
    assert_eq!(string(attribute(&span.attributes, "object.kind")), Some("VisitorsApp"));
    assert_eq!(string(attribute(&span.attributes, "object.namespace")), Some("shop"));
    assert_eq!(string(attribute(&span.attributes, "object.name")), Some("ex"));
    assert_eq!(attribute(&span.attributes, "object.generation"), Some(&Value::IntValue(7)));
    assert_eq!(hex(&span.trace_id), recorded_trace_id.to_string());
    provider.shutdown().unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span the receiver got within `wait`, until `done` says enough arrived.
fn spans_until(
    received: &mpsc::Receiver<ExportTraceServiceRequest>,
    wait: Duration,
    done: impl Fn(&[Span]) -> bool,
) -> Vec<Span> {
    let deadline = std::time::Instant::now() + wait;
    let mut spans = Vec::new();
    while !done(&spans) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(request) = received.recv_timeout(left) else { break };
        for resource_spans in request.resource_spans {
            spans.extend(resource_spans.scope_spans.into_iter().flat_map(|s| s.spans));
        }
    }
    spans
}

#[test]
fn api_requests_of_a_reconcile_are_its_child_spans() {
    use http::{Request, Response, StatusCode};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    use kube::client::{Body, ClientBuilder};
    use tracing::Instrument;

    let (endpoint, received) = start_receiver();
    let provider = tracer_provider(&endpoint, "visitors-controller-test").unwrap();
    let subscriber = tracing_subscriber::registry().with(otel_layer(&provider, "visitors-controller-test"));
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    runtime.block_on(async {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = ClientBuilder::new(service, "shop").with_layer(&request_spans()).build();
        tokio::spawn(async move {
            let answers = [(StatusCode::NOT_FOUND, "missing"), (StatusCode::NOT_FOUND, "missing"), (StatusCode::OK, "ok")];
            for (status, name) in answers {
                let (_, send) = handle.next_request().await.expect("a request");
                let body = if status == StatusCode::OK {
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
                } else {
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"})
                };
                send.send_response(
                    Response::builder().status(status).body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap(),
                );
            }
        });
        let api: Api<ConfigMap> = Api::namespaced(client, "shop");
        // Outside any reconcile (like a watch): no span of its own.
        api.get_opt("outside").await.unwrap();

        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.namespace = Some("shop".into());
        let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"password": "hunter2"}});
        async {
            api.get_opt("ex-config").await.unwrap();
            api.patch("ex-config", &PatchParams::apply("visitors-controller").force(), &Patch::Apply(&patch)).await.unwrap();
        }
        .instrument(reconcile_span(&app))
        .await;
    });
    provider.force_flush().unwrap();

    let is_request = |s: &Span| attribute(&s.attributes, "http.method").is_some();
    let spans = spans_until(&received, Duration::from_secs(20), |spans| {
        spans.iter().any(|s| s.name == "reconcile") && spans.iter().filter(|s| is_request(s)).count() >= 2
    });
    let reconcile = spans.iter().find(|s| s.name == "reconcile").expect("a reconcile span");
    let requests: Vec<&Span> = spans.iter().filter(|s| is_request(s)).collect();
    assert_eq!(requests.len(), 2, "one span per request of the reconcile, none outside it: {requests:#?}");
    for request in &requests {
        assert_eq!(request.parent_span_id, reconcile.span_id, "a child of the reconcile: {request:#?}");
        assert_eq!(request.trace_id, reconcile.trace_id);
        let path = string(attribute(&request.attributes, "url.path")).expect("a url.path");
        assert_eq!(path, "/api/v1/namespaces/shop/configmaps/ex-config", "the path, never the query");
    }
    let get = requests.iter().find(|s| s.name == "GET configmaps").expect("the GET, named by its resource");
    assert_eq!(attribute(&get.attributes, "http.status_code"), Some(&Value::IntValue(404)));
    let patch = requests.iter().find(|s| s.name == "PATCH configmaps").expect("the PATCH");
    assert_eq!(attribute(&patch.attributes, "http.status_code"), Some(&Value::IntValue(200)));
    assert!(!format!("{spans:?}").contains("hunter2"), "a request body never reaches a span");
    provider.shutdown().unwrap();
}
