//! Jobs that run the agent, shared by the backup and restore controllers: the Job builder (our
//! image, an explicit command, one attempt, the hardened security context), and reading how a
//! Job ended: its conditions, its pod's state and the agent's one-line JSON summary in the
//! pod's termination message.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath, PersistentVolumeClaimVolumeSource,
    Pod, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, SecretKeySelector,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use visitors_agent_contract::command::{AgentCli, ArchiverCli, Command};
use visitors_agent_contract::env as agent_env;
use visitors_agent_contract::summary::{AgentSummary, MAX_SUMMARY_BYTES, Operation, TERMINATION_MESSAGE_PATH};
use visitors_api::VisitorsApp;
use visitors_api::conditions::reason;
use visitors_api::labels::names;
use visitors_api::storage::{BackupStorage, S3Storage, VOLUME_MOUNT};
use visitors_api::visitors_app::{MYSQL_PORT, MemberRole, secret_keys, tls_keys};

/// The agent binary inside the image; Jobs name it explicitly instead of relying on an
/// entrypoint.
pub const AGENT_BINARY: &str = "/usr/local/bin/visitors-agent";
/// The archiver binary inside the image: the agent's archiving under a Lease.
pub const ARCHIVER_BINARY: &str = "/usr/local/bin/visitors-archiver";
/// The environment variable that names the image of agent Jobs.
pub const AGENT_IMAGE_ENV: &str = "AGENT_IMAGE";
/// The agent's container in every Job.
pub const AGENT_CONTAINER: &str = "agent";
/// The non-root user (and group) the agent runs as, the same as the controllers'.
pub const AGENT_USER: i64 = 65532;
/// The label the Job controller puts on a Job's pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The writable `/tmp` of an agent Job, an emptyDir.
pub const TMP_VOLUME: &str = "tmp";

/// What an agent Job is made of; [`AgentJob::build`] adds everything every such Job shares.
#[derive(Debug, Clone)]
pub struct AgentJob {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub owner: Option<OwnerReference>,
    pub image: String,
    /// The program the container runs ([`AGENT_BINARY`] or [`ARCHIVER_BINARY`]) and its
    /// arguments, rendered from the contract's types.
    pub binary: &'static str,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub active_deadline_seconds: i64,
    pub resources: Option<ResourceRequirements>,
    /// The ServiceAccount whose token the pod mounts; none (and no token) when unset.
    pub service_account: Option<String>,
}

impl AgentJob {
    /// The Job: one attempt (`backoffLimit: 0`, `restartPolicy: Never`: two attempts must never
    /// mix into one backup or restore), the deadline, no service account token, non-root with
    /// a read-only root file system and a writable `/tmp`, the summary in the termination
    /// message.
    pub fn build(self) -> Job {
        let active_deadline_seconds = self.active_deadline_seconds;
        let (metadata, template) = self.pod("Never");
        Job {
            metadata,
            spec: Some(JobSpec {
                backoff_limit: Some(0),
                active_deadline_seconds: Some(active_deadline_seconds),
                template,
                ..JobSpec::default()
            }),
            ..Job::default()
        }
    }

    /// The object's metadata and the pod template: non-root with a read-only root file system
    /// and a writable `/tmp`, the summary in the termination message, no service account token
    /// unless [`AgentJob::service_account`] named one.
    pub fn pod(self, restart_policy: &str) -> (ObjectMeta, PodTemplateSpec) {
        let mut mounts = self.mounts;
        mounts.push(VolumeMount { name: TMP_VOLUME.into(), mount_path: "/tmp".into(), ..VolumeMount::default() });
        let mut volumes = self.volumes;
        volumes.push(Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        let container = Container {
            name: AGENT_CONTAINER.into(),
            image: Some(self.image),
            command: Some(vec![self.binary.into()]),
            args: Some(self.args),
            env: Some(self.env).filter(|env| !env.is_empty()),
            volume_mounts: Some(mounts),
            resources: self.resources,
            security_context: Some(container_security_context()),
            termination_message_path: Some(TERMINATION_MESSAGE_PATH.into()),
            termination_message_policy: Some("File".into()),
            ..Container::default()
        };
        let metadata = ObjectMeta {
            name: Some(self.name),
            namespace: Some(self.namespace),
            labels: Some(self.labels.clone()),
            owner_references: self.owner.map(|owner| vec![owner]),
            ..ObjectMeta::default()
        };
        let pod = PodSpec {
            containers: vec![container],
            restart_policy: Some(restart_policy.into()),
            automount_service_account_token: Some(self.service_account.is_some()),
            service_account_name: self.service_account,
            enable_service_links: Some(false),
            security_context: Some(pod_security_context()),
            volumes: Some(volumes),
            ..PodSpec::default()
        };
        let template = PodTemplateSpec {
            metadata: Some(ObjectMeta { labels: Some(self.labels), ..ObjectMeta::default() }),
            spec: Some(pod),
        };
        (metadata, template)
    }
}

/// The arguments of an agent container that runs `command`: the agent writes its summary where
/// the pod's termination message is read from.
pub fn container_args(command: Command) -> Vec<String> {
    AgentCli { summary_file: Some(TERMINATION_MESSAGE_PATH.into()), command }.to_args()
}

/// What every agent Job takes from the controller that starts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentInputs {
    /// The agent image (the controller's own, `AGENT_IMAGE`).
    pub image: String,
    /// The W3C trace context of the reconcile that starts the Job.
    pub traceparent: Option<String>,
    /// The OTLP endpoint the agent sends its spans to.
    pub otlp_endpoint: Option<String>,
}

/// Whether an agent Job may change the stored backups it mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageAccess {
    ReadWrite,
    ReadOnly,
}

const BACKUP_VOLUME: &str = "backup";

impl AgentJob {
    /// An agent Job that runs `command` with `inputs` (image, trace context, OTLP endpoint); the
    /// caller adds its name, owner, labels and deadline, and what it acts on.
    pub fn of(inputs: &AgentInputs, command: Command) -> Self {
        Self::running(inputs, AGENT_BINARY, container_args(command))
    }

    /// The archiver's pod, running `cli`; it knows its pod's name and namespace, the holder and
    /// place of its Lease.
    pub fn archiver(inputs: &AgentInputs, cli: &ArchiverCli) -> Self {
        let mut pod = Self::running(inputs, ARCHIVER_BINARY, cli.to_args());
        pod.env.extend([
            env_from_field(agent_env::POD_NAME, "metadata.name"),
            env_from_field(agent_env::POD_NAMESPACE, "metadata.namespace"),
        ]);
        pod
    }

    fn running(inputs: &AgentInputs, binary: &'static str, args: Vec<String>) -> Self {
        let mut env = Vec::new();
        if let Some(traceparent) = &inputs.traceparent {
            env.push(self::env(agent_env::TRACEPARENT_ENV, traceparent));
        }
        if let Some(endpoint) = &inputs.otlp_endpoint {
            env.push(self::env(agent_env::OTLP_ENDPOINT_ENV, endpoint));
        }
        AgentJob {
            name: String::new(),
            namespace: String::new(),
            labels: BTreeMap::new(),
            owner: None,
            image: inputs.image.clone(),
            binary,
            args,
            env,
            volumes: Vec::new(),
            mounts: Vec::new(),
            active_deadline_seconds: 0,
            resources: None,
            service_account: None,
        }
    }

    /// Connects the agent to the MySQL of VisitorsApp `app` in `namespace` as `access` says.
    pub fn with_database(self, app: &str, namespace: &str, access: &DatabaseAccess) -> Self {
        self.with_server(&mysql_host(app, namespace), access)
    }

    /// Connects the agent to the MySQL at `host`, as root, the password only by reference to
    /// the `root-password` key of the credentials Secret, over TLS when `access` says so: the
    /// CA certificate of its Secret mounted (that key only), the certificate verified.
    pub fn with_server(mut self, host: &str, access: &DatabaseAccess) -> Self {
        self.env.extend([
            env(agent_env::MYSQL_HOST, host),
            env(agent_env::MYSQL_TCP_PORT, &MYSQL_PORT.to_string()),
            env(agent_env::MYSQL_USER, "root"),
            env_from_secret(agent_env::MYSQL_PWD, &access.credentials_secret, secret_keys::ROOT_PASSWORD),
        ]);
        match &access.tls {
            ServerTls::Disabled => self.env.push(env(agent_env::MYSQL_SSL_MODE, "disabled")),
            ServerTls::Verified { ca_secret, check_name } => {
                let mode = if *check_name { "verify-identity" } else { "verify-ca" };
                self.env.extend([
                    env(agent_env::MYSQL_SSL_CA, &format!("{CA_MOUNT}/{}", tls_keys::CA)),
                    env(agent_env::MYSQL_SSL_MODE, mode),
                ]);
                self.volumes.push(secret_items_volume(CA_VOLUME, ca_secret, &[tls_keys::CA]));
                self.mounts.push(read_only_mount(CA_VOLUME, CA_MOUNT));
            }
        }
        self
    }

    /// Mounts every key of Secret `secret` read-only at `path`, one file per key.
    pub fn with_secret_dir(mut self, volume: &str, secret: &str, path: &str) -> Self {
        self.volumes.push(secret_volume(volume, secret, None, 0o440));
        self.mounts.push(read_only_mount(volume, path));
        self
    }

    /// Mounts `keys` of Secret `secret` (only those) read-only at `path`.
    pub fn with_secret_files(mut self, volume: &str, secret: &str, keys: &[&str], path: &str) -> Self {
        self.volumes.push(secret_items_volume(volume, secret, keys));
        self.mounts.push(read_only_mount(volume, path));
        self
    }

    /// Gives the agent `storage`: the S3 settings and keys (by Secret reference) or the claim
    /// mounted at [`VOLUME_MOUNT`].
    pub fn with_storage(mut self, storage: &BackupStorage, access: StorageAccess) -> Self {
        if let Some(s3) = &storage.s3 {
            self.env.extend(s3_env(s3));
        }
        if let Some(pvc) = &storage.persistent_volume_claim {
            let read_only = (access == StorageAccess::ReadOnly).then_some(true);
            self.volumes.push(Volume {
                name: BACKUP_VOLUME.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc.claim_name.clone(),
                    read_only,
                }),
                ..Volume::default()
            });
            self.mounts.push(VolumeMount {
                name: BACKUP_VOLUME.into(),
                mount_path: VOLUME_MOUNT.into(),
                read_only,
                ..VolumeMount::default()
            });
        }
        self
    }
}

/// How an agent Job reaches its MySQL: the Secret of the root password, and TLS; and the
/// app's servers, for a Job that may read a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseAccess {
    pub credentials_secret: String,
    pub tls: ServerTls,
    pub servers: MysqlServers,
}

/// An app's MySQL servers, as its status reported them when the access was read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MysqlServers {
    /// `spec.mysql.replicas`: more than 1 is a primary and replicas.
    pub wanted: i32,
    /// The primary's pod, once a replicated app recorded one.
    pub primary: Option<String>,
    /// The pods that replicate from the primary, with their lag in seconds when known.
    pub replicas: Vec<(String, Option<i64>)>,
    /// The image they run (`status.mysqlImage`, else the spec's): a physical backup's tool
    /// runs from it, so that it is the server's own version.
    pub image: String,
}

impl MysqlServers {
    pub fn of(app: &VisitorsApp) -> Self {
        let replication = app.status.as_ref().and_then(|s| s.replication.as_ref());
        let replicas = replication
            .map(|r| {
                r.members
                    .iter()
                    .filter(|m| m.role == MemberRole::Replica)
                    .map(|m| (m.name.clone(), m.lag_seconds))
                    .collect()
            })
            .unwrap_or_default();
        let running = app.status.as_ref().and_then(|s| s.mysql_image.clone());
        MysqlServers {
            wanted: app.spec.mysql_replicas(),
            primary: replication.and_then(|r| r.primary.clone()),
            replicas,
            image: running.unwrap_or_else(|| app.spec.mysql_image().to_string()),
        }
    }

    pub fn replicated(&self) -> bool {
        self.wanted > 1
    }
}

/// Whether the agent must use TLS, and what it verifies the server with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerTls {
    /// Plain text (`--ssl-mode disabled`): the server does not serve TLS.
    Disabled,
    /// TLS, the certificate verified against the `ca.crt` of Secret `ca_secret`, and its name
    /// against the host when `check_name` (a server reached by a name its certificate carries).
    Verified { ca_secret: String, check_name: bool },
}

/// Where an agent Job mounts the keys of an encrypted backup (one file per key id).
pub const KEYS_MOUNT: &str = "/etc/visitors/backup-keys";
/// The volume of [`KEYS_MOUNT`].
pub const KEYS_VOLUME: &str = "backup-keys";

/// Where an agent Job mounts the CA certificate it verifies MySQL with.
pub const CA_MOUNT: &str = "/etc/visitors/mysql-ca";
/// The volume of [`CA_MOUNT`].
pub const CA_VOLUME: &str = "mysql-ca";

fn secret_items_volume(name: &str, secret: &str, keys: &[&str]) -> Volume {
    secret_keys_volume(name, secret, keys, 0o440)
}

/// A volume `name` of Secret `secret` holding `keys` only (one file each, named as the key), in
/// file `mode`.
pub fn secret_keys_volume(name: &str, secret: &str, keys: &[&str], mode: i32) -> Volume {
    let items = keys.iter().map(|key| KeyToPath { key: (*key).into(), path: (*key).into(), mode: None }).collect();
    secret_volume(name, secret, Some(items), mode)
}

/// A volume `name` of Secret `secret`: `items` only when given, else every key.
fn secret_volume(name: &str, secret: &str, items: Option<Vec<KeyToPath>>, mode: i32) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items,
            default_mode: Some(mode),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

pub fn read_only_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount { name: volume.into(), mount_path: path.into(), read_only: Some(true), ..VolumeMount::default() }
}

/// The MySQL client Service of VisitorsApp `app` by its namespace-qualified name (what cluster
/// DNS, and the test cluster's hosts file, resolve).
pub fn mysql_host(app: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", names::mysql(app))
}

fn s3_env(s3: &S3Storage) -> Vec<EnvVar> {
    let mut environment = vec![env(agent_env::AWS_REGION, s3.region())];
    if let Some(endpoint) = &s3.endpoint {
        environment.push(env(agent_env::AWS_ENDPOINT_URL, endpoint));
    }
    if s3.force_path_style == Some(true) {
        environment.push(env(agent_env::AWS_S3_FORCE_PATH_STYLE, "true"));
    }
    if let Some(secret) = &s3.credentials_secret {
        let (id, key) = (secret.access_key_id_key(), secret.secret_access_key_key());
        environment.push(env_from_secret(agent_env::AWS_ACCESS_KEY_ID, &secret.name, id));
        environment.push(env_from_secret(agent_env::AWS_SECRET_ACCESS_KEY, &secret.name, key));
    }
    environment
}

/// The pod security context of agent Jobs, as the chart's controllers: non-root, the runtime's
/// seccomp profile; `fsGroup` lets the agent write to a backup volume.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(AGENT_USER),
        run_as_group: Some(AGENT_USER),
        fs_group: Some(AGENT_USER),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..SeccompProfile::default() }),
        ..PodSecurityContext::default()
    }
}

/// The container security context of agent Jobs: no capabilities, no privilege escalation, a
/// read-only root file system.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Capabilities::default() }),
        ..SecurityContext::default()
    }
}

/// An environment variable read from one key of a Secret: credentials reach a Job only so.
pub fn env_from_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: secret.to_string(), key: key.to_string(), optional: None }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// An environment variable read from a field of the pod (the downward API).
pub fn env_from_field(name: &str, field: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            field_ref: Some(k8s_openapi::api::core::v1::ObjectFieldSelector {
                field_path: field.to_string(),
                ..Default::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// A plain environment variable.
pub fn env(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.to_string(), value: Some(value.to_string()), ..EnvVar::default() }
}

/// Where a Job is, from its conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Not finished (its pod may not even exist yet).
    Active,
    /// The Job controller marked it `Complete`.
    Complete,
    /// The Job controller marked it `Failed`, with the condition's reason (for example
    /// `DeadlineExceeded`, `BackoffLimitExceeded`) and message.
    Failed { reason: String, message: String },
}

/// The state of `job` from its terminal conditions.
pub fn job_state(job: &Job) -> JobState {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref()).map(Vec::as_slice).unwrap_or(&[]);
    let is_true = |type_: &str| conditions.iter().find(|c| c.type_ == type_ && c.status == "True");
    if is_true("Complete").is_some() {
        return JobState::Complete;
    }
    match is_true("Failed") {
        Some(failed) => JobState::Failed {
            reason: failed.reason.clone().unwrap_or_else(|| "Failed".into()),
            message: failed.message.clone().unwrap_or_default(),
        },
        None => JobState::Active,
    }
}

/// How an agent Job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEnd {
    /// The Job completed and the agent's summary says the whole operation succeeded.
    Succeeded(AgentSummary),
    /// Anything else. `reason` is a CamelCase word for a condition; `message` says what
    /// happened; `summary` is the agent's, when it wrote one.
    Failed { reason: &'static str, message: String, summary: Option<AgentSummary> },
}

impl JobEnd {
    pub fn summary(&self) -> Option<&AgentSummary> {
        match self {
            JobEnd::Succeeded(summary) => Some(summary),
            JobEnd::Failed { summary, .. } => summary.as_ref(),
        }
    }
}

/// How a finished Job ended, from the Job's state and its pods (`None` while the
/// Job is active). Success needs both a completed Job and the agent's own `ok` summary of
/// `operation`: a Job that completed without one is a failure, never a silent success.
pub fn job_end(state: &JobState, pods: &[Pod], operation: Operation, deadline_seconds: i64) -> Option<JobEnd> {
    let summary = pods.iter().filter_map(summary_of).next_back();
    match state {
        JobState::Active => None,
        JobState::Complete => Some(match summary {
            Some(summary) if summary.ok && summary.operation == Some(operation) => JobEnd::Succeeded(summary),
            Some(summary) => JobEnd::Failed {
                reason: reason::INVALID_SUMMARY,
                message: "the Job completed but the agent's summary does not report a successful operation".into(),
                summary: Some(summary),
            },
            None => JobEnd::Failed {
                reason: reason::NO_SUMMARY,
                message: "the Job completed but its pod left no agent summary in its termination message".into(),
                summary: None,
            },
        }),
        JobState::Failed { reason, message } => Some(failure(reason, message, pods, summary, deadline_seconds)),
    }
}

fn failure(
    job_reason: &str,
    job_message: &str,
    pods: &[Pod],
    summary: Option<AgentSummary>,
    deadline_seconds: i64,
) -> JobEnd {
    let failed = |reason: &'static str, message: String, summary: Option<AgentSummary>| JobEnd::Failed {
        reason,
        message,
        summary,
    };
    if job_reason == "DeadlineExceeded" {
        let message =
            format!("the Job took longer than its deadline (activeDeadlineSeconds {deadline_seconds}) and was stopped");
        return failed(reason::DEADLINE_EXCEEDED, message, summary);
    }
    if let Some(summary) = summary.filter(|s| !s.ok) {
        let kind = summary.error_kind.as_deref().map(|k| format!(" ({k})")).unwrap_or_default();
        let message = format!("{}{kind}", summary.error.as_deref().unwrap_or("the agent reported a failure"));
        return failed(reason::AGENT_FAILED, message, Some(summary));
    }
    if let Some((reason, message)) = pods.iter().find_map(disruption) {
        return failed(reason, message, None);
    }
    if let Some(message) = pods.iter().find_map(out_of_memory) {
        return failed(reason::OUT_OF_MEMORY, message, None);
    }
    if let Some(message) = pods.iter().find_map(deleted) {
        return failed(reason::POD_DELETED, message, None);
    }
    if let Some(message) = pods.iter().find_map(exit_without_summary) {
        return failed(reason::AGENT_FAILED, message, None);
    }
    if pods.is_empty() {
        let message = format!(
            "the Job's pod is gone without leaving a summary: it was deleted, evicted or its node was lost (Job: {job_reason}{})",
            if job_message.is_empty() { String::new() } else { format!(": {job_message}") }
        );
        return failed(reason::POD_LOST, message, None);
    }
    failed(reason::JOB_FAILED, format!("the Job failed ({job_reason}): {job_message}"), None)
}

/// Whether `pod` has stopped: a final phase, or every container terminated. A pod of a deleted
/// Job may still run its agent for a while (its grace period), and act on the database.
pub fn pod_ended(pod: &Pod) -> bool {
    let Some(status) = &pod.status else { return false };
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let terminated = !containers.is_empty()
        && containers.iter().all(|c| c.state.as_ref().is_some_and(|state| state.terminated.is_some()));
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) || terminated
}

/// The agent's summary in `pod`'s terminated agent container, if it wrote one.
pub fn summary_of(pod: &Pod) -> Option<AgentSummary> {
    terminated_agent(pod).and_then(|t| t.message.as_deref()).and_then(parse_summary)
}

/// Parses the last non-empty line of a termination message as the agent's summary.
pub fn parse_summary(message: &str) -> Option<AgentSummary> {
    let line = message.lines().rev().map(str::trim).find(|line| !line.is_empty())?;
    if line.len() > MAX_SUMMARY_BYTES + 64 {
        return None;
    }
    serde_json::from_str(line).ok()
}

/// The agent's container once it terminated; when it never ran, an init container that ran a
/// step of the agent before it and failed (a restore loads its data in one), which ended the pod.
fn terminated_agent(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    let status = pod.status.as_ref()?;
    let agent = status.container_statuses.iter().flatten().filter(|c| c.name == AGENT_CONTAINER).find_map(terminated);
    agent.or_else(|| status.init_container_statuses.iter().flatten().filter_map(terminated).find(|t| t.exit_code != 0))
}

fn terminated(
    container: &k8s_openapi::api::core::v1::ContainerStatus,
) -> Option<&k8s_openapi::api::core::v1::ContainerStateTerminated> {
    container.state.as_ref()?.terminated.as_ref()
}

/// Whether init container `name` of the Job's pod ended successfully: the agent step it ran
/// is done, and the pod went on to the next one.
pub fn init_step_done(pods: &[Pod], name: &str) -> bool {
    pods.iter().filter_map(|p| p.status.as_ref()?.init_container_statuses.as_ref()).flatten().any(|c| {
        c.name == name && c.state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| t.exit_code == 0)
    })
}

/// A pod that Kubernetes took away: evicted, preempted, or its node lost.
fn disruption(pod: &Pod) -> Option<(&'static str, String)> {
    let status = pod.status.as_ref()?;
    let target = status
        .conditions
        .as_ref()
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "DisruptionTarget" && c.status == "True"));
    let name = pod.metadata.name.as_deref().unwrap_or("the pod");
    if let Some(target) = target {
        let why = target.message.clone().unwrap_or_default();
        let reason = match target.reason.as_deref() {
            Some("DeletionByTaintManager" | "DeletionByPodGC") => reason::NODE_LOST,
            Some("PreemptionByScheduler") => reason::POD_PREEMPTED,
            _ => reason::POD_EVICTED,
        };
        return Some((reason, format!("pod {name} was stopped by Kubernetes before the agent finished: {why}")));
    }
    (status.reason.as_deref() == Some("Evicted")).then(|| {
        (reason::POD_EVICTED, format!("pod {name} was evicted: {}", status.message.clone().unwrap_or_default()))
    })
}

/// A pod someone deleted while the agent ran (the Job controller counts it failed at once).
fn deleted(pod: &Pod) -> Option<String> {
    pod.metadata.deletion_timestamp.as_ref()?;
    let name = pod.metadata.name.as_deref().unwrap_or("the pod");
    Some(format!("pod {name} was deleted before the agent finished"))
}

fn out_of_memory(pod: &Pod) -> Option<String> {
    let terminated = terminated_agent(pod)?;
    (terminated.reason.as_deref() == Some("OOMKilled"))
        .then(|| "the agent ran out of memory (OOMKilled); raise the Job's memory limit".to_string())
}

fn exit_without_summary(pod: &Pod) -> Option<String> {
    let terminated = terminated_agent(pod)?;
    Some(format!(
        "the agent exited with code {} ({}) without a summary",
        terminated.exit_code,
        terminated.reason.as_deref().unwrap_or("no reason given")
    ))
}

/// When the Job's pod started running, if it did.
pub fn started_at(job: &Job) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    job.status.as_ref()?.start_time.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodStatus,
    };

    fn job(conditions: &[(&str, &str)]) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(type_, reason)| JobCondition {
                            type_: type_.to_string(),
                            status: "True".into(),
                            reason: Some(reason.to_string()),
                            message: Some(format!("{type_} because {reason}")),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    fn pod(terminated: Option<ContainerStateTerminated>) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some("run-backup-x".into()), ..ObjectMeta::default() },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: AGENT_CONTAINER.into(),
                    state: Some(ContainerState { terminated, ..ContainerState::default() }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    fn exited(code: i32, reason: &str, message: Option<String>) -> Pod {
        pod(Some(ContainerStateTerminated {
            exit_code: code,
            reason: Some(reason.into()),
            message,
            ..ContainerStateTerminated::default()
        }))
    }

    fn summary(ok: bool) -> AgentSummary {
        AgentSummary {
            operation: Some(Operation::Backup),
            ok,
            error: (!ok).then(|| "MySQL rejected user root".into()),
            error_kind: (!ok).then(|| "wrongCredentials".into()),
            manifest_sha256: ok.then(|| "ab".repeat(32)),
            ..AgentSummary::default()
        }
    }

    fn agent() -> AgentJob {
        let inputs = AgentInputs { image: "registry/visitors:1".into(), ..AgentInputs::default() };
        let command = Command::Backup(visitors_agent_contract::BackupArgs::to("file:///backup/x"));
        AgentJob {
            name: "run-backup".into(),
            namespace: "shop".into(),
            env: vec![env_from_secret("MYSQL_PWD", "ex-mysql-credentials", "root-password")],
            active_deadline_seconds: 600,
            ..AgentJob::of(&inputs, command)
        }
    }

    #[test]
    fn the_job_runs_the_agent_once_hardened() {
        let job = agent().build();
        let spec = job.spec.unwrap();
        assert_eq!((spec.backoff_limit, spec.active_deadline_seconds), (Some(0), Some(600)));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.automount_service_account_token, Some(false));
        let pod_security = pod.security_context.unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(pod_security.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let container = &pod.containers[0];
        assert_eq!(container.command.as_deref(), Some(&[AGENT_BINARY.to_string()][..]));
        let args = container.args.as_ref().unwrap();
        assert_eq!(&args[..3], ["--summary-file", TERMINATION_MESSAGE_PATH, "backup"]);
        let security = container.security_context.as_ref().unwrap();
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.capabilities.as_ref().unwrap().drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert!(container.volume_mounts.as_ref().unwrap().iter().any(|m| m.mount_path == "/tmp"));
        let password = &container.env.as_ref().unwrap()[0];
        assert_eq!(password.value, None, "credentials only through a Secret reference");
        assert_eq!(password.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().key, "root-password");
    }

    /// A pod whose init container `stage` ended with `code` and `message`; the agent container
    /// waits (it never ran when the step failed).
    fn after_init_step(code: i32, message: Option<String>) -> Pod {
        let mut pod = pod(None);
        let status = pod.status.as_mut().unwrap();
        status.init_container_statuses = Some(vec![ContainerStatus {
            name: "stage".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated { exit_code: code, message, ..Default::default() }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]);
        pod
    }

    #[test]
    fn a_failed_init_step_gives_its_summary_and_a_finished_one_is_seen() {
        let line = serde_json::to_string(&summary(false)).unwrap();
        let failed = after_init_step(1, Some(line));
        let state = JobState::Failed { reason: "BackoffLimitExceeded".into(), message: String::new() };
        let Some(JobEnd::Failed { reason, message, summary: reported }) =
            job_end(&state, std::slice::from_ref(&failed), Operation::Backup, 60)
        else {
            panic!("a failed step fails the run")
        };
        assert_eq!(reason, "AgentFailed");
        assert!(message.contains("MySQL rejected user root (wrongCredentials)"), "{message}");
        assert!(reported.is_some());
        assert!(!init_step_done(&[failed], "stage"));

        let done = after_init_step(0, Some(serde_json::to_string(&summary(true)).unwrap()));
        assert!(init_step_done(std::slice::from_ref(&done), "stage"));
        assert!(!init_step_done(std::slice::from_ref(&done), "other"));
        assert_eq!(summary_of(&done), None, "a step that succeeded is not the run's summary");
        assert!(!init_step_done(&[pod(None)], "stage"));
    }

    #[test]
    fn job_states_come_from_terminal_conditions() {
        assert_eq!(job_state(&Job::default()), JobState::Active);
        assert_eq!(job_state(&job(&[("SuccessCriteriaMet", "x"), ("Complete", "x")])), JobState::Complete);
        assert!(
            matches!(job_state(&job(&[("Failed", "DeadlineExceeded")])), JobState::Failed { reason, .. } if reason == "DeadlineExceeded")
        );
    }

    #[test]
    fn success_needs_the_agents_ok_summary() {
        let ok = exited(0, "Completed", Some(summary(true).to_line()));
        assert_eq!(job_end(&JobState::Complete, &[ok], Operation::Backup, 60), Some(JobEnd::Succeeded(summary(true))));
        let silent = exited(0, "Completed", None);
        assert!(matches!(
            job_end(&JobState::Complete, &[silent], Operation::Backup, 60),
            Some(JobEnd::Failed { reason: "NoSummary", .. })
        ));
        let restore = exited(0, "Completed", Some(summary(true).to_line()));
        assert!(matches!(
            job_end(&JobState::Complete, &[restore], Operation::Restore, 60),
            Some(JobEnd::Failed { reason: "InvalidSummary", .. })
        ));
        assert_eq!(job_end(&JobState::Active, &[], Operation::Backup, 60), None);
    }

    fn failed(reason: &str) -> JobState {
        JobState::Failed { reason: reason.into(), message: "m".into() }
    }

    #[test]
    fn failures_say_why() {
        let reason_of = |state: JobState, pods: &[Pod]| match job_end(&state, pods, Operation::Backup, 90) {
            Some(JobEnd::Failed { reason, message, .. }) => (reason, message),
            other => panic!("{other:?}"),
        };
        let (reason, message) = reason_of(failed("DeadlineExceeded"), &[exited(137, "Error", None)]);
        assert_eq!(reason, "DeadlineExceeded");
        assert!(message.contains("activeDeadlineSeconds 90"), "{message}");

        let agent_error = exited(1, "Error", Some(format!("progress\n{}\n", summary(false).to_line())));
        let (reason, message) = reason_of(failed("BackoffLimitExceeded"), &[agent_error]);
        assert_eq!(reason, "AgentFailed");
        assert_eq!(message, "MySQL rejected user root (wrongCredentials)");

        let mut evicted = exited(137, "Error", None);
        evicted.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some("DeletionByTaintManager".into()),
            message: Some("node unreachable".into()),
            ..PodCondition::default()
        }]);
        assert_eq!(reason_of(failed("BackoffLimitExceeded"), &[evicted]).0, "NodeLost");

        let mut kubelet_evicted = pod(None);
        kubelet_evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        assert_eq!(reason_of(failed("BackoffLimitExceeded"), &[kubelet_evicted]).0, "PodEvicted");

        assert_eq!(reason_of(failed("BackoffLimitExceeded"), &[exited(137, "OOMKilled", None)]).0, "OutOfMemory");
        let mut deleted = pod(None);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        let (reason, message) = reason_of(failed("BackoffLimitExceeded"), &[deleted]);
        assert_eq!(reason, "PodDeleted");
        assert!(message.contains("run-backup-x was deleted"), "{message}");
        assert_eq!(reason_of(failed("BackoffLimitExceeded"), &[]).0, "PodLost");
        let (reason, message) = reason_of(failed("BackoffLimitExceeded"), &[exited(2, "Error", None)]);
        assert_eq!(reason, "AgentFailed");
        assert!(message.contains("code 2"), "{message}");
    }

    #[test]
    fn summaries_are_read_from_the_last_line_only_when_valid() {
        assert_eq!(parse_summary(&format!("{}\n\n", summary(true).to_line())), Some(summary(true)));
        assert_eq!(parse_summary("panicked at main.rs"), None);
        assert_eq!(parse_summary(""), None);
    }
}
