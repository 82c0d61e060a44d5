//! The chart's Jaeger all-in-one (tracing.jaeger.enabled, off in the suite's install) is
//! admitted under the `restricted` Pod Security profile: its pod, as the chart renders it
//! with real Helm, is created by a server-side dry run in the release namespace, which
//! enforces `restricted`; the same pod without one of its hardening fields is refused, so
//! the namespace is shown to be checking.

use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use visitors_e2e::{cluster, release, release_namespace, repo_root};

/// A Python that can import helm_sdkpy: the project's venv (as e2e/run.sh picks it), else python3.
fn python_with_helm() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let venv = std::env::var_os("VISITORS_CI_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".cache/visitors-operator/venv"));
    [venv.join("bin/python"), PathBuf::from("python3")]
        .into_iter()
        .find(|python| {
            Command::new(python).args(["-c", "import helm_sdkpy"]).output().is_ok_and(|o| o.status.success())
        })
        .expect(
            "no Python with helm-sdkpy (the e2e install needs it too): pip install -r scripts/requirements-test.txt",
        )
}

/// The chart rendered by real Helm (helm/tools/helmrender.py) with `values`, as objects.
fn render(values: Value) -> Vec<Value> {
    let output = Command::new(python_with_helm())
        .arg(repo_root().join("helm/tools/helmrender.py"))
        .args(["--release", &release(), "--namespace", &release_namespace(), "--set-json", &values.to_string()])
        .output()
        .expect("run helm/tools/helmrender.py");
    assert!(output.status.success(), "render failed: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("the render is YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn jaeger_pod(docs: &[Value]) -> Pod {
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["labels"]["app.kubernetes.io/component"] == "jaeger")
        .expect("the render has the Jaeger Deployment");
    let template = &deployment["spec"]["template"];
    serde_json::from_value(json!({
        "metadata": {"name": "jaeger-admission-check", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }))
    .unwrap()
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn the_charts_jaeger_pod_is_admitted_under_the_restricted_profile() {
    let client = cluster().await;
    let pods: Api<Pod> = Api::namespaced(client, &release_namespace());
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let pod = jaeger_pod(&render(json!({"tracing": {"jaeger": {"enabled": true}}})));
    if let Err(error) = pods.create(&dry_run, &pod).await {
        panic!("the Jaeger pod is refused in {}: {error}", release_namespace());
    }

    let mut weakened = serde_json::to_value(&pod).unwrap();
    weakened["spec"]["containers"][0]["securityContext"].as_object_mut().unwrap().remove("allowPrivilegeEscalation");
    let weakened: Pod = serde_json::from_value(weakened).unwrap();
    match pods.create(&dry_run, &weakened).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains("PodSecurity"), "{}", status.message);
        }
        other => panic!("a pod without allowPrivilegeEscalation: false was not refused: {other:?}"),
    }
}
