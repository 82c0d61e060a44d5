//! Failures give one actionable line, a non-zero exit, no secret in any output, and a failed
//! backup leaves no manifest and no partial files.

use std::process::Command;

use visitors_agent::AgentError;
use visitors_agent::backup;
use visitors_agent::format::MANIFEST_FILE;
use visitors_agent_contract::summary::{AgentSummary, MAX_SUMMARY_BYTES};

use crate::support::{MariaDb, PASSWORD, USER, free_port};
use crate::{file_location, files_under, small_backup};

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_visitors-agent"))
}

/// Runs the agent and returns its exit code, stdout's last line as a summary, and stderr.
fn run_agent(command: &mut Command) -> (i32, AgentSummary, String, String) {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr: {stderr}"));
    assert!(last.len() <= MAX_SUMMARY_BYTES);
    let summary: AgentSummary = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    (output.status.code().unwrap(), summary, stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_named_without_showing_any_password() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let summary_file = dir.path().join("termination-log");
    let wrong = "Wr0ng-but-secret-pw";
    let (code, summary, stdout, stderr) = run_agent(
        agent()
            .args(["backup", "--host", "127.0.0.1", "--user", USER, "--progress-interval", "0"])
            .args(["--port", &server.port.to_string(), "--to", &file_location(&dir.path().join("b"))])
            .arg("--summary-file")
            .arg(&summary_file)
            .env("MYSQL_PWD", wrong),
    );
    assert_eq!(code, 1);
    assert!(!summary.ok);
    assert_eq!(summary.error_kind.as_deref(), Some("wrongCredentials"));
    let error = summary.error.unwrap();
    assert!(error.contains("rejected user 'agent'") && error.contains("MYSQL_PWD"), "{error}");
    for output in [&stdout, &stderr] {
        assert!(!output.contains(wrong) && !output.contains(PASSWORD), "a password leaked: {output}");
    }
    let written: AgentSummary = serde_json::from_str(&std::fs::read_to_string(summary_file).unwrap()).unwrap();
    assert_eq!(written.error_kind.as_deref(), Some("wrongCredentials"));
    assert!(!dir.path().join("b").join(MANIFEST_FILE).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_backs_up_verifies_and_inspects_with_a_password_file() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t SELECT seq FROM seq_1_to_100;",
    );
    let dir = tempfile::tempdir().unwrap();
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).unwrap();
    let location = file_location(&dir.path().join("b"));
    let connection = ["--host", "127.0.0.1", "--user", USER, "--database", "app"];
    let port = server.port.to_string();
    let (code, summary, _, stderr) = run_agent(
        agent()
            .args(["backup", "--to", &location, "--port", &port])
            .args(connection)
            .arg("--password-file")
            .arg(&password_file)
            .env_remove("MYSQL_PWD"),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(summary.ok);
    assert_eq!((summary.tables, summary.rows), (Some(1), Some(100)));
    assert_eq!(summary.manifest_sha256.as_deref().map(str::len), Some(64));

    let (code, summary, _, stderr) = run_agent(
        agent().args(["verify", "--from", &location, "--port", &port]).args(connection).env("MYSQL_PWD", PASSWORD),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(summary.ok);

    server.sql("INSERT INTO app.t VALUES (1000)");
    let (code, summary, _, _) = run_agent(
        agent().args(["verify", "--from", &location, "--port", &port]).args(connection).env("MYSQL_PWD", PASSWORD),
    );
    assert_eq!(code, 1);
    assert!(summary.error.unwrap().contains("`app`.`t` has 101 rows, the backup 100"));

    let (code, _, stdout, _) = run_agent(agent().args(["inspect", "--from", &location]));
    assert_eq!(code, 0);
    assert!(stdout.contains("table t: 100 rows"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_and_missing_database_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let Some(server) = MariaDb::start() else { return };
    let mut settings = server.settings();
    settings.port = free_port();
    let mut options = small_backup(&server, &file_location(dir.path()));
    options.connection = settings;
    match backup::back_up(&options).await {
        Err(error @ AgentError::Unreachable { .. }) => assert!(error.to_string().contains("--host and --port")),
        other => panic!("expected unreachable, got {:?}", other.err()),
    }
    let mut options = small_backup(&server, &file_location(dir.path()));
    options.databases = vec!["does_not_exist".into()];
    match backup::back_up(&options).await {
        Err(error @ AgentError::MissingDatabase(_)) => assert!(error.to_string().contains("'does_not_exist'")),
        other => panic!("expected a missing database, got {:?}", other.err()),
    }
    assert!(files_under(dir.path()).is_empty(), "{:?}", files_under(dir.path()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_backup_leaves_no_manifest_and_no_files() {
    let Some(mut server) = MariaDb::start() else { return };
    crate::seed_big_table(&server);
    let dir = tempfile::tempdir().unwrap();
    let mut options = small_backup(&server, &file_location(dir.path()));
    options.compression = visitors_agent::format::Compression::None;
    options.parallelism = 1;
    let running = tokio::spawn(async move { backup::back_up(&options).await });
    // Kill the server once the first data chunk is complete (staged files have a '#').
    let data_dir = dir.path().join("big").join("data").join("t");
    loop {
        let done = std::fs::read_dir(&data_dir)
            .map(|entries| entries.flatten().any(|e| !e.file_name().to_string_lossy().contains('#')))
            .unwrap_or(false);
        if done {
            break;
        }
        assert!(!running.is_finished(), "the backup ended before it wrote a chunk");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    server.kill();
    match running.await.unwrap() {
        Err(error @ AgentError::ConnectionLost { .. }) => {
            assert!(error.to_string().contains("run the operation again"))
        }
        Err(other) => panic!("expected a lost connection, got {other}"),
        Ok(_) => panic!("the backup finished before the server was killed"),
    }
    assert!(!dir.path().join(MANIFEST_FILE).exists());
    assert!(files_under(dir.path()).is_empty(), "partial files left: {:?}", files_under(dir.path()));
}

/// A tiny tmpfs, unmounted when dropped; `None` where this process may not mount.
struct TinyVolume {
    dir: tempfile::TempDir,
}

impl TinyVolume {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        mounted.then_some(Self { dir })
    }
}

impl Drop for TinyVolume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_volume_is_named_and_cleaned_up() {
    let Some(server) = MariaDb::start() else { return };
    let Some(volume) = TinyVolume::mount("512k") else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
        return;
    };
    server.sql(
        "CREATE DATABASE full_disk; CREATE TABLE full_disk.t (id INT PRIMARY KEY, b BLOB);
         INSERT INTO full_disk.t SELECT seq, RANDOM_BYTES(1000) FROM seq_1_to_3000;",
    );
    let target = volume.dir.path().join("backup");
    let mut options = small_backup(&server, &file_location(&target));
    options.compression = visitors_agent::format::Compression::None;
    match backup::back_up(&options).await {
        Err(error @ AgentError::DiskFull { .. }) => assert!(error.to_string().contains("no space left"), "{error}"),
        other => panic!("expected a full disk, got {:?}", other.err()),
    }
    assert!(files_under(&target).is_empty(), "partial files left: {:?}", files_under(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_restore_is_a_lost_connection() {
    let Some(mut server) = MariaDb::start() else { return };
    crate::seed_big_table(&server);
    let dir = tempfile::tempdir().unwrap();
    crate::back_up(&small_backup(&server, &file_location(dir.path()))).await;
    server.sql("DROP DATABASE big");
    let mut options = crate::restore_options(&server, &file_location(dir.path()));
    options.parallelism = 1;
    let running = tokio::spawn(async move { visitors_agent::restore::restore(&options).await });
    // Kill the server once loading has begun: the staged table exists and holds rows.
    while !server
        .sql("SELECT COUNT(*) > 0 FROM information_schema.TABLES WHERE TABLE_NAME = 't' AND TABLE_ROWS > 0")
        .starts_with('1')
    {
        assert!(!running.is_finished(), "the restore ended before it loaded anything");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    server.kill();
    match running.await.unwrap() {
        Err(error @ (AgentError::ConnectionLost { .. } | AgentError::Unreachable { .. })) => {
            assert!(error.to_string().contains("server"), "{error}");
        }
        Err(other) => panic!("expected a lost connection, got {other}"),
        Ok(_) => panic!("the restore finished before the server was killed"),
    }
}

/// A chunk that changes after restore checked it but before it is loaded: the load fails as
/// `badChunk` (it was `client`), naming the file, with no "rollback failed" noise in the log.
/// The first database is large, so the test has time to change the second one's chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_changed_while_the_restore_runs_is_a_bad_chunk() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE a_big; CREATE TABLE a_big.t (id INT PRIMARY KEY, v VARCHAR(255));
         INSERT INTO a_big.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 250) FROM seq_1_to_120000;
         CREATE DATABASE b_small; CREATE TABLE b_small.t (id INT PRIMARY KEY, v VARCHAR(20));
         INSERT INTO b_small.t VALUES (1, 'one'), (2, 'two');",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let report = crate::back_up(&small_backup(&server, &location)).await;
    server.sql("DROP DATABASE a_big; DROP DATABASE b_small");
    let small = &report.manifest.databases.iter().find(|d| d.name == "b_small").unwrap().tables[0];
    let chunk = dir.path().join(&small.chunks[0].file.path);
    let changed = zstd::encode_all(&b"1\tone\n2\tTWO\n"[..], 1).unwrap();

    let port = server.port.to_string();
    let mut child = agent()
        .args(["restore", "--from", &location, "--parallelism", "1", "--progress-interval", "0"])
        .args(["--host", "127.0.0.1", "--port", &port, "--user", USER])
        .env("MYSQL_PWD", PASSWORD)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let staging_of_a = visitors_agent::restore::staging_schema_name("a_big");
    while server.sql(&format!("SHOW DATABASES LIKE '{staging_of_a}'")).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "the restore ended before it began loading");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    std::fs::write(&chunk, changed).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: AgentSummary = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(summary.error_kind.as_deref(), Some("badChunk"), "{summary:?}");
    let error = summary.error.unwrap();
    assert!(error.contains(&small.chunks[0].file.path) && error.contains("changed while it was loaded"), "{error}");
    assert!(error.contains("restored before the failure: a_big"), "{error}");
    assert!(!stderr.contains("rollback failed"), "{stderr}");
    assert_eq!(server.sql("SELECT COUNT(*) FROM a_big.t"), "120000\n");
    assert_eq!(server.sql("SHOW DATABASES LIKE 'b_small'"), "", "the second database was left as it was");
}
