//! A restore is all or nothing for each database: it loads into a staging schema and swaps the
//! tables in with one RENAME TABLE. An edited manifest, a failed swap or a SIGKILL mid-load
//! left the target dropped and half-loaded; now it stays exactly as it was.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use visitors_agent::AgentError;
use visitors_agent::format::MANIFEST_FILE;
use visitors_agent::restore::{self, staging_schema_name};

use crate::support::{MariaDb, PASSWORD, USER};
use crate::{back_up, file_location, restore_options, small_backup};

/// Named foreign keys (one pair in a cycle), a trigger, a view and a routine: what a
/// replacing restore must move out of the way and recreate.
const APP: &str = "
CREATE DATABASE app;
CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(255));
INSERT INTO app.t SELECT seq, REPEAT(CHAR(65 + seq % 26), 250) FROM seq_1_to_120000;
CREATE TABLE app.a (id INT PRIMARY KEY, b_id INT);
CREATE TABLE app.b (id INT PRIMARY KEY, a_id INT, CONSTRAINT fk_b_a FOREIGN KEY (a_id) REFERENCES app.a (id));
ALTER TABLE app.a ADD CONSTRAINT fk_a_b FOREIGN KEY (b_id) REFERENCES app.b (id);
SET foreign_key_checks = 0;
INSERT INTO app.a VALUES (1, 1), (2, 2); INSERT INTO app.b VALUES (1, 2), (2, 1);
SET foreign_key_checks = 1;
CREATE TABLE app.log (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(40));
CREATE TRIGGER app.a_logged AFTER INSERT ON app.a FOR EACH ROW INSERT INTO app.log (what) VALUES (CONCAT('a ', NEW.id));
CREATE VIEW app.pairs AS SELECT a.id AS a, b.id AS b FROM app.a a JOIN app.b b ON b.a_id = a.id;
CREATE FUNCTION app.twice(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x;
ANALYZE TABLE app.t;
";

/// Everything the target holds, object definitions included, with each table's checksum.
fn state(server: &MariaDb) -> String {
    server.sql(
        "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' ORDER BY 1;
         SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE, ACTION_STATEMENT FROM information_schema.TRIGGERS
           WHERE TRIGGER_SCHEMA = 'app' ORDER BY 1;
         SELECT ROUTINE_NAME, ROUTINE_DEFINITION FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = 'app' ORDER BY 1;
         SELECT CONSTRAINT_NAME, TABLE_NAME, REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS
           WHERE CONSTRAINT_SCHEMA = 'app' ORDER BY 1;
         SELECT TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'app' ORDER BY 1;",
    ) + &server.sql("CHECKSUM TABLE app.t, app.a, app.b, app.log, app.only_here")
}

fn schemas(server: &MariaDb) -> String {
    server.sql("SHOW DATABASES LIKE 'visitors\\_%'")
}

/// Backs up `app`, then makes the server's copy differ from the backup in every way.
async fn backup_then_diverge(server: &MariaDb, dir: &Path) -> (visitors_agent::backup::BackupReport, String) {
    backup_with_checksums_then_diverge(server, dir, false).await
}

async fn backup_with_checksums_then_diverge(
    server: &MariaDb,
    dir: &Path,
    table_checksums: bool,
) -> (visitors_agent::backup::BackupReport, String) {
    server.sql(APP);
    let mut options = small_backup(server, &file_location(dir));
    options.table_checksums = table_checksums;
    let report = back_up(&options).await;
    let backed_up = state(server);
    server.sql(
        "DELETE FROM app.t WHERE id > 100000; UPDATE app.a SET b_id = 1;
         CREATE TABLE app.only_here (x INT); INSERT INTO app.only_here VALUES (7);
         DROP TRIGGER app.a_logged;
         CREATE TRIGGER app.b_logged AFTER INSERT ON app.b FOR EACH ROW INSERT INTO app.log (what) VALUES ('b');
         DROP FUNCTION app.twice; CREATE PROCEDURE app.only_here_too() SELECT 1;
         CREATE OR REPLACE VIEW app.pairs AS SELECT 1 AS a, 2 AS b;",
    );
    (report, backed_up)
}

fn agent_restore(location: &str, server: &MariaDb) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_visitors-agent"));
    command
        .args(["restore", "--from", location, "--drop-existing", "--parallelism", "1", "--progress-interval", "0"])
        .args(["--host", "127.0.0.1", "--port", &server.port.to_string(), "--user", USER])
        .env("MYSQL_PWD", PASSWORD);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_mid_load_leaves_the_target_as_it_was_and_the_next_restore_cleans_up() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, backed_up) = backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let location = file_location(dir.path());

    let mut child = agent_restore(&location, &server).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let staging = staging_schema_name("app");
    let loading = format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{staging}' AND TABLE_NAME = 't'
           AND TABLE_ROWS > 0"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.sql(&loading) != "1\n" {
        assert!(child.try_wait().unwrap().is_none(), "the restore ended before it loaded anything");
        assert!(Instant::now() < deadline, "the restore never began loading");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(state(&server), before, "a killed restore changed the target");
    assert_eq!(schemas(&server), format!("{staging}\n"), "the staging schema is left, named for the next restore");

    let output = agent_restore(&location, &server).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("found the schema {staging}, left by an earlier restore of database app")),
        "{stderr}"
    );
    assert_eq!(schemas(&server), "", "staging and replaced schemas are gone");
    assert_eq!(state(&server), backed_up, "the replacing restore gives exactly the backed-up database");
    server.sql("INSERT INTO app.a VALUES (3, NULL)");
    assert_eq!(server.sql("SELECT what FROM app.log"), "a 3\n", "the backup's trigger is back and fires");
    assert_eq!(server.sql("SELECT app.twice(4)"), "8\n");
}

/// The first edit without `--expect-manifest-sha256`: a `rows` changed in the table
/// and its chunk entry. The chunk loads a different count, in the staging schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_count_edited_in_the_manifest_fails_in_staging_and_the_target_is_untouched() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let path = dir.path().join(MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let tables = manifest["databases"][0]["tables"].as_array_mut().unwrap();
    let table = tables.iter_mut().find(|t| t["name"] == "b").unwrap();
    table["rows"] = 3.into();
    table["chunks"][0]["rows"] = 3.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let mut options = restore_options(&server, &file_location(dir.path()));
    options.drop_existing = true;
    match restore::restore(&options).await {
        Err(error @ AgentError::BadChunk { .. }) => {
            assert!(error.to_string().contains("2 rows loaded"), "{error}");
            assert_eq!(error.kind(), "badChunk");
        }
        other => panic!("expected a bad chunk, got {:?}", other.err()),
    }
    assert_eq!(state(&server), before, "the target was touched");
    assert_eq!(schemas(&server), "", "the staging schema was dropped");
}

/// A table checksum edited in the manifest (no `--expect-manifest-sha256`): the staged table,
/// checked as soon as its load is complete, does not match, and the target stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_checksum_edited_in_the_manifest_fails_in_staging_and_the_target_is_untouched() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    backup_with_checksums_then_diverge(&server, dir.path(), true).await;
    let before = state(&server);
    let path = dir.path().join(MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let tables = manifest["databases"][0]["tables"].as_array_mut().unwrap();
    let table = tables.iter_mut().find(|t| t["name"] == "t").unwrap();
    let recorded = table["checksum"].as_u64().expect("the backup recorded a checksum");
    table["checksum"] = (recorded ^ 1).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let mut options = restore_options(&server, &file_location(dir.path()));
    options.drop_existing = true;
    match restore::restore(&options).await {
        Err(error @ AgentError::VerifyMismatch(_)) => {
            let expected = format!("the staged copy of `app`.`t` has checksum {recorded}, the backup {}", recorded ^ 1);
            assert!(error.to_string().contains(&expected), "{error}");
        }
        other => panic!("expected a verify mismatch, got {:?}", other.err()),
    }
    assert_eq!(state(&server), before, "the target was touched");
    assert_eq!(schemas(&server), "", "the staging schema was dropped");
}

/// The swap itself fails (the server refuses to move a table whose foreign key name is taken
/// in the target): nothing of the restore is left in the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_the_server_refuses_leaves_the_target_as_it_was() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(
        "CREATE DATABASE d; CREATE TABLE d.parent (id INT PRIMARY KEY);
         CREATE TABLE d.child (id INT PRIMARY KEY, p INT, CONSTRAINT fk_x FOREIGN KEY (p) REFERENCES d.parent (id));
         INSERT INTO d.parent VALUES (1); INSERT INTO d.child VALUES (1, 1);",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    server.sql(
        "DROP TABLE d.child, d.parent; CREATE TABLE d.other_parent (id INT PRIMARY KEY);
         CREATE TABLE d.other (id INT PRIMARY KEY, p INT, CONSTRAINT fk_x FOREIGN KEY (p) REFERENCES d.other_parent (id));",
    );
    let before = server.sql("SHOW TABLES FROM d; SHOW CREATE TABLE d.other");
    match restore::restore(&restore_options(&server, &location)).await {
        Err(error) => assert!(error.to_string().contains("swapping in the tables"), "{error}"),
        Ok(_) => panic!("the server accepted a duplicate foreign key name"),
    }
    assert_eq!(server.sql("SHOW TABLES FROM d; SHOW CREATE TABLE d.other"), before);
    assert_eq!(schemas(&server), "");
}

/// The restore in the two steps the restore controller runs as two containers.
fn agent_restore_step(location: &str, server: &MariaDb, step: &str) -> Command {
    let mut command = agent_restore(location, server);
    command.arg(step);
    command
}

fn marker_of(server: &MariaDb, staging: &str) -> String {
    server.sql(&format!("SELECT manifest_sha256 FROM `{staging}`.`{}`", restore::STAGED_MARKER))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_step_restore_stages_without_touching_the_target_then_checks_and_swaps() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (report, backed_up) = backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let location = file_location(dir.path());
    let staging = staging_schema_name("app");

    let staged = agent_restore_step(&location, &server, "--stage-only").output().unwrap();
    assert!(staged.status.success(), "{}", String::from_utf8_lossy(&staged.stderr));
    assert_eq!(state(&server), before, "staging touched the target");
    assert_eq!(schemas(&server), format!("{staging}\n"), "the staged copy is left for the second step");
    assert_eq!(marker_of(&server, &staging), format!("{}\n", report.manifest_sha256), "marked with its manifest");
    let summary = String::from_utf8_lossy(&staged.stdout);
    assert!(summary.contains("\"ok\":true") && summary.contains("\"rows\":"), "{summary}");

    let swapped = agent_restore_step(&location, &server, "--from-stage").output().unwrap();
    let stderr = String::from_utf8_lossy(&swapped.stderr);
    assert!(swapped.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("the staged copy in {staging} matches the manifest")), "{stderr}");
    assert_eq!(state(&server), backed_up, "the two steps give exactly the backed-up database");
    assert_eq!(schemas(&server), "", "staging and replaced schemas are gone");
    let summary = String::from_utf8_lossy(&swapped.stdout);
    let rows: u64 = report.manifest.databases.iter().flat_map(|d| &d.tables).map(|t| t.rows).sum();
    assert!(summary.contains(&format!("\"rows\":{rows}")), "the swap reports the checked rows: {summary}");
    server.sql("INSERT INTO app.a VALUES (3, NULL)");
    assert_eq!(server.sql("SELECT what FROM app.log"), "a 3\n", "the backup's trigger is back and fires");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_or_between_the_steps_leaves_the_target_as_it_was() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, backed_up) = backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let location = file_location(dir.path());
    let staging = staging_schema_name("app");

    // Staging killed mid-load: the second step finds no complete copy, refuses, and drops it.
    let mut child = agent_restore_step(&location, &server, "--stage-only")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let loading = format!(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{staging}' AND TABLE_NAME = 't'
           AND TABLE_ROWS > 0"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.sql(&loading) != "1\n" {
        assert!(child.try_wait().unwrap().is_none(), "the staging ended before it loaded anything");
        assert!(Instant::now() < deadline, "the staging never began loading");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let refused = agent_restore_step(&location, &server, "--from-stage").output().unwrap();
    assert!(!refused.status.success());
    let summary = String::from_utf8_lossy(&refused.stdout);
    assert!(summary.contains("no complete staged copy of database app"), "{summary}");
    assert!(summary.contains(&format!("has no {} table", restore::STAGED_MARKER)), "{summary}");
    assert!(summary.contains("\"errorKind\":\"verifyMismatch\""), "{summary}");
    assert_eq!(state(&server), before, "a killed staging changed the target");
    assert_eq!(schemas(&server), "", "the incomplete staged copy is dropped");

    // Killed between the steps (staged, never swapped): the target is as it was, and the next
    // restore names the staged copy it finds and starts afresh.
    let staged = agent_restore_step(&location, &server, "--stage-only").output().unwrap();
    assert!(staged.status.success(), "{}", String::from_utf8_lossy(&staged.stderr));
    assert_eq!(state(&server), before);
    let output = agent_restore_step(&location, &server, "--stage-only").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("found the schema {staging}, left by an earlier restore")), "{stderr}");
    let swapped = agent_restore_step(&location, &server, "--from-stage").output().unwrap();
    assert!(swapped.status.success(), "{}", String::from_utf8_lossy(&swapped.stderr));
    assert_eq!(state(&server), backed_up);
    assert_eq!(schemas(&server), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_step_refuses_a_staged_copy_changed_since_or_staged_from_another_manifest() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, _) = backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let location = file_location(dir.path());
    let staging = staging_schema_name("app");
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;

    // Nothing staged.
    options.step = restore::RestoreStep::FromStage;
    let error = restore::restore(&options).await.expect_err("nothing staged: refused");
    assert!(error.to_string().contains(&format!("there is no schema {staging}")), "{error}");
    assert_eq!(state(&server), before);

    // A row deleted from the staged copy after it was checked.
    options.step = restore::RestoreStep::StageOnly;
    restore::restore(&options).await.expect("staging");
    server.sql(&format!("DELETE FROM `{staging}`.t WHERE id = 5"));
    options.step = restore::RestoreStep::FromStage;
    let error = restore::restore(&options).await.expect_err("a changed staged copy: refused");
    assert_eq!(error.kind(), "verifyMismatch");
    assert!(error.to_string().contains("has 119999 rows, the backup 120000"), "{error}");
    assert_eq!(state(&server), before, "the target was touched");
    assert_eq!(schemas(&server), "", "the wrong staged copy is dropped");

    // A copy staged from another manifest (its SHA-256 in the marker differs).
    options.step = restore::RestoreStep::StageOnly;
    restore::restore(&options).await.expect("staging");
    server.sql(&format!("UPDATE `{staging}`.`{}` SET manifest_sha256 = REPEAT('0', 64)", restore::STAGED_MARKER));
    options.step = restore::RestoreStep::FromStage;
    let error = restore::restore(&options).await.expect_err("another manifest's copy: refused");
    assert!(
        error.to_string().contains(&format!("was staged from a manifest with SHA-256 {}", "0".repeat(64))),
        "{error}"
    );
    assert_eq!(state(&server), before);
    assert_eq!(schemas(&server), "");
}

/// The server keeps a trigger's text as written: `CREATE TRIGGER app.a_logged ... ON app.a`
/// names its database. Its rehearsal in the staging schema created it in the target instead,
/// which failed a replacing restore over a database holding that trigger ("already exists").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_restore_over_the_same_qualified_trigger_succeeds() {
    let Some(server) = MariaDb::start() else { return };
    server.sql(APP);
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    back_up(&small_backup(&server, &location)).await;
    let backed_up = state(&server);
    server.sql("DELETE FROM app.t WHERE id > 100000");
    let mut options = restore_options(&server, &location);
    options.drop_existing = true;
    restore::restore(&options).await.unwrap_or_else(|e| panic!("restore failed: {e}"));
    assert_eq!(state(&server), backed_up);
    assert_eq!(schemas(&server), "");
}

/// `--stage-only` of two databases whose second fails: the first one's staged copy goes too,
/// so a failed `--stage-only` leaves no staged copy behind (before, it stayed until the next
/// restore).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stage_only_leaves_no_staged_copy_of_any_database() {
    let Some(server) = MariaDb::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    server.sql("CREATE DATABASE zz; CREATE TABLE zz.b (id INT PRIMARY KEY); INSERT INTO zz.b VALUES (1), (2);");
    backup_then_diverge(&server, dir.path()).await;
    let before = state(&server);
    let path = dir.path().join(MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let databases = manifest["databases"].as_array_mut().unwrap();
    assert_eq!(databases.iter().map(|d| d["name"].as_str().unwrap()).collect::<Vec<_>>(), ["app", "zz"]);
    let table = &mut databases[1]["tables"][0];
    table["rows"] = 3.into();
    table["chunks"][0]["rows"] = 3.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();

    let mut options = restore_options(&server, &file_location(dir.path()));
    options.drop_existing = true;
    options.step = restore::RestoreStep::StageOnly;
    let error = restore::restore(&options).await.expect_err("zz's chunk holds 2 rows, not 3");
    assert_eq!(error.kind(), "badChunk", "{error}");
    assert_eq!(schemas(&server), "", "app's staged copy was left behind");
    assert_eq!(state(&server), before, "the target was touched");
}
