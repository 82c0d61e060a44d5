//! Replication of a VisitorsApp's MySQL servers (`spec.mysql.replicas` of 2 or more), the step
//! of its reconcile that runs after the StatefulSet is applied: each look reads every server
//! ([`observe`]), decides what to do ([`decide`], pure) and does it ([`act`]); a decision that
//! fenced a server looks again at once, so a failover is done within one reconcile. [`sql`]
//! holds the statements of both server families, [`server`] what a server answered, [`memory`]
//! what the controller keeps between looks and [`report`] what a look tells the status. Then the
//! pods' role labels follow the decision: the client Service leads to the primary.

pub mod act;
pub mod backup_seed;
pub mod decide;
pub mod following;
pub mod memory;
pub mod observe;
pub mod report;
pub mod server;
pub mod sql;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use controller_common::agent_job::JobState;
use controller_common::error::{ApiError, api_err};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use sha2::{Digest, Sha256};
use visitors_api::VisitorsApp;
use visitors_api::labels::{Component, MYSQL_ROLE_LABEL, ROLE_PRIMARY, ROLE_REPLICA, names};
use visitors_api::visitors_app::{MYSQL_PORT, MemberRole};

use crate::build;
use crate::build::secret::Credentials;
use crate::build::tls::ServingTls;
use crate::context::{AppScope, Error};
use crate::db::Target;
use act::{Access, Outcome};
use decide::{
    BackupSeed, Change, ChangeKind, Cluster, Decision, Extraction, Member, Operation, PodState, Refusal, ReseedCause,
};
use memory::{
    apply_wait, forget_a_finished_update, note_applying, recently_demoted, remember_the_primary, requested, write_gap,
};
use report::{Report, changed, fill, refused};
use server::Server;

/// How often a replicated app's servers are looked at while all is well: a primary that stops
/// answering is failed over within two looks.
pub const LOOK_INTERVAL: Duration = Duration::from_secs(2);
/// How soon the next look comes while something is under way (a failover waits for a replica).
pub const BUSY_LOOK_INTERVAL: Duration = Duration::from_millis(500);
/// Looks within one reconcile, when a decision needs a fresh look (a fence, a receiver stopped).
const LOOKS_PER_RECONCILE: usize = 4;
/// A switchover whose target does not catch up within this is given up.
const SWITCHOVER_LIMIT: Duration = Duration::from_secs(30);
/// Looks at the servers of `scope`'s app and brings them where the decisions say.
pub async fn converge(
    scope: &AppScope<'_>,
    credentials: &Credentials,
    tls: Option<&ServingTls>,
) -> Result<Report, Error> {
    let app = scope.app;
    let status = app.status.as_ref().and_then(|s| s.replication.as_ref());
    let mut remembered = scope.ctx.replication.get(app);
    let mut primary = status.and_then(|s| s.primary.clone());
    let mut report = Report { primary: primary.clone(), ..Report::default() };
    let targets = targets(scope, credentials, tls);
    let mut last: Option<(Decision, Vec<Member>)> = None;
    let mut after_labels: Vec<Operation> = Vec::new();
    if remembered.switching.as_ref().is_some_and(|(_, since)| since.elapsed() > SWITCHOVER_LIMIT) {
        let (switching, _) = remembered.switching.take().expect("checked");
        let refusal = Refusal {
            asked_by: switching.reason,
            request: switching.request,
            to: switching.to,
            reason: decide::reason::TARGET_NOT_A_HEALTHY_REPLICA,
            message: format!(
                "the target did not apply the primary's transactions within {} s",
                SWITCHOVER_LIMIT.as_secs()
            ),
        };
        report.switched(refused(&primary, &refusal), refusal.asked_by);
    }
    for _ in 0..LOOKS_PER_RECONCILE {
        let mut members = look(scope, &targets).await;
        read_the_primary_last(primary.as_deref(), &targets, &mut members).await;
        set_aside_state(scope, primary.as_deref(), &mut members).await?;
        let seed = backup_seed::look(scope, &mut members).await?;
        remember_the_primary(&mut remembered, primary.as_deref(), &members);
        forget_a_finished_update(&mut remembered, &members);
        let cluster = Cluster {
            members: members.clone(),
            primary: primary.clone(),
            durability: app.spec.durability(),
            primary_silent: remembered.primary_silent,
            requested: requested(app, &remembered).filter(|_| report.switchover.is_none()),
            switching: remembered.switching.as_ref().map(|(s, _)| s.clone()),
            updating: remembered.updating.as_ref().map(|(member, _)| member.clone()),
            seed_backup: seed.as_ref().map(|verified| verified.seed.clone()),
            demoted: recently_demoted(&remembered),
        };
        let decision = decide::decide(&cluster);
        if let Some(change) = &decision.change
            && decision
                .operations
                .iter()
                .any(|op| matches!(op, Operation::WaitApplied { member, .. } if *member == change.to))
        {
            note_applying(&mut remembered, &change.to);
        }
        let access = access(&targets, &members, credentials, app, tls.is_some());
        let outcome = act::act(&decision.operations, &access).await.map_err(|e| Error::Replication {
            member: e.member,
            action: e.action,
            problem: e.problem,
        })?;
        let done = outcome == Outcome::Done;
        if done {
            act_on_pods(scope, &decision.operations, tls, &members, seed.as_ref()).await?;
            after_labels.extend(decision.operations.iter().filter(|op| op.after_labels()).cloned());
            announce_seeding(scope, &decision).await;
            if let Some(member) = decision.operations.iter().find_map(Operation::updated_member) {
                remembered.updating = Some((member.to_string(), Instant::now()));
            }
        }
        if let Some(refusal) = decision.refusal.as_ref().filter(|_| done) {
            report.switched(refused(&primary, refusal), refusal.asked_by);
            remembered.switching = None;
        }
        if done {
            if decision.switching.is_some() && remembered.switching.is_none() {
                remembered.switching = decision.switching.clone().map(|s| (s, Instant::now()));
            }
            if let Some(change) = &decision.change {
                let gap = write_gap(&remembered, change);
                let waited = apply_wait(&mut remembered, &change.to);
                let record = changed(change, gap, waited);
                announce(scope, change, gap, waited).await;
                match change.kind {
                    ChangeKind::Failover => report.failover = Some(record),
                    ChangeKind::Switchover => report.switched(record, change.reason),
                }
                remembered.switching = None;
                remembered.writable = Some((change.to.clone(), jiff::Timestamp::now()));
                remembered.demoted = change.from.clone().map(|from| (from, Instant::now()));
            }
            primary = decision.primary.clone();
        }
        // A server demoted moments ago is looked at soon again: a client that reconnected to it
        // through a name not yet moved on is sent on at the next look.
        report.busy =
            !done || decision.look_again || under_way(&decision.problem) || recently_demoted(&remembered).is_some();
        let again = done && decision.look_again;
        last = Some((decision, members));
        if !again {
            break;
        }
    }
    if let Some(refusal) = &report.switchover.as_ref().filter(|r| r.to.is_none()) {
        let note = refusal.message.clone().unwrap_or_default();
        scope.runtime().events.warning(app, "SwitchoverRefused", "Switchover", note).await;
    }
    if let Some((decision, _)) = &last {
        announce_divergence(scope, decision).await;
    }
    let Some((decision, members)) = last else {
        scope.ctx.replication.put(app, remembered);
        return Ok(report);
    };
    memory::sample(&mut remembered, primary.as_deref(), &members, clock());
    let followings: BTreeMap<String, following::Following> =
        remembered.samples.iter().map(|(name, samples)| (name.clone(), following::following(samples))).collect();
    scope.ctx.replication.put(app, remembered);
    label_pods(scope, &decision, &members).await?;
    let access = access(&targets, &members, credentials, app, tls.is_some());
    for failure in act::act_after_labels(&after_labels, &access).await {
        tracing::warn!(member = %failure.member, action = failure.action, problem = %failure.problem, "replication");
    }
    report.primary = primary;
    fill(&mut report, &decision, &members, &followings);
    Ok(report)
}

/// Seconds on a clock that only moves forward, for how the servers follow the primary.
fn clock() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Whether a problem means something under way that the next look may finish.
fn under_way(problem: &Option<(&'static str, String)>) -> bool {
    use decide::reason::{ELECTION_WAITS, FAILOVER_WAITS, PRIMARY_SILENT, PROMOTING};
    problem
        .as_ref()
        .is_some_and(|(reason, _)| [PROMOTING, FAILOVER_WAITS, ELECTION_WAITS, PRIMARY_SILENT].contains(reason))
}

/// Root's connection to each member, by its stable name.
fn targets(scope: &AppScope<'_>, credentials: &Credentials, tls: Option<&ServingTls>) -> BTreeMap<String, Target> {
    (0..scope.app.spec.mysql_replicas())
        .map(|ordinal| {
            let pod = names::mysql_pod(&scope.name, ordinal);
            let host = names::mysql_pod_host(&scope.name, &pod, &scope.namespace);
            let target = Target {
                host,
                port: MYSQL_PORT as u16,
                user: "root".into(),
                password: credentials.root_password.clone(),
                ca_pem: tls.map(|tls| tls.ca_pem.clone()),
            };
            (pod, target)
        })
        .collect()
}

/// Every member: its pod as the cache has it, its server as it answers now (all at once).
async fn look(scope: &AppScope<'_>, targets: &BTreeMap<String, Target>) -> Vec<Member> {
    let revision = update_revision(scope);
    let revision = revision.as_deref();
    let reads = targets.iter().map(|(pod_name, target)| async move {
        let pod = scope.cached(&scope.ctx.stores.pods, pod_name);
        let state = pod_state(pod.as_deref());
        let server = match state {
            PodState::Missing => None,
            _ => match observe::read(target).await {
                Ok(server) => Some(server),
                Err(why) => {
                    tracing::debug!(member = %pod_name, %why, "MySQL server not answering");
                    None
                }
            },
        };
        let server_id = pod.as_deref().map_or(0, server_id);
        Member {
            name: pod_name.clone(),
            host: target.host.clone(),
            pod: state,
            server,
            server_id,
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
    let reference = members.iter().find(|m| m.name == primary).and_then(|m| m.server.as_ref());
    let Some(reference) = reference else { return };
    if !members.iter().any(|m| {
        m.name != primary && m.server.as_ref().is_some_and(|s| !s.history.beyond(&reference.history).is_empty())
    }) {
        return;
    }
    let Some(target) = targets.get(primary) else { return };
    let again = observe::read(target).await;
    if let Some(member) = members.iter_mut().find(|m| m.name == primary) {
        member.server = again.ok();
    }
}

/// The pod template revision the StatefulSet's pods should run, once its controller has seen
/// the latest spec.
fn update_revision(scope: &AppScope<'_>) -> Option<String> {
    let sts = scope.cached(&scope.ctx.stores.statefulsets, &names::mysql(&scope.name))?;
    sts.mysql().update_revision.clone()
}

/// Whether `pod` runs another template than the StatefulSet's `revision`.
pub fn runs_an_older_template(pod: &Pod, revision: Option<&str>) -> bool {
    let Some(revision) = revision else { return false };
    pod.labels().get(POD_REVISION_LABEL).is_some_and(|theirs| theirs != revision)
}

/// The label the StatefulSet controller gives each pod: its template's revision.
const POD_REVISION_LABEL: &str = "controller-revision-hash";

/// What setting a server aside and seeding it again need of the API, read only when some server
/// is empty or holds transactions the primary lacks: the seeding tokens, and each diverged
/// server's extraction Job.
async fn set_aside_state(scope: &AppScope<'_>, primary: Option<&str>, members: &mut [Member]) -> Result<(), Error> {
    let reference = primary.and_then(|p| members.iter().find(|m| m.name == p)).and_then(|m| m.server.clone());
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
    let seeds_name = build::seeding::seeds_config_map_name(&scope.name);
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
                    build::seeding::diverged_claim_name(&scope.name),
                    job.annotations().get(DIVERGED_FILE_ANNOTATION).cloned().unwrap_or_default()
                )),
                JobState::Failed { reason, message } => Extraction::Failed(format!("Job {name}: {reason}: {message}")),
            },
        };
    }
    Ok(())
}

/// Annotation on an extraction Job naming the file it writes.
const DIVERGED_FILE_ANNOTATION: &str = "example.com/diverged-file";

/// One Job per diverged server and set of transactions: an extraction is done once.
fn extraction_job_name(pod: &str, errant: &[String]) -> String {
    let digest = Sha256::digest(errant.join(",").as_bytes());
    format!("{pod}-diverged-{}", &hex::encode(digest)[..8])
}

/// Carries out the operations on pods and Jobs of a decision whose SQL is done.
async fn act_on_pods(
    scope: &AppScope<'_>,
    operations: &[Operation],
    tls: Option<&ServingTls>,
    members: &[Member],
    seed: Option<&backup_seed::VerifiedRun>,
) -> Result<(), Error> {
    let events = &scope.runtime().events;
    for operation in operations.iter().filter(|op| !op.is_sql()) {
        let (member, action) = act::describe(operation);
        tracing::info!(member, action, "replication");
        match operation {
            Operation::Restart { member } => {
                delete_pod(scope, member).await?;
                let note = format!(
                    "restarted MySQL server {member}: commits on it waited for an acknowledgement no replica will send; it holds transactions the primary lacks"
                );
                events.normal(scope.app, "Restarted", "Replication", note).await;
            }
            Operation::Update { member } => {
                delete_pod(scope, member).await?;
                let note = format!("restarting MySQL server {member} on the StatefulSet's new pod template");
                events.normal(scope.app, "Updating", "Replication", note).await;
            }
            Operation::Extract { member, after, primary_set, first_log, errant } => {
                extract(scope, member, after, primary_set, first_log, errant, tls).await?;
            }
            Operation::Reseed { member, cause } => {
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
            Operation::SeedFromBackup { member, run } => {
                let seeded = members.iter().find(|m| &m.name == member);
                if let (Some(seeded), Some(seed)) = (seeded, seed.filter(|verified| &verified.seed.run == run)) {
                    backup_seed::start(scope, seeded, seed, tls).await?;
                }
            }
            Operation::ClearSeed { member } => set_seed_token(scope, member, None).await?,
            _ => {}
        }
    }
    Ok(())
}

async fn delete_pod(scope: &AppScope<'_>, pod: &str) -> Result<(), Error> {
    match scope.api::<Pod>().delete(pod, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApiError { action: format!("deleting pod {pod}"), source }.into()),
    }
}

/// Writes (or, `None`, removes) pod `member`'s seeding token.
async fn set_seed_token(scope: &AppScope<'_>, member: &str, token: Option<String>) -> Result<(), Error> {
    let name = build::seeding::seeds_config_map_name(&scope.name);
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
            config_map.metadata.namespace = Some(scope.namespace.clone());
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
    scope: &AppScope<'_>,
    member: &str,
    after: &str,
    primary_set: &str,
    first_log: &str,
    errant: &[String],
    tls: Option<&ServingTls>,
) -> Result<(), Error> {
    let claim = build::seeding::diverged_claim(scope.app);
    controller_common::apply::apply(&scope.api::<PersistentVolumeClaim>(), &scope.runtime().field_manager, &claim)
        .await
        .map_err(api_err(format!("applying PersistentVolumeClaim {}", claim.name_any())))?;
    let job_name = extraction_job_name(member, errant);
    let file = format!("{member}-{}.sql", jiff::Timestamp::now().as_second());
    let host = names::mysql_pod_host(&scope.name, member, &scope.namespace);
    let extraction = build::seeding::Extraction {
        job: &job_name,
        host: &host,
        after,
        primary_set,
        first_log,
        file: &file,
        tls: tls.map(|tls| tls.secret_name.as_str()),
    };
    let secret = build::secret::secret_name(scope.app);
    let mut job = build::seeding::extraction_job(scope.app, &secret, &extraction);
    job.metadata.annotations = Some(BTreeMap::from([(DIVERGED_FILE_ANNOTATION.to_string(), file.clone())]));
    let jobs = scope.api::<Job>();
    if !controller_common::apply::create_unless_present(&jobs, &scope.runtime().field_manager, &job, "Job").await? {
        return Ok(());
    }
    let note = format!(
        "MySQL server {member} holds transactions the primary lacks ({}): Job {job_name} copies them to PersistentVolumeClaim {}, file {file}; then the server is seeded again",
        errant.join(", "),
        claim.name_any()
    );
    scope.runtime().events.warning(scope.app, "DivergedTransactions", "Replication", note).await;
    Ok(())
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

/// The replication account's password: derived from root's, so that it needs no Secret of its
/// own and follows a new root password (docs/decisions.md).
pub fn replication_password(credentials: &Credentials, app: &VisitorsApp) -> String {
    let mut digest = Sha256::new();
    digest.update(b"visitors-operator replication\0");
    digest.update(credentials.root_password.as_bytes());
    digest.update(b"\0");
    digest.update(app.uid().unwrap_or_default().as_bytes());
    hex::encode(&digest.finalize()[..16])
}

fn access(
    targets: &BTreeMap<String, Target>,
    members: &[Member],
    credentials: &Credentials,
    app: &VisitorsApp,
    tls: bool,
) -> Access {
    let servers = members
        .iter()
        .filter_map(|m| m.server.as_ref().map(|s: &Server| (m.name.clone(), (s.flavor, s.ssl_ca.clone()))))
        .collect();
    Access { targets: targets.clone(), servers, replication_password: replication_password(credentials, app), tls }
}

async fn announce(scope: &AppScope<'_>, change: &Change, gap: Option<f64>, apply_wait: f64) {
    let from = change.from.as_deref().unwrap_or("none");
    let gap = gap.map(|g| format!("; writes paused about {g} s")).unwrap_or_default();
    let waited = match change.backlog {
        0 => String::new(),
        backlog => {
            format!(", of which {apply_wait:.1} s waited for it to apply {backlog} transactions it had received")
        }
    };
    let (reason, note) = match change.kind {
        ChangeKind::Failover => (
            "Failover",
            format!(
                "primary {from} is gone ({}); promoted {}{gap}{waited} ({})",
                change.reason, change.to, change.election
            ),
        ),
        ChangeKind::Switchover => {
            ("Switchover", format!("switched the primary over from {from} to {}{gap}{waited}", change.to))
        }
    };
    tracing::info!(%from, to = %change.to, reason = change.reason, "{}", note);
    scope.runtime().events.normal(scope.app, reason, "Replication", note).await;
}

/// Tells, once, of each server newly found holding transactions the primary lacks: it takes no
/// traffic and does not rejoin until they are dealt with (docs/high-availability.md).
async fn announce_divergence(scope: &AppScope<'_>, decision: &Decision) {
    let before = scope.app.status.as_ref().and_then(|s| s.replication.as_ref());
    let was_diverged =
        |name: &str| before.is_some_and(|b| b.members.iter().any(|m| m.name == name && m.role == MemberRole::Diverged));
    for standing in decision.standings.iter().filter(|s| s.role == MemberRole::Diverged && !was_diverged(&s.member)) {
        let note = format!("MySQL server {} {}", standing.member, standing.message.as_deref().unwrap_or_default());
        scope.runtime().events.warning(scope.app, "Diverged", "Replication", note).await;
    }
}

/// Names each server that starts replicating from a replica rather than from the primary: an
/// empty one being seeded, which reads nothing of the primary.
async fn announce_seeding(scope: &AppScope<'_>, decision: &Decision) {
    let Some(primary) = decision.primary.as_deref() else { return };
    for operation in &decision.operations {
        if let Operation::Replicate { member, source } = operation
            && source != primary
        {
            let note = format!("MySQL server {member} is seeded from replica {source}, not from the primary {primary}");
            scope.runtime().events.normal(scope.app, "Seeding", "Replication", note).await;
        }
    }
}

/// Puts the role each member now has on its pod, where the Services select.
async fn label_pods(scope: &AppScope<'_>, decision: &Decision, members: &[Member]) -> Result<(), Error> {
    let pods = scope.api::<Pod>();
    for standing in &decision.standings {
        let wanted = match standing.role {
            MemberRole::Primary => Some(ROLE_PRIMARY),
            MemberRole::Replica => Some(ROLE_REPLICA),
            _ => None,
        };
        let Some(pod) = scope.cached(&scope.ctx.stores.pods, &standing.member) else { continue };
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
                return Err(controller_common::error::ApiError { action, source }.into());
            }
        }
    }
    Ok(())
}
