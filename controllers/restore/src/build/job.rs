//! The Job that runs one restore: `visitors-agent restore --from <location> --drop-existing`
//! against the target app's MySQL Service, as root, every credential from a Secret reference,
//! in two steps the controller can tell apart in the pod's status: the init container
//! [`STAGE_CONTAINER`] loads and checks the data in staging schemas (`--stage-only`), then the
//! agent container checks the staged copy against the manifest again and swaps it in
//! (`--from-stage`): the restore's `Running` and `Verifying` phases.

use controller_common::job::{AgentInputs, AgentJob, StorageAccess};
use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use visitors_api::MySQLRestore;
use visitors_api::labels::names;

use super::{Backup, restore_labels};

/// The init container that loads the backup into staging schemas and checks it there.
pub const STAGE_CONTAINER: &str = "stage";

/// The Job's name: derived from the restore, so a repeated reconcile finds it.
pub fn job_name(restore: &MySQLRestore) -> String {
    names::restore_job(&restore.name_any())
}

/// The Job of `restore` from `backup`, connecting as root with the password of
/// `credentials_secret`. The restore replaces what the app's database holds
/// (`--drop-existing`: an in-place restore), all or nothing, after the agent checked the whole
/// backup; the backup is mounted read-only.
pub fn restore_job(restore: &MySQLRestore, backup: &Backup, inputs: &AgentInputs, credentials_secret: &str) -> Job {
    let namespace = restore.namespace().unwrap_or_default();
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
    let job = AgentJob {
        name: job_name(restore),
        namespace: namespace.clone(),
        labels: restore_labels(restore),
        owner: restore.controller_owner_ref(&()),
        args,
        active_deadline_seconds: restore.spec.active_deadline_seconds(),
        ..AgentJob::of(inputs)
            .with_database(&restore.spec.target.visitors_app, &namespace, credentials_secret)
            .with_storage(&backup.storage, StorageAccess::ReadOnly)
    }
    .build();
    in_two_steps(job)
}

/// The agent container of `job` split into the staging step (an init container) and the
/// checking and swapping step (the agent container). Both take the same arguments, so the
/// second refuses a copy staged from another manifest.
fn in_two_steps(mut job: Job) -> Job {
    let pod = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()).expect("an agent Job has a pod template");
    let agent = &mut pod.containers[0];
    let mut stage = agent.clone();
    stage.name = STAGE_CONTAINER.into();
    stage.args.get_or_insert_default().push("--stage-only".into());
    agent.args.get_or_insert_default().push("--from-stage".into());
    pod.init_containers = Some(vec![stage]);
    job
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::agent_location_of_recorded;
    use crate::build::fixtures::{from_run, from_s3};
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::api::core::v1::EnvVar;

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

    const CREDENTIALS: &str = "ex-mysql-credentials";

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
        let job = restore_job(&restore, &pvc_backup(), &inputs(), CREDENTIALS);
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
        let job = restore_job(&restore, &backup, &inputs(), CREDENTIALS);
        let container = container(&job);
        let args = container.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--from s3://backups/prod/shop/ex/b1"), "{args}");
        assert!(!args.contains("--expect-manifest-sha256"), "{args}");
        let key = env_var(container, "AWS_SECRET_ACCESS_KEY").unwrap();
        assert_eq!(key.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "s3-keys");
        assert_eq!(env_var(container, "AWS_ENDPOINT_URL").unwrap().value.as_deref(), Some("http://minio:9000"));
    }
}
