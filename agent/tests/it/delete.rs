//! `delete` on real backups in a folder and in a real S3 bucket (moto): the backup is gone, a
//! sibling backup is untouched, a repeated delete succeeds, and locations that are not one
//! backup (a parent folder, a bucket root, a folder of other files, a link out) are refused
//! with nothing deleted.

use std::path::Path;
use std::process::Command;

use visitors_agent::AgentError;
use visitors_agent::delete::{self, DeleteOptions};
use visitors_agent::format::{LOCK_FILE, MANIFEST_FILE};
use visitors_agent::storage::{S3Settings, Storage};
use visitors_agent_contract::summary::{AgentSummary, Operation};

use crate::support::{MariaDb, Moto};
use crate::{back_up, file_location, files_under, small_backup};

fn seed(server: &MariaDb) {
    server.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(200));
         INSERT INTO shop.t SELECT seq, REPEAT('x', 150) FROM seq_1_to_3000;
         CREATE TABLE shop.empty (id INT PRIMARY KEY);",
    );
}

/// Runs `visitors-agent delete ARGS` and returns its exit code and summary.
fn agent_delete(args: &[&str]) -> (i32, AgentSummary) {
    let output = Command::new(env!("CARGO_BIN_EXE_visitors-agent")).arg("delete").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no summary; stderr {}", output.stderr.escape_ascii()));
    (output.status.code().unwrap(), serde_json::from_str(last).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_in_a_folder_is_deleted_once_and_its_sibling_stays() {
    let Some(server) = MariaDb::start() else { return };
    seed(&server);
    let dir = tempfile::tempdir().unwrap();
    let (run, sibling) = (dir.path().join("ns/app/run"), dir.path().join("ns/app/run-2"));
    let report = back_up(&small_backup(&server, &file_location(&run))).await;
    back_up(&small_backup(&server, &file_location(&sibling))).await;
    let sibling_files = files_under(&sibling);
    assert!(files_under(&run).len() > 4, "{:?}", files_under(&run));

    let (code, summary) = agent_delete(&[&file_location(&run)]);
    assert_eq!((code, summary.ok, summary.operation), (0, true, Some(Operation::Delete)), "{summary:?}");
    assert_eq!(summary.manifest_sha256, Some(report.manifest_sha256));
    assert!(summary.stored_bytes.unwrap() > 0);
    assert!(!run.exists(), "the backup's folder is gone");
    assert_eq!(files_under(&sibling), sibling_files, "the sibling backup is untouched");

    let (code, again) = agent_delete(&[&file_location(&run)]);
    assert_eq!((code, again.ok, again.stored_bytes), (0, true, Some(0)), "a repeated delete succeeds: {again:?}");

    // The parent of backups is not a backup: refused, nothing deleted.
    let (code, parent) = agent_delete(&[&file_location(&dir.path().join("ns/app"))]);
    assert_eq!((code, parent.error_kind.as_deref()), (1, Some("notABackup")), "{parent:?}");
    assert_eq!(files_under(&sibling), sibling_files);
    let (code, root) = agent_delete(&["file:///"]);
    assert_eq!((code, root.error_kind.as_deref()), (1, Some("invalidLocation")), "{root:?}");
}

#[tokio::test]
async fn folders_of_other_files_and_links_out_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let others = dir.path().join("others");
    std::fs::create_dir_all(others.join("shop/data/t")).unwrap();
    std::fs::write(others.join("shop/database.sql"), "CREATE DATABASE shop").unwrap();
    std::fs::write(others.join("notes.txt"), "mine").unwrap();
    let refused = delete::delete(&options(&others)).await;
    assert!(matches!(refused, Err(AgentError::NotABackup { .. })), "{refused:?}");
    assert_eq!(files_under(&others), ["notes.txt", "shop/database.sql"]);

    // Layout names only, but nothing the agent writes itself: refused too.
    std::fs::remove_file(others.join("notes.txt")).unwrap();
    let refused = delete::delete(&options(&others)).await;
    assert!(matches!(refused, Err(AgentError::NotABackup { .. })), "{refused:?}");
    std::fs::write(others.join(MANIFEST_FILE), r#"{"name": "a web app"}"#).unwrap();
    let refused = delete::delete(&options(&others)).await;
    assert!(matches!(refused, Err(AgentError::NotABackup { .. })), "{refused:?}");
    assert_eq!(files_under(&others).len(), 2);

    // A link from a backup's folder to a file elsewhere is never followed.
    let outside = dir.path().join("precious.txt");
    std::fs::write(&outside, "keep me").unwrap();
    let backup = dir.path().join("backup");
    std::fs::create_dir_all(backup.join("shop/data/t")).unwrap();
    std::fs::write(backup.join("shop/data/t/00000-00000.tsv.zst"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, backup.join("shop/data/t/00000-00001.tsv.zst")).unwrap();
    let refused = delete::delete(&options(&backup)).await;
    assert!(matches!(refused, Err(AgentError::NotABackup { .. })), "{refused:?}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me");
    assert!(backup.join("shop/data/t/00000-00000.tsv.zst").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backups_leftovers_need_break_lock_and_a_cut_delete_is_finished() {
    let Some(server) = MariaDb::start() else { return };
    seed(&server);
    let dir = tempfile::tempdir().unwrap();
    // What a killed backup leaves: chunks and schema files, its lock, no manifest.
    let dead = dir.path().join("dead");
    back_up(&small_backup(&server, &file_location(&dead))).await;
    std::fs::remove_file(dead.join(MANIFEST_FILE)).unwrap();
    std::fs::write(dead.join(LOCK_FILE), "host=agent-pod pid=7 started=2026-11-23T10:00:00Z\n").unwrap();
    let locked = delete::delete(&options(&dead)).await;
    assert!(matches!(locked, Err(AgentError::LocationLocked { .. })), "{locked:?}");
    assert!(locked.unwrap_err().to_string().contains("--break-lock"));
    assert!(dead.join(LOCK_FILE).exists() && files_under(&dead).len() > 2, "nothing deleted");
    let broken = delete::delete(&DeleteOptions { break_lock: true, ..options(&dead) }).await.unwrap();
    assert!(broken.deleted_files > 2 && broken.manifest_sha256.is_none(), "{broken:?}");
    assert!(!dead.exists());

    // A delete cut short after the manifest and chunks went: its lock lets the next one finish.
    let cut = dir.path().join("cut");
    back_up(&small_backup(&server, &file_location(&cut))).await;
    for file in files_under(&cut) {
        if file == MANIFEST_FILE || file.contains("/data/") {
            std::fs::remove_file(cut.join(&file)).unwrap();
        }
    }
    std::fs::write(cut.join(LOCK_FILE), "host=agent-pod pid=8 started=2026-11-23T10:00:00Z operation=delete\n")
        .unwrap();
    let finished = delete::delete(&options(&cut)).await.unwrap();
    assert!(finished.deleted_files >= 3, "{finished:?}");
    assert!(!cut.exists());
}

fn options(dir: &Path) -> DeleteOptions {
    DeleteOptions { location: file_location(dir), s3: S3Settings::default(), break_lock: false }
}

fn s3(moto: &Moto) -> S3Settings {
    S3Settings {
        access_key_id: Some("AKIAIOSFODNN7EXAMPLE".into()),
        secret_access_key: Some("moto-secret".into()),
        session_token: None,
        region: "us-east-1".into(),
        endpoint: Some(moto.endpoint()),
        force_path_style: true,
    }
}

async fn objects(moto: &Moto, location: &str) -> Vec<String> {
    let storage = Storage::open(location, &s3(moto), false).unwrap();
    let mut objects: Vec<String> = storage.list().await.unwrap().into_iter().map(|(path, _)| path).collect();
    objects.sort();
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_in_a_bucket_is_deleted_and_other_prefixes_stay() {
    let Some(moto) = Moto::start() else { return };
    let Some(server) = MariaDb::start() else { return };
    seed(&server);
    moto.create_bucket("backups");
    let (run, sibling) = ("s3://backups/prod/ns/app/run", "s3://backups/prod/ns/app/run-2");
    for location in [run, sibling] {
        let mut backup = small_backup(&server, location);
        backup.s3 = s3(&moto);
        back_up(&backup).await;
    }
    let sibling_objects = objects(&moto, sibling).await;
    assert!(objects(&moto, run).await.contains(&MANIFEST_FILE.to_string()));

    let in_bucket = |location: &str| DeleteOptions { location: location.into(), s3: s3(&moto), break_lock: false };
    let report = delete::delete(&in_bucket(run)).await.unwrap();
    assert!(report.deleted_files > 4 && report.manifest_sha256.is_some(), "{report:?}");
    assert_eq!(objects(&moto, run).await, Vec::<String>::new(), "the backup is gone");
    assert_eq!(objects(&moto, sibling).await, sibling_objects, "the sibling backup is untouched");
    assert_eq!(delete::delete(&in_bucket(run)).await.unwrap().deleted_files, 0, "a repeated delete succeeds");

    for refused in ["s3://backups/prod/ns/app", "s3://backups/prod"] {
        let outcome = delete::delete(&in_bucket(refused)).await;
        assert!(matches!(outcome, Err(AgentError::NotABackup { .. })), "{refused}: {outcome:?}");
    }
    let root = delete::delete(&in_bucket("s3://backups")).await;
    assert!(matches!(root, Err(AgentError::InvalidLocation { .. })), "{root:?}");
    assert_eq!(objects(&moto, sibling).await, sibling_objects, "refusals delete nothing");
    let missing = delete::delete(&in_bucket("s3://no-such-bucket/run")).await;
    assert!(matches!(missing, Err(AgentError::MissingBucket { .. })), "{missing:?}");
}
