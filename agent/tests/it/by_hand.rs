//! The "Restoring by hand" script of docs/backup-format.md, run exactly as documented: it failed
//! on real schemas (tables created alphabetically with foreign key checks on, backslashes
//! doubled, folders built from real names instead of encoded ones, no `set -e`, strict mode off).

use std::path::Path;
use std::process::Command;

use crate::roundtrip::{SCHEMA, TABLES, table_state};
use crate::support::MariaDb;
use crate::{back_up, file_location, small_backup};

/// Foreign keys to tables created later (alphabetically) and in a cycle, a backslash and
/// non-ASCII characters in database and table names, a stored 0 in an AUTO_INCREMENT key,
/// a view, a routine and a trigger; created under the server's default (strict) sql_mode.
const AWKWARD: &str = r#"
CREATE DATABASE `hård 2` CHARACTER SET utf8mb4;
USE `hård 2`;
CREATE TABLE z_parent (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(20) NOT NULL);
CREATE TABLE a_child (id INT PRIMARY KEY, parent INT NOT NULL,
  CONSTRAINT fk_child_parent FOREIGN KEY (parent) REFERENCES z_parent (id));
CREATE TABLE x_cycle (id INT PRIMARY KEY, y INT);
CREATE TABLE y_cycle (id INT PRIMARY KEY, x INT, CONSTRAINT fk_y_x FOREIGN KEY (x) REFERENCES x_cycle (id));
ALTER TABLE x_cycle ADD CONSTRAINT fk_x_y FOREIGN KEY (y) REFERENCES y_cycle (id);
CREATE TABLE `back\slash` (`col\umn` INT PRIMARY KEY, `naïve ü` VARCHAR(10));
SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO');
INSERT INTO z_parent VALUES (0, 'zero'), (1, 'one'), (2, 'two\\tab');
INSERT INTO a_child VALUES (1, 0), (2, 1), (3, 2);
SET foreign_key_checks = 0;
INSERT INTO x_cycle VALUES (1, 1), (2, 2); INSERT INTO y_cycle VALUES (1, 2), (2, 1);
SET foreign_key_checks = 1;
INSERT INTO `back\slash` VALUES (1, 'café'), (2, 'x\\y');
CREATE VIEW children AS SELECT c.id, p.name FROM a_child c JOIN z_parent p ON p.id = c.parent;
CREATE FUNCTION parent_name(i INT) RETURNS VARCHAR(20) READS SQL DATA RETURN (SELECT name FROM z_parent WHERE id = i);
CREATE TRIGGER child_named BEFORE INSERT ON a_child FOR EACH ROW SET NEW.id = NEW.id + 100;
"#;

const AWKWARD_TABLES: [&str; 5] =
    ["`hård 2`.z_parent", "`hård 2`.a_child", "`hård 2`.x_cycle", "`hård 2`.y_cycle", "`hård 2`.`back\\slash`"];

/// The script between the markers of docs/backup-format.md, without its code fence.
fn documented_script() -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/backup-format.md")).unwrap();
    let begin = doc.find("<!-- restore-by-hand.sh begins -->").expect("begin marker");
    let end = doc.find("<!-- restore-by-hand.sh ends -->").expect("end marker");
    let block = &doc[begin..end];
    let body = block.split_once("```bash\n").expect("a bash block").1;
    body.rsplit_once("```").expect("the block's end").0.to_string()
}

fn run_script(backup: &Path, target: &MariaDb, expected_sha256: Option<&str>) -> std::process::Output {
    run_script_with_key(backup, target, expected_sha256, None)
}

fn run_script_with_key(
    backup: &Path,
    target: &MariaDb,
    expected_sha256: Option<&str>,
    key: Option<&Path>,
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("restore-by-hand.sh");
    std::fs::write(&script, documented_script()).unwrap();
    let mut command = Command::new("bash");
    command.arg(&script).env("B", backup).env("CLIENT", target.client_shell_prefix()).env_remove("EXPECTED_SHA256");
    if let Some(sha256) = expected_sha256 {
        command.env("EXPECTED_SHA256", sha256);
    }
    command.env_remove("KEY");
    if let Some(key) = key {
        command.env("KEY", key);
    }
    command.output().unwrap()
}

fn tools_or_skip() -> bool {
    let missing: Vec<&str> = ["zstd", "jq", "sha256sum"]
        .into_iter()
        .filter(|tool| Command::new(tool).arg("--version").output().is_err())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var("VISITORS_REQUIRE_MARIADB").is_err(), "{missing:?} required");
    eprintln!("SKIPPED: {missing:?} not installed");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_script_restores_awkward_schemas_exactly() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    if !tools_or_skip() {
        return;
    }
    source.sql(AWKWARD);
    source.sql(SCHEMA);
    let dir = tempfile::tempdir().unwrap();
    let report = back_up(&small_backup(&source, &file_location(dir.path()))).await;
    assert!(
        report.manifest.databases.iter().any(|d| d.schema.path.starts_with("h@00e5rd@00202/")),
        "the folder names are MariaDB-encoded"
    );
    let output = run_script(dir.path(), &target, Some(&report.manifest_sha256));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("restored: "), "{stderr}");
    for table in AWKWARD_TABLES.iter().chain(TABLES.iter()) {
        assert_eq!(table_state(&source, table), table_state(&target, table), "{table} differs after a restore by hand");
    }
    assert_eq!(
        target.sql("SELECT * FROM `hård 2`.children ORDER BY id"),
        source.sql("SELECT * FROM `hård 2`.children ORDER BY id")
    );
    assert_eq!(target.sql("SELECT `hård 2`.parent_name(2)"), source.sql("SELECT `hård 2`.parent_name(2)"));
    target.sql("INSERT INTO `hård 2`.a_child VALUES (4, 1)");
    assert_eq!(target.sql("SELECT MAX(id) FROM `hård 2`.a_child"), "104\n", "the trigger came last and fires");
    assert_eq!(target.sql("SELECT COUNT(*) FROM shop.a_customer_totals"), "50\n");
}

/// The script stops at the first problem: a manifest other than expected, and a chunk whose
/// values the server has to adjust (a column narrowed in the table's file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_script_stops_on_an_edited_manifest_or_a_truncated_value() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    if !tools_or_skip() {
        return;
    }
    source.sql("CREATE DATABASE w; CREATE TABLE w.t (id INT PRIMARY KEY, name VARCHAR(40)); INSERT INTO w.t VALUES (1, 'a long name');");
    let dir = tempfile::tempdir().unwrap();
    let report = back_up(&small_backup(&source, &file_location(dir.path()))).await;
    let output = run_script(dir.path(), &target, Some(&"0".repeat(64)));
    assert!(!output.status.success());
    assert_eq!(target.sql("SHOW DATABASES LIKE 'w'"), "", "nothing ran after the failed check");

    let table = &report.manifest.databases[0].tables[0];
    let schema_path = dir.path().join(&table.schema.path);
    let narrowed = std::fs::read_to_string(&schema_path).unwrap().replace("varchar(40)", "varchar(3)");
    std::fs::write(&schema_path, &narrowed).unwrap();
    let manifest_path = dir.path().join(visitors_agent::format::MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    manifest["databases"][0]["tables"][0]["schema"]["bytes"] = narrowed.len().into();
    manifest["databases"][0]["tables"][0]["schema"]["sha256"] = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(narrowed.as_bytes())).into()
    };
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    let output = run_script(dir.path(), &target, None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "a truncated value passed silently");
    assert!(stderr.contains("1265") || stderr.contains("1406"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("restored: "));
}

/// A manifest whose row counts were edited, the table's and its chunk's alike so that it stays
/// self-consistent, is refused without EXPECTED_SHA256 too (as the agent refuses it): the
/// script compares each restored table's `COUNT(*)` with its `rows`, naming the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_script_stops_on_row_counts_other_than_the_manifests() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    if !tools_or_skip() {
        return;
    }
    source.sql(
        "CREATE DATABASE w; CREATE TABLE w.`it``s` (id INT PRIMARY KEY); INSERT INTO w.`it``s` VALUES (1), (2), (3);
         CREATE TABLE w.fine (id INT PRIMARY KEY); INSERT INTO w.fine VALUES (1);",
    );
    let dir = tempfile::tempdir().unwrap();
    let report = back_up(&small_backup(&source, &file_location(dir.path()))).await;
    let index = report.manifest.databases[0].tables.iter().position(|t| t.name == "it`s").expect("the table");
    assert_eq!(report.manifest.databases[0].tables[index].chunks.len(), 1);
    let manifest_path = dir.path().join(visitors_agent::format::MANIFEST_FILE);
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let table = &mut manifest["databases"][0]["tables"][index];
    assert_eq!(table["rows"], 3);
    table["rows"] = 4.into();
    table["chunks"][0]["rows"] = 4.into();
    std::fs::write(&manifest_path, serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();

    let output = run_script(dir.path(), &target, None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "edited row counts passed silently: {stderr}");
    assert!(stderr.contains("w.it`s: restored 3 rows, the manifest records 4"), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("restored: "));
}

/// An encrypted backup restored by the same script with the plain `age` CLI and the key file
/// `age-keygen` wrote; without KEY the script stops naming the key id. Skipped without `age`
/// (Debian package `age`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_script_restores_an_encrypted_backup_with_the_age_cli() {
    let Some(server) = MariaDb::start() else { return };
    if !tools_or_skip() {
        return;
    }
    if Command::new("age").arg("--version").output().is_err()
        || Command::new("age-keygen").arg("--version").output().is_err()
    {
        eprintln!("SKIPPED: the age CLI (Debian package age) is not installed; it decrypts encrypted backups by hand");
        return;
    }
    server.sql(SCHEMA);
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("key.txt");
    let generated = Command::new("age-keygen").arg("-o").arg(&key_file).output().unwrap();
    assert!(generated.status.success(), "{}", String::from_utf8_lossy(&generated.stderr));
    let dir = tempfile::tempdir().unwrap();
    let mut options = small_backup(&server, &file_location(dir.path()));
    options.encrypt = Some(visitors_agent::encryption::SealKey::load(&key_file, "by-hand").unwrap());
    let report = back_up(&options).await;
    let before: Vec<_> = TABLES.iter().map(|table| table_state(&server, table)).collect();
    server.sql("DROP DATABASE shop; DROP DATABASE `other db`");

    let output = run_script_with_key(dir.path(), &server, Some(&report.manifest_sha256), None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("by-hand"), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(server.sql("SHOW DATABASES LIKE 'shop'"), "", "nothing ran without the key");

    let output = run_script_with_key(dir.path(), &server, Some(&report.manifest_sha256), Some(&key_file));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("restored: "), "{stderr}");
    for (table, state) in TABLES.iter().zip(before) {
        assert_eq!(table_state(&server, table), state, "{table} differs after a restore by hand");
    }
    assert_eq!(server.sql("SELECT COUNT(*) FROM shop.a_customer_totals"), "50\n");
}
