//! The binary-log archiver of a schedule with `spec.pointInTime`: a Job that never completes,
//! running `visitors-archiver` (a pod that dies is replaced by the Job controller), the Lease it
//! holds (so that a replacement started while the old pod still stops waits its turn) and
//! reports through, and a ServiceAccount whose Role lets it read and renew that one Lease,
//! nothing else. A Job rather than a StatefulSet keeps the backup controller from workload
//! rights it would otherwise not need (docs/decisions.md).

use std::collections::BTreeMap;

use controller_common::agent_job::{AgentInputs, AgentJob, DatabaseAccess, StorageAccess};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use visitors_agent_contract::archive::{PRUNE_ANNOTATION, PruneBefore};
use visitors_agent_contract::command::{ArchiveArgs, ArchiverCli};
use visitors_api::MySQLBackup;
use visitors_api::labels::{DATABASE_LABEL, MANAGED_BY, PART_OF, SCHEDULE_LABEL};
use visitors_api::point_in_time::archive_path;

use super::job::{encrypt_args, with_encryption_key};

/// The name of every child of a schedule's archiver: `<schedule>-pitr`.
pub fn archiver_name(schedule: &MySQLBackup) -> String {
    format!("{}-pitr", schedule.name_any())
}

/// `app.kubernetes.io/name` of archiver objects: not the Visitors Site's own, so that the
/// VisitorsApp controller's watches of its children never see them.
pub const ARCHIVER_APP_NAME: &str = "visitors-binlog-archiver";
const COMPONENT: &str = "binlog-archiver";

/// The archive's folder in the schedule's storage.
pub fn archive_folder(schedule: &MySQLBackup) -> String {
    archive_path(&schedule.namespace().unwrap_or_default(), &schedule.spec.source.visitors_app, &schedule.name_any())
}

/// The archive's location as users see it (`s3://...`, `pvc://...`).
pub fn archive_location(schedule: &MySQLBackup) -> String {
    schedule.spec.storage.location(&archive_folder(schedule))
}

/// The archive's location as an agent pod sees it (`s3://...`, `file:///backup/...`).
pub fn agent_archive_location(schedule: &MySQLBackup) -> String {
    schedule.spec.storage.agent_location(&archive_folder(schedule))
}

fn selector(schedule: &MySQLBackup) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), ARCHIVER_APP_NAME.to_string()),
        ("app.kubernetes.io/instance".to_string(), schedule.name_any()),
        ("app.kubernetes.io/component".to_string(), COMPONENT.to_string()),
    ])
}

fn labels(schedule: &MySQLBackup) -> BTreeMap<String, String> {
    let mut labels = selector(schedule);
    labels.insert("app.kubernetes.io/part-of".into(), PART_OF.into());
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGED_BY.into());
    labels.insert(DATABASE_LABEL.into(), schedule.spec.source.visitors_app.clone());
    labels.insert(SCHEDULE_LABEL.into(), schedule.name_any());
    labels
}

fn meta(schedule: &MySQLBackup) -> ObjectMeta {
    ObjectMeta {
        name: Some(archiver_name(schedule)),
        namespace: schedule.namespace(),
        labels: Some(labels(schedule)),
        owner_references: schedule.controller_owner_ref(&()).map(|owner| vec![owner]),
        ..ObjectMeta::default()
    }
}

/// The annotation of the archiver's Job holding a digest of its pod template: a Job's template
/// cannot change, so a Job whose digest differs from the spec's is replaced.
pub const TEMPLATE_ANNOTATION: &str = "example.com/archiver-template";
/// Pods the Job may lose before it gives up; it then ends `Failed` and the controller replaces
/// it. Kept small: Kubernetes delays each replacement pod of a Job by 10 s, doubling with every
/// failure and never reset while the Job has not succeeded (up to 10 minutes without archiving);
/// a new Job starts over at 10 s.
const POD_FAILURES: i32 = 3;

/// What the archiver of `schedule` is made of.
pub struct Archiver {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub lease: Lease,
    pub job: Job,
}

/// The archiver of `schedule`, connecting to the app's MySQL as `access` says,
/// told to prune what is before `prune` (when retention knows it).
pub fn archiver(
    schedule: &MySQLBackup,
    inputs: &AgentInputs,
    access: &DatabaseAccess,
    prune: Option<&PruneBefore>,
) -> Archiver {
    let name = archiver_name(schedule);
    let namespace = schedule.namespace().unwrap_or_default();
    let service_account = ServiceAccount { metadata: meta(schedule), ..ServiceAccount::default() };
    let role = Role {
        metadata: meta(schedule),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            resource_names: Some(vec![name.clone()]),
            verbs: vec!["get".into(), "update".into()],
            ..PolicyRule::default()
        }]),
    };
    let role_binding = RoleBinding {
        metadata: meta(schedule),
        role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: name.clone() },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: name.clone(),
            namespace: Some(namespace.clone()),
            ..Subject::default()
        }]),
    };
    let mut lease_meta = meta(schedule);
    if let Some(prune) = prune {
        let text = serde_json::to_string(prune).expect("a prune request serialises");
        lease_meta.annotations = Some(BTreeMap::from([(PRUNE_ANNOTATION.to_string(), text)]));
    }
    let lease = Lease { metadata: lease_meta, spec: None };
    Archiver { service_account, role, role_binding, lease, job: job(schedule, inputs, access) }
}

/// The server id the archiver registers with: one per schedule (from its UID), so that the
/// archivers of two schedules of one app do not disconnect each other, and high, so that it is
/// unlikely to be a server's.
fn replica_server_id(schedule: &MySQLBackup) -> u32 {
    let uid = schedule.metadata.uid.as_deref().unwrap_or_default();
    let hash = Sha256::digest(uid.as_bytes());
    0x7F00_0000 | u32::from_be_bytes([0, hash[0], hash[1], hash[2]])
}

/// The archiver's Job. Its pod template depends on the spec only (no trace context): it
/// changes, and the archiver restarts, only when the spec does.
fn job(schedule: &MySQLBackup, inputs: &AgentInputs, access: &DatabaseAccess) -> Job {
    let name = archiver_name(schedule);
    let namespace = schedule.namespace().unwrap_or_default();
    let point_in_time = schedule.spec.point_in_time.clone().unwrap_or_default();
    let cli = ArchiverCli {
        lease: name.clone(),
        archive: ArchiveArgs {
            flush_seconds: u64::try_from(point_in_time.flush_seconds()).unwrap_or(5),
            replica_server_id: replica_server_id(schedule),
            encryption: encrypt_args(schedule.spec.encryption.as_ref()),
            ..ArchiveArgs::to(agent_archive_location(schedule))
        },
    };
    let inputs = AgentInputs { traceparent: None, ..inputs.clone() };
    let agent = AgentJob {
        name: name.clone(),
        namespace: namespace.clone(),
        labels: labels(schedule),
        owner: schedule.controller_owner_ref(&()),
        resources: point_in_time.resources.clone(),
        service_account: Some(name),
        ..AgentJob::archiver(&inputs, &cli)
            .with_database(&schedule.spec.source.visitors_app, &namespace, access)
            .with_storage(&schedule.spec.storage, StorageAccess::ReadWrite)
    };
    let (mut metadata, mut template) = with_encryption_key(agent, schedule.spec.encryption.as_ref(), None).pod("Never");
    if let Some(pod) = template.spec.as_mut() {
        // Time to store what is whole after SIGTERM.
        pod.termination_grace_period_seconds = Some(30);
    }
    let digest = hex::encode(&Sha256::digest(serde_json::to_vec(&template).expect("a pod template serialises"))[..8]);
    metadata.annotations = Some(BTreeMap::from([(TEMPLATE_ANNOTATION.to_string(), digest)]));
    Job {
        metadata,
        spec: Some(JobSpec {
            parallelism: Some(1),
            completions: Some(1),
            backoff_limit: Some(POD_FAILURES),
            template,
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::s3_run;
    use clap::Parser;

    fn schedule() -> MySQLBackup {
        let mut schedule = s3_run();
        schedule.metadata.name = Some("nightly".into());
        schedule.spec.schedule = Some(serde_json::from_value(serde_json::json!({"cron": "0 3 * * *"})).unwrap());
        schedule.spec.point_in_time = Some(serde_json::from_value(serde_json::json!({"flushSeconds": 2})).unwrap());
        schedule
    }

    fn inputs() -> AgentInputs {
        AgentInputs {
            image: "registry/visitors-operator:1.0".into(),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            otlp_endpoint: Some("http://jaeger:4318".into()),
        }
    }

    fn access() -> DatabaseAccess {
        DatabaseAccess {
            credentials_secret: "ex-mysql-credentials".into(),
            tls: controller_common::agent_job::ServerTls::Verified {
                ca_secret: "ex-mysql-tls".into(),
                check_name: true,
            },
            servers: Default::default(),
        }
    }

    #[test]
    fn the_archiver_streams_the_binary_log_over_tls_verifying_the_apps_ca() {
        let job = archiver(&schedule(), &inputs(), &access(), None).job;
        let pod = job.spec.unwrap().template.spec.unwrap();
        let env = pod.containers[0].env.clone().unwrap();
        let value = |name: &str| env.iter().find(|e| e.name == name).and_then(|e| e.value.clone());
        assert_eq!(value("MYSQL_SSL_MODE").as_deref(), Some("verify-identity"));
        assert_eq!(value("MYSQL_SSL_CA").as_deref(), Some("/etc/visitors/mysql-ca/ca.crt"));
        let ca = pod.volumes.unwrap().into_iter().find_map(|v| v.secret).unwrap();
        assert_eq!(ca.secret_name.as_deref(), Some("ex-mysql-tls"));
        assert_eq!(ca.items.unwrap().iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["ca.crt"]);
    }

    #[test]
    fn the_archiver_runs_the_contracts_command_line_under_its_own_account() {
        let archiver = archiver(&schedule(), &inputs(), &access(), None);
        let job = &archiver.job;
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-pitr"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("MySQLBackup", "nightly"));
        let spec = job.spec.as_ref().unwrap();
        assert_eq!((spec.parallelism, spec.completions, spec.active_deadline_seconds), (Some(1), Some(1), None));
        assert_eq!(spec.backoff_limit, Some(3), "a few pods replaced, then the whole Job (a fresh backoff)");
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("nightly-pitr"));
        assert_eq!(pod.automount_service_account_token, Some(true));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let container = &pod.containers[0];
        assert_eq!(container.command.as_deref(), Some(&["/usr/local/bin/visitors-archiver".to_string()][..]));
        let argv = std::iter::once("visitors-archiver".to_string()).chain(container.args.clone().unwrap());
        let cli = ArchiverCli::try_parse_from(argv).expect("the archiver parses its arguments");
        assert_eq!(cli.lease, "nightly-pitr");
        assert_eq!(cli.archive.to, "s3://backups/prod/shop/ex/_binlog/nightly");
        assert_eq!(cli.archive.flush_seconds, 2);
        let env: Vec<&str> = container.env.iter().flatten().map(|e| e.name.as_str()).collect();
        for name in ["MYSQL_HOST", "MYSQL_PWD", "AWS_SECRET_ACCESS_KEY", "POD_NAME", "POD_NAMESPACE"] {
            assert!(env.contains(&name), "{name} in {env:?}");
        }
        assert!(!env.contains(&"TRACEPARENT"), "a long-running pod joins no reconcile's trace: {env:?}");
        for var in container.env.iter().flatten() {
            assert!(visitors_agent_contract::env::ALL.contains(&var.name.as_str()), "{}", var.name);
            if visitors_agent_contract::env::SECRETS.contains(&var.name.as_str()) {
                assert!(var.value.is_none(), "{} only from a Secret", var.name);
            }
        }
    }

    #[test]
    fn the_archivers_role_reaches_its_own_lease_only() {
        let archiver = archiver(&schedule(), &inputs(), &access(), None);
        let rules = archiver.role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].resource_names.as_deref(), Some(&["nightly-pitr".to_string()][..]));
        assert_eq!(rules[0].verbs, ["get", "update"]);
        assert_eq!(archiver.role_binding.subjects.unwrap()[0].name, "nightly-pitr");
        assert!(archiver.lease.spec.is_none(), "the Lease's spec is the archiver's to write");
        let labels = archiver.job.metadata.labels.unwrap();
        assert_eq!(
            labels["app.kubernetes.io/name"], ARCHIVER_APP_NAME,
            "not a child the VisitorsApp controller watches"
        );
    }

    #[test]
    fn the_pod_template_depends_on_the_spec_only() {
        let mut other = inputs();
        other.traceparent = Some("00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01".into());
        let a = archiver(&schedule(), &inputs(), &access(), None).job;
        let b = archiver(&schedule(), &other, &access(), None).job;
        assert_eq!(a, b);
        let mut changed = schedule();
        changed.spec.point_in_time.as_mut().unwrap().flush_seconds = Some(3);
        let c = archiver(&changed, &inputs(), &access(), None).job;
        let digest = |job: &Job| job.metadata.annotations.as_ref().unwrap()[TEMPLATE_ANNOTATION].clone();
        assert_ne!(digest(&a), digest(&c), "a spec change gives a new template");
    }

    /// Segments are encrypted like the schedule's runs: to `spec.encryption.keyId`, the one key
    /// mounted; a new key id gives a new template, so the archiver restarts with it.
    #[test]
    fn an_encrypted_schedules_archiver_encrypts_to_its_key_id_and_mounts_that_key_only() {
        use visitors_api::encryption::BackupEncryption;
        let plain = archiver(&schedule(), &inputs(), &access(), None).job;
        let mut encrypted = schedule();
        encrypted.spec.encryption = Some(BackupEncryption { key_secret: "backup-keys".into(), key_id: "k2".into() });
        let job = archiver(&encrypted, &inputs(), &access(), None).job;
        let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
        let argv = std::iter::once("visitors-archiver".to_string()).chain(pod.containers[0].args.clone().unwrap());
        let cli = ArchiverCli::try_parse_from(argv).unwrap();
        assert_eq!(cli.archive.encryption.encrypt_key_id.as_deref(), Some("k2"));
        assert_eq!(cli.archive.encryption.encrypt_key_file, Some("/etc/visitors/backup-keys/k2".into()));
        let keys = pod.volumes.unwrap().into_iter().find(|v| v.name == "backup-keys").unwrap().secret.unwrap();
        assert_eq!(keys.secret_name.as_deref(), Some("backup-keys"));
        assert_eq!(keys.items.unwrap().iter().map(|i| i.key.as_str()).collect::<Vec<_>>(), ["k2"]);

        encrypted.spec.encryption.as_mut().unwrap().key_id = "k3".into();
        let rotated = archiver(&encrypted, &inputs(), &access(), None).job;
        let digest = |job: &Job| job.metadata.annotations.as_ref().unwrap()[TEMPLATE_ANNOTATION].clone();
        assert_ne!(digest(&job), digest(&rotated), "a rotated key restarts the archiver");
        assert_ne!(digest(&plain), digest(&job));
        let plain_pod = plain.spec.unwrap().template.spec.unwrap();
        assert!(!plain_pod.containers[0].args.clone().unwrap().iter().any(|a| a.starts_with("--encrypt")));
    }

    #[test]
    fn retention_reaches_the_archiver_through_its_lease() {
        let prune = PruneBefore {
            run: "nightly-29000000".into(),
            time: "2026-11-25T03:00:05Z".into(),
            binlog_file: "binlog.000003".into(),
            binlog_position: 1234,
            gtid: Some("0-1-77".into()),
        };
        let lease = archiver(&schedule(), &inputs(), &access(), Some(&prune)).lease;
        let text = &lease.metadata.annotations.unwrap()[PRUNE_ANNOTATION];
        assert_eq!(serde_json::from_str::<PruneBefore>(text).unwrap(), prune);
    }
}
