//! The runtime every reconcile runs in: the client, metrics, backoff, events and field
//! manager handed to it, the ways a reconcile ends (converged, waiting, watching, failed) and the
//! error policy the controllers share. The errors themselves are in [`crate::error`].

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use tracing::Instrument;
use visitors_api::InvalidSpec;

use crate::backoff::ObjectBackoff;
use crate::error::ReconcileFailure;
use crate::events::Events;
use crate::kind::NamespacedKind;
use crate::metrics::Metrics;
use crate::telemetry::reconcile_span;

/// The longest a waiting object sleeps between looks: about a minute, so that an object
/// waiting for long costs about one reconcile a minute. Waiting is not failing: the wait never
/// backs off to the failure cap. What an owned-object watch reports (a workload becoming
/// ready) is not waited for this way at all: see [`Runtime::watching`].
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The shared part of each controller's context.
pub struct Runtime {
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub backoff: ObjectBackoff,
    pub events: Events,
    /// The server-side apply field manager of this controller.
    pub field_manager: String,
    /// Period of the resync of a converged object.
    pub resync: Duration,
}

impl Runtime {
    /// The object is converged: forget its backoff and look again at the next resync.
    pub fn converged<K: Resource>(&self, object: &K) -> Action {
        self.backoff.reset(&key(object));
        Action::requeue(self.resync)
    }

    /// The object waits for something outside the controller that no watch reports (a
    /// database answering a query, a Secret being fixed): look again after its next backoff
    /// delay, which keeps growing up to [`MAX_WAIT`]. Owned-object watches may wake it sooner.
    pub fn waiting<K: Resource>(&self, object: &K) -> Action {
        Action::requeue(self.wait_delay(object))
    }

    /// The object waits for a change an owned-object watch reports (a StatefulSet or a
    /// Deployment becoming ready, a Job finishing): no timer wakes it, the watch does; the
    /// resync is the safety net. Its backoff is kept, so a wait for something no watch sees
    /// that follows goes on growing where it was.
    pub fn watching<K: Resource>(&self, _object: &K) -> Action {
        Action::requeue(self.resync)
    }

    /// The next delay of a waiting object, advancing its backoff.
    pub fn wait_delay<K: Resource>(&self, object: &K) -> Duration {
        self.backoff.next_delay(&key(object)).min(MAX_WAIT)
    }

    /// The next delay of a failing object, advancing its backoff.
    pub fn retry_delay<K: Resource>(&self, object: &K) -> Duration {
        self.backoff.next_delay(&key(object))
    }

    /// The object cannot progress until its spec changes (an invalid spec): no retry, and no
    /// backoff state kept. A spec change (new generation) triggers the next reconcile.
    pub fn until_spec_changes<K: Resource>(&self, object: &K) -> Action {
        self.backoff.reset(&key(object));
        Action::await_change()
    }

    /// The reconcile failed: count it and retry after the object's next backoff delay.
    pub fn failed<K, E>(&self, object: &K, error: &E) -> Action
    where
        K: Resource,
        E: ReconcileFailure,
    {
        self.metrics.reconcile_failed(error.metric_label());
        let delay = self.retry_delay(object);
        tracing::warn!(
            error = %error,
            object = %object.name_any(),
            namespace = object.namespace().unwrap_or_default(),
            retry_in_ms = delay.as_millis() as u64,
            "reconcile failed"
        );
        Action::requeue(delay)
    }

    /// Runs one reconcile of `object` inside its trace span, counted and timed in the metrics.
    pub async fn instrumented<K, F>(&self, object: &K, reconcile: F) -> F::Output
    where
        K: Resource<DynamicType = ()>,
        F: Future,
    {
        let _measure = self.metrics.reconcile_started();
        reconcile.instrument(reconcile_span(object)).await
    }

    /// Applies `desired` as the status of `object` unless it equals `current`, so a converged
    /// reconcile writes nothing. Returns whether it wrote.
    pub async fn write_status<K, S>(&self, object: &K, current: Option<&S>, desired: &S) -> Result<bool, kube::Error>
    where
        K: NamespacedKind,
        S: Serialize + PartialEq,
    {
        if current == Some(desired) {
            return Ok(false);
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &object.namespace().unwrap_or_default());
        crate::apply::apply_status(&api, &self.field_manager, &object.name_any(), desired).await?;
        Ok(true)
    }

    /// Tells the user, by a Warning Event on the object, which fields of its spec are invalid.
    pub async fn report_invalid_spec<K>(&self, object: &K, invalid: &InvalidSpec)
    where
        K: Resource<DynamicType = ()>,
    {
        tracing::info!(problem = %invalid, "invalid spec");
        self.events.warning(object, "InvalidSpec", "Validate", invalid.to_string()).await;
    }

    /// The object is gone: forget its backoff state.
    pub fn forget<K: Resource>(&self, object: &K) {
        self.backoff.reset(&key(object));
    }
}

/// The error policy every controller shares: count the failure, retry after the object's
/// backoff, and tell the user by a Warning Event (a conflict only means the object changed
/// meanwhile: no Event).
pub fn error_policy<K, E>(runtime: &Arc<Runtime>, object: Arc<K>, error: &E) -> Action
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    E: ReconcileFailure,
{
    let action = runtime.failed(&*object, error);
    let reason = error.metric_label();
    if reason != "Conflict" {
        let runtime = runtime.clone();
        let note = error.to_string();
        tokio::spawn(async move { runtime.events.warning(&*object, reason, "Reconcile", note).await });
    }
    action
}

/// Backoff is keyed by UID, so a deleted and re-created object starts fresh.
fn key<K: Resource>(object: &K) -> String {
    object.uid().unwrap_or_else(|| format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Events;
    use visitors_api::VisitorsApp;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    impl ReconcileFailure for Boom {
        fn metric_label(&self) -> &'static str {
            "Boom"
        }
    }

    fn runtime() -> Runtime {
        runtime_with_cap(Duration::from_secs(10))
    }

    fn runtime_with_cap(failure_cap: Duration) -> Runtime {
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let client = Client::new(service, "default");
        Runtime {
            client: client.clone(),
            metrics: Arc::new(Metrics::new("test")),
            backoff: ObjectBackoff::new(Duration::from_millis(100), failure_cap),
            events: Events::new(client, "test", None),
            field_manager: "test".into(),
            resync: Duration::from_secs(600),
        }
    }

    fn app(uid: &str) -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.uid = Some(uid.into());
        app
    }

    #[tokio::test]
    async fn failures_back_off_and_success_resets() {
        let runtime = runtime();
        let app = app("uid-1");
        runtime.failed(&app, &Boom);
        runtime.failed(&app, &Boom);
        let delays: Vec<Duration> = (0..3).map(|_| runtime.retry_delay(&app)).collect();
        assert!(delays[0] < delays[1] && delays[1] < delays[2], "failures back off: {delays:?}");
        assert!(delays[0] >= Duration::from_millis(400), "two failures came first: {delays:?}");
        assert!(runtime.metrics.encode().contains(r#"error="Boom"} 2"#));
        assert_eq!(runtime.converged(&app), Action::requeue(Duration::from_secs(600)));
        assert_eq!(runtime.backoff.tracked(), 0);
    }

    #[tokio::test]
    async fn waits_back_off_to_about_a_minute_but_never_past_it() {
        let runtime = runtime_with_cap(Duration::from_secs(300));
        let app = app("uid-3");
        let waits: Vec<Duration> = (0..14).map(|_| runtime.wait_delay(&app)).collect();
        assert!(waits[0] < Duration::from_millis(300), "waits start small: {waits:?}");
        assert!(waits.windows(2).all(|w| w[1] >= w[0] || w[1] == MAX_WAIT), "waits keep growing: {waits:?}");
        assert!(waits[9] > Duration::from_secs(15), "a long wait costs less than one look in 15 s: {waits:?}");
        assert_eq!(MAX_WAIT, Duration::from_secs(60));
        assert_eq!(waits[13], MAX_WAIT, "long waits are capped: {waits:?}");
        assert_eq!(runtime.waiting(&app), Action::requeue(MAX_WAIT));
        // A failing object keeps backing off past the wait cap, up to the failure cap.
        let retries: Vec<Duration> = (0..3).map(|_| runtime.retry_delay(&app)).collect();
        assert!(retries[2] > MAX_WAIT, "{retries:?}");
    }

    #[tokio::test]
    async fn what_a_watch_reports_is_not_polled() {
        let runtime = runtime();
        let app = app("uid-4");
        runtime.waiting(&app);
        assert_eq!(runtime.watching(&app), Action::requeue(runtime.resync), "only the resync, as a safety net");
        assert_eq!(runtime.backoff.tracked(), 1, "the wait's backoff goes on where it was");
    }

    #[tokio::test]
    async fn invalid_specs_wait_for_a_change() {
        let runtime = runtime();
        let app = app("uid-2");
        runtime.waiting(&app);
        assert_eq!(runtime.until_spec_changes(&app), Action::await_change());
        assert_eq!(runtime.backoff.tracked(), 0);
    }
}
