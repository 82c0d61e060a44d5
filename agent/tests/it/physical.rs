//! Physical backups against a real MariaDB and Debian's mariadb-backup, run as the backup
//! Job's tool container runs it (the contract's `tool_command`, writing into the agent's pipe):
//! the stream stored in checksummed chunks whose concatenation is the tool's stream, the
//! snapshot's GTID position the tool's own, and a tool that fails, is missing or is another
//! version refused with its reason and nothing kept; `unpack` writes, plain and encrypted, the
//! very files `mbstream -x` writes, which mariadb-backup prepares, and refuses an edited chunk.

use std::path::Path;
use std::process::{Child, Command};

use visitors_agent::backup::{self, BackupOptions};
use visitors_agent::format::PHYSICAL_FORMAT_NAME;
use visitors_agent::physical::StreamSource;
use visitors_agent::restore;
use visitors_agent::storage::{S3Settings, Storage};
use visitors_agent::unpack::{self, UnpackOptions};
use visitors_agent_contract::physical::tool_command;
use visitors_agent_contract::summary::{AgentSummary, Operation};
use visitors_test_support::programs_or_skip;

use crate::encryption::{keys_dir, seal_key};
use crate::support::{MariaDb, PASSWORD, USER};
use crate::{file_location, files_under, restore_options, small_backup};

/// The tool container of a backup Job, on this machine: `mariadb-backup` found on `PATH`
/// (or, with `path` set, not found there).
pub fn tool(server: &MariaDb, pipe: &Path, path: Option<&str>) -> Child {
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

/// A physical backup of `server` into `dir/backup`, its tool run beside the agent as the Job's
/// tool container runs it; the report and the backup's location.
pub async fn back_up_physically(server: &MariaDb, dir: &Path) -> (backup::BackupReport, String) {
    let (pipe, to) = (dir.join("mbstream"), file_location(&dir.join("backup")));
    let mut tool = tool(server, &pipe, None);
    let report = backup::back_up(&physical_backup(server, &to, &pipe)).await.unwrap();
    assert!(tool.wait().unwrap().success());
    (report, to)
}

pub fn physical_backup(server: &MariaDb, to: &str, pipe: &Path) -> BackupOptions {
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
    let (report, to) = back_up_physically(&server, dir.path()).await;

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

/// `unpack` of a run writes the files `mbstream -x` writes from the run's stream, byte for byte,
/// and mariadb-backup prepares them; an encrypted run likewise with its key. A stored chunk
/// with one byte changed, a logical backup and a directory that is not empty are refused, and
/// the refused unpack leaves its directory empty.
#[tokio::test(flavor = "multi_thread")]
async fn unpack_writes_the_files_mbstream_extracts_and_refuses_an_edited_chunk() {
    let Some(server) = server_with_rows() else { return };
    let dir = tempfile::tempdir().unwrap();
    let identity = age::x25519::Identity::generate();
    let keys = keys_dir(&[("disk.k1", &identity)]);
    let mut encrypted_run = None;
    for encrypted in [false, true] {
        let name = if encrypted { "encrypted" } else { "plain" };
        let (pipe, to) = (dir.path().join(format!("{name}.pipe")), file_location(&dir.path().join(name)));
        let mut tool = tool(&server, &pipe, None);
        let mut options = physical_backup(&server, &to, &pipe);
        options.encrypt = encrypted.then(|| seal_key(dir.path(), "disk.k1", &identity));
        let backup = backup::back_up(&options).await.unwrap();
        assert!(tool.wait().unwrap().success());

        let unpacked = dir.path().join(format!("{name}-unpacked"));
        let mut unpack_options = UnpackOptions::new(&to, &unpacked);
        unpack_options.expect_manifest_sha256 = Some(backup.manifest_sha256.clone());
        unpack_options.decrypt_keys_dir = encrypted.then(|| keys.path().to_path_buf());
        let report = unpack::unpack(&unpack_options).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let physical = backup.manifest.physical.clone().unwrap();
        assert_eq!(report.files, physical.files, "{name}");

        let extracted = dir.path().join(format!("{name}-mbstream"));
        visitors_test_support::extract(
            &stored_stream(&to, unpack_options.decrypt_keys_dir.as_deref()).await,
            &extracted,
        );
        let files = files_under(&extracted);
        assert_eq!(files_under(&unpacked), files, "{name}: the files mbstream writes");
        let mut bytes = 0;
        for file in &files {
            let ours = std::fs::read(unpacked.join(file)).unwrap();
            assert!(ours == std::fs::read(extracted.join(file)).unwrap(), "{name}: {file} differs from mbstream's");
            bytes += ours.len() as u64;
        }
        assert_eq!(report.bytes, bytes, "{name}");
        visitors_test_support::prepare(&unpacked);
        assert!(unpacked.join("shop").join("orders.ibd").exists(), "{name}: prepared");
        encrypted_run = Some((to, backup.manifest_sha256, physical.files));
    }

    // The command line, as a Job runs it: its summary.
    let (encrypted, manifest_sha256, files) = encrypted_run.unwrap();
    let (code, summary) = run_unpack(&[
        "--from",
        &encrypted,
        "--into",
        &dir.path().join("cli-unpacked").display().to_string(),
        "--expect-manifest-sha256",
        &manifest_sha256,
        "--decrypt-keys-dir",
        &keys.path().display().to_string(),
    ]);
    assert_eq!((code, summary.ok, summary.operation), (0, true, Some(Operation::Unpack)), "{summary:?}");
    assert_eq!(summary.files_written, Some(files));
    assert!(summary.bytes_written.is_some_and(|bytes| bytes > 1 << 20), "{summary:?}");
    assert_eq!(summary.manifest_sha256, Some(manifest_sha256));

    // One byte of a stored chunk changed: refused by the chunk's name, nothing left.
    let chunk = dir.path().join("plain").join("physical").join("000002.mbstream.zst");
    let mut stored = std::fs::read(&chunk).unwrap();
    let middle = stored.len() / 2;
    stored[middle] ^= 0x20;
    std::fs::write(&chunk, stored).unwrap();
    let edited = dir.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    let plain = file_location(&dir.path().join("plain"));
    let (code, summary) = run_unpack(&["--from", &plain, "--into", &edited.display().to_string()]);
    assert_eq!((code, summary.error_kind.as_deref()), (1, Some("checksumMismatch")), "{summary:?}");
    let error = summary.error.unwrap_or_default();
    assert!(error.contains("physical/000002.mbstream.zst"), "{error}");
    assert!(edited.is_dir() && files_under(&edited).is_empty(), "left: {:?}", files_under(&edited));

    // A logical backup, and a directory that holds something.
    let logical = file_location(&dir.path().join("logical"));
    crate::back_up(&small_backup(&server, &logical)).await;
    let refused = unpack::unpack(&UnpackOptions::new(&logical, dir.path().join("logical-unpacked"))).await.unwrap_err();
    assert_eq!(refused.kind(), "logicalBackup", "{refused}");
    let busy = dir.path().join("plain-unpacked");
    let refused =
        unpack::unpack(&UnpackOptions::new(file_location(&dir.path().join("plain")), &busy)).await.unwrap_err();
    assert_eq!(refused.kind(), "directoryNotEmpty", "{refused}");
    assert!(busy.join("shop").join("orders.ibd").exists(), "a refused directory is left as it was");
}

/// `visitors-agent unpack ARGS`: its exit code and summary.
fn run_unpack(args: &[&str]) -> (i32, AgentSummary) {
    let output = Command::new(env!("CARGO_BIN_EXE_visitors-agent")).arg("unpack").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last =
        stdout.lines().last().unwrap_or_else(|| panic!("no summary: {}", String::from_utf8_lossy(&output.stderr)));
    (output.status.code().unwrap(), serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}")))
}

/// A run's chunks, each decrypted and decompressed, end to end: the tool's stream.
async fn stored_stream(location: &str, keys: Option<&Path>) -> Vec<u8> {
    let storage = Storage::open(location, &S3Settings::default(), false).unwrap();
    let manifest = visitors_agent::verify::load_manifest(&storage, None, keys).await.unwrap();
    let mut stream = Vec::new();
    for chunk in &manifest.physical.unwrap().chunks {
        stream.extend(zstd::decode_all(&storage.read_entry(chunk).await.unwrap()[..]).unwrap());
    }
    stream
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
