//! Which MySQL server a backup run reads, decided from the app's servers as its status reports
//! them. Pure, and tested with a table of cases.
//!
//! A replica is read by its own stable name (`<pod>.<app>-mysql-headless.<namespace>.svc`, which
//! the app's certificate names), so the run reads the server it recorded; the primary through
//! the client Service, which leads to it.

use controller_common::agent_job::{MysqlServers, mysql_host};
use controller_common::step::Step;
use visitors_api::backup::{BackupFrom, ServerRole, TakenFrom};
use visitors_api::conditions::reason;
use visitors_api::labels::names;

/// A replica further behind the primary than this is not read: its snapshot would miss the
/// primary's last minutes.
pub const MAX_REPLICA_LAG_SECONDS: i64 = 120;

/// The server a run reads, and how its Job reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFrom {
    pub host: String,
    pub taken_from: TakenFrom,
}

/// The server `from` asks for among `servers` of app `app` in `namespace`.
pub fn choose(from: BackupFrom, app: &str, namespace: &str, servers: &MysqlServers) -> Step<ReadFrom> {
    let primary = || ReadFrom {
        host: mysql_host(app, namespace),
        taken_from: TakenFrom {
            pod: servers.primary.clone().unwrap_or_else(|| names::mysql_pod(app, 0)),
            role: ServerRole::Primary,
        },
    };
    if !servers.replicated() {
        return match from {
            BackupFrom::Replica => Step::wait(
                reason::WAITING_FOR_REPLICA,
                format!(
                    "VisitorsApp {app} runs one MySQL server (spec.mysql.replicas), and spec.source.from: Replica reads only a replica"
                ),
            ),
            BackupFrom::PreferReplica | BackupFrom::Primary => Step::Ready(primary()),
        };
    }
    if servers.primary.is_none() {
        let message = format!("VisitorsApp {app} has not chosen its primary MySQL server yet");
        return Step::wait(reason::WAITING_FOR_VISITORS_APP, message);
    }
    let replica = best_replica(servers).map(|pod| ReadFrom {
        host: names::mysql_pod_host(app, &pod, namespace),
        taken_from: TakenFrom { pod, role: ServerRole::Replica },
    });
    match (from, replica) {
        (BackupFrom::Primary, _) | (BackupFrom::PreferReplica, None) => Step::Ready(primary()),
        (BackupFrom::Replica | BackupFrom::PreferReplica, Some(replica)) => Step::Ready(replica),
        (BackupFrom::Replica, None) => Step::wait(
            reason::WAITING_FOR_REPLICA,
            format!(
                "no replica of VisitorsApp {app} replicates from its primary within {MAX_REPLICA_LAG_SECONDS} s of lag, and spec.source.from: Replica reads only a replica"
            ),
        ),
    }
}

/// The replica least behind the primary (lag unknown counts as the most), the highest ordinal
/// among equals: the last one a rolling update or a failover would pick.
fn best_replica(servers: &MysqlServers) -> Option<String> {
    servers
        .replicas
        .iter()
        .filter(|(_, lag)| lag.is_none_or(|lag| lag <= MAX_REPLICA_LAG_SECONDS))
        .min_by(|(a, lag_a), (b, lag_b)| {
            let key = |lag: &Option<i64>| lag.unwrap_or(i64::MAX);
            key(lag_a).cmp(&key(lag_b)).then_with(|| b.cmp(a))
        })
        .map(|(pod, _)| pod.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(wanted: i32, primary: Option<&str>, replicas: &[(&str, Option<i64>)]) -> MysqlServers {
        MysqlServers {
            wanted,
            primary: primary.map(Into::into),
            replicas: replicas.iter().map(|(pod, lag)| (pod.to_string(), *lag)).collect(),
            image: String::new(),
        }
    }

    /// The pod read and its role, or the reason of the wait.
    fn outcome(step: Step<ReadFrom>) -> Result<(String, ServerRole, String), &'static str> {
        match step {
            Step::Ready(read_from) => Ok((read_from.taken_from.pod, read_from.taken_from.role, read_from.host)),
            Step::Wait(wait) => Err(wait.reason),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_run_reads_a_healthy_replica_unless_told_otherwise() {
        use BackupFrom::{PreferReplica, Primary, Replica};
        use ServerRole as Role;
        let primary_host = "ex-mysql.shop.svc";
        let replica_host = |pod: &str| format!("{pod}.ex-mysql-headless.shop.svc");
        let single = servers(1, None, &[]);
        let three = servers(3, Some("ex-mysql-1"), &[("ex-mysql-0", Some(3)), ("ex-mysql-2", Some(0))]);
        let tied = servers(3, Some("ex-mysql-1"), &[("ex-mysql-0", Some(0)), ("ex-mysql-2", Some(0))]);
        let unknown_lag = servers(3, Some("ex-mysql-0"), &[("ex-mysql-1", None), ("ex-mysql-2", Some(5))]);
        let lagging = servers(3, Some("ex-mysql-0"), &[("ex-mysql-1", Some(MAX_REPLICA_LAG_SECONDS + 1))]);
        let no_replica = servers(3, Some("ex-mysql-0"), &[]);
        let no_primary = servers(3, None, &[("ex-mysql-1", Some(0))]);
        let ok = |pod: &str, role, host: String| Ok((pod.to_string(), role, host));
        let cases = [
            ("one server", PreferReplica, &single, ok("ex-mysql-0", Role::Primary, primary_host.into())),
            ("one server, primary", Primary, &single, ok("ex-mysql-0", Role::Primary, primary_host.into())),
            ("one server, replica required", Replica, &single, Err(reason::WAITING_FOR_REPLICA)),
            ("the least lag", PreferReplica, &three, ok("ex-mysql-2", Role::Replica, replica_host("ex-mysql-2"))),
            (
                "the highest ordinal among equals",
                Replica,
                &tied,
                ok("ex-mysql-2", Role::Replica, replica_host("ex-mysql-2")),
            ),
            (
                "unknown lag last",
                PreferReplica,
                &unknown_lag,
                ok("ex-mysql-2", Role::Replica, replica_host("ex-mysql-2")),
            ),
            ("primary asked", Primary, &three, ok("ex-mysql-1", Role::Primary, primary_host.into())),
            ("replica too far behind", PreferReplica, &lagging, ok("ex-mysql-0", Role::Primary, primary_host.into())),
            ("replica too far behind, required", Replica, &lagging, Err(reason::WAITING_FOR_REPLICA)),
            ("no replica", PreferReplica, &no_replica, ok("ex-mysql-0", Role::Primary, primary_host.into())),
            ("no replica, required", Replica, &no_replica, Err(reason::WAITING_FOR_REPLICA)),
            ("no primary yet", PreferReplica, &no_primary, Err(reason::WAITING_FOR_VISITORS_APP)),
        ];
        for (case, from, servers, expected) in cases {
            assert_eq!(outcome(choose(from, "ex", "shop", servers)), expected, "{case}");
        }
    }
}
