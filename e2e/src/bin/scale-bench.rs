//! The VisitorsApp controller at scale, on a real API server (bench/controllers/scale.sh runs
//! it): creates `--apps` book VisitorsApps at once in `--namespace`, measures the seconds until
//! every one has `observedGeneration` 1, its MySQL StatefulSet and its frontend Deployment (the
//! backend waits for a ready database, which a cluster without a node never has), then reads the
//! controller's `/metrics` over `--idle-seconds` to report what waiting apps cost. Prints one
//! JSON object.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use visitors_api::{VisitorsApp, VisitorsAppSpec};

const CREATE_CONCURRENCY: usize = 64;
const POLL: Duration = Duration::from_secs(1);

struct Options {
    apps: usize,
    namespace: String,
    metrics: String,
    idle_seconds: u64,
    timeout_seconds: u64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        apps: 100,
        namespace: "scale-bench".into(),
        metrics: "http://127.0.0.1:18090/metrics".into(),
        idle_seconds: 300,
        timeout_seconds: 1800,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else { return Err(format!("{} needs a value", pair[0])) };
        let number = || value.parse::<u64>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--apps" => options.apps = number()? as usize,
            "--namespace" => options.namespace = value.clone(),
            "--metrics" => options.metrics = value.clone(),
            "--idle-seconds" => options.idle_seconds = number()?,
            "--timeout-seconds" => options.timeout_seconds = number()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!(
                "scale-bench: {problem}\nusage: scale-bench [--apps N] [--namespace NS] [--metrics URL] [--idle-seconds S] [--timeout-seconds S]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let client = visitors_e2e::cluster().await;
    match run(&client, &options).await {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(problem) => {
            eprintln!("scale-bench: {problem}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(client: &Client, options: &Options) -> Result<serde_json::Value, String> {
    create_namespace(client, &options.namespace).await?;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &options.namespace);
    let start = Instant::now();
    let names: Vec<String> = (0..options.apps).map(|i| format!("app-{i:04}")).collect();
    futures::stream::iter(names.iter().cloned())
        .map(|name| {
            let apps = apps.clone();
            async move {
                let spec =
                    VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..Default::default() };
                apps.create(&PostParams::default(), &VisitorsApp::new(&name, spec))
                    .await
                    .map_err(|e| format!("{name}: {e}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let created_seconds = start.elapsed().as_secs_f64();
    eprintln!("created {} apps in {created_seconds:.1} s", options.apps);

    let deadline = start + Duration::from_secs(options.timeout_seconds);
    let (converged_seconds, last) = loop {
        let pending = not_yet_reconciled(client, &options.namespace, &names).await?;
        if pending.is_empty() {
            break (start.elapsed().as_secs_f64(), None);
        }
        if Instant::now() > deadline {
            break (start.elapsed().as_secs_f64(), Some(pending.len()));
        }
        tokio::time::sleep(POLL).await;
    };
    if let Some(pending) = last {
        return Err(format!("{pending} apps still lacked a first status or children after {converged_seconds:.0} s"));
    }
    eprintln!("every app reconciled after {converged_seconds:.1} s; measuring {} s of waiting", options.idle_seconds);

    let before = reconciles(&options.metrics).await?;
    tokio::time::sleep(Duration::from_secs(options.idle_seconds)).await;
    let after = reconciles(&options.metrics).await?;
    let per_app_per_minute = (after - before) / options.apps as f64 / (options.idle_seconds as f64 / 60.0);
    Ok(serde_json::json!({
        "apps": options.apps,
        "create_seconds": round(created_seconds),
        "all_reconciled_seconds": round(converged_seconds),
        "idle_window_seconds": options.idle_seconds,
        "reconciles_in_window": after - before,
        "reconciles_per_waiting_app_per_minute": round(per_app_per_minute),
    }))
}

fn round(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), String> {
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply("scale-bench"), &Patch::Apply(&namespace))
        .await
        .map(|_| ())
        .map_err(|e| format!("namespace {name}: {e}"))
}

/// The apps that lack `observedGeneration` 1, their StatefulSet or their frontend Deployment.
async fn not_yet_reconciled(client: &Client, namespace: &str, names: &[String]) -> Result<Vec<String>, String> {
    let list = ListParams::default();
    let apps =
        Api::<VisitorsApp>::namespaced(client.clone(), namespace).list(&list).await.map_err(|e| e.to_string())?;
    let observed: HashSet<String> = apps
        .items
        .iter()
        .filter(|a| a.status.as_ref().and_then(|s| s.observed_generation) == Some(1))
        .map(|a| a.name_any())
        .collect();
    let statefulsets: HashSet<String> = Api::<StatefulSet>::namespaced(client.clone(), namespace)
        .list_metadata(&list)
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    let deployments: HashSet<String> = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list_metadata(&list)
        .await
        .map_err(|e| e.to_string())?
        .items
        .iter()
        .map(|d| d.name_any())
        .collect();
    Ok(names
        .iter()
        .filter(|name| {
            !(observed.contains(*name)
                && statefulsets.contains(&format!("{name}-mysql"))
                && deployments.contains(&format!("{name}-frontend")))
        })
        .cloned()
        .collect())
}

async fn reconciles(metrics_url: &str) -> Result<f64, String> {
    let text = visitors_e2e::http_get(metrics_url).await?;
    visitors_e2e::metric_value(&text, "visitors_operator_reconciles_total", r#"controller="visitors-controller""#)
        .ok_or_else(|| format!("no visitors_operator_reconciles_total at {metrics_url}"))
}
