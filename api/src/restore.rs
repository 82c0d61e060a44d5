//! `MySQLRestore`: restores a backup into a VisitorsApp's database, in place and safely: the
//! backup is verified before the database is touched, writers are stopped while it runs, and
//! the result is checked against the backup's manifest.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::{validate_deadline, validate_parallelism};
use crate::point_in_time::{PointInTimeRestoreStatus, PointInTimeSource};
use crate::storage::{BackupStorage, relative_path};
use crate::validation::{InvalidSpec, Problems, dns_subdomain};

/// A restore of a backup into a VisitorsApp's database.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "MySQLRestore",
    plural = "mysqlrestores",
    shortname = "mrestore",
    category = "visitors",
    namespaced,
    status = "MySQLRestoreStatus",
    derive = "PartialEq",
    doc = "A restore of a MySQLBackup run, or of a backup at an explicit storage location, into a VisitorsApp's database.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.target.visitorsApp"),
    printcolumn(name = "Backup", type_ = "string", json_path = ".spec.source.backup"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Duration",
        type_ = "number",
        json_path = ".status.durationSeconds",
        description = "Wall time of the restore in seconds"
    ),
    printcolumn(name = "Rows", type_ = "integer", json_path = ".status.rows", priority = 1),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".status.pointInTime.target",
        description = "A restore to a point in time: its target",
        priority = 1
    ),
    printcolumn(name = "Error", type_ = "string", json_path = ".status.error", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("a MySQLRestore cannot be changed once created; create a new one"))]
pub struct MySQLRestoreSpec {
    /// The backup to restore.
    pub source: RestoreSource,
    /// The database to restore into.
    pub target: RestoreTarget,
    /// Stop the app's backend while the restore runs, so no client writes into a half-restored
    /// database, and start it again afterwards. Defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiesce: Option<bool>,
    /// After loading, check every table's row count against the backup's manifest; a mismatch
    /// fails the restore. Defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
    /// Number of parallel load connections. Defaults to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub parallelism: Option<i32>,
    /// Deadline of the restore, in seconds. Defaults to 21600 (six hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub active_deadline_seconds: Option<i64>,
}

/// The backup to restore: a `MySQLBackup` run by name, an explicit storage location, or a point
/// in time of a schedule with `pointInTime`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.backup) ? 1 : 0) + (has(self.storage) ? 1 : 0) + (has(self.pointInTime) ? 1 : 0) == 1").message("set exactly one of backup, storage or pointInTime"))]
#[x_kube(validation = Rule::new("!has(self.path) || has(self.storage)").message("path goes with storage"))]
pub struct RestoreSource {
    /// Name of a successful `MySQLBackup` run in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Storage that holds the backup (same shape as a MySQLBackup's storage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<BackupStorage>,
    /// Folder of the backup (the one holding `manifest.json`), relative to the storage's
    /// prefix or sub path. Unset means the prefix or sub path itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A point in time of a schedule with `spec.pointInTime`: its newest successful run before
    /// the target, then the archived transactions up to the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTimeSource>,
    /// Secret in this namespace holding the keys of an encrypted backup (entries named by key
    /// id, values age identities). Defaults to the `spec.encryption.keySecret` of the backup's
    /// MySQLBackup (for `backup` and `pointInTime`); needed with `storage` when the backup
    /// there is encrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key_secret: Option<String>,
}

/// The database a restore writes into.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreTarget {
    /// Name of the VisitorsApp, in this namespace, whose database is restored.
    #[schemars(length(min = 1, max = 253))]
    pub visitors_app: String,
}

/// Condition types of a restore besides `Ready`.
pub mod condition {
    /// True while the restore waits before its Job (for its backup, its app, the lock).
    pub use crate::conditions::PENDING;
    /// True once the app's backend is stopped for the restore.
    pub const QUIESCED: &str = "Quiesced";
    /// True when the spec changed after the restore ended: the change did nothing.
    pub const SPEC_IGNORED: &str = "SpecChangeIgnored";
}

/// Reasons of a restore's conditions besides those every operation has
/// ([`crate::conditions::reason`]).
pub mod reason {
    // Which backup the restore reads.
    pub const BACKUP_NOT_FOUND: &str = "BackupNotFound";
    pub const BACKUP_IS_SCHEDULE: &str = "BackupIsSchedule";
    pub const BACKUP_FAILED: &str = "BackupFailed";
    /// The run's newest restore drill proved it does not restore what was dumped.
    pub const BACKUP_FAILED_DRILL: &str = "BackupFailedDrill";
    pub const BACKUP_NOT_FINISHED: &str = "BackupNotFinished";
    pub const BACKUP_LOCATION_UNKNOWN: &str = "BackupLocationUnknown";
    pub const BACKUP_UNVERIFIABLE: &str = "BackupUnverifiable";
    /// The run is physical: restoring physical runs is not built yet.
    pub const BACKUP_IS_PHYSICAL: &str = "BackupIsPhysical";
    /// The agent's summary does not match what the backup run recorded.
    pub const VERIFY_MISMATCH: &str = "VerifyMismatch";
    /// `Pending` False: the restore holds the database lock and quiesces the app.
    pub const DATABASE_LOCKED: &str = "DatabaseLocked";
    /// `Quiesced` False while the backend stops.
    pub const STOPPING: &str = "Stopping";
    /// `Quiesced` True.
    pub const BACKEND_STOPPED: &str = "BackendStopped";
    /// `Quiesced` False once the restore ended.
    pub const RELEASED: &str = "Released";
    /// `Ready` False while the backend stops.
    pub const QUIESCING: &str = "Quiescing";
    /// `Ready` False while the staged copy is checked and swapped in.
    pub const VERIFYING: &str = "Verifying";
    /// `SpecChangeIgnored` True.
    pub const RESTORE_ENDED: &str = "RestoreEnded";

    // A restore to a point in time, refused before anything is touched.
    /// The named MySQLBackup is a run, not a schedule.
    pub const BACKUP_NOT_SCHEDULE: &str = "BackupNotSchedule";
    /// The schedule does not archive its binary log (`spec.pointInTime`).
    pub const POINT_IN_TIME_NOT_ENABLED: &str = "PointInTimeNotEnabled";
    /// The target is later than now.
    pub const TARGET_IN_THE_FUTURE: &str = "TargetInTheFuture";
    /// No successful run of the schedule is older than the target.
    pub const TARGET_BEFORE_OLDEST_BACKUP: &str = "TargetBeforeOldestBackup";
    /// The target is later than the archive's last recoverable time.
    pub const TARGET_NOT_ARCHIVED: &str = "TargetNotArchived";
    /// Reaching the target from any base backup would cross a gap in the archive.
    pub const ACROSS_ARCHIVE_GAP: &str = "AcrossArchiveGap";
    /// `Pending`: the target is in the past but the archive has not reached it yet.
    pub const WAITING_FOR_ARCHIVE: &str = "WaitingForArchive";
}

/// The lifecycle phase of a restore.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestorePhase {
    Pending,
    Quiescing,
    Running,
    Verifying,
    Succeeded,
    Failed,
}

/// The observed state of a restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MySQLRestoreStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `Pending`, `Quiescing`, `Running`, `Verifying`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RestorePhase>,
    /// The Job that runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// When the restore started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the restore succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Wall time of the restore in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// The `MySQLBackup` run restored, when the source names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// When the restored backup run completed (the point in time the database is back at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_completion_time: Option<Time>,
    /// Where the restored backup was read from, for example `s3://bucket/prefix/ns/app/run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
    /// SHA-256 of the restored backup's manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    /// Number of tables restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<i64>,
    /// Number of rows restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    /// A restore to a point in time: the target and what was replayed after the base run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTimeRestoreStatus>,
    /// Why the restore failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl MySQLRestore {
    /// Whether this restore keeps its app's backend stopped now: it asks to quiesce and holds
    /// the database (from `Quiescing` until it ends). A restore that still waits for its
    /// backup or for the database lock does not stop the app. A restore being deleted keeps it
    /// stopped until it is gone: its finalizer holds it until the agent's pod has stopped, so
    /// that the backend never writes while an agent may still swap tables in.
    pub fn quiesces_app(&self) -> bool {
        let holding = matches!(
            self.status.as_ref().and_then(|s| s.phase),
            Some(RestorePhase::Quiescing | RestorePhase::Running | RestorePhase::Verifying)
        );
        self.spec.quiesce() && holding
    }
}

impl MySQLRestoreSpec {
    pub fn quiesce(&self) -> bool {
        self.quiesce.unwrap_or(true)
    }

    pub fn verify(&self) -> bool {
        self.verify.unwrap_or(true)
    }

    pub fn parallelism(&self) -> i32 {
        self.parallelism.unwrap_or(crate::backup::DEFAULT_PARALLELISM)
    }

    pub fn active_deadline_seconds(&self) -> i64 {
        self.active_deadline_seconds.unwrap_or(crate::backup::DEFAULT_ACTIVE_DEADLINE_SECONDS)
    }

    pub fn validate(&self) -> Result<(), InvalidSpec> {
        let mut problems = Problems::default();
        let source = &self.source;
        match (&source.backup, &source.storage, &source.point_in_time) {
            (Some(backup), None, None) => problems.check("spec.source.backup", dns_subdomain(backup)),
            (None, Some(storage), None) => storage.validate("spec.source.storage", &mut problems),
            (None, None, Some(point_in_time)) => point_in_time.validate(&mut problems),
            _ => problems.add("spec.source", "set exactly one of backup, storage or pointInTime"),
        }
        if let Some(path) = &source.path {
            if source.storage.is_none() {
                problems.add("spec.source.path", "path goes with storage; a backup run knows its own location");
            }
            problems.check("spec.source.path", relative_path(path));
        }
        if let Some(secret) = &source.key_secret {
            problems.check("spec.source.keySecret", dns_subdomain(secret));
        }
        problems.check("spec.target.visitorsApp", dns_subdomain(&self.target.visitors_app));
        validate_parallelism("spec.parallelism", self.parallelism, &mut problems);
        validate_deadline("spec.activeDeadlineSeconds", self.active_deadline_seconds, &mut problems);
        problems.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_backup(name: &str) -> MySQLRestoreSpec {
        MySQLRestoreSpec {
            source: RestoreSource { backup: Some(name.into()), ..RestoreSource::default() },
            target: RestoreTarget { visitors_app: "ex".into() },
            quiesce: None,
            verify: None,
            parallelism: None,
            active_deadline_seconds: None,
        }
    }

    #[test]
    fn safe_defaults() {
        let spec = from_backup("nightly-1");
        assert_eq!(spec.validate(), Ok(()));
        assert!(spec.quiesce());
        assert!(spec.verify());
    }

    #[test]
    fn source_needs_exactly_one_kind() {
        let mut spec = from_backup("nightly-1");
        spec.source.storage = Some(BackupStorage::default());
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.source");
    }

    #[test]
    fn only_a_restore_holding_the_database_quiesces_its_app() {
        let mut restore = MySQLRestore::new("r1", from_backup("nightly-1"));
        let with_phase = |restore: &mut MySQLRestore, phase| {
            restore.status = Some(MySQLRestoreStatus { phase: Some(phase), ..Default::default() });
        };
        assert!(!restore.quiesces_app(), "no phase yet");
        for (phase, quiesces) in [
            (RestorePhase::Pending, false),
            (RestorePhase::Quiescing, true),
            (RestorePhase::Running, true),
            (RestorePhase::Verifying, true),
            (RestorePhase::Succeeded, false),
            (RestorePhase::Failed, false),
        ] {
            with_phase(&mut restore, phase);
            assert_eq!(restore.quiesces_app(), quiesces, "{phase:?}");
        }
        with_phase(&mut restore, RestorePhase::Running);
        restore.spec.quiesce = Some(false);
        assert!(!restore.quiesces_app(), "quiesce: false");
        restore.spec.quiesce = None;
        restore.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::from_second(1_800_000_000).unwrap()));
        assert!(restore.quiesces_app(), "being deleted: until it is gone");
    }

    #[test]
    fn a_point_in_time_is_a_third_kind_of_source() {
        let mut spec = from_backup("nightly-1");
        spec.source = RestoreSource {
            point_in_time: Some(PointInTimeSource {
                backup: "nightly".into(),
                target_time: Some(Time("2026-11-25T17:59:00Z".parse().unwrap())),
                target_gtid: None,
            }),
            ..RestoreSource::default()
        };
        assert_eq!(spec.validate(), Ok(()));
        spec.source.backup = Some("nightly-1".into());
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.source");
    }

    #[test]
    fn path_needs_storage() {
        let mut spec = from_backup("nightly-1");
        spec.source.path = Some("ns/app/run".into());
        assert_eq!(spec.validate().unwrap_err().first_field(), "spec.source.path");
    }
}
