//! Writes that happen during a multi-worker backup never appear half in it: transfers move
//! money between accounts (the total is invariant, and every balance equals its opening
//! balance plus the transfers it took part in), while a backup with several workers and many
//! key ranges runs. The restored copy must satisfy both invariants.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mysql_async::prelude::Queryable;
use visitors_agent::mysql::Connector;

use crate::support::MariaDb;
use crate::{back_up, file_location, restore, restore_options, small_backup};

const ACCOUNTS: u64 = 2000;

const SCHEMA: &str = "
CREATE DATABASE bank;
CREATE TABLE bank.accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL, padding CHAR(200) NOT NULL DEFAULT '');
INSERT INTO bank.accounts SELECT seq, 1000, REPEAT('p', 200) FROM seq_1_to_2000;
CREATE TABLE bank.transfers (id INT AUTO_INCREMENT PRIMARY KEY, source INT NOT NULL, target INT NOT NULL,
  amount BIGINT NOT NULL);
ANALYZE TABLE bank.accounts;
";

/// Transfers between accounts far apart (so they fall in different key ranges) until stopped.
async fn keep_transferring(connector: Connector, stop: Arc<AtomicBool>) -> u64 {
    let mut conn = connector.connect().await.unwrap();
    let mut done = 0u64;
    let mut state = 12345u64;
    while !stop.load(Ordering::Relaxed) {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let source = 1 + (state >> 33) % (ACCOUNTS / 2);
        let target = ACCOUNTS / 2 + 1 + (state >> 17) % (ACCOUNTS / 2);
        let amount = 1 + (state >> 7) % 50;
        let (source, target) = if done.is_multiple_of(2) { (source, target) } else { (target, source) };
        let sql = format!(
            "START TRANSACTION;
             UPDATE bank.accounts SET balance = balance - {amount} WHERE id = {source};
             INSERT INTO bank.transfers (source, target, amount) VALUES ({source}, {target}, {amount});
             UPDATE bank.accounts SET balance = balance + {amount} WHERE id = {target};
             COMMIT;"
        );
        conn.query_drop(sql).await.unwrap();
        done += 1;
    }
    done
}

fn count_transfers(server: &MariaDb) -> u64 {
    server.sql("SELECT COUNT(*) FROM bank.transfers").trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_concurrent_transfers_is_one_point_in_time() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    source.sql(SCHEMA);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> =
        (0..2).map(|_| tokio::spawn(keep_transferring(Connector::new(source.settings()), stop.clone()))).collect();
    while count_transfers(&source) < 50 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.parallelism = 4;
    options.split_bytes = 32 * 1024;
    options.table_checksums = true;
    let before = count_transfers(&source);
    let report = back_up(&options).await;
    let after = count_transfers(&source);
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }

    let accounts = report.manifest.databases[0].tables.iter().find(|t| t.name == "accounts").unwrap();
    assert!(accounts.chunks.len() >= 4, "accounts must be read in several ranges, got {}", accounts.chunks.len());
    assert!(after > before, "transfers must run while the backup runs ({before} before, {after} after)");

    restore(&restore_options(&target, &location)).await;
    let total = target.sql("SELECT SUM(balance) FROM bank.accounts");
    assert_eq!(total.trim(), (ACCOUNTS * 1000).to_string(), "money appeared or vanished");
    let unexplained = target.sql(
        "SELECT COUNT(*) FROM bank.accounts a WHERE a.balance <> 1000
           - (SELECT COALESCE(SUM(amount), 0) FROM bank.transfers WHERE source = a.id)
           + (SELECT COALESCE(SUM(amount), 0) FROM bank.transfers WHERE target = a.id)",
    );
    assert_eq!(unexplained.trim(), "0", "balances and transfers come from different points in time");
    let restored_transfers = count_transfers(&target);
    assert!(restored_transfers >= before && restored_transfers <= after);

    // CHECKSUM TABLE taken inside the snapshot matches the restored data.
    crate::verify_with_checksums(&target, &location).await.expect("the restored copy matches the backup");
}
