//! The write gaps of a replicated VisitorsApp's failovers and switchovers, as clients see them,
//! at a write peak (bench/high-availability/run.sh). On the cluster of KUBECONFIG with the suite
//! installed: an app with three MySQL servers, the pooled writer (src/bin/pooled-writer.rs:
//! WRITERS sessions, each holding its connection open, committing single-row inserts through the
//! primary Service as fast as they are acknowledged) all along, then DELETIONS primary pods
//! deleted, FREEZES primaries frozen (the test cluster's `kubelet-shim/freeze` annotation,
//! thawed a few seconds later), CHAINED replica freezes of 15 s each followed at once by a
//! freeze of the primary, and SWITCHOVERS switchovers, each once the servers are healthy again.
//!
//! Prints each event's write gap as the controller measured it (and how long the promotion
//! waited for apply), the clients' longest wait between two acknowledged commits around it (a
//! statement outlives TRY_SECONDS and is given up, as a client's timeout), their medians and
//! worst, and how many acknowledged rows the final primary lacks.
//!
//!     failover-bench [DELETIONS] [FREEZES] [SWITCHOVERS] [TRY_SECONDS] [WRITERS] [CHAINED]
//!                     default: 5 5 3 2 4 5

use std::time::Duration;

use kube::api::DeleteParams;
use serde_json::json;
use visitors_api::visitors_app::{RoleChange, SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION};
use visitors_e2e::replication::{Load, Site, create_replicated_app};
use visitors_e2e::{TestNamespace, cluster, wait_for};

const APP: &str = "bench";

/// One event: what it was, when it started and when the servers were healthy again (unix
/// seconds), and the role change it made.
struct Event {
    kind: &'static str,
    started: f64,
    healthy: f64,
    change: Option<RoleChange>,
}

fn unix_now() -> f64 {
    jiff::Timestamp::now().as_duration().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let counts: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let count = |i: usize, default: usize| counts.get(i).copied().unwrap_or(default);
    let (deletions, freezes, switchovers, try_seconds) = (count(0, 5), count(1, 5), count(2, 3), count(3, 2));
    let (writers, chained) = (count(4, 4), count(5, 5));
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha-bench").await;
    let mut site = Site::new(&client, &namespace.name, APP, 3);
    create_replicated_app(&site.apps, APP, 3).await;
    site.healthy().await;
    let writer = site.job("writer");
    let load = Load { writers: writers as u32, seconds: 7200, try_seconds: try_seconds as u32, watch: Vec::new() };
    site.start_pooled_writer(&writer, &load).await;

    let mut events: Vec<Event> = Vec::new();
    for _ in 0..deletions {
        let primary = site.primary().await;
        let old_pod = site.pods.get(&primary).await.ok().and_then(|p| p.metadata.uid);
        let (before, started) = (site.last_failover().await, unix_now());
        site.pods.delete(&primary, &DeleteParams::default()).await.expect("delete the primary's pod");
        // A failover, or the deleted primary back (a new pod on its volume) and chosen again
        // before one was done: both end the event.
        let change = wait_for(&format!("a failover away from {primary}, or {primary} back as the primary"), || async {
            let replication = site.replication().await;
            if let Some(change) = replication.last_failover.clone().filter(|c| Some(c) != before.as_ref()) {
                return Ok(Some(change));
            }
            let pod = site.pods.get_opt(&primary).await.ok().flatten().and_then(|p| p.metadata.uid);
            let back = pod.is_some() && pod != old_pod && replication.primary.as_deref() == Some(primary.as_str());
            match back && site.replication_is_healthy().await {
                true => Ok(None),
                false => Err(format!("last failover {:?}", replication.last_failover)),
            }
        })
        .await;
        site.healthy().await;
        events.push(Event { kind: "pod deleted", started, healthy: unix_now(), change });
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for _ in 0..freezes {
        let started = unix_now();
        let change = freeze_the_primary(&site).await;
        events.push(Event { kind: "primary frozen", started, healthy: unix_now(), change: Some(change) });
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for _ in 0..chained {
        let primary = site.primary().await;
        let replica = site.server_pods().into_iter().find(|pod| *pod != primary).expect("a replica");
        site.annotate(&replica, json!({"kubelet-shim/freeze": "true"}), true).await;
        tokio::time::sleep(Duration::from_secs(15)).await;
        site.annotate(&replica, json!({"kubelet-shim/freeze": null}), true).await;
        let started = unix_now();
        let change = freeze_the_primary(&site).await;
        events.push(Event {
            kind: "replica frozen 15 s, then the primary",
            started,
            healthy: unix_now(),
            change: Some(change),
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for round in 0..switchovers {
        let request = format!("bench-{round}");
        let annotations = json!({SWITCHOVER_REQUESTED_AT_ANNOTATION: request, SWITCHOVER_TO_ANNOTATION: null});
        let started = unix_now();
        site.annotate(APP, annotations, false).await;
        let done = wait_for("the switchover", || async {
            match site.replication().await.last_switchover {
                Some(change) if change.request.as_deref() == Some(request.as_str()) => Ok(change),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        site.healthy().await;
        events.push(Event { kind: "switchover", started, healthy: unix_now(), change: Some(done) });
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let written = site.stop_pooled_writer(&writer).await;

    println!("| event | controller's write gap | promotion's wait for apply | clients' longest wait |");
    println!("|---|---|---|---|");
    let mut waits: Vec<(&str, f64)> = Vec::new();
    for event in &events {
        // A wait belongs to the event it ended in: from its start to a few seconds after the
        // servers were healthy again.
        let wait = written
            .gaps
            .iter()
            .filter(|(_, ended)| *ended >= event.started && *ended <= event.healthy + 5.0)
            .map(|(wait, _)| *wait)
            .fold(0.0, f64::max);
        waits.push((event.kind, wait));
        let change = event.change.as_ref();
        let seconds = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.1} s"));
        let kind = match change {
            None => format!("{} (back before a failover: chosen again)", event.kind),
            Some(_) => event.kind.to_string(),
        };
        println!(
            "| {kind} | {} | {} | {} |",
            seconds(change.and_then(|c| c.write_gap_seconds)),
            seconds(change.and_then(|c| c.apply_wait_seconds)),
            if wait > 0.0 { format!("{wait:.2} s") } else { "under 1 s".into() }
        );
    }
    for kind in ["pod deleted", "primary frozen", "replica frozen 15 s, then the primary", "switchover"] {
        let gaps: Vec<f64> =
            events.iter().filter(|e| e.kind == kind).filter_map(|e| e.change.as_ref()?.write_gap_seconds).collect();
        let client: Vec<f64> = waits.iter().filter(|(k, _)| *k == kind).map(|(_, w)| *w).collect();
        let (median, worst) = median_and_worst(gaps.clone());
        let (client_median, client_worst) = median_and_worst(client);
        println!(
            "{kind}: {} events; controller's gap median {median:.1} s, worst {worst:.1} s; clients' longest wait median {client_median:.2} s, worst {client_worst:.2} s (0: under 1 s)",
            gaps.len()
        );
    }
    println!(
        "writers: {} sessions, {} rows acknowledged of {} tries ({:.0} a second), {} read-only refusals, {} acknowledged rows the final primary lacks",
        writers, written.acked, written.tries, written.rate, written.read_only, written.missing
    );
    namespace.delete().await;
}

/// Freezes the primary, waits for the failover away from it, thaws it a few seconds later and
/// waits until every server replicates again.
async fn freeze_the_primary(site: &Site) -> RoleChange {
    let primary = site.primary().await;
    let before = site.last_failover().await;
    site.annotate(&primary, json!({"kubelet-shim/freeze": "true"}), true).await;
    let change = site.failover_from(&primary, before.as_ref()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    site.annotate(&primary, json!({"kubelet-shim/freeze": null}), true).await;
    site.healthy().await;
    change
}

fn median_and_worst(mut values: Vec<f64>) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], values[values.len() - 1])
}
