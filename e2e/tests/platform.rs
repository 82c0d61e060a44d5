//! The suite as installed by the chart: its pods are admitted under the `restricted` Pod
//! Security profile, each controller's ServiceAccount holds only what it uses, and a
//! controller's log is plain text when it is not written to a terminal.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use visitors_e2e::{
    CONTROLLERS, cluster, controller_name, controller_service_account, node_logs_dir, release_namespace,
};

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn chart_pods_are_admitted_under_the_restricted_profile() {
    let client = cluster().await;
    let namespace = release_namespace();
    let labels =
        Api::<Namespace>::all(client.clone()).get(&namespace).await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("pod-security.kubernetes.io/enforce").map(String::as_str),
        Some("restricted"),
        "e2e/run.sh labels the release namespace {namespace}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    for key in CONTROLLERS {
        let name = controller_name(&client, key).await;
        let deployment = deployments.get(&name).await.unwrap_or_else(|e| panic!("Deployment {name}: {e}"));
        let wanted = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
        let ready = deployment.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        assert!(
            wanted >= 1 && ready == wanted,
            "{name}: {ready} of {wanted} replicas ready (pods refused by PodSecurity?)"
        );
    }
    let pods = Api::<Pod>::namespaced(client, &namespace).list(&ListParams::default()).await.unwrap();
    assert!(pods.items.len() >= CONTROLLERS.len(), "{} pods in {namespace}", pods.items.len());
}

/// What each controller's ServiceAccount must not be able to do, and one thing it must, so
/// that a broken review (everything denied) cannot pass.
#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn each_service_account_is_denied_what_its_controller_does_not_need() {
    let client = cluster().await;
    let checks: [(&str, &str, &str, &str, bool); 19] = [
        ("visitors", "apps", "statefulsets", "patch", true),
        ("visitors", "", "services", "delete", true),
        ("visitors", "apps", "deployments", "delete", false),
        ("visitors", "", "secrets", "list", false),
        ("visitors", "", "secrets", "delete", false),
        // A replicated app's extraction Jobs are created, never deleted; its pods labelled.
        ("visitors", "batch", "jobs", "delete", false),
        ("visitors", "", "pods", "patch", true),
        ("visitors", "example.com", "mysqlbackups", "create", false),
        ("backup", "batch", "jobs", "create", true),
        ("backup", "apps", "deployments", "patch", false),
        ("backup", "apps", "statefulsets", "patch", false),
        ("backup", "", "secrets", "list", false),
        ("backup", "example.com", "visitorsapps", "patch", false),
        // A point-in-time archiver's own Role, in its namespace; nothing cluster-wide.
        ("backup", "rbac.authorization.k8s.io", "roles", "create", true),
        ("backup", "rbac.authorization.k8s.io", "clusterroles", "create", false),
        ("restore", "example.com", "mysqlrestores", "get", true),
        ("restore", "", "secrets", "create", false),
        ("restore", "example.com", "mysqlbackups", "delete", false),
        ("restore", "apps", "deployments", "patch", false),
    ];
    let mut wrong = Vec::new();
    for (key, group, resource, verb, expected) in checks {
        let allowed = can(&client, key, group, resource, verb).await;
        if allowed != expected {
            wrong.push(format!("{key}: {verb} {resource}.{group} allowed={allowed}, expected {expected}"));
        }
    }
    assert!(wrong.is_empty(), "RBAC is not least-privilege:\n{}", wrong.join("\n"));
}

async fn can(client: &Client, key: &str, group: &str, resource: &str, verb: &str) -> bool {
    let user =
        format!("system:serviceaccount:{}:{}", release_namespace(), controller_service_account(client, key).await);
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", release_namespace()),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                verb: Some(verb.into()),
                namespace: Some("e2e-rbac-probe".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("create a SubjectAccessReview");
    answer.status.map(|s| s.allowed).unwrap_or(false)
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn controller_logs_have_no_colour_codes_off_a_terminal() {
    let Some(dir) = node_logs_dir() else {
        eprintln!("skipped: the pods' log files are readable only on the test cluster's node (e2e/run.sh --local)");
        return;
    };
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if !file.starts_with(&format!("{}_", release_namespace())) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.is_empty(), "{file} is empty");
        assert!(!text.contains('\u{1b}'), "{file} holds ANSI escape sequences:\n{}", &text[..text.len().min(400)]);
        checked += 1;
    }
    assert!(checked >= CONTROLLERS.len(), "found {checked} controller log files in {}", dir.display());
}
