//! The restore controller's own metric, served with the shared ones at `/metrics`: whether
//! each ended restore failed, for an alert. A restore is a record kept until it is deleted, so
//! its gauge is too; a restarted controller sets it again when it reconciles the restore.

use controller_common::metrics::Metrics;
use kube::ResourceExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use visitors_api::MySQLRestore;
use visitors_api::restore::{MySQLRestoreStatus, RestorePhase};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    pub namespace: String,
    pub restore: String,
}

impl RestoreLabels {
    pub fn of(restore: &MySQLRestore, namespace: &str) -> Self {
        RestoreLabels { namespace: namespace.to_string(), restore: restore.name_any() }
    }
}

#[derive(Default)]
pub struct RestoreMetrics {
    failed: Family<RestoreLabels, Gauge>,
}

impl RestoreMetrics {
    /// Adds these metrics to the controller's `/metrics`.
    pub fn register(&self, metrics: &Metrics) {
        metrics.register(
            "restore_failed",
            "1 for a MySQLRestore that ended Failed, 0 for one that succeeded, until it is deleted",
            self.failed.clone(),
        );
    }

    /// Records the end of a restore, when `status` says it has ended.
    pub fn observe(&self, restore: RestoreLabels, status: Option<&MySQLRestoreStatus>) {
        match status.and_then(|s| s.phase) {
            Some(RestorePhase::Failed) => self.failed.get_or_create(&restore).set(1),
            Some(RestorePhase::Succeeded) => self.failed.get_or_create(&restore).set(0),
            _ => return,
        };
    }

    /// Forgets a deleted restore.
    pub fn deleted(&self, restore: &RestoreLabels) {
        self.failed.remove(restore);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: RestorePhase) -> MySQLRestoreStatus {
        MySQLRestoreStatus { phase: Some(phase), ..Default::default() }
    }

    #[test]
    fn an_ended_restore_exports_whether_it_failed_until_it_is_deleted() {
        let shared = Metrics::new("restore-controller");
        let restores = RestoreMetrics::default();
        restores.register(&shared);
        let labels = |name: &str| RestoreLabels { namespace: "shop".into(), restore: name.into() };
        restores.observe(labels("broken"), Some(&status(RestorePhase::Failed)));
        restores.observe(labels("fine"), Some(&status(RestorePhase::Succeeded)));
        restores.observe(labels("busy"), Some(&status(RestorePhase::Running)));
        restores.observe(labels("new"), None);
        let text = shared.encode();
        assert!(text.contains(r#"visitors_operator_restore_failed{namespace="shop",restore="broken"} 1"#), "{text}");
        assert!(text.contains(r#"visitors_operator_restore_failed{namespace="shop",restore="fine"} 0"#), "{text}");
        assert!(!text.contains(r#"restore="busy""#) && !text.contains(r#"restore="new""#), "{text}");
        restores.deleted(&labels("broken"));
        assert!(!shared.encode().contains(r#"restore="broken""#));
    }
}
