//! Prometheus metrics of one controller: reconciles, failures by error kind, reconcile
//! duration, whether this replica leads, and its requests to the Kubernetes API server. Served
//! as text at `/metrics`.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    controller: String,
    error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiRequestLabels {
    controller: String,
    verb: String,
    resource: String,
}

type HistogramFamily = Family<ControllerLabels, Histogram, fn() -> Histogram>;

/// The counter of a controller's requests to the Kubernetes API server, by verb (the API
/// server's own: `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`,
/// `DELETECOLLECTION`) and resource (`statefulsets`, `visitorsapps/status`): what share of the
/// API server's work is ours. The client's layer counts into it (see
/// `telemetry::request_spans`); a clone counts into the same series.
#[derive(Clone, Debug, Default)]
pub struct ApiRequests {
    controller: String,
    requests: Family<ApiRequestLabels, Counter>,
}

impl ApiRequests {
    pub fn count(&self, verb: &str, resource: String) {
        let labels = ApiRequestLabels { controller: self.controller.clone(), verb: verb.to_string(), resource };
        self.requests.get_or_create(&labels).inc();
    }
}

pub struct Metrics {
    controller: ControllerLabels,
    registry: std::sync::Mutex<Registry>,
    reconciles: Family<ControllerLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: HistogramFamily,
    leader: Family<ControllerLabels, Gauge>,
    api_requests: ApiRequests,
}

fn duration_histogram() -> Histogram {
    // 1 ms to about 16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Metrics {
    pub fn new(controller: &str) -> Self {
        let mut registry = Registry::with_prefix("visitors_operator");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let duration: HistogramFamily = Family::new_with_constructor(duration_histogram);
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that failed, by error kind", failures.clone());
        registry.register("reconcile_duration_seconds", "Duration of reconciles", duration.clone());
        let leader = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "leader",
            "1 while this replica reconciles (holds the leader Lease, or runs without leader election), 0 while it stands by",
            leader.clone(),
        );
        let api_requests = ApiRequests { controller: controller.to_string(), requests: Family::default() };
        registry.register(
            "api_requests",
            "Requests to the Kubernetes API server, by verb and resource",
            api_requests.requests.clone(),
        );
        let controller = ControllerLabels { controller: controller.to_string() };
        // Exported from the start, so that a replica standing by shows 0 rather than nothing.
        leader.get_or_create(&controller).set(0);
        Self {
            controller,
            registry: std::sync::Mutex::new(registry),
            reconciles,
            failures,
            duration,
            leader,
            api_requests,
        }
    }

    /// The counter the Kubernetes client's layer counts this controller's API requests into.
    pub fn api_requests(&self) -> ApiRequests {
        self.api_requests.clone()
    }

    /// Records whether this replica reconciles now.
    pub fn set_leader(&self, leading: bool) {
        self.leader.get_or_create(&self.controller).set(i64::from(leading));
    }

    /// Counts a reconcile and measures it until the returned guard is dropped.
    pub fn reconcile_started(&self) -> ReconcileMeasurer<'_> {
        self.reconciles.get_or_create(&self.controller).inc();
        ReconcileMeasurer { metrics: self, start: Instant::now() }
    }

    /// Counts a failed reconcile under its error kind (a short, fixed label, never a message).
    pub fn reconcile_failed(&self, error_kind: &str) {
        let labels = FailureLabels { controller: self.controller.controller.clone(), error: error_kind.to_string() };
        self.failures.get_or_create(&labels).inc();
    }

    /// Adds a controller's own metric (named `visitors_operator_<name>`) to what `/metrics`
    /// serves.
    pub fn register(&self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).register(name, help, metric);
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String cannot fail");
        text
    }
}

/// Records a reconcile's duration when dropped.
pub struct ReconcileMeasurer<'a> {
    metrics: &'a Metrics,
    start: Instant,
}

impl Drop for ReconcileMeasurer<'_> {
    fn drop(&mut self) {
        self.metrics.duration.get_or_create(&self.metrics.controller).observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reconciles_failures_and_durations() {
        let metrics = Metrics::new("visitors");
        drop(metrics.reconcile_started());
        drop(metrics.reconcile_started());
        metrics.reconcile_failed("Kube");
        let text = metrics.encode();
        assert!(text.contains(r#"visitors_operator_reconciles_total{controller="visitors"} 2"#), "{text}");
        assert!(
            text.contains(r#"visitors_operator_reconcile_failures_total{controller="visitors",error="Kube"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"visitors_operator_reconcile_duration_seconds_count{controller="visitors"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn api_requests_are_counted_by_verb_and_resource_in_one_series_each() {
        let metrics = Metrics::new("visitors-controller");
        let requests = metrics.api_requests();
        requests.count("APPLY", "statefulsets".into());
        metrics.api_requests().count("APPLY", "statefulsets".into());
        requests.count("WATCH", "visitorsapps".into());
        let text = metrics.encode();
        assert!(
            text.contains(r#"visitors_operator_api_requests_total{controller="visitors-controller",verb="APPLY",resource="statefulsets"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"verb="WATCH",resource="visitorsapps"} 1"#), "{text}");
    }

    #[test]
    fn a_replica_exports_whether_it_leads_from_the_start() {
        let metrics = Metrics::new("backup-controller");
        let leader = |metrics: &Metrics| {
            metrics.encode().lines().find(|l| l.starts_with("visitors_operator_leader{")).map(str::to_string)
        };
        assert_eq!(leader(&metrics).as_deref(), Some(r#"visitors_operator_leader{controller="backup-controller"} 0"#));
        metrics.set_leader(true);
        assert_eq!(leader(&metrics).as_deref(), Some(r#"visitors_operator_leader{controller="backup-controller"} 1"#));
        metrics.set_leader(false);
        assert_eq!(leader(&metrics).as_deref(), Some(r#"visitors_operator_leader{controller="backup-controller"} 0"#));
    }
}
