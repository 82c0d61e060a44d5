//! Drift of the VisitorsApp's children on a real cluster: whatever a person edits or deletes
//! (list fields merged by key included) is put back, and a restarted controller changes
//! nothing that was already right, or only what an older version left behind.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use visitors_api::VisitorsApp;
use visitors_e2e::{
    TestNamespace, app_ready_at_generation, cluster, controller_name, controller_selector, events_of,
    namespace_with_ready_app, release_namespace, wait_for,
};

const APP: &str = "ex";

async fn ready_app(client: &Client, prefix: &str) -> (TestNamespace, Api<VisitorsApp>) {
    namespace_with_ready_app(client, prefix, APP).await
}

/// Edits object `name` as a person would with `kubectl edit`: a JSON merge patch, which
/// replaces every list it names as a whole.
async fn edit<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("edit {name}: {e}"));
}

/// `list` with `field` of its first item set to `value`.
fn with_first(list: &Value, field: &str, value: Value) -> Value {
    let mut list = list.clone();
    list[0][field] = value;
    list
}

/// Waits until `field` of object `name` (a JSON pointer into it) equals `expected`.
async fn wait_repaired<K>(what: &str, api: &Api<K>, name: &str, field: &str, expected: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    wait_for(what, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        let actual = serde_json::to_value(&object).unwrap().pointer(field).cloned().unwrap_or(Value::Null);
        if actual == expected { Ok(()) } else { Err(format!("{field} = {actual}")) }
    })
    .await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn drift_of_every_child_kind_is_repaired() {
    let client = cluster().await;
    let (namespace, apps) = ready_app(&client, "e2e-drift").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace.name);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace.name);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace.name);

    // A list merged by key (port + protocol): an edited port must be replaced, not doubled.
    let mysql_ports = serde_json::to_value(services.get("ex-mysql").await.unwrap().spec.unwrap().ports).unwrap();
    edit(&services, "ex-mysql", json!({"spec": {"ports": with_first(&mysql_ports, "port", json!(3307))}})).await;
    wait_repaired("the MySQL Service's port", &services, "ex-mysql", "/spec/ports", mysql_ports).await;

    let backend = serde_json::to_value(deployments.get("ex-backend").await.unwrap()).unwrap();
    let backend_env = backend.pointer("/spec/template/spec/containers/0/env").cloned().unwrap();
    let backend_ports = backend.pointer("/spec/template/spec/containers/0/ports").cloned().unwrap();
    let mut containers = backend.pointer("/spec/template/spec/containers").cloned().unwrap();
    containers[0]["env"] = Value::Array(backend_env.as_array().unwrap()[1..].to_vec());
    containers[0]["ports"] = with_first(&backend_ports, "containerPort", json!(8001));
    edit(
        &deployments,
        "ex-backend",
        json!({"spec": {"replicas": 3, "template": {"spec": {"containers": containers}}}}),
    )
    .await;
    wait_repaired("the backend's replicas", &deployments, "ex-backend", "/spec/replicas", json!(1)).await;
    wait_repaired("the backend's env", &deployments, "ex-backend", "/spec/template/spec/containers/0/env", backend_env)
        .await;
    let ports = "/spec/template/spec/containers/0/ports";
    wait_repaired("the backend's container ports", &deployments, "ex-backend", ports, backend_ports).await;

    let mysql = serde_json::to_value(statefulsets.get("ex-mysql").await.unwrap()).unwrap();
    let mysql_container_ports = mysql.pointer(ports).cloned().unwrap();
    let mut mysql_containers = mysql.pointer("/spec/template/spec/containers").cloned().unwrap();
    mysql_containers[0]["ports"] = with_first(&mysql_container_ports, "containerPort", json!(3307));
    edit(&statefulsets, "ex-mysql", json!({"spec": {"template": {"spec": {"containers": mysql_containers}}}})).await;
    wait_repaired("the MySQL container's ports", &statefulsets, "ex-mysql", ports, mysql_container_ports).await;

    services.delete("ex-frontend", &DeleteParams::default()).await.expect("delete the frontend Service");
    wait_for("the frontend Service to be re-created", || async {
        services.get_opt("ex-frontend").await.map_err(|e| e.to_string())?.map(|_| ()).ok_or("still missing".to_string())
    })
    .await;

    wait_for("the app to be Ready again", || app_ready_at_generation(&apps, APP, 1)).await;
    namespace.delete().await;
}

/// resourceVersion of every child, by kind and name.
async fn child_versions(client: &Client, namespace: &str) -> BTreeMap<String, String> {
    let params = ListParams::default().labels("app.kubernetes.io/managed-by=visitors-operator");
    let mut versions = BTreeMap::new();
    macro_rules! collect {
        ($kind:ty, $label:expr) => {
            for object in Api::<$kind>::namespaced(client.clone(), namespace).list(&params).await.unwrap() {
                versions
                    .insert(format!("{} {}", $label, object.name_any()), object.resource_version().unwrap_or_default());
            }
        };
    }
    collect!(Service, "Service");
    collect!(Deployment, "Deployment");
    collect!(StatefulSet, "StatefulSet");
    collect!(Secret, "Secret");
    versions
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restarted_controller_changes_no_converged_child() {
    let client = cluster().await;
    let (namespace, _apps) = ready_app(&client, "e2e-restart").await;
    // Let the last status-driven rollouts settle before taking the picture.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = child_versions(&client, &namespace.name).await;
    assert!(before.len() >= 5, "children found: {before:?}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &release_namespace());
    let selector = controller_selector("visitors");
    let old: Vec<String> =
        pods.list(&ListParams::default().labels(&selector)).await.unwrap().items.iter().map(|p| p.name_any()).collect();
    assert!(!old.is_empty(), "no visitors-controller pod in {}", release_namespace());
    for name in &old {
        pods.delete(name, &DeleteParams::default()).await.expect("delete the controller pod");
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release_namespace());
    let controller = controller_name(&client, "visitors").await;
    wait_for("a new visitors-controller pod to be ready", || async {
        let fresh = pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
        let ready_new = fresh.items.iter().filter(|p| !old.contains(&p.name_any()) && pod_ready(p)).count();
        let deployment = deployments.get(&controller).await.map_err(|e| e.to_string())?;
        let available = deployment.status.and_then(|s| s.available_replicas).unwrap_or(0);
        if ready_new >= 1 && available >= 1 { Ok(()) } else { Err(format!("{ready_new} new ready pods")) }
    })
    .await;
    // The new leader lists every app and reconciles it; give it time to do so.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let after = child_versions(&client, &namespace.name).await;
    assert_eq!(before, after, "a restarted controller rewrote converged children");
    namespace.delete().await;
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Scales the visitors controller's Deployment to `replicas` and waits until that many of its
/// pods are ready (none left, for 0).
async fn scale_controller(client: &Client, replicas: i32) -> Result<(), String> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release_namespace());
    let patch = json!({"spec": {"replicas": replicas}});
    let name = controller_name(client, "visitors").await;
    deployments.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| e.to_string())?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release_namespace());
    let selector = ListParams::default().labels(&controller_selector("visitors"));
    wait_for(&format!("{replicas} visitors-controller pods"), || async {
        let listed = pods.list(&selector).await.map_err(|e| e.to_string())?.items;
        let ready = listed.iter().filter(|p| pod_ready(p)).count();
        let settled = if replicas == 0 { listed.is_empty() } else { ready == replicas as usize };
        if settled { Ok(()) } else { Err(format!("{} pods, {ready} ready", listed.len())) }
    })
    .await;
    Ok(())
}

/// Puts the MySQL client Service back as the controller made it before it became headless:
/// the same Service with a virtual IP. Returns the uid of that Service.
async fn put_back_a_client_service_with_a_cluster_ip(services: &Api<Service>) -> Result<String, String> {
    let mut service = services.get("ex-mysql").await.map_err(|e| e.to_string())?;
    services.delete("ex-mysql", &DeleteParams::default()).await.map_err(|e| e.to_string())?;
    service.metadata = kube::api::ObjectMeta {
        name: service.metadata.name,
        labels: service.metadata.labels,
        owner_references: service.metadata.owner_references,
        ..Default::default()
    };
    let spec = service.spec.as_mut().ok_or("no spec")?;
    (spec.cluster_ip, spec.cluster_ips, spec.type_) = (None, None, Some("ClusterIP".into()));
    let created = services.create(&Default::default(), &service).await.map_err(|e| e.to_string())?;
    let address = created.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    if address == "None" || address.is_empty() {
        return Err(format!("the Service got no virtual IP: {address:?}"));
    }
    created.metadata.uid.ok_or("no uid".into())
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_client_service_left_by_an_older_version_is_recreated_headless() {
    let client = cluster().await;
    let (namespace, apps) = ready_app(&client, "e2e-upgrade").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace.name);

    // As an upgrade finds it: made by the older controller, which is stopped meanwhile.
    scale_controller(&client, 0).await.expect("stop the visitors controller");
    let old = put_back_a_client_service_with_a_cluster_ip(&services).await;
    scale_controller(&client, 1).await.expect("start the visitors controller again");
    let old_uid = old.expect("a client Service with a virtual IP");

    wait_for("the client Service to be recreated headless", || async {
        let service = services.get("ex-mysql").await.map_err(|e| e.to_string())?;
        let address = service.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
        let uid = service.metadata.uid.unwrap_or_default();
        if address == "None" && uid != old_uid { Ok(()) } else { Err(format!("clusterIP {address}, uid {uid}")) }
    })
    .await;
    let events = events_of(&client, &namespace.name, APP).await;
    let recreated = events.iter().find(|e| e.reason.as_deref() == Some("Recreated")).expect("a Recreated Event");
    assert!(recreated.note.as_deref().unwrap_or_default().contains("Service ex-mysql"), "{recreated:?}");
    wait_for("the app to be Ready again", || app_ready_at_generation(&apps, APP, 1)).await;
    namespace.delete().await;
}
