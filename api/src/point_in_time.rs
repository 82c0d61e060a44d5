//! Point-in-time recovery: a schedule's `spec.pointInTime` archives the app's binary log
//! continuously beside its runs, and a restore's `spec.source.pointInTime` brings a database
//! back to any second (or GTID) the archive covers: the newest successful run before the target,
//! then the archived transactions after it.

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::validation::{Problems, dns_subdomain};

/// Default of `spec.pointInTime.flushSeconds`.
pub const DEFAULT_FLUSH_SECONDS: i32 = 5;
/// Largest `spec.pointInTime.flushSeconds`.
pub const MAX_FLUSH_SECONDS: i32 = 300;
/// The archive's folder below a schedule's storage: `<namespace>/<app>/_binlog/<schedule>`. A
/// Kubernetes name cannot hold `_`, so no run's folder can be it.
pub const ARCHIVE_FOLDER: &str = "_binlog";

/// The folder of a schedule's archive inside its storage: `<namespace>/<app>/_binlog/<schedule>`.
pub fn archive_path(namespace: &str, app: &str, schedule: &str) -> String {
    format!("{namespace}/{app}/{ARCHIVE_FOLDER}/{schedule}")
}

/// Continuous archiving of the binary log of the schedule's app.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTime {
    /// Archiving runs while true (the default). False stops the archiver and keeps the
    /// archive; turned on again, it resumes after the last stored transaction (or records a gap
    /// if the server purged binary logs meanwhile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Store a segment at least this often while there are writes, in seconds: the most that
    /// a lost server can cost. Defaults to 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300))]
    pub flush_seconds: Option<i32>,
    /// CPU and memory requests and limits of the archiver. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

impl PointInTime {
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    pub fn flush_seconds(&self) -> i32 {
        self.flush_seconds.unwrap_or(DEFAULT_FLUSH_SECONDS)
    }

    pub(crate) fn validate(&self, problems: &mut Problems) {
        if let Some(seconds) = self.flush_seconds
            && !(1..=MAX_FLUSH_SECONDS).contains(&seconds)
        {
            problems.add(
                "spec.pointInTime.flushSeconds",
                format!("{seconds} is out of range: use 1 to {MAX_FLUSH_SECONDS} seconds"),
            );
        }
    }
}

/// A schedule's archive, as its archiver last reported it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTimeStatus {
    /// Where the archive is, for example `s3://bucket/prefix/ns/app/_binlog/nightly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Every transaction committed up to this time is archived: the newest target a restore
    /// can name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recoverable_time: Option<Time>,
    /// The GTID of the newest archived transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_recoverable_gtid: Option<String>,
    /// The oldest target a restore can name: the snapshot of the oldest successful run kept
    /// from which the archive continues without a gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_recoverable_time: Option<Time>,
    /// How far the archive is behind what the server committed, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_lag_seconds: Option<f64>,
    /// Segments and bytes in the archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<i64>,
    /// When the archiver last reported (it does every few seconds while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// The key id (of `spec.encryption`) the archiver encrypts new segments with; absent: it
    /// stores them unencrypted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
    /// Where continuity was lost, newest last: no restore replays across one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<ArchiveGap>,
}

/// A stretch of the server's history the archive does not hold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveGap {
    /// `BinlogPurged` or `ServerChanged`.
    pub reason: String,
    pub message: String,
    /// The newest archived transaction before the gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_time: Option<Time>,
    /// The first archived event after the gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_time: Option<Time>,
}

/// Where a run's snapshot is in the server's history: where a restore to a point in time
/// starts replaying the archive.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPosition {
    /// The server's clock at the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_position: Option<i64>,
    /// The GTID position (MariaDB) or executed set (MySQL) of the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

/// A restore to a point in time: from a schedule with `spec.pointInTime`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.targetTime) != has(self.targetGtid)").message("set exactly one of targetTime or targetGtid"))]
pub struct PointInTimeSource {
    /// Name of the `MySQLBackup` schedule, in this namespace, whose runs and binary log archive
    /// the restore reads.
    #[schemars(length(min = 1, max = 253))]
    pub backup: String,
    /// Restore every transaction committed at or before this time (RFC 3339, whole seconds,
    /// for example `2026-11-25T17:59:00Z`), and none after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_time: Option<Time>,
    /// Restore up to and including these transactions (a MariaDB GTID position such as
    /// `0-1-1042`, or a MySQL GTID set), and none after the first one outside them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub target_gtid: Option<String>,
}

impl PointInTimeSource {
    /// The target as the agent takes it and the status shows it.
    pub fn target_text(&self) -> String {
        match (&self.target_time, &self.target_gtid) {
            (Some(time), _) => time.0.to_string(),
            (None, Some(gtid)) => format!("gtid {gtid}"),
            (None, None) => String::new(),
        }
    }

    pub(crate) fn validate(&self, problems: &mut Problems) {
        problems.check("spec.source.pointInTime.backup", dns_subdomain(&self.backup));
        match (&self.target_time, &self.target_gtid) {
            (Some(_), Some(_)) | (None, None) => {
                problems.add("spec.source.pointInTime", "set exactly one of targetTime or targetGtid");
            }
            (Some(time), None) if time.0.subsec_nanosecond() != 0 => problems.add(
                "spec.source.pointInTime.targetTime",
                format!("{} has a fraction of a second: a target is to the second", time.0),
            ),
            (None, Some(gtid)) => {
                let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | ',' | '_' | ' ');
                if gtid.trim().is_empty() || !gtid.chars().all(allowed) {
                    problems.add(
                        "spec.source.pointInTime.targetGtid",
                        format!("{gtid:?} is not a GTID set (examples: 0-1-1042, <server uuid>:1-100)"),
                    );
                }
            }
            _ => {}
        }
    }
}

/// What a restore to a point in time replayed after its base backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTimeRestoreStatus {
    /// The target: a time (RFC 3339) or `gtid <set>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The snapshot of the base backup run (`status.backupName`) the replay started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_snapshot_time: Option<Time>,
    /// The newest replayed transaction: its commit time and GTID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_gtid: Option<String>,
    /// Transactions, binary log events and archive segments replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_applied: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_applied: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments_applied: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(time: Option<&str>, gtid: Option<&str>) -> PointInTimeSource {
        PointInTimeSource {
            backup: "nightly".into(),
            target_time: time.map(|t| Time(t.parse().unwrap())),
            target_gtid: gtid.map(Into::into),
        }
    }

    fn fields(source: &PointInTimeSource) -> Vec<String> {
        let mut problems = Problems::default();
        source.validate(&mut problems);
        problems.into_result().err().map(|e| e.0.into_iter().map(|e| e.field).collect()).unwrap_or_default()
    }

    #[test]
    fn a_target_is_one_whole_second_or_one_gtid_set() {
        assert!(fields(&source(Some("2026-11-25T17:59:00Z"), None)).is_empty());
        assert!(fields(&source(None, Some("0-1-1042"))).is_empty());
        assert_eq!(fields(&source(Some("2026-11-25T17:59:00.5Z"), None)), ["spec.source.pointInTime.targetTime"]);
        assert_eq!(fields(&source(None, None)), ["spec.source.pointInTime"]);
        assert_eq!(fields(&source(Some("2026-11-25T17:59:00Z"), Some("0-1-2"))), ["spec.source.pointInTime"]);
        assert_eq!(fields(&source(None, Some("0-1-2; DROP"))), ["spec.source.pointInTime.targetGtid"]);
        assert_eq!(source(Some("2026-11-25T17:59:00Z"), None).target_text(), "2026-11-25T17:59:00Z");
    }

    #[test]
    fn flush_seconds_are_bounded() {
        let mut problems = Problems::default();
        PointInTime { flush_seconds: Some(0), ..PointInTime::default() }.validate(&mut problems);
        assert_eq!(problems.into_result().unwrap_err().first_field(), "spec.pointInTime.flushSeconds");
        assert!(PointInTime::default().enabled());
        assert_eq!(PointInTime::default().flush_seconds(), 5);
    }
}
