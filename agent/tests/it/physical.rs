//! Physical backups against a real MariaDB and Debian's mariadb-backup, run as the backup
//! Job's tool container runs it (the contract's `tool_command`, writing into the agent's pipe):
//! the stream stored in checksummed chunks whose concatenation is the tool's stream, the
//! snapshot's GTID position the tool's own, and a tool that fails, is missing or is another
//! version refused with its reason and nothing kept.

use std::path::Path;
use std::process::{Child, Command};

use visitors_agent::backup::{self, BackupOptions};
use visitors_agent::format::PHYSICAL_FORMAT_NAME;
use visitors_agent::physical::StreamSource;
use visitors_agent::restore;
use visitors_agent_contract::physical::tool_command;
use visitors_test_support::programs_or_skip;

use crate::support::{MariaDb, PASSWORD, USER};
use crate::{file_location, restore_options};

/// The tool container of a backup Job, on this machine: `mariadb-backup` found on `PATH`
/// (or, with `path` set, not found there).
fn tool(server: &MariaDb, pipe: &Path, path: Option<&str>) -> Child {
    let args = [
        "--backup".to_string(),
        "--stream=mbstream".into(),
        "--host=127.0.0.1".into(),
        format!("--port={}", server.settings().port),
        format!("--user={USER}"),
        format!("--target-dir={}", pipe.with_extension("target").display()),
    ];
    let command = tool_command(&pipe.display().to_string(), &args);
    let shell = visitors_test_support::find_program(&command[0]).expect("a shell");
    let mut tool = Command::new(shell);
    tool.args(&command[1..]).env("MYSQL_PWD", PASSWORD);
    if let Some(path) = path {
        tool.env("PATH", path);
    }
    tool.spawn().expect("start the tool's shell")
}

/// A `PATH` of an image without the tool: a folder with `sleep` alone.
fn path_without_the_tool(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(visitors_test_support::find_program("sleep").unwrap(), bin.join("sleep")).unwrap();
    bin.display().to_string()
}

fn physical_backup(server: &MariaDb, to: &str, pipe: &Path) -> BackupOptions {
    let mut options = BackupOptions::new(server.settings(), to);
    options.chunk_bytes = 4 * 1024 * 1024;
    options.progress_interval = std::time::Duration::ZERO;
    options.physical = Some(StreamSource::Pipe(pipe.to_path_buf()));
    options
}

fn server_with_rows() -> Option<MariaDb> {
    programs_or_skip(&["mariadb-backup", "mbstream"], "VISITORS_REQUIRE_MARIADB")?;
    let server = MariaDb::start_primary()?;
    server.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(200)); \
         INSERT INTO shop.orders SELECT seq, REPEAT(MD5(seq), 6) FROM seq_1_to_60000",
    );
    Some(server)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_physical_backup_stores_the_tools_stream_in_chunks_at_the_tools_own_position() {
    let Some(server) = server_with_rows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (pipe, to) = (dir.path().join("mbstream"), file_location(&dir.path().join("backup")));
    let mut tool = tool(&server, &pipe, None);
    let report = backup::back_up(&physical_backup(&server, &to, &pipe)).await.unwrap();
    assert!(tool.wait().unwrap().success());

    let manifest = report.manifest;
    assert_eq!(manifest.format, PHYSICAL_FORMAT_NAME);
    let physical = manifest.physical.clone().expect("a physical entry");
    assert!(physical.tool.starts_with("mariadb-backup 10."), "{}", physical.tool);
    assert!(
        physical.chunks.len() >= 2,
        "cut in chunks of 4 MiB: {} bytes in {:?}",
        physical.stream_bytes,
        physical.chunks
    );
    let position = manifest.position.clone().unwrap();
    assert_eq!(position.gtid.as_deref(), Some(server.sql("SELECT @@gtid_binlog_pos").trim()), "the tool's snapshot");
    assert_eq!(position.server.as_ref().map(|s| s.server_id), Some(1));

    // The chunks, decompressed end to end, are a stream mbstream extracts and mariadb-backup
    // prepares into a data directory holding the rows.
    let stream: Vec<u8> = physical
        .chunks
        .iter()
        .flat_map(|chunk| {
            zstd::decode_all(&std::fs::read(dir.path().join("backup").join(&chunk.path)).unwrap()[..]).unwrap()
        })
        .collect();
    assert_eq!(stream.len() as u64, physical.stream_bytes);
    let extracted = dir.path().join("extracted");
    visitors_test_support::extract_and_prepare(&stream, &extracted);
    assert!(extracted.join("shop").join("orders.ibd").exists());

    // A logical restore refuses it by name, before touching anything.
    let refused = restore::restore(&restore_options(&server, &to)).await.map(drop).expect_err("refused");
    assert_eq!(refused.kind(), "physicalBackup", "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_fails_or_is_missing_is_refused_with_its_reason_and_nothing_is_kept() {
    let Some(server) = server_with_rows() else { return };
    let dir = tempfile::tempdir().unwrap();

    // No tool in the image.
    let (pipe, to) = (dir.path().join("missing"), file_location(&dir.path().join("missing-backup")));
    let mut missing = tool(&server, &pipe, Some(&path_without_the_tool(dir.path())));
    let error = backup::back_up(&physical_backup(&server, &to, &pipe)).await.map(drop).expect_err("refused");
    assert!(!missing.wait().unwrap().success());
    assert_eq!(error.kind(), "backupToolFailed", "{error}");
    assert!(error.to_string().contains("has no mariadb-backup"), "{error}");
    assert!(!dir.path().join("missing-backup").join("manifest.json").exists());

    // The tool refused by the server (a user without the privileges it needs).
    server.sql(&format!("REVOKE RELOAD ON *.* FROM '{USER}'@'%'"));
    let (pipe, to) = (dir.path().join("refused"), file_location(&dir.path().join("refused-backup")));
    let mut refused = tool(&server, &pipe, None);
    let error = backup::back_up(&physical_backup(&server, &to, &pipe)).await.map(drop).expect_err("refused");
    assert!(!refused.wait().unwrap().success());
    assert_eq!(error.kind(), "backupToolFailed", "{error}");
    assert!(error.to_string().contains("exit status"), "{error}");
    let left: Vec<_> = walk(&dir.path().join("refused-backup"));
    assert!(left.is_empty(), "nothing kept: {left:?}");
}

fn walk(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .flat_map(
            |entry| if entry.path().is_dir() { walk(&entry.path()) } else { vec![entry.path().display().to_string()] },
        )
        .collect()
}
