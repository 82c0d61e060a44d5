//! A physical backup of a replica under a writer holds the replica for the tool's stream and
//! records what every table held at the snapshot: exactly the rows of its GTID position, with
//! the content digest a drill recomputes from a restored copy. The replica replicates again
//! afterwards; a backup of a primary holds nothing and records no content.

use std::process::{Child, Command, Stdio};

use visitors_agent::content::read_table;
use visitors_agent::drill::{self, DrillOptions};
use visitors_agent::mysql::{Connector, catalog};
use visitors_agent::physical::hold;

use crate::physical::back_up_physically;
use crate::support::{MariaDb, programs_or_skip};

const BASE_ROWS: u64 = 20_000;

fn primary_with_rows() -> Option<MariaDb> {
    programs_or_skip(&["mariadb-backup", "mbstream"], "VISITORS_REQUIRE_MARIADB")?;
    let primary = MariaDb::start_primary()?;
    primary.sql(&format!(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(200)); \
         INSERT INTO shop.orders SELECT seq, REPEAT(MD5(seq), 6) FROM seq_1_to_{BASE_ROWS}"
    ));
    Some(primary)
}

/// One client inserting rows after the first ones, one transaction each, until killed.
fn writer(primary: &MariaDb) -> Child {
    let script: String = (1..=20_000)
        .map(|i| {
            let id = BASE_ROWS + i;
            format!("INSERT INTO shop.orders VALUES ({id}, REPEAT(MD5({id}), 6)); DO SLEEP(0.002);\n")
        })
        .collect();
    let mut client = Command::new("sh")
        .args(["-c", &primary.client_shell_prefix()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the writer");
    let mut stdin = client.stdin.take().unwrap();
    std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(script.as_bytes());
    });
    client
}

/// The sequence number of domain 0 in a MariaDB GTID position.
fn sequence(position: &str) -> u64 {
    position
        .trim()
        .split(',')
        .find_map(|g| g.strip_prefix("0-"))
        .and_then(|g| g.split('-').nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

async fn digest_of(server: &MariaDb, table: &str) -> (u64, String) {
    let connector = Connector::new(server.settings());
    let mut conn = connector.connect().await.unwrap();
    let info =
        catalog::tables(&connector, &mut conn, "shop").await.unwrap().into_iter().find(|t| t.name == table).unwrap();
    let (rows, digest) = read_table(&connector, "shop", &info).await.unwrap();
    (rows, digest.to_text())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_physical_backup_of_a_replica_under_a_writer_records_the_rows_of_its_position() {
    let Some(primary) = primary_with_rows() else { return };
    let Some(replica) = MariaDb::start_replica_of(&primary, 2) else { return };
    let before = sequence(&primary.sql("SELECT @@GLOBAL.gtid_binlog_pos"));
    let mut writing = writer(&primary);
    while sequence(&replica.sql("SELECT @@GLOBAL.gtid_binlog_pos")) < before + 50 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let dir = tempfile::tempdir().unwrap();
    let (report, to) = back_up_physically(&replica, dir.path()).await;
    let _ = writing.kill();
    let _ = writing.wait();

    let manifest = report.manifest;
    let snapshot = sequence(manifest.position.as_ref().unwrap().gtid.as_deref().unwrap());
    assert!(snapshot > before + 50, "the writer wrote before the snapshot: {before} then {snapshot}");
    let content = manifest.physical.unwrap().content.expect("a held replica's content");
    assert_eq!(content.len(), 1, "{content:?}");
    let orders = &content[0];
    assert_eq!((orders.database.as_str(), orders.table.as_str()), ("shop", "orders"));
    let committed = BASE_ROWS + (snapshot - before);
    assert_eq!(orders.rows, committed, "the rows of the position, no more, no fewer");

    primary.sql(&format!(
        "CREATE TABLE shop.orders_at_snapshot LIKE shop.orders; \
         INSERT INTO shop.orders_at_snapshot SELECT * FROM shop.orders WHERE id <= {committed}"
    ));
    assert_eq!(digest_of(&primary, "orders_at_snapshot").await, (committed, orders.content_digest.clone()));

    replica.catch_up_with(&primary);
    assert!(replica.is_replicating(), "the replica replicates again once released");

    // A drill of the prepared copy compares it with the recorded content, and tells a copy
    // that lost a row.
    let copy = prepared_copy(dir.path(), "copy");
    let Some(server) = MariaDb::start_on_copy(&copy) else { return };
    let report = drill::drill(&drill_options(&server, &to)).await.unwrap();
    assert!(report.content_compared);
    assert_eq!((report.tables, report.rows, report.restore_seconds), (1, committed, None));
    server.sql(&format!("SET sql_log_bin = 0; DELETE FROM shop.orders WHERE id = {committed}"));
    let differs = drill::drill(&drill_options(&server, &to)).await.map(drop).unwrap_err();
    assert_eq!(differs.kind(), "verifyMismatch", "{differs}");
    server.sql(&format!("SET sql_log_bin = 0; INSERT INTO shop.orders VALUES ({committed}, 'edited')"));
    let differs = drill::drill(&drill_options(&server, &to)).await.map(drop).unwrap_err();
    assert_eq!(differs.kind(), "contentDiffers", "{differs}");
}

/// The backup in `dir`'s `backup` folder, extracted and prepared into `dir/<name>`.
fn prepared_copy(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let backup = dir.join("backup");
    let manifest: visitors_agent::format::Manifest =
        serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).unwrap()).unwrap();
    let stream: Vec<u8> = manifest
        .physical
        .unwrap()
        .chunks
        .iter()
        .flat_map(|chunk| zstd::decode_all(&std::fs::read(backup.join(&chunk.path)).unwrap()[..]).unwrap())
        .collect();
    let copy = dir.join(name);
    visitors_test_support::extract_and_prepare(&stream, &copy);
    copy
}

fn drill_options(server: &MariaDb, from: &str) -> DrillOptions {
    DrillOptions {
        from: from.to_string(),
        s3: Default::default(),
        expect_manifest_sha256: None,
        connection: server.settings(),
        parallelism: 2,
        progress_interval: std::time::Duration::ZERO,
        decrypt_keys_dir: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_physical_backup_of_a_primary_holds_nothing_and_records_no_content() {
    let Some(primary) = primary_with_rows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (report, to) = back_up_physically(&primary, dir.path()).await;
    assert_eq!(report.manifest.physical.unwrap().content, None);
    primary.sql("INSERT INTO shop.orders VALUES (0, 'still writable')");

    // Its drill checks the copy's tables, and says it compared no content.
    let copy = prepared_copy(dir.path(), "copy");
    let Some(server) = MariaDb::start_on_copy(&copy) else { return };
    let report = drill::drill(&drill_options(&server, &to)).await.unwrap();
    assert!(!report.content_compared);
    assert_eq!(report.tables, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hold_lets_go_of_the_replica_as_soon_as_its_replication_is_acted_on() {
    let Some(primary) = primary_with_rows() else { return };
    let Some(replica) = MariaDb::start_replica_of(&primary, 2) else { return };
    let connector = Connector::new(replica.settings());
    let (hold, read) = hold::hold_replica(&connector, true, 1).await.unwrap().expect("a replica is held");
    let mut writing = writer(&primary);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!hold.let_go_early());

    // A failover's first statement on a replica: it would wait for the applier, which waits
    // for the lock, for the whole stream.
    let started = std::time::Instant::now();
    replica.sql("STOP SLAVE");
    let waited = started.elapsed();
    assert!(waited < std::time::Duration::from_secs(10), "STOP SLAVE waited {waited:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !hold.let_go_early() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(hold.let_go_early(), "the hold let go of the replica");
    assert!(!hold.release(&connector).await, "not held to the end");
    read.abort();
    let _ = writing.kill();
    let _ = writing.wait();
    replica.sql("START SLAVE");
    replica.catch_up_with(&primary);
}
