//! The manifest is checked before anything else: an edited manifest destroyed the target of a
//! `restore --drop-existing`, and one whose table count no longer matched its chunks passed
//! both `restore` and `verify`.

use std::path::Path;

use visitors_agent::format::MANIFEST_FILE;
use visitors_agent::verify::{self, VerifyOptions};
use visitors_agent::{AgentError, restore};

use crate::support::MariaDb;
use crate::{back_up, file_location, restore_options, small_backup};

const DATA: &str = "CREATE DATABASE kept; CREATE TABLE kept.t (id INT PRIMARY KEY, v TEXT);
    INSERT INTO kept.t SELECT seq, REPEAT('v', seq % 100) FROM seq_1_to_3000;
    CREATE TABLE kept.small (id INT PRIMARY KEY); INSERT INTO kept.small SELECT seq FROM seq_1_to_11;";

/// What the target holds, to show it was not touched.
fn target_state(server: &MariaDb) -> String {
    server.sql(
        "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'kept' ORDER BY 1;
         CHECKSUM TABLE kept.t, kept.small, kept.only_here; SELECT COUNT(*) FROM kept.t;",
    )
}

/// A backup of `kept`, after which the server's copy diverges from it (rows and a table
/// only the server has), as a target that a restore must not damage.
async fn backup_then_diverge(server: &MariaDb, dir: &Path) -> visitors_agent::backup::BackupReport {
    server.sql(DATA);
    let report = back_up(&small_backup(server, &file_location(dir))).await;
    server.sql(
        "DELETE FROM kept.t WHERE id > 2000; CREATE TABLE kept.only_here (x INT); INSERT INTO kept.only_here VALUES (7);",
    );
    report
}

fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join(MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut manifest);
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
}

fn small_table(manifest: &mut serde_json::Value) -> &mut serde_json::Value {
    let tables = manifest["databases"][0]["tables"].as_array_mut().unwrap();
    tables.iter_mut().find(|t| t["name"] == "small").unwrap()
}

fn verify_options(location: &str, expected: Option<String>) -> VerifyOptions {
    VerifyOptions {
        from: location.into(),
        s3: Default::default(),
        expect_manifest_sha256: expected,
        connection: None,
        databases: vec![],
        checksum: false,
        parallelism: 2,
        decrypt_keys_dir: None,
    }
}

/// The first edit: one table's `rows` changed in the table entry and in its chunk
/// entry, so the manifest is consistent in itself; only its SHA-256 shows the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_edited_consistently_is_refused_by_its_sha256_before_anything_is_touched() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = backup_then_diverge(&server, dir.path()).await;
    let before = target_state(&server);
    edit_manifest(dir.path(), |manifest| {
        let table = small_table(manifest);
        table["rows"] = 12.into();
        table["chunks"][0]["rows"] = 12.into();
    });
    let location = file_location(dir.path());
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;
    options.expect_manifest_sha256 = Some(report.manifest_sha256.clone());
    match restore::restore(&options).await {
        Err(error @ AgentError::ManifestChanged { .. }) => {
            assert_eq!(error.kind(), "checksumMismatch");
            let text = error.to_string();
            assert!(text.contains("manifest.json") && text.contains(&report.manifest_sha256), "{text}");
        }
        other => panic!("expected the edited manifest to be refused, got {:?}", other.err()),
    }
    assert_eq!(target_state(&server), before, "the target was touched");

    match verify::verify(&verify_options(&location, Some(report.manifest_sha256.to_uppercase()))).await {
        Err(error @ AgentError::ManifestChanged { .. }) => assert_eq!(error.kind(), "checksumMismatch"),
        other => panic!("expected verify to refuse the edited manifest, got {:?}", other.err()),
    }
}

/// The second edit: only the table-level count (12 against its chunks' 11). Both
/// `restore` and `verify` reported success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_count_that_differs_from_its_chunks_is_refused_by_restore_and_verify() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = backup_then_diverge(&server, dir.path()).await;
    let location = file_location(dir.path());
    // Unedited, the expected SHA-256 (in upper case too) passes.
    verify::verify(&verify_options(&location, Some(report.manifest_sha256.to_uppercase()))).await.unwrap();
    let before = target_state(&server);
    edit_manifest(dir.path(), |manifest| small_table(manifest)["rows"] = 12.into());
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;
    match restore::restore(&options).await {
        Err(error @ AgentError::ManifestInvalid { .. }) => {
            let text = error.to_string();
            assert!(text.contains("table `kept`.`small` has 12 rows, its chunks 11"), "{text}");
            assert!(text.contains("edited or is corrupt"), "{text}");
        }
        other => panic!("expected the inconsistent manifest to be refused, got {:?}", other.err()),
    }
    assert_eq!(target_state(&server), before, "the target was touched");
    match verify::verify(&verify_options(&location, None)).await {
        Err(error @ AgentError::ManifestInvalid { .. }) => assert_eq!(error.kind(), "manifestInvalid"),
        other => panic!("expected verify to refuse the inconsistent manifest, got {:?}", other.err()),
    }
}

/// The flag on the command line: a malformed value is a usage error, a wrong one refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_checks_the_expected_manifest_sha256() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = backup_then_diverge(&server, dir.path()).await;
    let location = file_location(dir.path());
    let verify_expecting = |value: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_visitors-agent"))
            .args(["verify", "--from", &location, "--expect-manifest-sha256", value])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let summary: visitors_agent_contract::summary::AgentSummary =
            serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        (output.status.code().unwrap(), summary)
    };
    let (code, summary) = verify_expecting(&report.manifest_sha256);
    assert_eq!((code, summary.ok), (0, true), "{:?}", summary.error);
    let (code, summary) = verify_expecting("not-hex");
    assert_eq!((code, summary.error_kind.as_deref()), (1, Some("usage")));
    let (code, summary) = verify_expecting(&"0".repeat(64));
    assert_eq!((code, summary.error_kind.as_deref()), (1, Some("checksumMismatch")));
    assert!(summary.error.unwrap().contains("the backup run recorded 0000"));
}
