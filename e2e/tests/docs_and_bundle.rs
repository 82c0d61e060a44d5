//! On a real API server: every Kubernetes object the user documentation tells people to apply,
//! and every object the OLM bundle makes OLM create (the controllers' Deployments, their
//! permissions as roles, the metrics Services), passes the API server's validation
//! (server-side dry run). The helm/tests and docs/tests check the same files' content offline.

use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, discovery};
use serde_json::{Value, json};
use visitors_e2e::{TestNamespace, cluster, repo_root};

/// Objects (with apiVersion, kind and metadata) in the YAML code blocks of the docs and in
/// the `kubectl ... apply -f - <<'EOF'` heredocs of their shell blocks, with where each is.
fn documented_objects() -> Vec<(String, Value)> {
    let mut documents = vec![repo_root().join("README.md")];
    let mut in_docs: Vec<_> = std::fs::read_dir(repo_root().join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    in_docs.sort();
    documents.extend(in_docs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    let mut objects = Vec::new();
    for path in documents {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for (line, block) in yaml_blocks(&std::fs::read_to_string(&path).unwrap()) {
            let values: Vec<Value> = serde_saphyr::from_multiple(&block)
                .unwrap_or_else(|e| panic!("{name}:{line}: a YAML block does not parse: {e}"));
            for value in values {
                if ["apiVersion", "kind", "metadata"].iter().all(|key| value.get(key).is_some()) {
                    objects.push((format!("{name}:{line}"), value));
                }
            }
        }
    }
    objects
}

/// (first line number, text) of each ```yaml block and each applied heredoc in a shell block.
fn yaml_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut fence: Option<String> = None;
    let mut current: Option<(usize, String)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        if let Some(language) = line.trim_start().strip_prefix("```") {
            if fence.is_none() {
                fence = Some(language.trim().to_string());
                if language.trim() == "yaml" {
                    current = Some((number + 1, String::new()));
                }
            } else {
                fence = None;
                blocks.extend(current.take());
            }
            continue;
        }
        match (fence.as_deref(), current.as_mut()) {
            (Some("yaml"), Some((_, text))) => text.push_str(&format!("{line}\n")),
            (Some("sh" | "bash"), Some(_)) if line.trim() == "EOF" => blocks.extend(current.take()),
            (Some("sh" | "bash"), Some((_, text))) => text.push_str(&format!("{line}\n")),
            (Some("sh" | "bash"), None) if line.contains("kubectl") && line.contains("apply -f - <<'EOF'") => {
                current = Some((number + 1, String::new()));
            }
            _ => {}
        }
    }
    blocks
}

async fn dry_run_create(client: &Client, namespace: Option<&str>, object: Value) -> Result<(), String> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (resource, _) = discovery::pinned_kind(client, &gvk).await.map_err(|e| format!("unknown kind: {e}"))?;
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: DynamicObject = serde_json::from_value(object).map_err(|e| e.to_string())?;
    let params = PostParams { dry_run: true, ..Default::default() };
    api.create(&params, &object).await.map(|_| ()).map_err(|e| e.to_string())
}

fn in_namespace(mut object: Value, namespace: &str) -> Value {
    object["metadata"]["namespace"] = json!(namespace);
    object
}

/// Offline: the extraction finds the objects of each how-to (so the scenario below checks them).
#[test]
fn the_extraction_finds_the_objects_of_every_how_to() {
    let found: Vec<String> = documented_objects()
        .into_iter()
        .map(|(place, object)| {
            format!(
                "{} {} {}",
                place.split(':').next().unwrap(),
                object["kind"].as_str().unwrap(),
                object["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    for expected in [
        "getting-started.md PersistentVolumeClaim mysql-backups",
        "getting-started.md MySQLBackup first",
        "getting-started.md MySQLRestore bring-back-notes",
        "backup-restore.md MySQLBackup before-upgrade",
        "backup-restore.md MySQLBackup nightly",
        "backup-restore.md MySQLRestore undo-bad-migration",
        "backup-restore.md MySQLRestore from-old-cluster",
        "disaster-recovery.md Pod manual-restore",
        "api.md VisitorsApp ex",
    ] {
        assert!(found.iter().any(|f| f == expected), "not extracted: {expected}; found {found:?}");
    }
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn every_object_the_docs_apply_is_accepted_by_the_api_server() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-docs").await;
    let objects = documented_objects();
    // getting-started alone applies a claim, a VisitorsApp, a MySQLBackup and a MySQLRestore.
    assert!(objects.len() >= 8, "found only {} objects in the docs: is the extraction broken?", objects.len());
    let mut rejected = Vec::new();
    for (place, object) in objects {
        let what = format!("{place} {} {}", object["kind"], object["metadata"]["name"]);
        if let Err(error) = dry_run_create(&client, Some(&namespace.name), in_namespace(object, &namespace.name)).await
        {
            rejected.push(format!("{what}: {error}"));
        }
    }
    namespace.delete().await;
    assert!(
        rejected.is_empty(),
        "the API server rejects objects the docs tell people to apply:\n{}",
        rejected.join("\n")
    );
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn the_olm_bundle_objects_are_accepted_by_the_api_server() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-bundle").await;
    let manifests = repo_root().join("bundle/manifests");
    let csv: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(manifests.join("visitors-operator.clusterserviceversion.yaml")).unwrap(),
    )
    .unwrap();
    let install = &csv["spec"]["install"]["spec"];
    let mut objects = Vec::new();
    for deployment in install["deployments"].as_array().unwrap() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": deployment["name"], "labels": deployment["label"]},
            "spec": deployment["spec"],
        });
        objects.push((format!("deployment {}", deployment["name"]), Some(namespace.name.clone()), object));
    }
    // OLM turns each permission set into a Role (or a ClusterRole under AllNamespaces) and each
    // cluster permission set into a ClusterRole: the rules must be valid as both.
    for field in ["permissions", "clusterPermissions"] {
        for (index, permission) in install[field].as_array().unwrap().iter().enumerate() {
            let name = format!("{}-{field}-{index}", namespace.name).to_lowercase();
            let rules = &permission["rules"];
            let cluster_role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                      "metadata": {"name": name}, "rules": rules});
            objects.push((format!("{field}[{index}] as a ClusterRole"), None, cluster_role));
            if field == "permissions" {
                let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                  "metadata": {"name": name}, "rules": rules});
                objects.push((format!("{field}[{index}] as a Role"), Some(namespace.name.clone()), role));
            }
        }
    }
    for entry in std::fs::read_dir(&manifests).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with("_v1_service.yaml") {
            let service: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            objects.push((path.display().to_string(), Some(namespace.name.clone()), service));
        }
    }
    assert!(objects.len() >= 3 + 3 * 3 + 3, "the bundle holds fewer objects than the three controllers need");
    let mut rejected = Vec::new();
    for (what, target, object) in objects {
        let object = match &target {
            Some(namespace) => in_namespace(object, namespace),
            None => object,
        };
        if let Err(error) = dry_run_create(&client, target.as_deref(), object).await {
            rejected.push(format!("{what}: {error}"));
        }
    }
    namespace.delete().await;
    assert!(rejected.is_empty(), "the API server rejects objects of the OLM bundle:\n{}", rejected.join("\n"));
}
