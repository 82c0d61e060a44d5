//! Trace export shared by the controllers and the agent, without anything of Kubernetes: the
//! OTLP/HTTP exporter (which Jaeger reads natively), the layer that turns `tracing` spans into
//! OpenTelemetry spans, and the W3C trace context a controller hands to the agent it starts
//! (`TRACEPARENT`), so that the agent's spans join the reconcile's trace.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt};

/// The environment variable that turns trace export on: the collector's base URL, for
/// example `http://jaeger-collector:4318`.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The environment variable that overrides the service name spans are reported under.
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// The W3C trace context a child process's spans continue.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// The W3C trace state that goes with [`TRACEPARENT_ENV`].
pub const TRACESTATE_ENV: &str = "TRACESTATE";

/// The exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP trace exporter for {endpoint}: {reason}")]
pub struct ExporterError {
    pub endpoint: String,
    pub reason: String,
}

/// The collector spans go to, when [`OTLP_ENDPOINT_ENV`] is set and not empty.
pub fn otlp_endpoint() -> Option<String> {
    non_empty_env(OTLP_ENDPOINT_ENV)
}

/// The service name: [`SERVICE_NAME_ENV`] when set, else `default`.
pub fn service_name(default: &str) -> String {
    non_empty_env(SERVICE_NAME_ENV).unwrap_or_else(|| default.to_string())
}

/// A tracer provider that batches spans to `endpoint` (the collector's base URL) over
/// OTLP/HTTP with protobuf bodies.
pub fn tracer_provider(endpoint: &str, service: &str) -> Result<SdkTracerProvider, ExporterError> {
    let traces_url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url)
        .build()
        .map_err(|e| ExporterError { endpoint: endpoint.to_string(), reason: e.to_string() })?;
    let resource = Resource::builder().with_service_name(service.to_string()).build();
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

/// The tracing layer that turns spans into OpenTelemetry spans of `provider`.
pub fn otel_layer<S>(provider: &SdkTracerProvider, service: &str) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer(service.to_string()))
}

/// The OpenTelemetry trace id of `span`, when it is being exported.
pub fn trace_id(span: &tracing::Span) -> Option<opentelemetry::TraceId> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| span_context.trace_id())
}

/// The W3C `traceparent` of `span`, for a child process's [`TRACEPARENT_ENV`], when the span
/// is being exported.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
    carrier.remove("traceparent")
}

/// Makes `span` a child of the trace context in [`TRACEPARENT_ENV`] (and [`TRACESTATE_ENV`]),
/// if the environment holds one. A context that cannot be adopted is returned as the error.
pub fn continue_trace_from_env(span: &tracing::Span) -> Result<(), String> {
    let Some(traceparent) = non_empty_env(TRACEPARENT_ENV) else { return Ok(()) };
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent)]);
    if let Some(tracestate) = non_empty_env(TRACESTATE_ENV) {
        carrier.insert("tracestate".into(), tracestate);
    }
    let parent = TraceContextPropagator::new().extract(&carrier);
    span.set_parent(parent).map_err(|error| error.to_string())
}

/// Flushes and stops `provider`; what could not be flushed is returned as the error.
pub fn shut_down(provider: SdkTracerProvider) -> Result<(), String> {
    provider.shutdown().map_err(|error| error.to_string())
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn traceparent_names_the_current_span_when_traces_are_exported() {
        assert_eq!(traceparent(&tracing::info_span!("no subscriber")), None);
        let provider = SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry().with(otel_layer(&provider, "test"));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("reconcile");
            let _entered = span.enter();
            let parent = traceparent(&span).expect("an exported span has a context");
            let parts: Vec<&str> = parent.split('-').collect();
            assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"), "{parent}");
            let trace = trace_id(&span).unwrap().to_string();
            assert_eq!(parts[1], trace);
        });
    }
}
