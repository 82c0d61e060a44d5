//! Bad input on a real cluster: what the schema can refuse is refused by the API server with
//! the field named; what only the controller can see (a credentials Secret that does not
//! exist) gets a condition and an Event naming it, and the app waits without a hot loop.
//! This binary holds one test, and e2e/run.sh runs it alone, after every other file, so the
//! controller's reconcile counter measures this app alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use visitors_api::conditions::{self, READY};
use visitors_api::{VisitorsApp, VisitorsAppSpec};
use visitors_e2e::{TestNamespace, cluster, controller_metrics, metric_value, wait_for};

const MISSING_SECRET: &str = "no-such-credentials";
/// Reconciles of the waiting app allowed in a minute once its first look is over: a waiting
/// app looks again with a growing backoff; a hot loop would show tens or hundreds.
const MAX_RECONCILES_PER_MINUTE: f64 = 6.0;

/// Deletes the namespaces other scenarios left (a failed one keeps its own), and waits until
/// they are gone: their apps would reconcile while this one counts. Every other file has ended
/// by now (e2e/run.sh runs this one alone, last).
async fn without_other_scenarios(client: &Client, own: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let scenarios = ListParams::default().labels("app.kubernetes.io/part-of=visitors-e2e");
    let others = || async {
        let list = namespaces.list(&scenarios).await.map_err(|e| e.to_string())?;
        Ok::<Vec<String>, String>(list.items.into_iter().map(|n| n.name_any()).filter(|n| n != own).collect())
    };
    if std::env::var("E2E_KEEP_NAMESPACE").is_ok_and(|v| v == "1") {
        eprintln!("E2E_KEEP_NAMESPACE=1: the apps of kept namespaces count as this one's");
        return;
    }
    for name in others().await.expect("list the scenarios' namespaces") {
        eprintln!("deleting namespace {name}, left by another scenario");
        let _ = namespaces.delete(&name, &DeleteParams::background()).await;
    }
    wait_for("the namespaces other scenarios left to go", || async {
        match others().await? {
            left if left.is_empty() => Ok(()),
            left => Err(format!("{left:?} still there")),
        }
    })
    .await;
}

async fn reconciles(client: &Client) -> f64 {
    let text = controller_metrics(client, "visitors").await.expect("the visitors controller's /metrics");
    metric_value(&text, "visitors_operator_reconciles_total", r#"controller="visitors-controller""#)
        .expect("visitors_operator_reconciles_total in /metrics")
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn bad_input_gets_a_reason_and_no_hot_loop() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-bad-input").await;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace.name);

    let negative = VisitorsApp::new("negative", VisitorsAppSpec { size: -1, ..Default::default() });
    let refused = apps.create(&PostParams::default(), &negative).await.expect_err("size -1 must be refused");
    assert!(refused.to_string().contains("spec.size"), "{refused}");

    let spec = VisitorsAppSpec { size: 1, credentials_secret: Some(MISSING_SECRET.into()), ..Default::default() };
    apps.create(&PostParams::default(), &VisitorsApp::new("ex", spec)).await.expect("create the app");
    let message = wait_for("a Ready=False condition naming the missing Secret", || async {
        let app = apps.get("ex").await.map_err(|e| e.to_string())?;
        let status = app.status.unwrap_or_default();
        match conditions::find(&status.conditions, READY) {
            Some(ready) if ready.status == "False" && ready.message.contains(MISSING_SECRET) => {
                Ok(ready.message.clone())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(message.contains("spec.credentialsSecret"), "the condition names the field: {message}");

    let events: Api<Event> = Api::namespaced(client.clone(), &namespace.name);
    wait_for("a Warning Event naming the missing Secret", || async {
        let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let found = list.items.iter().any(|e| {
            e.type_.as_deref() == Some("Warning") && e.note.as_deref().is_some_and(|n| n.contains(MISSING_SECRET))
        });
        if found { Ok(()) } else { Err(format!("{} events, none names {MISSING_SECRET}", list.items.len())) }
    })
    .await;

    // Past the first quick looks, count what a minute of waiting costs.
    without_other_scenarios(&client, &namespace.name).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let start = reconciles(&client).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let in_a_minute = reconciles(&client).await - start;
    eprintln!("reconciles in a minute of waiting: {in_a_minute}");
    assert!(in_a_minute <= MAX_RECONCILES_PER_MINUTE, "{in_a_minute} reconciles in a minute: a hot loop");
    namespace.delete().await;
}
