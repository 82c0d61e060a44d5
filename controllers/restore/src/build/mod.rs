//! Pure builders: a MySQLRestore (and what was resolved for it) in, the restore Job out. No
//! client, no clock.

pub mod job;

use std::collections::BTreeMap;

use kube::ResourceExt;
use visitors_api::MySQLRestore;
use visitors_api::labels::{Component, operation_labels};
use visitors_api::storage::{BackupStorage, VOLUME_MOUNT};

/// Label on a restore Job naming the restore it belongs to.
pub const RESTORE_LABEL: &str = "example.com/restore";

/// The labels of a restore's Job: the app's standard set in the `restore` tier, the database it
/// acts on, and the restore.
pub fn restore_labels(restore: &MySQLRestore) -> BTreeMap<String, String> {
    operation_labels(&restore.spec.target.visitors_app, Component::Restore, RESTORE_LABEL, &restore.name_any())
}

/// The backup a restore reads, as resolved from its source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Backup {
    /// The storage (its S3 settings and Secret, or its claim) the Job reads from.
    pub storage: BackupStorage,
    /// The agent's `--from` location: `s3://...` or `file:///backup/...`.
    pub agent_location: String,
    /// The location for people and status: `s3://...` or `pvc://claim/...`.
    pub location: String,
    /// The run restored, when the source names one.
    pub run: Option<String>,
    /// The manifest's SHA-256 the run recorded; the agent refuses any other manifest.
    pub manifest_sha256: Option<String>,
    /// When the run completed.
    pub completion_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The tables and rows the run recorded, checked against the restore's.
    pub tables: Option<i64>,
    pub rows: Option<i64>,
    /// A restore to a point in time: the archive replayed after the run, up to the target.
    pub point_in_time: Option<PointInTimePlan>,
    /// The Secret of the keys an encrypted backup is decrypted with, mounted whole.
    pub key_secret: Option<String>,
}

/// The replay of a restore to a point in time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PointInTimePlan {
    /// The agent's `--binlog-archive`.
    pub archive: String,
    pub until_time: Option<String>,
    pub until_gtid: Option<String>,
    /// The target as status shows it.
    pub target: String,
    /// The base run's snapshot.
    pub base_snapshot_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The location for people of a recorded agent location on a claim: `pvc://claim/path`.
pub fn display_location(storage: &BackupStorage, agent_location: &str) -> String {
    match (&storage.persistent_volume_claim, agent_location.strip_prefix(&format!("file://{VOLUME_MOUNT}/"))) {
        (Some(pvc), Some(path)) => format!("pvc://{}/{path}", pvc.claim_name),
        _ => agent_location.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use visitors_api::MySQLRestore;

    /// A restore of run `b1` into app `ex`, as read back from the API.
    pub fn from_run() -> MySQLRestore {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1",
            "kind": "MySQLRestore",
            "metadata": {"name": "r1", "namespace": "shop", "uid": "r-1", "generation": 1},
            "spec": {"source": {"backup": "b1"}, "target": {"visitorsApp": "ex"}, "activeDeadlineSeconds": 900},
        }))
        .unwrap()
    }

    /// A restore of an explicit S3 location.
    pub fn from_s3() -> MySQLRestore {
        let mut restore = from_run();
        restore.spec.source = serde_json::from_value(serde_json::json!({
            "storage": {"s3": {"bucket": "backups", "prefix": "prod", "endpoint": "http://minio:9000",
                               "forcePathStyle": true, "credentialsSecret": {"name": "s3-keys"}}},
            "path": "shop/ex/b1",
        }))
        .unwrap();
        restore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc(sub_path: Option<&str>) -> BackupStorage {
        serde_json::from_value(
            serde_json::json!({"persistentVolumeClaim": {"claimName": "backups", "subPath": sub_path}}),
        )
        .unwrap()
    }

    #[test]
    fn explicit_locations_name_the_mounted_folder_or_the_bucket_key() {
        assert_eq!(pvc(Some("mysql/")).agent_location("shop/ex/b1"), "file:///backup/mysql/shop/ex/b1");
        assert_eq!(pvc(None).agent_location(""), "file:///backup/");
        let restore = fixtures::from_s3();
        let storage = restore.spec.source.storage.as_ref().unwrap();
        assert_eq!(storage.agent_location("shop/ex/b1"), "s3://backups/prod/shop/ex/b1");
    }

    #[test]
    fn a_recorded_location_on_a_claim_is_shown_with_the_claim() {
        assert_eq!(
            display_location(&pvc(Some("mysql")), "file:///backup/mysql/shop/ex/b1"),
            "pvc://backups/mysql/shop/ex/b1"
        );
    }
}
