//! `kubectl visitors`, the real binary, against the real cluster: a backup taken and drilled
//! through the plugin alone, the status screen of an app with a schedule, a verified run and
//! archiving (every section, right), a restore to a time outside the window refused before
//! anything is created, a restore to a second through the plugin, a support report holding no
//! secret, and a user who may only read getting a plain error for `backup`.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use visitors_api::{MySQLBackup, MySQLRestore};
use visitors_e2e::archive::{archived_until, archiving_is};
use visitors_e2e::plugin::{run as visitors, text};
use visitors_e2e::{TestNamespace, cluster, mariadb_job, ready_app_with_claim_and_rows, run_job, sql_value, wait_for};

const APP: &str = "ex";
const CLAIM: &str = "backups";
const SCHEDULE: &str = "nightly";

async fn schedule_with_archiving_and_drills(client: &Client, ns: &str) {
    let schedule: MySQLBackup = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": SCHEDULE},
        "spec": {"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}},
                 // 03:00 on the first of January: no run of its own during the test.
                 "schedule": {"cron": "0 3 1 1 *"},
                 "pointInTime": {"flushSeconds": 2}, "drill": {"activeDeadlineSeconds": 600}},
    }))
    .unwrap();
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), ns);
    backups.create(&PostParams::default(), &schedule).await.expect("create the schedule");
    wait_for("the schedule's archiver to report", || archiving_is(&backups, SCHEDULE, "True", "Archiving")).await;
}

async fn count_rows(client: &Client, ns: &str, job: &str) -> i64 {
    sql_value(client, ns, APP, job, "SELECT COUNT(*) FROM visitors.plugin_rows").await.parse().expect("a count")
}

async fn insert(client: &Client, ns: &str, job: &str, from: i64, to: i64) {
    let sql = format!("INSERT INTO visitors.plugin_rows SELECT seq FROM seq_{from}_to_{to}");
    run_job(client, ns, job, mariadb_job(APP, ns, job, &sql)).await;
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn the_plugin_backs_up_shows_restores_to_a_second_and_reports_without_secrets() {
    let client = cluster().await;
    let seed = "CREATE TABLE visitors.plugin_rows (id INT PRIMARY KEY); INSERT INTO visitors.plugin_rows SELECT seq FROM seq_1_to_10";
    let namespace: TestNamespace = ready_app_with_claim_and_rows(&client, "plugin", APP, CLAIM, seed).await;
    let ns = namespace.name.clone();
    schedule_with_archiving_and_drills(&client, &ns).await;

    // A backup through the plugin alone: a run of the schedule, followed to its end.
    let backup = visitors(&ns, &["backup", APP, "-o", "json"]).await;
    let (out, err) = text(&backup);
    assert!(backup.status.success(), "backup failed: {err}");
    let run: Value = serde_json::from_str(&out).expect("the run as JSON");
    assert_eq!(run["phase"], "Succeeded", "{out}");
    let run_name = run["name"].as_str().unwrap().to_string();
    assert_eq!(run["schedule"], SCHEDULE);

    // The schedule drills each run: wait until it is proven.
    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    wait_for("the run to be verified by its drill", || async {
        let run = backups.get(&run_name).await.map_err(|e| e.to_string())?;
        if run.is_verified() { Ok(()) } else { Err(format!("{:?}", run.status.and_then(|s| s.drill))) }
    })
    .await;

    insert(&client, &ns, "five-more", 11, 15).await;
    let target = jiff::Timestamp::now().as_second() + 1;
    wait_for("the second after the five rows", || async {
        if jiff::Timestamp::now().as_second() > target { Ok(()) } else { Err("not yet".to_string()) }
    })
    .await;
    insert(&client, &ns, "seven-more", 16, 22).await;
    archived_until(&backups, SCHEDULE, jiff::Timestamp::now().as_second()).await;

    // Every section of the status screen, right.
    let status = visitors(&ns, &["status", APP, "-o", "json"]).await;
    assert!(status.status.success(), "{}", text(&status).1);
    let status: Value = serde_json::from_slice(&status.stdout).expect("the status as JSON");
    assert_eq!(status["ready"], true, "{status}");
    assert_eq!(status["schedules"][0]["name"], SCHEDULE);
    assert_eq!(status["schedules"][0]["archiving"], true);
    assert_eq!(status["schedules"][0]["lastRun"]["name"], run_name.as_str());
    assert_eq!(status["lastVerified"]["run"], run_name.as_str(), "{status}");
    assert!(status["lastVerified"]["restoreSeconds"].as_f64().is_some_and(|s| s > 0.0), "{status}");
    let window = &status["pointInTime"][0];
    let newest: jiff::Timestamp = window["newestRecoverable"].as_str().unwrap().parse().unwrap();
    assert!(newest.as_second() >= target, "{window}");
    assert!(window["oldestRecoverable"].is_string(), "{window}");
    assert_eq!(status["problems"], json!([]), "{status}");
    assert_eq!(status["mysql"]["tls"]["mode"], "Required", "TLS is on by default: {status}");
    let screen = visitors(&ns, &["status", APP]).await;
    let (screen, _) = text(&screen);
    for section in ["Backups", "Point in time (nightly)", "Running now", "Problems none", "Last verified run:"] {
        assert!(screen.contains(section), "no {section:?} in:\n{screen}");
    }
    assert!(!screen.contains('\u{1b}'), "no colour when stdout is not a terminal");
    let list = visitors(&ns, &["status"]).await;
    assert!(text(&list).0.lines().any(|l| l.starts_with(APP) && l.contains("Ready")), "{}", text(&list).0);

    // A time outside the window: refused before anything is created.
    let before = jiff::Timestamp::from_second(target - 86_400).unwrap().to_string();
    let refused = visitors(&ns, &["restore", APP, "--time", &before, "--yes"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused).1);
    assert!(text(&refused).1.contains("nothing was created"), "{}", text(&refused).1);
    let restores: Api<MySQLRestore> = Api::namespaced(client.clone(), &ns);
    assert!(restores.list(&Default::default()).await.unwrap().items.is_empty(), "no MySQLRestore was created");
    // Without --yes and without a terminal, nothing is created either.
    let unconfirmed = visitors(&ns, &["restore", APP, "--latest"]).await;
    assert_eq!(unconfirmed.status.code(), Some(2), "{}", text(&unconfirmed).1);
    assert!(restores.list(&Default::default()).await.unwrap().items.is_empty(), "no MySQLRestore was created");

    // A restore to the second after the five rows, through the plugin.
    let at = jiff::Timestamp::from_second(target).unwrap().to_string();
    let restore = visitors(&ns, &["restore", APP, "--time", &at, "--yes"]).await;
    let (_, err) = text(&restore);
    assert!(restore.status.success(), "restore failed: {err}");
    assert!(err.contains("Restore plan") && err.contains(&run_name) && err.contains("then replay"), "{err}");
    assert_eq!(count_rows(&client, &ns, "count").await, 15, "the ten seeded and five more, not the seven after");

    // The support report: everything, and no secret.
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("report.tar.gz");
    let report = visitors(&ns, &["report", APP, "-o", file.to_str().unwrap()]).await;
    assert!(report.status.success(), "{}", text(&report).1);
    let unpacked = std::process::Command::new("tar").arg("-xzf").arg(&file).arg("-C").arg(folder.path()).status();
    assert!(unpacked.is_ok_and(|s| s.success()), "tar -xzf the report");
    let root = folder.path().join(format!("{APP}-report"));
    for expected in
        ["README.txt", "status.txt", "resources/visitorsapp.yaml", "resources/mysqlbackups.yaml", "events.yaml"]
    {
        assert!(root.join(expected).is_file(), "{expected} is in the report");
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let credentials = secrets.get(&format!("{APP}-mysql-credentials")).await.expect("the credentials Secret");
    let values: Vec<String> = ["password", "root-password"]
        .iter()
        .filter_map(|key| credentials.data.as_ref()?.get(*key))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    assert_eq!(values.len(), 2, "the app's two passwords");
    let mut read = 0;
    for entry in walk(&root) {
        let content = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        read += 1;
        for value in &values {
            assert!(!content.contains(value.as_str()), "{} holds a secret value", entry.display());
        }
    }
    assert!(read >= 8, "the report holds its files");

    // A user who may only read gets a plain refusal from `backup`, not a stack trace.
    let reader = reader_account(&client, &ns).await;
    let as_reader = visitors(&ns, &["backup", APP, "--as", &reader]).await;
    let (_, err) = text(&as_reader);
    assert_eq!(as_reader.status.code(), Some(1), "{err}");
    assert!(err.contains("you may not create mysqlbackups"), "{err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    let reads = visitors(&ns, &["status", APP, "--as", &reader]).await;
    assert!(reads.status.success(), "the reader can read: {}", text(&reads).1);
    assert_eq!(backups.list(&Default::default()).await.unwrap().items.len(), 2, "the reader created nothing");

    namespace.delete().await;
}

fn walk(folder: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(folder).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}

/// A ServiceAccount that may get, list and watch the suite's resources in `ns` and nothing
/// else; its user name for `--as`.
async fn reader_account(client: &Client, ns: &str) -> String {
    let apply = |object: Value| {
        let client = client.clone();
        let ns = ns.to_string();
        async move {
            let object: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
            let gvk = kube::api::GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
            let (resource, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, &ns, &resource);
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("create {}: {e}", object.name_any()));
        }
    };
    apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
        "rules": [{"apiGroups": ["example.com"], "resources": ["visitorsapps", "mysqlbackups", "mysqlrestores"],
                   "verbs": ["get", "list", "watch"]}]}))
    .await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}))
    .await;
    format!("system:serviceaccount:{ns}:reader")
}
