//! An OTLP/HTTP trace receiver for tests: serves `POST /v1/traces` (protobuf) on a thread of
//! its own and keeps every span it is sent, so a test can check names, attributes and parent
//! links of what a controller or the agent exported.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// One received span with the `service.name` of the process that sent it.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

impl ReceivedSpan {
    /// The string value of attribute `key`, if it has one.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        string_attribute(&self.span.attributes, key)
    }

    /// The integer value of attribute `key`, if it has one.
    pub fn int_attribute(&self, key: &str) -> Option<i64> {
        match self.span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()? {
            Value::IntValue(i) => Some(*i),
            _ => None,
        }
    }

    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    /// The parent span id in hex; empty for a root span.
    pub fn parent_span_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }
}

/// A running receiver; it stops with the test process.
pub struct OtlpReceiver {
    /// `http://host:port`, the value for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

impl OtlpReceiver {
    /// Listens on `address` (`127.0.0.1:0` picks a free port).
    pub fn start(address: &str) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                let app = Router::new().route(
                    "/v1/traces",
                    post(move |body: Bytes| {
                        let kept = kept.clone();
                        async move {
                            if let Ok(request) = ExportTraceServiceRequest::decode(body) {
                                kept.lock().unwrap_or_else(|p| p.into_inner()).extend(received_spans(request));
                            }
                            ""
                        }
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        Ok(Self { endpoint, spans })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits up to `timeout` for `found` to return something from the spans received so far.
    pub fn wait_for<T>(&self, timeout: Duration, mut found: impl FnMut(&[ReceivedSpan]) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = found(&self.spans()) {
                return Some(value);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn received_spans(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| string_attribute(&r.attributes, "service.name"))
            .unwrap_or_default()
            .to_string();
        for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(ReceivedSpan { service: service.clone(), span });
        }
    }
    spans
}

/// The string value of attribute `key` in `attributes`.
pub fn string_attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// Lower-case hex of an id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
