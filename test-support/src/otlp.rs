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

/// Attributes worth showing next to a span's name in [`render_trace`].
const SHOWN_ATTRIBUTES: [&str; 6] = ["object.kind", "http.status_code", "database", "table", "range", "rows"];

/// The spans of trace `trace_id` as an indented tree, children in start order, one line per
/// span: name, service, duration and a few attributes. A span whose parent was not received
/// is a root.
pub fn render_trace(spans: &[ReceivedSpan], trace_id: &str) -> String {
    let mut in_trace: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id() == trace_id).collect();
    in_trace.sort_by_key(|s| s.span.start_time_unix_nano);
    let ids: Vec<String> = in_trace.iter().map(|s| s.span_id()).collect();
    let mut out = String::new();
    for root in in_trace.iter().filter(|s| !ids.contains(&s.parent_span_id())) {
        render_span(root, &in_trace, 0, &mut out);
    }
    out
}

fn render_span(span: &ReceivedSpan, spans: &[&ReceivedSpan], depth: usize, out: &mut String) {
    let nanos = span.span.end_time_unix_nano.saturating_sub(span.span.start_time_unix_nano);
    let attributes: Vec<String> = SHOWN_ATTRIBUTES
        .iter()
        .filter_map(|key| {
            let value =
                span.attribute(key).map(str::to_string).or_else(|| span.int_attribute(key).map(|i| i.to_string()));
            value.map(|v| format!("{key}={v}"))
        })
        .collect();
    out.push_str(&format!(
        "{}{} [{}] {}{}{}\n",
        "  ".repeat(depth),
        span.span.name,
        span.service,
        duration_text(nanos),
        if attributes.is_empty() { "" } else { "  " },
        attributes.join(" "),
    ));
    for child in spans.iter().filter(|c| c.parent_span_id() == span.span_id()) {
        render_span(child, spans, depth + 1, out);
    }
}

fn duration_text(nanos: u64) -> String {
    let millis = nanos as f64 / 1e6;
    if millis < 1000.0 { format!("{millis:.1} ms") } else { format!("{:.2} s", millis / 1000.0) }
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

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::AnyValue;

    use super::*;

    fn span(id: u8, parent: u8, name: &str, start_ms: u64, end_ms: u64, attributes: Vec<KeyValue>) -> ReceivedSpan {
        ReceivedSpan {
            service: if id == 1 { "backup-controller".into() } else { "visitors-agent".into() },
            span: Span {
                trace_id: vec![7; 16],
                span_id: vec![id; 8],
                parent_span_id: if parent == 0 { Vec::new() } else { vec![parent; 8] },
                name: name.into(),
                start_time_unix_nano: start_ms * 1_000_000,
                end_time_unix_nano: end_ms * 1_000_000,
                attributes,
                ..Span::default()
            },
        }
    }

    fn int(key: &str, value: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(Value::IntValue(value)) }),
            ..KeyValue::default()
        }
    }

    #[test]
    fn a_trace_renders_as_a_tree_in_start_order_with_durations() {
        let mut other_trace = span(9, 0, "elsewhere", 0, 1, Vec::new());
        other_trace.span.trace_id = vec![8; 16];
        let spans = [
            span(3, 1, "backup", 20, 2520, Vec::new()),
            span(1, 0, "reconcile", 0, 30, Vec::new()),
            span(2, 1, "POST jobs", 5, 9, vec![int("http.status_code", 201)]),
            span(4, 3, "dump", 100, 400, Vec::new()),
            other_trace,
        ];
        assert_eq!(
            render_trace(&spans, &hex(&[7; 16])),
            "reconcile [backup-controller] 30.0 ms\n\
             \x20 POST jobs [visitors-agent] 4.0 ms  http.status_code=201\n\
             \x20 backup [visitors-agent] 2.50 s\n\
             \x20   dump [visitors-agent] 300.0 ms\n"
        );
    }
}
