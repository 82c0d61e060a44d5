//! Integration tests of the agent against real servers (see support.rs).

mod atomic;
mod by_hand;
mod consistency;
mod corpus;
mod data_sessions;
mod ddl_users;
mod delete;
mod drill;
mod encryption;
mod enum_values;
mod failover;
mod failures;
mod held_replica;
mod manifest;
mod objects;
mod physical;
mod point_in_time;
mod refusal;
mod roundtrip;
mod s3;
mod safety;
mod support;
mod telemetry;
mod tls;

use std::path::Path;

use visitors_agent::backup::{self, BackupOptions};
use visitors_agent::restore::{self, RestoreOptions};
use visitors_agent::verify::{self, VerifyOptions};

use support::MariaDb;

pub fn file_location(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Backup options for tests: small chunks and ranges so that even small tables are split.
pub fn small_backup(server: &MariaDb, to: &str) -> BackupOptions {
    let mut options = BackupOptions::new(server.settings(), to);
    options.split_bytes = 64 * 1024;
    options.chunk_bytes = 32 * 1024;
    options.parallelism = 3;
    options.progress_interval = std::time::Duration::ZERO;
    options
}

pub fn restore_options(server: &MariaDb, from: &str) -> RestoreOptions {
    let mut options = RestoreOptions::new(server.settings(), from);
    options.progress_interval = std::time::Duration::ZERO;
    options
}

pub async fn back_up(options: &BackupOptions) -> backup::BackupReport {
    backup::back_up(options).await.unwrap_or_else(|e| panic!("backup failed: {e}"))
}

pub async fn restore(options: &RestoreOptions) -> restore::RestoreReport {
    restore::restore(options).await.unwrap_or_else(|e| panic!("restore failed: {e}"))
}

pub fn hex_sha256(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// Every file under `dir`, relative.
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        for entry in std::fs::read_dir(&current).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    files.sort();
    files
}

/// Compares `server`'s databases with the backup at `from`: row counts and CHECKSUM TABLE.
pub async fn verify_with_checksums(server: &MariaDb, from: &str) -> visitors_agent::Result<()> {
    let options = VerifyOptions {
        from: from.to_string(),
        s3: Default::default(),
        expect_manifest_sha256: None,
        connection: Some(server.settings()),
        databases: vec![],
        checksum: true,
        parallelism: 2,
        decrypt_keys_dir: None,
    };
    verify::verify(&options).await.map(|_| ())
}

/// A database `big` with one table of 120,000 rows of 250 bytes: long enough to kill a server
/// in the middle of backing it up or restoring it.
pub fn seed_big_table(server: &MariaDb) {
    server.sql(
        "CREATE DATABASE big; CREATE TABLE big.t (id INT PRIMARY KEY, v VARCHAR(255));
         INSERT INTO big.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 250) FROM seq_1_to_120000;",
    );
}

/// `mariadb-dump` of `server` as root, with `args` after the options every comparison uses: rows
/// as hex, no dump date, events, routines and triggers.
pub fn mariadb_dump(server: &MariaDb, args: &[&str]) -> String {
    let output = std::process::Command::new("mariadb-dump")
        .arg("--no-defaults")
        .arg(format!("--socket={}", server.socket().display()))
        .args(["-uroot", "--hex-blob", "--skip-dump-date", "--events", "--routines", "--triggers"])
        .args(args)
        .output()
        .expect("mariadb-dump runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("a dump is UTF-8")
}
