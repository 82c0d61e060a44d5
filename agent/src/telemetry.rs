//! Logs on stderr and, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans exported over
//! OTLP/HTTP with the exporter the controllers use too (`visitors_telemetry`). An invocation
//! started by a controller gets `TRACEPARENT` (W3C trace context): its spans are then
//! children of the controller's span, in the same trace. Spans carry names of databases,
//! tables and files, never credentials.

use std::io::IsTerminal;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use visitors_telemetry::{TRACEPARENT_ENV, otel_layer, otlp_endpoint, service_name, tracer_provider};

const SERVICE: &str = "visitors-agent";

/// Keeps span export alive; [`Telemetry::shutdown`] flushes what is pending.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Installs the global subscriber: logs to stderr filtered by `RUST_LOG` (default `info`), and
/// span export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (a bad endpoint is logged, and the
/// process goes on without export).
pub fn init() -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    let service = service_name(SERVICE);
    let provider = otlp_endpoint().and_then(|endpoint| match tracer_provider(&endpoint, &service) {
        Ok(provider) => Some(provider),
        Err(error) => {
            eprintln!("warning: spans are not exported: {error}");
            None
        }
    });
    // Spans are exported whatever RUST_LOG says about log lines.
    let spans = provider.as_ref().map(|p| otel_layer(p, &service).with_filter(EnvFilter::new("visitors_agent=info")));
    tracing_subscriber::registry().with(logs).with(spans).init();
    Telemetry { provider }
}

impl Telemetry {
    /// Flushes pending spans; call before the process exits.
    pub fn shutdown(mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = visitors_telemetry::shut_down(provider)
        {
            eprintln!("warning: could not flush spans: {error}");
        }
    }
}

/// Makes `span` a child of the trace context in `TRACEPARENT` (and `TRACESTATE`), if any.
pub fn continue_trace(span: &tracing::Span) {
    if let Err(error) = visitors_telemetry::continue_trace_from_env(span) {
        tracing::warn!("cannot continue the trace of {TRACEPARENT_ENV}: {error}");
    }
}
