//! `MySQLBackup`: one kind, two modes. Without `spec.schedule` it is a single on-demand backup
//! run. With `spec.schedule` it is a schedule that creates one run (a `MySQLBackup` without a
//! schedule, owned by it and labelled with its name) per fire time.

use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::drill::{DRILL_REQUESTED_AT, Drill, DrillStatus};
use crate::encryption::BackupEncryption;
use crate::point_in_time::{PointInTime, PointInTimeStatus, SnapshotPosition};
use crate::schedule::Plan;
use crate::storage::BackupStorage;
use crate::validation::{InvalidSpec, Problems, dns_subdomain, parse_duration};
use crate::visitors_app::DeletionPolicy;

pub const DEFAULT_PARALLELISM: i32 = 2;
pub const MAX_PARALLELISM: i32 = 16;
/// Default deadline of one backup or restore Job: six hours.
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 6 * 3600;
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 60;
pub const DEFAULT_KEEP_SUCCESSFUL: i32 = 7;
pub const DEFAULT_KEEP_FAILED: i32 = 3;

/// Condition types of a MySQLBackup besides `Ready`.
pub mod condition {
    /// Run: True while it waits to start (the reason names what for), False once its Job runs.
    pub use crate::conditions::PENDING;
    /// Schedule: whether its cron expression and time zone are usable.
    pub const SCHEDULE_VALID: &str = "ScheduleValid";
    /// Schedule: whether the newest finished run succeeded.
    pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
    /// Run being deleted under `deletionPolicy: Delete`: True while its stored backup is being
    /// deleted, False (reason `StorageDeleteFailed`) when the storage refused.
    pub const DELETING: &str = "Deleting";
    /// Schedule with `pointInTime`: True while the binary log is archived without a gap a
    /// restore would have to cross; False with the reason otherwise.
    pub const ARCHIVING: &str = "Archiving";
    /// Run: whether its newest restore drill passed (reasons in [`crate::drill::reason`]).
    pub const VERIFIED: &str = "Verified";
}

/// Reasons of a MySQLBackup's conditions besides those every operation has
/// ([`crate::conditions::reason`]).
pub mod reason {
    /// Schedule, `ScheduleValid` True.
    pub const VALID: &str = "Valid";
    /// Schedule, `ScheduleValid` False.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// Schedule, `LastBackupSucceeded` Unknown.
    pub const NO_RUN_FINISHED: &str = "NoRunFinished";
    /// Schedule, `LastBackupSucceeded` False.
    pub const FAILED: &str = "Failed";
    /// Schedule, `Ready` True while runs are created.
    pub const SCHEDULED: &str = "Scheduled";
    /// Schedule, `Ready` True while `suspend` is set.
    pub const SUSPENDED: &str = "Suspended";
    /// Run being deleted, `Deleting` True.
    pub const DELETING_STORAGE: &str = "DeletingStorage";
    /// Run being deleted, `Deleting` False: the storage refused.
    pub const STORAGE_DELETE_FAILED: &str = "StorageDeleteFailed";
    /// Run being deleted, `Deleting` False: the spec no longer points where the backup is.
    pub const STORAGE_LOCATION_CHANGED: &str = "StorageLocationChanged";

    // Schedule, `Archiving`.
    /// True: the archiver stores the binary log.
    pub const ARCHIVING: &str = "Archiving";
    /// False: the archiver has not reported yet.
    pub const ARCHIVER_STARTING: &str = "ArchiverStarting";
    /// False: the archiver has not reported for longer than it should (its pod is gone, stuck
    /// or cannot reach the API server).
    pub const ARCHIVER_DOWN: &str = "ArchiverDown";
    /// False: the archiver lost the server or the storage and retries.
    pub const ARCHIVER_RETRYING: &str = "ArchiverRetrying";
    /// False: the archiver cannot archive until something is fixed (the message says what).
    pub const ARCHIVE_FAILED: &str = "ArchiveFailed";
    /// False: the server purged binary logs before they were archived; no restore replays
    /// across the gap until a run succeeds after it.
    pub const BINLOG_PURGED: &str = "BinlogPurged";
    /// False: the server's history is not the one archived (a new data directory, another
    /// server); as `BinlogPurged`.
    pub const SERVER_CHANGED: &str = "ServerChanged";
    /// False: `spec.pointInTime.enabled` is false.
    pub const ARCHIVING_DISABLED: &str = "ArchivingDisabled";
}

/// A backup of a VisitorsApp's database: a single run, or a schedule of runs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "MySQLBackup",
    plural = "mysqlbackups",
    shortname = "mbak",
    category = "visitors",
    namespaced,
    status = "MySQLBackupStatus",
    derive = "PartialEq",
    doc = "A backup of a VisitorsApp's MySQL database, logical or physical. Without spec.schedule it is one on-demand run; with spec.schedule it creates one run per fire time.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.source.visitorsApp"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule.cron"),
    printcolumn(name = "Method", type_ = "string", json_path = ".spec.method", priority = 1),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Size", type_ = "integer", json_path = ".status.sizeBytes", description = "Stored bytes"),
    printcolumn(
        name = "Duration",
        type_ = "number",
        json_path = ".status.durationSeconds",
        description = "Wall time of a run in seconds"
    ),
    printcolumn(
        name = "Last",
        type_ = "date",
        json_path = ".status.lastScheduleTime",
        description = "Last fire time of a schedule"
    ),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextScheduleTime",
        description = "Next fire time of a schedule"
    ),
    printcolumn(
        name = "LastBackup",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"LastBackupSucceeded\")].reason",
        description = "Whether the newest finished run of a schedule succeeded"
    ),
    printcolumn(
        name = "Drill",
        type_ = "string",
        json_path = ".status.drill.phase",
        description = "Phase of a run's newest restore drill"
    ),
    printcolumn(name = "Active", type_ = "string", json_path = ".status.activeRun", priority = 1),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = ".status.lastVerifiedRun",
        description = "A schedule's newest run whose restore drill passed",
        priority = 1
    ),
    printcolumn(
        name = "Recoverable",
        type_ = "date",
        json_path = ".status.pointInTime.lastRecoverableTime",
        description = "Schedule with pointInTime: every transaction up to this time is archived",
        priority = 1
    ),
    printcolumn(name = "LastSuccessful", type_ = "string", json_path = ".status.lastSuccessfulRun", priority = 1),
    printcolumn(
        name = "TakenFrom",
        type_ = "string",
        json_path = ".status.takenFrom.pod",
        description = "Run: the MySQL server it read",
        priority = 1
    ),
    printcolumn(name = "Error", type_ = "string", json_path = ".status.error", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.schedule) == has(oldSelf.schedule)").message("a MySQLBackup cannot switch between on-demand and scheduled; create a new one"))]
#[x_kube(validation = Rule::new("!has(self.pointInTime) || has(self.schedule)").message("pointInTime needs a schedule: its runs are the base backups a restore starts from"))]
#[x_kube(validation = Rule::new("!has(self.drill) || !has(self.drill.cron) || has(self.schedule)").message("drill.cron needs a schedule: an on-demand run is drilled once it succeeds"))]
#[x_kube(validation = Rule::new("!has(self.drill) || !has(self.drill.maxUnverifiedAge) || has(self.schedule)").message("drill.maxUnverifiedAge needs a schedule"))]
#[x_kube(validation = Rule::new("!has(self.drill) || !has(self.drill.timeZone) || has(self.drill.cron)").message("drill.timeZone is the time zone of drill.cron, which is not set"))]
pub struct MySQLBackupSpec {
    /// What to back up.
    pub source: BackupSource,
    /// How a run reads the database: `Logical` (default) its rows over SQL, restored by
    /// loading them; `Physical` the server's data files, streamed by the server's own
    /// `mariadb-backup` (MariaDB images only), at the speed of the disk (see
    /// docs/backup-restore.md). A schedule's runs take the method it has when they start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<BackupMethod>,
    /// Where to store the backup. Each run writes its own folder
    /// `<namespace>/<app>/<run name>` below the storage's prefix or sub path.
    pub storage: BackupStorage,
    /// Makes this resource a schedule of runs instead of a single run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<BackupSchedule>,
    /// Compression of data chunks: `zstd` (default), `gzip` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    /// Number of parallel dump connections. Defaults to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub parallelism: Option<i32>,
    /// Deadline of one run, in seconds; a run that takes longer is stopped and marked Failed.
    /// Defaults to 21600 (six hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub active_deadline_seconds: Option<i64>,
    /// What happens to the stored backup when a run object is deleted (by a user or by
    /// retention): `Retain` (default) keeps the files, `Delete` removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// CPU and memory requests and limits of the backup Job's agent container. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Schedule only: archive the app's binary log continuously beside the runs, so that a
    /// restore can bring the database back to any second since the oldest kept run (see
    /// docs/backup-restore.md). The archive is stored with the runs, below
    /// `<namespace>/<app>/_binlog/<schedule>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,
    /// Restore drills: each successful run (or, with `drill.cron`, the newest one at each fire
    /// time) restored into a throwaway MySQL and compared with what was dumped (see
    /// docs/backup-restore.md). The newest verified run is never deleted by retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<Drill>,
    /// Client-side encryption: every stored file of a run encrypted with a key from a Secret
    /// (see docs/backup-restore.md). Unset: runs are stored unencrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,
}

/// The database to back up.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSource {
    /// Name of the VisitorsApp, in this namespace, whose database is backed up.
    #[schemars(length(min = 1, max = 253))]
    pub visitors_app: String,
    /// Which MySQL server of a replicated app (`spec.mysql.replicas` of 2 or more) a run reads:
    /// `PreferReplica` (default) a replica that replicates from the primary with at most 120 s
    /// of lag, else the primary; `Replica` only such a replica (the run waits for one);
    /// `Primary` the primary. An app with one server is read from it whatever this says,
    /// except `Replica`, which waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<BackupFrom>,
}

impl BackupSource {
    pub fn reads_from(&self) -> BackupFrom {
        self.from.unwrap_or_default()
    }
}

/// Which server of a replicated app a backup run reads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackupFrom {
    #[default]
    PreferReplica,
    Replica,
    Primary,
}

/// The server a run read: its pod and what it was then.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TakenFrom {
    /// The MySQL pod, for example `shop-mysql-2`.
    pub pod: String,
    /// `Primary` or `Replica`.
    pub role: ServerRole,
}

/// What a MySQL server of an app is to the others.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ServerRole {
    #[default]
    Primary,
    Replica,
}

/// A cron schedule of backup runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSchedule {
    /// Standard 5-field cron expression: minute hour day-of-month month day-of-week, for
    /// example `0 3 * * *` (03:00 every day).
    #[schemars(length(min = 9, max = 128))]
    pub cron: String,
    /// IANA time zone of the cron expression, for example `Europe/Paris`. Defaults to `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Stops creating new runs while true. Runs already started finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// A run that cannot start within this many seconds of its fire time is skipped. Missed
    /// fire times never pile up: at most one catch-up run is started, for the latest missed
    /// time, and only within this deadline. Unset means no deadline for that catch-up run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub starting_deadline_seconds: Option<i64>,
    /// What to do when a fire time comes while the previous run is still active: `Forbid`
    /// (default) skips the new run; `Replace` stops the active run and starts the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_policy: Option<ConcurrencyPolicy>,
    /// Which runs to keep. The newest successful run is never deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
}

/// Which scheduled runs to keep. Successful and failed runs are counted separately.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retention {
    /// Number of successful runs to keep. Defaults to 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keep_successful: Option<i32>,
    /// Number of failed runs to keep. Defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_failed: Option<i32>,
    /// Runs older than this are deleted, for example `720h` or `30d`; the newest successful
    /// run is kept whatever its age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

/// How a backup run reads the database. `VolumeSnapshot` is reserved for CSI snapshots.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum BackupMethod {
    #[default]
    Logical,
    Physical,
}

/// Compression of a backup's data chunks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Zstd,
    Gzip,
    None,
}

/// What a schedule does when a fire time comes while a run is active.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConcurrencyPolicy {
    #[default]
    Forbid,
    Replace,
}

/// The lifecycle phase of a backup run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// The observed state of a backup run or of a schedule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySQLBackupStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Run: `Pending`, `Running`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// Run: the Job that runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Run: when the agent started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// Run: when the run succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Run: wall time of the run in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// Run: where the backup is stored, for example `s3://bucket/prefix/ns/app/run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Run: stored bytes, all files included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Run: number of tables backed up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<i64>,
    /// Run: number of rows backed up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    /// Run: SHA-256 of the backup's manifest, which lists the SHA-256 of every file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    /// Run: version of the MySQL server that was backed up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// Run: the server time and binary log position of the backup's snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotPosition>,
    /// Run: the MySQL server it read (see `spec.source.from`); its GTID position is
    /// `snapshot.gtid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_from: Option<TakenFrom>,
    /// Run: why the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Run: bytes of table data before compression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_bytes: Option<i64>,
    /// Run: the id of the key (an entry of `spec.encryption.keySecret`) the run was encrypted
    /// with; unset for an unencrypted run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
    /// Run: its newest restore drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill: Option<DrillStatus>,
    /// Run: when a drill of it last passed. Kept while later drills run or fail for their own
    /// trouble; cleared only when one proves the backup wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_time: Option<Time>,
    /// Run: what a drill found wrong with the backup, once one did (reason `BackupDefect`).
    /// Never cleared: the run is never restored, whatever later drills say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drill_defect: Option<String>,

    /// Schedule: the latest fire time a run was created for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// Schedule: the next fire time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// Schedule: the newest run that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_run: Option<String>,
    /// Schedule: the newest run that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_run: Option<String>,
    /// Schedule: the run in progress, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run: Option<String>,
    /// Schedule: the newest run whose drill passed; retention never deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_run: Option<String>,
    /// Schedule: when the drill of `lastVerifiedRun` passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_time: Option<Time>,
    /// Schedule with `drill.cron`: the latest drill fire time a drill was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill_schedule_time: Option<Time>,
    /// Schedule with `drill.cron`: the next drill fire time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_drill_time: Option<Time>,
    /// Schedule with `pointInTime`: the binary log archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTimeStatus>,
}

impl MySQLBackupSpec {
    pub fn is_schedule(&self) -> bool {
        self.schedule.is_some()
    }

    pub fn compression(&self) -> Compression {
        self.compression.unwrap_or_default()
    }

    pub fn method(&self) -> BackupMethod {
        self.method.unwrap_or_default()
    }

    pub fn parallelism(&self) -> i32 {
        self.parallelism.unwrap_or(DEFAULT_PARALLELISM)
    }

    pub fn active_deadline_seconds(&self) -> i64 {
        self.active_deadline_seconds.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS)
    }

    pub fn deletion_policy(&self) -> DeletionPolicy {
        self.deletion_policy.unwrap_or_default()
    }

    /// The binary-log archiving this schedule asks for now: `None` when off.
    pub fn archiving(&self) -> Option<&PointInTime> {
        self.point_in_time.as_ref().filter(|p| self.is_schedule() && p.enabled())
    }

    /// Checks the spec and parses a schedule's cron expression and time zone, once: the plan is
    /// what the schedule then runs on (`None` for a run).
    pub fn checked(&self) -> Result<Option<Plan>, InvalidSpec> {
        let mut problems = Problems::default();
        problems.check("spec.source.visitorsApp", dns_subdomain(&self.source.visitors_app));
        self.storage.validate("spec.storage", &mut problems);
        validate_parallelism("spec.parallelism", self.parallelism, &mut problems);
        validate_deadline("spec.activeDeadlineSeconds", self.active_deadline_seconds, &mut problems);
        let plan = self.schedule.as_ref().and_then(|schedule| schedule.checked(&mut problems));
        if let Some(drill) = &self.drill {
            drill.validate(self.is_schedule(), &mut problems);
        }
        if let Some(encryption) = &self.encryption {
            encryption.validate("spec.encryption", &mut problems);
        }
        if let Some(point_in_time) = &self.point_in_time {
            if self.schedule.is_none() {
                problems
                    .add("spec.pointInTime", "needs a schedule: its runs are the base backups a restore starts from");
            }
            point_in_time.validate(&mut problems);
        }
        problems.into_result().map(|()| plan)
    }

    /// The spec of one run of this schedule: one base backup with the schedule's storage and
    /// options. Archiving belongs to the schedule (the API refuses pointInTime without a
    /// schedule), and a schedule's drill cron asks its runs by annotation, so a run keeps one
    /// drill's settings.
    pub fn for_run(&self) -> MySQLBackupSpec {
        let mut spec = self.clone();
        spec.schedule = None;
        spec.point_in_time = None;
        spec.drill = spec.drill.as_ref().map(crate::drill::Drill::for_scheduled_run);
        spec
    }

    /// Checks the spec (see [`Self::checked`]).
    pub fn validate(&self) -> Result<(), InvalidSpec> {
        self.checked().map(drop)
    }
}

impl MySQLBackup {
    /// A run that succeeded and is not being deleted: one retention keeps and a restore may use.
    pub fn is_kept_success(&self) -> bool {
        self.metadata.deletion_timestamp.is_none()
            && self.status.as_ref().and_then(|s| s.phase) == Some(BackupPhase::Succeeded)
    }

    /// The drill this run owes: the time of the newest request it has not answered yet. A
    /// successful run is asked for a drill by its spec (after each run: at its completion) or
    /// by the [`DRILL_REQUESTED_AT`] annotation (a schedule's drill cron, or a person), which
    /// counts even when the spec's drills are off.
    pub fn drill_due(&self) -> Option<jiff::Timestamp> {
        if !self.is_kept_success() {
            return None;
        }
        let status = self.status.as_ref()?;
        let after_run = self.spec.drill.as_ref().filter(|d| d.after_each_run()).and(status.completion_time.as_ref());
        let annotated = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DRILL_REQUESTED_AT))
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        // Whole seconds: a status keeps times to the second.
        let requested = [after_run.map(|t| t.0), annotated].into_iter().flatten().max()?;
        let requested = jiff::Timestamp::from_second(requested.as_second()).ok()?;
        let answered = status.drill.as_ref().map(|d| d.requested_at.0.as_second());
        (answered.is_none_or(|answered| requested.as_second() > answered)).then_some(requested)
    }

    /// A kept successful run whose newest drill passed.
    /// A kept successful run that a drill has proven restorable, and none proven wrong.
    pub fn is_verified(&self) -> bool {
        self.is_kept_success()
            && !self.failed_drill()
            && self.status.as_ref().is_some_and(|s| s.verified_time.is_some())
    }

    /// A run that a drill has proven not to restore what was dumped (ever: a later drill that
    /// could not run does not clear it).
    pub fn failed_drill(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.drill_defect.is_some() || s.drill.as_ref().is_some_and(DrillStatus::found_defect))
    }

    /// The snapshot a restore to a point in time can start from: a kept successful run's, with
    /// its server time and binary log position known (runs taken while binary logging was off,
    /// or by an older agent, have none).
    pub fn base_snapshot(&self) -> Option<BaseSnapshot<'_>> {
        if !self.is_kept_success() || self.failed_drill() {
            return None;
        }
        let snapshot = self.status.as_ref()?.snapshot.as_ref()?;
        Some(BaseSnapshot {
            time: snapshot.time.as_ref()?.0,
            binlog_file: snapshot.binlog_file.as_deref()?,
            binlog_position: u64::try_from(snapshot.binlog_position?).ok()?,
            gtid: snapshot.gtid.as_deref(),
        })
    }
}

/// Where a base backup's snapshot is in the server's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseSnapshot<'a> {
    pub time: jiff::Timestamp,
    pub binlog_file: &'a str,
    pub binlog_position: u64,
    pub gtid: Option<&'a str>,
}

impl BackupSchedule {
    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }

    pub fn suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }

    pub fn concurrency_policy(&self) -> ConcurrencyPolicy {
        self.concurrency_policy.unwrap_or_default()
    }

    fn checked(&self, problems: &mut Problems) -> Option<Plan> {
        let plan = Plan::parse(&self.cron, self.time_zone(), problems);
        if let Some(seconds) = self.starting_deadline_seconds
            && seconds < 1
        {
            problems.add("spec.schedule.startingDeadlineSeconds", format!("{seconds} must be at least 1"));
        }
        if let Some(retention) = &self.retention {
            retention.validate(problems);
        }
        plan
    }
}

impl Retention {
    pub fn keep_successful(&self) -> i32 {
        self.keep_successful.unwrap_or(DEFAULT_KEEP_SUCCESSFUL)
    }

    pub fn keep_failed(&self) -> i32 {
        self.keep_failed.unwrap_or(DEFAULT_KEEP_FAILED)
    }

    /// `maxAge` as a duration, counting a day as 24 hours.
    pub fn max_age(&self) -> Result<Option<Duration>, String> {
        self.max_age.as_deref().map(parse_duration).transpose()
    }

    fn validate(&self, problems: &mut Problems) {
        if self.keep_successful() < 1 {
            problems.add(
                "spec.schedule.retention.keepSuccessful",
                "must be at least 1: the newest successful run is always kept",
            );
        }
        if self.keep_failed() < 0 {
            problems.add("spec.schedule.retention.keepFailed", "must not be negative");
        }
        if let Err(problem) = self.max_age() {
            problems.add("spec.schedule.retention.maxAge", problem);
        }
    }
}

pub(crate) fn validate_parallelism(field: &str, parallelism: Option<i32>, problems: &mut Problems) {
    if let Some(n) = parallelism
        && !(1..=MAX_PARALLELISM).contains(&n)
    {
        problems.add(field, format!("{n} is out of range: use 1 to {MAX_PARALLELISM}"));
    }
}

pub(crate) fn validate_deadline(field: &str, seconds: Option<i64>, problems: &mut Problems) {
    if let Some(seconds) = seconds
        && seconds < MIN_ACTIVE_DEADLINE_SECONDS
    {
        problems.add(field, format!("{seconds} is too short: use at least {MIN_ACTIVE_DEADLINE_SECONDS} seconds"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::PvcStorage;

    fn on_demand() -> MySQLBackupSpec {
        MySQLBackupSpec {
            source: BackupSource { visitors_app: "ex".into(), from: None },
            method: None,
            storage: BackupStorage {
                s3: None,
                persistent_volume_claim: Some(PvcStorage { claim_name: "backups".into(), sub_path: None }),
            },
            schedule: None,
            compression: None,
            parallelism: None,
            active_deadline_seconds: None,
            deletion_policy: None,
            resources: None,
            point_in_time: None,
            drill: None,
            encryption: None,
        }
    }

    fn scheduled(cron: &str) -> MySQLBackupSpec {
        MySQLBackupSpec { schedule: Some(BackupSchedule { cron: cron.into(), ..Default::default() }), ..on_demand() }
    }

    #[test]
    fn only_a_kept_successful_run_with_a_binlog_position_is_a_base() {
        let run = |status: serde_json::Value| -> MySQLBackup {
            let mut run = MySQLBackup::new("r", on_demand());
            run.status = Some(serde_json::from_value(status).unwrap());
            run
        };
        let snapshot = serde_json::json!({"time": "2026-11-25T10:00:00Z", "binlogFile": "binlog.000002",
            "binlogPosition": 330, "gtid": "0-1-9"});
        let base = run(serde_json::json!({"phase": "Succeeded", "snapshot": snapshot}));
        let found = base.base_snapshot().expect("a base");
        assert_eq!((found.binlog_file, found.binlog_position, found.gtid), ("binlog.000002", 330, Some("0-1-9")));
        assert_eq!(found.time.to_string(), "2026-11-25T10:00:00Z");

        assert_eq!(run(serde_json::json!({"phase": "Failed", "snapshot": snapshot})).base_snapshot(), None);
        let without_binlog = serde_json::json!({"phase": "Succeeded", "snapshot": {"time": "2026-11-25T10:00:00Z"}});
        assert_eq!(run(without_binlog).base_snapshot(), None, "taken while binary logging was off");
        let mut deleting = run(serde_json::json!({"phase": "Succeeded", "snapshot": snapshot}));
        deleting.metadata.deletion_timestamp = Some(Time("2026-11-25T11:00:00Z".parse().unwrap()));
        assert!(!deleting.is_kept_success());
        assert_eq!(deleting.base_snapshot(), None);
    }

    fn succeeded_run(drill: Option<Drill>, status: serde_json::Value) -> MySQLBackup {
        let mut run = MySQLBackup::new("r", MySQLBackupSpec { drill, ..on_demand() });
        let mut base = serde_json::json!({"phase": "Succeeded", "completionTime": "2026-11-25T10:00:00Z"});
        base.as_object_mut().unwrap().extend(status.as_object().unwrap().clone());
        run.status = Some(serde_json::from_value(base).unwrap());
        run
    }

    #[test]
    fn a_drill_is_due_once_per_request() {
        let completed: jiff::Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
        let after_each = succeeded_run(Some(Drill::default()), serde_json::json!({}));
        assert_eq!(after_each.drill_due(), Some(completed));
        let mut physical = after_each.clone();
        physical.spec.method = Some(BackupMethod::Physical);
        assert_eq!(physical.drill_due(), Some(completed), "a physical run is drilled as a logical one");
        let answered = serde_json::json!({"drill": {"phase": "Running", "requestedAt": "2026-11-25T10:00:00Z"}});
        assert_eq!(succeeded_run(Some(Drill::default()), answered.clone()).drill_due(), None);

        let on_cron = Drill { cron: Some("0 4 * * *".into()), ..Drill::default() };
        assert_eq!(succeeded_run(Some(on_cron), serde_json::json!({})).drill_due(), None, "waits for its cron");
        assert_eq!(succeeded_run(None, serde_json::json!({})).drill_due(), None, "no drill asked for");

        let mut by_hand = succeeded_run(None, answered);
        by_hand.metadata.annotations =
            Some([(DRILL_REQUESTED_AT.to_string(), "2026-11-26T08:00:00.123456789Z".to_string())].into());
        assert_eq!(by_hand.drill_due(), Some("2026-11-26T08:00:00Z".parse().unwrap()), "a newer request");
        // Answered: the status keeps the request to the second, which must not make it new again.
        let answered_by_hand =
            serde_json::json!({"drill": {"phase": "Succeeded", "requestedAt": "2026-11-26T08:00:00Z"}});
        let mut by_hand = succeeded_run(None, answered_by_hand);
        by_hand.metadata.annotations =
            Some([(DRILL_REQUESTED_AT.to_string(), "2026-11-26T08:00:00.123456789Z".to_string())].into());
        assert_eq!(by_hand.drill_due(), None, "answered to the second");

        let off = Drill { enabled: Some(false), ..Drill::default() };
        assert_eq!(succeeded_run(Some(off), serde_json::json!({})).drill_due(), None);
        let mut failed = succeeded_run(Some(Drill::default()), serde_json::json!({}));
        failed.status.as_mut().unwrap().phase = Some(BackupPhase::Failed);
        assert_eq!(failed.drill_due(), None, "only a successful run is drilled");
    }

    #[test]
    fn a_run_whose_drill_found_a_defect_is_no_base() {
        let snapshot = serde_json::json!({"time": "2026-11-25T10:00:00Z", "binlogFile": "binlog.000002",
            "binlogPosition": 330});
        let defect = serde_json::json!({"snapshot": snapshot, "drill": {"phase": "Failed",
            "requestedAt": "2026-11-25T10:00:00Z", "reason": "BackupDefect"}});
        let run = succeeded_run(None, defect);
        assert!(run.failed_drill() && !run.is_verified());
        assert_eq!(run.base_snapshot(), None);
        let lost = serde_json::json!({"snapshot": snapshot, "drill": {"phase": "Failed",
            "requestedAt": "2026-11-25T10:00:00Z", "reason": "DatabaseLost"}});
        assert!(succeeded_run(None, lost).base_snapshot().is_some(), "the drill's own trouble proves nothing");
        let passed = serde_json::json!({"verifiedTime": "2026-11-25T10:05:00Z",
            "drill": {"phase": "Succeeded", "requestedAt": "2026-11-25T10:00:00Z"}});
        assert!(succeeded_run(None, passed).is_verified());
        // A later drill that could not run keeps both verdicts.
        let redrilled = serde_json::json!({"verifiedTime": "2026-11-25T10:05:00Z",
            "drill": {"phase": "Failed", "requestedAt": "2026-11-25T11:00:00Z", "reason": "DeadlineExceeded"}});
        assert!(succeeded_run(None, redrilled).is_verified());
        let defect_then_lost = serde_json::json!({"snapshot": snapshot, "drillDefect": "file x has another SHA-256",
            "drill": {"phase": "Failed", "requestedAt": "2026-11-25T11:00:00Z", "reason": "DatabaseLost"}});
        let run = succeeded_run(None, defect_then_lost);
        assert!(run.failed_drill() && !run.is_verified() && run.base_snapshot().is_none());
    }

    #[test]
    fn drill_options_are_checked() {
        let drill = Drill {
            cron: Some("0 4 * *".into()),
            active_deadline_seconds: Some(10),
            max_unverified_age: Some("soon".into()),
            ..Drill::default()
        };
        let fields: Vec<String> = MySQLBackupSpec { drill: Some(drill.clone()), ..scheduled("0 3 * * *") }
            .validate()
            .unwrap_err()
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["spec.drill.cron", "spec.drill.activeDeadlineSeconds", "spec.drill.maxUnverifiedAge"]);
        let on_demand_cron = MySQLBackupSpec {
            drill: Some(Drill { cron: Some("0 4 * * *".into()), ..Drill::default() }),
            ..on_demand()
        };
        assert_eq!(on_demand_cron.validate().unwrap_err().first_field(), "spec.drill.cron");
        let zone_alone = Drill { time_zone: Some("Europe/Paris".into()), ..Drill::default() };
        let spec = MySQLBackupSpec { drill: Some(zone_alone), ..scheduled("0 3 * * *") };
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.drill.timeZone");
        assert_eq!(MySQLBackupSpec { drill: Some(Drill::default()), ..on_demand() }.validate(), Ok(()));
        assert_eq!(Drill::default().max_unverified_age(), Duration::from_secs(48 * 3600));
    }

    #[test]
    fn on_demand_defaults() {
        let spec = on_demand();
        assert_eq!(spec.validate(), Ok(()));
        assert!(!spec.is_schedule());
        assert_eq!(spec.compression(), Compression::Zstd);
        assert_eq!(spec.parallelism(), 2);
    }

    #[test]
    fn accepts_standard_cron_and_zones() {
        let mut spec = scheduled("0 3 * * 1-5");
        spec.schedule.as_mut().unwrap().time_zone = Some("Europe/Paris".into());
        assert_eq!(spec.validate(), Ok(()));
    }

    #[test]
    fn rejects_six_field_cron_and_bad_zone() {
        let mut spec = scheduled("0 0 3 * * *");
        spec.schedule.as_mut().unwrap().time_zone = Some("Mars/Olympus".into());
        let fields: Vec<String> = spec.validate().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.schedule.cron", "spec.schedule.timeZone"]);
    }

    #[test]
    fn rejects_out_of_range_cron_fields() {
        let err = scheduled("61 3 * * *").validate().unwrap_err();
        assert_eq!(err.first_field(), "spec.schedule.cron");
    }

    #[test]
    fn max_age_counts_days_as_24_hours() {
        let retention = Retention { max_age: Some("30d".into()), ..Default::default() };
        assert_eq!(retention.max_age(), Ok(Some(Duration::from_secs(30 * 86400))));
        let retention = Retention { max_age: Some("720h".into()), ..Default::default() };
        assert_eq!(retention.max_age(), Ok(Some(Duration::from_secs(30 * 86400))));
        let bad = Retention { max_age: Some("a month".into()), keep_successful: Some(0), ..Default::default() };
        let mut spec = scheduled("0 3 * * *");
        spec.schedule.as_mut().unwrap().retention = Some(bad);
        let fields: Vec<String> = spec.validate().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.schedule.retention.keepSuccessful", "spec.schedule.retention.maxAge"]);
    }

    #[test]
    fn point_in_time_needs_a_schedule() {
        let pitr = Some(PointInTime::default());
        let spec = MySQLBackupSpec { point_in_time: pitr.clone(), ..on_demand() };
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.pointInTime");
        assert!(spec.archiving().is_none());
        let spec = MySQLBackupSpec { point_in_time: pitr, ..scheduled("0 3 * * *") };
        assert_eq!(spec.validate(), Ok(()));
        assert!(spec.archiving().is_some());
        let off = PointInTime { enabled: Some(false), ..PointInTime::default() };
        assert!(MySQLBackupSpec { point_in_time: Some(off), ..scheduled("0 3 * * *") }.archiving().is_none());
    }

    #[test]
    fn rejects_out_of_range_options() {
        let spec = MySQLBackupSpec { parallelism: Some(0), active_deadline_seconds: Some(5), ..on_demand() };
        let fields: Vec<String> = spec.validate().unwrap_err().0.into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["spec.parallelism", "spec.activeDeadlineSeconds"]);
    }
}
