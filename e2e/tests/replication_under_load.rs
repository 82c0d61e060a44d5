//! High availability at a write peak (issue 40), on a real cluster: a VisitorsApp with three
//! MySQL servers and the pooled writer (`src/bin/pooled-writer.rs`): four sessions, each holding
//! its connection open, committing single-row inserts through the client Service as fast as they
//! are acknowledged. One app goes through the scenarios in turn:
//!
//! 1. sixty seconds at full speed: every replica applies what the primary commits (its distance
//!    stays within a few seconds of commits) and holds what the primary holds soon after the
//!    load stops; the status shows each replica's positions and apply rate and the expected failover wait; no server
//!    is ever taken for diverged;
//! 2. under the same load, a replica frozen 15 s and thawed, then the primary frozen: a failover
//!    to the replica with the least left to apply, its wait recorded;
//! 3. the frozen old primary's volume lost: it comes back empty and is seeded again, replicating
//!    from the new primary while the writers write;
//! 4. a switchover under the same load: the sessions, whose connections to the old primary are
//!    closed by the controller, reach the new primary; none keeps failing as read-only, and the
//!    old primary acknowledges no statement after the switchover; every acknowledged row of 2–4
//!    is on the primary and every replica equals it.
//!
//! No timed assertion on the write gaps: their figures come from bench/high-availability/run.sh.

use std::time::Duration;

use serde_json::json;
use visitors_api::conditions::{self, REPLICA_FALLING_BEHIND};
use visitors_e2e::replication::{Load, Pooled, Site, create_replicated_app, pooled_tables};
use visitors_e2e::{TestNamespace, cluster, events_of, plugin, wait_for};

const APP: &str = "peak";
const SERVERS: i32 = 3;
const WRITERS: u32 = 4;
/// A replica keeps up when it is never further behind than this many seconds of commits.
const KEPT_UP_SECONDS: f64 = 5.0;

#[tokio::test]
#[ignore = "needs a cluster with visitors-operator installed (e2e/run.sh)"]
async fn replicas_keep_up_with_writers_at_full_speed_through_freezes_reseeding_and_a_switchover() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "peak").await;
    let ns = namespace.name.clone();
    eprintln!("namespace {ns}");
    let mut site = Site::new(&client, &ns, APP, SERVERS);
    create_replicated_app(&site.apps, APP, SERVERS).await;
    site.healthy().await;
    let servers = site.server_pods();
    let load = |seconds| Load { writers: WRITERS, seconds, try_seconds: 2, watch: servers.clone() };

    // 1. Sixty seconds at full speed.
    let writer = site.job("writer");
    site.start_pooled_writer(&writer, &load(60)).await;
    let measured = wait_for("the status to show each replica's apply rate", || async {
        let replication = site.replication().await;
        let replicas = replication.members.iter().filter(|m| m.applied.is_some());
        let shown = replicas.clone().count() == 2 && replicas.clone().all(|m| m.apply_rate.is_some_and(|r| r > 0.0));
        match (replication.commit_rate, replication.expected_failover_wait_seconds, shown) {
            (Some(rate), Some(_), true) if rate > 0.0 => Ok(replication),
            _ => Err(format!("{replication:?}")),
        }
    })
    .await;
    eprintln!(
        "measured: commits {:?}/s, expected failover wait {:?} s",
        measured.commit_rate, measured.expected_failover_wait_seconds
    );
    let full_speed = stopped_by_itself(&site, &writer).await;
    eprintln!("full speed: {full_speed:?}");
    assert_eq!(full_speed.missing, 0, "every acknowledged row is on the primary: {full_speed:?}");
    assert!(full_speed.acked > 1000, "the writers wrote at speed: {full_speed:?}");
    let primary = site.primary().await;
    for (host, applied, behind, caught_up) in &full_speed.watched {
        if host.starts_with(&format!("{primary}.")) {
            continue;
        }
        let bound = (full_speed.commits * KEPT_UP_SECONDS) as u64;
        assert!(
            *behind <= bound.max(500),
            "{host} was {behind} transactions behind, more than {KEPT_UP_SECONDS} s of the primary's {} commits a second (it applied {applied} a second)",
            full_speed.commits
        );
        assert!(
            (0.0..=30.0).contains(caught_up),
            "{host} held what the primary holds {caught_up} s after the load stopped (-1: not within the writer's wait)"
        );
    }
    let app = site.apps.get(APP).await.expect("read the app");
    let status = app.status.unwrap_or_default();
    assert!(
        conditions::find(&status.conditions, REPLICA_FALLING_BEHIND).is_some_and(|c| c.status == "False"),
        "no replica falls behind: {:?}",
        status.conditions
    );
    let diverged: Vec<String> = events_of(&client, &ns, APP)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Diverged"))
        .filter_map(|e| e.note)
        .collect();
    assert!(diverged.is_empty(), "a healthy server was taken for diverged under load: {diverged:?}");
    let shown = plugin::run(&ns, &["status", APP]).await;
    let (screen, _) = plugin::text(&shown);
    assert!(screen.contains("failover would wait"), "kubectl visitors status shows the failover budget:\n{screen}");

    // 2. A replica frozen 15 s and thawed, then the primary frozen, under the same load.
    let writer = site.job("writer");
    site.start_pooled_writer(&writer, &load(3600)).await;
    let primary = site.primary().await;
    let lagging = site.server_pods().into_iter().find(|pod| *pod != primary).expect("a replica");
    site.annotate(&lagging, json!({"kubelet-shim/freeze": "true"}), true).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    site.annotate(&lagging, json!({"kubelet-shim/freeze": null}), true).await;
    let before = site.last_failover().await;
    site.annotate(&primary, json!({"kubelet-shim/freeze": "true"}), true).await;
    let failover = site.failover_from(&primary, before.as_ref()).await;
    eprintln!("failover after a replica's freeze: {failover:?}");
    let message = failover.message.clone().unwrap_or_default();
    let chosen = failover.to.clone().expect("a new primary");
    assert_the_least_left_to_apply_won(&message, &chosen);
    assert!(failover.apply_wait_seconds.is_some(), "the promotion's wait for apply is recorded: {failover:?}");

    // 3. The frozen old primary's volume lost, under the same load: it comes back empty, is
    // seeded while the writers write, and replicates from the new primary.
    site.lose_volume(&primary).await;
    site.healthy().await;
    let seeded = site.replication().await;
    assert!(
        seeded.members.iter().any(|m| m.name == primary && m.role == visitors_api::visitors_app::MemberRole::Replica)
    );

    // 4. A switchover under the same load: the sessions leave the old primary.
    let old = site.primary().await;
    let old_id = site.on(&old, "SELECT @@server_id").await;
    let asked = plugin::run(&ns, &["switchover", APP, "-o", "json"]).await;
    assert!(asked.status.success(), "switchover: {}", plugin::text(&asked).1);
    let switched = site.replication().await.last_switchover.expect("a switchover");
    // The status records the time to the second, rounded down.
    let switched_at = switched.time.0.as_duration().as_secs_f64() + 1.0;
    site.healthy().await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pooled = site.stop_pooled_writer(&writer).await;
    eprintln!("through the freezes, the seeding and the switchover {old} -> {:?}: {pooled:?}", switched.to);
    assert_eq!(pooled.missing, 0, "every acknowledged row is on the primary: {pooled:?}");
    assert!(
        pooled.read_only == 0 || pooled.last_read_only < switched_at + 12.0,
        "a session kept failing as read-only on the old primary: the last at {}, the switchover at {switched_at}: {pooled:?}",
        pooled.last_read_only
    );
    let new = site.primary().await;
    let late = format!(
        "SELECT CONCAT(SUM(server_id = {old_id} AND at > FROM_UNIXTIME({switched_at:.3})), ' ', SUM(at > FROM_UNIXTIME({:.3}))) FROM {}",
        switched_at + 2.0,
        pooled_tables(&writer).0
    );
    let counts = site.on(&new, &late).await;
    let (from_old, after) = counts.split_once(' ').expect("two counts");
    assert_eq!(from_old, "0", "the old primary {old} acknowledged a statement after the switchover");
    assert!(after.parse::<u64>().unwrap_or(0) > 100, "the sessions wrote on after the switchover: {counts}");
    site.replicas_hold_what_the_primary_holds(&pooled_tables(&writer).0).await;
    namespace.delete().await;
}

/// Waits for the writer Job `writer`, which stops by itself, and reads its report.
async fn stopped_by_itself(site: &Site, writer: &str) -> Pooled {
    let output = wait_for("the pooled writer to finish", || {
        visitors_e2e::job_output_when_ended(&site.client, &site.namespace, writer)
    })
    .await;
    Pooled::parse(&output)
}

/// The failover's message names what each candidate had left to apply: the one promoted had
/// the least of those that received everything.
fn assert_the_least_left_to_apply_won(message: &str, chosen: &str) {
    let number = |text: &str| text.trim_matches(|c: char| !c.is_ascii_digit()).parse::<u64>().ok();
    let chosen_left = message
        .split_once("the least left to apply (")
        .and_then(|(_, rest)| number(rest.split(')').next()?))
        .unwrap_or_else(|| panic!("no backlog of {chosen} in: {message}"));
    assert!(message.contains(&format!("{chosen} had received every transaction")), "{message}");
    let others = message.split_once("); ").map_or("", |(_, rest)| rest.split("; its promotion").next().unwrap_or(""));
    for other in others.split(", ").filter(|o| o.contains("left to apply")) {
        let theirs =
            number(other.split(" left to apply").next().unwrap_or_default().rsplit(' ').next().unwrap_or_default())
                .unwrap_or_else(|| panic!("{other} in {message}"));
        assert!(chosen_left <= theirs, "{chosen} had {chosen_left} left, {other}: {message}");
    }
}

#[test]
fn the_failover_message_is_read_for_each_candidates_backlog() {
    let message = "failed over from peak-mysql-0 to peak-mysql-2: peak-mysql-2 had received every transaction any server had (0-26-125220) and had the least left to apply (12); peak-mysql-1 had 44070 left to apply; its promotion waited 0.3 s for it to apply the 12 transactions it had received";
    assert_the_least_left_to_apply_won(message, "peak-mysql-2");
    let wrong = message.replace("(12)", "(50000)");
    assert!(std::panic::catch_unwind(|| assert_the_least_left_to_apply_won(&wrong, "peak-mysql-2")).is_err());
}
