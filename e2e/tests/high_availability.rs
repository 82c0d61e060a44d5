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
//! 4. a switchover by annotation; one to a server that is not a healthy replica is refused;
//! 6. all three pods deleted at once: the server holding the most transactions becomes the
//!    primary.
//!
//! The writer's longest waits are printed (the figures of docs/benchmarks.md come from
//! bench/high-availability/run.sh, not from this test: no timed assertions here).

use std::time::Duration;

use kube::Api;
use kube::api::DeleteParams;
use serde_json::json;
use visitors_api::visitors_app::{
    MemberRole, ReplicationStatus, SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION,
};
use visitors_e2e::replication::{
    Site, app_write_job, create_replicated_app, job_output_when_ended, pod_sql_job, prober_job,
};
use visitors_e2e::{
    TestNamespace, cluster, events_of, job_completes, job_output, mariadb_job, run_job, sql_value, wait_for,
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
        mariadb_job(APP, &ns, "check", "CREATE TABLE ha_check (id INT PRIMARY KEY); INSERT INTO ha_check VALUES (1)"),
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

    // 4. A switchover to a chosen replica, then one to the primary itself, refused.
    let before = site.primary().await;
    let target = (0..SERVERS).map(|i| format!("{APP}-mysql-{i}")).find(|pod| *pod != before).unwrap();
    site.annotate(APP, json!({SWITCHOVER_REQUESTED_AT_ANNOTATION: "first", SWITCHOVER_TO_ANNOTATION: target}), false)
        .await;
    let switched = wait_for("the switchover", || async {
        match site.replication().await.last_switchover {
            Some(change) if change.request.as_deref() == Some("first") => Ok(change),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!((switched.from.as_deref(), switched.to.as_deref()), (Some(before.as_str()), Some(target.as_str())));
    eprintln!("switchover {before} -> {target}, write gap {:?} s", switched.write_gap_seconds);
    site.healthy().await;
    site.annotate(APP, json!({SWITCHOVER_REQUESTED_AT_ANNOTATION: "second", SWITCHOVER_TO_ANNOTATION: target}), false)
        .await;
    let refused = wait_for("the refusal", || async {
        match site.replication().await.last_switchover {
            Some(change) if change.request.as_deref() == Some("second") => Ok(change),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!((refused.to.as_deref(), refused.reason.as_str()), (None, "TargetNotAHealthyReplica"), "{refused:?}");
    assert!(events_of(&client, &ns, APP).await.iter().any(|e| e.reason.as_deref() == Some("SwitchoverRefused")));
    assert_eq!(site.primary().await, target, "nothing moved");

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
