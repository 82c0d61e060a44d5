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
//! bench/high-availability.sh, not from this test: no timed assertions here).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::{
    MemberRole, ReplicationStatus, RoleChange, SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION,
};
use visitors_e2e::replication::{
    Written, app_write_job, create_replicated_app, pod_sql_job, prober_job, replicating, replication_of, writer_job,
};
use visitors_e2e::{
    TestNamespace, cluster, events_of, job_completes, job_output, mariadb_job, run_job, sql_value, wait_for,
};

const APP: &str = "ha";
const SERVERS: i32 = 3;

struct Site {
    client: Client,
    namespace: String,
    apps: Api<VisitorsApp>,
    pods: Api<Pod>,
    jobs: u32,
}

impl Site {
    /// A Job name not used yet in this namespace.
    fn job(&mut self, what: &str) -> String {
        self.jobs += 1;
        format!("{what}-{}", self.jobs)
    }

    /// `sql`'s one-line answer on server `pod` itself.
    async fn on(&mut self, pod: &str, sql: &str) -> String {
        let name = self.job("on");
        run_job(&self.client, &self.namespace, &name, pod_sql_job(APP, &self.namespace, &name, pod, sql)).await;
        job_output(&self.client, &self.namespace, &name).await
    }

    async fn replication(&self) -> ReplicationStatus {
        replication_of(&self.apps, APP).await
    }

    async fn primary(&self) -> String {
        self.replication().await.primary.expect("a primary is recorded")
    }

    /// Waits until every replica replicates from the primary again and the app is Ready.
    async fn healthy(&self) -> ReplicationStatus {
        wait_for("every replica to replicate from the primary", || replicating(&self.apps, APP, SERVERS - 1)).await
    }

    /// Waits for a failover away from `from`, and returns it.
    async fn failover_from(&self, from: &str) -> RoleChange {
        wait_for(&format!("a failover away from {from}"), || async {
            let replication = self.replication().await;
            match replication.last_failover {
                Some(change) if change.from.as_deref() == Some(from) => Ok(change),
                other => Err(format!("last failover {other:?}; members {:?}", replication.members)),
            }
        })
        .await
    }

    async fn annotate(&self, object: &str, annotations: serde_json::Value, pod: bool) {
        let patch = Patch::Merge(json!({"metadata": {"annotations": annotations}}));
        if pod {
            self.pods.patch(object, &PatchParams::default(), &patch).await.expect("annotate the pod");
        } else {
            self.apps.patch(object, &PatchParams::default(), &patch).await.expect("annotate the app");
        }
    }

    /// How many of the rows in `acked` the server `pod` holds.
    async fn held(&mut self, pod: &str, written: &Written) -> usize {
        let ranges = runs(written);
        let condition: Vec<String> = ranges.iter().map(|(a, b)| format!("id BETWEEN {a} AND {b}")).collect();
        let sql = format!("SELECT COUNT(*) FROM ha_writes WHERE {}", condition.join(" OR "));
        self.on(pod, &sql).await.parse().expect("a count")
    }

    /// Waits until every server's copy of the written table equals the primary's.
    async fn replicas_equal_the_primary(&mut self) {
        let primary = self.primary().await;
        let expected = self.on(&primary, "CHECKSUM TABLE ha_writes").await;
        for ordinal in 0..SERVERS {
            let pod = format!("{APP}-mysql-{ordinal}");
            if pod == primary {
                continue;
            }
            let mut tries = 0;
            loop {
                let checksum = self.on(&pod, "CHECKSUM TABLE ha_writes").await;
                if checksum == expected {
                    break;
                }
                tries += 1;
                assert!(tries < 30, "{pod} holds {checksum}, the primary {primary} {expected}");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// The writer's acknowledged rows as runs of consecutive numbers.
fn runs(written: &Written) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for id in &written.acked {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == *id => *last = *id,
            _ => runs.push((*id, *id)),
        }
    }
    runs
}

#[tokio::test]
#[ignore = "needs a cluster with visitors-operator installed (e2e/run.sh)"]
async fn a_replicated_mysql_loses_no_acknowledged_write_through_deletion_freeze_switchover_and_restart() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha").await;
    eprintln!("namespace {}", namespace.name);
    let ns = namespace.name.clone();
    let mut site = Site {
        client: client.clone(),
        namespace: ns.clone(),
        apps: Api::namespaced(client.clone(), &ns),
        pods: Api::namespaced(client.clone(), &ns),
        jobs: 0,
    };
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
    run_writer(&client, &ns, &writer).await;

    // 2. The primary's pod deleted under writes.
    let first = site.primary().await;
    site.pods.delete(&first, &DeleteParams::default()).await.expect("delete the primary's pod");
    let change = site.failover_from(&first).await;
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
    site.annotate(&frozen, json!({"kubelet-shim/freeze": "true"}), true).await;
    let change = site.failover_from(&frozen).await;
    let successor = change.to.clone().expect("a new primary");
    eprintln!("primary frozen: failed over {frozen} -> {successor}, write gap {:?} s", change.write_gap_seconds);
    tokio::time::sleep(Duration::from_secs(5)).await;
    site.annotate(&frozen, json!({"kubelet-shim/freeze": null}), true).await;
    let healed = site.healthy().await;
    assert_eq!(member_role(&healed, &frozen), Some(MemberRole::Replica), "{frozen} rejoined as a replica: {healed:?}");
    let accepted = wait_for("the prober to finish", || async { job_output_or_wait(&client, &ns, &prober).await }).await;
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
    let written = stop_writer(&mut site, &writer).await;
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
    for ordinal in 0..SERVERS {
        let _ = site.pods.delete(&format!("{APP}-mysql-{ordinal}"), &DeleteParams::default()).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
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

async fn run_writer(client: &Client, namespace: &str, name: &str) {
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), namespace);
    let job = writer_job(APP, namespace, name, 1800);
    jobs.create(&Default::default(), &serde_json::from_value(job).unwrap()).await.expect("start the writer");
    tokio::time::sleep(Duration::from_secs(10)).await;
}

async fn stop_writer(site: &mut Site, writer: &str) -> Written {
    let name = site.job("stop");
    run_job(
        &site.client,
        &site.namespace,
        &name,
        mariadb_job(APP, &site.namespace, &name, "CREATE TABLE ha_stop (id INT)"),
    )
    .await;
    let output = wait_for("the writer to stop", || job_output_or_wait(&site.client, &site.namespace, writer)).await;
    Written::parse(&output)
}

/// A Job's termination message once it has one.
async fn job_output_or_wait(client: &Client, namespace: &str, name: &str) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&kube::api::ListParams::default().labels(&format!("job-name={name}")))
        .await
        .map_err(|e| e.to_string())?;
    listed
        .items
        .iter()
        .find_map(|pod| {
            let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
            statuses.iter().find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        })
        .map(|m| m.trim().to_string())
        .ok_or_else(|| format!("Job {name} has not ended"))
}
