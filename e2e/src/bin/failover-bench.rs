//! The write gaps of a replicated VisitorsApp's failovers and switchovers, as a client sees
//! them (bench/high-availability/run.sh). On the cluster of KUBECONFIG with the suite installed: an
//! app with three MySQL servers, a writer committing numbered rows through the primary Service
//! all along, then DELETIONS primary pods deleted, FREEZES primaries frozen (the test cluster's
//! `kubelet-shim/freeze` annotation, thawed a few seconds later) and SWITCHOVERS switchovers,
//! each once the servers are healthy again. Prints each event's write gap as the controller
//! measured it and the writer's waits over a second, their median and worst, and how many
//! acknowledged rows the primary lacks at the end. The writer gives up on a try after
//! TRY_SECONDS (a client's statement timeout): a try sent to a primary as it goes away waits
//! that long, so the longest wait a client sees is about its own timeout plus the failover.
//!
//!     failover-bench [DELETIONS] [FREEZES] [SWITCHOVERS] [TRY_SECONDS]     default: 5 5 3 5

use std::time::Duration;

use kube::api::DeleteParams;
use serde_json::json;
use visitors_api::visitors_app::{SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION};
use visitors_e2e::replication::{Site, create_replicated_app};
use visitors_e2e::{TestNamespace, cluster, wait_for};

const APP: &str = "bench";

#[tokio::main]
async fn main() {
    let counts: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let count = |i: usize, default: usize| counts.get(i).copied().unwrap_or(default);
    let (deletions, freezes, switchovers, try_seconds) = (count(0, 5), count(1, 5), count(2, 3), count(3, 5));
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha-bench").await;
    let mut site = Site::new(&client, &namespace.name, APP, 3);
    create_replicated_app(&site.apps, APP, 3).await;
    site.healthy().await;
    let writer = site.job("writer");
    site.start_writer(&writer, try_seconds as u32).await;

    let mut measured: Vec<(&str, Option<f64>)> = Vec::new();
    for _ in 0..deletions {
        let primary = site.primary().await;
        let before = site.last_failover().await;
        site.pods.delete(&primary, &DeleteParams::default()).await.expect("delete the primary's pod");
        measured.push(("pod deleted", site.failover_from(&primary, before.as_ref()).await.write_gap_seconds));
        site.healthy().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for _ in 0..freezes {
        let primary = site.primary().await;
        let before = site.last_failover().await;
        site.annotate(&primary, json!({"kubelet-shim/freeze": "true"}), true).await;
        measured.push(("primary frozen", site.failover_from(&primary, before.as_ref()).await.write_gap_seconds));
        tokio::time::sleep(Duration::from_secs(3)).await;
        site.annotate(&primary, json!({"kubelet-shim/freeze": null}), true).await;
        site.healthy().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    for round in 0..switchovers {
        let request = format!("bench-{round}");
        let annotations = json!({SWITCHOVER_REQUESTED_AT_ANNOTATION: request, SWITCHOVER_TO_ANNOTATION: null});
        site.annotate(APP, annotations, false).await;
        let done = wait_for("the switchover", || async {
            match site.replication().await.last_switchover {
                Some(change) if change.request.as_deref() == Some(request.as_str()) => Ok(change),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        measured.push(("switchover", done.write_gap_seconds));
        site.healthy().await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let written = site.stop_writer(&writer).await;
    let primary = site.primary().await;
    let held = site.held(&primary, &written).await;

    println!("| event | write gap measured by the controller (s) |");
    println!("|---|---|");
    for (event, gap) in &measured {
        println!("| {event} | {} |", gap.map_or("-".to_string(), |g| format!("{g:.1}")));
    }
    for kind in ["pod deleted", "primary frozen", "switchover"] {
        let gaps: Vec<f64> = measured.iter().filter(|(k, _)| *k == kind).filter_map(|(_, g)| *g).collect();
        let (median, worst) = median_and_worst(gaps.clone());
        println!("{kind}: {} events, controller's gap median {median:.1} s, worst {worst:.1} s", gaps.len());
    }
    let (median, worst) = median_and_worst(written.gaps.clone());
    println!(
        "writer: {} rows acknowledged of {} tries; waits over 1 s: {:?}; median {median:.1} s, worst {worst:.1} s",
        written.acked.len(),
        written.tries,
        written.gaps
    );
    println!("acknowledged rows the primary {primary} lacks: {}", written.acked.len() - held);
    namespace.delete().await;
}

fn median_and_worst(mut values: Vec<f64>) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    (values[values.len() / 2], values[values.len() - 1])
}
