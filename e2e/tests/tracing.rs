//! Traces on a real cluster: the controllers export their reconcile spans over OTLP to a
//! receiver this test runs, and a reconcile of a VisitorsApp is a tree: the reconcile span
//! with a child span for each API request it made.

use std::time::Duration;

use kube::Api;
use visitors_api::VisitorsApp;
use visitors_e2e::{TestNamespace, cluster, create_book_app, otlp_receiver};
use visitors_test_support::otlp::ReceivedSpan;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_reconcile_is_a_trace_with_a_span_per_api_request() {
    let Ok(listen) = std::env::var("E2E_OTLP_LISTEN") else {
        eprintln!(
            "skipped: E2E_OTLP_LISTEN is unset; set it to an address the controllers' tracing.otlpEndpoint points at (e2e/run.sh --local does)"
        );
        return;
    };
    let receiver = otlp_receiver(&listen).await;
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-tracing").await;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace.name);
    create_book_app(&apps, "traced").await;

    let is_our_reconcile = |s: &ReceivedSpan| {
        s.span.name == "reconcile"
            && s.attribute("object.name") == Some("traced")
            && s.attribute("object.namespace") == Some(namespace.name.as_str())
    };
    let found = tokio::task::block_in_place(|| {
        receiver.wait_for(Duration::from_secs(180), |spans| {
            spans.iter().filter(|s| is_our_reconcile(s)).find_map(|reconcile| {
                let children: Vec<&ReceivedSpan> = spans
                    .iter()
                    .filter(|c| c.trace_id() == reconcile.trace_id() && c.parent_span_id() == reconcile.span_id())
                    .collect();
                (!children.is_empty()).then(|| (reconcile.clone(), children.into_iter().cloned().collect::<Vec<_>>()))
            })
        })
    });
    let Some((reconcile, children)) = found else {
        let names: Vec<String> = receiver.spans().iter().map(|s| format!("{}:{}", s.service, s.span.name)).collect();
        panic!("no reconcile span of VisitorsApp traced with child spans arrived; received: {names:?}");
    };
    assert_eq!(reconcile.service, "visitors-controller");
    assert_eq!(reconcile.attribute("object.kind"), Some("VisitorsApp"));
    let names: Vec<&str> = children.iter().map(|c| c.span.name.as_str()).collect();
    eprintln!("reconcile {} has children {names:?}", reconcile.span_id());
    assert!(
        children.iter().any(|c| c.attribute("http.request.method").or(c.attribute("http.method")).is_some()),
        "a child span is an API request: {names:?}"
    );
    namespace.delete().await;
}
