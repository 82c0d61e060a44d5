//! `verify --deep`, the restore drill, against real servers: a backup restored into a scratch
//! server passes with every table's content digest recomputed from the restored rows; a
//! flipped byte, a chunk rewritten with a matching SHA-256 and a missing object each fail it,
//! naming what differs; a server holding the backup's databases is refused.

use std::path::Path;
use std::time::Duration;

use visitors_agent::AgentError;
use visitors_agent::drill::{self, DrillOptions, DrillReport};
use visitors_agent::format::{MANIFEST_FILE, Manifest};

use crate::roundtrip::SCHEMA;
use crate::support::MariaDb;
use crate::{back_up, file_location, small_backup};

fn drill_options(server: &MariaDb, from: &str, expect_manifest_sha256: Option<String>) -> DrillOptions {
    DrillOptions {
        from: from.to_string(),
        s3: Default::default(),
        expect_manifest_sha256,
        connection: server.settings(),
        parallelism: 2,
        progress_interval: Duration::ZERO,
        decrypt_keys_dir: None,
    }
}

pub async fn drill(server: &MariaDb, from: &str, expect: Option<String>) -> visitors_agent::Result<DrillReport> {
    drill::drill(&drill_options(server, from, expect)).await
}

/// A backup of every column type, with views, routines, triggers and an account.
async fn shop_backup(source: &MariaDb, dir: &Path) -> (String, visitors_agent::backup::BackupReport) {
    source.sql(SCHEMA);
    source.sql("CREATE USER 'shop_reader'@'%' IDENTIFIED BY 'not-shown'; GRANT SELECT ON shop.* TO 'shop_reader'@'%';");
    let location = file_location(dir);
    let mut options = small_backup(source, &location);
    options.users = true;
    let report = back_up(&options).await;
    (location, report)
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Manifest)) {
    let path = dir.join(MANIFEST_FILE);
    let mut manifest: Manifest = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut manifest);
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_restores_into_a_scratch_server_and_every_content_digest_matches() {
    let Some(source) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (location, backup) = shop_backup(&source, dir.path()).await;
    let tables: Vec<_> = backup.manifest.databases.iter().flat_map(|d| &d.tables).collect();
    assert!(tables.iter().all(|t| t.content_digest.is_some()), "every table has a content digest");
    let shop = backup.manifest.databases.iter().find(|d| d.name == "shop").unwrap();
    assert_eq!(shop.routine_names, ["FUNCTION order_count", "PROCEDURE add_customer"]);
    assert_eq!(shop.trigger_names, ["orders_audit"]);
    assert_eq!(backup.manifest.user_names, ["'shop_reader'@'%'"]);

    let report = drill(&scratch, &location, Some(backup.manifest_sha256.clone())).await.expect("the drill passes");
    assert_eq!(report.tables, backup.manifest.table_count());
    assert_eq!(report.rows, backup.manifest.row_count());
    assert!(report.restore_seconds.is_some_and(|s| s > 0.0) && report.compare_seconds > 0.0);
    assert!(report.content_compared);
    assert_eq!(scratch.sql("SELECT COUNT(*) FROM shop.numbers"), "20000\n");
    assert_eq!(scratch.sql("SELECT COUNT(*) FROM mysql.user WHERE User = 'shop_reader'"), "1\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_names_the_table_whose_rows_differ_though_every_sha256_matches() {
    let Some(source) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, name VARCHAR(40));
         INSERT INTO d.t SELECT seq, CONCAT('name ', seq) FROM seq_1_to_500;
         CREATE TABLE d.other (id INT PRIMARY KEY); INSERT INTO d.other VALUES (1);",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let backup = back_up(&small_backup(&source, &location)).await;

    // A dump bug, simulated: one value changed in a chunk (same length, so the row count and
    // data bytes still add up), the chunk's size and SHA-256 recomputed in the manifest.
    let table = backup.manifest.databases[0].tables.iter().position(|t| t.name == "t").unwrap();
    let chunk = backup.manifest.databases[0].tables[table].chunks[0].file.path.clone();
    let stored = std::fs::read(dir.path().join(&chunk)).unwrap();
    let rows = String::from_utf8(zstd::decode_all(stored.as_slice()).unwrap()).unwrap();
    let edited = rows.replacen("name 7\n", "name 8\n", 1);
    assert_ne!(edited, rows);
    let recompressed = zstd::encode_all(edited.as_bytes(), 1).unwrap();
    std::fs::write(dir.path().join(&chunk), &recompressed).unwrap();
    edit_manifest(dir.path(), |manifest| {
        let file = &mut manifest.databases[0].tables[table].chunks[0].file;
        file.bytes = recompressed.len() as u64;
        file.sha256 = crate::hex_sha256(&recompressed);
    });

    match drill(&scratch, &location, None).await {
        Err(error @ AgentError::ContentDiffers { .. }) => {
            let text = error.to_string();
            assert!(text.contains("`d`.`t`") && text.contains("content digest"), "{text}");
            assert_eq!(error.kind(), "contentDiffers");
        }
        other => panic!("expected the content digest to differ, got {:?}", other.map(|r| r.rows)),
    }

    // The same difference on a server of another version may be the versions' text of a
    // value: told apart, so that it is not taken for a defect of the backup.
    edit_manifest(dir.path(), |manifest| manifest.server.version = "8.4.3".into());
    let Some(other_scratch) = MariaDb::start() else { return };
    match drill(&other_scratch, &location, None).await {
        Err(error @ AgentError::ContentDiffersAcrossVersions { .. }) => {
            assert_eq!(error.kind(), "contentDiffersAcrossVersions");
            assert!(error.to_string().contains("8.4.3"), "{error}");
        }
        other => panic!("expected a difference across versions, got {:?}", other.map(|r| r.rows)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_fails_on_a_flipped_byte_naming_the_chunk_before_loading_anything() {
    let Some(source) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source
        .sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY); INSERT INTO d.t SELECT seq FROM seq_1_to_100;");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let backup = back_up(&small_backup(&source, &location)).await;
    let chunk = backup.manifest.databases[0].tables[0].chunks[0].file.path.clone();
    let path = dir.path().join(&chunk);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();

    match drill(&scratch, &location, Some(backup.manifest_sha256)).await {
        Err(error @ AgentError::ChecksumMismatch { .. }) => assert!(error.to_string().contains(&chunk), "{error}"),
        other => panic!("expected a checksum mismatch, got {:?}", other.map(|r| r.rows)),
    }
    assert_eq!(scratch.sql("SHOW DATABASES LIKE 'd'"), "", "nothing was loaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_names_a_trigger_the_backup_lists_but_the_restore_lacks() {
    let Some(source) = MariaDb::start() else { return };
    let Some(scratch) = MariaDb::start() else { return };
    source.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY); INSERT INTO d.t VALUES (1);");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&source, &location)).await;
    edit_manifest(dir.path(), |manifest| manifest.databases[0].trigger_names.push("lost_trigger".into()));

    match drill(&scratch, &location, None).await {
        Err(error @ AgentError::DrillObjectMissing { .. }) => {
            assert!(error.to_string().contains("trigger `d`.`lost_trigger`"), "{error}")
        }
        other => panic!("expected a missing trigger, got {:?}", other.map(|r| r.rows)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_refuses_a_server_that_holds_any_database_but_the_system_ones() {
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY); INSERT INTO d.t VALUES (1), (2);");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    server.sql("DELETE FROM d.t WHERE id = 2");

    match drill(&server, &location, None).await {
        Err(error @ AgentError::DrillTargetNotEmpty { .. }) => {
            assert!(error.to_string().contains("database d"), "{error}")
        }
        other => panic!("expected the server to be refused, got {:?}", other.map(|r| r.rows)),
    }
    assert_eq!(server.sql("SELECT COUNT(*) FROM d.t"), "1\n", "the server was left as it was");

    // Any database but the system ones makes a server no scratch server.
    let Some(other) = MariaDb::start() else { return };
    other.sql("CREATE DATABASE unrelated");
    match drill(&other, &location, None).await {
        Err(error @ AgentError::DrillTargetNotEmpty { .. }) => {
            assert!(error.to_string().contains("unrelated"), "{error}")
        }
        other => panic!("expected the server to be refused, got {:?}", other.map(|r| r.rows)),
    }
    assert_eq!(other.sql("SHOW DATABASES LIKE 'd'"), "", "nothing was restored");
}
