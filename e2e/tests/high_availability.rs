//! High availability on a real cluster: a VisitorsApp with three MySQL servers (on the test
//! cluster, three real MariaDB servers), GTID semi-synchronous replication, and a writer that
//! commits numbered rows through the primary Service all along, recording every acknowledged
//! one. "Nothing lost" means every acknowledged row is on the primary at the end, and every
//! replica equals it (`CHECKSUM TABLE`). One app goes through the scenarios in turn (issue 29):
//!
//! 1. writes reach both replicas; the app's account cannot write on a replica; the client
//!    Service leads to the primary;
//! 2. the primary's pod deleted under writes: a new primary, the old pod back as a replica;
//! 3. the primary frozen under writes: a failover; thawed, it never accepts a write again as
//!    primary (a prober tries every server's own address all along: the servers that accept
//!    follow each other, never interleave) and rejoins as a replica;
//! 4. a switchover through `kubectl visitors switchover`; one to a server that is not a healthy replica is refused;
//! 5. the MySQL image changed: the replicas restart first, then one switchover, then the old
//!    primary restarts as a replica; no failover;
//! 6. all three pods deleted at once: the server holding the most transactions becomes the
//!    primary.
//!
//! The writer's longest waits are printed (the figures of docs/benchmarks.md come from
//! bench/high-availability/run.sh, not from this test: no timed assertions here).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use visitors_api::backup::ServerRole;
use visitors_api::restore::RestorePhase;
use visitors_api::visitors_app::{MemberRole, ReplicationStatus, RoleChange};
use visitors_api::{MySQLBackup, MySQLRestore};
use visitors_e2e::archive::{self, rfc3339};
use visitors_e2e::plugin;
use visitors_e2e::replication::{
    MARIADB_IMAGE, Site, app_write_job, create_replicated_app, pod_sql_job, prober_job, replicating,
};
use visitors_e2e::{
    TestNamespace, cluster, create_backup_claim, events_of, job_completes, job_output, job_output_when_ended,
    mariadb_job, mariadb_shell_job, restore_finished, run_job, sql_value, wait_for,
};

const APP: &str = "ha";
const SERVERS: i32 = 3;

#[tokio::test]
#[ignore = "needs a cluster with visitors-operator installed (e2e/run.sh)"]
async fn a_replicated_mysql_loses_no_acknowledged_write_through_deletion_freeze_switchover_and_restart() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha").await;
    eprintln!("namespace {}", namespace.name);
    let ns = namespace.name.clone();
    let mut site = Site::new(&client, &ns, APP, SERVERS);
    create_replicated_app(&site.apps, APP, SERVERS).await;
    site.healthy().await;

    // 1. Writes reach both replicas, a replica refuses the app's account, the Service leads to
    // the primary.
    let primary = site.primary().await;
    run_job(
        &client,
        &ns,
        "check",
        mariadb_job(
            APP,
            &ns,
            "check",
            "CREATE TABLE ha_check (id INT PRIMARY KEY); INSERT INTO ha_check VALUES (1); \
             CREATE TABLE ha_probes (id INT AUTO_INCREMENT PRIMARY KEY, pod INT)",
        ),
    )
    .await;
    let replicas: Vec<String> =
        (0..SERVERS).map(|i| format!("{APP}-mysql-{i}")).filter(|pod| *pod != primary).collect();
    for replica in &replicas {
        wait_for(&format!("the row to reach {replica}"), || async {
            let name = format!("reach-{replica}-{}", std::process::id() ^ rand_suffix());
            let job = pod_sql_job(APP, &ns, &name, replica, "SELECT COUNT(*) FROM ha_check");
            run_job(&client, &ns, &name, job).await;
            let count = job_output(&client, &ns, &name).await;
            if count == "1" { Ok(()) } else { Err(format!("{replica} holds {count} rows")) }
        })
        .await;
        let name = site.job("refused");
        assert!(
            !job_completes(&client, &ns, &name, app_write_job(APP, &ns, &name, replica)).await,
            "{replica} accepted the app's write"
        );
        let answer = job_output(&client, &ns, &name).await;
        assert!(answer.contains("read-only") || answer.contains("1290"), "{replica} answered {answer:?}");
    }
    let through_service = sql_value(&client, &ns, APP, "service-id", "SELECT @@server_id").await;
    assert_eq!(
        through_service,
        site.on(&primary, "SELECT @@server_id").await,
        "the client Service leads to the primary"
    );

    // The writer runs through every scenario that follows, until the stop row.
    let writer = site.job("writer");
    site.start_writer(&writer, 5).await;

    // 2. The primary's pod deleted under writes.
    let first = site.primary().await;
    let before = site.last_failover().await;
    site.pods.delete(&first, &DeleteParams::default()).await.expect("delete the primary's pod");
    let change = site.failover_from(&first, before.as_ref()).await;
    eprintln!("pod deleted: failed over {first} -> {:?}, write gap {:?} s", change.to, change.write_gap_seconds);
    let healed = site.healthy().await;
    assert_eq!(member_role(&healed, &first), Some(MemberRole::Replica), "{first} back as a replica: {healed:?}");

    // 3. The primary frozen under writes, with a prober on every server's own address.
    let frozen = site.primary().await;
    let prober = site.job("prober");
    let probe = prober_job(APP, &ns, &prober, SERVERS, 60);
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&Default::default(), &serde_json::from_value(probe).unwrap()).await.expect("start the prober");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = site.last_failover().await;
    site.annotate(&frozen, json!({"kubelet-shim/freeze": "true"}), true).await;
    let change = site.failover_from(&frozen, before.as_ref()).await;
    let successor = change.to.clone().expect("a new primary");
    eprintln!("primary frozen: failed over {frozen} -> {successor}, write gap {:?} s", change.write_gap_seconds);
    tokio::time::sleep(Duration::from_secs(5)).await;
    site.annotate(&frozen, json!({"kubelet-shim/freeze": null}), true).await;
    let healed = site.healthy().await;
    assert_eq!(member_role(&healed, &frozen), Some(MemberRole::Replica), "{frozen} rejoined as a replica: {healed:?}");
    let accepted =
        wait_for("the prober to finish", || async { job_output_when_ended(&client, &ns, &prober).await }).await;
    let order: String = accepted.trim_start_matches("accepted=").to_string();
    let (old, new) = (ordinal(&frozen), ordinal(&successor));
    assert!(
        [old.clone(), format!("{old}{new}"), new.clone()].contains(&order),
        "the servers that accepted writes, in order: {order:?}; only {old} then {new} may"
    );

    // 4. A switchover to a chosen replica, then one to the primary itself, refused: through
    // `kubectl visitors switchover`, which sets the annotations and waits for the answer.
    let before = site.primary().await;
    let target = (0..SERVERS).map(|i| format!("{APP}-mysql-{i}")).find(|pod| *pod != before).unwrap();
    let asked = plugin::run(&ns, &["switchover", APP, "--to", &target, "-o", "json"]).await;
    assert!(asked.status.success(), "switchover: {}", plugin::text(&asked).1);
    let switched: RoleChange = serde_json::from_slice(&asked.stdout).expect("the switchover as JSON");
    assert_eq!((switched.from.as_deref(), switched.to.as_deref()), (Some(before.as_str()), Some(target.as_str())));
    assert_eq!(site.replication().await.last_switchover.and_then(|s| s.request), switched.request, "the one it asked");
    eprintln!("switchover {before} -> {target}, write gap {:?} s", switched.write_gap_seconds);
    site.healthy().await;
    let refused = plugin::run(&ns, &["switchover", APP, "--to", &target]).await;
    let (_, said) = plugin::text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("TargetNotAHealthyReplica"), "{said}");
    let recorded = site.replication().await.last_switchover.expect("the refusal is recorded");
    assert_eq!((recorded.to.as_deref(), recorded.reason.as_str()), (None, "TargetNotAHealthyReplica"), "{recorded:?}");
    assert!(events_of(&client, &ns, APP).await.iter().any(|e| e.reason.as_deref() == Some("SwitchoverRefused")));
    assert_eq!(site.primary().await, target, "nothing moved");

    // 5. A new image: the replicas first, one switchover, the old primary last; no failover.
    let before = site.primary().await;
    let failover_before = site.last_failover().await;
    let image = format!("docker.io/library/{MARIADB_IMAGE}");
    site.apps
        .patch(APP, &PatchParams::default(), &Patch::Merge(json!({"spec": {"mysql": {"image": image}}})))
        .await
        .expect("change the MySQL image");
    let updated = wait_for("every MySQL pod to run the new image, replicating", || async {
        let pods = site.mysql_pods().await;
        let images: Vec<Option<String>> =
            pods.iter().map(|p| p.spec.as_ref().map(|s| s.containers[0].image.clone().unwrap_or_default())).collect();
        if images.iter().any(|i| i.as_deref() != Some(image.as_str())) {
            return Err(format!("images {images:?}"));
        }
        let replication = replicating(&site.apps, APP, SERVERS - 1).await?;
        Ok((pods, replication))
    })
    .await;
    let (pods, replication) = updated;
    let handed_over = replication.last_switchover.clone().expect("a switchover");
    assert_eq!(
        (handed_over.reason.as_str(), handed_over.from.as_deref()),
        ("RollingUpdate", Some(before.as_str())),
        "{handed_over:?}"
    );
    assert_eq!(replication.last_failover, failover_before, "a rolling update makes no failover");
    let started = |pod: &Pod| pod.metadata.creation_timestamp.clone().expect("a creation time").0;
    let old_primary =
        pods.iter().find(|p| p.metadata.name.as_deref() == Some(before.as_str())).expect("the old primary");
    for replica in pods.iter().filter(|p| p.metadata.name.as_deref() != Some(before.as_str())) {
        let name = replica.metadata.name.clone().unwrap_or_default();
        assert!(started(replica) <= handed_over.time.0, "replica {name} restarted after the switchover");
    }
    assert!(handed_over.time.0 <= started(old_primary), "the primary restarted before it was handed over");
    eprintln!(
        "rolling update: switchover {before} -> {:?}, write gap {:?} s",
        handed_over.to, handed_over.write_gap_seconds
    );

    // Nothing lost: every acknowledged row is on the primary, every replica equals it.
    let written = site.stop_writer(&writer).await;
    eprintln!(
        "writer: {} rows acknowledged of {} tries, longest wait {} s",
        written.acked.len(),
        written.tries,
        written.gap
    );
    assert!(written.acked.len() > 50, "the writer wrote: {written:?}");
    let primary = site.primary().await;
    assert_eq!(site.held(&primary, &written).await, written.acked.len(), "every acknowledged row is on {primary}");
    site.replicas_equal_the_primary().await;

    // 6. Every pod deleted at once: the server with the most transactions becomes the primary.
    site.delete_every_pod().await;
    site.healthy().await;
    let primary = site.primary().await;
    assert_eq!(site.held(&primary, &written).await, written.acked.len(), "every acknowledged row survived the restart");
    site.replicas_equal_the_primary().await;

    namespace.delete().await;
}

fn member_role(replication: &ReplicationStatus, pod: &str) -> Option<MemberRole> {
    replication.members.iter().find(|m| m.name == pod).map(|m| m.role)
}

fn ordinal(pod: &str) -> String {
    pod.rsplit('-').next().unwrap_or_default().to_string()
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos()
}

const DATA_APP: &str = "hadata";
const CLAIM: &str = "backups";
const SCHEDULE: &str = "minutely";

/// The second app of issue 29's scenarios, side by side with the first:
///
/// 7. a replica's pod and volume lost: the new empty server is seeded from the other replica
///    (an Event `Seeding` names it), never from the primary, and ends equal to the primary;
/// 8. a schedule with `pointInTime`: its run reads a replica (`status.takenFrom`); rows written
///    one a second through the primary Service while the primary's pod is deleted; the archive
///    follows the new primary with no gap after the run (a tick the old primary held alone
///    begins a new epoch from the new primary's oldest binary log, which holds the run), and a
///    restore to a second after the failover, from the run taken before it, holds exactly the
///    rows committed up to that second;
/// 9. after that restore into the replicated app, every replica equals the primary.
#[tokio::test]
#[ignore = "needs a cluster with visitors-operator installed (e2e/run.sh)"]
async fn a_lost_replica_is_reseeded_from_a_replica_and_a_restore_to_a_second_crosses_a_failover() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha-data").await;
    let ns = namespace.name.clone();
    eprintln!("namespace {ns}");
    let mut site = Site::new(&client, &ns, DATA_APP, SERVERS);
    create_replicated_app(&site.apps, DATA_APP, SERVERS).await;
    create_backup_claim(&client, &ns, CLAIM).await;
    let table = "CREATE TABLE visitors.ticks (id INT PRIMARY KEY, written_at DATETIME NOT NULL)";
    run_job(&client, &ns, "table", mariadb_job(DATA_APP, &ns, "table", table)).await;

    // 7. A replica's volume lost: seeded from the other replica.
    let primary = site.primary().await;
    let lost = (0..SERVERS).rev().map(|i| format!("{DATA_APP}-mysql-{i}")).find(|pod| *pod != primary).unwrap();
    site.lose_volume(&lost).await;
    site.healthy().await;
    let seeded = site.event_about("Seeding", &lost).await;
    assert!(seeded.contains("from replica") && !seeded.contains(&format!("from replica {primary}")), "{seeded}");
    site.replicas_hold_what_the_primary_holds("ticks").await;

    // The replicas' binary logs rotated, twice: their files and positions no longer match the
    // primary's, as on any server that restarted or was seeded. A run read from a replica, and
    // an archive that goes on on another server, are then found by GTID, not by position.
    let primary = site.primary().await;
    for replica in (0..SERVERS).map(|i| format!("{DATA_APP}-mysql-{i}")).filter(|pod| *pod != primary) {
        site.execute(&replica, "FLUSH BINARY LOGS; FLUSH BINARY LOGS").await;
    }

    // 8. A run from a replica, then rows every second across a failover.
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let schedule: MySQLBackup = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": SCHEDULE},
        "spec": {"source": {"visitorsApp": DATA_APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
                 "schedule": {"cron": "* * * * *"}, "pointInTime": {"flushSeconds": 2}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    let (base, _) = archive::a_successful_run(&backups, SCHEDULE).await;
    backups
        .patch(SCHEDULE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"schedule": {"suspend": true}}})))
        .await
        .expect("suspend the schedule: the restore starts from the run before the failover");
    // The ticks start after the run (every one of them is then replayed from the archive) and
    // the primary goes once some are in: the failover and the target fall inside the ticks.
    let ticks = r#"for i in $(seq 1 60); do timeout 5 mariadb -h "$HOST" -uroot --connect-timeout=2 -e "INSERT INTO visitors.ticks VALUES ($i, NOW())" 2>/dev/null; sleep 1; done; echo done > /dev/termination-log"#;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let writer = serde_json::from_value(mariadb_shell_job(DATA_APP, &ns, "ticks", ticks, &[])).unwrap();
    jobs.create(&PostParams::default(), &writer).await.expect("start the ticks");
    let primary = site.primary().await;
    let mut ticked = 0;
    for _ in 0..20 {
        ticked = site.on(&primary, "SELECT COUNT(*) FROM visitors.ticks").await.trim().parse::<u32>().unwrap_or(0);
        if ticked >= 2 {
            break;
        }
    }
    assert!(ticked >= 2, "the ticks did not reach the primary {primary}: {ticked} rows");
    let base_status = backups.get(&base).await.expect("read the run").status.unwrap();
    let taken_from = base_status.taken_from.clone().expect("the run names its server");
    assert_eq!(taken_from.role, ServerRole::Replica, "{taken_from:?}");
    assert_ne!(taken_from.pod, primary, "a replica, not the primary");
    let snapshot = base_status.snapshot.clone().unwrap_or_default();
    assert!(snapshot.gtid.is_some(), "the run records its GTID position");
    let before = site.last_failover().await;
    site.pods.delete(&primary, &DeleteParams::default()).await.expect("delete the primary's pod");
    let failover = site.failover_from(&primary, before.as_ref()).await;
    let target = failover.time.0.as_second() + 3;
    eprintln!("run {base} from {taken_from:?}; failed over {primary} -> {:?}; target {}", failover.to, rfc3339(target));
    wait_for("the ticks to end", || async { job_output_when_ended(&client, &ns, "ticks").await.map(drop) }).await;
    let expect = format!(
        "CREATE DATABASE e2e_expect; CREATE TABLE e2e_expect.rows AS SELECT * FROM visitors.ticks WHERE UNIX_TIMESTAMP(written_at) <= {target}"
    );
    run_job(&client, &ns, "expect", mariadb_job(DATA_APP, &ns, "expect", &expect)).await;
    archive::archived_until(&backups, SCHEDULE, target).await;
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    let restore: MySQLRestore = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": "after-failover"},
        "spec": {"source": {"pointInTime": {"backup": SCHEDULE, "targetTime": rfc3339(target)}},
                 "target": {"visitorsApp": DATA_APP}},
    }))
    .unwrap();
    restores.create(&PostParams::default(), &restore).await.expect("create the restore");
    let restored = restore_finished(&restores, "after-failover").await.status.unwrap_or_default();
    assert_eq!(restored.phase, Some(RestorePhase::Succeeded), "{:?} {:?}", restored.error, restored.conditions);
    assert_eq!(restored.backup_name.as_deref(), Some(base.as_str()), "the run taken before the failover");
    let same_rows = "(SELECT COUNT(*) FROM visitors.ticks) = (SELECT COUNT(*) FROM e2e_expect.rows) \
         AND NOT EXISTS (SELECT 1 FROM visitors.ticks t LEFT JOIN e2e_expect.rows e \
         ON e.id = t.id AND e.written_at = t.written_at WHERE e.id IS NULL)";
    let check = format!("SELECT IF({same_rows}, 'holds', (SELECT 1 UNION SELECT 2)) AS checked");
    run_job(&client, &ns, "row-by-row", mariadb_job(DATA_APP, &ns, "row-by-row", &check)).await;
    let archive = backups.get(SCHEDULE).await.unwrap().status.and_then(|s| s.point_in_time).unwrap_or_default();
    // A tick the old primary committed after the fence reached the archiver but no replica: the
    // archive then begins a new epoch on the new primary, from its oldest binary log, which
    // still holds the run's position. No other gap.
    let snapshot_time = snapshot.time.expect("the run records its snapshot's time").0;
    let blocking: Vec<_> =
        archive.gaps.iter().filter(|gap| gap.before_time.as_ref().is_none_or(|t| t.0 > snapshot_time)).collect();
    assert!(blocking.is_empty(), "the failover made a gap in the archive after the run: {blocking:?}");

    // 9. Every replica equals the primary after the restore.
    site.healthy().await;
    site.replicas_hold_what_the_primary_holds("ticks").await;
    namespace.delete().await;
}

const SEED_APP: &str = "haseed";

/// 10. A replica whose source no longer has the binary logs since the beginning (purged, as
///     after the 3 days kept) is seeded from the app's newest verified backup run: rows written,
///     every server's binary logs purged, a run taken (from the replica) and drilled, more rows
///     written, then the replica's pod and volume lost. The new empty server cannot replicate
///     the history, so a Job loads the run into it (an Event `SeedingFromBackup` names the run)
///     and it replicates from the primary the rows written after the run; it ends equal to the
///     primary. Two servers: the primary is the only source, and it lacks the logs too.
#[tokio::test]
#[ignore = "needs a cluster with visitors-operator installed (e2e/run.sh)"]
async fn a_replica_behind_purged_binary_logs_is_seeded_from_the_newest_verified_run() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha-seed").await;
    let ns = namespace.name.clone();
    eprintln!("namespace {ns}");
    let mut site = Site::new(&client, &ns, SEED_APP, 2);
    create_replicated_app(&site.apps, SEED_APP, 2).await;
    create_backup_claim(&client, &ns, CLAIM).await;
    let rows = "CREATE TABLE visitors.seeded (id INT PRIMARY KEY, note VARCHAR(32)) ENGINE=InnoDB; \
                INSERT INTO visitors.seeded SELECT seq, CONCAT('before the run ', seq) FROM seq_1_to_300";
    run_job(&client, &ns, "before", mariadb_job(SEED_APP, &ns, "before", rows)).await;
    site.healthy().await;

    site.purge_binary_logs().await;
    // A run, from the replica, drilled.
    site.verified_run("seed-run", CLAIM).await;
    let after = "INSERT INTO visitors.seeded SELECT seq, CONCAT('after the run ', seq) FROM seq_301_to_420";
    run_job(&client, &ns, "after", mariadb_job(SEED_APP, &ns, "after", after)).await;

    // The replica lost: seeded from the run, then from the primary since.
    let primary = site.primary().await;
    let lost = (0..2).map(|i| format!("{SEED_APP}-mysql-{i}")).find(|pod| *pod != primary).unwrap();
    site.lose_volume(&lost).await;
    let note = site.event_about("SeedingFromBackup", &lost).await;
    assert!(note.contains("backup run seed-run"), "{note}");
    site.healthy().await;
    site.replicas_hold_what_the_primary_holds("seeded").await;
    let held = site.on(&lost, "SELECT COUNT(*) FROM seeded").await;
    assert_eq!(held, "420", "{lost} holds the run's rows and those written after it");
    namespace.delete().await;
}
