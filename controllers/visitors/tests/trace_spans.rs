//! The spans of one reconcile, in a test binary of its own where no other test runs: sharing a
//! process with the other reconcile tests, the subscriber it installs for its thread now and
//! then missed spans (tracing keeps a process-wide cache of which call sites any subscriber
//! wants, and the other tests' threads have none).

mod support;

use support::{Harness, book_spec};

/// A span's name and its parent's name.
type Opened = (String, Option<String>);

/// Every span opened, recorded by a subscriber layer.
#[derive(Clone, Default)]
struct SpanTree(std::sync::Arc<std::sync::Mutex<Vec<Opened>>>);

impl<S> tracing_subscriber::Layer<S> for SpanTree
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        _attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let span = ctx.span(id).expect("a new span is registered");
        let parent = span.parent().map(|p| p.name().to_string());
        self.0.lock().unwrap().push((span.name().to_string(), parent));
    }
}

#[tokio::test]
async fn a_reconcile_trace_has_a_span_per_api_request_and_for_the_database_check() {
    use tracing_subscriber::layer::SubscriberExt;
    let h = Harness::new();
    h.create_app(book_spec());
    h.reconcile().await.unwrap();
    h.mysql_pod_ready();
    h.check.succeed();
    h.api.clear_requests();

    let tree = SpanTree::default();
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(tree.clone()));
    h.reconcile().await.unwrap();

    let spans = tree.0.lock().unwrap().clone();
    let children = |name: &str| spans.iter().filter(|(n, _)| n == name).cloned().collect::<Vec<_>>();
    assert_eq!(children("reconcile").len(), 1, "{spans:?}");
    let requests = children("kube.request");
    assert_eq!(requests.len(), h.api.requests().len(), "one span per API request: {spans:?}");
    // The children applied by the first reconcile are unchanged and not applied again, and the
    // credentials it read stand.
    assert!(requests.len() >= 3, "the backend's two applies, the status: {requests:?}");
    assert!(requests.iter().all(|(_, parent)| parent.as_deref() == Some("reconcile")), "{requests:?}");
    assert_eq!(children("db.check"), [("db.check".to_string(), Some("reconcile".to_string()))]);
}
