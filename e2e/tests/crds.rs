//! On a real API server: the CRDs are established, the shipped examples are accepted, and the
//! schema's ranges, enums and CEL rules reject bad input with a message naming the problem.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use visitors_e2e::{TestNamespace, cluster, is_established, repo_root};

const CRDS: [&str; 3] = ["visitorsapps.example.com", "mysqlbackups.example.com", "mysqlrestores.example.com"];

fn api_for(client: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    let resource = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: kind.into(),
        plural,
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

async fn dry_run_create(client: &Client, namespace: &str, mut object: Value) -> Result<(), String> {
    object["metadata"]["namespace"] = json!(namespace);
    let kind = object["kind"].as_str().unwrap().to_string();
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    let params = PostParams { dry_run: true, ..Default::default() };
    api_for(client, namespace, &kind).create(&params, &object).await.map(|_| ()).map_err(|e| e.to_string())
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn crds_are_established() {
    let client = cluster().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for name in CRDS {
        let crd = crds.get(name).await.unwrap_or_else(|e| panic!("{name} is not installed: {e}"));
        assert!(is_established(&crd), "{name} is not established");
    }
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn examples_are_accepted_and_bad_input_is_rejected_with_a_reason() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-crds").await;

    for entry in std::fs::read_dir(repo_root().join("deploy/examples")).unwrap() {
        let path = entry.unwrap().path();
        let example: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let result = dry_run_create(&client, &namespace.name, example).await;
        assert_eq!(result, Ok(()), "{} was rejected", path.display());
    }

    let rejected = [
        (
            json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": "too-big"}, "spec": {"size": 500}}),
            "spec.size",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": "bad-type"}, "spec": {"size": 1, "service": {"type": "LoadBalancerX"}}}),
            "spec.service.type",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "two-storages"}, "spec": {
                "source": {"visitorsApp": "ex"},
                "storage": {"s3": {"bucket": "backups"}, "persistentVolumeClaim": {"claimName": "pvc"}}}}),
            "set exactly one of s3 or persistentVolumeClaim",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "drill-cron-run"}, "spec": {
                "source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "pvc"}},
                "drill": {"cron": "0 4 * * *"}}}),
            "drill.cron needs a schedule",
        ),
        (
            json!({"apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": "no-source"}, "spec": {
                "source": {}, "target": {"visitorsApp": "ex"}}}),
            "set exactly one of backup, storage or pointInTime",
        ),
    ];
    for (object, expected) in rejected {
        let name = object["metadata"]["name"].clone();
        let error =
            dry_run_create(&client, &namespace.name, object).await.expect_err(&format!("{name} should be rejected"));
        assert!(error.contains(expected), "{name}: {error}");
    }
    namespace.delete().await;
}
