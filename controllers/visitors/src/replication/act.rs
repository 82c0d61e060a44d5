//! Carries a decision out: each operation's statements on its server, in order, as root. An
//! operation that fails stops the rest (the next look decides again from what is then there);
//! a wait that is not over stops them too, without failing.

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::decide::Operation;
use super::sql::{Flavor, Source};
use crate::db::{Target, connect};

/// How long a promotion waits, within one look, for its replica to apply what it received.
pub const APPLY_WAIT_SECONDS: f64 = 2.0;
/// The longest one operation's statements may take.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach each member and what replication needs of it.
pub struct Access {
    /// Root's connection to each member, by name.
    pub targets: BTreeMap<String, Target>,
    /// Each member's family and the CA file it serves TLS with, as it answered.
    pub servers: BTreeMap<String, (Flavor, Option<String>)>,
    /// The replication account's password.
    pub replication_password: String,
    /// MySQL's TLS is on: replicas verify their source.
    pub tls: bool,
}

/// How the operations ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// A replica has not applied what it must yet: the rest waits for the next look.
    Waiting {
        member: String,
    },
}

/// An operation that failed: on which member, doing what, and the server's answer.
#[derive(Debug, thiserror::Error)]
#[error("{action} on MySQL server {member} failed: {problem}")]
pub struct ActError {
    pub member: String,
    pub action: &'static str,
    pub problem: String,
}

/// Runs the SQL of `operations` in order (those on pods and Jobs are the caller's, and those
/// that wait for the labels are [`act_after_labels`]').
pub async fn act(operations: &[Operation], access: &Access) -> Result<Outcome, ActError> {
    for operation in operations.iter().filter(|op| op.is_sql() && !op.after_labels()) {
        let (member, action) = describe(operation);
        let failed = |problem: String| ActError { member: member.to_string(), action, problem };
        let flavor = access.servers.get(member).map_or(Flavor::MariaDb, |(flavor, _)| *flavor);
        let statements = statements(operation, flavor, access).map_err(failed)?;
        let target = access.targets.get(member).ok_or_else(|| failed("no address".into()))?;
        tracing::info!(member, action, "replication");
        let run = run(target, &statements, matches!(operation, Operation::WaitApplied { .. }));
        match tokio::time::timeout(OPERATION_TIMEOUT, run).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ok(Outcome::Waiting { member: member.to_string() }),
            Ok(Err(error)) => return Err(failed(error.to_string())),
            Err(_) => return Err(failed(format!("no answer within {} s", OPERATION_TIMEOUT.as_secs()))),
        }
    }
    Ok(Outcome::Done)
}

/// Carries out the operations that wait until the pods' role labels moved: each demoted
/// server's client sessions closed. A server that does not answer is skipped (its sessions are
/// closed at the next look that reaches it, as long as it is told to).
pub async fn act_after_labels(operations: &[Operation], access: &Access) -> Vec<ActError> {
    let mut failures = Vec::new();
    for operation in operations.iter().filter(|op| op.after_labels()) {
        let (member, action) = describe(operation);
        let Some(target) = access.targets.get(member) else { continue };
        let flavor = access.servers.get(member).map_or(Flavor::MariaDb, |(flavor, _)| *flavor);
        tracing::info!(member, action, "replication");
        match tokio::time::timeout(OPERATION_TIMEOUT, disconnect_clients(target, flavor)).await {
            Ok(Ok(closed)) => tracing::info!(member, closed, "closed client sessions"),
            Ok(Err(error)) => {
                failures.push(ActError { member: member.to_string(), action, problem: error.to_string() })
            }
            Err(_) => failures.push(ActError {
                member: member.to_string(),
                action,
                problem: format!("no answer within {} s", OPERATION_TIMEOUT.as_secs()),
            }),
        }
    }
    failures
}

/// Closes every client session on the server but the operator's own (see
/// [`Flavor::client_sessions`]); how many it closed. A session that ended meanwhile is no error.
async fn disconnect_clients(target: &Target, flavor: Flavor) -> Result<usize, mysql_async::Error> {
    let mut conn = connect(target, None).await?;
    let sessions: Vec<u64> = conn.query(flavor.client_sessions()).await?;
    let mut closed = 0;
    for id in sessions {
        match conn.query_drop(format!("KILL CONNECTION {id}")).await {
            Ok(()) => closed += 1,
            Err(mysql_async::Error::Server(error)) if error.code == UNKNOWN_THREAD => {}
            Err(error) => return Err(error),
        }
    }
    let _ = conn.disconnect().await;
    Ok(closed)
}

/// MySQL's and MariaDB's answer to `KILL` of a session that is gone.
const UNKNOWN_THREAD: u16 = 1094;

/// Runs `statements` on one connection; a wait answers whether it is over (its query returns 0).
async fn run(target: &Target, statements: &[String], wait: bool) -> Result<bool, mysql_async::Error> {
    let mut conn = connect(target, None).await?;
    let mut over = true;
    for statement in statements {
        if wait {
            let answer: Option<i64> = conn.query_first(statement.as_str()).await?;
            over = answer == Some(0);
        } else {
            conn.query_drop(statement.as_str()).await?;
        }
    }
    let _ = conn.disconnect().await;
    Ok(over)
}

fn statements(operation: &Operation, flavor: Flavor, access: &Access) -> Result<Vec<String>, String> {
    Ok(match operation {
        Operation::SetServerId { id, .. } => flavor.set_server_id(*id),
        Operation::EnsureReplicationUser { .. } => flavor.ensure_replication_user(&access.replication_password),
        Operation::Fence { .. } => flavor.fence(),
        Operation::StopReceiving { .. } => flavor.stop_receiving(),
        Operation::WaitApplied { position, .. } => vec![flavor.wait_applied(position, APPLY_WAIT_SECONDS)],
        Operation::Promote { .. } => flavor.promote(),
        Operation::ArmSemiSync { .. } => flavor.arm_semi_sync(),
        Operation::DisarmSemiSync { .. } => flavor.disarm_semi_sync(),
        Operation::OpenWrites { .. } => flavor.open_writes(),
        Operation::AdoptPosition { position, .. } => flavor.adopt_position(position),
        Operation::DisconnectClients { .. } => {
            return Err("closing client sessions is not a list of statements (see disconnect_clients)".into());
        }
        Operation::Restart { .. }
        | Operation::Update { .. }
        | Operation::Extract { .. }
        | Operation::Reseed { .. }
        | Operation::SeedFromBackup { .. }
        | Operation::ClearSeed { .. } => Vec::new(),
        Operation::Replicate { member, source } => {
            let host = access.targets.get(source).map(|t| t.host.clone()).ok_or("no address of the source")?;
            let ssl_ca = access.servers.get(member).and_then(|(_, ca)| ca.clone());
            if access.tls && ssl_ca.is_none() {
                return Err("the server serves no TLS CA file to verify its source with".into());
            }
            let source = Source {
                host: &host,
                port: visitors_api::visitors_app::MYSQL_PORT as u16,
                password: &access.replication_password,
                ssl_ca: ssl_ca.as_deref().filter(|_| access.tls),
            };
            flavor.replicate_from(&source)
        }
    })
}

/// The member an operation acts on, and what it does, in words for logs and errors (never a
/// statement: some hold a password).
pub fn describe(operation: &Operation) -> (&str, &'static str) {
    match operation {
        Operation::SetServerId { member, .. } => (member, "setting the server id"),
        Operation::EnsureReplicationUser { member } => (member, "creating the replication account"),
        Operation::Fence { member } => (member, "fencing (read-only)"),
        Operation::StopReceiving { member } => (member, "stopping replication's receiver"),
        Operation::WaitApplied { member, .. } => (member, "waiting for the replica to apply what it received"),
        Operation::Promote { member } => (member, "promoting"),
        Operation::Replicate { member, .. } => (member, "pointing replication at the primary"),
        Operation::ArmSemiSync { member } => (member, "arming semi-synchronous replication"),
        Operation::DisarmSemiSync { member } => (member, "disarming semi-synchronous replication"),
        Operation::OpenWrites { member } => (member, "opening writes"),
        Operation::Restart { member } => (member, "restarting"),
        Operation::Update { member } => (member, "restarting on the new pod template"),
        Operation::Extract { member, .. } => (member, "copying its transactions the primary lacks"),
        Operation::Reseed { member, .. } => (member, "starting it again empty"),
        Operation::SeedFromBackup { member, .. } => (member, "loading a backup run into it"),
        Operation::AdoptPosition { member, .. } => (member, "starting its binary log at the loaded backup's position"),
        Operation::ClearSeed { member } => (member, "spending its seeding token"),
        Operation::DisconnectClients { member } => (member, "closing its client sessions"),
    }
}

impl Operation {
    /// The member this restarts on the new pod template, if it does.
    pub fn updated_member(&self) -> Option<&str> {
        match self {
            Operation::Update { member } => Some(member),
            _ => None,
        }
    }

    /// Whether it waits until the pods' role labels moved: closing a demoted server's client
    /// sessions before the client Service leads elsewhere would only bring them back to it.
    pub fn after_labels(&self) -> bool {
        matches!(self, Operation::DisconnectClients { .. })
    }

    /// Whether it runs SQL on its server (the others act on its pod or a Job).
    pub fn is_sql(&self) -> bool {
        !matches!(
            self,
            Operation::Restart { .. }
                | Operation::Update { .. }
                | Operation::Extract { .. }
                | Operation::Reseed { .. }
                | Operation::SeedFromBackup { .. }
                | Operation::ClearSeed { .. }
        )
    }
}
