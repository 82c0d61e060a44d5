//! Starts an in-process OTLP/HTTP receiver, exports a reconcile span to it through the same
//! code the controllers use, and checks what arrived.

use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use controller_common::telemetry::{otel_layer, reconcile_span, trace_id, tracer_provider};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};
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
