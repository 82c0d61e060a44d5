//! What re-seeding a replicated app's MySQL server and setting aside a diverged one take, pure:
//! the ConfigMap of seeding tokens and the init container that empties a server's data
//! directory when a token waits for its pod; the Job that loads a backup run into an empty
//! server; the claim and the Job that copy a diverged server's transactions to a file.

use std::collections::BTreeMap;

use controller_common::agent_job::{AgentInputs, AgentJob, DatabaseAccess, KEYS_MOUNT, KEYS_VOLUME, StorageAccess};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{Resource, ResourceExt};
use visitors_agent_contract::command::{Command, RestoreArgs, RestoredEvents};
use visitors_api::labels::{Component, names};
use visitors_api::visitors_app::secret_keys;
use visitors_api::{MySQLBackup, VisitorsApp};

use super::{child_meta, env, env_from_secret, tls};

/// The ConfigMap of seeding tokens: a key per pod that is to start again empty.
pub fn seeds_config_map_name(app: &str) -> String {
    format!("{}-seeds", names::mysql(app))
}

/// The claim that holds the files of diverged servers' transactions.
pub fn diverged_claim_name(app: &str) -> String {
    format!("{}-diverged", names::mysql(app))
}

const SEEDS_VOLUME: &str = "seeds";
const SEEDS_MOUNT: &str = "/etc/visitors/seeds";
/// The init container of a replicated app's MySQL pods.
pub const SEED_CONTAINER: &str = "seed";

/// Empties the data directory when a seeding token waits for this pod: the server then starts
/// as a new one, and the controller seeds it. The token is read at each start; the controller
/// removes it once the server answered empty, so a later restart keeps the data.
const SEED_SCRIPT: &str = r#"token="$(cat "/etc/visitors/seeds/$POD_NAME" 2>/dev/null || true)"
if [ -n "$token" ]; then
  echo "seeding token $token: emptying /var/lib/mysql to start again"
  find /var/lib/mysql -mindepth 1 -delete
fi"#;

/// The init container of a replicated app's MySQL pods (the MySQL image, for its shell).
pub fn seed_container(app: &VisitorsApp, data_volume: &str) -> Container {
    Container {
        name: SEED_CONTAINER.to_string(),
        image: Some(app.spec.mysql_image().to_string()),
        command: Some(vec!["sh".into(), "-c".into(), SEED_SCRIPT.into()]),
        env: Some(vec![field_env("POD_NAME", "metadata.name")]),
        volume_mounts: Some(vec![
            VolumeMount { name: data_volume.into(), mount_path: "/var/lib/mysql".into(), ..VolumeMount::default() },
            VolumeMount {
                name: SEEDS_VOLUME.into(),
                mount_path: SEEDS_MOUNT.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    }
}

/// The seeding tokens' volume: optional, as the ConfigMap exists only once a server was
/// re-seeded.
pub fn seeds_volume(app: &VisitorsApp) -> Volume {
    Volume {
        name: SEEDS_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: seeds_config_map_name(&app.name_any()),
            optional: Some(true),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn field_env(name: &str, path: &str) -> k8s_openapi::api::core::v1::EnvVar {
    serde_json::from_value(serde_json::json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}))
        .expect("a downward API variable")
}

/// What loading a backup run into an empty server reads and where it writes.
#[derive(Debug, Clone)]
pub struct BackupLoad<'a> {
    pub job: &'a str,
    /// The empty server's stable name.
    pub host: &'a str,
    /// The MySQLBackup run.
    pub run: &'a MySQLBackup,
    /// The agent's `--from` for the location the run recorded.
    pub location: &'a str,
}

/// A load that takes longer fails: a day, at about half a minute per GiB.
const BACKUP_LOAD_DEADLINE_SECONDS: i64 = 24 * 3600;
/// A load's Job stays this long after it ended; a failed one is then tried again.
const BACKUP_LOAD_TTL_SECONDS: i32 = 3600;

/// The Job that loads `load.run` into an empty server: the agent's restore, the manifest the
/// run recorded required, every database of the run replacing what the server holds, kept out
/// of the server's binary log (`--skip-binlog`), its scheduled events disabled as replication
/// leaves them on a replica; the controller then starts the server's binary log at the run's
/// GTID position.
pub fn backup_load_job(app: &VisitorsApp, inputs: &AgentInputs, access: &DatabaseAccess, load: &BackupLoad<'_>) -> Job {
    let status = load.run.status.clone().unwrap_or_default();
    let encryption = load.run.spec.encryption.as_ref();
    let restore = RestoreArgs {
        drop_existing: true,
        skip_binlog: true,
        // The primary runs the events; on a replica replication would have disabled them.
        events: RestoredEvents::DisabledOnReplica,
        parallelism: usize::try_from(load.run.spec.parallelism()).unwrap_or(1),
        progress_interval: 30,
        expect_manifest_sha256: status.manifest_sha256,
        decrypt_keys_dir: encryption.map(|_| KEYS_MOUNT.into()),
        ..RestoreArgs::from(load.location)
    };
    let metadata = child_meta(app, load.job.to_string(), Component::Mysql);
    let mut agent = AgentJob {
        name: load.job.to_string(),
        namespace: app.namespace().unwrap_or_default(),
        labels: metadata.labels.unwrap_or_default(),
        owner: app.controller_owner_ref(&()),
        active_deadline_seconds: BACKUP_LOAD_DEADLINE_SECONDS,
        ..AgentJob::of(inputs, Command::Restore(restore))
            .with_server(load.host, access)
            .with_storage(&load.run.spec.storage, StorageAccess::ReadOnly)
    };
    if let Some(encryption) = encryption {
        agent = agent.with_secret_dir(KEYS_VOLUME, &encryption.key_secret, KEYS_MOUNT);
    }
    let mut job = agent.build();
    if let Some(spec) = job.spec.as_mut() {
        spec.ttl_seconds_after_finished = Some(BACKUP_LOAD_TTL_SECONDS);
    }
    job
}

/// The claim of diverged servers' transactions. It may hold the only copy of those
/// transactions, so it follows the deletion policy as the data volumes do: owned by the app
/// (deleted with it) only under `Delete`.
pub fn diverged_claim(app: &VisitorsApp) -> PersistentVolumeClaim {
    let mut metadata = child_meta(app, diverged_claim_name(&app.name_any()), Component::Mysql);
    metadata.owner_references = Some(super::secret::owner_references(app));
    PersistentVolumeClaim {
        metadata,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: app.spec.storage_class_name().map(ToString::to_string),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), Quantity("1Gi".into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// What an extraction reads and where it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extraction<'a> {
    pub job: &'a str,
    /// The diverged server's stable name.
    pub host: &'a str,
    /// MariaDB: the position after which its transactions are the primary-less ones.
    pub after: &'a str,
    /// MySQL: the primary's GTID set, which the copy leaves out.
    pub primary_set: &'a str,
    /// The first binary log file to read.
    pub first_log: &'a str,
    /// The file written on the claim.
    pub file: &'a str,
    /// MySQL's TLS is on: the copy verifies the server with the app's CA.
    pub tls: Option<&'a str>,
}

/// Copies a diverged server's transactions the primary lacks, as SQL with each row spelled out
/// in comments (`--verbose`), to `file` on the claim; MariaDB's `mariadb-binlog` or MySQL's
/// `mysqlbinlog`, whichever the image has.
const EXTRACT_SCRIPT: &str = r#"set -eu
out="/diverged/$FILE"
tls=""
if command -v mariadb-binlog >/dev/null 2>&1; then
  [ -n "${CA_FILE:-}" ] && tls="--ssl-ca=$CA_FILE --ssl-verify-server-cert"
  mariadb-binlog --read-from-remote-server --host="$HOST" --user=root $tls --start-position="$AFTER" \
    --to-last-log --verbose "$FIRST_LOG" > "$out.partial"
else
  [ -n "${CA_FILE:-}" ] && tls="--ssl-ca=$CA_FILE --ssl-mode=VERIFY_IDENTITY"
  mysqlbinlog --read-from-remote-source=BINLOG-DUMP-GTIDS --host="$HOST" --user=root $tls \
    --exclude-gtids="$PRIMARY_SET" --to-last-log --verbose "$FIRST_LOG" > "$out.partial"
fi
mv "$out.partial" "$out"
echo "$out" > /dev/termination-log"#;

/// The Job that copies a diverged server's transactions to the claim.
pub fn extraction_job(app: &VisitorsApp, secret: &str, extraction: &Extraction<'_>) -> Job {
    let mut environment = vec![
        env("HOST", extraction.host),
        env("AFTER", extraction.after),
        env("PRIMARY_SET", extraction.primary_set),
        env("FIRST_LOG", extraction.first_log),
        env("FILE", extraction.file),
        env_from_secret("MYSQL_PWD", secret, secret_keys::ROOT_PASSWORD),
    ];
    let mut mounts =
        vec![VolumeMount { name: "diverged".into(), mount_path: "/diverged".into(), ..VolumeMount::default() }];
    let mut volumes = vec![Volume {
        name: "diverged".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: diverged_claim_name(&app.name_any()),
            ..PersistentVolumeClaimVolumeSource::default()
        }),
        ..Volume::default()
    }];
    if let Some(secret) = extraction.tls {
        environment.push(env("CA_FILE", tls::CA_FILE));
        mounts.push(tls::mount(tls::CA_MOUNT));
        volumes.push(controller_common::agent_job::secret_keys_volume(
            tls::VOLUME,
            secret,
            &[visitors_api::visitors_app::tls_keys::CA],
            0o444,
        ));
    }
    Job {
        metadata: child_meta(app, extraction.job.to_string(), Component::Mysql),
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            active_deadline_seconds: Some(300),
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: "extract".into(),
                        image: Some(app.spec.mysql_image().to_string()),
                        command: Some(vec!["sh".into(), "-c".into(), EXTRACT_SCRIPT.into()]),
                        env: Some(environment),
                        volume_mounts: Some(mounts),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    automount_service_account_token: Some(false),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;

    #[test]
    fn the_diverged_claim_outlives_the_app_unless_its_policy_is_delete() {
        let mut app = book_app();
        assert_eq!(diverged_claim(&app).metadata.owner_references, Some(vec![]), "Retain by default");
        app.spec.deletion_policy = Some(visitors_api::visitors_app::DeletionPolicy::Delete);
        let owners = diverged_claim(&app).metadata.owner_references.unwrap();
        assert_eq!(owners.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["ex"]);
    }

    #[test]
    fn a_backup_load_restores_the_checked_run_into_the_empty_server_out_of_its_binary_log() {
        let run: MySQLBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "nightly-1", "namespace": "shop"},
            "spec": {"source": {"visitorsApp": "ex"},
                     "storage": {"persistentVolumeClaim": {"claimName": "backups"}},
                     "encryption": {"keySecret": "backup-keys", "keyId": "k1"}},
            "status": {"phase": "Succeeded", "manifestSha256": "ab".repeat(32)},
        }))
        .unwrap();
        let access = DatabaseAccess {
            credentials_secret: "ex-mysql-credentials".into(),
            tls: controller_common::agent_job::ServerTls::Verified {
                ca_secret: "ex-mysql-tls".into(),
                check_name: true,
            },
            servers: Default::default(),
        };
        let inputs = AgentInputs { image: "registry/visitors-operator:1.0".into(), ..AgentInputs::default() };
        let load = BackupLoad {
            job: "ex-mysql-2-seed-3e8",
            host: "ex-mysql-2.ex-mysql-headless.shop.svc",
            run: &run,
            location: "file:///backup/shop/ex/nightly-1",
        };
        let job = backup_load_job(&book_app(), &inputs, &access, &load);
        let spec = job.spec.unwrap();
        assert_eq!(spec.ttl_seconds_after_finished, Some(BACKUP_LOAD_TTL_SECONDS));
        let pod = spec.template.spec.unwrap();
        let args = pod.containers[0].args.clone().unwrap().join(" ");
        for expected in [
            "restore --from file:///backup/shop/ex/nightly-1",
            "--drop-existing",
            "--skip-binlog",
            "--events disabled-on-replica",
            &format!("--expect-manifest-sha256 {}", "ab".repeat(32)),
            "--decrypt-keys-dir /etc/visitors/backup-keys",
        ] {
            assert!(args.contains(expected), "{expected} in {args}");
        }
        let env: BTreeMap<String, Option<String>> =
            pod.containers[0].env.clone().unwrap().into_iter().map(|e| (e.name, e.value)).collect();
        assert_eq!(env["MYSQL_HOST"].as_deref(), Some(load.host), "the empty server, not the primary");
        assert_eq!(env["MYSQL_PWD"], None, "the password comes from the Secret");
        let volumes: Vec<String> = pod.volumes.unwrap().into_iter().map(|v| v.name).collect();
        assert!(volumes.contains(&"backup".to_string()) && volumes.contains(&KEYS_VOLUME.to_string()), "{volumes:?}");
        assert_eq!(job.metadata.owner_references.unwrap()[0].name, "ex");
    }

    #[test]
    fn an_extraction_reads_the_diverged_server_after_the_fork_onto_the_claim() {
        let extraction = Extraction {
            job: "ex-mysql-0-diverged-1a2b",
            host: "ex-mysql-0.ex-mysql-headless.shop.svc",
            after: "0-101-35",
            primary_set: "",
            first_log: "binlog.000001",
            file: "ex-mysql-0-0-101-36.sql",
            tls: Some("ex-mysql-tls"),
        };
        let job = extraction_job(&book_app(), "creds", &extraction);
        let pod = job.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        let env: BTreeMap<String, Option<String>> =
            container.env.clone().unwrap().into_iter().map(|e| (e.name, e.value)).collect();
        assert_eq!(env["AFTER"].as_deref(), Some("0-101-35"));
        assert_eq!(env["MYSQL_PWD"], None, "the password comes from the Secret");
        assert!(container.command.as_ref().unwrap()[2].contains("--start-position=\"$AFTER\""));
        assert_eq!(pod.volumes.unwrap()[0].persistent_volume_claim.as_ref().unwrap().claim_name, "ex-mysql-diverged");
    }
}
