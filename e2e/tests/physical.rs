//! Physical backups on a real cluster (issue 42, scenario 1): a replicated app under a writer;
//! a physical run read from a replica, encrypted, to S3 (moto). Its record names the replica
//! and a GTID position; S3 holds no row in the clear; the chunks, decrypted, decompressed and
//! put end to end, are mariadb-backup's stream, which mbstream extracts and mariadb-backup
//! prepares into a data directory holding exactly the rows committed up to that position; and
//! its drill (a server started on the copy its pod unpacked and prepared) verifies it by
//! content: every table's rows and digest equal the replica's, held at the snapshot.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use age::secrecy::ExposeSecret;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use visitors_api::backup::{BackupPhase, ServerRole};
use visitors_api::drill::{DRILL_REQUESTED_AT, DrillCheck, DrillPhase};
use visitors_api::{MySQLBackup, VisitorsApp};
use visitors_e2e::moto::Moto;
use visitors_e2e::replication::create_replicated_app;
use visitors_e2e::{TestNamespace, cluster, mariadb_job, mariadb_shell_job, run_job, sql_value, wait_for};

const APP: &str = "phys";
const BUCKET: &str = "e2e-physical";
/// Each tick's note: found in the clear in S3, it would say a chunk is not encrypted.
const MARKER: &str = "e2e-physical-tick-5f1c0a77";
const ACCESS_KEY: &str = "e2e-access-key";
const SECRET_KEY: &str = "e2e-secret-key";

async fn secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<std::collections::BTreeMap<_, _>>(),
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
}

/// The sequence number of domain 0 in a MariaDB GTID position (`0-1-42,1-2-7` → 42).
fn domain_zero_sequence(position: &str) -> u64 {
    position
        .split(',')
        .find_map(|gtid| gtid.trim().strip_prefix("0-"))
        .and_then(|rest| rest.rsplit('-').next())
        .and_then(|sequence| sequence.parse().ok())
        .unwrap_or_else(|| panic!("no domain 0 in {position:?}"))
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn a_physical_run_of_a_replica_under_a_writer_is_encrypted_to_s3_and_holds_exactly_its_gtid_position() {
    let client = cluster().await;
    let Some(moto) = Moto::start() else { return };
    assert_eq!(moto.request("PUT", &format!("/{BUCKET}")).unwrap(), 200, "create the bucket");
    let namespace = TestNamespace::create(&client, "e2e-physical").await;
    let ns = namespace.name.clone();
    let apps: Api<VisitorsApp> = Api::namespaced(client.clone(), &ns);
    create_replicated_app(&apps, APP, 2).await;
    let identity = age::x25519::Identity::generate();
    secret(&client, &ns, "s3-keys", &[("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY)]).await;
    secret(&client, &ns, "backup-keys", &[("k1", identity.to_string().expose_secret())]).await;
    let table = "CREATE TABLE visitors.ticks (id INT PRIMARY KEY, note VARCHAR(64) NOT NULL)";
    run_job(&client, &ns, "table", mariadb_job(APP, &ns, "table", table)).await;
    let before = domain_zero_sequence(&sql_value(&client, &ns, APP, "before", "SELECT @@gtid_binlog_pos").await);

    // One row a transaction, as fast as one client goes, until the namespace goes.
    let writer = format!(
        r#"i=1; while [ $i -le 100000 ]; do mariadb -h "$HOST" -uroot -e "INSERT INTO visitors.ticks VALUES ($i, '{MARKER}')" || exit 1; i=$((i+1)); done"#
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let writer_job = serde_json::from_value(mariadb_shell_job(APP, &ns, "ticks", &writer, &[])).unwrap();
    jobs.create(&PostParams::default(), &writer_job).await.expect("start the writer");
    wait_for("the writer's first rows", || async {
        let count: u64 =
            sql_value(&client, &ns, APP, &format!("count-{}", rand_suffix()), "SELECT COUNT(*) FROM visitors.ticks")
                .await
                .parse()
                .unwrap_or(0);
        if count >= 20 { Ok(()) } else { Err(format!("{count} rows")) }
    })
    .await;

    let backups: Api<MySQLBackup> = Api::namespaced(client.clone(), &ns);
    let storage = json!({"s3": {"bucket": BUCKET, "prefix": "prod", "endpoint": moto.endpoint(),
                                "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}});
    let run: MySQLBackup = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "MySQLBackup", "metadata": {"name": "disk"},
        "spec": {"source": {"visitorsApp": APP}, "method": "Physical", "storage": storage,
                 "encryption": {"keySecret": "backup-keys", "keyId": "k1"}, "drill": {}},
    }))
    .unwrap();
    backups.create(&PostParams::default(), &run).await.expect("create the physical run");
    let status = wait_for("the physical run to end", || async {
        let status = backups.get("disk").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.phase {
            Some(BackupPhase::Succeeded) => Ok(status),
            Some(BackupPhase::Failed) => panic!("the physical run failed: {:?} {:?}", status.error, status.conditions),
            phase => Err(format!("{phase:?}")),
        }
    })
    .await;
    let taken_from = status.taken_from.clone().expect("the run names its server");
    assert_eq!(taken_from.role, ServerRole::Replica, "{taken_from:?}");
    assert_eq!(status.encryption_key_id.as_deref(), Some("k1"));
    let gtid = status.snapshot.as_ref().and_then(|s| s.gtid.clone()).expect("the run records its GTID position");

    // S3 holds the chunks and the manifest's envelope, and no row in the clear.
    let prefix = format!("prod/{ns}/{APP}/disk/");
    let keys = moto.keys(BUCKET, &prefix);
    assert!(keys.iter().any(|k| k.ends_with("manifest.json")), "{keys:?}");
    let mut chunks: Vec<&String> = keys.iter().filter(|k| k.contains("/physical/")).collect();
    chunks.sort();
    assert!(!chunks.is_empty(), "{keys:?}");
    let mut stream = Vec::new();
    for key in &chunks {
        let stored = moto.get(BUCKET, key, ACCESS_KEY, SECRET_KEY);
        assert!(!stored.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()), "{key} holds a row in the clear");
        let compressed = age::decrypt(&identity, &stored).unwrap_or_else(|e| panic!("{key} does not decrypt: {e}"));
        stream.extend(zstd::decode_all(&compressed[..]).unwrap_or_else(|e| panic!("{key} is not zstd: {e}")));
    }

    let dir = tempfile::tempdir().unwrap();
    let rows = rows_of_the_prepared_copy(&stream, dir.path());
    let committed = domain_zero_sequence(&gtid) - before;
    assert!(committed > 0, "the run was taken while the writer wrote: {gtid}, {before} before it");
    assert_eq!(
        rows,
        (committed, 1, committed),
        "(rows, min id, max id) of the copy at {gtid}, {before} before the writer"
    );

    let drilled = wait_for("the physical run's drill to end", || async {
        let status = backups.get("disk").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.drill.as_ref().map(|d| d.phase) {
            Some(DrillPhase::Succeeded) => Ok(status),
            Some(DrillPhase::Failed) => panic!("the drill failed: {:?}", status.drill),
            phase => Err(format!("{phase:?}")),
        }
    })
    .await;
    let drill = drilled.drill.clone().unwrap();
    assert!(drilled.verified_time.is_some(), "a drill that passed stamps the run verified");
    assert_eq!(drill.check, Some(DrillCheck::Content), "a replica's run is compared by content: {drill:?}");
    assert_eq!(drill.rows, Some(committed as i64), "the rows of the ticks, the app's only table: {drill:?}");
    assert!(drill.restore_seconds.is_some_and(|s| s >= 0.0), "{drill:?}");

    // A chunk damaged in storage: the next drill's unpack refuses it by name, and the run is a
    // defect for good; the app's own database is never touched.
    let damaged = chunks[0].clone();
    let mut stored = moto.get(BUCKET, &damaged, ACCESS_KEY, SECRET_KEY);
    let middle = stored.len() / 2;
    stored[middle] ^= 0x01;
    moto.put(BUCKET, &damaged, &stored, ACCESS_KEY, SECRET_KEY);
    let patch = json!({"metadata": {"annotations": {DRILL_REQUESTED_AT: jiff::Timestamp::now().to_string()}}});
    backups.patch("disk", &PatchParams::default(), &Patch::Merge(patch)).await.expect("ask for a drill");
    let refused = wait_for("the drill of the damaged run to fail", || async {
        let status = backups.get("disk").await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        match status.drill.as_ref() {
            Some(drill) if drill.phase == DrillPhase::Failed => Ok(status),
            Some(drill)
                if drill.phase == DrillPhase::Succeeded
                    && drill.requested_at != drilled.drill.as_ref().unwrap().requested_at =>
            {
                panic!("a drill of a damaged run passed: {drill:?}")
            }
            drill => Err(format!("{:?}", drill.map(|d| d.phase))),
        }
    })
    .await;
    let failed = refused.drill.unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackupDefect"), "{failed:?}");
    let chunk_name = damaged.rsplit('/').next().unwrap();
    assert!(failed.message.as_deref().unwrap_or_default().contains(chunk_name), "{failed:?}");
    assert!(refused.drill_defect.is_some(), "a defect is kept for good");

    namespace.delete().await;
}

fn rand_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos())
}

/// Extracts `stream` with mbstream, prepares it with mariadb-backup, starts a server on it
/// and reads `(COUNT(*), MIN(id), MAX(id))` of the ticks.
fn rows_of_the_prepared_copy(stream: &[u8], dir: &Path) -> (u64, u64, u64) {
    let data = dir.join("data");
    visitors_test_support::extract_and_prepare(stream, &data);
    let socket = dir.join("s.sock");
    let mut server = Command::new("mariadbd")
        .args(["--no-defaults", "--skip-networking", "--skip-grant-tables", "--user=root"])
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", dir.join("pid").display()))
        .arg(format!("--log-error={}", dir.join("err.log").display()))
        .spawn()
        .expect("mariadbd starts on the copy");
    let query = || {
        Command::new("mariadb")
            .args(["--no-defaults", "-N", "-B"])
            .arg(format!("--socket={}", socket.display()))
            .args(["-e", "SELECT COUNT(*), MIN(id), MAX(id) FROM visitors.ticks"])
            .output()
            .ok()
            .filter(|out| out.status.success())
    };
    let mut answer = None;
    for _ in 0..120 {
        answer = query();
        if answer.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = server.kill();
    let _ = server.wait();
    let out = answer.unwrap_or_else(|| {
        panic!("the copy's server: {}", std::fs::read_to_string(dir.join("err.log")).unwrap_or_default())
    });
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text.split_whitespace().map(|f| f.parse().unwrap()).collect();
    (fields[0], fields[1], fields[2])
}
