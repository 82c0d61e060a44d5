//! Logs and traces. Every reconcile is one span (`reconcile`) carrying the object's kind,
//! namespace, name and generation; when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, spans are sent
//! by OTLP/HTTP (which Jaeger reads natively) and the trace id is recorded on the span, so it
//! appears on every log line written inside it. Each Kubernetes API request made during a
//! reconcile is a child span (`kube.request`, see [`request_spans`]), and so is the visitors
//! controller's database check (`db.check`).

use std::io::IsTerminal;

use kube::{Resource, ResourceExt};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tower_http::classify::{ServerErrorsAsFailures, ServerErrorsFailureClass, SharedClassifier};
use tower_http::trace::{MakeSpan, OnFailure, OnRequest, OnResponse, TraceLayer};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};
pub use visitors_telemetry::{OTLP_ENDPOINT_ENV, otel_layer, trace_id, tracer_provider};

use crate::args::LogFormat;
use crate::metrics::ApiRequests;

const DEFAULT_FILTER: &str = "info,kube=warn,kube_lease_manager=warn";

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Exporter(#[from] visitors_telemetry::ExporterError),
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Keeps trace export alive; flushes pending spans when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = visitors_telemetry::shut_down(provider)
        {
            eprintln!("could not flush traces on shutdown: {error}");
        }
    }
}

/// Installs the global subscriber: logs in `format`, filtered by `RUST_LOG`, plus OTLP trace
/// export when `OTEL_EXPORTER_OTLP_ENDPOINT` is set. `service` is the default service name
/// (`OTEL_SERVICE_NAME` overrides it).
pub fn init(service: &str, format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let service = visitors_telemetry::service_name(service);
    let provider = match visitors_telemetry::otlp_endpoint() {
        Some(endpoint) => Some(tracer_provider(&endpoint, &service)?),
        None => None,
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let colour = use_colour(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let logs = match format {
        LogFormat::Json => {
            tracing_subscriber::fmt::layer().json().flatten_event(true).with_current_span(true).with_ansi(false).boxed()
        }
        LogFormat::Text => tracing_subscriber::fmt::layer().with_ansi(colour).boxed(),
    };
    let traces = provider.as_ref().map(|p| otel_layer(p, &service));
    Registry::default()
        .with(filter)
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(Telemetry { provider })
}

/// Whether text logs get ANSI colours: only on a terminal (a pod's log file, a pipe or a file
/// would be full of escape sequences otherwise), and never when `NO_COLOR` is set to anything
/// (<https://no-color.org>).
pub fn use_colour(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Opens the span of one reconcile of `object` and records its trace id (when traces are
/// exported) so every log line inside carries it.
pub fn reconcile_span<K>(object: &K) -> tracing::Span
where
    K: Resource<DynamicType = ()>,
{
    let span = tracing::info_span!(
        "reconcile",
        "object.kind" = %K::kind(&()),
        "object.namespace" = object.namespace().unwrap_or_default(),
        "object.name" = object.name_any(),
        "object.generation" = object.meta().generation.unwrap_or_default(),
        trace_id = tracing::field::Empty,
    );
    if let Some(trace_id) = trace_id(&span) {
        span.record("trace_id", tracing::field::display(trace_id));
    }
    span
}

/// The tower layer that gives each Kubernetes API request made inside a span (a reconcile) a
/// child span `kube.request`: `http.method`, `url.path` (never the query), `http.status_code`,
/// and the OpenTelemetry name `<METHOD> <resource>` (`PATCH statefulsets`), so that a trace
/// shows where a reconcile's time went. Requests outside any span (watches, the Lease) get none:
/// they would be thousands of one-span traces. Every request, in a span or not, is counted into
/// the controller's [`ApiRequests`].
pub type RequestSpanLayer = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    RequestSpan,
    CountRequest,
    RecordStatus,
    (),
    (),
    RecordFailure,
>;

/// See [`RequestSpanLayer`]; add it with `kube::client::ClientBuilder::with_layer`.
pub fn request_spans(requests: &ApiRequests) -> RequestSpanLayer {
    TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_request(CountRequest(requests.clone()))
        .on_response(RecordStatus)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(RecordFailure)
}

/// Makes the span of one API request, a child of the current span.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &http::Request<B>) -> tracing::Span {
        if tracing::Span::current().is_none() {
            return tracing::Span::none();
        }
        let path = request.uri().path();
        tracing::info_span!(
            "kube.request",
            "otel.name" = format!("{} {}", request.method(), resource_of(path)),
            "otel.kind" = "client",
            "otel.status_code" = tracing::field::Empty,
            "http.method" = %request.method(),
            "url.path" = path,
            "http.status_code" = tracing::field::Empty,
        )
    }
}

/// Counts each request under the API server's verb and the resource it names.
#[derive(Debug, Clone)]
pub struct CountRequest(ApiRequests);

impl<B> OnRequest<B> for CountRequest {
    fn on_request(&mut self, request: &http::Request<B>, _span: &tracing::Span) {
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let uri = request.uri();
        self.0.count(verb_of(request.method(), uri.path(), uri.query(), content_type), resource_of(uri.path()));
    }
}

/// Records the answer's status code; a 4xx or 5xx marks the span as an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordStatus;

impl<B> OnResponse<B> for RecordStatus {
    fn on_response(self, response: &http::Response<B>, _latency: std::time::Duration, span: &tracing::Span) {
        let status = response.status();
        span.record("http.status_code", i64::from(status.as_u16()));
        if status.is_client_error() || status.is_server_error() {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Marks a request that got no answer (or a 5xx) as an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordFailure;

impl OnFailure<ServerErrorsFailureClass> for RecordFailure {
    fn on_failure(&mut self, class: ServerErrorsFailureClass, _latency: std::time::Duration, span: &tracing::Span) {
        span.record("otel.status_code", "ERROR");
        if let ServerErrorsFailureClass::StatusCode(status) = class {
            span.record("http.status_code", i64::from(status.as_u16()));
        }
    }
}

/// The verb the API server counts a request under (`apiserver_request_total`'s): a `GET` of a
/// collection is a `LIST`, or a `WATCH` with `watch=true`; a `PATCH` of server-side apply is an
/// `APPLY`; a `DELETE` of a collection a `DELETECOLLECTION`.
pub fn verb_of(method: &http::Method, path: &str, query: Option<&str>, content_type: Option<&str>) -> &'static str {
    let collection = matches!(resource_path(path).as_deref(), Some([_]));
    let watch = query.is_some_and(|q| q.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
    match *method {
        http::Method::GET if watch => "WATCH",
        http::Method::GET if collection => "LIST",
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH if content_type.is_some_and(|t| t.starts_with("application/apply-patch")) => "APPLY",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE if collection => "DELETECOLLECTION",
        http::Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

/// The segments of a Kubernetes API path after its group, version and namespace: `resource`,
/// `resource/name` or `resource/name/subresource`. `None` for a path outside `/api` and `/apis`.
fn resource_path(path: &str) -> Option<Vec<&str>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let after_version = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    let rest = segments.get(after_version..).unwrap_or_default();
    Some(match rest {
        ["namespaces", _, more @ ..] if !more.is_empty() => more.to_vec(),
        other => other.to_vec(),
    })
}

/// The resource (and subresource) a Kubernetes API path names, without namespaces and object
/// names: `/apis/apps/v1/namespaces/shop/statefulsets/ex-mysql/status` → `statefulsets/status`.
pub fn resource_of(path: &str) -> String {
    let Some(rest) = resource_path(path) else { return path.to_string() };
    match rest.as_slice() {
        [resource] | [resource, _] => resource.to_string(),
        [resource, _, subresource, ..] => format!("{resource}/{subresource}"),
        [] => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn request_spans_are_named_by_resource_not_by_object() {
        assert_eq!(resource_of("/apis/apps/v1/namespaces/shop/statefulsets/ex-mysql/status"), "statefulsets/status");
        assert_eq!(resource_of("/apis/apps/v1/namespaces/shop/statefulsets/ex-mysql"), "statefulsets");
        assert_eq!(resource_of("/api/v1/namespaces/shop/secrets/ex-mysql-credentials"), "secrets");
        assert_eq!(resource_of("/api/v1/namespaces/shop/services"), "services");
        assert_eq!(resource_of("/api/v1/namespaces/shop"), "namespaces");
        assert_eq!(
            resource_of("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x"),
            "customresourcedefinitions"
        );
        assert_eq!(resource_of("/version"), "/version");
    }

    #[test]
    fn requests_are_counted_under_the_api_servers_verbs() {
        use http::Method;
        let apply = Some("application/apply-patch+yaml");
        let merge = Some("application/merge-patch+json");
        // Method, path, query, content type: the verb counted.
        type Case<'a> = (Method, &'a str, Option<&'a str>, Option<&'a str>, &'a str);
        let cases: [Case; 12] = [
            (Method::GET, "/apis/apps/v1/namespaces/shop/statefulsets/ex-mysql", None, None, "GET"),
            (Method::GET, "/apis/apps/v1/namespaces/shop/statefulsets", None, None, "LIST"),
            (Method::GET, "/apis/apps/v1/statefulsets", Some("labelSelector=a%3Db"), None, "LIST"),
            (Method::GET, "/apis/apps/v1/statefulsets", Some("resourceVersion=5&watch=true"), None, "WATCH"),
            (Method::GET, "/api/v1/namespaces", None, None, "LIST"),
            (Method::GET, "/api/v1/namespaces/shop", None, None, "GET"),
            (Method::POST, "/api/v1/namespaces/shop/secrets", None, Some("application/json"), "POST"),
            (Method::PATCH, "/apis/example.com/v1/namespaces/shop/visitorsapps/ex/status", None, apply, "APPLY"),
            (Method::PATCH, "/apis/example.com/v1/namespaces/shop/visitorsapps/ex", None, merge, "PATCH"),
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", None, None, "PUT"),
            (Method::DELETE, "/api/v1/namespaces/shop/pods/ex-mysql-0", None, None, "DELETE"),
            (Method::DELETE, "/api/v1/namespaces/shop/pods", None, None, "DELETECOLLECTION"),
        ];
        for (method, path, query, content_type, verb) in cases {
            assert_eq!(verb_of(&method, path, query, content_type), verb, "{method} {path}?{query:?}");
        }
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(!use_colour(false, None), "a pipe or a pod's log file gets no escape sequences");
        assert!(!use_colour(true, Some(OsStr::new("1"))), "NO_COLOR turns colours off");
        assert!(use_colour(true, Some(OsStr::new(""))), "an empty NO_COLOR does not");
    }
}
