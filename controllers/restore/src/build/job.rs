//! The Job that runs one restore: `visitors-agent restore --from <location> --drop-existing`
//! against the target app's MySQL Service, as root, every credential from a Secret reference,
//! in two steps the controller can tell apart in the pod's status: the init container
//! [`STAGE_CONTAINER`] loads and checks the data in staging schemas (`--stage-only`), then the
//! agent container checks the staged copy against the manifest again and swaps it in
//! (`--from-stage`): the restore's `Running` and `Verifying` phases.

use controller_common::agent_job::{
    AgentInputs, AgentJob, DatabaseAccess, KEYS_MOUNT, KEYS_VOLUME, StorageAccess, container_args,
};
use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use visitors_agent_contract::command::{Command, PointInTimeArgs, RestoreArgs};
use visitors_api::MySQLRestore;
use visitors_api::labels::names;

use super::{Backup, restore_labels};

/// The init container that loads the backup into staging schemas and checks it there.
pub const STAGE_CONTAINER: &str = "stage";

/// The Job's name: derived from the restore, so a repeated reconcile finds it.
pub fn job_name(restore: &MySQLRestore) -> String {
    names::restore_job(&restore.name_any())
}

/// The Job of `restore` from `backup`, connecting to the app's MySQL as `access` says. The restore replaces what the app's database holds
/// (`--drop-existing`: an in-place restore), all or nothing, after the agent checked the whole
/// backup; the backup is mounted read-only.
pub fn restore_job(restore: &MySQLRestore, backup: &Backup, inputs: &AgentInputs, access: &DatabaseAccess) -> Job {
    let namespace = restore.namespace().unwrap_or_default();
    let restore_args = RestoreArgs {
        drop_existing: true,
        parallelism: usize::try_from(restore.spec.parallelism()).unwrap_or(1),
        progress_interval: PROGRESS_INTERVAL,
        expect_manifest_sha256: backup.manifest_sha256.clone(),
        decrypt_keys_dir: backup.key_secret.as_ref().map(|_| KEYS_MOUNT.into()),
        point_in_time: backup
            .point_in_time
            .as_ref()
            .map(|plan| PointInTimeArgs {
                binlog_archive: Some(plan.archive.clone()),
                until_time: plan.until_time.clone(),
                until_gtid: plan.until_gtid.clone(),
            })
            .unwrap_or_default(),
        ..RestoreArgs::from(backup.agent_location.clone())
    };
    let from_stage = Command::Restore(RestoreArgs { from_stage: true, ..restore_args.clone() });
    let job = AgentJob {
        name: job_name(restore),
        namespace: namespace.clone(),
        labels: restore_labels(restore),
        owner: restore.controller_owner_ref(&()),
        active_deadline_seconds: restore.spec.active_deadline_seconds(),
        ..with_keys(
            backup,
            AgentJob::of(inputs, from_stage)
                .with_database(&restore.spec.target.visitors_app, &namespace, access)
                .with_storage(&backup.storage, StorageAccess::ReadOnly),
        )
    }
    .build();
    in_two_steps(job, Command::Restore(RestoreArgs { stage_only: true, ..restore_args }))
}

/// The Secret of the backup's keys, mounted whole: the agent picks the key id the manifest
/// names (older runs were encrypted with older keys).
fn with_keys(backup: &Backup, agent: AgentJob) -> AgentJob {
    match &backup.key_secret {
        Some(secret) => agent.with_secret_dir(KEYS_VOLUME, secret, KEYS_MOUNT),
        None => agent,
    }
}

/// Seconds between the progress lines of a Job's agent.
const PROGRESS_INTERVAL: u64 = 30;

/// The agent container of `job` (which checks the staged copy and swaps it in) preceded by the
/// staging step `stage`, an init container otherwise the same. Both take the same arguments
/// but their step's flag, so the second refuses a copy staged from another manifest.
fn in_two_steps(mut job: Job, stage: Command) -> Job {
    let pod = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()).expect("an agent Job has a pod template");
    let mut stage_container = pod.containers[0].clone();
    stage_container.name = STAGE_CONTAINER.into();
    stage_container.args = Some(container_args(stage));
    pod.init_containers = Some(vec![stage_container]);
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::{from_run, from_s3};
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::api::core::v1::EnvVar;
    use visitors_api::storage::agent_location_of_recorded;

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

    fn credentials() -> DatabaseAccess {
        DatabaseAccess {
            credentials_secret: "ex-mysql-credentials".into(),
            tls: controller_common::agent_job::ServerTls::Disabled,
            servers: Default::default(),
        }
    }

    fn inputs() -> AgentInputs {
        AgentInputs {
            image: "registry/visitors-operator:1.0".into(),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            otlp_endpoint: None,
        }
    }

    fn container(job: &Job) -> &Container {
        &job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
    }

    fn stage_container(job: &Job) -> &Container {
        &job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0]
    }

    fn env_var<'a>(container: &'a Container, name: &str) -> Option<&'a EnvVar> {
        container.env.as_ref().unwrap().iter().find(|e| e.name == name)
    }

    #[test]
    fn a_run_is_restored_in_place_with_its_manifest_checked() {
        let restore = from_run();
        let job = restore_job(&restore, &pvc_backup(), &inputs(), &credentials());
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
        assert!(args.ends_with(&format!("{expected} --from-stage")), "the agent container checks and swaps: {args}");
        let stage = stage_container(&job);
        assert_eq!(stage.name, STAGE_CONTAINER);
        let stage_args = stage.args.as_ref().unwrap().join(" ");
        assert!(stage_args.ends_with(&format!("{expected} --stage-only")), "the init container stages: {stage_args}");
        assert_eq!(
            (&stage.env, &stage.volume_mounts, &stage.security_context, &stage.termination_message_path),
            (
                &container.env,
                &container.volume_mounts,
                &container.security_context,
                &container.termination_message_path
            ),
            "both steps reach the same database and backup, hardened alike, each with its summary"
        );
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
        let backup = Backup { agent_location: storage.agent_location("shop/ex/b1"), storage, ..Backup::default() };
        let job = restore_job(&restore, &backup, &inputs(), &credentials());
        let container = container(&job);
        let args = container.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--from s3://backups/prod/shop/ex/b1"), "{args}");
        assert!(!args.contains("--expect-manifest-sha256"), "{args}");
        let key = env_var(container, "AWS_SECRET_ACCESS_KEY").unwrap();
        assert_eq!(key.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "s3-keys");
        assert_eq!(env_var(container, "AWS_ENDPOINT_URL").unwrap().value.as_deref(), Some("http://minio:9000"));
    }

    #[test]
    fn the_agent_parses_every_job_this_controller_builds_as_it_was_built() {
        use controller_common::testing::agent_contract_of;
        let s3 = from_s3();
        let storage = s3.spec.source.storage.clone().unwrap();
        let s3_backup = Backup { agent_location: storage.agent_location("shop/ex/b1"), storage, ..Backup::default() };
        let to_a_point = Backup {
            point_in_time: Some(crate::build::PointInTimePlan {
                archive: "file:///backup/shop/ex/_binlog/nightly".into(),
                until_time: Some("2026-11-25T17:59:00Z".into()),
                target: "2026-11-25T17:59:00Z".into(),
                ..Default::default()
            }),
            ..pvc_backup()
        };
        for (restore, backup) in [(from_run(), pvc_backup()), (s3, s3_backup), (from_run(), to_a_point)] {
            let parsed = agent_contract_of(&restore_job(&restore, &backup, &inputs(), &credentials()));
            let steps: Vec<&RestoreArgs> = parsed
                .iter()
                .map(|cli| match &cli.command {
                    Command::Restore(args) => args,
                    other => panic!("a restore Job runs restores, not {other:?}"),
                })
                .collect();
            let [stage, swap] = steps[..] else { panic!("two steps: {steps:?}") };
            assert!(stage.stage_only && !stage.from_stage, "the init container stages: {stage:?}");
            assert!(swap.from_stage && !swap.stage_only, "the agent container swaps: {swap:?}");
            assert_eq!(
                RestoreArgs { stage_only: false, ..stage.clone() },
                RestoreArgs { from_stage: false, ..swap.clone() }
            );
            assert_eq!(swap.from, backup.agent_location);
            assert_eq!(swap.expect_manifest_sha256, backup.manifest_sha256);
            assert!(swap.drop_existing, "an in-place restore");
            let replay = backup.point_in_time.as_ref();
            assert_eq!(swap.point_in_time.binlog_archive.as_ref(), replay.map(|p| &p.archive));
            assert_eq!(swap.point_in_time.until_time, replay.and_then(|p| p.until_time.clone()));
        }
    }
}
