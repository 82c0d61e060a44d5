//! The committed CRDs are exactly what crdgen generates, and each CRD has what users rely on.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn committed_crds_match_crdgen() {
    for dir in ["deploy/crds", "helm/visitors-operator/crds"] {
        for (file, generated) in visitors_api::crds::files() {
            let path = repo_root().join(dir).join(&file);
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == generated,
                "{} is stale or missing: run `cargo run --bin crdgen` and commit the result",
                path.display()
            );
        }
    }
}

fn check_crd(crd: CustomResourceDefinition, short_name: &str) {
    let name = crd.metadata.name.clone().unwrap();
    assert_eq!(crd.spec.group, "example.com", "{name}");
    assert_eq!(crd.spec.scope, "Namespaced", "{name}");
    assert_eq!(crd.spec.names.categories, Some(vec!["visitors".to_string()]), "{name}");
    assert_eq!(crd.spec.names.short_names, Some(vec![short_name.to_string()]), "{name}");
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1");
    assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(), "{name} has a status subresource");
    let columns: Vec<&str> = version.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
    assert!(columns.contains(&"Age"), "{name}: {columns:?}");
    let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
    let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(status["observedGeneration"]["type"], "integer", "{name}");
    assert_eq!(status["conditions"]["type"], "array", "{name}");
    let condition = &status["conditions"]["items"]["properties"];
    for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
        assert!(condition.get(field).is_some(), "{name}: conditions lack {field}");
    }
}

#[test]
fn crds_have_status_printer_columns_short_names_and_category() {
    check_crd(VisitorsApp::crd(), "vapp");
    check_crd(MySQLBackup::crd(), "mbak");
    check_crd(MySQLRestore::crd(), "mrestore");
}

#[test]
fn schema_enforces_ranges_and_enums() {
    let schema = serde_json::to_value(&VisitorsApp::crd().spec.versions[0].schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["size"]));
    assert_eq!(spec["properties"]["size"]["minimum"], 0.0);
    assert_eq!(spec["properties"]["size"]["maximum"], 50.0);
    let service_type = &spec["properties"]["service"]["properties"]["type"]["enum"];
    assert!(service_type.as_array().unwrap().contains(&serde_json::json!("NodePort")), "{service_type}");
}

fn column_names(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect()
}

#[test]
fn kubectl_get_shows_phase_size_duration_and_schedule_times() {
    let wanted: [(CustomResourceDefinition, &[&str]); 3] = [
        (VisitorsApp::crd(), &["Size", "Backend", "Primary", "Replicas", "Ready", "Reason", "Age"]),
        (
            MySQLBackup::crd(),
            &["App", "Schedule", "Phase", "Size", "Duration", "Last", "Next", "LastBackup", "Drill", "Age"],
        ),
        (MySQLRestore::crd(), &["App", "Backup", "Phase", "Duration", "Age"]),
    ];
    for (crd, wanted) in wanted {
        let shown: Vec<String> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(
            shown,
            wanted,
            "{}: columns of `kubectl get` (all: {:?})",
            crd.metadata.name.clone().unwrap(),
            column_names(&crd)
        );
    }
}
