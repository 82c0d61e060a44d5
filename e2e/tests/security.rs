//! Data in flight and at rest on a real cluster: TLS to MySQL (the default for a new app, and a
//! user's own certificate), encrypted backups (to S3, and under rotated keys) and binary-log
//! archives, and a sweep of everything a run leaves (logs, Events, status, traces, Jobs) for the
//! secrets it generated.

use std::collections::BTreeMap;
use std::time::Duration;

use age::secrecy::ExposeSecret;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use visitors_api::backup::BackupPhase;
use visitors_api::restore::RestorePhase;
use visitors_api::visitors_app::TlsMode;
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::archive;
use visitors_e2e::certificates::{certificate_secret, openssl_certificate};
use visitors_e2e::moto::Moto;
use visitors_e2e::{
    AppInitLock, TestNamespace, app_ready_at_generation, backup_finished, cluster, conditions_text, job_completes,
    job_output, mariadb_shell_job, node_logs_dir, otlp_receiver, ready_app_with_claim_and_rows, restore_finished,
    run_job, sql_value, wait_for,
};

const APP: &str = "ex";
const CLAIM: &str = "backups";
/// A row whose bytes must never be found in a stored encrypted backup.
const MARKER: &str = "e2e-private-visitor-5fa1c0de";
const SEED: &str = "CREATE TABLE visitors.e2e_rows (id INT PRIMARY KEY, note VARCHAR(64)); \
                    INSERT INTO visitors.e2e_rows VALUES (1, 'e2e-private-visitor-5fa1c0de'), (2, 'two'), (3, 'three');";

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

async fn create<K>(api: &Api<K>, value: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    api.create(&PostParams::default(), &object(value)).await.expect("create the object")
}

fn backup(name: &str, spec: Value) -> Value {
    let mut full = json!({"source": {"visitorsApp": APP}, "storage": {"persistentVolumeClaim": {"claimName": CLAIM}}});
    full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    json!({"apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": name}, "spec": full})
}

fn restore(name: &str, source: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "MySQLRestore", "metadata": {"name": name},
           "spec": {"source": source, "target": {"visitorsApp": APP}}})
}

async fn succeeded_backup(backups: &Api<MySQLBackup>, name: &str) -> MySQLBackup {
    let run = backup_finished(backups, name).await;
    let status = run.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(BackupPhase::Succeeded),
        "{:?} {}",
        status.error,
        conditions_text(&status.conditions)
    );
    run
}

async fn restore_ended(restores: &Api<MySQLRestore>, name: &str, phase: RestorePhase) -> MySQLRestore {
    let restore = restore_finished(restores, name).await;
    let status = restore.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(phase), "{:?} {}", status.error, conditions_text(&status.conditions));
    restore
}

/// The notes of table `e2e_rows`, in id order, read over TLS.
async fn notes(client: &Client, ns: &str, job: &str) -> String {
    sql_value(client, ns, APP, job, "SELECT GROUP_CONCAT(note ORDER BY id) FROM visitors.e2e_rows").await
}

/// Runs `sql` as root on the app's database, by Job `name`.
async fn run_sql(client: &Client, ns: &str, name: &str, sql: &str) {
    let script = r#"mariadb -h "$HOST" -uroot -e "$SQL""#;
    run_job(client, ns, name, mariadb_shell_job(APP, ns, name, script, &[("SQL", sql)])).await;
}

/// A Secret `name` whose entries are `data` (as `stringData`).
async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    create(&Api::<Secret>::namespaced(client.clone(), ns), json!({"metadata": {"name": name}, "stringData": data}))
        .await;
}

/// A new age identity: (the identity, as `age-keygen` writes it).
fn age_identity() -> String {
    age::x25519::Identity::generate().to_string().expose_secret().to_string()
}

// ---------- 1. TLS by default ----------

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_new_app_requires_tls_plain_text_is_refused_and_the_backend_backup_and_restore_go_over_tls() {
    let client = cluster().await;
    let namespace = ready_app_with_claim_and_rows(&client, "e2e-tls", APP, CLAIM, SEED).await;
    let ns = namespace.name.clone();
    let app = Api::<VisitorsApp>::namespaced(client.clone(), &ns).get(APP).await.unwrap();
    let tls = app.status.unwrap().tls.expect("status.tls");
    assert_eq!(tls.mode, TlsMode::Required);
    assert_eq!(tls.secret_name.as_deref(), Some("ex-mysql-tls"));

    // A client in plain text is refused by the server itself (MariaDB answers "access denied"),
    // while the same account gets in over TLS.
    let plain = r#"out=$(command mariadb --skip-ssl -h "$HOST" -uroot -e 'SELECT 1' 2>&1) && { echo "plain text accepted" > /dev/termination-log; exit 1; }
tls=$(mariadb -h "$HOST" -uroot -N -B -e "SHOW SESSION STATUS LIKE 'Ssl_version'") || exit 1
echo "plain text refused: $out; over TLS: $tls" > /dev/termination-log"#;
    run_job(&client, &ns, "plain-text", mariadb_shell_job(APP, &ns, "plain-text", plain, &[])).await;
    let refusal = job_output(&client, &ns, "plain-text").await;
    assert!(
        refusal.starts_with("plain text refused: ERROR") && refusal.contains("over TLS: Ssl_version\tTLSv1"),
        "{refusal}"
    );

    // The backend's connection, with what its Deployment gives it (the backend image itself is
    // not run by the test cluster's node: a client with the same environment and mounts is).
    let backend = Api::<Deployment>::namespaced(client.clone(), &ns).get("ex-backend").await.unwrap();
    let pod = backend.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mut env = serde_json::to_value(container.env.clone().unwrap()).unwrap();
    env.as_array_mut().unwrap().push(json!({"name": "NAMESPACE", "value": ns}));
    let mode =
        container.env.as_ref().unwrap().iter().find(|e| e.name == "MYSQL_SSL_MODE").and_then(|e| e.value.clone());
    assert_eq!(mode.as_deref(), Some("VERIFY_IDENTITY"));
    // Cluster DNS would resolve the bare Service name; the node's hosts file knows `<svc>.<ns>`.
    let script = r#"MYSQL_PWD="$MYSQL_PASSWORD" mariadb --ssl-ca="$MYSQL_SSL_CA" --ssl-verify-server-cert -h "$MYSQL_SERVICE_HOST.$NAMESPACE" -u "$MYSQL_USERNAME" -N -B "$MYSQL_DATABASE" -e "SHOW SESSION STATUS LIKE 'Ssl_version'" > /dev/termination-log"#;
    let job = json!({
        "metadata": {"name": "backend-client"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "client", "image": "mariadb:11", "command": ["sh", "-c", script], "env": env,
                            "volumeMounts": container.volume_mounts}],
            "volumes": pod.volumes,
        }}},
    });
    run_job(&client, &ns, "backend-client", job).await;
    let version = job_output(&client, &ns, "backend-client").await;
    assert!(version.contains("TLSv1"), "the backend's session is not encrypted: {version}");

    // A backup and a restore: the server accepts nothing but TLS, so both went over it.
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), &ns);
    create(&backups, backup("over-tls", json!({}))).await;
    succeeded_backup(&backups, "over-tls").await;
    run_sql(&client, &ns, "change", "DELETE FROM visitors.e2e_rows").await;
    let restores = Api::<MySQLRestore>::namespaced(client.clone(), &ns);
    create(&restores, restore("back", json!({"backup": "over-tls"}))).await;
    restore_ended(&restores, "back", RestorePhase::Succeeded).await;
    assert_eq!(notes(&client, &ns, "after").await, format!("{MARKER},two,three"));
    namespace.delete().await;
}

// ---------- 2. the user's certificate ----------

/// A `SELECT 1` over TLS that trusts only `ca`: it succeeds only if MySQL serves a certificate
/// `ca` signed. (The app has no generated TLS Secret to mount: the CA comes in a variable.)
fn trusting_only(ns: &str, name: &str, ca: &str) -> Value {
    let script = format!(
        "file=$(mktemp) && printf '%s' \"$CA\" > \"$file\" && mariadb --ssl-ca=\"$file\" --ssl-verify-server-cert -h ex-mysql.{ns}.svc -uroot -e 'SELECT 1'"
    );
    json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "sql", "image": "mariadb:11", "command": ["sh", "-c", script],
                            "env": [{"name": "CA", "value": ca},
                                    {"name": "MYSQL_PWD", "valueFrom": {"secretKeyRef": {"name": "ex-mysql-credentials", "key": "root-password"}}}]}],
        }}},
    })
}

async fn mysql_pod_uid(client: &Client, ns: &str) -> Option<String> {
    Api::<Pod>::namespaced(client.clone(), ns).get_opt("ex-mysql-0").await.ok().flatten().and_then(|p| p.metadata.uid)
}

async fn update_revision(client: &Client, ns: &str) -> Option<String> {
    let sts = Api::<StatefulSet>::namespaced(client.clone(), ns).get("ex-mysql").await.ok()?;
    sts.status?.update_revision
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_users_certificate_made_with_openssl_is_served_and_replacing_it_restarts_mysql_once() {
    let client = cluster().await;
    let namespace = TestNamespace::create(&client, "e2e-own-cert").await;
    let ns = namespace.name.clone();
    let dir = tempfile::tempdir().unwrap();
    let (ca, crt, key) = openssl_certificate(dir.path(), APP, &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    create(&secrets, certificate_secret("mine", &ca, &crt, &key)).await;
    let apps = Api::<VisitorsApp>::namespaced(client.clone(), &ns);
    {
        let _one_at_a_time = AppInitLock::take().await;
        create(
            &apps,
            json!({"apiVersion": "example.com/v1", "kind": "VisitorsApp", "metadata": {"name": APP},
                             "spec": {"size": 1, "tls": {"secretName": "mine"}}}),
        )
        .await;
        wait_for("the app to become Ready", || app_ready_at_generation(&apps, APP, 1)).await;
    }
    let names: Vec<String> =
        secrets.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|s| s.metadata.name).collect();
    assert!(!names.iter().any(|n| n == "ex-mysql-ca" || n == "ex-mysql-tls"), "nothing generated: {names:?}");
    run_job(&client, &ns, "trust-first", trusting_only(&ns, "trust-first", &ca)).await;
    let (first_pod, first_revision) = (mysql_pod_uid(&client, &ns).await, update_revision(&client, &ns).await);

    let renewed = tempfile::tempdir().unwrap();
    let (new_ca, new_crt, new_key) = openssl_certificate(renewed.path(), APP, &ns);
    let replacement: Secret = object(certificate_secret("mine", &new_ca, &new_crt, &new_key));
    let mut current = secrets.get("mine").await.unwrap();
    current.data = None;
    current.string_data = replacement.string_data;
    secrets.replace("mine", &PostParams::default(), &current).await.expect("replace the certificate");

    // Within a minute the controller reads the Secret again and rolls MySQL onto it.
    let rolled = wait_for("MySQL to restart with the new certificate", || async {
        let uid = mysql_pod_uid(&client, &ns).await;
        let ready = app_ready_at_generation(&apps, APP, 1).await.is_ok();
        if uid.is_some() && uid != first_pod && ready { Ok(uid) } else { Err(format!("pod {uid:?}, ready {ready}")) }
    })
    .await;
    let second_revision = update_revision(&client, &ns).await;
    assert_ne!(second_revision, first_revision);
    run_job(&client, &ns, "trust-new", trusting_only(&ns, "trust-new", &new_ca)).await;
    assert!(
        !job_completes(&client, &ns, "trust-old", trusting_only(&ns, "trust-old", &ca)).await,
        "the old CA's certificate is still served"
    );

    // Once: another minute (the controller's next look at the Secret) changes nothing.
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert_eq!(mysql_pod_uid(&client, &ns).await, rolled, "MySQL restarted again");
    assert_eq!(update_revision(&client, &ns).await, second_revision);
    namespace.delete().await;
}

// ---------- 3. encrypted backups to S3 ----------

/// A bucket `bucket` on a moto server, and a namespace with the app Ready and its rows, the
/// Secret of the bucket's keys and the Secret `backup-keys` holding key `k1`; returns the
/// `storage` of the bucket (prefix `prod`). `None` without moto.
async fn encrypting_to_s3(client: &Client, bucket: &str) -> Option<(Moto, TestNamespace, Value)> {
    let moto = Moto::start()?;
    assert_eq!(moto.request("PUT", &format!("/{bucket}")).unwrap(), 200, "create the bucket");
    let namespace = ready_app_with_claim_and_rows(client, bucket, APP, CLAIM, SEED).await;
    let ns = namespace.name.clone();
    let s3_keys = [("AWS_ACCESS_KEY_ID", "e2e-access-key"), ("AWS_SECRET_ACCESS_KEY", "e2e-secret-key")];
    secret(client, &ns, "s3-keys", &s3_keys).await;
    secret(client, &ns, "backup-keys", &[("k1", &age_identity())]).await;
    let storage = json!({"s3": {"bucket": bucket, "prefix": "prod", "endpoint": moto.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    Some((moto, namespace, storage))
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn an_encrypted_backup_to_s3_holds_no_row_in_the_clear_restores_with_its_key_and_a_wrong_key_changes_nothing() {
    let client = cluster().await;
    let Some((moto, namespace, storage)) = encrypting_to_s3(&client, "e2e-encrypted").await else { return };
    let ns = namespace.name.clone();
    secret(&client, &ns, "wrong-keys", &[("k1", &age_identity())]).await;

    let backups = Api::<MySQLBackup>::namespaced(client.clone(), &ns);
    create(
        &backups,
        backup("sealed", json!({"storage": storage, "encryption": {"keySecret": "backup-keys", "keyId": "k1"}})),
    )
    .await;
    let run = succeeded_backup(&backups, "sealed").await;
    assert_eq!(run.status.unwrap().encryption_key_id.as_deref(), Some("k1"));

    let keys = moto.keys("e2e-encrypted", &format!("prod/{ns}/{APP}/sealed/"));
    assert!(keys.iter().any(|k| k.ends_with("manifest.json")), "{keys:?}");
    assert!(keys.len() > 2, "{keys:?}");
    for key in &keys {
        let inside = &key[format!("prod/{ns}/{APP}/sealed/").len()..];
        assert!(!inside.contains("e2e_rows") && !inside.contains("visitors"), "{key} names what it holds");
        let stored = moto.get("e2e-encrypted", key, "e2e-access-key", "e2e-secret-key");
        assert!(!contains(&stored, MARKER.as_bytes()), "{key} holds a row in the clear");
        assert!(!contains(&stored, b"e2e_rows"), "{key} names the table in the clear");
    }

    // A row added after the backup tells whether a restore touched the database.
    run_sql(&client, &ns, "later", "INSERT INTO visitors.e2e_rows VALUES (4, 'after the backup')").await;
    let restores = Api::<MySQLRestore>::namespaced(client.clone(), &ns);
    create(&restores, restore("wrong-key", json!({"backup": "sealed", "keySecret": "wrong-keys"}))).await;
    let refused = restore_ended(&restores, "wrong-key", RestorePhase::Failed).await;
    let error = refused.status.unwrap().error.unwrap_or_default();
    assert!(error.contains("k1") && error.contains("not the key"), "{error}");
    assert_eq!(notes(&client, &ns, "untouched").await, format!("{MARKER},two,three,after the backup"));
    let staging =
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'visitors\\\\_restore\\\\_%'";
    assert_eq!(sql_value(&client, &ns, APP, "no-staging", staging).await, "0");

    create(&restores, restore("right-key", json!({"backup": "sealed"}))).await;
    restore_ended(&restores, "right-key", RestorePhase::Succeeded).await;
    assert_eq!(notes(&client, &ns, "restored").await, format!("{MARKER},two,three"));
    namespace.delete().await;
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

// ---------- 4. key rotation ----------

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn two_runs_under_two_keys_both_restore_while_the_secret_lists_both() {
    let client = cluster().await;
    let namespace = ready_app_with_claim_and_rows(&client, "e2e-rotation", APP, CLAIM, SEED).await;
    let ns = namespace.name.clone();
    secret(&client, &ns, "backup-keys", &[("2026-10", &age_identity()), ("2026-11", &age_identity())]).await;
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), &ns);
    create(&backups, backup("october", json!({"encryption": {"keySecret": "backup-keys", "keyId": "2026-10"}}))).await;
    succeeded_backup(&backups, "october").await;
    run_sql(&client, &ns, "more", "INSERT INTO visitors.e2e_rows VALUES (4, 'november')").await;
    // The key rotates: new runs use the new entry; the old one stays for the older runs.
    create(&backups, backup("november", json!({"encryption": {"keySecret": "backup-keys", "keyId": "2026-11"}}))).await;
    let november = succeeded_backup(&backups, "november").await;
    assert_eq!(november.status.unwrap().encryption_key_id.as_deref(), Some("2026-11"));

    let restores = Api::<MySQLRestore>::namespaced(client.clone(), &ns);
    create(&restores, restore("to-october", json!({"backup": "october"}))).await;
    restore_ended(&restores, "to-october", RestorePhase::Succeeded).await;
    assert_eq!(notes(&client, &ns, "as-in-october").await, format!("{MARKER},two,three"));
    create(&restores, restore("to-november", json!({"backup": "november"}))).await;
    restore_ended(&restores, "to-november", RestorePhase::Succeeded).await;
    assert_eq!(notes(&client, &ns, "as-in-november").await, format!("{MARKER},two,three,november"));
    namespace.delete().await;
}

// ---------- 6. an encrypted binary-log archive ----------

/// A row written after the schedule's run: it reaches the archive only, never a backup.
const ARCHIVED_MARKER: &str = "e2e-archived-visitor-7c3d9b21";

/// An encrypted schedule's archiver encrypts every segment it stores to the schedule's key; no
/// segment holds a row in the clear, and a restore to a point in time decrypts and replays them.
#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn an_encrypted_schedules_binlog_archive_holds_no_row_in_the_clear_and_a_restore_to_a_point_replays_it() {
    let client = cluster().await;
    let Some((moto, namespace, storage)) = encrypting_to_s3(&client, "e2e-sealed-archive").await else { return };
    let ns = namespace.name.clone();
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), &ns);
    create(
        &backups,
        backup(
            "sealed-nightly",
            json!({"storage": storage, "encryption": {"keySecret": "backup-keys", "keyId": "k1"},
                   "schedule": {"cron": "* * * * *", "retention": {"keepSuccessful": 3}},
                   "pointInTime": {"flushSeconds": 2}}),
        ),
    )
    .await;
    let schedule = wait_for("the encrypted archiver to report", || {
        archive::archiving_is(&backups, "sealed-nightly", "True", "Archiving")
    })
    .await;
    let archive = schedule.status.unwrap().point_in_time.unwrap();
    assert_eq!(archive.encryption_key_id.as_deref(), Some("k1"), "{archive:?}");
    archive::a_successful_run(&backups, "sealed-nightly").await;

    run_sql(&client, &ns, "archived", &format!("INSERT INTO visitors.e2e_rows VALUES (4, '{ARCHIVED_MARKER}')")).await;
    let target: i64 = sql_value(&client, &ns, APP, "target", "SELECT UNIX_TIMESTAMP()").await.parse().unwrap();
    archive::archived_until(&backups, "sealed-nightly", target).await;
    // A later second than the target's, whatever the archive's pace.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    run_sql(&client, &ns, "too-late", "INSERT INTO visitors.e2e_rows VALUES (5, 'after the target')").await;

    let prefix = format!("prod/{ns}/{APP}/_binlog/sealed-nightly/");
    let keys = moto.keys("e2e-sealed-archive", &prefix);
    let segments: Vec<&String> = keys.iter().filter(|k| k.contains("/segments/")).collect();
    assert!(!segments.is_empty(), "{keys:?}");
    for key in &segments {
        assert!(key.ends_with(".binlog.zst.age"), "{key} is not encrypted");
        let stored = moto.get("e2e-sealed-archive", key, "e2e-access-key", "e2e-secret-key");
        assert!(stored.starts_with(b"age-encryption.org/v1"), "{key} is no age file");
        for row in [MARKER, ARCHIVED_MARKER] {
            assert!(!contains(&stored, row.as_bytes()), "{key} holds {row} in the clear");
        }
    }

    let restores = Api::<MySQLRestore>::namespaced(client.clone(), &ns);
    let to_target = json!({"pointInTime": {"backup": "sealed-nightly", "targetTime": archive::rfc3339(target)}});
    create(&restores, restore("to-the-second", to_target)).await;
    restore_ended(&restores, "to-the-second", RestorePhase::Succeeded).await;
    assert_eq!(notes(&client, &ns, "replayed").await, format!("{MARKER},two,three,{ARCHIVED_MARKER}"));
    namespace.delete().await;
}

// ---------- 5. the secret-leak sweep ----------

/// Everything of the run a user, an operator or a log pipeline can read, as text: the node's
/// log files (every pod's, the controllers' among them), every Event of the cluster, the
/// status of the suite's resources, the Jobs and pods of `ns` (their arguments and variables,
/// what `kubectl describe` prints), the controllers' metrics, and the spans received.
async fn everything_readable(client: &Client, ns: &str, spans: &str) -> Vec<(String, String)> {
    let mut sources = vec![("spans".to_string(), spans.to_string())];
    if let Some(dir) = node_logs_dir() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let text = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap_or_default()).into_owned();
            sources.push((entry.path().display().to_string(), text));
        }
    }
    let events = Api::<Event>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    sources.push(("events".into(), serde_json::to_string(&events.items).unwrap()));
    let statuses = |items: Vec<Value>| items.iter().map(|i| i["status"].to_string()).collect::<Vec<_>>().join("\n");
    let as_values = |items: Vec<Value>| items;
    let apps = Api::<VisitorsApp>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    let runs = Api::<MySQLBackup>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    let restores = Api::<MySQLRestore>::all(client.clone()).list(&ListParams::default()).await.unwrap();
    let mut all_status: Vec<Value> = apps.items.iter().map(|o| serde_json::to_value(o).unwrap()).collect();
    all_status.extend(runs.items.iter().map(|o| serde_json::to_value(o).unwrap()));
    all_status.extend(restores.items.iter().map(|o| serde_json::to_value(o).unwrap()));
    sources.push(("statuses".into(), statuses(as_values(all_status))));
    let jobs = Api::<Job>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap();
    sources.push(("jobs".into(), serde_json::to_string(&jobs.items).unwrap()));
    sources.push(("pods".into(), serde_json::to_string(&pods.items).unwrap()));
    for key in ["visitors", "backup", "restore"] {
        if let Ok(metrics) = visitors_e2e::controller_metrics(client, key).await {
            sources.push((format!("{key} metrics"), metrics));
        }
    }
    sources
}

/// The parts of a Secret's value that would betray it: the value itself, and for a PEM key each
/// full line of its body (a log could wrap or re-encode the rest).
fn tell_tales(value: &str) -> Vec<String> {
    if value.contains("-----BEGIN") {
        return value.lines().filter(|l| !l.starts_with("-----") && l.len() >= 32).map(ToString::to_string).collect();
    }
    vec![value.trim().to_string()].into_iter().filter(|v| v.len() >= 8).collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn no_log_event_status_trace_or_job_of_a_run_holds_a_secret_it_generated_or_used() {
    let Ok(listen) = std::env::var("E2E_OTLP_LISTEN") else {
        eprintln!(
            "skipped: E2E_OTLP_LISTEN is unset; set it to the address the controllers' tracing.otlpEndpoint points at (e2e/run.sh --local does)"
        );
        return;
    };
    let receiver = otlp_receiver(&listen).await;
    let client = cluster().await;
    let namespace = ready_app_with_claim_and_rows(&client, "e2e-sweep", APP, CLAIM, SEED).await;
    let ns = namespace.name.clone();
    let identity = age_identity();
    secret(&client, &ns, "backup-keys", &[("k1", &identity)]).await;
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), &ns);
    create(
        &backups,
        backup(
            "swept",
            json!({"encryption": {"keySecret": "backup-keys", "keyId": "k1"},
                                             "drill": {"enabled": true}}),
        ),
    )
    .await;
    succeeded_backup(&backups, "swept").await;
    // The drill's Secret lives only while the drill runs: read it then.
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    let drill_secret = wait_for("the drill's Secret", || async {
        secrets.get_opt("swept-drill").await.map_err(|e| e.to_string())?.ok_or_else(|| "not yet".to_string())
    })
    .await;
    wait_for("the drill to pass", || async {
        let run = backups.get("swept").await.map_err(|e| e.to_string())?;
        let status = run.status.unwrap_or_default();
        status.verified_time.map(drop).ok_or_else(|| format!("{:?}", status.drill))
    })
    .await;
    let restores = Api::<MySQLRestore>::namespaced(client.clone(), &ns);
    create(&restores, restore("swept-back", json!({"backup": "swept"}))).await;
    restore_ended(&restores, "swept-back", RestorePhase::Succeeded).await;
    // Spans are exported in batches: give the last ones time to arrive.
    tokio::time::sleep(Duration::from_secs(10)).await;

    let mut secret_values: Vec<(String, String)> = Vec::new();
    for name in ["ex-mysql-credentials", "ex-mysql-tls", "ex-mysql-ca", "backup-keys"] {
        let secret = secrets.get(name).await.unwrap();
        for (key, value) in secret.data.unwrap_or_default() {
            if key.ends_with(".crt") || key == "username" {
                continue; // certificates are public, and so is the account's name
            }
            secret_values.push((format!("{name}/{key}"), String::from_utf8_lossy(&value.0).into_owned()));
        }
    }
    for (key, value) in drill_secret.data.unwrap_or_default() {
        if !key.ends_with(".crt") {
            secret_values.push((format!("swept-drill/{key}"), String::from_utf8_lossy(&value.0).into_owned()));
        }
    }
    assert!(secret_values.len() >= 7, "{:?}", secret_values.iter().map(|(n, _)| n).collect::<Vec<_>>());
    let spans: Vec<String> = receiver.spans().iter().map(|s| format!("{s:?}")).collect();
    assert!(!spans.is_empty(), "no span arrived: the sweep would miss the traces");
    let sources = everything_readable(&client, &ns, &spans.join("\n")).await;
    assert!(sources.iter().any(|(name, _)| name.ends_with(".log")) || node_logs_dir().is_none());
    let mut leaks = Vec::new();
    for (secret, value) in &secret_values {
        for tale in tell_tales(value) {
            for (source, text) in &sources {
                if text.contains(&tale) {
                    leaks.push(format!("{secret} in {source}"));
                }
            }
        }
    }
    assert!(leaks.is_empty(), "secrets leaked: {leaks:?}");
    eprintln!("swept {} sources for {} secrets", sources.len(), secret_values.len());
    namespace.delete().await;
}
