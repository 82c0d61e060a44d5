//! Restore refuses an incomplete or corrupt backup, naming the file, before it touches the
//! database.

use std::path::Path;

use visitors_agent::AgentError;
use visitors_agent::format::MANIFEST_FILE;
use visitors_agent::restore;

use crate::support::MariaDb;
use crate::{back_up, file_location, restore_options, small_backup};

const DATA: &str = "CREATE DATABASE kept; CREATE TABLE kept.t (id INT PRIMARY KEY, v TEXT);
    INSERT INTO kept.t SELECT seq, REPEAT('v', seq % 100) FROM seq_1_to_3000;";

/// A backup of `kept`, after which `kept` is dropped: a restore that touches the server
/// would recreate it.
async fn backup_then_drop(server: &MariaDb, dir: &Path) -> visitors_agent::format::Manifest {
    server.sql(DATA);
    let report = back_up(&small_backup(server, &file_location(dir))).await;
    server.sql("DROP DATABASE kept");
    report.manifest
}

fn database_exists(server: &MariaDb) -> bool {
    server.sql("SHOW DATABASES LIKE 'kept'").contains("kept")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_missing_or_truncated_files_are_refused_by_name() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let manifest = backup_then_drop(&server, dir.path()).await;
    let table = &manifest.databases[0].tables[0];
    let last_chunk = table.chunks.last().unwrap().file.path.clone();
    let chunk_path = dir.path().join(&last_chunk);
    let original = std::fs::read(&chunk_path).unwrap();
    let options = restore_options(&server, &file_location(dir.path()));

    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    std::fs::write(&chunk_path, &flipped).unwrap();
    match restore::restore(&options).await {
        Err(error @ AgentError::ChecksumMismatch { .. }) => assert!(error.to_string().contains(&last_chunk), "{error}"),
        other => panic!("expected a checksum mismatch, got {:?}", other.err()),
    }
    assert!(!database_exists(&server), "the database was touched");

    std::fs::write(&chunk_path, &original[..original.len() - 1]).unwrap();
    match restore::restore(&options).await {
        Err(error @ AgentError::SizeMismatch { .. }) => assert!(error.to_string().contains(&last_chunk), "{error}"),
        other => panic!("expected a size mismatch, got {:?}", other.err()),
    }

    std::fs::remove_file(&chunk_path).unwrap();
    match restore::restore(&options).await {
        Err(error @ AgentError::FileMissing { .. }) => assert!(error.to_string().contains(&last_chunk), "{error}"),
        other => panic!("expected a missing file, got {:?}", other.err()),
    }
    assert!(!database_exists(&server), "the database was touched");

    std::fs::write(&chunk_path, &original).unwrap();
    std::fs::remove_file(dir.path().join(MANIFEST_FILE)).unwrap();
    match restore::restore(&options).await {
        Err(error @ AgentError::ManifestMissing { .. }) => {
            assert!(error.to_string().contains("manifest.json"), "{error}")
        }
        other => panic!("expected a missing manifest, got {:?}", other.err()),
    }
    assert!(!database_exists(&server), "the database was touched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_to_overwrite_tables_unless_asked_to_drop() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    server.sql(DATA);
    back_up(&small_backup(&server, &file_location(dir.path()))).await;
    server.sql("DELETE FROM kept.t WHERE id > 10");
    let mut options = restore_options(&server, &file_location(dir.path()));
    match restore::restore(&options).await {
        Err(error @ AgentError::TableExists { .. }) => assert!(error.to_string().contains("`kept`.`t`"), "{error}"),
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    options.drop_existing = true;
    restore::restore(&options).await.unwrap();
    assert_eq!(server.sql("SELECT COUNT(*) FROM kept.t"), "3000\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_backup_to_the_same_location_is_refused() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    server.sql(DATA);
    let options = small_backup(&server, &file_location(dir.path()));
    back_up(&options).await;
    let manifest_before = std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
    assert!(matches!(visitors_agent::backup::back_up(&options).await, Err(AgentError::BackupExists { .. })));
    assert_eq!(std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap(), manifest_before);
}
