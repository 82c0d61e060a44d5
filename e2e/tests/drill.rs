//! Restore drills on a real cluster: a successful run restored by the agent into a throwaway
//! MySQL pod (a real mariadbd on the test cluster) and compared with what was dumped. The
//! scenarios here run side by side (e2e/run.sh), each in its own namespace:
//!
//! 1. and 2. a schedule drills its run after it succeeds: the evidence in its status, nothing
//!    left behind; then one byte of a stored chunk flipped: the next drill fails naming the
//!    chunk, the alert's metric moves, and a restore from the run is refused untouched;
//! 3. a chunk rewritten with matching SHA-256s (a dump bug): the drill fails on the content
//!    digest, naming the table;
//! 4. retention with `keepSuccessful: 1` keeps the older verified run while the newest run
//!    fails its drill;
//! 5. the drill's database killed and the controller restarted mid-drill: the drill ends
//!    Failed, nothing is left behind, and the next drill passes.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use visitors_api::backup::{BackupPhase, condition};
use visitors_api::conditions;
use visitors_api::drill::{DRILL_REQUESTED_AT, DrillPhase, DrillStatus};
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLBackup, MySQLRestore};
use visitors_e2e::{
    TestNamespace, cluster, controller_metrics, controller_selector, events_of, flip_a_byte_script, job_output,
    mariadb_job, metric_value, ready_app_with_claim_and_rows, release_namespace, run_job, sql_value, storage_shell_job,
    wait_for,
};

const APP: &str = "ex";
const CLAIM: &str = "backups";
const SCHEDULE: &str = "nightly";
/// Label on a drill's objects naming the run they drill.
const DRILL_LABEL: &str = "example.com/drill-of";
const SEED: &str = "CREATE TABLE IF NOT EXISTS visitors.e2e_rows (id INT PRIMARY KEY, note VARCHAR(40)); \
                    INSERT INTO visitors.e2e_rows SELECT seq, CONCAT('row ', seq) FROM seq_1_to_2000;";
/// The table's content as one value (count and order-independent checksum).
const FINGERPRINT: &str =
    "SELECT CONCAT(COUNT(*), ':', BIT_XOR(CRC32(CONCAT_WS('|', id, note)))) FROM visitors.e2e_rows";

async fn app_with_rows(client: &Client, prefix: &str) -> (TestNamespace, Api<MySQLBackup>) {
    let namespace = ready_app_with_claim_and_rows(client, prefix, APP, CLAIM, SEED).await;
    let backups = Api::namespaced(client.clone(), &namespace.name);
    (namespace, backups)
}

fn backup(name: &str, extra: serde_json::Value) -> MySQLBackup {
    let mut spec = json!({"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}}});
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": name},
                                  "spec": spec}))
    .unwrap()
}

/// A schedule every minute with `extra` in its spec (a `schedule` there replaces the whole
/// default one); returns its first successful run, once the schedule is suspended (no more
/// runs).
async fn first_run_of_schedule(backups: &Api<MySQLBackup>, extra: serde_json::Value) -> String {
    let mut spec = json!({"schedule": {"cron": "* * * * *"}});
    spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    backups.create(&PostParams::default(), &backup(SCHEDULE, spec)).await.expect("create the schedule");
    let run = wait_for("a run of the schedule to succeed", || async {
        let status = backups.get(SCHEDULE).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        status.last_successful_run.ok_or_else(|| format!("no successful run yet: {:?}", status.conditions))
    })
    .await;
    suspend(backups, true).await;
    run
}

async fn suspend(backups: &Api<MySQLBackup>, suspended: bool) {
    let patch = json!({"spec": {"schedule": {"suspend": suspended}}});
    backups.patch(SCHEDULE, &PatchParams::default(), &Patch::Merge(patch)).await.expect("suspend the schedule");
}

async fn succeeded(backups: &Api<MySQLBackup>, name: &str) -> MySQLBackup {
    wait_for(&format!("run {name} to succeed"), || async {
        let run = backups.get(name).await.map_err(|e| e.to_string())?;
        match run.status.as_ref().and_then(|s| s.phase) {
            Some(BackupPhase::Succeeded) => Ok(run),
            Some(BackupPhase::Failed) => panic!("run {name} failed: {:?}", run.status.and_then(|s| s.error)),
            phase => Err(format!("phase {phase:?}")),
        }
    })
    .await
}

/// Asks run `name` for a drill now, as a person would.
async fn request_drill(backups: &Api<MySQLBackup>, name: &str) -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    let patch = json!({"metadata": {"annotations": {DRILL_REQUESTED_AT: now.to_string()}}});
    backups.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await.expect("annotate the run");
    now
}

/// The drill of run `name` answering a request at or after `requested` (any, when `None`),
/// once it has ended and its objects are deleted.
async fn drill_ended(backups: &Api<MySQLBackup>, name: &str, requested: Option<jiff::Timestamp>) -> DrillStatus {
    wait_for(&format!("the drill of run {name} to end"), || async {
        let run = backups.get(name).await.map_err(|e| e.to_string())?;
        let drill = run.status.and_then(|s| s.drill).ok_or("no drill yet")?;
        let answers = requested.is_none_or(|requested| drill.requested_at.0.as_second() >= requested.as_second());
        if answers && drill.has_ended() && drill.job_name.is_none() {
            Ok(drill)
        } else {
            Err(format!("drill {:?} for {} ({:?})", drill.phase, drill.requested_at.0, drill.message))
        }
    })
    .await
}

/// Nothing of run `name`'s drills is left: no database pod, volume claim, Job or Secret.
async fn drill_objects_gone(client: &Client, ns: &str, name: &str) {
    let selector = format!("{DRILL_LABEL}={name}");
    wait_for(&format!("the objects of run {name}'s drill to be gone"), || async {
        let params = ListParams::default().labels(&selector);
        let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&params).await.map_err(|e| e.to_string())?;
        let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
            .list(&params)
            .await
            .map_err(|e| e.to_string())?;
        let jobs = Api::<Job>::namespaced(client.clone(), ns).list(&params).await.map_err(|e| e.to_string())?;
        let secrets = Api::<Secret>::namespaced(client.clone(), ns).list(&params).await.map_err(|e| e.to_string())?;
        let left: Vec<String> = pods
            .items
            .iter()
            .map(|p| format!("pod {}", p.name_any()))
            .chain(claims.items.iter().map(|c| format!("claim {}", c.name_any())))
            .chain(jobs.items.iter().map(|j| format!("job {}", j.name_any())))
            .chain(secrets.items.iter().map(|s| format!("secret {}", s.name_any())))
            .collect();
        if left.is_empty() { Ok(()) } else { Err(format!("left: {left:?}")) }
    })
    .await;
}

async fn drill_failed_metric(client: &Client, ns: &str) -> Option<f64> {
    let text = controller_metrics(client, "backup").await.ok()?;
    metric_value(
        &text,
        "visitors_operator_backup_schedule_last_drill_failed",
        &format!("namespace=\"{ns}\",schedule=\"{SCHEDULE}\""),
    )
}

/// Flips one byte of the first data chunk of the e2e table in run `run`; returns the chunk's
/// path inside the backup.
async fn flip_a_byte(client: &Client, ns: &str, run: &str) -> String {
    let job = format!("flip-{run}");
    let script = flip_a_byte_script(&format!("{ns}/{APP}/{run}"), "*/data/e2e_rows/*");
    run_job(client, ns, &job, storage_shell_job(&job, CLAIM, &script)).await;
    job_output(client, ns, &job).await
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_scheduled_run_passes_its_drill_leaving_nothing_then_a_flipped_byte_fails_the_next_and_restores_are_refused()
{
    let client = cluster().await;
    let (namespace, backups) = app_with_rows(&client, "e2e-drill").await;
    let ns = namespace.name.clone();
    let run = first_run_of_schedule(&backups, json!({"drill": {"activeDeadlineSeconds": 600}})).await;

    // 1. Drilled after it succeeded: the evidence in its status and the schedule's.
    let drill = drill_ended(&backups, &run, None).await;
    eprintln!("drill of {run}: {drill:?}");
    assert_eq!(drill.phase, DrillPhase::Succeeded, "{:?}", drill.message);
    let status = backups.get(&run).await.unwrap().status.unwrap();
    assert_eq!((drill.tables, drill.rows), (status.tables, status.rows));
    assert!(drill.rows >= Some(2000), "{:?}", drill.rows);
    assert!(drill.restore_seconds.is_some_and(|s| s > 0.0) && drill.duration_seconds >= drill.restore_seconds);
    assert!(conditions::is_true(&status.conditions, condition::VERIFIED));
    let schedule = wait_for("the schedule to name its verified run", || async {
        let status = backups.get(SCHEDULE).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        status.last_verified_run.clone().filter(|r| *r == run).map(|_| status).ok_or("not yet".to_string())
    })
    .await;
    assert!(schedule.last_verified_time.is_some());
    drill_objects_gone(&client, &ns, &run).await;
    assert!(events_of(&client, &ns, &run).await.iter().any(|e| e.reason.as_deref() == Some("DrillSucceeded")));
    wait_for("the drill-failed metric to read 0", || async {
        drill_failed_metric(&client, &ns).await.filter(|v| *v == 0.0).ok_or("not 0".to_string())
    })
    .await;

    // 2. One byte of one chunk flipped: the next drill fails naming it, before loading anything.
    let chunk = flip_a_byte(&client, &ns, &run).await;
    let requested = request_drill(&backups, &run).await;
    let drill = drill_ended(&backups, &run, Some(requested)).await;
    eprintln!("drill of {run} after the flip: {drill:?}");
    assert_eq!((drill.phase, drill.reason.as_deref()), (DrillPhase::Failed, Some("BackupDefect")));
    assert!(drill.message.as_deref().unwrap_or_default().contains(&chunk), "names {chunk}: {:?}", drill.message);
    wait_for("the drill-failed metric to read 1", || async {
        drill_failed_metric(&client, &ns).await.filter(|v| *v == 1.0).ok_or("not 1".to_string())
    })
    .await;
    drill_objects_gone(&client, &ns, &run).await;

    // A restore from the run is refused before anything is touched.
    let before = sql_value(&client, &ns, APP, "before", FINGERPRINT).await;
    run_job(
        &client,
        &ns,
        "more",
        mariadb_job(APP, &ns, "more", "INSERT INTO visitors.e2e_rows VALUES (5000, 'later')"),
    )
    .await;
    let changed = sql_value(&client, &ns, APP, "changed", FINGERPRINT).await;
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    let restore: MySQLRestore = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "MySQLRestore",
        "metadata": {"name": "back"}, "spec": {"source": {"backup": run}, "target": {"visitorsApp": APP}}}))
    .unwrap();
    restores.create(&PostParams::default(), &restore).await.expect("create the restore");
    let refused = wait_for("the restore to be refused", || async {
        let status = restores.get("back").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (status.phase == Some(RestorePhase::Failed)).then_some(status).ok_or("not refused yet".to_string())
    })
    .await;
    let ready = conditions::find(&refused.conditions, conditions::READY).unwrap();
    assert_eq!(ready.reason, "BackupFailedDrill", "{}", ready.message);
    assert_eq!(refused.job_name, None, "no Job was started");
    assert_ne!(before, changed);
    assert_eq!(sql_value(&client, &ns, APP, "after", FINGERPRINT).await, changed, "the database is untouched");
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_chunk_rewritten_with_matching_sha256s_fails_the_drill_on_the_content_digest_naming_the_table() {
    let client = cluster().await;
    let (namespace, backups) = app_with_rows(&client, "e2e-drill-digest").await;
    let ns = namespace.name.clone();
    // Uncompressed, so that a shell can edit a row in place.
    backups.create(&PostParams::default(), &backup("b1", json!({"compression": "none"}))).await.unwrap();
    succeeded(&backups, "b1").await;

    // A dump bug, simulated: one value changed (same length), the chunk's SHA-256 recomputed in
    // the manifest, and the run's manifestSha256 set to the new manifest's, as if the dump had
    // written them so.
    let script = format!(
        "set -eu; cd /backup/{ns}/{APP}/b1; f=$(find visitors/data/e2e_rows -type f | sort | head -n 1); \
         old=$(sha256sum \"$f\" | cut -d' ' -f1); sed -i 's/^7\\trow 7$/7\\trow 8/' \"$f\"; \
         new=$(sha256sum \"$f\" | cut -d' ' -f1); test \"$old\" != \"$new\"; \
         sed -i \"s/$old/$new/\" manifest.json; sha256sum manifest.json | cut -d' ' -f1 > /dev/termination-log"
    );
    run_job(&client, &ns, "rewrite", storage_shell_job("rewrite", CLAIM, &script)).await;
    let manifest_sha256 = job_output(&client, &ns, "rewrite").await;
    let patch = json!({"status": {"manifestSha256": manifest_sha256}});
    backups.patch_status("b1", &PatchParams::default(), &Patch::Merge(patch)).await.expect("patch the run's status");

    let requested = request_drill(&backups, "b1").await;
    let drill = drill_ended(&backups, "b1", Some(requested)).await;
    eprintln!("drill: {drill:?}");
    assert_eq!((drill.phase, drill.reason.as_deref()), (DrillPhase::Failed, Some("BackupDefect")));
    let message = drill.message.unwrap_or_default();
    assert!(message.contains("`visitors`.`e2e_rows`") && message.contains("content digest"), "{message}");
    drill_objects_gone(&client, &ns, "b1").await;
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn retention_keeps_the_older_verified_run_while_the_newest_fails_its_drill() {
    let client = cluster().await;
    let (namespace, backups) = app_with_rows(&client, "e2e-drill-retention").await;
    let ns = namespace.name.clone();
    // Drills only when asked (the cron's first fire time is months away); one successful run kept.
    let extra = json!({"drill": {"cron": "0 0 1 1 *"},
                       "schedule": {"cron": "* * * * *", "retention": {"keepSuccessful": 1, "keepFailed": 1}}});
    let first = first_run_of_schedule(&backups, extra).await;
    let requested = request_drill(&backups, &first).await;
    assert_eq!(drill_ended(&backups, &first, Some(requested)).await.phase, DrillPhase::Succeeded);

    // A newer run (the catch-up run of the missed fire time), whose drill fails.
    suspend(&backups, false).await;
    let second = wait_for("a newer successful run", || async {
        let status = backups.get(SCHEDULE).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        status.last_successful_run.filter(|r| *r != first).ok_or_else(|| "not yet".to_string())
    })
    .await;
    suspend(&backups, true).await;
    flip_a_byte(&client, &ns, &second).await;
    let requested = request_drill(&backups, &second).await;
    let failed = drill_ended(&backups, &second, Some(requested)).await;
    assert_eq!((failed.phase, failed.reason.as_deref()), (DrillPhase::Failed, Some("BackupDefect")));

    // The schedule reconciles (a run's end wakes it): retention keeps both, the newest success
    // and the newest verified run, whatever keepSuccessful says.
    let status = wait_for("the schedule to see the failed drill", || async {
        let status = backups.get(SCHEDULE).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        (status.last_successful_run.as_deref() == Some(second.as_str())).then_some(status).ok_or("not yet".to_string())
    })
    .await;
    assert_eq!(status.last_verified_run.as_deref(), Some(first.as_str()));
    let force = json!({"spec": {"schedule": {"retention": {"keepSuccessful": 1, "keepFailed": 0}}}});
    backups.patch(SCHEDULE, &PatchParams::default(), &Patch::Merge(force)).await.expect("reconcile the schedule");
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    for run in [&first, &second] {
        let kept = backups.get_opt(run).await.unwrap();
        assert!(kept.is_some_and(|r| r.metadata.deletion_timestamp.is_none()), "run {run} must be kept");
    }
    namespace.delete().await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn chaos_the_drills_database_killed_and_the_controller_restarted_end_the_drill_failed_leaving_nothing() {
    let client = cluster().await;
    let (namespace, backups) = app_with_rows(&client, "e2e-drill-chaos").await;
    let ns = namespace.name.clone();
    backups.create(&PostParams::default(), &backup("b1", json!({}))).await.unwrap();
    succeeded(&backups, "b1").await;

    let requested = request_drill(&backups, "b1").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let database = wait_for("the drill's database pod", || async {
        pods.get_opt("b1-drill-db").await.map_err(|e| e.to_string())?.ok_or("not yet".to_string())
    })
    .await;
    pods.delete(&database.name_any(), &DeleteParams::default()).await.expect("delete the drill's database");
    let controllers: Api<Pod> = Api::namespaced(client.clone(), &release_namespace());
    let selector = controller_selector("backup");
    for pod in controllers.list(&ListParams::default().labels(&selector)).await.unwrap().items {
        controllers.delete(&pod.name_any(), &DeleteParams::default()).await.expect("delete the controller pod");
    }
    eprintln!("deleted the drill's database and the backup controller's pods");

    let drill = drill_ended(&backups, "b1", Some(requested)).await;
    eprintln!("drill: {drill:?}");
    assert_eq!((drill.phase, drill.reason.as_deref()), (DrillPhase::Failed, Some("DatabaseLost")));
    drill_objects_gone(&client, &ns, "b1").await;
    let run = backups.get("b1").await.unwrap();
    assert!(!run.failed_drill(), "the drill's own trouble says nothing against the backup");

    // Asked again, the drill runs and passes.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let requested = request_drill(&backups, "b1").await;
    let drill = drill_ended(&backups, "b1", Some(requested)).await;
    assert_eq!(drill.phase, DrillPhase::Succeeded, "{:?}", drill.message);
    drill_objects_gone(&client, &ns, "b1").await;
    namespace.delete().await;
}
