//! The VisitorsApp controller's own metrics, served with the shared ones at `/metrics`: how the
//! MySQL servers of each replicated app replicate, for the alerts. An app's series exist while
//! it is replicated, and go with it.

use controller_common::metrics::Metrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
        for member in &report.members {
            let server = ServerLabels {
                namespace: app.namespace.clone(),
                visitors_app: app.visitors_app.clone(),
                pod: member.name.clone(),
            };
            match (member.role, member.lag_seconds) {
                (MemberRole::Replica | MemberRole::Seeding, Some(lag)) => {
                    self.lag.get_or_create(&server).set(lag);
                }
                _ => {
                    self.lag.remove(&server);
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
        for ordinal in 0..servers.max(visitors_api::visitors_app::MAX_MYSQL_REPLICAS) {
            self.lag.remove(&ServerLabels {
                namespace: app.namespace.clone(),
                visitors_app: app.visitors_app.clone(),
                pod: visitors_api::labels::names::mysql_pod(&app.visitors_app, ordinal),
            });
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
        let member =
            |name: &str, role, lag| ReplicationMember { name: name.into(), role, lag_seconds: lag, message: None };
        let report = Report {
            ready_replicas: 1,
            acknowledged: true,
            members: vec![
                member("ex-mysql-0", MemberRole::Primary, None),
                member("ex-mysql-1", MemberRole::Replica, Some(3)),
            ],
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
        replication.forget(&app, 2);
        assert!(!metrics.encode().contains(r#"visitors_app="ex""#), "gone with the app");
    }
}
