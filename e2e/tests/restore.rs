//! MySQLRestore scenarios on a real cluster: the Jobs run the agent against the app's real
//! MariaDB. A restore from a backup run brings back exactly the backed-up rows (a Job compares
//! a checksum of the table with the one taken before the backup) while the VisitorsApp
//! controller keeps the backend at 0 replicas; a restore naming a failed run is refused and
//! touches nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use visitors_api::backup::BackupPhase;
use visitors_api::conditions;
use visitors_api::restore::{MySQLRestoreStatus, RestorePhase};
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::{
    TLS_PRELUDE, TestNamespace, app_ready_at_generation, cluster, controller_name, controller_selector,
    create_ready_book_app, events_of, flip_a_byte_script, job_completes, mariadb_job, ready_app_with_claim_and_rows,
    release_namespace, run_job, storage_shell_job, wait_for,
};
use visitors_e2e::{backup_finished, conditions_text, restore_finished};

const APP: &str = "ex";
const CLAIM: &str = "backups";
const BACKEND: &str = "ex-backend";
/// The table's content as one value: its row count and an order-independent checksum.
const FINGERPRINT: &str = "CONCAT(COUNT(*), ':', BIT_XOR(CRC32(CONCAT_WS('|', id, note))))";

/// A namespace with the book's app Ready, 500 rows in `visitors.e2e_rows`, their fingerprint
/// kept in `e2e_check.expected`, and a claim for backups.
async fn ready_app_with_rows(client: &Client, prefix: &str) -> TestNamespace {
    let sql = format!(
        "CREATE TABLE visitors.e2e_rows (id INT PRIMARY KEY, note VARCHAR(64)); \
         INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('row ', seq) FROM seq_1_to_500; \
         CREATE DATABASE e2e_check; \
         CREATE TABLE e2e_check.expected AS SELECT {FINGERPRINT} AS v FROM visitors.e2e_rows;"
    );
    ready_app_with_claim_and_rows(client, prefix, APP, CLAIM, &sql).await
}

/// SQL that fails (so does its Job) unless the table holds exactly the rows fingerprinted
/// at seeding.
fn rows_as_seeded() -> String {
    format!(
        "SELECT IF((SELECT {FINGERPRINT} FROM visitors.e2e_rows) = (SELECT v FROM e2e_check.expected), \
         'match', (SELECT 1 UNION SELECT 2)) AS rows_as_seeded"
    )
}

fn backup_object(name: &str) -> MySQLBackup {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": name},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}}},
    }))
    .unwrap()
}

fn restore_object(name: &str, backup: &str) -> MySQLRestore {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": name},
        "spec": {"source": {"backup": backup}, "target": {"visitorsApp": APP}},
    }))
    .unwrap()
}

fn assert_restore_succeeded(status: &MySQLRestoreStatus) {
    assert_eq!(
        status.phase,
        Some(RestorePhase::Succeeded),
        "{:?} {}",
        status.error,
        conditions_text(&status.conditions)
    );
}

/// The phases restore `name` goes through, each once in the order a watch sees them, until it
/// ends.
async fn phases_seen(restores: Api<MySQLRestore>, name: &str) -> Vec<RestorePhase> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(restores, config).applied_objects());
    let mut phases: Vec<RestorePhase> = Vec::new();
    while let Some(event) = events.next().await {
        let Some(phase) = event.ok().and_then(|r| r.status.and_then(|s| s.phase)) else { continue };
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
        if matches!(phase, RestorePhase::Succeeded | RestorePhase::Failed) {
            break;
        }
    }
    phases
}

/// The backend's desired and existing pods.
async fn backend_replicas(deployments: &Api<Deployment>) -> Option<(i32, i32)> {
    let deployment = deployments.get(BACKEND).await.ok()?;
    let wanted = deployment.spec.and_then(|s| s.replicas).unwrap_or(1);
    let pods = deployment.status.and_then(|s| s.replicas).unwrap_or(0);
    Some((wanted, pods))
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restore_from_a_run_brings_back_exactly_the_backed_up_rows_with_the_backend_stopped() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("before")).await.expect("create the backup");
    let backup = backup_finished(&backups, "before").await;
    let backup_status = backup.status.clone().unwrap();
    assert_eq!(backup_status.phase, Some(BackupPhase::Succeeded), "{:?}", backup_status.error);

    // Rows written after the backup, and one changed: the restore must undo both.
    let more = "INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('later ', seq) FROM seq_501_to_800; \
                UPDATE visitors.e2e_rows SET note = 'changed' WHERE id = 7;";
    run_job(&client, &ns, "more-rows", mariadb_job(APP, &ns, "more-rows", more)).await;
    assert!(
        !job_completes(&client, &ns, "differs", mariadb_job(APP, &ns, "differs", &rows_as_seeded())).await,
        "the check must see the rows written after the backup"
    );

    // Watch the backend while the restore Job runs.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    let seen_during_job: Arc<Mutex<Vec<(i32, i32)>>> = Arc::default();
    let watcher = {
        let (seen, deployments, restores) = (seen_during_job.clone(), deployments.clone(), restores.clone());
        tokio::spawn(async move {
            loop {
                let phase = restores.get("r1").await.ok().and_then(|r| r.status.and_then(|s| s.phase));
                match phase {
                    Some(RestorePhase::Succeeded | RestorePhase::Failed) => break,
                    Some(RestorePhase::Running | RestorePhase::Verifying) => {
                        if let Some(replicas) = backend_replicas(&deployments).await {
                            seen.lock().unwrap().push(replicas);
                        }
                    }
                    _ => {}
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let phases = tokio::spawn(phases_seen(restores.clone(), "r1"));
    restores.create(&PostParams::default(), &restore_object("r1", "before")).await.expect("create the restore");
    let restore = restore_finished(&restores, "r1").await;
    watcher.await.unwrap();
    let phases = phases.await.unwrap();
    eprintln!("restore phases seen by a watch: {phases:?}");
    let order: Vec<RestorePhase> = phases
        .iter()
        .copied()
        .filter(|p| matches!(p, RestorePhase::Running | RestorePhase::Verifying | RestorePhase::Succeeded))
        .collect();
    assert_eq!(
        order,
        [RestorePhase::Running, RestorePhase::Verifying, RestorePhase::Succeeded],
        "loading, then checking and swapping, then done: {phases:?}"
    );
    let status = restore.status.clone().unwrap();
    eprintln!("restore status: {status:?}");
    assert_restore_succeeded(&status);
    assert_eq!(status.backup_name.as_deref(), Some("before"));
    assert_eq!(status.manifest_sha256, backup_status.manifest_sha256);
    assert_eq!(status.backup_completion_time, backup_status.completion_time);
    assert!(status.restored_from.as_deref().unwrap_or_default().contains(&format!("{ns}/{APP}/before")), "{status:?}");
    assert!(status.tables.unwrap_or(0) >= 1 && status.rows.unwrap_or(0) >= 500, "{status:?}");
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let seen = seen_during_job.lock().unwrap().clone();
    eprintln!("backend (wanted, pods) while the restore ran: {seen:?}");
    assert!(!seen.is_empty(), "the restore was never seen Running");
    assert!(
        seen.iter().all(|&(wanted, pods)| wanted == 0 && pods == 0),
        "the backend ran during the restore: {seen:?}"
    );
    let reasons: Vec<String> = events_of(&client, &ns, "r1").await.into_iter().filter_map(|e| e.reason).collect();
    assert!(reasons.iter().any(|r| r == "Started") && reasons.iter().any(|r| r == "Succeeded"), "{reasons:?}");

    // Exactly the backed-up rows, and the backend back at spec.size.
    run_job(&client, &ns, "same-rows", mariadb_job(APP, &ns, "same-rows", &rows_as_seeded())).await;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &ns);
    wait_for("the app to be Ready again", || app_ready_at_generation(&apps, APP, 1)).await;
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(1), "back at spec.size");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert!(leases.get_opt("ex-mysql-operations").await.unwrap().is_none(), "the database lock is released");
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restore_naming_a_failed_run_is_refused_and_touches_nothing() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore-refused").await;
    let ns = namespace.name.clone();
    // A failed run: the backup's agent cannot log in.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let password = secrets.get("ex-mysql-credentials").await.unwrap().data.unwrap()["root-password"].clone();
    let wrong = json!({"stringData": {"root-password": "not-the-password"}});
    secrets.patch("ex-mysql-credentials", &PatchParams::default(), &Patch::Merge(&wrong)).await.unwrap();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("broken")).await.expect("create the backup");
    let backup = backup_finished(&backups, "broken").await;
    assert_eq!(backup.status.unwrap().phase, Some(BackupPhase::Failed));
    let right = json!({"data": {"root-password": password}});
    secrets.patch("ex-mysql-credentials", &PatchParams::default(), &Patch::Merge(&right)).await.unwrap();

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    restores.create(&PostParams::default(), &restore_object("from-broken", "broken")).await.expect("create");
    let restore = restore_finished(&restores, "from-broken").await;
    let status = restore.status.clone().unwrap();
    assert_eq!(status.phase, Some(RestorePhase::Failed));
    let ready = conditions::find(&status.conditions, conditions::READY).unwrap();
    assert_eq!(ready.reason, "BackupFailed", "{}", ready.message);
    assert!(
        ready.message.contains("MySQLBackup broken") && ready.message.contains("never restored"),
        "{}",
        ready.message
    );
    assert!(!status.error.unwrap_or_default().contains("not-the-password"), "no secret in status");
    assert_eq!(status.job_name, None, "no restore Job was started");
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    assert!(jobs.get_opt("from-broken-restore").await.unwrap().is_none());
    let events = events_of(&client, &ns, "from-broken").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("BackupFailed") && e.type_.as_deref() == Some("Warning"))
    );

    // Nothing touched: the rows are as seeded, the backend kept running, the lock is free.
    run_job(&client, &ns, "same-rows", mariadb_job(APP, &ns, "same-rows", &rows_as_seeded())).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(1));
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    assert!(leases.get_opt("ex-mysql-operations").await.unwrap().is_none());
    // A record: it is left alone (no hot loop).
    let before = restore.resource_version();
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(restores.get("from-broken").await.unwrap().resource_version(), before);
    namespace.delete().await;
}

/// A backup `before` of the seeded rows, then 300 more rows and a changed one, fingerprinted
/// in `e2e_check.current` (a database the backup does not hold).
async fn backed_up_then_changed(client: &Client, ns: &str) -> MySQLBackup {
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), ns);
    backups.create(&PostParams::default(), &backup_object("before")).await.expect("create the backup");
    let backup = backup_finished(&backups, "before").await;
    assert_eq!(backup.status.as_ref().unwrap().phase, Some(BackupPhase::Succeeded));
    let more = format!(
        "INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('later ', seq) FROM seq_501_to_800; \
         UPDATE visitors.e2e_rows SET note = 'changed' WHERE id = 7; \
         CREATE DATABASE e2e_now; CREATE TABLE e2e_now.current AS SELECT {FINGERPRINT} AS v FROM visitors.e2e_rows;"
    );
    run_job(client, ns, "more-rows", mariadb_job(APP, ns, "more-rows", &more)).await;
    backup
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restore_from_an_explicit_location_fills_a_second_app() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore-location").await;
    let ns = namespace.name.clone();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("before")).await.expect("create the backup");
    assert_eq!(backup_finished(&backups, "before").await.status.unwrap().phase, Some(BackupPhase::Succeeded));
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &ns);
    create_ready_book_app(&apps, "other").await;

    let restore: MySQLRestore = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": "into-other"},
        "spec": {"source": {"storage": {"persistentVolumeClaim": {"claimName": CLAIM}}, "path": format!("{ns}/{APP}/before")},
                 "target": {"visitorsApp": "other"}},
    }))
    .unwrap();
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    restores.create(&PostParams::default(), &restore).await.expect("create the restore");
    let status = restore_finished(&restores, "into-other").await.status.unwrap();
    assert_restore_succeeded(&status);
    assert_eq!(status.backup_name, None);
    assert_eq!(status.restored_from, Some(format!("pvc://{CLAIM}/{ns}/{APP}/before")));
    assert!(status.rows.unwrap_or(0) >= 500, "{status:?}");
    run_job(&client, &ns, "other-rows", mariadb_job("other", &ns, "other-rows", &rows_as_seeded())).await;
    wait_for("the second app to be Ready again", || app_ready_at_generation(&apps, "other", 1)).await;
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_backup_with_one_flipped_byte_is_refused_and_the_database_is_unchanged() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore-corrupt").await;
    let ns = namespace.name.clone();
    backed_up_then_changed(&client, &ns).await;
    // One byte of one chunk of the stored backup flipped, size unchanged.
    let flip = flip_a_byte_script(&format!("{ns}/{APP}/before"), "*/data/e2e_rows/*");
    let job = storage_shell_job("flip", CLAIM, &flip);
    run_job(&client, &ns, "flip", job).await;

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    restores.create(&PostParams::default(), &restore_object("r1", "before")).await.expect("create the restore");
    let status = restore_finished(&restores, "r1").await.status.unwrap();
    eprintln!("restore error: {:?}", status.error);
    assert_eq!(status.phase, Some(RestorePhase::Failed));
    let error = status.error.unwrap_or_default();
    assert!(error.contains("checksumMismatch") || error.contains("SHA-256"), "the agent names the bad file: {error}");
    assert_eq!(conditions::find(&status.conditions, conditions::READY).unwrap().reason, "AgentFailed");

    // The database is exactly as before the restore, and the backend back at its size.
    let unchanged = format!(
        "SELECT IF((SELECT {FINGERPRINT} FROM visitors.e2e_rows) = (SELECT v FROM e2e_now.current), \
         'unchanged', (SELECT 1 UNION SELECT 2)) AS unchanged"
    );
    run_job(&client, &ns, "unchanged", mariadb_job(APP, &ns, "unchanged", &unchanged)).await;
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &ns);
    wait_for("the app to be Ready again", || app_ready_at_generation(&apps, APP, 1)).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(1));
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restore_waits_for_the_database_lock_then_runs() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore-lock").await;
    let ns = namespace.name.clone();
    backed_up_then_changed(&client, &ns).await;
    // A backup that holds the database: an unfinished run (it waits for a claim that does not
    // exist) named in the Lease, as the backup controller writes it.
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let mut holder = backup_object("holder");
    holder.spec.storage.persistent_volume_claim.as_mut().unwrap().claim_name = "no-such-claim".into();
    let holder = backups.create(&PostParams::default(), &holder).await.expect("create the holding run");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "ex-mysql-operations"},
        "spec": {"holderIdentity": format!("MySQLBackup/holder/{}", holder.uid().unwrap())},
    }))
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    leases.create(&PostParams::default(), &lease).await.expect("create the Lease");

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    restores.create(&PostParams::default(), &restore_object("r1", "before")).await.expect("create the restore");
    let message = wait_for("the restore to wait for the lock", || async {
        let restore = restores.get("r1").await.map_err(|e| e.to_string())?;
        let status = restore.status.unwrap_or_default();
        let pending = conditions::find(&status.conditions, "Pending").cloned();
        match pending {
            Some(c) if c.status == "True" && c.reason == "WaitingForDatabaseLock" => Ok(c.message),
            _ => Err(format!("phase {:?}, {}", status.phase, conditions_text(&status.conditions))),
        }
    })
    .await;
    assert!(message.contains("MySQLBackup holder"), "{message}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(1), "a waiting restore stops nothing");

    // The holder goes away: the restore takes the lock over and runs.
    backups.delete("holder", &Default::default()).await.expect("delete the holding run");
    let status = restore_finished(&restores, "r1").await.status.unwrap();
    assert_restore_succeeded(&status);
    run_job(&client, &ns, "same-rows", mariadb_job(APP, &ns, "same-rows", &rows_as_seeded())).await;
    namespace.delete().await;
}

/// Both tables of the `visitors` database as one value (counts and order-independent checksums),
/// so that a restore that changed one table and not the other cannot pass for whole.
const DATABASE_FINGERPRINT: &str = "CONCAT(\
     (SELECT CONCAT(COUNT(*), ':', BIT_XOR(CRC32(CONCAT_WS('|', id, note)))) FROM visitors.e2e_rows), '/', \
     (SELECT CONCAT(COUNT(*), ':', BIT_XOR(CRC32(CONCAT_WS('|', id, a, b, c)))) FROM visitors.big))";

/// SQL that fails (so does its Job) unless the `visitors` database is exactly in one of the
/// states fingerprinted in `tables`.
fn database_is_one_of(tables: &[&str]) -> String {
    let states = tables.iter().map(|t| format!("(SELECT v FROM {t})")).collect::<Vec<_>>().join(", ");
    format!("SELECT IF({DATABASE_FINGERPRINT} IN ({states}), 'whole', (SELECT 1 UNION SELECT 2)) AS whole")
}

/// SQL that fails unless no staging or replaced schema of a restore is left on the server.
const NO_RESTORE_SCHEMA_LEFT: &str = "SELECT IF((SELECT COUNT(*) FROM information_schema.SCHEMATA \
     WHERE SCHEMA_NAME LIKE 'visitors\\_restore\\_%' OR SCHEMA_NAME LIKE 'visitors\\_replaced\\_%') = 0, \
     'clean', (SELECT 1 UNION SELECT 2)) AS clean";

/// A namespace whose app's database holds 500 rows in `e2e_rows` and 2,000,000 (about 200 MiB)
/// in `big`, so that a restore Job runs long enough to be interrupted; backed up as run
/// `before` (fingerprint in `e2e_check.expected_db`), then both tables changed (fingerprint in
/// `e2e_now.current_db`, a database the backup does not hold).
async fn big_database_backed_up_then_changed(client: &Client, prefix: &str) -> TestNamespace {
    let namespace = ready_app_with_rows(client, prefix).await;
    let ns = namespace.name.clone();
    let big = format!(
        "CREATE TABLE visitors.big (id INT PRIMARY KEY, a CHAR(32), b CHAR(32), c CHAR(32)); \
         INSERT INTO visitors.big SELECT seq, MD5(seq), MD5(seq + 1), MD5(seq + 2) FROM seq_1_to_2000000; \
         CREATE TABLE e2e_check.expected_db AS SELECT {DATABASE_FINGERPRINT} AS v;"
    );
    run_job(client, &ns, "big", mariadb_job(APP, &ns, "big", &big)).await;
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    backups.create(&PostParams::default(), &backup_object("before")).await.expect("create the backup");
    let backup = backup_finished(&backups, "before").await;
    let status = backup.status.unwrap();
    assert_eq!(status.phase, Some(BackupPhase::Succeeded), "{:?}", status.error);
    let change = format!(
        "INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('later ', seq) FROM seq_501_to_800; \
         UPDATE visitors.big SET a = 'changed' WHERE id <= 1000; DELETE FROM visitors.big WHERE id > 1999000; \
         CREATE DATABASE e2e_now; CREATE TABLE e2e_now.current_db AS SELECT {DATABASE_FINGERPRINT} AS v;"
    );
    run_job(client, &ns, "change", mariadb_job(APP, &ns, "change", &change)).await;
    namespace
}

/// Whether a restore Job's pod runs one of its agent steps: the staging init container (the
/// pod is still `Pending` then) or the agent container.
fn runs_a_step(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    let running =
        |c: &k8s_openapi::api::core::v1::ContainerStatus| c.state.as_ref().is_some_and(|s| s.running.is_some());
    status.phase.as_deref() == Some("Running") || status.init_container_statuses.iter().flatten().any(running)
}

/// Waits until restore `name` is Running with its agent pod started, and returns the pod's name.
async fn restore_pod_running(client: &Client, namespace: &str, name: &str) -> String {
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(&format!("restore {name} to be Running with its pod"), || async {
        let phase = restores.get(name).await.map_err(|e| e.to_string())?.status.and_then(|s| s.phase);
        if let Some(ended @ (RestorePhase::Succeeded | RestorePhase::Failed)) = phase {
            panic!("restore {name} ended ({ended:?}) before the test could interrupt its Job");
        }
        let selector = format!("batch.kubernetes.io/job-name={name}-restore");
        let listed = pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
        let running = listed.items.iter().find(|p| runs_a_step(p));
        match (phase, running) {
            (Some(RestorePhase::Running | RestorePhase::Verifying), Some(pod)) => Ok(pod.name_any()),
            (phase, _) => Err(format!("phase {phase:?}, {} pods", listed.items.len())),
        }
    })
    .await
}

/// Waits (in a Job, up to 10 minutes) until the agent has created its staging schema on the
/// app's server: the restore is past its checks and loading.
async fn staging_schema_appears(client: &Client, ns: &str, job: &str) {
    let query = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'visitors\\_restore\\_%'";
    let script = format!(
        "for i in $(seq 1 600); do \
           n=$(mariadb -h {APP}-mysql.{ns}.svc -uroot -N -B -e \"{query}\") || exit 1; \
           if [ \"$n\" != 0 ]; then echo \"staging schema seen after $i s\"; exit 0; fi; sleep 1; \
         done; echo 'no staging schema in 600 s'; exit 1"
    );
    let mut spec = mariadb_job(APP, ns, job, "");
    spec["spec"]["template"]["spec"]["containers"][0]["command"] =
        json!(["sh", "-c", format!("{TLS_PRELUDE}{script}")]);
    run_job(client, ns, job, spec).await;
}

/// Waits until no pod of Job `job` is left (its agent process has ended).
async fn job_pods_gone(client: &Client, ns: &str, job: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("batch.kubernetes.io/job-name={job}");
    wait_for(&format!("the pods of Job {job} to be gone"), || async {
        let listed = pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
        if listed.items.is_empty() { Ok(()) } else { Err(format!("{} pods left", listed.items.len())) }
    })
    .await;
}

/// The app is Ready at its size and its status names no restore any more.
async fn backend_back_and_not_quiesced(client: &Client, ns: &str) {
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), ns);
    let app = wait_for("the backend to come back", || app_ready_at_generation(&apps, APP, 1)).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    assert_eq!(backend_replicas(&deployments).await, Some((1, 1)), "the backend is back at spec.size");
    let conditions = app.status.unwrap_or_default().conditions;
    assert!(!conditions.iter().any(|c| c.reason == "Quiesced"), "nothing stays quiesced: {conditions:?}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    assert!(leases.get_opt("ex-mysql-operations").await.unwrap().is_none(), "the database lock is released");
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn chaos_a_restore_deleted_during_its_job_changes_all_or_nothing_and_a_controller_restart_harms_none() {
    let client = cluster().await;
    let namespace = big_database_backed_up_then_changed(&client, "e2e-restore-chaos").await;
    let ns = namespace.name.clone();
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);

    // The restore is deleted while its agent loads the staging schema: the Job is stopped, the
    // backend comes back, the lock is freed, and the database is as before or as backed up.
    restores.create(&PostParams::default(), &restore_object("deleted", "before")).await.expect("create the restore");
    restore_pod_running(&client, &ns, "deleted").await;
    staging_schema_appears(&client, &ns, "staging-seen").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(0), "stopped while the Job runs");
    restores.delete("deleted", &DeleteParams::default()).await.expect("delete the restore");
    eprintln!("deleted restore `deleted` during its load");
    wait_for("the restore to be gone", || async {
        match restores.get_opt("deleted").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(r) => Err(format!("still there, finalizers {:?}", r.finalizers())),
        }
    })
    .await;
    wait_for("the restore Job to be gone", || async {
        match jobs.get_opt("deleted-restore").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    job_pods_gone(&client, &ns, "deleted-restore").await;
    backend_back_and_not_quiesced(&client, &ns).await;
    let whole = database_is_one_of(&["e2e_now.current_db", "e2e_check.expected_db"]);
    run_job(&client, &ns, "whole", mariadb_job(APP, &ns, "whole", &whole)).await;
    let unchanged = database_is_one_of(&["e2e_now.current_db"]);
    let left_unchanged = job_completes(&client, &ns, "unchanged", mariadb_job(APP, &ns, "unchanged", &unchanged)).await;
    eprintln!("after the deleted restore the database is {}", if left_unchanged { "unchanged" } else { "restored" });

    // The restore controller's pod is deleted while the next restore's Job runs: the Job runs
    // on, the new controller finishes the restore, which cleaned up what the deleted one left.
    restores.create(&PostParams::default(), &restore_object("survives", "before")).await.expect("create the restore");
    restore_pod_running(&client, &ns, "survives").await;
    let controllers: Api<Pod> = Api::namespaced(client.clone(), &release_namespace());
    let selector = controller_selector("restore");
    let controller_pods = controllers.list(&ListParams::default().labels(&selector)).await.unwrap().items;
    assert!(!controller_pods.is_empty(), "no pod of {}", controller_name(&client, "restore").await);
    for pod in controller_pods {
        controllers.delete(&pod.name_any(), &DeleteParams::default()).await.expect("delete the controller pod");
    }
    eprintln!("deleted the pods of {}", controller_name(&client, "restore").await);
    let status = restore_finished(&restores, "survives").await.status.unwrap();
    assert_restore_succeeded(&status);
    assert!(status.rows.unwrap_or(0) >= 2_000_500, "{status:?}");
    let as_backed_up = database_is_one_of(&["e2e_check.expected_db"]);
    run_job(&client, &ns, "as-backed-up", mariadb_job(APP, &ns, "as-backed-up", &as_backed_up)).await;
    run_job(&client, &ns, "clean", mariadb_job(APP, &ns, "clean", NO_RESTORE_SCHEMA_LEFT)).await;
    backend_back_and_not_quiesced(&client, &ns).await;
    namespace.delete().await;
}

/// Waits until a run of schedule `schedule` is Running with its agent pod started; returns the
/// run's name.
async fn scheduled_run_running(client: &Client, ns: &str, schedule: &str) -> String {
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let runs = ListParams::default().labels(&format!("example.com/backup-schedule={schedule}"));
    wait_for(&format!("a run of schedule {schedule} to be Running with its pod"), || async {
        let listed = backups.list(&runs).await.map_err(|e| e.to_string())?;
        let mut seen = Vec::new();
        for run in listed.items {
            let phase = run.status.as_ref().and_then(|s| s.phase);
            seen.push(format!("{} {phase:?}", run.name_any()));
            if phase != Some(BackupPhase::Running) {
                continue;
            }
            let selector = format!("batch.kubernetes.io/job-name={}-backup", run.name_any());
            let pods = pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
            if pods.items.iter().any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")) {
                return Ok(run.name_any());
            }
        }
        Err(format!("runs {seen:?}"))
    })
    .await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_restore_created_while_a_scheduled_backup_runs_waits_for_it_then_runs_and_the_backup_succeeds() {
    let client = cluster().await;
    let namespace = ready_app_with_rows(&client, "e2e-restore-schedule").await;
    let ns = namespace.name.clone();
    backed_up_then_changed(&client, &ns).await;
    // About 200 MiB more, so that a backup of the app runs long enough to be caught running.
    let big = "CREATE TABLE visitors.big (id INT PRIMARY KEY, a CHAR(32), b CHAR(32), c CHAR(32)); \
               INSERT INTO visitors.big SELECT seq, MD5(seq), MD5(seq + 1), MD5(seq + 2) FROM seq_1_to_2000000;";
    run_job(&client, &ns, "big", mariadb_job(APP, &ns, "big", big)).await;

    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let schedule: MySQLBackup = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "minutely"},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
                 "schedule": {"cron": "* * * * *"}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    let run = scheduled_run_running(&client, &ns, "minutely").await;
    eprintln!("scheduled run {run} is running");

    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    restores.create(&PostParams::default(), &restore_object("r1", "before")).await.expect("create the restore");
    // No further run competes with the restore for the lock; the running one goes on.
    let suspend = json!({"spec": {"schedule": {"suspend": true}}});
    backups.patch("minutely", &PatchParams::default(), &Patch::Merge(&suspend)).await.expect("suspend the schedule");
    let message = wait_for("the restore to wait for the backup's lock", || async {
        let status = restores.get("r1").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        if let Some(phase @ (RestorePhase::Running | RestorePhase::Succeeded | RestorePhase::Failed)) = status.phase {
            panic!("the restore went on to {phase:?} while backup run {run} held the database");
        }
        match conditions::find(&status.conditions, "Pending") {
            Some(c) if c.status == "True" && c.reason == "WaitingForDatabaseLock" => Ok(c.message.clone()),
            _ => Err(format!("phase {:?}, {}", status.phase, conditions_text(&status.conditions))),
        }
    })
    .await;
    eprintln!("the restore waits: {message}");
    assert!(message.contains(&format!("MySQLBackup {run}")), "names the backup run: {message}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(backend_replicas(&deployments).await.map(|r| r.0), Some(1), "a waiting restore stops nothing");

    let restore = restore_finished(&restores, "r1").await.status.unwrap();
    assert_eq!(
        restore.phase,
        Some(RestorePhase::Succeeded),
        "{:?} {}",
        restore.error,
        conditions_text(&restore.conditions)
    );
    let backup = backup_finished(&backups, &run).await.status.unwrap();
    assert_eq!(backup.phase, Some(BackupPhase::Succeeded), "the backup is not disturbed: {:?}", backup.error);
    assert!(backup.rows.unwrap_or(0) >= 2_000_000, "{backup:?}");
    let (backup_end, restore_start) = (backup.completion_time.unwrap(), restore.start_time.unwrap());
    assert!(backup_end.0 <= restore_start.0, "the restore ran after the backup: {backup_end:?} > {restore_start:?}");
    run_job(&client, &ns, "same-rows", mariadb_job(APP, &ns, "same-rows", &rows_as_seeded())).await;
    backend_back_and_not_quiesced(&client, &ns).await;
    namespace.delete().await;
}
