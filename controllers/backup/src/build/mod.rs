//! Pure builders: a MySQLBackup in, the desired Kubernetes objects out. No client, no clock.

pub mod archiver;
pub mod drill;
pub mod job;
pub mod physical;
pub mod scheduled_run;

use std::collections::BTreeMap;

use kube::ResourceExt;
use visitors_api::MySQLBackup;
use visitors_api::labels::{Component, operation_labels};

/// Label on a backup Job naming the run it belongs to.
pub const RUN_LABEL: &str = "example.com/backup-run";

/// The labels of the objects of backup `backup`: the app's standard set in the `backup` tier,
/// the database they act on, and the run.
pub fn run_labels(backup: &MySQLBackup) -> BTreeMap<String, String> {
    operation_labels(&backup.spec.source.visitors_app, Component::Backup, RUN_LABEL, &backup.name_any())
}

/// The folder of one run inside the storage: `<namespace>/<app>/<run>`.
pub fn backup_path(backup: &MySQLBackup) -> String {
    format!("{}/{}/{}", backup.namespace().unwrap_or_default(), backup.spec.source.visitors_app, backup.name_any())
}

#[cfg(test)]
pub(crate) mod fixtures {
    use visitors_api::MySQLBackup;

    /// An on-demand run to a PVC, as read back from the API.
    pub fn run() -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1",
            "kind": "MySQLBackup",
            "metadata": {"name": "b1", "namespace": "shop", "uid": "u-1", "generation": 1},
            "spec": {
                "source": {"visitorsApp": "ex"},
                "storage": {"persistentVolumeClaim": {"claimName": "backups", "subPath": "mysql"}},
                "activeDeadlineSeconds": 900,
            },
        }))
        .unwrap()
    }

    /// The same run to S3 with a credentials Secret.
    pub fn s3_run() -> MySQLBackup {
        let mut run = run();
        run.spec.storage = serde_json::from_value(serde_json::json!({
            "s3": {
                "bucket": "backups", "prefix": "prod", "endpoint": "http://minio:9000", "forcePathStyle": true,
                "credentialsSecret": {"name": "s3-keys"},
            }
        }))
        .unwrap();
        run
    }
}
