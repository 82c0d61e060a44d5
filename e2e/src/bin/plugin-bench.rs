//! The benchmark of `kubectl visitors status` (bench/plugin/status.sh runs it): fills
//! `--namespace` with `--apps` VisitorsApps, each with a schedule that archives and drills and
//! `--runs` runs, every object with a status as the controllers write them; then runs the plugin
//! binary `--repeat` times for one app and for the whole list, and prints the seconds each took
//! (the process included, as a person waits for it) and the API requests it sent, as JSON.
//!
//!     plugin-bench --plugin target/release/kubectl-visitors [--apps 1000] [--runs 3] [--repeat 10]

use std::process::ExitCode;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use visitors_api::{MySQLBackup, VisitorsApp};

const CONCURRENCY: usize = 32;
const MANAGER: &str = "plugin-bench";

struct Options {
    plugin: String,
    apps: usize,
    runs: usize,
    repeat: usize,
    namespace: String,
}

fn options() -> Result<Options, String> {
    let mut options =
        Options { plugin: String::new(), apps: 1000, runs: 3, repeat: 10, namespace: "plugin-bench".into() };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else { return Err(format!("{} needs a value", pair[0])) };
        let number = || value.parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        match flag.as_str() {
            "--plugin" => options.plugin = value.clone(),
            "--apps" => options.apps = number()?,
            "--runs" => options.runs = number()?,
            "--repeat" => options.repeat = number()?,
            "--namespace" => options.namespace = value.clone(),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.plugin.is_empty() {
        return Err("--plugin is required".into());
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = match options() {
        Ok(options) => options,
        Err(problem) => {
            eprintln!(
                "plugin-bench: {problem}\nusage: plugin-bench --plugin PATH [--apps N] [--runs R] [--repeat K] [--namespace NS]"
            );
            return ExitCode::from(2);
        }
    };
    match run(&options).await {
        Ok(report) => {
            println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(problem) => {
            eprintln!("plugin-bench: {problem}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: &Options) -> Result<Value, String> {
    let client = Client::try_default().await.map_err(|e| e.to_string())?;
    let start = Instant::now();
    fill(&client, options).await?;
    let filled = start.elapsed().as_secs_f64();
    let one = measure(options, &["status", &app_name(options.apps / 2)]).await?;
    let list = measure(options, &["status"]).await?;
    Ok(json!({
        "apps": options.apps, "runs_per_app": options.runs, "seconds_to_fill": filled,
        "status_one_app": one, "status_list": list,
    }))
}

fn app_name(i: usize) -> String {
    format!("app-{i:05}")
}

/// Runs the plugin `repeat` times with `args`: seconds per run (median, slowest) and requests.
async fn measure(options: &Options, args: &[&str]) -> Result<Value, String> {
    let mut seconds = Vec::new();
    let mut requests = None;
    let mut lines = 0;
    for _ in 0..options.repeat {
        let start = Instant::now();
        let output = tokio::process::Command::new(&options.plugin)
            .args(args)
            .args(["-n", &options.namespace, "-v"])
            .output()
            .await
            .map_err(|e| format!("{}: {e}", options.plugin))?;
        seconds.push(start.elapsed().as_secs_f64());
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!("kubectl visitors {}: {stderr}", args.join(" ")));
        }
        requests = stderr.lines().rev().find_map(|l| l.strip_suffix(" API requests")?.parse::<u64>().ok());
        lines = output.stdout.iter().filter(|b| **b == b'\n').count();
    }
    seconds.sort_by(f64::total_cmp);
    Ok(json!({
        "median_seconds": round(seconds[seconds.len() / 2]), "slowest_seconds": round(seconds[seconds.len() - 1]),
        "api_requests": requests, "lines_printed": lines,
    }))
}

fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

async fn fill(client: &Client, options: &Options) -> Result<(), String> {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.namespace}});
    Api::<Namespace>::all(client.clone())
        .patch(&options.namespace, &PatchParams::apply(MANAGER), &Patch::Apply(&namespace))
        .await
        .map_err(|e| format!("namespace: {e}"))?;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &options.namespace);
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &options.namespace);
    futures::stream::iter(0..options.apps)
        .map(|i| fill_app(&apps, &backups, i, options.runs))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn fill_app(apps: &Api<VisitorsApp>, backups: &Api<MySQLBackup>, i: usize, runs: usize) -> Result<(), String> {
    let app = app_name(i);
    create_with_status(apps, app_object(&app), app_status(&app)).await?;
    let schedule = format!("{app}-nightly");
    create_with_status(backups, schedule_object(&app, &schedule), schedule_status()).await?;
    for run in 0..runs {
        let name = format!("{schedule}-{}", 29_400_000 + run);
        create_with_status(backups, run_object(&app, &schedule, &name), run_status(run)).await?;
    }
    Ok(())
}

async fn create_with_status<K>(api: &Api<K>, object: Value, status: Value) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let typed: K = serde_json::from_value(object).map_err(|e| format!("{name}: {e}"))?;
    api.create(&PostParams::default(), &typed).await.map_err(|e| format!("create {name}: {e}"))?;
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .map_err(|e| format!("status of {name}: {e}"))?;
    Ok(())
}

fn app_object(app: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": app}, "spec": {"size": 1}})
}

fn app_status(app: &str) -> Value {
    let condition = |type_: &str, reason: &str| json!({"type": type_, "status": "True", "reason": reason, "message": "", "lastTransitionTime": "2026-11-20T08:00:00Z"});
    json!({
        "observedGeneration": 1, "mysqlImage": "mariadb:10.11", "backendImage": "jdob/visitors-service:1.0.0",
        "frontendImage": "jdob/visitors-webui:1.0.0", "mysqlReadyReplicas": 1, "backendReadyReplicas": 1,
        "frontendReadyReplicas": 1, "credentialsSecret": format!("{app}-mysql-credentials"),
        "endpoints": {"database": format!("{app}-mysql.plugin-bench.svc:3306")},
        "tls": {"mode": "Required", "secretName": format!("{app}-mysql-tls"), "notAfter": "2027-02-20T00:00:00Z"},
        "conditions": [condition("Ready", "Ready"), condition("DatabaseReady", "Connected"),
                       condition("BackendReady", "Available"), condition("FrontendReady", "Available")],
    })
}

fn schedule_object(app: &str, schedule: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": schedule},
        "spec": {"source": {"visitorsApp": app}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
                 "schedule": {"cron": "0 3 * * *"}, "pointInTime": {}, "drill": {}}})
}

fn schedule_status() -> Value {
    json!({
        "nextScheduleTime": "2026-11-29T03:00:00Z", "lastSuccessfulRun": "x",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"},
                       {"type": "Archiving", "status": "True", "reason": "Archiving", "message": "", "lastTransitionTime": "2026-11-25T00:00:00Z"}],
        "pointInTime": {"oldestRecoverableTime": "2026-11-26T03:00:04Z", "lastRecoverableTime": "2026-11-28T11:59:58Z",
                        "archiveLagSeconds": 2.0, "segments": 1234, "storedBytes": 20_971_520},
    })
}

fn run_object(app: &str, schedule: &str, name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup",
        "metadata": {"name": name, "labels": {"example.com/backup-schedule": schedule, "example.com/visitors-app": app}},
        "spec": {"source": {"visitorsApp": app}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}, "drill": {}}})
}

fn run_status(run: usize) -> Value {
    let day = 25 + run % 3;
    json!({
        "phase": "Succeeded", "startTime": format!("2026-11-{day}T03:00:01Z"),
        "completionTime": format!("2026-11-{day}T03:02:04Z"), "durationSeconds": 123.0,
        "location": "pvc://backups/plugin-bench/app/run", "sizeBytes": 1_288_490_189_i64, "tables": 12, "rows": 4_200_000,
        "manifestSha256": "ab".repeat(32), "serverVersion": "10.11.6-MariaDB",
        "verifiedTime": format!("2026-11-{day}T03:05:10Z"),
        "drill": {"phase": "Succeeded", "requestedAt": format!("2026-11-{day}T03:02:04Z"), "restoreSeconds": 41.2,
                  "durationSeconds": 180.0, "tables": 12, "rows": 4_200_000},
        "snapshot": {"time": format!("2026-11-{day}T03:00:05Z"), "binlogFile": "binlog.000012", "binlogPosition": 4400},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "2026-11-25T03:02:04Z"},
                       {"type": "Verified", "status": "True", "reason": "Verified", "message": "", "lastTransitionTime": "2026-11-25T03:05:10Z"}],
    })
}
