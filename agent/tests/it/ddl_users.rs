//! Backups block DDL from the catalog read to the snapshot (a table altered in between was
//! described one way and read another), and can carry the accounts of their databases.

use std::sync::{Arc, Mutex};

use visitors_agent::backup::Hook;

use crate::support::MariaDb;
use crate::{back_up, file_location, restore, restore_options, small_backup};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_waits_while_the_backup_goes_from_catalog_to_snapshot() {
    let Some(server) = MariaDb::start() else { return };
    server.sql("CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY); INSERT INTO d.t VALUES (1), (2);");
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&server, &location);
    let client = server.client_shell_prefix();
    let ddl_outcome: Arc<Mutex<Option<std::process::Output>>> = Arc::default();
    let seen = ddl_outcome.clone();
    options.after_catalog = Some(Hook(Arc::new(move || {
        let alter = format!(
            "{client} -e 'SET SESSION lock_wait_timeout = 1; ALTER TABLE d.t ADD COLUMN added INT NOT NULL DEFAULT 7'"
        );
        *seen.lock().unwrap() = Some(std::process::Command::new("bash").arg("-c").arg(alter).output().unwrap());
    })));
    let report = back_up(&options).await;
    let outcome = ddl_outcome.lock().unwrap().take().expect("the hook ran");
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    assert!(!outcome.status.success(), "an ALTER TABLE ran between the catalog read and the snapshot");
    assert!(stderr.contains("1205") || stderr.contains("Lock wait timeout"), "{stderr}");
    assert_eq!(report.manifest.databases[0].tables[0].columns, ["id"]);
    server.sql("DROP DATABASE d");
    restore(&restore_options(&server, &location)).await;
    assert_eq!(server.sql("SELECT COUNT(*) FROM d.t"), "2\n");
    // Once the backup is done, DDL runs again.
    server.sql("SET SESSION lock_wait_timeout = 5; ALTER TABLE d.t ADD COLUMN added INT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_grants_of_the_databases_come_with_the_backup_when_asked() {
    let Some(source) = MariaDb::start() else { return };
    let Some(target) = MariaDb::start() else { return };
    source.sql(
        "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, secret INT); INSERT INTO app.t VALUES (1, 2);
         CREATE DATABASE other;
         CREATE USER 'app_user'@'%' IDENTIFIED BY 'app-Pa55';
         GRANT SELECT, INSERT ON app.* TO 'app_user'@'%'; GRANT SELECT ON other.* TO 'app_user'@'%';
         CREATE USER 'reader'@'10.%' IDENTIFIED BY 'r-Pa55'; GRANT SELECT (id) ON app.t TO 'reader'@'10.%';
         CREATE USER 'unrelated'@'%' IDENTIFIED BY 'u-Pa55'; GRANT SELECT ON other.* TO 'unrelated'@'%';",
    );
    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    let mut options = small_backup(&source, &location);
    options.databases = vec!["app".into()];
    let plain = back_up(&options).await;
    assert!(plain.manifest.users.is_none(), "users are left out by default");

    let dir = tempfile::tempdir().unwrap();
    let location = file_location(dir.path());
    options.to = location.clone();
    options.users = true;
    let report = back_up(&options).await;
    let users = report.manifest.users.as_ref().expect("users.sql");
    let text = std::fs::read_to_string(dir.path().join(&users.path)).unwrap();
    assert!(!text.contains("unrelated") && !text.contains("`other`"), "{text}");

    let mut restore_opts = restore_options(&target, &location);
    restore_opts.users = true;
    restore(&restore_opts).await;
    for account in ["'app_user'@'%'", "'reader'@'10.%'"] {
        let grants = |server: &MariaDb| {
            let all = server.sql(&format!("SHOW GRANTS FOR {account}"));
            all.lines().filter(|g| !g.contains("`other`")).map(str::to_string).collect::<Vec<_>>()
        };
        assert_eq!(grants(&target), grants(&source), "{account}");
    }
    assert_eq!(target.sql("SELECT COUNT(*) FROM mysql.user WHERE User = 'unrelated'"), "0\n");
    // The password came along: the account logs in on the target.
    let mut settings = source.settings();
    settings.port = target.port;
    settings.user = "app_user".into();
    settings.password = Some("app-Pa55".into());
    let connector = visitors_agent::mysql::Connector::new(settings);
    connector.connect().await.expect("app_user logs in with its password on the target");
}
