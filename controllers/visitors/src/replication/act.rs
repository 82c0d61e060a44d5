//! Carries a decision out, in order: the SQL of its acts on their servers (as root; an act that
//! fails stops the rest, and the next look decides again from what is then there), then its acts
//! on pods and Jobs, then the role labels the client Service selects by, then what waits for the
//! labels (a demoted server's client sessions closed), then its notes as Events. Each act is a
//! span of the reconcile's trace.

use std::collections::BTreeMap;
use std::time::Duration;

use controller_common::agent_job::{DatabaseAccess, ServerTls};
use controller_common::apply::{create_unless_present, delete_if_present};
use controller_common::error::{ApiError, api_err};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};
use tracing::Instrument;
use visitors_api::labels::{Component, MYSQL_ROLE_LABEL, ROLE_PRIMARY, ROLE_REPLICA, names};
use visitors_api::visitors_app::MemberRole;

use super::backup_seed::{self, POSITION_ANNOTATION, RUN_ANNOTATION, VerifiedRun};
use super::model::{Act, Decision, Member, ReseedCause, server_of};
use super::observe::{DIVERGED_FILE_ANNOTATION, Look, extraction_job_name};
use super::server::Server;
use super::sql::{Flavor, Upstream};
use super::{Error, Scope};
use crate::build;
use crate::database::{Target, connect};

/// How long a promotion waits, within one look, for its replica to apply what it received.
pub const APPLY_WAIT_SECONDS: f64 = 2.0;
/// The longest one act's statements may take.
const ACT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the fence of a failover waits for a replica's receiver to stop before it goes on
/// without the answer: a MariaDB replica that stops receiving from an upstream that is gone can
/// hold its `STOP SLAVE IO_THREAD` for seconds (it tries to end its session there). The next
/// look reads whether the receiver runs: nothing is promoted while one does.
const STOP_RECEIVING_TIMEOUT: Duration = Duration::from_millis(1500);

/// An act on a server that failed: on which member, doing what, and the server's answer.
#[derive(Debug, thiserror::Error)]
#[error("{action} on MySQL server {member} failed: {problem}")]
pub struct ActError {
    pub member: String,
    pub action: &'static str,
    pub problem: String,
}

/// How to reach each member and what replication needs of it.
struct Access<'a> {
    /// Root's connection to each member, and each server as it answered.
    look: &'a Look,
    /// The replication account's password.
    replication_password: String,
    /// MySQL's TLS is on: replicas verify their source.
    tls: bool,
}

/// Carries `decision`, made at `look`, out.
pub async fn carry_out(scope: &Scope<'_>, look: &Look, decision: &Decision) -> Result<(), Error> {
    let access = Access { look, replication_password: replication_password(scope), tls: scope.tls.is_some() };
    if !run_sql(&decision.acts, &access).await? {
        return Ok(());
    }
    act_on_pods(scope, look, &decision.acts).await?;
    label_pods(scope, decision, &look.observed.members).await?;
    for failure in after_labels(&decision.acts, &access).await {
        tracing::warn!(member = %failure.member, action = failure.action, problem = %failure.problem, "replication");
    }
    for note in &decision.notes {
        tracing::info!(reason = note.reason, "{}", note.message);
        match note.warning {
            true => scope.runtime.events.warning(scope.app, note.reason, note.action, note.message.clone()).await,
            false => scope.runtime.events.normal(scope.app, note.reason, note.action, note.message.clone()).await,
        }
    }
    Ok(())
}

impl Access<'_> {
    fn server(&self, member: &str) -> Option<&Server> {
        server_of(&self.look.observed.members, member)
    }

    fn flavor(&self, member: &str) -> Flavor {
        self.server(member).map_or(Flavor::MariaDb, |server| server.flavor)
    }
}

/// The replication account's password: derived from root's, so that it needs no Secret of its
/// own and follows a new root password (docs/decisions.md).
pub fn replication_password(scope: &Scope<'_>) -> String {
    let mut digest = Sha256::new();
    digest.update(b"visitors-operator replication\0");
    digest.update(scope.credentials.root_password.as_bytes());
    digest.update(b"\0");
    digest.update(scope.app.uid().unwrap_or_default().as_bytes());
    hex::encode(&digest.finalize()[..16])
}

/// Runs the SQL of `acts` in order (not those that wait for the labels); whether every one is
/// done (a wait for a replica to apply may not be over yet: nothing after it runs). The fence of
/// a failover, every replica's receiver stopped, runs on all of them at once: its time is the
/// slowest server's, not their sum.
async fn run_sql(acts: &[Act], access: &Access<'_>) -> Result<bool, ActError> {
    let sql: Vec<&Act> = acts.iter().filter(|act| act.is_sql() && !act.after_labels()).collect();
    for group in sql.chunk_by(|a, b| matches!((a, b), (Act::StopReceiving(_), Act::StopReceiving(_)))) {
        let outcomes = futures::future::join_all(group.iter().map(|act| run_one(act, access))).await;
        for outcome in outcomes {
            if !outcome? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Runs one act's statements; whether it is done.
async fn run_one(act: &Act, access: &Access<'_>) -> Result<bool, ActError> {
    let (member, action) = describe(act);
    let failed = |problem: String| ActError { member: member.to_string(), action, problem };
    let statements = statements(act, access.flavor(member), access).map_err(failed)?;
    let target = access.look.targets.get(member).ok_or_else(|| failed("no address".into()))?;
    let span = tracing::info_span!("replication.act", member, action);
    let run = run(target, &statements, matches!(act, Act::WaitApplied { .. })).instrument(span);
    let stopping = matches!(act, Act::StopReceiving(_));
    let timeout = if stopping { STOP_RECEIVING_TIMEOUT } else { ACT_TIMEOUT };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(error)) => Err(failed(error.to_string())),
        Err(_) if stopping => {
            tracing::info!(member, "its receiver is still stopping: the next look reads whether it stopped");
            Ok(true)
        }
        Err(_) => Err(failed(format!("no answer within {} s", timeout.as_secs()))),
    }
}

/// Carries out the acts on pods and Jobs.
async fn act_on_pods(scope: &Scope<'_>, look: &Look, acts: &[Act]) -> Result<(), Error> {
    let events = &scope.runtime.events;
    for act in acts.iter().filter(|act| !act.is_sql()) {
        let (member, action) = describe(act);
        let span = tracing::info_span!("replication.act", member, action);
        let done = async {
            match act {
                Act::Restart(member) => {
                    delete_pod(scope, member).await?;
                    let note = format!(
                        "restarted MySQL server {member}: commits on it waited for an acknowledgement no replica will send; it holds transactions the primary lacks"
                    );
                    events.normal(scope.app, "Restarted", "Replication", note).await;
                }
                Act::Update(member) => {
                    delete_pod(scope, member).await?;
                    let note = format!("restarting MySQL server {member} on the StatefulSet's new pod template");
                    events.normal(scope.app, "Updating", "Replication", note).await;
                }
                Act::Extract { member, after, primary_set, first_log, errant } => {
                    extract(scope, member, after, primary_set, first_log, errant).await?;
                }
                Act::Reseed { member, cause } => {
                    set_seed_token(scope, member, Some(jiff::Timestamp::now().to_string())).await?;
                    delete_pod(scope, member).await?;
                    let why = match cause {
                        ReseedCause::Diverged => {
                            "the transactions it held that the primary lacks were copied to a file first"
                        }
                        ReseedCause::SourcePurged => {
                            "it could not catch up: the primary's binary logs it needed next were purged"
                        }
                    };
                    let note = format!("MySQL server {member} starts again empty and is seeded from the others; {why}");
                    events.normal(scope.app, "Reseeding", "Replication", note).await;
                }
                Act::SeedFromBackup { member, run } => {
                    let seeded = look.observed.members.iter().find(|m| &m.name == member);
                    if let (Some(seeded), Some(seed)) = (seeded, look.seed.as_ref().filter(|v| &v.seed.run == run)) {
                        load_backup_run(scope, seeded, seed).await?;
                    }
                }
                Act::ClearSeed(member) => set_seed_token(scope, member, None).await?,
                _ => {}
            }
            Ok::<(), Error>(())
        };
        done.instrument(span).await?;
    }
    Ok(())
}

async fn delete_pod(scope: &Scope<'_>, pod: &str) -> Result<(), Error> {
    Ok(delete_if_present(&scope.api::<Pod>(), "pod", pod).await?)
}

/// Writes (or, `None`, removes) pod `member`'s seeding token.
async fn set_seed_token(scope: &Scope<'_>, member: &str, token: Option<String>) -> Result<(), Error> {
    let name = build::seeding::seeds_config_map_name(scope.name);
    let api = scope.api::<ConfigMap>();
    let patch = serde_json::json!({"data": {member: token}});
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 && token.is_some() => {
            let mut config_map = ConfigMap {
                metadata: build::child_meta(scope.app, name.clone(), Component::Mysql),
                data: Some(BTreeMap::from([(member.to_string(), token.unwrap_or_default())])),
                ..ConfigMap::default()
            };
            config_map.metadata.namespace = Some(scope.namespace.to_string());
            api.create(&PostParams::default(), &config_map)
                .await
                .map(drop)
                .map_err(|source| ApiError { action: format!("creating ConfigMap {name}"), source }.into())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApiError { action: format!("writing ConfigMap {name}"), source }.into()),
    }
}

/// Starts the Job that copies `member`'s transactions the primary lacks to the app's claim of
/// diverged transactions, and tells the user which they are.
async fn extract(
    scope: &Scope<'_>,
    member: &str,
    after: &str,
    primary_set: &str,
    first_log: &str,
    errant: &[String],
) -> Result<(), Error> {
    let claim = build::seeding::diverged_claim(scope.app);
    controller_common::apply::apply(&scope.api::<PersistentVolumeClaim>(), &scope.runtime.field_manager, &claim)
        .await
        .map_err(api_err(format!("applying PersistentVolumeClaim {}", claim.name_any())))?;
    let job_name = extraction_job_name(member, errant);
    let file = format!("{member}-{}.sql", jiff::Timestamp::now().as_second());
    let host = names::mysql_pod_host(scope.name, member, scope.namespace);
    let extraction = build::seeding::Extraction {
        job: &job_name,
        host: &host,
        after,
        primary_set,
        first_log,
        file: &file,
        tls: scope.tls.map(|tls| tls.secret_name.as_str()),
    };
    let secret = build::secret::secret_name(scope.app);
    let mut job = build::seeding::extraction_job(scope.app, &secret, &extraction);
    job.metadata.annotations = Some(BTreeMap::from([(DIVERGED_FILE_ANNOTATION.to_string(), file.clone())]));
    let jobs = scope.api::<Job>();
    if !create_unless_present(&jobs, &scope.runtime.field_manager, &job, "Job").await? {
        return Ok(());
    }
    let note = format!(
        "MySQL server {member} holds transactions the primary lacks ({}): Job {job_name} copies them to PersistentVolumeClaim {}, file {file}; then the server is seeded again",
        errant.join(", "),
        claim.name_any()
    );
    scope.runtime.events.warning(scope.app, "DivergedTransactions", "Replication", note).await;
    Ok(())
}

/// Starts the Job that loads `verified` into `member`, and says so.
async fn load_backup_run(scope: &Scope<'_>, member: &Member, verified: &VerifiedRun) -> Result<(), Error> {
    let agent = scope.agent.ok_or_else(|| ActError {
        member: member.name.clone(),
        action: "loading a backup run into it",
        problem: "the controller has no agent image to run the load with (--agent-image or AGENT_IMAGE; the Helm chart sets it)".into(),
    })?;
    let VerifiedRun { run, location, seed } = verified;
    let access = DatabaseAccess {
        credentials_secret: build::secret::secret_name(scope.app),
        tls: match scope.tls {
            Some(tls) => ServerTls::Verified { ca_secret: tls.secret_name.clone(), check_name: true },
            None => ServerTls::Disabled,
        },
        servers: Default::default(),
    };
    let name = backup_seed::load_job_name(member);
    let load = build::seeding::BackupLoad { job: &name, host: &member.host, run, location };
    let mut job = build::seeding::backup_load_job(scope.app, &agent.inputs(), &access, &load);
    job.metadata.annotations = Some(BTreeMap::from([
        (RUN_ANNOTATION.to_string(), seed.run.clone()),
        (POSITION_ANNOTATION.to_string(), seed.position.to_string()),
    ]));
    if !create_unless_present(&scope.api::<Job>(), &scope.runtime.field_manager, &job, "Job").await? {
        return Ok(());
    }
    let note = format!(
        "MySQL server {} is seeded from backup run {} (taken at {}), as no server it could replicate from still has the binary logs since the beginning: Job {name} loads the run, then the server replicates from the primary what came after",
        member.name, seed.run, seed.position
    );
    scope.runtime.events.normal(scope.app, "SeedingFromBackup", "Replication", note).await;
    Ok(())
}

/// Puts the role each member now has on its pod, where the Services select.
async fn label_pods(scope: &Scope<'_>, decision: &Decision, members: &[Member]) -> Result<(), Error> {
    let pods = scope.api::<Pod>();
    for standing in &decision.standings {
        let wanted = match standing.role {
            MemberRole::Primary => Some(ROLE_PRIMARY),
            MemberRole::Replica => Some(ROLE_REPLICA),
            _ => None,
        };
        let Some(pod) = scope.pod(&standing.member) else { continue };
        if pod.labels().get(MYSQL_ROLE_LABEL).map(String::as_str) == wanted
            || !members.iter().any(|m| m.name == standing.member)
        {
            continue;
        }
        let patch = serde_json::json!({"metadata": {"labels": {MYSQL_ROLE_LABEL: wanted}}});
        match pods.patch_metadata(&standing.member, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                let action =
                    format!("labelling pod {} as {}", standing.member, wanted.unwrap_or("neither primary nor replica"));
                return Err(ApiError { action, source }.into());
            }
        }
    }
    Ok(())
}

/// Carries out the acts that wait until the pods' role labels moved: each demoted
/// server's client sessions closed. A server that does not answer is skipped (its sessions are
/// closed at the next look that reaches it, as long as it is told to).
async fn after_labels(acts: &[Act], access: &Access<'_>) -> Vec<ActError> {
    let mut failures = Vec::new();
    for act in acts.iter().filter(|act| act.after_labels()) {
        let (member, action) = describe(act);
        let Some(target) = access.look.targets.get(member) else { continue };
        let flavor = access.flavor(member);
        tracing::info!(member, action, "replication");
        let closing = tokio::time::timeout(ACT_TIMEOUT, disconnect_clients(target, flavor)).await;
        let timed_out = || format!("no answer within {} s", ACT_TIMEOUT.as_secs());
        match closing.map_err(|_| timed_out()).and_then(|closed| closed.map_err(|error| error.to_string())) {
            Ok(closed) => tracing::info!(member, closed, "closed client sessions"),
            Err(problem) => failures.push(ActError { member: member.to_string(), action, problem }),
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

fn statements(act: &Act, flavor: Flavor, access: &Access<'_>) -> Result<Vec<String>, String> {
    Ok(match act {
        Act::SetServerId { id, .. } => flavor.set_server_id(*id),
        Act::EnsureReplicationUser(_) => flavor.ensure_replication_user(&access.replication_password),
        Act::Fence(_) => flavor.fence(),
        Act::StopReceiving(_) => flavor.stop_receiving(),
        Act::WaitApplied { position, .. } => vec![flavor.wait_applied(position, APPLY_WAIT_SECONDS)],
        Act::Promote(_) => flavor.promote(),
        Act::ArmSemiSync(_) => flavor.arm_semi_sync(),
        Act::DisarmSemiSync(_) => flavor.disarm_semi_sync(),
        Act::OpenWrites(_) => flavor.open_writes(),
        Act::AdoptPosition { position, .. } => flavor.adopt_position(position),
        Act::DisconnectClients(_) => {
            return Err("closing client sessions is not a list of statements (see disconnect_clients)".into());
        }
        Act::Restart(_)
        | Act::Update(_)
        | Act::Extract { .. }
        | Act::Reseed { .. }
        | Act::SeedFromBackup { .. }
        | Act::ClearSeed(_) => Vec::new(),
        Act::Replicate { member, upstream } => {
            let host = access.look.targets.get(upstream).map(|t| t.host.clone()).ok_or("no address of the upstream")?;
            let ssl_ca = access.server(member).and_then(|server| server.ssl_ca.clone());
            if access.tls && ssl_ca.is_none() {
                return Err("the server serves no TLS CA file to verify its upstream with".into());
            }
            let upstream = Upstream {
                host: &host,
                port: visitors_api::visitors_app::MYSQL_PORT as u16,
                password: &access.replication_password,
                ssl_ca: ssl_ca.as_deref().filter(|_| access.tls),
            };
            flavor.replicate_from(&upstream)
        }
    })
}

/// The member an act acts on, and what it does, in words for logs and errors (never a
/// statement: some hold a password).
pub fn describe(act: &Act) -> (&str, &'static str) {
    match act {
        Act::SetServerId { member, .. } => (member, "setting the server id"),
        Act::EnsureReplicationUser(member) => (member, "creating the replication account"),
        Act::Fence(member) => (member, "fencing (read-only)"),
        Act::StopReceiving(member) => (member, "stopping replication's receiver"),
        Act::WaitApplied { member, .. } => (member, "waiting for the replica to apply what it received"),
        Act::Promote(member) => (member, "promoting"),
        Act::Replicate { member, .. } => (member, "pointing replication at the primary"),
        Act::ArmSemiSync(member) => (member, "arming semi-synchronous replication"),
        Act::DisarmSemiSync(member) => (member, "disarming semi-synchronous replication"),
        Act::OpenWrites(member) => (member, "opening writes"),
        Act::Restart(member) => (member, "restarting"),
        Act::Update(member) => (member, "restarting on the new pod template"),
        Act::Extract { member, .. } => (member, "copying its transactions the primary lacks"),
        Act::Reseed { member, .. } => (member, "starting it again empty"),
        Act::SeedFromBackup { member, .. } => (member, "loading a backup run into it"),
        Act::AdoptPosition { member, .. } => (member, "starting its binary log at the loaded backup's position"),
        Act::ClearSeed(member) => (member, "spending its seeding token"),
        Act::DisconnectClients(member) => (member, "closing its client sessions"),
    }
}
