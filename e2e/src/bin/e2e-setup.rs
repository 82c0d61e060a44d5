//! Prepares the cluster of `KUBECONFIG` for the e2e suite, before the chart is installed:
//! the release namespace (created, and labelled so that PodSecurity admission enforces the
//! `restricted` profile on every pod of the chart) and the suite's CRDs (server-side applied,
//! since `helm upgrade` never updates CRDs), then waits until the CRDs are established.
//!
//!     e2e-setup --namespace visitors-operator-system

use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, CustomResourceExt};
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};

const FIELD_MANAGER: &str = "visitors-e2e";
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> ExitCode {
    let namespace = match parse_namespace(std::env::args().skip(1).collect()) {
        Ok(namespace) => namespace,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    match prepare(&namespace).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("e2e-setup: {error}");
            ExitCode::FAILURE
        }
    }
}

fn parse_namespace(args: Vec<String>) -> Result<String, String> {
    match args.as_slice() {
        [flag, namespace] if flag == "--namespace" => Ok(namespace.clone()),
        _ => Err("usage: e2e-setup --namespace NAMESPACE".into()),
    }
}

async fn prepare(namespace: &str) -> Result<(), String> {
    let client = visitors_e2e::cluster().await;
    apply_release_namespace(&client, namespace).await?;
    for crd in [VisitorsApp::crd(), MySQLBackup::crd(), MySQLRestore::crd()] {
        apply_crd(&client, crd).await?;
    }
    Ok(())
}

async fn apply_release_namespace(client: &Client, name: &str) -> Result<(), String> {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }},
    }))
    .map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&namespace))
        .await
        .map_err(|e| format!("applying Namespace {name}: {e}"))?;
    println!("namespace {name}: pod-security.kubernetes.io/enforce=restricted");
    Ok(())
}

async fn apply_crd(client: &Client, crd: CustomResourceDefinition) -> Result<(), String> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
        .await
        .map_err(|e| format!("applying CRD {name}: {e}"))?;
    let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        let current = api.get(&name).await.map_err(|e| format!("reading CRD {name}: {e}"))?;
        if visitors_e2e::is_established(&current) {
            println!("CRD {name}: established");
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("CRD {name} is not established after {ESTABLISH_TIMEOUT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_exactly_one_namespace() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(parse_namespace(args(&["--namespace", "ops"])), Ok("ops".to_string()));
        assert!(parse_namespace(args(&[])).is_err());
        assert!(parse_namespace(args(&["ops"])).is_err());
    }
}
