//! The Job that runs one restore: `visitors-agent restore --from <location> --drop-existing`
//! against the target app's MySQL Service, as root, every credential from a Secret reference.

use controller_common::job::{AgentJob, TRACEPARENT_ENV, env, env_from_secret};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, PersistentVolumeClaimVolumeSource, Volume, VolumeMount};
use kube::{Resource, ResourceExt};
use visitors_api::MySQLRestore;
use visitors_api::labels::names;
use visitors_api::storage::S3Storage;
use visitors_api::visitors_app::{MYSQL_PORT, secret_keys};

use super::{Backup, VOLUME_MOUNT, restore_labels};

const VOLUME_NAME: &str = "backup";

/// What the restore Job needs beyond the restore itself.
#[derive(Debug, Clone, Default)]
pub struct JobInputs {
    /// The agent image.
    pub image: String,
    /// The Secret holding the target app's MySQL credentials (key `root-password`).
    pub credentials_secret: String,
    /// The backup to read.
    pub backup: Backup,
    /// The W3C trace context of the reconcile that starts the Job.
    pub traceparent: Option<String>,
    /// The OTLP endpoint the agent sends its spans to.
    pub otlp_endpoint: Option<String>,
}

/// The Job's name: derived from the restore, so a repeated reconcile finds it.
pub fn job_name(restore: &MySQLRestore) -> String {
    names::restore_job(&restore.name_any())
}

/// The target app's MySQL client Service by its namespace-qualified name.
pub fn mysql_host(restore: &MySQLRestore) -> String {
    format!("{}.{}.svc", names::mysql(&restore.spec.target.visitors_app), restore.namespace().unwrap_or_default())
}

/// The Job of `restore`. The restore replaces what the app's database holds (`--drop-existing`:
/// an in-place restore), all or nothing, after the agent checked the whole backup.
pub fn restore_job(restore: &MySQLRestore, inputs: &JobInputs) -> Job {
    let backup = &inputs.backup;
    let mut args = vec![
        "restore".to_string(),
        "--from".into(),
        backup.agent_location.clone(),
        "--drop-existing".into(),
        "--parallelism".into(),
        restore.spec.parallelism().to_string(),
        "--progress-interval".into(),
        "30".into(),
    ];
    if let Some(sha) = &backup.manifest_sha256 {
        args.extend(["--expect-manifest-sha256".into(), sha.clone()]);
    }
    let mut environment = vec![
        env("MYSQL_HOST", &mysql_host(restore)),
        env("MYSQL_TCP_PORT", &MYSQL_PORT.to_string()),
        env("MYSQL_USER", "root"),
        env_from_secret("MYSQL_PWD", &inputs.credentials_secret, secret_keys::ROOT_PASSWORD),
    ];
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    if let Some(s3) = &backup.storage.s3 {
        environment.extend(s3_env(s3));
    }
    if let Some(pvc) = &backup.storage.persistent_volume_claim {
        volumes.push(Volume {
            name: VOLUME_NAME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: pvc.claim_name.clone(),
                read_only: Some(true),
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: VOLUME_NAME.into(),
            mount_path: VOLUME_MOUNT.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    if let Some(traceparent) = &inputs.traceparent {
        environment.push(env(TRACEPARENT_ENV, traceparent));
    }
    if let Some(endpoint) = &inputs.otlp_endpoint {
        environment.push(env(controller_common::telemetry::OTLP_ENDPOINT_ENV, endpoint));
    }
    AgentJob {
        name: job_name(restore),
        namespace: restore.namespace().unwrap_or_default(),
        labels: restore_labels(restore),
        owner: restore.controller_owner_ref(&()),
        image: inputs.image.clone(),
        args,
        env: environment,
        volumes,
        mounts,
        active_deadline_seconds: restore.spec.active_deadline_seconds(),
        resources: None,
    }
    .build()
}

fn s3_env(s3: &S3Storage) -> Vec<EnvVar> {
    let mut environment = vec![env("AWS_REGION", s3.region())];
    if let Some(endpoint) = &s3.endpoint {
        environment.push(env("AWS_ENDPOINT_URL", endpoint));
    }
    if s3.force_path_style == Some(true) {
        environment.push(env("AWS_S3_FORCE_PATH_STYLE", "true"));
    }
    if let Some(secret) = &s3.credentials_secret {
        environment.push(env_from_secret("AWS_ACCESS_KEY_ID", &secret.name, secret.access_key_id_key()));
        environment.push(env_from_secret("AWS_SECRET_ACCESS_KEY", &secret.name, secret.secret_access_key_key()));
    }
    environment
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::{from_run, from_s3};
    use crate::build::{agent_location, agent_location_of_recorded};
    use k8s_openapi::api::core::v1::Container;

    fn pvc_backup() -> Backup {
        Backup {
            storage: serde_json::from_value(serde_json::json!({"persistentVolumeClaim": {"claimName": "backups"}}))
                .unwrap(),
            agent_location: agent_location_of_recorded("file:///backup/shop/ex/b1").unwrap(),
            location: "pvc://backups/shop/ex/b1".into(),
            run: Some("b1".into()),
            manifest_sha256: Some("ab".repeat(32)),
            ..Backup::default()
        }
    }

    fn inputs(backup: Backup) -> JobInputs {
        JobInputs {
            image: "registry/visitors-operator:1.0".into(),
            credentials_secret: "ex-mysql-credentials".into(),
            backup,
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            otlp_endpoint: None,
        }
    }

    fn container(job: &Job) -> &Container {
        &job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    fn env_var<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
        container.env.as_ref().unwrap().iter().find(|e| e.name == name)
    }

    #[test]
    fn a_run_is_restored_in_place_with_its_manifest_checked() {
        let restore = from_run();
        let job = restore_job(&restore, &inputs(pvc_backup()));
        assert_eq!(job.metadata.name.as_deref(), Some("r1-restore"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.controller), ("MySQLRestore", "r1", Some(true)));
        assert_eq!(job.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"], "restore");
        let spec = job.spec.as_ref().unwrap();
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(900)));
        let container = container(&job);
        assert_eq!(container.command.as_ref().unwrap(), &["/usr/local/bin/visitors-agent"]);
        let args = container.args.as_ref().unwrap().join(" ");
        let expected = format!(
            "restore --from file:///backup/shop/ex/b1 --drop-existing --parallelism 2 --progress-interval 30 --expect-manifest-sha256 {}",
            "ab".repeat(32)
        );
        assert!(args.ends_with(&expected), "{args}");
        assert_eq!(env_var(container, "MYSQL_HOST").unwrap().value.as_deref(), Some("ex-mysql.shop.svc"));
        let password = env_var(container, "MYSQL_PWD").unwrap();
        assert_eq!(password.value, None, "the password only by Secret reference");
        let selector = password.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap();
        assert_eq!((selector.name.as_str(), selector.key.as_str()), ("ex-mysql-credentials", "root-password"));
        assert!(env_var(container, "TRACEPARENT").is_some());
        assert_eq!(container.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
        let pod = spec.template.spec.as_ref().unwrap();
        let volume = pod.volumes.as_ref().unwrap().iter().find(|v| v.name == "backup").unwrap();
        let claim = volume.persistent_volume_claim.as_ref().unwrap();
        assert_eq!((claim.claim_name.as_str(), claim.read_only), ("backups", Some(true)), "the backup is only read");
    }

    #[test]
    fn an_explicit_s3_location_reads_keys_from_the_secret_and_has_no_expected_manifest() {
        let restore = from_s3();
        let storage = restore.spec.source.storage.clone().unwrap();
        let backup = Backup { agent_location: agent_location(&storage, "shop/ex/b1"), storage, ..Backup::default() };
        let job = restore_job(&restore, &inputs(backup));
        let container = container(&job);
        let args = container.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--from s3://backups/prod/shop/ex/b1"), "{args}");
        assert!(!args.contains("--expect-manifest-sha256"), "{args}");
        let key = env_var(container, "AWS_SECRET_ACCESS_KEY").unwrap();
        assert_eq!(key.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "s3-keys");
        assert_eq!(env_var(container, "AWS_ENDPOINT_URL").unwrap().value.as_deref(), Some("http://minio:9000"));
    }
}
