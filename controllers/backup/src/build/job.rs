//! The Job that runs one backup: `visitors-agent backup --to <location>` against the MySQL
//! server the run reads (the app's client Service, or a replica's own name), as root, with
//! every credential from a Secret reference; a physical run's adds the tool's container
//! ([`super::physical`]).

use std::collections::BTreeMap;

use controller_common::agent_job::{AgentInputs, AgentJob, DatabaseAccess, KEYS_MOUNT, KEYS_VOLUME, StorageAccess};
use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use visitors_agent_contract::command::{BackupArgs, Command, Compression, DeleteArgs, EncryptArgs};
use visitors_api::MySQLBackup;
use visitors_api::backup::{BackupMethod, Compression as SpecCompression, ServerRole, TakenFrom};
use visitors_api::encryption::BackupEncryption;
use visitors_api::labels::names;

use super::physical::with_backup_tool;
use super::{backup_path, run_labels};
use crate::read_from::ReadFrom;

/// The Job's name: derived from the run, so a repeated reconcile finds it instead of starting a
/// second one.
pub fn job_name(backup: &MySQLBackup) -> String {
    names::backup_job(&backup.name_any())
}

/// The agent's `--to` location of the run.
pub fn agent_location(backup: &MySQLBackup) -> String {
    backup.spec.storage.agent_location(&backup_path(backup))
}

/// Seconds between the progress lines of a Job's agent.
pub const PROGRESS_INTERVAL: u64 = 30;

/// What the agent of run `backup` does; an encrypted run encrypts to the key
/// `spec.encryption.keyId`, mounted from its Secret (see [`backup_job`]).
pub fn backup_command(backup: &MySQLBackup) -> Command {
    let physical = backup.spec.method() == BackupMethod::Physical;
    Command::Backup(BackupArgs {
        compression: compression(backup.spec.compression()),
        parallelism: usize::try_from(backup.spec.parallelism()).unwrap_or(1),
        progress_interval: PROGRESS_INTERVAL,
        encryption: encrypt_args(backup.spec.encryption.as_ref()),
        physical_stream: physical.then(|| visitors_agent_contract::physical::PIPE.to_string()),
        ..BackupArgs::to(agent_location(backup))
    })
}

/// The agent's arguments to encrypt what it stores to `spec.encryption`'s key, as
/// [`with_encryption_key`] mounts it.
pub fn encrypt_args(encryption: Option<&BackupEncryption>) -> EncryptArgs {
    EncryptArgs {
        encrypt_key_file: encryption.map(|e| format!("{KEYS_MOUNT}/{}", e.key_id).into()),
        encrypt_key_id: encryption.map(|e| e.key_id.clone()),
    }
}

/// Mounts one key of `encryption`'s Secret, and no other: `key_id`, else `keyId`, the one new
/// runs and new archive segments are encrypted with. Such a pod never sees the keys of older
/// runs.
pub fn with_encryption_key(agent: AgentJob, encryption: Option<&BackupEncryption>, key_id: Option<&str>) -> AgentJob {
    match encryption {
        Some(encryption) => {
            let key_id = key_id.unwrap_or(&encryption.key_id);
            agent.with_secret_files(KEYS_VOLUME, &encryption.key_secret, &[key_id], KEYS_MOUNT)
        }
        None => agent,
    }
}

fn compression(compression: SpecCompression) -> Compression {
    match compression {
        SpecCompression::Zstd => Compression::Zstd,
        SpecCompression::Gzip => Compression::Gzip,
        SpecCompression::None => Compression::None,
    }
}

/// Annotations of a backup Job naming the server it reads (`status.takenFrom`).
pub const TAKEN_FROM_POD: &str = "example.com/taken-from-pod";
pub const TAKEN_FROM_ROLE: &str = "example.com/taken-from-role";

/// The Job of run `backup`, reading the server `read_from` names, as `access` says.
pub fn backup_job(backup: &MySQLBackup, inputs: &AgentInputs, access: &DatabaseAccess, read_from: &ReadFrom) -> Job {
    let namespace = backup.namespace().unwrap_or_default();
    let physical = backup.spec.method() == BackupMethod::Physical;
    // A physical run reads one pod's files: its SQL must reach that very server, by its own
    // name, even the primary's (the client Service could lead elsewhere after a failover).
    let host = match physical {
        true => names::mysql_pod_host(&backup.spec.source.visitors_app, &read_from.taken_from.pod, &namespace),
        false => read_from.host.clone(),
    };
    let agent = AgentJob::of(inputs, backup_command(backup))
        .with_server(&host, access)
        .with_storage(&backup.spec.storage, StorageAccess::ReadWrite);
    let agent = with_encryption_key(agent, backup.spec.encryption.as_ref(), None);
    let mut job = AgentJob {
        name: job_name(backup),
        namespace: namespace.clone(),
        labels: run_labels(backup),
        owner: backup.controller_owner_ref(&()),
        active_deadline_seconds: backup.spec.active_deadline_seconds(),
        resources: backup.spec.resources.clone(),
        ..agent
    }
    .build();
    let role = match read_from.taken_from.role {
        ServerRole::Primary => "Primary",
        ServerRole::Replica => "Replica",
    };
    job.metadata.annotations = Some(BTreeMap::from([
        (TAKEN_FROM_POD.to_string(), read_from.taken_from.pod.clone()),
        (TAKEN_FROM_ROLE.to_string(), role.to_string()),
    ]));
    match physical {
        true => with_backup_tool(job, &host, access, &read_from.taken_from.pod),
        false => job,
    }
}

/// The server a backup Job reads, as its annotations name it.
pub fn taken_from(job: &Job) -> Option<TakenFrom> {
    let annotations = job.metadata.annotations.as_ref()?;
    let role = match annotations.get(TAKEN_FROM_ROLE)?.as_str() {
        "Replica" => ServerRole::Replica,
        _ => ServerRole::Primary,
    };
    Some(TakenFrom { pod: annotations.get(TAKEN_FROM_POD)?.clone(), role })
}

/// The name of the Job that deletes the run's stored backup (`deletionPolicy: Delete`).
pub fn delete_job_name(backup: &MySQLBackup) -> String {
    format!("{}-delete", backup.name_any())
}

/// The Job that deletes the stored backup of run `backup`: `visitors-agent delete <location>
/// --break-lock`, with the storage access of the backup Job and no database credentials.
/// `--break-lock` is safe because it only runs once the run's backup Job and its pods are gone:
/// a lock left there is one a killed backup left.
pub fn delete_job(backup: &MySQLBackup, inputs: &AgentInputs) -> Job {
    let namespace = backup.namespace().unwrap_or_default();
    let command = Command::Delete(DeleteArgs { break_lock: true, ..DeleteArgs::of(agent_location(backup)) });
    AgentJob {
        name: delete_job_name(backup),
        namespace,
        labels: run_labels(backup),
        owner: backup.controller_owner_ref(&()),
        active_deadline_seconds: backup.spec.active_deadline_seconds(),
        resources: backup.spec.resources.clone(),
        ..AgentJob::of(inputs, command).with_storage(&backup.spec.storage, StorageAccess::ReadWrite)
    }
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::{run, s3_run};
    use k8s_openapi::api::core::v1::Container;

    fn credentials() -> DatabaseAccess {
        DatabaseAccess {
            credentials_secret: "ex-mysql-credentials".into(),
            tls: controller_common::agent_job::ServerTls::Disabled,
            servers: Default::default(),
        }
    }

    /// The app's one server, as `read_from::choose` names it.
    fn primary() -> ReadFrom {
        let servers = controller_common::agent_job::MysqlServers { wanted: 1, ..Default::default() };
        crate::read_from::choose(Default::default(), "ex", "shop", &servers).into_ready::<()>().expect("the server")
    }

    #[test]
    fn a_backup_of_a_replica_reads_it_by_its_own_name_and_says_so() {
        let servers = controller_common::agent_job::MysqlServers {
            wanted: 3,
            primary: Some("ex-mysql-0".into()),
            replicas: vec![("ex-mysql-1".into(), Some(0))],
            ..Default::default()
        };
        let replica = crate::read_from::choose(Default::default(), "ex", "shop", &servers).into_ready::<()>().unwrap();
        let job = backup_job(&run(), &inputs(), &credentials(), &replica);
        assert_eq!(env_value(container(&job), "MYSQL_HOST"), Some("ex-mysql-1.ex-mysql-headless.shop.svc"));
        assert_eq!(taken_from(&job), Some(TakenFrom { pod: "ex-mysql-1".into(), role: ServerRole::Replica }));
        let single = backup_job(&run(), &inputs(), &credentials(), &primary());
        assert_eq!(taken_from(&single), Some(TakenFrom { pod: "ex-mysql-0".into(), role: ServerRole::Primary }));
    }

    fn inputs() -> AgentInputs {
        AgentInputs {
            image: "registry/visitors-operator:1.0".into(),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            otlp_endpoint: Some("http://jaeger:4318".into()),
        }
    }

    fn container(job: &Job) -> &Container {
        &job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    fn env_value<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
        container.env.as_ref().unwrap().iter().find(|e| e.name == name).and_then(|e| e.value.as_deref())
    }

    fn secret_ref(container: &Container, name: &str) -> (String, String) {
        let var = container.env.as_ref().unwrap().iter().find(|e| e.name == name).unwrap();
        assert_eq!(var.value, None, "{name} must come from a Secret");
        let selector = var.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        (selector.name.clone(), selector.key.clone())
    }

    #[test]
    fn pvc_backup_job() {
        let mut run = run();
        run.spec.resources = serde_json::from_value(serde_json::json!({"limits": {"memory": "512Mi"}})).unwrap();
        let job = backup_job(&run, &inputs(), &credentials(), &primary());
        assert_eq!(job.metadata.name.as_deref(), Some("b1-backup"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("MySQLBackup", "b1", Some(true)));
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["example.com/visitors-app"], "ex");
        assert_eq!(labels["app.kubernetes.io/component"], "backup");
        let spec = job.spec.as_ref().unwrap();
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(900)));
        let container = container(&job);
        assert_eq!(container.image.as_deref(), Some("registry/visitors-operator:1.0"));
        assert_eq!(container.command.as_ref().unwrap(), &["/usr/local/bin/visitors-agent"]);
        let args = container.args.as_ref().unwrap().join(" ");
        assert!(
            args.contains("backup --to file:///backup/mysql/shop/ex/b1 --compression zstd --parallelism 2"),
            "{args}"
        );
        assert_eq!(env_value(container, "MYSQL_HOST"), Some("ex-mysql.shop.svc"));
        assert_eq!(env_value(container, "MYSQL_USER"), Some("root"));
        assert_eq!(container.resources, run.spec.resources, "resources from the spec");
        assert_eq!(secret_ref(container, "MYSQL_PWD"), ("ex-mysql-credentials".into(), "root-password".into()));
        assert_eq!(env_value(container, "TRACEPARENT"), inputs().traceparent.as_deref());
        assert_eq!(env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT"), Some("http://jaeger:4318"));
        let pod = spec.template.spec.as_ref().unwrap();
        let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "backup").unwrap();
        assert_eq!(volume.persistent_volume_claim.as_ref().unwrap().claim_name, "backups");
    }

    #[test]
    fn s3_backup_job_reads_keys_from_the_secret() {
        let job = backup_job(
            &s3_run(),
            &AgentInputs { traceparent: None, otlp_endpoint: None, ..inputs() },
            &credentials(),
            &primary(),
        );
        let container = container(&job);
        let args = container.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--to s3://backups/prod/shop/ex/b1"), "{args}");
        assert_eq!(secret_ref(container, "AWS_ACCESS_KEY_ID"), ("s3-keys".into(), "AWS_ACCESS_KEY_ID".into()));
        assert_eq!(secret_ref(container, "AWS_SECRET_ACCESS_KEY"), ("s3-keys".into(), "AWS_SECRET_ACCESS_KEY".into()));
        assert_eq!(env_value(container, "AWS_ENDPOINT_URL"), Some("http://minio:9000"));
        assert_eq!(env_value(container, "AWS_S3_FORCE_PATH_STYLE"), Some("true"));
        assert_eq!(env_value(container, "TRACEPARENT"), None);
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        assert!(pod.volumes.as_ref().unwrap().iter().all(|v| v.persistent_volume_claim.is_none()));
    }

    #[test]
    fn delete_jobs_delete_the_runs_location_with_the_storage_only() {
        let job = delete_job(&run(), &inputs());
        assert_eq!(job.metadata.name.as_deref(), Some("b1-delete"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("MySQLBackup", "b1"));
        assert_eq!(
            job.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"],
            "backup",
            "the Job watch sees it"
        );
        let agent = container(&job);
        assert_eq!(agent.command.as_ref().unwrap(), &["/usr/local/bin/visitors-agent"]);
        let args = agent.args.as_ref().unwrap().join(" ");
        assert!(args.ends_with("delete file:///backup/mysql/shop/ex/b1 --break-lock"), "{args}");
        assert!(agent.env.iter().flatten().all(|e| !e.name.starts_with("MYSQL")), "no database access");
        let spec = job.spec.as_ref().unwrap();
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(900)));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(
            pod.security_context,
            backup_job(&run(), &inputs(), &credentials(), &primary())
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .security_context
        );
        let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "backup").unwrap();
        assert_eq!(volume.persistent_volume_claim.as_ref().unwrap().claim_name, "backups");

        let s3 = delete_job(&s3_run(), &inputs());
        let s3_container = container(&s3);
        assert!(s3_container.args.as_ref().unwrap().join(" ").contains("delete s3://backups/prod/shop/ex/b1"));
        assert_eq!(
            secret_ref(s3_container, "AWS_SECRET_ACCESS_KEY"),
            ("s3-keys".into(), "AWS_SECRET_ACCESS_KEY".into())
        );
    }

    #[test]
    fn an_encrypted_run_encrypts_to_its_key_id_and_mounts_that_key_only() {
        use visitors_api::encryption::BackupEncryption;
        let mut encrypted = run();
        encrypted.spec.encryption = Some(BackupEncryption { key_secret: "backup-keys".into(), key_id: "k2".into() });
        let job = backup_job(&encrypted, &inputs(), &credentials(), &primary());
        let args = container(&job).args.clone().unwrap().join(" ");
        assert!(args.contains("--encrypt-key-file /etc/visitors/backup-keys/k2 --encrypt-key-id k2"), "{args}");
        let pod = job.spec.unwrap().template.spec.unwrap();
        let keys = pod.volumes.unwrap().into_iter().find(|v| v.name == "backup-keys").unwrap().secret.unwrap();
        assert_eq!(keys.secret_name.as_deref(), Some("backup-keys"));
        assert_eq!(keys.items.unwrap().iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["k2"]);
        let env = pod.containers[0].env.clone().unwrap();
        assert!(
            env.iter().all(|e| e
                .value_from
                .as_ref()
                .and_then(|v| v.secret_key_ref.as_ref())
                .is_none_or(|r| r.name != "backup-keys")),
            "the key is a file, never a variable"
        );
    }

    #[test]
    fn status_location_and_agent_location_name_the_same_folder() {
        assert_eq!(run().spec.storage.location(&backup_path(&run())), "pvc://backups/mysql/shop/ex/b1");
        assert_eq!(agent_location(&s3_run()), s3_run().spec.storage.location(&backup_path(&s3_run())));
    }

    #[test]
    fn the_agent_parses_every_job_this_controller_builds_as_it_was_built() {
        use controller_common::testing::agent_contract_of;
        use visitors_agent_contract::summary::TERMINATION_MESSAGE_PATH;
        for run in [run(), s3_run()] {
            let backup = agent_contract_of(&backup_job(&run, &inputs(), &credentials(), &primary()));
            let delete = agent_contract_of(&delete_job(&run, &inputs()));
            let expected_delete =
                Command::Delete(DeleteArgs { break_lock: true, ..DeleteArgs::of(agent_location(&run)) });
            for (parsed, expected) in [(backup, backup_command(&run)), (delete, expected_delete)] {
                assert_eq!(parsed.len(), 1, "one container");
                assert_eq!(parsed[0].command, expected);
                assert_eq!(parsed[0].summary_file.as_deref(), Some(std::path::Path::new(TERMINATION_MESSAGE_PATH)));
            }
        }
    }
}
