//! The VisitorsApp scenario on a real cluster with the suite installed: apply the book's
//! resource, wait for Ready, change its size (only the backend changes), delete it (the volume
//! is retained, with an Event saying so).

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use visitors_api::VisitorsApp;
use visitors_api::conditions;
use visitors_e2e::{TestNamespace, app_ready_at_generation, cluster, create_ready_book_app, wait_for};

const APP: &str = "ex";

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn book_app_lifecycle() {
    let client = cluster().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Err(error) = crds.get("visitorsapps.example.com").await {
        panic!(
            "the cluster answers but the suite is not installed (CRD visitorsapps.example.com: {error}); install the Helm chart first"
        );
    }

    let test_namespace = TestNamespace::create(&client, "e2e-visitors").await;
    let namespace = test_namespace.name.clone();
    eprintln!("namespace {namespace}");

    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace);
    // The book's resource, unchanged.
    let app = create_ready_book_app(&apps, APP).await;
    let status = app.status.unwrap();
    assert_eq!(status.backend_ready_replicas, Some(1));
    assert_eq!(status.mysql_ready_replicas, Some(1));
    assert_eq!(status.backend_image.as_deref(), Some("jdob/visitors-service:1.0.0"));
    let database = conditions::find(&status.conditions, conditions::DATABASE_READY).unwrap();
    eprintln!("database: {} ({})", database.reason, database.message);
    for name in ["ex-mysql", "ex-mysql-headless", "ex-backend", "ex-frontend"] {
        Api::<Service>::namespaced(client.clone(), &namespace)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("Service {name}: {e}"));
    }
    Api::<StatefulSet>::namespaced(client.clone(), &namespace).get("ex-mysql").await.expect("the MySQL StatefulSet");
    Api::<Secret>::namespaced(client.clone(), &namespace)
        .get("ex-mysql-credentials")
        .await
        .expect("the generated Secret");

    // A converged app is left alone: no child changes while nothing else does.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let before = deployments.get("ex-frontend").await.unwrap().resource_version();

    let patch = serde_json::json!({ "spec": { "size": 2 } });
    apps.patch(APP, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("change the size");
    let app =
        wait_for("the app to be Ready with two backend replicas", || app_ready_at_generation(&apps, APP, 2)).await;
    assert_eq!(app.status.unwrap().backend_ready_replicas, Some(2));
    assert_eq!(deployments.get("ex-backend").await.unwrap().spec.unwrap().replicas, Some(2));
    assert_eq!(deployments.get("ex-frontend").await.unwrap().resource_version(), before, "the frontend did not change");

    apps.delete(APP, &DeleteParams::default()).await.expect("delete the app");
    wait_for("the app and its Deployments to be gone", || async {
        let app_left = apps.get_opt(APP).await.map_err(|e| e.to_string())?.is_some();
        let deployments_left = deployments.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items.len();
        if !app_left && deployments_left == 0 {
            Ok(())
        } else {
            Err(format!("app left: {app_left}, deployments: {deployments_left}"))
        }
    })
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    assert!(claims.get_opt("data-ex-mysql-0").await.unwrap().is_some(), "deletionPolicy Retain keeps the volume");
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let retained = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("VolumeRetained"));
    assert!(retained, "a VolumeRetained Event says the volume is kept");

    test_namespace.delete().await;
}
