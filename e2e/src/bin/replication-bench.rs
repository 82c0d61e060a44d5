//! Replication lag and seeding time of a replicated VisitorsApp (bench/high-availability/run.sh),
//! on the cluster of KUBECONFIG with the suite installed: an app with three MySQL servers.
//!
//!     replication-bench lag [RATE] [SECONDS]     default: 500 60
//!
//! Four sessions on the primary commit RATE single-row transactions a second in all for SECONDS.
//! On each replica a trigger (created there alone, outside the binary log, and run for
//! row-based events: `slave_run_triggers_for_rbr`) stamps every row with the replica's clock as
//! it is applied; a row's lag is that stamp minus the time the primary wrote it (one machine,
//! one clock). Prints p50, p99 and max per replica.
//!
//!     replication-bench load [WRITERS] [SECONDS] [APPLIER_THREADS]   default: 4 60 (the app's default)
//!
//! The pooled writer (src/bin/pooled-writer.rs): WRITERS sessions commit single-row inserts
//! through the client Service as fast as they are acknowledged, for SECONDS; it follows every
//! server's GTID position each second. Prints the primary's commit rate, each replica's apply
//! rate against it, the most each replica was behind during the last half of the load, and how
//! long each took to catch up once the load stopped. APPLIER_THREADS sets the app's
//! `spec.mysql.replication.applierThreads` (1: one transaction at a time, as before issue 40).
//!
//!     replication-bench seed [MIB] [WRITERS]     default: 1024 0
//!
//! With WRITERS, the pooled writer runs from before the volume is lost until the server is
//! seeded: seeding while the app writes at its peak.
//!
//! Loads MIB MiB of rows through the primary, then loses a replica's volume (its claim and pod
//! deleted; on the test cluster its folder moved away) and times how long the new empty server
//! takes to be seeded (from the other replica) until it replicates from the primary and holds
//! what the primary holds.
//!
//!     replication-bench seed-backup [MIB]        default: 1024
//!
//! The same, but every server's binary logs are purged after the load and a drilled backup run
//! taken (not timed): the new empty server cannot replicate the history, so it is loaded from
//! the run, then replicates from the primary what came after.
//!
//!     replication-bench controller [APPS] [SECONDS]   default: 10 120
//!
//! Creates APPS apps of three servers at once, waits until every replica of each replicates,
//! then reads the VisitorsApp controller's process (the chart's, a local process on the test
//! cluster): its CPU seconds over SECONDS of steady state, its resident memory then and at its
//! peak, and its reconciles.

use std::time::Instant;

use visitors_e2e::replication::{Load, Site, create_replicated_app_with, pod_sql_job};
use visitors_e2e::{TestNamespace, cluster, create_backup_claim, mariadb_job, run_job};

const APP: &str = "bench";

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "ha-bench").await;
    if args.first().map(String::as_str) == Some("controller") {
        controller(&client, &namespace.name, number(1, 10), number(2, 120)).await;
        namespace.delete().await;
        return;
    }
    let mut site = Site::new(&client, &namespace.name, APP, 3);
    let replication = match (args.first().map(String::as_str), args.get(3)) {
        (Some("load"), Some(threads)) => {
            serde_json::json!({"applierThreads": threads.parse::<i32>().expect("a number of threads")})
        }
        _ => serde_json::json!({}),
    };
    create_replicated_app_with(&site.apps, APP, 3, replication).await;
    site.healthy().await;
    match args.first().map(String::as_str) {
        Some("lag") => lag(&mut site, number(1, 500), number(2, 60)).await,
        Some("load") => load_at_full_speed(&mut site, number(1, 4) as u32, number(2, 60)).await,
        Some("seed") => seed(&mut site, number(1, 1024), false, number(2, 0) as u32).await,
        Some("seed-backup") => seed(&mut site, number(1, 1024), true, 0).await,
        other => panic!(
            "replication-bench lag [RATE] [SECONDS] | seed [MIB] | seed-backup [MIB] | controller [APPS] [SECONDS], not {other:?}"
        ),
    }
    namespace.delete().await;
}

async fn lag(site: &mut Site, rate: u64, seconds: u64) {
    let table = "CREATE TABLE visitors.lag (id INT PRIMARY KEY, written DATETIME(6) NOT NULL, applied DATETIME(6))";
    run_job(&site.client, &site.namespace, "lag-table", mariadb_job(APP, &site.namespace, "lag-table", table)).await;
    let primary = site.primary().await;
    let replicas: Vec<String> = (0..3).map(|i| format!("{APP}-mysql-{i}")).filter(|p| *p != primary).collect();
    site.replicas_hold_what_the_primary_holds("lag").await;
    // The trigger exists on the replicas only (created outside the binary log): on the primary
    // it would stamp the row first, and the row event would carry the primary's stamp.
    let trigger = "SET SESSION sql_log_bin = 0; SET GLOBAL slave_run_triggers_for_rbr = YES; \
         CREATE TRIGGER visitors.lag_applied BEFORE INSERT ON visitors.lag FOR EACH ROW SET NEW.applied = SYSDATE(6)";
    for replica in &replicas {
        site.execute(replica, trigger).await;
    }
    let total = rate * seconds;
    let sessions = SESSIONS.min(total.max(1));
    let started = Instant::now();
    let loads = (0..sessions).map(|session| {
        let name = format!("load-{session}");
        let job = pod_sql_job(APP, &site.namespace, &name, &primary, &load(session, sessions, total, rate));
        let (client, namespace) = (site.client.clone(), site.namespace.clone());
        async move { run_job(&client, &namespace, &name, job).await }
    });
    futures::future::join_all(loads).await;
    let took = started.elapsed().as_secs_f64();
    let span = site
        .on(&primary, "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(written), MAX(written)) / 1000000 FROM visitors.lag")
        .await;
    println!(
        "{total} transactions from {sessions} sessions in {span} s ({:.0} a second; the Jobs took {took:.1} s) on primary {primary}",
        total as f64 / span.parse::<f64>().unwrap_or(f64::NAN)
    );
    println!("| replica | rows applied | p50 | p99 | max |");
    println!("|---|---|---|---|---|");
    for replica in &replicas {
        loop {
            let count: u64 = site.on(replica, "SELECT COUNT(*) FROM visitors.lag").await.parse().unwrap_or(0);
            if count >= total {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        let percentiles = "SELECT CONCAT_WS(' ', n, MAX(IF(rn = CEIL(n * 0.5), ms, NULL)), MAX(IF(rn = CEIL(n * 0.99), ms, NULL)), MAX(ms)) \
             FROM (SELECT TIMESTAMPDIFF(MICROSECOND, written, applied) / 1000 AS ms, \
             ROW_NUMBER() OVER (ORDER BY TIMESTAMPDIFF(MICROSECOND, written, applied)) AS rn, COUNT(*) OVER () AS n \
             FROM visitors.lag) ranked GROUP BY n";
        let answer = site.on(replica, percentiles).await;
        let fields: Vec<&str> = answer.split_whitespace().collect();
        println!("| {replica} | {} | {} ms | {} ms | {} ms |", fields[0], fields[1], fields[2], fields[3]);
    }
}

/// Parallel sessions of the load: one session's commits, each waiting for a replica's
/// acknowledgement and two flushes, do not reach 500 a second.
const SESSIONS: u64 = 4;

/// The SQL of one session of the load: rows `session`, `session + sessions`, ... below `total`,
/// paced by the wall clock so that all sessions together commit `rate` a second.
fn load(session: u64, sessions: u64, total: u64, rate: u64) -> String {
    format!(
        "DELIMITER //\nBEGIN NOT ATOMIC DECLARE i INT DEFAULT {session}; DECLARE started DATETIME(6) DEFAULT SYSDATE(6); \
         WHILE i < {total} DO INSERT INTO visitors.lag (id, written) VALUES (i, SYSDATE(6)); SET i = i + {sessions}; \
         IF i % (10 * {sessions}) < {sessions} THEN DO SLEEP(GREATEST(0, i / {rate} - TIMESTAMPDIFF(MICROSECOND, started, SYSDATE(6)) / 1000000)); END IF; \
         END WHILE; END//"
    )
}

async fn load_at_full_speed(site: &mut Site, writers: u32, seconds: u64) {
    let primary = site.primary().await;
    let load = Load { writers, seconds: 3600, try_seconds: 5, watch: site.server_pods() };
    let writer = site.job("writer");
    site.start_pooled_writer(&writer, &load).await;
    tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    let report = site.stop_pooled_writer(&writer).await;
    println!(
        "{writers} writers for {seconds} s: {} commits acknowledged ({:.0} a second), {} missing, longest wait {:.2} s",
        report.acked, report.rate, report.missing, report.gap
    );
    println!(
        "| server | applied a second | against the primary's commits | most behind (last half) | caught up after the load |"
    );
    println!("|---|---|---|---|---|");
    for (host, applied, behind, caught_up) in &report.watched {
        let server = host.split('.').next().unwrap_or(host);
        let role = if server == primary { " (primary)" } else { "" };
        let caught = if *caught_up < 0.0 { "not within 120 s".to_string() } else { format!("{caught_up:.0} s") };
        println!(
            "| {server}{role} | {applied:.0} | {:.2}x | {behind} transactions | {caught} |",
            applied / report.commits.max(1.0)
        );
    }
}

async fn seed(site: &mut Site, mib: u64, from_backup: bool, writers: u32) {
    let table = "CREATE TABLE visitors.bulk (id INT PRIMARY KEY, v VARCHAR(1000) NOT NULL)";
    run_job(&site.client, &site.namespace, "bulk-table", mariadb_job(APP, &site.namespace, "bulk-table", table)).await;
    // About 1 KiB a row, in transactions of 50,000 rows.
    let rows = mib * 1024;
    let mut loaded = 0;
    while loaded < rows {
        let upto = (loaded + 50_000).min(rows);
        let name = site.job("load");
        let sql = format!("INSERT INTO visitors.bulk SELECT seq, REPEAT('x', 1000) FROM seq_{}_to_{upto}", loaded + 1);
        run_job(&site.client, &site.namespace, &name, mariadb_job(APP, &site.namespace, &name, &sql)).await;
        loaded = upto;
    }
    let primary = site.primary().await;
    let size = site
        .on(&primary, "SELECT ROUND(SUM(data_length + index_length) / 1048576) FROM information_schema.tables WHERE table_schema = 'visitors' AND table_name = 'bulk'")
        .await;
    site.replicas_hold_what_the_primary_holds("bulk").await;
    if from_backup {
        purge_and_back_up(site).await;
    }
    let lost = (0..3).rev().map(|i| format!("{APP}-mysql-{i}")).find(|pod| *pod != primary).unwrap();
    let writer = site.job("writer");
    if writers > 0 {
        let load = Load { writers, seconds: 7200, try_seconds: 5, watch: Vec::new() };
        site.start_pooled_writer(&writer, &load).await;
    }
    let started = Instant::now();
    site.lose_volume(&lost).await;
    let back = started.elapsed().as_secs_f64();
    site.healthy().await;
    let replicating = started.elapsed().as_secs_f64();
    if writers > 0 {
        let written = site.stop_pooled_writer(&writer).await;
        println!(
            "the writers meanwhile: {writers} sessions, {} rows acknowledged ({:.0} a second), {} missing, longest wait {:.2} s",
            written.acked, written.rate, written.missing, written.gap
        );
    }
    site.replicas_hold_what_the_primary_holds("bulk").await;
    let equal = started.elapsed().as_secs_f64();
    if from_backup {
        site.event_about("SeedingFromBackup", &lost).await;
    }
    println!("| table | pod back | replicating from the primary | equal to the primary (checksum) |");
    println!("|---|---|---|---|");
    println!("| {size} MiB | {back:.1} s | {replicating:.1} s | {equal:.1} s |");
}

/// Purges every server's binary logs, then takes a backup run with a drill and waits until it
/// is verified.
async fn purge_and_back_up(site: &mut Site) {
    site.purge_binary_logs().await;
    create_backup_claim(&site.client, &site.namespace, "backups").await;
    site.verified_run("seed-run", "backups").await;
    let more = "INSERT INTO visitors.bulk SELECT seq, 'after the run' FROM seq_100000000_to_100000999";
    run_job(&site.client, &site.namespace, "after-run", mariadb_job(APP, &site.namespace, "after-run", more)).await;
}

async fn controller(client: &kube::Client, namespace: &str, apps: u64, seconds: u64) {
    let started = Instant::now();
    let sites: Vec<Site> = (0..apps).map(|i| Site::new(client, namespace, &format!("{APP}{i}"), 3)).collect();
    for site in &sites {
        create_replicated_app_with(&site.apps, &site.app, 3, serde_json::json!({})).await;
    }
    for site in &sites {
        site.healthy().await;
    }
    let healthy = started.elapsed().as_secs_f64();
    let pid = visitors_e2e::process::pid_of("visitors-controller").expect("one visitors-controller process");
    let reconciles = || async {
        let text = visitors_e2e::controller_metrics(client, "visitors").await.expect("the controller's /metrics");
        let labels = r#"controller="visitors-controller""#;
        visitors_e2e::metric_value(&text, "visitors_operator_reconciles_total", labels).expect("a reconcile count")
    };
    let (cpu_before, reconciles_before) = (visitors_e2e::process::cpu_seconds(pid), reconciles().await);
    tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
    let cpu = visitors_e2e::process::cpu_seconds(pid) - cpu_before;
    let reconciled = reconciles().await - reconciles_before;
    let (rss, peak) = visitors_e2e::process::resident_mib(pid);
    for site in &sites {
        let replication = site.replication().await;
        assert!(replication.last_failover.is_none(), "{}: {:?}", site.app, replication.last_failover);
    }
    println!(
        "| apps (servers) | all replicating after | controller CPU over {seconds} s | per app per minute | RSS now / peak | reconciles per app per minute |"
    );
    println!("|---|---|---|---|---|---|");
    let per_minute = 60.0 / seconds as f64 / apps as f64;
    println!(
        "| {apps} ({}) | {healthy:.0} s | {cpu:.1} s ({:.1} %) | {:.3} s | {rss:.1} / {peak:.1} MiB | {:.1} |",
        apps * 3,
        cpu / seconds as f64 * 100.0,
        cpu * per_minute,
        reconciled * per_minute
    );
}
