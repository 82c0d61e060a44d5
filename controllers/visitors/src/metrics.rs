//! The VisitorsApp controller's own metrics, served with the shared ones at `/metrics`: how the
//! MySQL servers of each replicated app replicate, for the alerts. An app's series exist while
//! it is replicated, and go with it.

use controller_common::metrics::Metrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;

/// A gauge of a rate or a duration.
type FloatGauge = Gauge<f64, AtomicU64>;
use visitors_api::visitors_app::MemberRole;

use crate::replication::report::Report;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabels {
    pub namespace: String,
    pub visitors_app: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    namespace: String,
    visitors_app: String,
    pod: String,
}

#[derive(Default)]
pub struct ReplicationMetrics {
    wanted: Family<AppLabels, Gauge>,
    replicating: Family<AppLabels, Gauge>,
    acknowledged: Family<AppLabels, Gauge>,
    failovers: Family<AppLabels, Counter>,
    lag: Family<ServerLabels, Gauge>,
    commit_rate: Family<AppLabels, FloatGauge>,
    expected_failover_wait: Family<AppLabels, FloatGauge>,
    apply_rate: Family<ServerLabels, FloatGauge>,
    behind: Family<ServerLabels, Gauge>,
    falling_behind: Family<ServerLabels, Gauge>,
}

impl ReplicationMetrics {
    /// Adds these metrics to the controller's `/metrics`.
    pub fn register(&self, metrics: &Metrics) {
        metrics.register(
            "mysql_replicas_wanted",
            "Replicas a replicated VisitorsApp's primary should have (spec.mysql.replicas - 1)",
            self.wanted.clone(),
        );
        metrics.register(
            "mysql_replicas_replicating",
            "Replicas that replicate from a replicated VisitorsApp's primary now",
            self.replicating.clone(),
        );
        metrics.register(
            "mysql_writes_acknowledged",
            "1 while a replica acknowledges the commits of a replicated VisitorsApp's primary, 0 while none does (writes wait); absent under Asynchronous durability",
            self.acknowledged.clone(),
        );
        metrics.register(
            "mysql_failovers",
            "Failovers of a replicated VisitorsApp's primary seen by this controller",
            self.failovers.clone(),
        );
        metrics.register(
            "mysql_replication_lag_seconds",
            "How far a replica's applied transactions are behind its source",
            self.lag.clone(),
        );
        metrics.register(
            "mysql_commit_rate",
            "Transactions a replicated VisitorsApp's primary commits a second, over the last 30 s",
            self.commit_rate.clone(),
        );
        metrics.register(
            "mysql_expected_failover_wait_seconds",
            "Seconds a failover now would wait for its new primary to apply what it received (the backlog of the replica it would promote, at that replica's apply rate)",
            self.expected_failover_wait.clone(),
        );
        metrics.register(
            "mysql_replica_apply_rate",
            "Transactions a replica (or a server being seeded) applies a second, over the last 30 s",
            self.apply_rate.clone(),
        );
        metrics.register(
            "mysql_replica_behind_transactions",
            "Transactions the primary committed that a replica (or a server being seeded) has not applied",
            self.behind.clone(),
        );
        metrics.register(
            "mysql_replica_falling_behind",
            "1 while a replica has fallen further behind the primary for minutes (condition ReplicaFallingBehind), else 0",
            self.falling_behind.clone(),
        );
    }

    /// Records how the servers of app `app` stand after a look.
    pub fn observe(&self, app: &AppLabels, wanted: i32, report: &Report, acknowledgements_wanted: bool) {
        self.wanted.get_or_create(app).set(i64::from(wanted));
        self.replicating.get_or_create(app).set(i64::from(report.ready_replicas));
        match acknowledgements_wanted {
            true => {
                self.acknowledged.get_or_create(app).set(i64::from(report.acknowledged));
            }
            false => {
                self.acknowledged.remove(app);
            }
        }
        let failovers = self.failovers.get_or_create(app);
        if report.failover.is_some() {
            failovers.inc();
        }
        set_or_remove(&self.commit_rate, app, report.commit_rate);
        set_or_remove(&self.expected_failover_wait, app, report.expected_failover_wait);
        for member in &report.members {
            let server = ServerLabels {
                namespace: app.namespace.clone(),
                visitors_app: app.visitors_app.clone(),
                pod: member.name.clone(),
            };
            let following = matches!(member.role, MemberRole::Replica | MemberRole::Seeding);
            match (following, member.lag_seconds) {
                (true, Some(lag)) => {
                    self.lag.get_or_create(&server).set(lag);
                }
                _ => {
                    self.lag.remove(&server);
                }
            }
            set_or_remove(&self.apply_rate, &server, member.apply_rate.filter(|_| following));
            match member.behind_primary.filter(|_| following) {
                Some(behind) => {
                    self.behind.get_or_create(&server).set(behind);
                    self.falling_behind.get_or_create(&server).set(i64::from(member.falling_behind));
                }
                None => {
                    self.behind.remove(&server);
                    self.falling_behind.remove(&server);
                }
            }
        }
    }

    /// Forgets an app that is gone or no longer replicated, with its servers.
    pub fn forget(&self, app: &AppLabels, servers: i32) {
        self.wanted.remove(app);
        self.replicating.remove(app);
        self.acknowledged.remove(app);
        self.failovers.remove(app);
        self.commit_rate.remove(app);
        self.expected_failover_wait.remove(app);
        for ordinal in 0..servers.max(visitors_api::visitors_app::MAX_MYSQL_REPLICAS) {
            let server = ServerLabels {
                namespace: app.namespace.clone(),
                visitors_app: app.visitors_app.clone(),
                pod: visitors_api::labels::names::mysql_pod(&app.visitors_app, ordinal),
            };
            self.lag.remove(&server);
            self.apply_rate.remove(&server);
            self.behind.remove(&server);
            self.falling_behind.remove(&server);
        }
    }
}

/// Sets `labels`' series of `family` to `value`, or removes it when there is none.
fn set_or_remove<L>(family: &Family<L, FloatGauge>, labels: &L, value: Option<f64>)
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    match value {
        Some(value) => {
            family.get_or_create(labels).set(value);
        }
        None => {
            family.remove(labels);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use visitors_api::visitors_app::ReplicationMember;

    #[test]
    fn a_replicated_apps_series_follow_its_report_and_go_with_it() {
        let metrics = Metrics::new("visitors-controller");
        let replication = ReplicationMetrics::default();
        replication.register(&metrics);
        let app = AppLabels { namespace: "shop".into(), visitors_app: "ex".into() };
        let member = |name: &str, role, lag| ReplicationMember {
            name: name.into(),
            role,
            lag_seconds: lag,
            message: None,
            ..Default::default()
        };
        let report = Report {
            ready_replicas: 1,
            acknowledged: true,
            members: vec![
                member("ex-mysql-0", MemberRole::Primary, None),
                ReplicationMember {
                    apply_rate: Some(1520.5),
                    behind_primary: Some(40_000),
                    falling_behind: true,
                    ..member("ex-mysql-1", MemberRole::Replica, Some(3))
                },
            ],
            commit_rate: Some(1600.0),
            expected_failover_wait: Some(2.5),
            ..Report::default()
        };
        replication.observe(&app, 2, &report, true);
        let text = metrics.encode();
        assert!(
            text.contains(r#"visitors_operator_mysql_replicas_wanted{namespace="shop",visitors_app="ex"} 2"#),
            "{text}"
        );
        assert!(text.contains(r#"visitors_operator_mysql_replicas_replicating{namespace="shop",visitors_app="ex"} 1"#));
        assert!(text.contains(r#"visitors_operator_mysql_writes_acknowledged{namespace="shop",visitors_app="ex"} 1"#));
        assert!(text.contains(r#"visitors_operator_mysql_failovers_total{namespace="shop",visitors_app="ex"} 0"#));
        assert!(text.contains(
            r#"visitors_operator_mysql_replication_lag_seconds{namespace="shop",visitors_app="ex",pod="ex-mysql-1"} 3"#
        ));
        for series in [
            r#"visitors_operator_mysql_commit_rate{namespace="shop",visitors_app="ex"} 1600.0"#,
            r#"visitors_operator_mysql_expected_failover_wait_seconds{namespace="shop",visitors_app="ex"} 2.5"#,
            r#"visitors_operator_mysql_replica_apply_rate{namespace="shop",visitors_app="ex",pod="ex-mysql-1"} 1520.5"#,
            r#"visitors_operator_mysql_replica_behind_transactions{namespace="shop",visitors_app="ex",pod="ex-mysql-1"} 40000"#,
            r#"visitors_operator_mysql_replica_falling_behind{namespace="shop",visitors_app="ex",pod="ex-mysql-1"} 1"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        assert!(
            !text.contains(r#"apply_rate{namespace="shop",visitors_app="ex",pod="ex-mysql-0"}"#),
            "not of the primary"
        );
        replication.forget(&app, 2);
        assert!(!metrics.encode().contains(r#"visitors_app="ex""#), "gone with the app");
    }
}
