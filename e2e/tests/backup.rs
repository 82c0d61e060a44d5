//! MySQLBackup scenarios on a real cluster: the Jobs run the agent against the app's real
//! MariaDB. On-demand backups to a volume (verified by `visitors-agent verify` in a Job), two
//! runs of one app serialised by the database lock, a failure with the agent's error that its
//! schedule reports (a schedule's fire times, retention and suspend are in backup_schedule.rs).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupPhase, condition};
use visitors_api::conditions;
use visitors_e2e::backup_finished as finished;
use visitors_e2e::book_backups::{APP, CLAIM, backup_object, ready_app_with_rows};
use visitors_e2e::moto::Moto;
use visitors_e2e::{
    cluster, controller_metrics, controller_name, controller_selector, events_of, mariadb_job, metric_value,
    release_namespace, run_job, wait_for,
};

fn assert_succeeded(backup: &MySQLBackup) {
    let status = backup.status.clone().unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Succeeded), "{} failed: {:?}", backup.name_any(), status.error);
    assert!(status.size_bytes.unwrap_or(0) > 0, "{status:?}");
    assert!(status.tables.unwrap_or(0) >= 1, "{status:?}");
    assert!(status.rows.unwrap_or(0) >= 500, "{status:?}");
    let sha = status.manifest_sha256.clone().unwrap_or_default();
    assert!(sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()), "{sha}");
    assert!(status.server_version.is_some() && status.start_time.is_some() && status.completion_time.is_some());
    assert!(status.duration_seconds.is_some());
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn on_demand_backups_to_a_volume_succeed_one_at_a_time_and_verify() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);

    // Two runs of one app at once: the database lock lets one run, the other waits and says so.
    backups.create(&PostParams::default(), &backup_object("first", json!({}))).await.expect("create run first");
    backups.create(&PostParams::default(), &backup_object("second", json!({}))).await.expect("create run second");
    let waited = wait_for("one run to wait for the database lock", || async {
        for name in ["first", "second"] {
            let backup = backups.get(name).await.map_err(|e| e.to_string())?;
            let pending =
                backup.status.as_ref().and_then(|s| conditions::find(&s.conditions, condition::PENDING).cloned());
            if let Some(pending) = pending.filter(|c| c.reason == "WaitingForDatabaseLock") {
                return Ok((name, pending.message));
            }
            if backup.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Succeeded) {
                // Both may finish before a poll sees the wait; the Event still tells.
                let events = events_of(&client, &ns, name).await;
                if let Some(event) = events.iter().find(|e| e.reason.as_deref() == Some("WaitingForDatabaseLock")) {
                    return Ok((name, event.note.clone().unwrap_or_default()));
                }
            }
        }
        Err("neither run reports WaitingForDatabaseLock".to_string())
    })
    .await;
    eprintln!("{} waited: {}", waited.0, waited.1);
    assert!(waited.1.contains("MySQLBackup"), "{}", waited.1);

    for name in ["first", "second"] {
        let backup = finished(&backups, name).await;
        assert_succeeded(&backup);
        let job = backup.status.as_ref().unwrap().job_name.clone().unwrap();
        assert_eq!(job, format!("{name}-backup"));
        assert!(events_of(&client, &ns, name).await.iter().any(|e| e.reason.as_deref() == Some("Succeeded")));
    }
    let first = backups.get("first").await.unwrap().status.unwrap();
    let second = backups.get("second").await.unwrap().status.unwrap();
    let (a, b) = (first.completion_time.unwrap().0, second.start_time.unwrap().0);
    let (c, d) = (second.completion_time.unwrap().0, first.start_time.unwrap().0);
    assert!(a <= b || c <= d, "the two runs overlapped");

    // The stored backup is whole: visitors-agent verify accepts it.
    let location = format!("file:///backup/{ns}/{APP}/first");
    let verify = json!({
        "metadata": {"name": "verify"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "agent", "image": "localhost/visitors-operator:dev",
                "command": ["/usr/local/bin/visitors-agent"], "args": ["verify", "--from", location],
                "volumeMounts": [{"name": "backup", "mountPath": "/backup"}],
            }],
            "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": CLAIM}}],
        }}},
    });
    run_job(&client, &ns, "verify", verify).await;
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn wrong_credentials_fail_the_run_with_the_agents_error_and_the_schedule_says_so() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-fail").await;
    let ns = namespace.name.clone();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let patch = json!({"stringData": {"root-password": "not-the-password"}});
    secrets
        .patch("ex-mysql-credentials", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("break the Secret");

    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let schedule = backup_object("every-minute", json!({"schedule": {"cron": "* * * * *"}}));
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    let failed_run = wait_for("the schedule to report a failed run", || async {
        let schedule = backups.get("every-minute").await.map_err(|e| e.to_string())?;
        let status = schedule.status.unwrap_or_default();
        let last = conditions::find(&status.conditions, condition::LAST_BACKUP_SUCCEEDED).cloned();
        match (last, status.last_failed_run) {
            (Some(last), Some(run)) if last.status == "False" => Ok((run, last.message)),
            (last, _) => Err(format!("LastBackupSucceeded: {last:?}")),
        }
    })
    .await;
    eprintln!("{}: {}", failed_run.0, failed_run.1);
    let run = backups.get(&failed_run.0).await.unwrap();
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Failed));
    let error = status.error.unwrap_or_default();
    assert!(error.contains("wrongCredentials"), "the agent's error: {error}");
    assert!(!error.contains("not-the-password"), "no secret in status");
    assert_eq!(status.manifest_sha256, None, "a failed backup has no manifest");
    let ready = conditions::find(&status.conditions, conditions::READY).unwrap();
    assert_eq!(ready.reason, "AgentFailed");
    let events = events_of(&client, &ns, &failed_run.0).await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("AgentFailed") && e.type_.as_deref() == Some("Warning")));
    // No hot loop: the failed run is left alone (its resourceVersion stays put).
    let before = run.resource_version();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(backups.get(&failed_run.0).await.unwrap().resource_version(), before);
    namespace.delete().await;
}

/// Waits until run `name` is Running with its agent pod started, and returns the pod's name.
async fn running_pod(client: &Client, namespace: &str, backups: &Api<MySQLBackup>, name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(&format!("run {name} to be Running with its pod"), || async {
        let phase = backups.get(name).await.map_err(|e| e.to_string())?.status.and_then(|s| s.phase);
        let selector = format!("batch.kubernetes.io/job-name={name}-backup");
        let listed = pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
        let running =
            listed.items.iter().find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        match (phase, running) {
            (Some(BackupPhase::Running), Some(pod)) => Ok(pod.name_any()),
            (phase, _) => Err(format!("phase {phase:?}, {} pods", listed.items.len())),
        }
    })
    .await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn chaos_a_controller_restart_harms_no_backup_and_a_killed_pod_fails_the_run() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-chaos").await;
    let ns = namespace.name.clone();
    // About 200 MiB of rows, so that a backup runs long enough to be interrupted.
    let big = "CREATE TABLE visitors.big (id INT PRIMARY KEY, a CHAR(32), b CHAR(32), c CHAR(32)); \
               INSERT INTO visitors.big SELECT seq, MD5(seq), MD5(seq + 1), MD5(seq + 2) FROM seq_1_to_2000000;";
    run_job(&client, &ns, "big", mariadb_job(APP, &ns, "big", big)).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);

    // The backup controller's pod is deleted while a backup runs: the Job runs on, and the
    // new controller finishes the run.
    backups.create(&PostParams::default(), &backup_object("survives", json!({}))).await.expect("create run");
    running_pod(&client, &ns, &backups, "survives").await;
    let controllers: Api<Pod> = Api::namespaced(client.clone(), &release_namespace());
    let selector = controller_selector("backup");
    for pod in controllers.list(&ListParams::default().labels(&selector)).await.unwrap().items {
        controllers.delete(&pod.name_any(), &DeleteParams::default()).await.expect("delete the controller pod");
    }
    eprintln!("deleted the pods of {}", controller_name(&client, "backup").await);
    let survived = finished(&backups, "survives").await;
    assert_succeeded(&survived);
    assert!(survived.status.unwrap().rows.unwrap_or(0) >= 2_000_000);

    // The Job's pod is deleted mid-run: the run fails with a reason, and the next run succeeds.
    backups.create(&PostParams::default(), &backup_object("killed", json!({}))).await.expect("create run");
    let pod = running_pod(&client, &ns, &backups, "killed").await;
    Api::<Pod>::namespaced(client.clone(), &ns).delete(&pod, &DeleteParams::default()).await.expect("delete the pod");
    let killed = finished(&backups, "killed").await;
    let status = killed.status.clone().unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Failed), "{status:?}");
    let ready = conditions::find(&status.conditions, conditions::READY).unwrap();
    eprintln!("killed run: {} {}", ready.reason, ready.message);
    assert!(["AgentFailed", "PodDeleted", "PodLost"].contains(&ready.reason.as_str()), "{ready:?}");
    assert!(events_of(&client, &ns, "killed").await.iter().any(|e| e.type_.as_deref() == Some("Warning")));

    backups.create(&PostParams::default(), &backup_object("after", json!({}))).await.expect("create run");
    assert_succeeded(&finished(&backups, "after").await);
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn on_demand_backup_to_s3_succeeds_and_verifies() {
    let Some(moto) = Moto::start() else { return };
    assert_eq!(moto.request("PUT", "/e2e-backups").unwrap(), 200, "create the bucket");
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-s3").await;
    let ns = namespace.name.clone();
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-keys"},
        "stringData": {"AWS_ACCESS_KEY_ID": "e2e-access-key", "AWS_SECRET_ACCESS_KEY": "e2e-secret-key"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &keys)
        .await
        .expect("create the keys");
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let storage = json!({"s3": {"bucket": "e2e-backups", "prefix": "prod", "endpoint": moto.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    backups
        .create(&PostParams::default(), &backup_object("to-s3", json!({"storage": storage})))
        .await
        .expect("create run");
    let backup = finished(&backups, "to-s3").await;
    assert_succeeded(&backup);
    let location = backup.status.unwrap().location.unwrap();
    assert_eq!(location, format!("s3://e2e-backups/prod/{ns}/{APP}/to-s3"));

    let secret_env =
        |name: &str| json!({"name": name, "valueFrom": {"secretKeyRef": {"name": "s3-keys", "key": name}}});
    let verify = json!({
        "metadata": {"name": "verify"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "agent", "image": "localhost/visitors-operator:dev",
                "command": ["/usr/local/bin/visitors-agent"], "args": ["verify", "--from", location],
                "env": [secret_env("AWS_ACCESS_KEY_ID"), secret_env("AWS_SECRET_ACCESS_KEY"),
                        {"name": "AWS_ENDPOINT_URL", "value": moto.endpoint()}],
            }],
        }}},
    });
    run_job(&client, &ns, "verify", verify).await;
    namespace.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn the_backup_trace_runs_from_the_reconcile_into_the_agent_and_metrics_count_the_run() {
    use visitors_test_support::otlp::ReceivedSpan;
    let Ok(listen) = std::env::var("E2E_OTLP_LISTEN") else {
        eprintln!(
            "skipped: E2E_OTLP_LISTEN is unset; set it to where the controllers' tracing.otlpEndpoint points (e2e/run.sh --local does)"
        );
        return;
    };
    let receiver = visitors_e2e::otlp_receiver(&listen).await;
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-trace").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("traced", json!({}))).await.expect("create run");
    assert_succeeded(&finished(&backups, "traced").await);

    let is_our_reconcile = |s: &ReceivedSpan| {
        s.span.name == "reconcile"
            && s.attribute("object.name") == Some("traced")
            && s.attribute("object.namespace") == Some(ns.as_str())
    };
    let found = tokio::task::block_in_place(|| {
        receiver.wait_for(Duration::from_secs(120), |spans| {
            spans.iter().filter(|s| is_our_reconcile(s)).find_map(|reconcile| {
                spans
                    .iter()
                    .find(|c| {
                        c.service == "visitors-agent"
                            && c.trace_id() == reconcile.trace_id()
                            && c.parent_span_id() == reconcile.span_id()
                    })
                    .map(|agent| (reconcile.clone(), agent.clone()))
            })
        })
    });
    let Some((reconcile, agent)) = found else {
        let names: Vec<String> = receiver.spans().iter().map(|s| format!("{}:{}", s.service, s.span.name)).collect();
        panic!("no agent span whose parent is a reconcile of MySQLBackup traced; received: {names:?}");
    };
    assert_eq!(reconcile.service, "backup-controller");
    eprintln!("reconcile {} → agent span {} ({})", reconcile.span_id(), agent.span_id(), agent.span.name);
    if std::env::var("E2E_WRITE_TRACE").is_ok_and(|v| v == "1") {
        // Spans of the same trace may still be in a batch on their way.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let tree = visitors_test_support::otlp::render_trace(&receiver.spans(), &reconcile.trace_id());
        let path = visitors_e2e::repo_root().join("target/e2e-traces/backup-run.txt");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &tree).unwrap();
        eprintln!("the trace of run traced, written to {}:\n{tree}", path.display());
    }

    let metrics = controller_metrics(&client, "backup").await.expect("the backup controller's metrics");
    let succeeded = metric_value(&metrics, "visitors_operator_backup_runs_total", r#"result="succeeded""#);
    assert!(succeeded.unwrap_or(0.0) >= 1.0, "{metrics}");
    let labels = format!(r#"namespace="{ns}",visitors_app="{APP}""#);
    assert!(
        metric_value(&metrics, "visitors_operator_backup_last_success_timestamp_seconds", &labels).is_some(),
        "{metrics}"
    );
    namespace.delete().await;
}

/// A TCP proxy on this host to `upstream` that holds every piece of the server's answers for
/// `delay` before passing it on: an object store that answers each request slowly (a throttled
/// or far-away endpoint), so that a small backup takes minutes whatever the machine's speed.
struct SlowProxy {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    async fn start(upstream: u16, delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(Self::relay(client, upstream, delay));
            }
        });
        Self { port, task }
    }

    async fn relay(client: tokio::net::TcpStream, upstream: u16, delay: Duration) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { return };
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let requests = tokio::spawn(async move { tokio::io::copy(&mut client_read, &mut server_write).await });
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read) = server_read.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            tokio::time::sleep(delay).await;
            if client_write.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
        requests.abort();
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Secret `s3-keys` with the keys moto accepts.
async fn create_s3_keys(client: &Client, namespace: &str) {
    let keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-keys"},
        "stringData": {"AWS_ACCESS_KEY_ID": "e2e-access-key", "AWS_SECRET_ACCESS_KEY": "e2e-secret-key"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &keys)
        .await
        .expect("create the keys");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_backup_slower_than_its_deadline_fails_with_deadline_exceeded_and_frees_the_database() {
    use k8s_openapi::api::coordination::v1::Lease;
    // A database lock cannot make the run slow: the agent waits at most lock_wait_timeout
    // (10 s) per lock and fails. A storage endpoint that answers every request 15 s late can:
    // a backup makes more than ten requests, and the smallest deadline is 60 s.
    let Some(moto) = Moto::start() else { return };
    assert_eq!(moto.request("PUT", "/e2e-backups").unwrap(), 200, "create the bucket");
    let proxy = SlowProxy::start(moto.port, Duration::from_secs(15)).await;
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-deadline").await;
    let ns = namespace.name.clone();
    create_s3_keys(&client, &ns).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let storage = json!({"s3": {"bucket": "e2e-backups", "prefix": "slow", "endpoint": proxy.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    let slow = backup_object("too-slow", json!({"storage": storage, "activeDeadlineSeconds": 60}));
    backups.create(&PostParams::default(), &slow).await.expect("create run");

    let run = finished(&backups, "too-slow").await;
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Failed), "{status:?}");
    let ready = conditions::find(&status.conditions, conditions::READY).unwrap();
    eprintln!("too-slow: {} {}", ready.reason, ready.message);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "DeadlineExceeded"), "{ready:?}");
    assert!(ready.message.contains("activeDeadlineSeconds 60"), "{}", ready.message);
    assert_eq!(status.manifest_sha256, None, "a failed backup has no manifest");
    let (started, ended) = (status.start_time.unwrap().0, status.completion_time.unwrap().0);
    assert!(ended.duration_since(started).as_secs() >= 55, "it ran until its deadline: {started} .. {ended}");
    let events = events_of(&client, &ns, "too-slow").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("DeadlineExceeded") && e.type_.as_deref() == Some("Warning")),
        "{events:?}"
    );

    // The database is free again: its Lease is no longer held by the run, and the next backup
    // (to the volume) runs and succeeds.
    let lease =
        Api::<Lease>::namespaced(client.clone(), &ns).get_opt(&format!("{APP}-mysql-operations")).await.unwrap();
    let holder = lease.and_then(|l| l.spec).and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(!holder.contains("too-slow"), "the Lease is still held by the failed run: {holder}");
    backups.create(&PostParams::default(), &backup_object("next", json!({}))).await.expect("create run");
    assert_succeeded(&finished(&backups, "next").await);
    drop(proxy);
    namespace.delete().await;
}

/// Waits until MySQLBackup `name` is gone.
async fn gone(backups: &Api<MySQLBackup>, name: &str) {
    wait_for(&format!("MySQLBackup {name} to be gone"), || async {
        match backups.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(backup) => {
                let status = backup.status.unwrap_or_default();
                let deleting = conditions::find(&status.conditions, condition::DELETING)
                    .map(|c| format!("{} {}: {}", c.status, c.reason, c.message));
                Err(format!("still there, finalizers {:?}, Deleting {deleting:?}", backup.metadata.finalizers))
            }
        }
    })
    .await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn deletion_policy_delete_removes_the_stored_backup_from_the_volume_and_retain_keeps_it() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-delete").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("kept", json!({}))).await.expect("create run kept");
    assert_succeeded(&finished(&backups, "kept").await);
    let deleted = backup_object("deleted", json!({"deletionPolicy": "Delete"}));
    backups.create(&PostParams::default(), &deleted).await.expect("create run deleted");
    let run = finished(&backups, "deleted").await;
    assert_succeeded(&run);
    assert!(run.finalizers().iter().any(|f| f == "example.com/delete-stored-backup"), "{:?}", run.finalizers());
    let files = |name: &str| format!("/backup/{ns}/{APP}/{name}");
    let check = |job: &str, script: String| {
        json!({
            "metadata": {"name": job},
            "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "check", "image": "busybox", "command": ["sh", "-c", script],
                                "volumeMounts": [{"name": "backup", "mountPath": "/backup"}]}],
                "volumes": [{"name": "backup", "persistentVolumeClaim": {"claimName": CLAIM}}],
            }}},
        })
    };
    let both_stored = format!("test -f {}/manifest.json && test -f {}/manifest.json", files("kept"), files("deleted"));
    run_job(&client, &ns, "both-stored", check("both-stored", both_stored)).await;

    for name in ["kept", "deleted"] {
        backups.delete(name, &DeleteParams::default()).await.expect("delete the run");
    }
    gone(&backups, "kept").await;
    gone(&backups, "deleted").await;
    let events = events_of(&client, &ns, "deleted").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("StorageDeleted")), "{events:?}");
    let after = format!("test ! -e {} && test -f {}/manifest.json", files("deleted"), files("kept"));
    run_job(&client, &ns, "only-kept-left", check("only-kept-left", after)).await;
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn deletion_policy_delete_removes_the_stored_backup_from_s3() {
    let Some(moto) = Moto::start() else { return };
    assert_eq!(moto.request("PUT", "/e2e-backups").unwrap(), 200, "create the bucket");
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-delete-s3").await;
    let ns = namespace.name.clone();
    create_s3_keys(&client, &ns).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let storage = json!({"s3": {"bucket": "e2e-backups", "prefix": "prod", "endpoint": moto.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    for name in ["s3-kept", "s3-deleted"] {
        let policy = if name == "s3-deleted" { "Delete" } else { "Retain" };
        let run = backup_object(name, json!({"storage": storage, "deletionPolicy": policy}));
        backups.create(&PostParams::default(), &run).await.expect("create run");
        assert_succeeded(&finished(&backups, name).await);
    }
    let prefix = |name: &str| format!("prod/{ns}/{APP}/{name}/");
    assert!(moto.keys("e2e-backups", &prefix("s3-deleted")).iter().any(|k| k.ends_with("manifest.json")));
    let kept_keys = moto.keys("e2e-backups", &prefix("s3-kept"));

    backups.delete("s3-deleted", &DeleteParams::default()).await.expect("delete the run");
    gone(&backups, "s3-deleted").await;
    assert_eq!(moto.keys("e2e-backups", &prefix("s3-deleted")), Vec::<String>::new(), "every object is gone");
    assert_eq!(moto.keys("e2e-backups", &prefix("s3-kept")), kept_keys, "the other run's objects stay");
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_delete_the_storage_refuses_keeps_the_run_until_the_policy_is_retain() {
    let Some(moto) = Moto::start() else { return };
    assert_eq!(moto.request("PUT", "/e2e-backups").unwrap(), 200, "create the bucket");
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-backup-delete-refused").await;
    let ns = namespace.name.clone();
    create_s3_keys(&client, &ns).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let storage = json!({"s3": {"bucket": "e2e-backups", "prefix": "prod", "endpoint": moto.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    let run = backup_object("refused", json!({"storage": storage, "deletionPolicy": "Delete"}));
    backups.create(&PostParams::default(), &run).await.expect("create run");
    assert_succeeded(&finished(&backups, "refused").await);

    // From now on the store rejects the keys (moto checks signatures against keys it knows).
    moto.turn_on_authentication();
    backups.delete("refused", &DeleteParams::default()).await.expect("delete the run");
    let refused = wait_for("the refused delete to be reported", || async {
        let run = backups.get("refused").await.map_err(|e| e.to_string())?;
        let status = run.status.clone().unwrap_or_default();
        match conditions::find(&status.conditions, condition::DELETING) {
            Some(c) if c.status == "False" && c.reason == "StorageDeleteFailed" => Ok((run.clone(), c.message.clone())),
            other => Err(format!("Deleting {other:?}")),
        }
    })
    .await;
    eprintln!("refused: {}", refused.1);
    assert!(refused.1.contains("storageCredentialsRejected"), "the agent's error: {}", refused.1);
    assert!(refused.0.finalizers().iter().any(|f| f == "example.com/delete-stored-backup"), "the run stays");
    let events = events_of(&client, &ns, "refused").await;
    let warned = events
        .iter()
        .any(|e| e.reason.as_deref() == Some("StorageDeleteFailed") && e.type_.as_deref() == Some("Warning"));
    assert!(warned, "{events:?}");

    let retain = json!({"spec": {"deletionPolicy": "Retain"}});
    backups.patch("refused", &PatchParams::default(), &Patch::Merge(&retain)).await.expect("switch to Retain");
    gone(&backups, "refused").await;
    let events = events_of(&client, &ns, "refused").await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("StorageRetained")), "{events:?}");
    namespace.delete().await;
}
