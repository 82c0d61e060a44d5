//! The files of deploy/examples/ on a real cluster, applied as a newcomer applies them: all into
//! one namespace, after the claim and the Secrets their comments ask for. Each object must be
//! accepted by its controller, not only by the API server (tests/crds.rs dry-runs them): its
//! status reaches its generation and no condition says its spec is invalid. Then what each
//! shows, where that is cheap: the apps become Ready with the TLS and the replicas they ask
//! for; the schedules are valid and due (their drill cron too) and the archiving one archives;
//! a run on the claim succeeds (the encrypted one under its key id, with only the public key
//! in the cluster) and a restore of it (with the private key) succeeds; a restore to a second
//! before any run is refused, naming why, and the same restore to a second of the archive
//! succeeds. The S3 examples name servers that do not exist here: they wait for their Secret,
//! which the test does not create.
//!
//! Everything is derived from the files, found by listing the folder: a new example is applied
//! and checked by the rules of its kind and shape without a change here.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};

use age::secrecy::ExposeSecret;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use visitors_api::backup::{BackupPhase, condition as backup_condition};
use visitors_api::conditions::{self, PENDING, REASON_INVALID_SPEC, WRITES_ACKNOWLEDGED, reason};
use visitors_api::point_in_time::PointInTimeSource;
use visitors_api::restore::{RestorePhase, reason as restore_reason};
use visitors_api::storage::BackupStorage;
use visitors_api::visitors_app::{Durability, TlsMode};
use visitors_api::{MySQLBackup, MySQLRestore, VisitorsApp};
use visitors_e2e::archive::{self, rfc3339};
use visitors_e2e::certificates::{certificate_secret, openssl_certificate};
use visitors_e2e::replication::replicating;
use visitors_e2e::{
    AppInitLock, TestNamespace, app_ready_at_generation, backup_finished, cluster, conditions_text,
    create_backup_claim, repo_root, restore_finished, wait_for,
};

const FIELD_MANAGER: &str = "e2e-examples";

/// One object of a file of deploy/examples/.
struct Example {
    file: String,
    object: Value,
}

impl Example {
    fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn typed<K: serde::de::DeserializeOwned>(&self) -> K {
        serde_json::from_value(self.object.clone()).unwrap_or_else(|e| panic!("{}: {e}", self.file))
    }
}

/// Every object of every `.yaml` file of deploy/examples/, in file order.
fn examples() -> Vec<Example> {
    let folder = repo_root().join("deploy/examples");
    let mut files: Vec<_> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", folder.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    let mut examples = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let objects: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        examples.extend(objects.into_iter().map(|object| Example { file: file.clone(), object }));
    }
    examples
}

fn of_kind<K: serde::de::DeserializeOwned>(examples: &[Example], kind: &str) -> Vec<K> {
    examples.iter().filter(|e| e.kind() == kind).map(Example::typed).collect()
}

fn api_resource(kind: &str) -> ApiResource {
    match kind {
        "VisitorsApp" => ApiResource::erase::<VisitorsApp>(&()),
        "MySQLBackup" => ApiResource::erase::<MySQLBackup>(&()),
        "MySQLRestore" => ApiResource::erase::<MySQLRestore>(&()),
        other => {
            panic!("deploy/examples holds a {other}: only the suite's kinds belong there (the OLM bundle shows them)")
        }
    }
}

fn dynamic_api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &api_resource(kind))
}

// ---------- what the examples' comments ask for first ----------

/// A random lowercase hex string, for the passwords of a credentials Secret.
fn random_hex() -> String {
    (0..2).map(|_| format!("{:016x}", std::hash::RandomState::new().build_hasher().finish())).collect()
}

async fn create_secret(client: &Client, ns: &str, secret: Value) {
    let secret: Secret = serde_json::from_value(secret).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create a Secret");
}

/// The claims the examples store backups on.
fn claims(examples: &[Example]) -> BTreeSet<String> {
    let mut storages: Vec<BackupStorage> =
        of_kind::<MySQLBackup>(examples, "MySQLBackup").into_iter().map(|b| b.spec.storage).collect();
    storages
        .extend(of_kind::<MySQLRestore>(examples, "MySQLRestore").into_iter().filter_map(|r| r.spec.source.storage));
    storages.into_iter().filter_map(|s| s.persistent_volume_claim).map(|c| c.claim_name).collect()
}

/// Each app's credentials Secret, with random passwords; and each app's own certificate, of a
/// CA made with openssl.
async fn create_app_secrets(client: &Client, ns: &str, examples: &[Example]) {
    for app in of_kind::<VisitorsApp>(examples, "VisitorsApp") {
        if let Some(name) = &app.spec.credentials_secret {
            let data = json!({"username": "visitors", "password": random_hex(), "root-password": random_hex()});
            create_secret(client, ns, json!({"metadata": {"name": name}, "stringData": data})).await;
        }
        if let Some(name) = app.spec.tls.as_ref().and_then(|t| t.secret_name.as_ref()) {
            let dir = tempfile::tempdir().unwrap();
            let (ca, crt, key) = openssl_certificate(dir.path(), &app.name_any(), ns);
            create_secret(client, ns, certificate_secret(name, &ca, &crt, &key)).await;
        }
    }
}

/// The key Secrets of encrypted examples, each key a new throwaway age identity per key id: a
/// backup's Secret holds the public key (a backup needs no more), a restore's the private one.
async fn create_key_secrets(client: &Client, ns: &str, examples: &[Example]) {
    let backups: Vec<MySQLBackup> = of_kind(examples, "MySQLBackup");
    let mut identities = BTreeMap::new();
    let mut secrets: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for encryption in backups.iter().filter_map(|b| b.spec.encryption.as_ref()) {
        let identity: &age::x25519::Identity =
            identities.entry(encryption.key_id.clone()).or_insert_with(age::x25519::Identity::generate);
        let entries = secrets.entry(encryption.key_secret.clone()).or_default();
        entries.insert(encryption.key_id.clone(), identity.to_public().to_string());
    }
    for restore in of_kind::<MySQLRestore>(examples, "MySQLRestore") {
        let (Some(secret), Some(run)) = (restore.spec.source.key_secret, restore.spec.source.backup) else { continue };
        let run = backups.iter().find(|b| b.name_any() == run).unwrap_or_else(|| panic!("no example run {run}"));
        let key_id =
            &run.spec.encryption.as_ref().expect("a restore with a keySecret restores an encrypted run").key_id;
        let identity = &identities[key_id];
        secrets.entry(secret).or_default().insert(key_id.clone(), identity.to_string().expose_secret().to_string());
    }
    for (name, entries) in secrets {
        create_secret(client, ns, json!({"metadata": {"name": name}, "stringData": entries})).await;
    }
}

// ---------- applied, and accepted by the controller ----------

async fn apply(client: &Client, ns: &str, example: &Example) {
    let mut object = example.object.clone();
    object["metadata"]["namespace"] = json!(ns);
    dynamic_api(client, ns, example.kind())
        .patch(example.name(), &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(&object))
        .await
        .unwrap_or_else(|e| panic!("{}: the API server refuses it: {e}", example.file));
}

/// The conditions of an object that say its spec is invalid.
fn invalid_conditions(conditions: &[Condition]) -> Vec<&Condition> {
    let invalid_schedule = |c: &Condition| c.type_ == backup_condition::SCHEDULE_VALID && c.status == "False";
    conditions.iter().filter(|c| c.reason == REASON_INVALID_SPEC || invalid_schedule(c)).collect()
}

/// Waits until the example's controller has seen its current spec (`status.observedGeneration`),
/// then fails the test if a condition says the spec is invalid.
async fn accepted_by_its_controller(client: &Client, ns: &str, example: &Example) {
    let api = dynamic_api(client, ns, example.kind());
    let what = format!("{} {} ({})", example.kind(), example.name(), example.file);
    let object = wait_for(&format!("the controller of {what} to see it"), || async {
        let object = api.get(example.name()).await.map_err(|e| e.to_string())?;
        let observed = object.data["status"]["observedGeneration"].as_i64();
        if observed.is_some() && observed == object.metadata.generation {
            Ok(object)
        } else {
            Err(format!("observedGeneration {observed:?}, generation {:?}", object.metadata.generation))
        }
    })
    .await;
    let conditions: Vec<Condition> =
        serde_json::from_value(object.data["status"]["conditions"].clone()).unwrap_or_default();
    let invalid = invalid_conditions(&conditions);
    assert!(invalid.is_empty(), "{what}: its controller finds the spec invalid: {invalid:?}");
}

// ---------- what each shows ----------

/// An app is Ready with the TLS it asks for (its own certificate's Secret, or the generated
/// one), and, with replicas, a primary that every replica replicates from.
async fn app_runs_as_shown(client: &Client, ns: &str, example: &VisitorsApp) {
    let apps = Api::<VisitorsApp>::namespaced(client.clone(), ns);
    let name = example.name_any();
    let app =
        wait_for(&format!("VisitorsApp {name} to become Ready"), || app_ready_at_generation(&apps, &name, 1)).await;
    let tls = example.spec.tls.clone().unwrap_or_default();
    let shown = app.status.and_then(|s| s.tls).unwrap_or_else(|| panic!("VisitorsApp {name} has no status.tls"));
    assert_eq!(shown.mode, tls.mode.unwrap_or_default(), "VisitorsApp {name}: status.tls {shown:?}");
    if shown.mode == TlsMode::Required {
        let secret = tls.secret_name.unwrap_or_else(|| format!("{name}-mysql-tls"));
        assert_eq!(shown.secret_name.as_deref(), Some(secret.as_str()), "VisitorsApp {name}: status.tls {shown:?}");
        assert!(shown.not_after.is_some(), "VisitorsApp {name}: no certificate expiry in status.tls {shown:?}");
    }
    let mysql = example.spec.mysql.clone().unwrap_or_default();
    let servers = mysql.replicas.unwrap_or(1);
    if servers < 2 {
        return;
    }
    wait_for(&format!("VisitorsApp {name}'s replicas to replicate"), || replicating(&apps, &name, servers - 1)).await;
    let durability = mysql.replication.and_then(|r| r.durability).unwrap_or_default();
    if durability == Durability::Acknowledged {
        wait_for(&format!("VisitorsApp {name}'s writes to be acknowledged"), || async {
            let app = apps.get(&name).await.map_err(|e| e.to_string())?;
            let conditions = app.status.unwrap_or_default().conditions;
            if conditions::is_true(&conditions, WRITES_ACKNOWLEDGED) {
                Ok(())
            } else {
                Err(conditions_text(&conditions))
            }
        })
        .await;
    }
}

fn s3_credentials_secret(storage: &BackupStorage) -> Option<String> {
    storage.s3.as_ref().and_then(|s3| s3.credentials_secret.as_ref()).map(|secret| secret.name.clone())
}

/// `Ok` once `conditions` hold `Pending=True` with `reason`.
fn pending_for(conditions: &[Condition], reason: &str) -> Result<(), String> {
    match conditions::find(conditions, PENDING) {
        Some(c) if c.status == "True" && c.reason == reason => Ok(()),
        _ => Err(conditions_text(conditions)),
    }
}

/// A schedule is valid and due: its next fire time is set (and its next drill's, with a drill
/// cron); one archiving to a claim reports `Archiving`.
async fn schedule_is_due(backups: &Api<MySQLBackup>, example: &MySQLBackup) {
    let name = example.name_any();
    let status = wait_for(&format!("schedule {name}'s next fire times"), || async {
        let status = backups.get(&name).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        let drill_cron = example.spec.drill.as_ref().is_some_and(|d| d.cron.is_some());
        let due = status.next_schedule_time.is_some() && (!drill_cron || status.next_drill_time.is_some());
        if due { Ok(status) } else { Err(format!("{status:?}")) }
    })
    .await;
    assert!(
        conditions::is_true(&status.conditions, backup_condition::SCHEDULE_VALID),
        "schedule {name}: {}",
        conditions_text(&status.conditions)
    );
    let archives = example.spec.point_in_time.as_ref().is_some_and(|p| p.enabled.unwrap_or(true));
    if archives && example.spec.storage.persistent_volume_claim.is_some() {
        let schedule = wait_for(&format!("schedule {name}'s archiver to report"), || {
            archive::archiving_is(backups, &name, "True", "Archiving")
        })
        .await;
        let location = schedule.status.and_then(|s| s.point_in_time).and_then(|p| p.location);
        assert!(location.is_some_and(|l| l.contains("_binlog")), "schedule {name}: no archive location");
    }
}

/// A run on a claim succeeds (under the key id it asks for); one to S3 waits for the Secret of
/// its keys, which the test does not create (its server does not exist here).
async fn run_ends_as_shown(backups: &Api<MySQLBackup>, example: &MySQLBackup) {
    let name = example.name_any();
    if let Some(secret) = s3_credentials_secret(&example.spec.storage) {
        wait_for(&format!("run {name} to wait for Secret {secret}"), || async {
            let status = backups.get(&name).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
            pending_for(&status.conditions, reason::WAITING_FOR_STORAGE_SECRET)
        })
        .await;
        return;
    }
    if example.spec.storage.s3.is_some() {
        return; // the pod's own S3 credentials, to a server that does not exist here
    }
    let status = backup_finished(backups, &name).await.status.unwrap_or_default();
    assert_eq!(
        status.phase,
        Some(BackupPhase::Succeeded),
        "run {name}: {:?} {}",
        status.error,
        conditions_text(&status.conditions)
    );
    let key_id = example.spec.encryption.as_ref().map(|e| e.key_id.as_str());
    assert_eq!(status.encryption_key_id.as_deref(), key_id, "run {name}: the key it was encrypted with");
}

async fn backup_does_what_it_shows(client: &Client, ns: &str, example: &MySQLBackup) {
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), ns);
    if example.spec.is_schedule() {
        schedule_is_due(&backups, example).await;
    } else {
        run_ends_as_shown(&backups, example).await;
    }
}

/// Whether an example run ends `Succeeded` here (on a claim); a run to S3 never starts.
fn run_succeeds_here(run: &MySQLBackup) -> bool {
    run.spec.storage.persistent_volume_claim.is_some()
}

async fn restore_waits_for(restores: &Api<MySQLRestore>, name: &str, reason: &str) {
    wait_for(&format!("restore {name} to wait ({reason})"), || async {
        let status = restores.get(name).await.map_err(|e| e.to_string())?.status.unwrap_or_default();
        pending_for(&status.conditions, reason)
    })
    .await;
}

async fn restore_succeeds(restores: &Api<MySQLRestore>, name: &str) -> visitors_api::MySQLRestoreStatus {
    let status = restore_finished(restores, name).await.status.unwrap_or_default();
    let why = format!("restore {name}: {:?} {}", status.error, conditions_text(&status.conditions));
    assert_eq!(status.phase, Some(RestorePhase::Succeeded), "{why}");
    status
}

/// A restore to a point in a fresh namespace is refused before it starts anything: its target
/// is in the future, or before every run (there is none yet).
async fn restore_is_refused_before_any_run(restores: &Api<MySQLRestore>, name: &str, point: &PointInTimeSource) {
    let status = restore_finished(restores, name).await.status.unwrap_or_default();
    let in_the_future = point.target_time.as_ref().is_some_and(|t| t.0 > jiff::Timestamp::now());
    let why =
        if in_the_future { restore_reason::TARGET_IN_THE_FUTURE } else { restore_reason::TARGET_BEFORE_OLDEST_BACKUP };
    let ready = conditions::find(&status.conditions, conditions::READY).map(|c| c.reason.as_str());
    let shown = format!("restore {name}: {}", conditions_text(&status.conditions));
    assert_eq!((status.phase, ready), (Some(RestorePhase::Failed), Some(why)), "{shown}");
    assert_eq!(status.job_name, None, "restore {name}: refused before any Job");
}

/// A restore of a run that succeeds here succeeds; of one that waits, waits for it; from an S3
/// location, waits for its Secret; to a point in time, is refused (no run yet), naming why.
async fn restore_does_what_it_shows(client: &Client, ns: &str, example: &MySQLRestore, examples: &[Example]) {
    let restores = Api::<MySQLRestore>::namespaced(client.clone(), ns);
    let name = example.name_any();
    let source = &example.spec.source;
    if let Some(point) = &source.point_in_time {
        restore_is_refused_before_any_run(&restores, &name, point).await;
    } else if let Some(run) = &source.backup {
        let runs: Vec<MySQLBackup> = of_kind(examples, "MySQLBackup");
        let run = runs
            .iter()
            .find(|r| &r.name_any() == run)
            .unwrap_or_else(|| panic!("restore {name}: no example run {run}"));
        if run_succeeds_here(run) {
            restore_succeeds(&restores, &name).await;
        } else {
            restore_waits_for(&restores, &name, restore_reason::BACKUP_NOT_FINISHED).await;
        }
    } else if source.storage.as_ref().and_then(s3_credentials_secret).is_some() {
        restore_waits_for(&restores, &name, reason::WAITING_FOR_STORAGE_SECRET).await;
    }
}

async fn does_what_it_shows(client: &Client, ns: &str, example: &Example, examples: &[Example]) {
    accepted_by_its_controller(client, ns, example).await;
    match example.kind() {
        "MySQLBackup" => backup_does_what_it_shows(client, ns, &example.typed()).await,
        "MySQLRestore" => restore_does_what_it_shows(client, ns, &example.typed(), examples).await,
        _ => {} // the apps were checked while they initialised
    }
}

/// The newest completion time of the restores of the namespace so far (Unix seconds).
async fn last_restore_completion(restores: &Api<MySQLRestore>) -> i64 {
    let listed = restores.list(&Default::default()).await.expect("list the restores");
    let completed = listed.items.iter().filter_map(|r| r.status.as_ref()?.completion_time.as_ref());
    completed.map(|t| t.0.as_second()).max().unwrap_or(0)
}

/// The restore to a time of `example` again, to a second its schedule's archive holds: from the
/// newest run before it, then the archive. A user waits for the schedule's next run; the test
/// makes it fire every minute. The second is after every restore so far: a replay never crosses
/// an earlier in-place restore of the database (docs/backup-restore.md).
async fn restores_to_a_second_of_the_archive(client: &Client, ns: &str, example: &MySQLRestore) {
    let schedule = example.spec.source.point_in_time.as_ref().expect("a restore to a point in time").backup.clone();
    let backups = Api::<MySQLBackup>::namespaced(client.clone(), ns);
    let every_minute = json!({"spec": {"schedule": {"cron": "* * * * *"}}});
    backups.patch(&schedule, &PatchParams::default(), &Patch::Merge(every_minute)).await.expect("patch the schedule");
    let restores = Api::<MySQLRestore>::namespaced(client.clone(), ns);
    let after = last_restore_completion(&restores).await;
    let (run, snapshot) = wait_for(&format!("a run of {schedule} after the last restore"), || async {
        let runs = archive::successful_runs(&backups, &schedule).await;
        runs.into_iter().find(|(_, at)| *at > after).ok_or_else(|| "none yet".to_string())
    })
    .await;
    archive::archived_until(&backups, &schedule, snapshot).await;
    let name = format!("{}-in-window", example.name_any());
    let mut again = MySQLRestore::new(&name, example.spec.clone());
    let point = again.spec.source.point_in_time.as_mut().unwrap();
    point.target_time = Some(Time(jiff::Timestamp::from_second(snapshot).unwrap()));
    point.target_gtid = None;
    restores.create(&PostParams::default(), &again).await.expect("create the restore");
    let status = restore_succeeds(&restores, &name).await;
    assert_eq!(status.backup_name.as_deref(), Some(run.as_str()), "restore {name}: the newest run before the target");
    let replayed = status.point_in_time.and_then(|p| p.target);
    assert_eq!(replayed.as_deref(), Some(rfc3339(snapshot).as_str()), "restore {name}: its target");
}

#[tokio::test]
#[ignore = "end-to-end: needs a cluster with the suite installed; run e2e/run.sh"]
async fn every_example_is_accepted_by_its_controller_and_does_what_it_shows() {
    let client = cluster().await;
    let examples = examples();
    // Six shipped before the examples of drills, archiving, encryption, TLS and replicas.
    assert!(examples.len() >= 14, "found only {} examples: is the listing broken?", examples.len());
    let namespace = TestNamespace::create(&client, "e2e-examples").await;
    let ns = namespace.name.clone();
    eprintln!("namespace {ns}");
    for claim in claims(&examples) {
        create_backup_claim(&client, &ns, &claim).await;
    }
    create_app_secrets(&client, &ns, &examples).await;
    create_key_secrets(&client, &ns, &examples).await;
    // The apps and the backups together, as a GitOps sync applies them: a run waits for its
    // app's MySQL to answer (the README says so); the databases initialise in this test's turn
    // (AppInitLock). The restores once the apps are Ready: each replaces a database.
    let (restores, rest): (Vec<&Example>, Vec<&Example>) = examples.iter().partition(|e| e.kind() == "MySQLRestore");
    {
        let _one_at_a_time = AppInitLock::take().await;
        for example in &rest {
            apply(&client, &ns, example).await;
        }
        let apps: Vec<VisitorsApp> = of_kind(&examples, "VisitorsApp");
        join_all(apps.iter().map(|app| app_runs_as_shown(&client, &ns, app))).await;
    }
    for example in &restores {
        apply(&client, &ns, example).await;
    }
    join_all(examples.iter().map(|example| does_what_it_shows(&client, &ns, example, &examples))).await;
    let restores: Vec<MySQLRestore> = of_kind(&examples, "MySQLRestore");
    for restore in restores.iter().filter(|r| r.spec.source.point_in_time.is_some()) {
        restores_to_a_second_of_the_archive(&client, &ns, restore).await;
    }
    namespace.delete().await;
}
