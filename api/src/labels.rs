//! Names and labels of the objects the controllers derive from a resource. Every child name is
//! derived from its owner's name, so any number of apps can share a namespace.

use std::collections::BTreeMap;

use kube::core::{Expression, Selector};

/// The value of `app.kubernetes.io/part-of` on every child.
pub const PART_OF: &str = "visitors-site";
/// The value of `app.kubernetes.io/managed-by` on every child.
pub const MANAGED_BY: &str = "visitors-operator";
/// The name of the application, `app.kubernetes.io/name`.
pub const APP_NAME: &str = "visitors";
/// Label naming the VisitorsApp a child belongs to (kept from the book's operator).
pub const VISITORS_APP_LABEL: &str = "visitorssite_cr";
/// Label on a scheduled run naming the schedule that created it.
pub const SCHEDULE_LABEL: &str = "example.com/backup-schedule";
/// Label on backup runs and restores naming the VisitorsApp they act on.
pub const DATABASE_LABEL: &str = "example.com/visitors-app";
/// Label the VisitorsApp controller puts on each MySQL pod of a replicated app: its role
/// ([`ROLE_PRIMARY`] or [`ROLE_REPLICA`]); the client Service selects the primary, the replicas'
/// Service the replicas. A pod without it (a fenced or diverged server) takes no traffic.
pub const MYSQL_ROLE_LABEL: &str = "example.com/mysql-role";
pub const ROLE_PRIMARY: &str = "primary";
pub const ROLE_REPLICA: &str = "replica";
/// Label on the MySQL pods of a replicated app (from its pod template), which the VisitorsApp
/// controller watches.
pub const REPLICATED_LABEL: &str = "example.com/mysql-replicated";

/// Selects the MySQL pods of every replicated app.
pub fn replicated_mysql_pods() -> Selector {
    Selector::from_iter([(REPLICATED_LABEL, "true"), ("app.kubernetes.io/managed-by", MANAGED_BY)])
}

/// A tier of the Visitors Site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Mysql,
    Backend,
    Frontend,
    Backup,
    Restore,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Mysql => "mysql",
            Component::Backend => "backend",
            Component::Frontend => "frontend",
            Component::Backup => "backup",
            Component::Restore => "restore",
        }
    }
}

/// The standard labels of a child of `instance` (the owner's name) in tier `component`.
pub fn labels(instance: &str, component: Component) -> BTreeMap<String, String> {
    let mut labels = selector(instance, component);
    labels.insert("app.kubernetes.io/part-of".into(), PART_OF.into());
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGED_BY.into());
    labels.insert(VISITORS_APP_LABEL.into(), instance.into());
    labels
}

/// The labels of the objects of one operation (a backup run, a restore) on the database of app
/// `app`: the app's standard set in tier `component`, the database they act on
/// ([`DATABASE_LABEL`]), and `label` naming the operation.
pub fn operation_labels(app: &str, component: Component, label: &str, operation: &str) -> BTreeMap<String, String> {
    let mut all = labels(app, component);
    all.insert(DATABASE_LABEL.into(), app.into());
    all.insert(label.into(), operation.into());
    all
}

/// The labels that select the pods of one tier of one app; stable for a workload's life, as a
/// selector must be.
pub fn selector(instance: &str, component: Component) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), APP_NAME.to_string()),
        ("app.kubernetes.io/instance".to_string(), instance.to_string()),
        ("app.kubernetes.io/component".to_string(), component.as_str().to_string()),
    ])
}

/// Selects every child of every VisitorsApp, and nothing else.
pub fn children_selector() -> Selector {
    Selector::from_iter([("app.kubernetes.io/name", APP_NAME), ("app.kubernetes.io/managed-by", MANAGED_BY)])
}

/// Selects what the operator manages in tier `component`, of every app.
pub fn tier_selector(component: Component) -> Selector {
    Selector::from_iter([
        ("app.kubernetes.io/managed-by", MANAGED_BY),
        ("app.kubernetes.io/component", component.as_str()),
    ])
}

/// Selects the runs schedule `schedule` created.
pub fn runs_of_schedule(schedule: &str) -> Selector {
    Selector::from_iter([(SCHEDULE_LABEL.to_string(), schedule.to_string())])
}

/// Selects every run a schedule created.
pub fn scheduled_runs() -> Selector {
    Selector::from(Expression::Exists(SCHEDULE_LABEL.to_string()))
}

/// Names of the objects derived from one VisitorsApp.
pub mod names {
    /// The generated credentials Secret.
    pub fn credentials_secret(app: &str) -> String {
        format!("{app}-mysql-credentials")
    }
    /// The generated TLS Secret of MySQL's server certificate (`tls.crt`, `tls.key`, `ca.crt`).
    pub fn mysql_tls_secret(app: &str) -> String {
        format!("{app}-mysql-tls")
    }
    /// The generated CA Secret (`ca.crt`, `ca.key`) that signs [`mysql_tls_secret`].
    pub fn mysql_ca_secret(app: &str) -> String {
        format!("{app}-mysql-ca")
    }
    /// The MySQL StatefulSet, its client Service, and the base of its pods' names.
    pub fn mysql(app: &str) -> String {
        format!("{app}-mysql")
    }
    /// The headless Service that governs the MySQL StatefulSet.
    pub fn mysql_headless(app: &str) -> String {
        format!("{app}-mysql-headless")
    }
    /// The Service that leads to the replicas of a replicated MySQL, for reads.
    pub fn mysql_replicas(app: &str) -> String {
        format!("{app}-mysql-replicas")
    }
    /// MySQL pod `ordinal` of the StatefulSet.
    pub fn mysql_pod(app: &str, ordinal: i32) -> String {
        format!("{app}-mysql-{ordinal}")
    }
    /// The data claim of MySQL pod `pod` (the StatefulSet's `data` claim template): the
    /// server's data directory, which a physical backup's tool reads.
    pub fn mysql_data_claim(pod: &str) -> String {
        format!("data-{pod}")
    }
    /// The stable DNS name of MySQL pod `pod` of `app` in `namespace`, through the headless
    /// Service: how replicas reach their source and a backup reads a replica.
    pub fn mysql_pod_host(app: &str, pod: &str, namespace: &str) -> String {
        format!("{pod}.{}.{namespace}.svc", mysql_headless(app))
    }
    /// The backend Deployment and Service.
    pub fn backend(app: &str) -> String {
        format!("{app}-backend")
    }
    /// The frontend Deployment and Service.
    pub fn frontend(app: &str) -> String {
        format!("{app}-frontend")
    }
    /// The per-database Lease that serialises backups and restores of one app.
    pub fn database_lease(app: &str) -> String {
        format!("{app}-mysql-operations")
    }
    /// The Job that runs one backup.
    pub fn backup_job(backup: &str) -> String {
        format!("{backup}-backup")
    }
    /// The Job that runs one restore.
    pub fn restore_job(restore: &str) -> String {
        format!("{restore}-restore")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_extend_the_selector() {
        let all = labels("ex", Component::Backend);
        for (key, value) in selector("ex", Component::Backend) {
            assert_eq!(all.get(&key), Some(&value));
        }
        assert_eq!(all["app.kubernetes.io/managed-by"], MANAGED_BY);
        assert_eq!(all[VISITORS_APP_LABEL], "ex");
    }

    #[test]
    fn selectors_select_what_they_say() {
        assert_eq!(
            children_selector().to_string(),
            "app.kubernetes.io/managed-by=visitors-operator,app.kubernetes.io/name=visitors"
        );
        assert_eq!(
            tier_selector(Component::Backup).to_string(),
            "app.kubernetes.io/component=backup,app.kubernetes.io/managed-by=visitors-operator"
        );
        assert_eq!(runs_of_schedule("nightly").to_string(), "example.com/backup-schedule=nightly");
        assert_eq!(scheduled_runs().to_string(), "example.com/backup-schedule");
    }

    #[test]
    fn names_derive_from_the_app() {
        assert_eq!(names::mysql("ex"), "ex-mysql");
        assert_ne!(names::mysql("a"), names::mysql("b"));
    }
}
