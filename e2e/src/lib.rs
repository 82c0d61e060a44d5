//! Shared set-up of the end-to-end tests. They create and delete real objects in the cluster
//! of `KUBECONFIG`, which must have the suite installed (see e2e/README.md), so every test is
//! `#[ignore]`d with the reason, and runs only when asked: `e2e/run.sh`, which skips with a
//! message when no cluster is configured, or `cargo test -p visitors-e2e -- --ignored`.

pub mod archive;
pub mod book_backups;
pub mod certificates;
pub mod moto;
pub mod plugin;
pub mod process;
pub mod prometheus;
pub mod replication;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use visitors_api::VisitorsApp;
use visitors_api::conditions::{self, READY};

/// A client for the e2e cluster. The tests were asked for explicitly, so a missing or
/// unreachable cluster is a failure with the reason, never a silent pass.
pub async fn cluster() -> Client {
    // The workspace links both of rustls' providers; name one (see controller_common::startup).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        Client::try_default().await.expect("no usable KUBECONFIG or in-cluster configuration for the e2e cluster");
    client.apiserver_version().await.expect("the e2e cluster's API server does not answer");
    client
}

/// A fresh namespace for one test, deleted by [`TestNamespace::delete`].
pub struct TestNamespace {
    pub name: String,
    client: Client,
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", unique_suffix());
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "visitors-e2e"}}
        }))
        .unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create the test namespace");
        Self { name, client: client.clone() }
    }

    /// Deletes the namespace, unless `E2E_KEEP_NAMESPACE=1` asks to keep it for inspection.
    pub async fn delete(self) {
        if std::env::var("E2E_KEEP_NAMESPACE").is_ok_and(|v| v == "1") {
            eprintln!("keeping namespace {}", self.name);
            return;
        }
        let _ = Api::<Namespace>::all(self.client).delete(&self.name, &DeleteParams::background()).await;
    }
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    format!("{}-{nanos:x}", std::process::id())
}

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// How long one wait may take: `E2E_TIMEOUT_SECONDS`, default 600 (images may need pulling).
pub fn timeout() -> Duration {
    let seconds = std::env::var("E2E_TIMEOUT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    Duration::from_secs(seconds)
}

/// Polls `check` every few seconds until it returns `Ok`; after [`timeout`] fails naming
/// `what` and the last state `check` reported.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout();
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {:?} waiting for {what}; last seen: {last}",
            timeout()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// Namespace of the chart's release (`E2E_RELEASE_NAMESPACE`, set by e2e/run.sh).
pub fn release_namespace() -> String {
    std::env::var("E2E_RELEASE_NAMESPACE").unwrap_or_else(|_| "visitors-operator-system".into())
}

/// Name of the chart's release (`E2E_RELEASE`, set by e2e/run.sh).
pub fn release() -> String {
    std::env::var("E2E_RELEASE").unwrap_or_else(|_| "visitors-operator".into())
}

/// The controllers of the chart, by their values key.
pub const CONTROLLERS: [&str; 3] = ["visitors", "backup", "restore"];

/// The label selector of the objects of one controller of the release (its Deployment, pods,
/// metrics Service): by labels, never by a name derived from the release's, which the chart
/// shortens or prefixes as release names require.
pub fn controller_selector(key: &str) -> String {
    format!("app.kubernetes.io/component={key}-controller,app.kubernetes.io/instance={}", release())
}

/// A controller's Deployment, found by its labels in the release namespace.
pub async fn controller_deployment(client: &Client, key: &str) -> k8s_openapi::api::apps::v1::Deployment {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &release_namespace());
    let params = kube::api::ListParams::default().labels(&controller_selector(key));
    let mut found = deployments.list(&params).await.expect("list the controllers' Deployments").items;
    assert_eq!(found.len(), 1, "one Deployment labelled {} in {}", controller_selector(key), release_namespace());
    found.remove(0)
}

/// The name of a controller's Deployment, e.g. `visitors-operator-visitors-controller`.
pub async fn controller_name(client: &Client, key: &str) -> String {
    kube::ResourceExt::name_any(&controller_deployment(client, key).await)
}

/// The ServiceAccount a controller's pods run as.
pub async fn controller_service_account(client: &Client, key: &str) -> String {
    let deployment = controller_deployment(client, key).await;
    let pod = deployment.spec.and_then(|s| s.template.spec);
    pod.and_then(|p| p.service_account_name).unwrap_or_else(|| "default".into())
}

/// The text a controller serves at `/metrics`. On the test cluster's node the controllers
/// listen on the host, on the ports of `E2E_METRICS_PORTS` (`visitors=18080,...`, set by
/// `e2e/run.sh --local`; a Service cannot reach them there, as Endpoints refuse loopback
/// addresses); elsewhere it is read through the API server's Service proxy, from the metrics
/// Service found by its labels.
pub async fn controller_metrics(client: &Client, key: &str) -> Result<String, String> {
    if let Some(port) = local_metrics_port(key) {
        return http_get(&format!("http://127.0.0.1:{port}/metrics")).await;
    }
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &release_namespace());
    let params = kube::api::ListParams::default().labels(&controller_selector(key));
    let listed = services.list(&params).await.map_err(|e| e.to_string())?;
    let service = listed
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .find(|name| name.ends_with("-metrics"))
        .ok_or_else(|| format!("no metrics Service labelled {}", controller_selector(key)))?;
    let path = format!("/api/v1/namespaces/{}/services/{service}:metrics/proxy/metrics", release_namespace());
    let request = http::Request::get(&path).body(Vec::new()).map_err(|e| e.to_string())?;
    tokio::time::timeout(HTTP_TIMEOUT, client.request_text(request))
        .await
        .map_err(|_| format!("GET {path}: no answer in {HTTP_TIMEOUT:?}"))?
        .map_err(|e| format!("GET {path}: {e}"))
}

const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

fn local_metrics_port(key: &str) -> Option<u16> {
    let ports = std::env::var("E2E_METRICS_PORTS").ok()?;
    ports.split(',').filter_map(|pair| pair.split_once('=')).find(|(k, _)| *k == key).and_then(|(_, p)| p.parse().ok())
}

/// A plain HTTP/1.0 GET of a local `http://` URL (a controller's metrics server), bounded in time.
pub async fn http_get(url: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("{url}: only http:// URLs"))?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(host).await.map_err(|e| format!("{url}: {e}"))?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("{url}: {e}"))?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.map_err(|e| format!("{url}: {e}"))?;
        Ok::<_, String>(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{url}: no answer in {HTTP_TIMEOUT:?}"))??;
    response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).ok_or_else(|| format!("{url}: no body"))
}

/// The value of the sample `name{labels}` in Prometheus text, e.g.
/// `metric_value(text, "visitors_operator_reconciles_total", r#"controller="visitors-controller""#)`.
pub fn metric_value(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines().find_map(|line| line.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

/// The node's log files (one per pod container) when the node is the test cluster's emulated
/// one (`E2E_NODE_LOGS`, set by `e2e/run.sh --local`); `None` on another cluster.
pub fn node_logs_dir() -> Option<PathBuf> {
    std::env::var_os("E2E_NODE_LOGS").map(PathBuf::from).filter(|dir| dir.is_dir())
}

/// `Ok(app)` once VisitorsApp `name` is Ready at `generation`; otherwise what it shows.
pub async fn app_ready_at_generation(
    apps: &Api<VisitorsApp>,
    name: &str,
    generation: i64,
) -> Result<VisitorsApp, String> {
    let app = apps.get(name).await.map_err(|e| e.to_string())?;
    let status = app.status.clone().unwrap_or_default();
    let ready = conditions::find(&status.conditions, READY);
    let summary =
        ready.map(|c| format!("{} {}: {}", c.status, c.reason, c.message)).unwrap_or("no Ready condition".into());
    if status.observed_generation == Some(generation) && conditions::is_true(&status.conditions, READY) {
        Ok(app)
    } else {
        Err(format!("observedGeneration {:?}, Ready {summary}", status.observed_generation))
    }
}

/// Creates the book's VisitorsApp (`size: 1`, the book's title) named `name`.
pub async fn create_book_app(apps: &Api<VisitorsApp>, name: &str) -> VisitorsApp {
    let book = VisitorsApp::new(
        name,
        visitors_api::VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..Default::default() },
    );
    apps.create(&PostParams::default(), &book).await.expect("create the book's VisitorsApp")
}

/// Creates the book's VisitorsApp `name` and waits until it is Ready. On the test cluster's
/// node, two MariaDB data folders initialised at the same moment can collide in the host's
/// shared /tmp: apps are created one at a time across every test process ([`AppInitLock`]).
pub async fn create_ready_book_app(apps: &Api<VisitorsApp>, name: &str) -> VisitorsApp {
    let _one_at_a_time = AppInitLock::take().await;
    create_book_app(apps, name).await;
    wait_for(&format!("VisitorsApp {name} to become Ready"), || app_ready_at_generation(apps, name, 1)).await
}

/// Held while one app's database initialises: a folder created exclusively in the temporary
/// directory (atomic across processes), removed when dropped. One left by a killed test run is
/// taken over after [`AppInitLock::STALE`].
pub struct AppInitLock(PathBuf);

impl AppInitLock {
    const STALE: Duration = Duration::from_secs(300);

    pub async fn take() -> Self {
        let path = std::env::temp_dir().join("visitors-e2e-app-init.lock");
        loop {
            match std::fs::create_dir(&path) {
                Ok(()) => return AppInitLock(path),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(&path).and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
                    if age.is_some_and(|age| age > Self::STALE) {
                        let _ = std::fs::remove_dir(&path);
                        continue;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(error) => panic!("cannot create {}: {error}", path.display()),
            }
        }
    }
}

impl Drop for AppInitLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Whether the API server reports `crd` as established (its kind is served).
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    let conditions = crd.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

/// Where the test Jobs mount the CA certificate of an app's MySQL.
pub const CA_FILE: &str = "/etc/visitors/mysql-ca/ca.crt";
/// The `mariadb` client's options to connect over TLS, verifying the app's CA and the host
/// name: every app of the suite requires TLS (the default for a new app).
pub const TLS_OPTIONS: [&str; 2] = ["--ssl-ca=/etc/visitors/mysql-ca/ca.crt", "--ssl-verify-server-cert"];
/// A shell prelude that makes `mariadb` in the rest of a script connect as [`TLS_OPTIONS`] say.
pub const TLS_PRELUDE: &str =
    "mariadb() { command mariadb --ssl-ca=/etc/visitors/mysql-ca/ca.crt --ssl-verify-server-cert \"$@\"; }\n";

/// The volume (the `ca.crt` of the app's generated TLS Secret, only that) and mount of
/// [`CA_FILE`].
pub fn ca_volume(app: &str) -> (serde_json::Value, serde_json::Value) {
    (
        serde_json::json!({"name": "mysql-ca", "secret": {"secretName": format!("{app}-mysql-tls"), "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
        serde_json::json!({"name": "mysql-ca", "mountPath": "/etc/visitors/mysql-ca", "readOnly": true}),
    )
}

/// A Job that runs one SQL script with the `mariadb` client, as root, over TLS, on the
/// database of VisitorsApp `app` (its client Service and generated credentials Secret).
pub fn mariadb_job(app: &str, namespace: &str, name: &str, sql: &str) -> serde_json::Value {
    let (volume, mount) = ca_volume(app);
    let mut command = vec!["mariadb".to_string()];
    command.extend(TLS_OPTIONS.iter().map(ToString::to_string));
    command.extend([
        "-h".into(),
        format!("{app}-mysql.{namespace}.svc"),
        "-uroot".into(),
        "visitors".into(),
        "-e".into(),
        sql.into(),
    ]);
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "sql", "image": "mariadb:11",
                "command": command,
                "env": [{"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": format!("{app}-mysql-credentials"), "key": "root-password"}}}],
                "volumeMounts": [mount],
            }],
            "volumes": [volume],
        }}},
    })
}

/// A Job that runs a shell script (in the `mariadb:11` image) against the database of
/// VisitorsApp `app`: `$HOST` is its client Service and `MYSQL_PWD` root's password, so the
/// script calls `mariadb -h "$HOST" -uroot ...` (over TLS: see [`TLS_PRELUDE`]); `env` adds
/// variables.
pub fn mariadb_shell_job(
    app: &str,
    namespace: &str,
    name: &str,
    script: &str,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let mut variables = vec![
        serde_json::json!({"name": "HOST", "value": format!("{app}-mysql.{namespace}.svc")}),
        serde_json::json!({"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": format!("{app}-mysql-credentials"), "key": "root-password"}}}),
    ];
    variables.extend(env.iter().map(|(name, value)| serde_json::json!({"name": name, "value": value})));
    let (volume, mount) = ca_volume(app);
    let script = format!("{TLS_PRELUDE}{script}");
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "sql", "image": "mariadb:11", "command": ["sh", "-c", script], "env": variables,
                            "volumeMounts": [mount]}],
            "volumes": [volume],
        }}},
    })
}

/// The one-line output of `sql`, run as root on the database of VisitorsApp `app` by a Job
/// (`mariadb -N -B`), read back from its pod's termination message: how a test reads a value
/// from the server on any cluster. Fails the test if the Job fails.
pub async fn sql_value(client: &Client, namespace: &str, app: &str, name: &str, sql: &str) -> String {
    let script = r#"mariadb -h "$HOST" -uroot -N -B visitors -e "$SQL" > /dev/termination-log"#;
    let job = mariadb_shell_job(app, namespace, name, script, &[("SQL", sql)]);
    run_job(client, namespace, name, job).await;
    job_output(client, namespace, name).await
}

/// What Job `name`'s container wrote to `/dev/termination-log` (its termination message),
/// trimmed: how a test reads a value back from a Job on any cluster.
pub async fn job_output(client: &Client, namespace: &str, name: &str) -> String {
    job_output_when_ended(client, namespace, name).await.unwrap_or_else(|_| panic!("Job {name} left no output"))
}

/// A Job's termination message once it has one.
pub async fn job_output_when_ended(client: &Client, namespace: &str, name: &str) -> Result<String, String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&kube::api::ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(|e| e.to_string())?;
    let ended = listed.items.iter().find_map(|pod| {
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        statuses.iter().find_map(|c| c.state.as_ref()?.terminated.clone())
    });
    match ended {
        None => Err(format!("Job {name} has not ended")),
        Some(terminated) => Ok(output_of_ended(name, &terminated)),
    }
}

/// What an ended container wrote to its termination message. One that ended without any
/// failed before it could say what it saw: waiting longer cannot change that, so the scenario
/// fails at once, naming its exit code.
fn output_of_ended(name: &str, terminated: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> String {
    match &terminated.message {
        Some(message) => message.trim().to_string(),
        None => panic!("Job {name} ended with exit code {} and no termination message", terminated.exit_code),
    }
}

/// A Job that runs the shell `script` (busybox) with the backup claim `claim` mounted at
/// `/backup`: how a test changes a stored backup on any cluster.
pub fn storage_shell_job(name: &str, claim: &str, script: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "shell", "image": "busybox", "command": ["sh", "-c", script],
                            "volumeMounts": [{"name": "backup", "mountPath": "/backup"}]}],
            "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": claim}}],
        }}},
    })
}

/// A script for [`storage_shell_job`] that flips byte 10 of the first file below `/backup/<folder>`
/// whose path matches `pattern` (size unchanged), and writes that file's path relative to
/// `folder` to its termination message.
pub fn flip_a_byte_script(folder: &str, pattern: &str) -> String {
    format!(
        "set -eu; cd /backup/{folder}; f=$(find . -type f -path '{pattern}' | sort | head -n 1); \
         test -n \"$f\"; echo \"flipping a byte of $f\"; \
         b=$(od -An -tu1 -j 10 -N 1 \"$f\" | tr -d ' '); n=$(( (b + 1) % 256 )); \
         printf \"$(printf '\\\\%03o' \"$n\")\" | dd of=\"$f\" bs=1 seek=10 count=1 conv=notrunc; \
         echo \"${{f#./}}\" > /dev/termination-log"
    )
}

/// Creates a Job and waits for it to end; returns whether it completed.
pub async fn job_completes(client: &Client, namespace: &str, name: &str, job: serde_json::Value) -> bool {
    use k8s_openapi::api::batch::v1::Job;
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.expect("create the Job");
    wait_for(&format!("Job {name} to end"), || async {
        let job = jobs.get(name).await.map_err(|e| e.to_string())?;
        let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
        let is = |type_: &str| conditions.iter().any(|c| c.type_ == type_ && c.status == "True");
        if is("Complete") {
            return Ok(true);
        }
        if is("Failed") {
            return Ok(false);
        }
        Err("not ended yet".to_string())
    })
    .await
}

/// Creates a Job and waits for it to complete; fails the test if it fails.
pub async fn run_job(client: &Client, namespace: &str, name: &str, job: serde_json::Value) {
    assert!(job_completes(client, namespace, name, job).await, "Job {name} failed");
}

/// The Events about object `name` in `namespace`.
pub async fn events_of(client: &Client, namespace: &str, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    let listed = events.list(&kube::api::ListParams::default()).await.expect("list events");
    listed.items.into_iter().filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)).collect()
}

/// Creates a 1 GiB ReadWriteOnce claim `name` for backups.
pub async fn create_backup_claim(client: &Client, namespace: &str, name: &str) {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the backup claim");
}

/// A fresh namespace for one test with the book's VisitorsApp `app` in it, Ready.
pub async fn namespace_with_ready_app(client: &Client, prefix: &str, app: &str) -> (TestNamespace, Api<VisitorsApp>) {
    let namespace = TestNamespace::create(client, prefix).await;
    eprintln!("namespace {}", namespace.name);
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &namespace.name);
    create_ready_book_app(&apps, app).await;
    (namespace, apps)
}

/// [`namespace_with_ready_app`], plus a claim `claim` for backups and `seed_sql` run by a Job
/// against the app's database.
pub async fn ready_app_with_claim_and_rows(
    client: &Client,
    prefix: &str,
    app: &str,
    claim: &str,
    seed_sql: &str,
) -> TestNamespace {
    let (namespace, _) = namespace_with_ready_app(client, prefix, app).await;
    create_backup_claim(client, &namespace.name, claim).await;
    run_job(client, &namespace.name, "seed", mariadb_job(app, &namespace.name, "seed", seed_sql)).await;
    namespace
}

/// A resource's conditions on one line, for a test's failure message.
pub fn conditions_text(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> String {
    conditions
        .iter()
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Run `name` once it has succeeded or failed.
pub async fn backup_finished(backups: &Api<visitors_api::MySQLBackup>, name: &str) -> visitors_api::MySQLBackup {
    wait_for(&format!("backup {name} to finish"), || async {
        let backup = backups.get(name).await.map_err(|e| e.to_string())?;
        let status = backup.status.clone().unwrap_or_default();
        match status.phase {
            Some(visitors_api::backup::BackupPhase::Succeeded | visitors_api::backup::BackupPhase::Failed) => {
                Ok(backup)
            }
            phase => Err(format!("phase {phase:?}, {}", conditions_text(&status.conditions))),
        }
    })
    .await
}

/// Restore `name` once it has succeeded or failed.
pub async fn restore_finished(restores: &Api<visitors_api::MySQLRestore>, name: &str) -> visitors_api::MySQLRestore {
    wait_for(&format!("restore {name} to finish"), || async {
        let restore = restores.get(name).await.map_err(|e| e.to_string())?;
        let status = restore.status.clone().unwrap_or_default();
        match status.phase {
            Some(visitors_api::restore::RestorePhase::Succeeded | visitors_api::restore::RestorePhase::Failed) => {
                Ok(restore)
            }
            phase => Err(format!("phase {phase:?}, {}", conditions_text(&status.conditions))),
        }
    })
    .await
}

/// The tests' OTLP receiver on `listen` (where the chart points the controllers' spans). One
/// scenario at a time can hold the address: a second waits until the first lets it go.
pub async fn otlp_receiver(listen: &str) -> visitors_test_support::otlp::OtlpReceiver {
    wait_for(&format!("the OTLP address {listen} to be free"), || async {
        visitors_test_support::otlp::OtlpReceiver::start(listen).map_err(|e| e.to_string())
    })
    .await
}
