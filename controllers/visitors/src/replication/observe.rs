//! One look at a replicated app's servers: every server as it answers SQL (read side by side,
//! each bounded by a short timeout: a server that does not answer in time is one that does not
//! answer), its pod as the cache has it, what setting a server aside and seeding it need of the
//! API, and the app's switchover annotations; all of it in one [`Observed`] for
//! [`super::decide`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use controller_common::agent_job::JobState;
use controller_common::error::api_err;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::ListParams;
use mysql_async::Row;
use mysql_async::prelude::Queryable;
use sha2::{Digest, Sha256};
use visitors_api::MySQLBackup;
use visitors_api::labels::names;
use visitors_api::visitors_app::{
    MYSQL_PORT, MemberRole, SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION,
};

use super::backup_seed::{self, VerifiedRun};
use super::model::{BackupSeed, Extraction, Member, Memory, Observed, PodState, server_of};
use super::server::{History, Position, Replication, Server};
use super::sql::Flavor;
use super::{Error, Scope};
use crate::build;
use crate::database::{Target, connect};

/// What one look found: what the decision reads, and what carrying it out needs besides (how to
/// reach each server, the run an empty server would be loaded from).
pub struct Look {
    pub observed: Observed,
    /// Root's connection to each member, by name.
    pub targets: BTreeMap<String, Target>,
    pub seed: Option<VerifiedRun>,
}

/// Looks at every server of `scope`'s app; `memory` says which is the primary now.
pub async fn look(scope: &Scope<'_>, memory: &Memory) -> Result<Look, Error> {
    let status = scope.app.status.as_ref().and_then(|s| s.replication.as_ref());
    let recorded_primary = status.and_then(|s| s.primary.clone());
    let primary = memory.primary.clone().or_else(|| recorded_primary.clone());
    let targets = targets(scope);
    let mut members = servers(scope, &targets).await;
    read_the_primary_last(primary.as_deref(), &targets, &mut members).await;
    set_aside_state(scope, primary.as_deref(), &mut members).await?;
    let seed = seeding_state(scope, &mut members).await?;
    let annotations = scope.app.annotations();
    let annotated_switchover = annotations
        .get(SWITCHOVER_REQUESTED_AT_ANNOTATION)
        .map(|request| (request.clone(), annotations.get(SWITCHOVER_TO_ANNOTATION).cloned()));
    // Before `answeredSwitchoverRequest` existed, the last switchover's request said it.
    let answered_request = status
        .and_then(|r| r.answered_switchover_request.clone().or_else(|| r.last_switchover.as_ref()?.request.clone()));
    let shown_diverged: BTreeSet<String> = status
        .iter()
        .flat_map(|s| &s.members)
        .filter(|m| m.role == MemberRole::Diverged)
        .map(|m| m.name.clone())
        .collect();
    let observed = Observed {
        members,
        recorded_primary,
        durability: scope.app.spec.durability(),
        annotated_switchover,
        answered_request,
        shown_diverged,
        seed_backup: seed.as_ref().map(|verified| verified.seed.clone()),
        at: Instant::now(),
        time: jiff::Timestamp::now(),
    };
    Ok(Look { observed, targets, seed })
}

/// Root's connection to each member, by its stable name.
fn targets(scope: &Scope<'_>) -> BTreeMap<String, Target> {
    (0..scope.app.spec.mysql_replicas())
        .map(|ordinal| {
            let pod = names::mysql_pod(scope.name, ordinal);
            let host = names::mysql_pod_host(scope.name, &pod, scope.namespace);
            let target = Target {
                host,
                port: MYSQL_PORT as u16,
                user: "root".into(),
                password: scope.credentials.root_password.clone(),
                ca_pem: scope.tls.map(|tls| tls.ca_pem.clone()),
            };
            (pod, target)
        })
        .collect()
}

/// Every member: its pod as the cache has it, its server as it answers now (all at once).
async fn servers(scope: &Scope<'_>, targets: &BTreeMap<String, Target>) -> Vec<Member> {
    let revision = scope.update_revision.as_deref();
    let reads = targets.iter().map(|(pod_name, target)| async move {
        let pod = scope.pod(pod_name);
        let state = pod_state(pod.as_deref());
        let server = match state {
            PodState::Missing => None,
            _ => read(target)
                .await
                .inspect_err(|why| tracing::debug!(member = %pod_name, %why, "MySQL server not answering"))
                .ok(),
        };
        Member {
            name: pod_name.clone(),
            host: target.host.clone(),
            pod: state,
            server,
            server_id: pod.as_deref().map_or(0, server_id),
            extraction: Extraction::NotStarted,
            reseeding: false,
            backup_seed: BackupSeed::NotStarted,
            outdated: pod.as_deref().is_some_and(|pod| runs_an_older_template(pod, revision)),
        }
    });
    futures::future::join_all(reads).await
}

/// Reads the primary again when a server seemed to hold transactions it lacks. The servers are
/// read side by side, and a replica read a moment after the primary has applied what the
/// primary committed since: at a thousand commits a second it would seem to hold transactions
/// the primary lacks, and be set aside as diverged. What a server holds beyond the primary read
/// after it is its own.
async fn read_the_primary_last(primary: Option<&str>, targets: &BTreeMap<String, Target>, members: &mut [Member]) {
    let Some(primary) = primary else { return };
    let reference = server_of(members, primary);
    let Some(reference) = reference else { return };
    let ahead = |m: &Member| {
        m.name != primary && m.server.as_ref().is_some_and(|s| !s.history.beyond(&reference.history).is_empty())
    };
    if !members.iter().any(ahead) {
        return;
    }
    let Some(target) = targets.get(primary) else { return };
    let again = read(target).await;
    if let Some(member) = members.iter_mut().find(|m| m.name == primary) {
        member.server = again.ok();
    }
}

/// What setting a server aside and seeding it again need of the API, read only when some server
/// is empty or holds transactions the primary lacks: the seeding tokens, and each diverged
/// server's extraction Job.
async fn set_aside_state(scope: &Scope<'_>, primary: Option<&str>, members: &mut [Member]) -> Result<(), Error> {
    let reference = primary.and_then(|p| server_of(members, p)).cloned();
    let errant: Vec<(usize, Vec<String>)> = members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| Some((i, m.server.as_ref()?.history.beyond(&reference.as_ref()?.history))))
        .filter(|(_, errant)| !errant.is_empty())
        .collect();
    let empty = members.iter().any(|m| m.server.as_ref().is_some_and(|s| s.position.is_empty()));
    if errant.is_empty() && !empty {
        return Ok(());
    }
    let seeds_name = build::seeding::seeds_config_map_name(scope.name);
    let seeds = scope
        .api::<ConfigMap>()
        .get_opt(&seeds_name)
        .await
        .map_err(api_err(format!("reading ConfigMap {seeds_name}")))?
        .and_then(|c| c.data)
        .unwrap_or_default();
    for member in members.iter_mut() {
        member.reseeding = seeds.contains_key(&member.name);
    }
    for (index, errant) in errant {
        let name = extraction_job_name(&members[index].name, &errant);
        let job = scope.api::<Job>().get_opt(&name).await.map_err(api_err(format!("reading Job {name}")))?;
        members[index].extraction = match job {
            None => Extraction::NotStarted,
            Some(job) => match controller_common::agent_job::job_state(&job) {
                JobState::Active => Extraction::Running,
                JobState::Complete => Extraction::Done(format!(
                    "PersistentVolumeClaim {}, file {}",
                    build::seeding::diverged_claim_name(scope.name),
                    job.annotations().get(DIVERGED_FILE_ANNOTATION).cloned().unwrap_or_default()
                )),
                JobState::Failed { reason, message } => Extraction::Failed(format!("Job {name}: {reason}: {message}")),
            },
        };
    }
    Ok(())
}

/// Annotation on an extraction Job naming the file it writes.
pub const DIVERGED_FILE_ANNOTATION: &str = "example.com/diverged-file";

/// One Job per diverged server and set of transactions: an extraction is done once.
pub fn extraction_job_name(pod: &str, errant: &[String]) -> String {
    let digest = Sha256::digest(errant.join(",").as_bytes());
    format!("{pod}-diverged-{}", &hex::encode(digest)[..8])
}

/// Fills in where the load of each empty member behind purged logs stands, and returns the run
/// to load when a member may need one: its source lacks the binary logs it needs next, and no
/// load of it runs. A loading member keeps its failed replication until the load ends, so the
/// API is read only while some member's source purged what it needs.
async fn seeding_state(scope: &Scope<'_>, members: &mut [Member]) -> Result<Option<VerifiedRun>, Error> {
    let behind_purged_logs =
        |m: &Member| m.server.as_ref().and_then(|s| s.replica.as_ref()).is_some_and(|r| r.upstream_purged());
    let jobs = scope.api::<Job>();
    for member in members.iter_mut().filter(|m| behind_purged_logs(m)) {
        if member.server.as_ref().is_some_and(|s| s.position.is_empty()) {
            let name = backup_seed::load_job_name(member);
            let job = jobs.get_opt(&name).await.map_err(api_err(format!("reading Job {name}")))?;
            member.backup_seed = backup_seed::load_state(job.as_ref());
        }
    }
    if !members.iter().any(|m| behind_purged_logs(m) && m.backup_seed == BackupSeed::NotStarted) {
        return Ok(None);
    }
    let runs = scope
        .api::<MySQLBackup>()
        .list(&ListParams::default())
        .await
        .map_err(api_err(format!("listing the MySQLBackups of namespace {}", scope.namespace)))?;
    Ok(backup_seed::newest_verified_run(scope.name, &runs.items))
}

fn pod_state(pod: Option<&Pod>) -> PodState {
    match pod {
        None => PodState::Missing,
        Some(pod) if pod.metadata.deletion_timestamp.is_some() => PodState::Deleting,
        Some(pod) if is_ready(pod) => PodState::Ready,
        Some(_) => PodState::NotReady,
    }
}

/// Whether a pod's `Ready` condition holds.
pub fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The server id of a pod's server: one per pod incarnation (its UID), never 1 (the id of a
/// single server). A data directory's history never meets its own id again under another
/// history, which replication would silently skip.
pub fn server_id(pod: &Pod) -> u32 {
    let digest = Sha256::digest(pod.uid().unwrap_or_default().as_bytes());
    let value = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    1000 + value % 4_000_000_000
}

/// Whether `pod` runs another template than the StatefulSet's `revision`.
pub fn runs_an_older_template(pod: &Pod, revision: Option<&str>) -> bool {
    let Some(revision) = revision else { return false };
    pod.labels().get(POD_REVISION_LABEL).is_some_and(|theirs| theirs != revision)
}

/// The label the StatefulSet controller gives each pod: its template's revision.
const POD_REVISION_LABEL: &str = "controller-revision-hash";

/// The longest one server's reading takes before it counts as not answering.
pub const READ_TIMEOUT: Duration = Duration::from_millis(1500);

/// Why a server could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("no answer within {} ms", READ_TIMEOUT.as_millis())]
    Timeout,
    #[error(transparent)]
    Sql(#[from] mysql_async::Error),
    #[error("unexpected answer: {0}")]
    Answer(String),
}

/// Server `target` as it answers now.
pub async fn read(target: &Target) -> Result<Server, ReadError> {
    tokio::time::timeout(READ_TIMEOUT, read_unbounded(target)).await.unwrap_or(Err(ReadError::Timeout))
}

async fn read_unbounded(target: &Target) -> Result<Server, ReadError> {
    let mut conn = connect(target, None).await?;
    let result = read_on(&mut conn).await;
    let _ = conn.disconnect().await;
    result
}

type StateRow = (u32, i64, Option<String>, Option<String>, i64, Option<String>, i64);

async fn read_on(conn: &mut mysql_async::Conn) -> Result<Server, ReadError> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let flavor = Flavor::of_version(&version.unwrap_or_default());
    let state: Option<StateRow> = conn.query_first(flavor.state_query()).await?;
    let (server_id, read_only, position, history, armed, ssl_ca, users) =
        state.ok_or_else(|| ReadError::Answer("the state query returned no row".into()))?;
    let replica_rows: Vec<Row> = conn.query(flavor.replica_status()).await?;
    let semi_sync: Vec<(String, String)> = conn.query(flavor.semi_sync_status()).await?;
    let count = |suffix: &str| {
        semi_sync
            .iter()
            .find(|(name, _)| name.to_ascii_lowercase().ends_with(suffix))
            .and_then(|(_, value)| value.parse::<u32>().ok())
            .unwrap_or(0)
    };
    let waiting = count("_wait_sessions");
    // Listing the binary logs waits behind a commit that waits for an acknowledgement.
    let first_binlog = match waiting {
        0 => {
            let logs: Vec<Row> = conn.query("SHOW BINARY LOGS").await?;
            logs.first().and_then(|row| row.get_opt::<String, usize>(0)).and_then(Result::ok)
        }
        _ => None,
    };
    Ok(Server {
        flavor,
        server_id,
        read_only: read_only != 0,
        position: Position::parse(position.as_deref().unwrap_or_default()).map_err(ReadError::Answer)?,
        history: History::parse(flavor, history.as_deref().unwrap_or_default()).map_err(ReadError::Answer)?,
        semi_sync_armed: armed != 0,
        semi_sync_clients: count("_clients"),
        semi_sync_waiting: waiting,
        ssl_ca: ssl_ca.filter(|ca| !ca.is_empty()),
        has_replication_user: users > 0,
        replica: replica_rows.first().map(|row| replication(flavor, row)).transpose()?,
        first_binlog,
    })
}

fn replication(flavor: Flavor, row: &Row) -> Result<Replication, ReadError> {
    let columns = flavor.replica_columns();
    let text =
        |column: &str| row.get_opt::<Option<String>, &str>(column).and_then(Result::ok).flatten().unwrap_or_default();
    let number = |column: &str| text(column).trim().parse::<u32>().unwrap_or(0);
    let mut received = Position::parse(&text(columns.received)).map_err(ReadError::Answer)?;
    if flavor == Flavor::MySql {
        received = received.union(&Position::parse(&text("Executed_Gtid_Set")).map_err(ReadError::Answer)?);
    }
    let io = text(columns.io_running);
    let error = [("Last_IO_Errno", "Last_IO_Error"), ("Last_SQL_Errno", "Last_SQL_Error")]
        .into_iter()
        .map(|(errno, message)| (number(errno), text(message)))
        .find(|(errno, _)| *errno != 0);
    Ok(Replication {
        upstream_host: text(columns.upstream_host),
        receiving: io == "Yes" || io == "Connecting",
        connected: io == "Yes",
        applying: text(columns.sql_running) == "Yes",
        received,
        lag_seconds: text(columns.lag).trim().parse().ok(),
        error,
    })
}
