//! `VisitorsApp`: one Visitors Site (MySQL, the REST backend and the web frontend).
//!
//! The book's resource (`spec.size`, `spec.title`) is accepted unchanged; every other field is
//! optional with a production default.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::validation::{InvalidSpec, Problems, dns_subdomain, image_reference, quantity_bytes};

/// The MySQL image used when `spec.mysql.image` is unset: MySQL 8.4, the current LTS line.
pub const DEFAULT_MYSQL_IMAGE: &str = "mysql:8.4";
/// The backend image published for the book.
pub const DEFAULT_BACKEND_IMAGE: &str = "jdob/visitors-service:1.0.0";
/// The frontend image published for the book.
pub const DEFAULT_FRONTEND_IMAGE: &str = "jdob/visitors-webui:1.0.0";
/// The database the Visitors Site uses.
pub const DATABASE_NAME: &str = "visitors";
/// The application user created in MySQL.
pub const DATABASE_USER: &str = "visitors";
/// Default size of the MySQL data volume.
pub const DEFAULT_STORAGE_SIZE: &str = "1Gi";
/// The book's NodePort for the backend.
pub const DEFAULT_BACKEND_NODE_PORT: i32 = 30685;
/// The book's NodePort for the frontend.
pub const DEFAULT_FRONTEND_NODE_PORT: i32 = 30686;
/// Ports of the three tiers.
pub const MYSQL_PORT: i32 = 3306;
pub const BACKEND_PORT: i32 = 8000;
pub const FRONTEND_PORT: i32 = 3000;
/// Largest accepted `spec.size`.
pub const MAX_SIZE: i32 = 50;
/// Largest accepted `spec.mysql.replicas`.
pub const MAX_MYSQL_REPLICAS: i32 = 9;
/// Annotation asking for a switchover: when set to a new value (a time, or any unique text),
/// the controller hands the primary over to [`SWITCHOVER_TO_ANNOTATION`]'s pod, or to the best
/// replica, once.
pub const SWITCHOVER_REQUESTED_AT_ANNOTATION: &str = "example.com/switchover-requested-at";
/// Annotation naming the pod a switchover hands the primary to; unset: the best replica.
pub const SWITCHOVER_TO_ANNOTATION: &str = "example.com/switchover-to";
/// Longest accepted `spec.title`.
pub const MAX_TITLE_LEN: usize = 256;

/// Reasons of a VisitorsApp's conditions.
pub mod reason {
    /// `Ready` True.
    pub const READY: &str = "Ready";
    // The database.
    pub const WAITING_FOR_MYSQL_POD: &str = "WaitingForMysqlPod";
    pub const WAITING_FOR_CONNECTION: &str = "WaitingForConnection";
    pub const CONNECTED: &str = "Connected";
    pub const POD_READY: &str = "PodReady";
    /// The backend waits for the database.
    pub const WAITING_FOR_DATABASE: &str = "WaitingForDatabase";
    /// The backend is stopped by a restore.
    pub const QUIESCED: &str = "Quiesced";
    // A workload.
    pub const SCALED_TO_ZERO: &str = "ScaledToZero";
    pub const AVAILABLE: &str = "Available";
    pub const ROLLING_OUT: &str = "RollingOut";
    pub const WAITING_FOR_REPLICAS: &str = "WaitingForReplicas";
    pub const NOT_CREATED: &str = "NotCreated";
    /// A child could not be applied or repaired.
    pub const CHILD_APPLY_FAILED: &str = "ChildApplyFailed";
    // The credentials Secret.
    pub const INVALID_CREDENTIALS_SECRET: &str = "InvalidCredentialsSecret";
    pub const CREDENTIALS_LOST: &str = "CredentialsLost";
    pub const CREDENTIALS_SECRET_CONFLICT: &str = "CredentialsSecretConflict";
    // TLS.
    /// The Secret named by `spec.tls.secretName` is missing or unusable.
    pub const INVALID_TLS_SECRET: &str = "InvalidTLSSecret";
    /// Event: the controller renewed the server certificate before it expired.
    pub const CERTIFICATE_RENEWED: &str = "CertificateRenewed";
    // Replication.
    /// `WritesAcknowledged` True: a replica acknowledges every commit.
    pub const ACKNOWLEDGED: &str = "Acknowledged";
    /// `ReplicaFallingBehind` False: every replica applies what the primary commits.
    pub const KEEPING_UP: &str = "KeepingUp";
    /// `ReplicaFallingBehind` True: a replica falls further behind the primary for minutes.
    pub const FALLING_BEHIND: &str = "FallingBehind";
    /// `WritesAcknowledged` False: the durability asks for no acknowledgement.
    pub const ASYNCHRONOUS: &str = "Asynchronous";
}

/// Keys of a TLS Secret: the generated `<name>-mysql-tls` or the one `spec.tls.secretName`
/// names (those of a `kubernetes.io/tls` Secret and of cert-manager's Certificates).
pub mod tls_keys {
    /// The server certificate (PEM), followed by any intermediates.
    pub const CERTIFICATE: &str = "tls.crt";
    /// The server's private key (PEM).
    pub const PRIVATE_KEY: &str = "tls.key";
    /// The CA certificate clients verify the server with (PEM).
    pub const CA: &str = "ca.crt";
    /// Every key the Secret must hold.
    pub const REQUIRED: [&str; 3] = [CERTIFICATE, PRIVATE_KEY, CA];
}

/// Keys of the credentials Secret (generated, or supplied through `spec.credentialsSecret`).
pub mod secret_keys {
    /// The application user's name.
    pub const USERNAME: &str = "username";
    /// The application user's password.
    pub const PASSWORD: &str = "password";
    /// MySQL's root password, used by probes, backups and restores.
    pub const ROOT_PASSWORD: &str = "root-password";
    /// Every key a supplied Secret must hold.
    pub const REQUIRED: [&str; 3] = [USERNAME, PASSWORD, ROOT_PASSWORD];
}

/// The desired state of one Visitors Site.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "VisitorsApp",
    plural = "visitorsapps",
    shortname = "vapp",
    category = "visitors",
    namespaced,
    status = "VisitorsAppStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A Visitors Site: MySQL with persistent storage, the visitors REST backend and the web frontend, kept converged by the visitors controller.",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size", description = "Desired backend replicas"),
    printcolumn(
        name = "Backend",
        type_ = "integer",
        json_path = ".status.backendReadyReplicas",
        description = "Ready backend replicas"
    ),
    printcolumn(
        name = "Primary",
        type_ = "string",
        json_path = ".status.replication.primary",
        description = "The MySQL pod that accepts writes (replicated apps)"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replication.readyReplicas",
        description = "MySQL replicas replicating from the primary (replicated apps)"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the app is or is not Ready: what it waits for"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct VisitorsAppSpec {
    /// Number of backend replicas (the book's `size`). 0 stops the backend.
    #[schemars(range(min = 0, max = 50))]
    pub size: i32,
    /// Dashboard title shown by the frontend. Empty or unset shows the frontend's default title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub title: Option<String>,
    /// The MySQL tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mysql: Option<Box<MysqlSpec>>,
    /// The backend tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Box<TierSpec>>,
    /// The frontend tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<Box<TierSpec>>,
    /// How the backend and frontend Services are exposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// Name of a Secret in this namespace holding `username`, `password` and `root-password`.
    /// When unset, the operator generates `<name>-mysql-credentials` once, with random
    /// passwords, and never rotates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// What happens to the MySQL data volume when this VisitorsApp is deleted. `Retain`
    /// (default) keeps the PersistentVolumeClaim; `Delete` removes it with the app.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// TLS between MySQL and every client (the backend, the controllers, backup and restore
    /// Jobs). Unset: on (`Required`, with a generated certificate) for a new app; an app whose
    /// MySQL was created before TLS support keeps plain text until `tls.mode` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,
}

/// TLS to MySQL.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// `Required`: MySQL serves TLS and refuses plain-text connections, and every client
    /// verifies its certificate. `Disabled`: plain text. Changing it restarts MySQL once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TlsMode>,
    /// Name of a Secret in this namespace holding `tls.crt`, `tls.key` and `ca.crt` (a
    /// cert-manager Certificate's Secret fits); the certificate must name the MySQL Service
    /// `<name>-mysql.<namespace>.svc`. Unset: the controller generates a CA
    /// (`<name>-mysql-ca`) and a server certificate (`<name>-mysql-tls`) and renews the
    /// certificate before it expires. A changed certificate restarts MySQL once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// Whether MySQL's clients must use TLS.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TlsMode {
    /// TLS only, verified against the CA.
    #[default]
    Required,
    /// Plain text.
    Disabled,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Required => "Required",
            TlsMode::Disabled => "Disabled",
        }
    }
}

/// The MySQL tier.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MysqlSpec {
    /// The MySQL image. Defaults to `mysql:8.4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The data volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// CPU and memory requests and limits of the MySQL container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// How many MySQL servers run. 1 (the default) runs one. 2 or more run one primary, which
    /// alone accepts writes, and replicas of it (GTID replication), with automatic failover
    /// when the primary is lost: 3 keeps writes going while any one server is down. See
    /// docs/high-availability.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 9))]
    pub replicas: Option<i32>,
    /// How a replicated MySQL acknowledges commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationSpec>,
}

/// Replication between the MySQL servers of an app with `spec.mysql.replicas` of 2 or more.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// `Acknowledged` (the default): a commit returns to the client only once a replica has
    /// received it (semi-synchronous replication that never falls back to asynchronous), so a
    /// failover loses no acknowledged write; while no replica can acknowledge, writes wait.
    /// `Asynchronous`: commits return at once; a failover can lose the last commits, which the
    /// old primary then holds alone (they are extracted and reported, never discarded silently).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    /// How many threads each replica applies its source's transactions with (parallel
    /// replication: MariaDB's `slave_parallel_threads` in optimistic mode, MySQL's
    /// `replica_parallel_workers`), always committing them in the source's order, so that what a
    /// replica applied is a prefix of the primary's history. Defaults to 8, measured
    /// (docs/benchmarks.md); 1 applies one transaction at a time. Changing it restarts the
    /// servers one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub applier_threads: Option<i32>,
}

/// Threads each replica applies with unless `spec.mysql.replication.applierThreads` says.
pub const DEFAULT_APPLIER_THREADS: i32 = 8;

/// When a commit on a replicated MySQL returns to the client.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Durability {
    /// Once at least one replica has received it.
    #[default]
    Acknowledged,
    /// At once.
    Asynchronous,
}

/// The MySQL data volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested size, as a Kubernetes quantity. Defaults to `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Storage class of the claim. Unset uses the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// A stateless tier (backend or frontend).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierSpec {
    /// The container image. Defaults to the image published for the book.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPU and memory requests and limits of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// Service exposure of the backend and frontend.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `ClusterIP` (default) or `NodePort`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<ServiceType>,
    /// Node port of the backend when `type` is `NodePort`. Defaults to the book's 30685.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub backend_node_port: Option<i32>,
    /// Node port of the frontend when `type` is `NodePort`. Defaults to the book's 30686.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub frontend_node_port: Option<i32>,
}

/// How a Service is exposed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
}

/// What happens to stored data when its owner is deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Keep the data.
    #[default]
    Retain,
    /// Delete the data with its owner.
    Delete,
}

/// The observed state of a Visitors Site.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct VisitorsAppStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `DatabaseReady`, `BackendReady` and `FrontendReady`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The backend image in use (kept from the book's operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_image: Option<String>,
    /// The frontend image in use (kept from the book's operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_image: Option<String>,
    /// The MySQL image in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mysql_image: Option<String>,
    /// Ready MySQL servers (pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mysql_ready_replicas: Option<i32>,
    /// Ready backend replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_ready_replicas: Option<i32>,
    /// Ready frontend replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_ready_replicas: Option<i32>,
    /// The Secret holding the database credentials (its name only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// In-cluster addresses of the three tiers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
    /// TLS as MySQL serves it: what backup and restore Jobs connect with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStatus>,
    /// The MySQL servers of a replicated app (`spec.mysql.replicas` of 2 or more): which one is
    /// the primary, how each replica is doing, and the last failover and switchover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication: Option<Box<ReplicationStatus>>,
}

/// The MySQL servers of a replicated app.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    /// The pod that accepts writes, where the client Service (`<name>-mysql`) leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// Replicas that replicate from the primary and can acknowledge its commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Every MySQL server, by pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ReplicationMember>,
    /// The last automatic failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<RoleChange>,
    /// The last switchover, asked for by annotation or made by a rolling update, done or
    /// refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_switchover: Option<RoleChange>,
    /// The value of the `example.com/switchover-requested-at` annotation answered last (its
    /// switchover done or refused): a request is carried out once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_switchover_request: Option<String>,
    /// Transactions the primary committed a second, over the last 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_rate: Option<f64>,
    /// The seconds a failover now would wait for its new primary to apply what it received: the
    /// backlog of the replica it would promote, at that replica's apply rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_failover_wait_seconds: Option<f64>,
    /// When the positions and rates of this status were measured; they are measured again at
    /// most every 10 s while nothing else changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One MySQL server of a replicated app.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationMember {
    /// The pod.
    pub name: String,
    /// `Primary`, `Replica`, `Seeding`, `Fenced` (a former primary no longer accepting writes,
    /// waiting to rejoin), `Diverged` (holds transactions the primary lacks) or `Unavailable`.
    pub role: MemberRole,
    /// How far a replica's applied transactions are behind the primary, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    /// What is wrong, when something is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The GTID position of what it received from its source, applied or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<String>,
    /// The GTID position of what it applied (its binary log holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// Transactions it received and has not applied yet: what its promotion would wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<i64>,
    /// Transactions the primary committed that it has not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind_primary: Option<i64>,
    /// Transactions it applied a second, over the last 30 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_rate: Option<f64>,
    /// While it is behind the primary: the seconds until it holds what the primary holds, at the
    /// rates measured; absent while it does not gain on the primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_seconds: Option<f64>,
    /// It has fallen further behind the primary for minutes (condition `ReplicaFallingBehind`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub falling_behind: bool,
}

/// The role of one MySQL server.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MemberRole {
    Primary,
    Replica,
    Seeding,
    Fenced,
    Diverged,
    #[default]
    Unavailable,
}

/// A change of primary.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleChange {
    /// When the new primary started accepting writes (or the request was refused).
    pub time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// The primary before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The new primary; unset when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Why: the failure that started a failover (`PodDeleted`, `PodNotReady`, `NotAnswering`),
    /// `Requested` for a switchover, or why a switchover was refused.
    pub reason: String,
    /// What happened, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds from the last moment the old primary was seen accepting writes to the moment
    /// the new one accepted them: the longest a client could wait for a commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_gap_seconds: Option<f64>,
    /// Seconds the promotion waited for the new primary to apply what it had received (the
    /// message says how much that was, and why that server was chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_wait_seconds: Option<f64>,
    /// The switchover request (the value of the `example.com/switchover-requested-at`
    /// annotation) this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// TLS as MySQL serves it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// `Required` or `Disabled`: the mode in effect (see `spec.tls.mode`).
    pub mode: TlsMode,
    /// The Secret whose `ca.crt` clients verify MySQL's certificate with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// When the server certificate expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl VisitorsAppStatus {
    /// The TLS Secret clients verify MySQL with, when MySQL requires TLS; `None` for plain
    /// text (also while the status does not say yet).
    pub fn tls_secret(&self) -> Option<&str> {
        let tls = self.tls.as_ref().filter(|tls| tls.mode == TlsMode::Required)?;
        tls.secret_name.as_deref()
    }
}

/// In-cluster addresses of the three tiers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    /// `host:port` of the MySQL client Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// URL of the backend Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// URL of the frontend Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
}

impl VisitorsAppSpec {
    pub fn mysql_image(&self) -> &str {
        self.mysql.as_ref().and_then(|m| m.image.as_deref()).unwrap_or(DEFAULT_MYSQL_IMAGE)
    }

    pub fn backend_image(&self) -> &str {
        self.backend.as_ref().and_then(|t| t.image.as_deref()).unwrap_or(DEFAULT_BACKEND_IMAGE)
    }

    pub fn frontend_image(&self) -> &str {
        self.frontend.as_ref().and_then(|t| t.image.as_deref()).unwrap_or(DEFAULT_FRONTEND_IMAGE)
    }

    /// The title, or `None` when unset or empty (the book's operator crashed on empty).
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref().filter(|t| !t.is_empty())
    }

    pub fn storage_size(&self) -> &str {
        self.mysql
            .as_ref()
            .and_then(|m| m.storage.as_ref())
            .and_then(|s| s.size.as_deref())
            .unwrap_or(DEFAULT_STORAGE_SIZE)
    }

    pub fn storage_class_name(&self) -> Option<&str> {
        self.mysql.as_ref().and_then(|m| m.storage.as_ref()).and_then(|s| s.storage_class_name.as_deref())
    }

    pub fn service_type(&self) -> ServiceType {
        self.service.as_ref().and_then(|s| s.type_).unwrap_or_default()
    }

    pub fn backend_node_port(&self) -> i32 {
        self.service.as_ref().and_then(|s| s.backend_node_port).unwrap_or(DEFAULT_BACKEND_NODE_PORT)
    }

    pub fn frontend_node_port(&self) -> i32 {
        self.service.as_ref().and_then(|s| s.frontend_node_port).unwrap_or(DEFAULT_FRONTEND_NODE_PORT)
    }

    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }

    /// How many MySQL servers run.
    pub fn mysql_replicas(&self) -> i32 {
        self.mysql.as_ref().and_then(|m| m.replicas).unwrap_or(1)
    }

    /// Whether MySQL runs a primary and replicas.
    pub fn replicated(&self) -> bool {
        self.mysql_replicas() > 1
    }

    /// How a replicated MySQL acknowledges commits.
    pub fn durability(&self) -> Durability {
        self.mysql.as_ref().and_then(|m| m.replication.as_ref()).and_then(|r| r.durability).unwrap_or_default()
    }

    /// Threads each replica applies with (`spec.mysql.replication.applierThreads`).
    pub fn applier_threads(&self) -> i32 {
        self.mysql
            .as_ref()
            .and_then(|m| m.replication.as_ref())
            .and_then(|r| r.applier_threads)
            .unwrap_or(DEFAULT_APPLIER_THREADS)
    }

    /// The TLS mode the spec asks for, when it says.
    pub fn tls_mode(&self) -> Option<TlsMode> {
        self.tls.as_ref().and_then(|tls| tls.mode)
    }

    /// The Secret named by `spec.tls.secretName`, when the user supplies the certificate.
    pub fn tls_secret_name(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|tls| tls.secret_name.as_deref())
    }

    /// Checks everything the schema cannot (and, for clients that bypass it, what it can).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut problems = Problems::default();
        if !(0..=MAX_SIZE).contains(&self.size) {
            problems.add("spec.size", format!("{} is out of range: use 0 to {MAX_SIZE} backend replicas", self.size));
        }
        if let Some(title) = &self.title
            && title.chars().count() > MAX_TITLE_LEN
        {
            problems.add(
                "spec.title",
                format!("is {} characters long; at most {MAX_TITLE_LEN} are allowed", title.chars().count()),
            );
        }
        problems.check("spec.mysql.image", image_reference(self.mysql_image()));
        problems.check("spec.backend.image", image_reference(self.backend_image()));
        problems.check("spec.frontend.image", image_reference(self.frontend_image()));
        match quantity_bytes(self.storage_size()) {
            Ok(0) => problems.add("spec.mysql.storage.size", "must be larger than zero"),
            Ok(_) => {}
            Err(problem) => problems.add("spec.mysql.storage.size", problem),
        }
        if !(1..=MAX_MYSQL_REPLICAS).contains(&self.mysql_replicas()) {
            let replicas = self.mysql_replicas();
            problems.add(
                "spec.mysql.replicas",
                format!("{replicas} is out of range: use 1 to {MAX_MYSQL_REPLICAS} MySQL servers"),
            );
        }
        if let Some(class) = self.storage_class_name() {
            problems.check("spec.mysql.storage.storageClassName", dns_subdomain(class));
        }
        if let Some(secret) = &self.credentials_secret {
            problems.check("spec.credentialsSecret", dns_subdomain(secret));
        }
        if let Some(secret) = self.tls_secret_name() {
            problems.check("spec.tls.secretName", dns_subdomain(secret));
            if self.tls_mode() == Some(TlsMode::Disabled) {
                problems.add("spec.tls.secretName", "is set while spec.tls.mode is Disabled: remove one of them");
            }
        }
        if self.service_type() == ServiceType::NodePort && self.backend_node_port() == self.frontend_node_port() {
            problems.add("spec.service.frontendNodePort", "must differ from spec.service.backendNodePort");
        }
        problems.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book_spec() -> VisitorsAppSpec {
        VisitorsAppSpec { size: 1, title: Some("Custom Dashboard Title".into()), ..Default::default() }
    }

    #[test]
    fn book_resource_is_valid_and_gets_defaults() {
        let spec = book_spec();
        assert_eq!(spec.validate(), Ok(()));
        assert_eq!(spec.backend_image(), DEFAULT_BACKEND_IMAGE);
        assert_eq!(spec.storage_size(), "1Gi");
        assert_eq!(spec.service_type(), ServiceType::ClusterIP);
        assert_eq!(spec.deletion_policy(), DeletionPolicy::Retain);
    }

    #[test]
    fn empty_title_means_no_title() {
        let spec = VisitorsAppSpec { title: Some(String::new()), ..book_spec() };
        assert_eq!(spec.title(), None);
    }

    #[test]
    fn reports_each_invalid_field() {
        let spec = VisitorsAppSpec {
            size: 51,
            mysql: Some(Box::new(MysqlSpec {
                image: Some("MySQL:8".into()),
                storage: Some(StorageSpec { size: Some("lots".into()), storage_class_name: None }),
                replicas: Some(0),
                ..Default::default()
            })),
            service: Some(ServiceSpec {
                type_: Some(ServiceType::NodePort),
                backend_node_port: Some(30000),
                frontend_node_port: Some(30000),
            }),
            ..book_spec()
        };
        let fields: Vec<String> = spec.validate().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.size",
                "spec.mysql.image",
                "spec.mysql.storage.size",
                "spec.mysql.replicas",
                "spec.service.frontendNodePort"
            ]
        );
    }

    #[test]
    fn zero_storage_is_rejected() {
        let spec = VisitorsAppSpec {
            mysql: Some(Box::new(MysqlSpec {
                storage: Some(StorageSpec { size: Some("0".into()), ..Default::default() }),
                ..Default::default()
            })),
            ..book_spec()
        };
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.mysql.storage.size");
    }
}
