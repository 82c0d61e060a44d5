//! A pooled client at full speed: the load of the high-availability scenarios and benchmarks
//! (docs/benchmarks.md), run as a Job's container. WRITERS sessions each hold one connection
//! open to HOST (the client Service) and commit small autocommit inserts one after the other,
//! as fast as they are acknowledged (or RATE a second in all). A session keeps its connection as
//! a connection pool does: across the server's errors (a read-only server's among them), and it
//! connects again only when the connection breaks or a statement outlives TRY_SECONDS.
//!
//! Each row records the server that committed it (`@@server_id`) and when. Until the table
//! STOP_TABLE exists (looked for every second) or SECONDS passed, then it reads the table back
//! through HOST and reports, on one line (stdout and the termination message):
//! `acked=<rows acknowledged> tries=<n> missing=<acknowledged rows HOST lacks> rate=<acks a
//! second> gap=<longest wait between two acknowledgements of any session> gaps=<every wait over
//! a second, as seconds@unix-time-it-ended> read_only=<statements refused as read-only>
//! last_read_only=<unix time of the last> reconnects=<n> errors=<other errors>`.
//!
//! With WATCH_HOSTS (server addresses, space-separated), it also reads every server's GTID
//! position every second, and once the load stops, until each holds what the most advanced one
//! holds (or CATCH_UP_SECONDS passed); it adds, per server, `watch=<host>:<transactions applied
//! a second during the load>:<most transactions behind the most advanced server during the last
//! half of the load>:<seconds after the load stopped until it caught up, or -1>` and the
//! servers' commit rate `commits=<transactions a second of the most advanced one>`.
//!
//! Environment: HOST, PORT (3306), DB_USER, MYSQL_PWD, DATABASE (visitors), TABLE
//! (pooled_writes), STOP_TABLE (ha_stop), WRITERS (4), SECONDS (3600), TRY_SECONDS (5), RATE (0:
//! as fast as acknowledged), CA_FILE (/etc/visitors/mysql-ca/ca.crt, used when present),
//! WATCH_HOSTS, CATCH_UP_SECONDS (120).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, SslOpts};

/// MySQL's and MariaDB's answers of a read-only server to a write.
const READ_ONLY_ERRORS: [u16; 2] = [1290, 1836];
/// How long a session waits before it tries again after an error.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// A wait between two acknowledgements that is reported one by one.
const REPORTED_GAP: Duration = Duration::from_secs(1);

struct Settings {
    opts: Opts,
    table: String,
    stop_table: String,
    database: String,
    writers: u64,
    seconds: u64,
    try_timeout: Duration,
    rate: u64,
}

#[derive(Default)]
struct Tally {
    acked: Vec<u64>,
    tries: u64,
    read_only: u64,
    last_read_only: Option<f64>,
    reconnects: u64,
    errors: u64,
}

/// When the last acknowledgement of any session came, and the waits between them.
struct Gaps {
    last: Instant,
    longest: Duration,
    reported: Vec<(f64, f64)>,
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn number(name: &str, default: u64) -> u64 {
    env(name, &default.to_string()).parse().unwrap_or_else(|_| panic!("{name} is not a number"))
}

fn settings() -> Settings {
    let database = env("DATABASE", "visitors");
    let mut builder = OptsBuilder::default()
        .ip_or_hostname(env("HOST", "127.0.0.1"))
        .tcp_port(number("PORT", 3306) as u16)
        .user(Some(env("DB_USER", "root")))
        .pass(Some(env("MYSQL_PWD", "")))
        .db_name(Some(database.clone()))
        .prefer_socket(false)
        .conn_ttl(None)
        .wait_timeout(None);
    let ca = env("CA_FILE", "/etc/visitors/mysql-ca/ca.crt");
    if std::path::Path::new(&ca).exists() {
        builder = builder.ssl_opts(SslOpts::default().with_root_certs(vec![std::path::PathBuf::from(ca).into()]));
    }
    Settings {
        opts: builder.into(),
        table: env("TABLE", "pooled_writes"),
        stop_table: env("STOP_TABLE", "ha_stop"),
        database,
        writers: number("WRITERS", 4).max(1),
        seconds: number("SECONDS", 3600),
        try_timeout: Duration::from_secs(number("TRY_SECONDS", 5).max(1)),
        rate: number("RATE", 0),
    }
}

fn unix_now() -> f64 {
    jiff::Timestamp::now().as_duration().as_secs_f64()
}

async fn connect(settings: &Settings) -> Result<Conn, String> {
    match tokio::time::timeout(settings.try_timeout, Conn::new(settings.opts.clone())).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("connect timed out".into()),
    }
}

/// What one statement's error means for its session's connection.
enum Failure {
    /// The server refused the write as read-only: the connection stays, as a pool keeps it.
    ReadOnly,
    /// Another answer of the server: the connection stays.
    Server,
    /// The connection broke or the statement timed out: connect again.
    Broken,
}

fn classify(error: &mysql_async::Error) -> Failure {
    match error {
        mysql_async::Error::Server(server) if READ_ONLY_ERRORS.contains(&server.code) => Failure::ReadOnly,
        // A killed connection (MariaDB 1927, MySQL 1317/3169) and a shutdown (1053) end it.
        mysql_async::Error::Server(server) if ![1927, 1053, 1317, 3169].contains(&server.code) => Failure::Server,
        _ => Failure::Broken,
    }
}

async fn session(
    first: u64,
    writer: u64,
    settings: Arc<Settings>,
    stop: Arc<AtomicBool>,
    gaps: Arc<Mutex<Gaps>>,
    paced: Arc<AtomicU64>,
    started: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut conn: Option<Conn> = None;
    let insert = format!("INSERT INTO {} VALUES (?, ?, @@server_id, NOW(6))", settings.table);
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if settings.rate > 0 {
            let slot = paced.fetch_add(1, Ordering::Relaxed);
            let due = started + Duration::from_secs_f64(slot as f64 / settings.rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let mut current = match conn.take() {
            Some(current) => current,
            None => match connect(&settings).await {
                Ok(fresh) => {
                    tally.reconnects += 1;
                    fresh
                }
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let id = first + writer + k * settings.writers;
        k += 1;
        tally.tries += 1;
        let outcome = tokio::time::timeout(settings.try_timeout, current.exec_drop(&insert, (id, writer))).await;
        match outcome {
            Ok(Ok(())) => {
                tally.acked.push(id);
                conn = Some(current);
                let now = Instant::now();
                let mut gaps = gaps.lock().unwrap();
                let waited = now - gaps.last;
                gaps.longest = gaps.longest.max(waited);
                if waited > REPORTED_GAP {
                    gaps.reported.push((waited.as_secs_f64(), unix_now()));
                }
                gaps.last = now;
            }
            Ok(Err(error)) => {
                match classify(&error) {
                    Failure::ReadOnly => {
                        tally.read_only += 1;
                        tally.last_read_only = Some(unix_now());
                        conn = Some(current);
                    }
                    Failure::Server => {
                        tally.errors += 1;
                        conn = Some(current);
                    }
                    Failure::Broken => tally.errors += 1,
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            // Timed out: the connection is dropped, as a pool evicts one that outlived its
            // statement timeout.
            Err(_) => tally.errors += 1,
        }
    }
    tally
}

/// Creates the table if need be, and returns the first row number free in it: each run's
/// sessions number their rows from there (session `w`'s `k`-th row is `first + w + k * WRITERS`).
async fn prepare(settings: &Settings) -> u64 {
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {} (id BIGINT PRIMARY KEY, writer INT NOT NULL, server_id INT UNSIGNED NOT NULL, at DATETIME(6) NOT NULL)",
        settings.table
    );
    let next = format!("SELECT IFNULL(MAX(id), -1) + 1 FROM {}", settings.table);
    loop {
        match connect(settings).await {
            Ok(mut conn) => {
                let prepared = async {
                    conn.query_drop(&create).await?;
                    conn.query_first::<u64, _>(&next).await
                };
                match prepared.await {
                    Ok(first) => return first.unwrap_or(0),
                    Err(error) => eprintln!("preparing {}: {error}", settings.table),
                }
            }
            Err(error) => eprintln!("connecting: {error}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Whether the stop table exists (an unanswered look says no).
async fn asked_to_stop(settings: &Settings) -> bool {
    let look = format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = '{}' AND table_name = '{}'",
        settings.database, settings.stop_table
    );
    let Ok(mut conn) = connect(settings).await else { return false };
    let answer = tokio::time::timeout(Duration::from_secs(2), conn.query_first::<u64, _>(look)).await;
    matches!(answer, Ok(Ok(Some(1))))
}

/// The acknowledged rows the table read through HOST lacks (retried until it answers).
async fn missing(settings: &Settings, acked: &[u64]) -> Vec<u64> {
    loop {
        let read = async {
            let mut conn = connect(settings).await?;
            let held: Vec<u64> =
                conn.query(format!("SELECT id FROM {}", settings.table)).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(held.into_iter().collect::<HashSet<u64>>())
        };
        match read.await {
            Ok(held) => return acked.iter().copied().filter(|id| !held.contains(id)).collect(),
            Err(error) => eprintln!("reading the table back: {error}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The transactions a GTID position holds: MariaDB's `domain-server-sequence` per domain (the
/// sum of the sequence numbers), MySQL's `uuid:interval:...` sets (the sum of the intervals).
fn transactions(position: &str) -> u64 {
    position
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once(':') {
            Some((_, intervals)) => intervals
                .split(':')
                .map(|interval| match interval.split_once('-') {
                    Some((a, b)) => b.parse::<u64>().unwrap_or(0) + 1 - a.parse::<u64>().unwrap_or(1),
                    None => 1,
                })
                .sum(),
            None => item.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0),
        })
        .sum()
}

/// Every watched server's transactions, a look a second: `(since start, per server)`.
type Samples = Vec<(f64, Vec<Option<u64>>)>;

async fn watch(
    settings: Arc<Settings>,
    hosts: Vec<String>,
    stopped_at: Arc<Mutex<Option<f64>>>,
    started: Instant,
) -> Samples {
    let catch_up = Duration::from_secs(number("CATCH_UP_SECONDS", 120));
    let mut conns: Vec<Option<Conn>> = hosts.iter().map(|_| None).collect();
    let mut samples: Samples = Vec::new();
    loop {
        let mut look = Vec::new();
        for (host, conn) in hosts.iter().zip(conns.iter_mut()) {
            if conn.is_none() {
                let opts = OptsBuilder::from_opts(settings.opts.clone()).ip_or_hostname(host.clone());
                *conn = tokio::time::timeout(Duration::from_secs(2), Conn::new(opts)).await.ok().and_then(Result::ok);
            }
            let read = match conn.as_mut() {
                Some(c) => {
                    tokio::time::timeout(Duration::from_secs(2), c.query_first::<String, _>("SELECT @@gtid_binlog_pos"))
                        .await
                }
                None => {
                    look.push(None);
                    continue;
                }
            };
            match read {
                Ok(Ok(position)) => look.push(Some(transactions(&position.unwrap_or_default()))),
                _ => {
                    *conn = None;
                    look.push(None);
                }
            }
        }
        let now = started.elapsed().as_secs_f64();
        let most = look.iter().flatten().copied().max();
        let all_there = most.is_some() && look.iter().all(|n| *n == most);
        samples.push((now, look));
        let stopped = *stopped_at.lock().unwrap();
        if let Some(stopped) = stopped
            && (all_there || now - stopped > catch_up.as_secs_f64())
        {
            return samples;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `commits=<rate> watch=<host>:<applied a second>:<most behind in the load's last half>:<caught
/// up after>,...` of the samples.
fn watched(hosts: &[String], samples: &Samples, stopped: f64) -> String {
    let during: Vec<&(f64, Vec<Option<u64>>)> = samples.iter().filter(|(t, _)| *t <= stopped).collect();
    let (Some(first), Some(last)) = (during.first(), during.last()) else { return String::new() };
    let span = (last.0 - first.0).max(1.0);
    let most = |look: &Vec<Option<u64>>| look.iter().flatten().copied().max().unwrap_or(0);
    let commits = (most(&last.1).saturating_sub(most(&first.1))) as f64 / span;
    let half = first.0 + (last.0 - first.0) / 2.0;
    let per_host: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let applied = match (first.1[i], last.1[i]) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / span,
                _ => f64::NAN,
            };
            let behind = during
                .iter()
                .filter(|(t, _)| *t >= half)
                .filter_map(|(_, look)| look[i].map(|n| most(look).saturating_sub(n)))
                .max()
                .unwrap_or(0);
            let caught_up = samples
                .iter()
                .filter(|(t, _)| *t >= stopped)
                .find(|(_, look)| look[i].is_some() && look[i] == look.iter().flatten().copied().max())
                .map_or(-1.0, |(t, _)| t - stopped);
            format!("{host}:{applied:.0}:{behind}:{caught_up:.1}")
        })
        .collect();
    format!(" commits={commits:.0} watch={}", per_host.join(","))
}

#[tokio::main]
async fn main() {
    // Built with the rest of the workspace, rustls sees two providers (ring, and aws-lc-rs of
    // the agent's object store): it is told which, as every binary of the workspace does.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Arc::new(settings());
    let first = prepare(&settings).await;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let gaps = Arc::new(Mutex::new(Gaps { last: started, longest: Duration::ZERO, reported: Vec::new() }));
    let paced = Arc::new(AtomicU64::new(0));
    let sessions: Vec<_> = (0..settings.writers)
        .map(|writer| {
            tokio::spawn(session(first, writer, settings.clone(), stop.clone(), gaps.clone(), paced.clone(), started))
        })
        .collect();
    let hosts: Vec<String> = env("WATCH_HOSTS", "").split_whitespace().map(String::from).collect();
    let stopped_at = Arc::new(Mutex::new(None));
    let watcher =
        (!hosts.is_empty()).then(|| tokio::spawn(watch(settings.clone(), hosts.clone(), stopped_at.clone(), started)));
    let deadline = started + Duration::from_secs(settings.seconds);
    while Instant::now() < deadline && !asked_to_stop(&settings).await {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let stopped = started.elapsed().as_secs_f64();
    *stopped_at.lock().unwrap() = Some(stopped);
    let mut total = Tally::default();
    for session in sessions {
        let tally = session.await.expect("a session");
        total.acked.extend(tally.acked);
        total.tries += tally.tries;
        total.read_only += tally.read_only;
        total.last_read_only = [total.last_read_only, tally.last_read_only].into_iter().flatten().reduce(f64::max);
        total.reconnects += tally.reconnects;
        total.errors += tally.errors;
    }
    let elapsed = stopped;
    let watched = match watcher {
        Some(watcher) => watched(&hosts, &watcher.await.expect("the watcher"), stopped),
        None => String::new(),
    };
    let missing = missing(&settings, &total.acked).await;
    let gaps = gaps.lock().unwrap();
    let reported: Vec<String> = gaps.reported.iter().take(60).map(|(wait, at)| format!("{wait:.2}@{at:.2}")).collect();
    let line = format!(
        "acked={} tries={} missing={} rate={:.0} gap={:.2} gaps={} read_only={} last_read_only={:.2} reconnects={} errors={}{watched}",
        total.acked.len(),
        total.tries,
        missing.len(),
        total.acked.len() as f64 / elapsed,
        gaps.longest.as_secs_f64(),
        reported.join(","),
        total.read_only,
        total.last_read_only.unwrap_or(0.0),
        total.reconnects,
        total.errors,
    );
    println!("{line}");
    if !missing.is_empty() {
        let some: Vec<String> = missing.iter().take(20).map(u64::to_string).collect();
        println!("missing acknowledged rows (first 20): {}", some.join(","));
    }
    let _ = std::fs::write("/dev/termination-log", &line);
}
