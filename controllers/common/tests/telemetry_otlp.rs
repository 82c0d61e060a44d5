//! Starts an in-process OTLP/HTTP receiver, exports a reconcile span to it through the same
//! code the controllers use, and checks what arrived.

use std::time::Duration;

use controller_common::telemetry::{otel_layer, reconcile_span, request_spans, trace_id, tracer_provider};
use tracing_subscriber::layer::SubscriberExt;
use visitors_api::VisitorsApp;
use visitors_test_support::otlp::{OtlpReceiver, ReceivedSpan};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn reconcile_span_is_exported_with_object_attributes() {
    let receiver = OtlpReceiver::start("127.0.0.1:0").unwrap();
    let provider = tracer_provider(&receiver.endpoint, "visitors-controller-test").unwrap();
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

    let span = receiver
        .wait_for(WAIT, |spans| spans.iter().find(|s| s.span.name == "reconcile").cloned())
        .expect("the exporter sent a reconcile span");
    assert_eq!(span.service, "visitors-controller-test");
    assert_eq!(span.attribute("object.kind"), Some("VisitorsApp"));
    assert_eq!(span.attribute("object.namespace"), Some("shop"));
    assert_eq!(span.attribute("object.name"), Some("ex"));
    assert_eq!(span.int_attribute("object.generation"), Some(7));
    assert_eq!(span.trace_id(), recorded_trace_id.to_string());
    provider.shutdown().unwrap();
}

#[test]
fn api_requests_of_a_reconcile_are_its_child_spans() {
    use http::{Request, Response, StatusCode};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    use kube::client::{Body, ClientBuilder};
    use tracing::Instrument;

    let receiver = OtlpReceiver::start("127.0.0.1:0").unwrap();
    let provider = tracer_provider(&receiver.endpoint, "visitors-controller-test").unwrap();
    let subscriber = tracing_subscriber::registry().with(otel_layer(&provider, "visitors-controller-test"));
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();

    runtime.block_on(async {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = ClientBuilder::new(service, "shop").with_layer(&request_spans(&Default::default())).build();
        tokio::spawn(async move {
            let answers = [(StatusCode::NOT_FOUND, "missing"), (StatusCode::NOT_FOUND, "missing"), (StatusCode::OK, "ok")];
            for (status, name) in answers {
                let (_, send) = handle.next_request().await.expect("a request");
                let body = if status == StatusCode::OK {
                    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
                } else {
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"})
                };
                send.send_response(
                    Response::builder().status(status).body(Body::from(serde_json::to_vec(&body).unwrap())).unwrap(),
                );
            }
        });
        let api: Api<ConfigMap> = Api::namespaced(client, "shop");
        // Outside any reconcile (like a watch): no span of its own.
        api.get_opt("outside").await.unwrap();

        let mut app = VisitorsApp::new("ex", Default::default());
        app.metadata.namespace = Some("shop".into());
        let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"password": "hunter2"}});
        async {
            api.get_opt("ex-config").await.unwrap();
            api.patch("ex-config", &PatchParams::apply("visitors-controller").force(), &Patch::Apply(&patch)).await.unwrap();
        }
        .instrument(reconcile_span(&app))
        .await;
    });
    provider.force_flush().unwrap();

    let is_request = |s: &ReceivedSpan| s.attribute("http.method").is_some();
    let spans = receiver
        .wait_for(WAIT, |spans| {
            let done =
                spans.iter().any(|s| s.span.name == "reconcile") && spans.iter().filter(|s| is_request(s)).count() >= 2;
            done.then(|| spans.to_vec())
        })
        .expect("the reconcile span and its request spans arrived");
    let reconcile = spans.iter().find(|s| s.span.name == "reconcile").expect("a reconcile span");
    let requests: Vec<&ReceivedSpan> = spans.iter().filter(|s| is_request(s)).collect();
    assert_eq!(requests.len(), 2, "one span per request of the reconcile, none outside it: {requests:#?}");
    for request in &requests {
        assert_eq!(request.parent_span_id(), reconcile.span_id(), "a child of the reconcile: {request:#?}");
        assert_eq!(request.trace_id(), reconcile.trace_id());
        let path = request.attribute("url.path").expect("a url.path");
        assert_eq!(path, "/api/v1/namespaces/shop/configmaps/ex-config", "the path, never the query");
    }
    let get = requests.iter().find(|s| s.span.name == "GET configmaps").expect("the GET, named by its resource");
    assert_eq!(get.int_attribute("http.status_code"), Some(404));
    let patch = requests.iter().find(|s| s.span.name == "PATCH configmaps").expect("the PATCH");
    assert_eq!(patch.int_attribute("http.status_code"), Some(200));
    assert!(!format!("{spans:?}").contains("hunter2"), "a request body never reaches a span");
    provider.shutdown().unwrap();
}
