//! The rules of a replicated app's servers: what to do with them, from what was observed and
//! remembered ([`Cluster`]). Pure and tested with tables of cases; [`super::decide`] applies
//! them at each look and [`super::act`] carries their acts out.
//!
//! The rules (docs/high-availability.md says them for users):
//! - One primary, recorded in the app's status; only it accepts writes. Every other server is
//!   fenced (read-only) and replicates from it, unless it holds transactions the primary lacks
//!   (it is then `Diverged`, and never rejoins as it is).
//! - A primary that is gone (pod deleted, not ready, or silent for two looks) is failed over:
//!   every replica stops receiving first (with semi-synchronous replication, the old primary can
//!   then commit nothing more), then the replica that received every transaction any other
//!   received is promoted, once it applied them. Only when every replica answers: one that does
//!   not may hold the last acknowledged commit.
//! - With no primary (a new app), or when the primary came back read-only (restarted), the
//!   primary is elected among all the servers, once every one answers: the one holding every
//!   transaction the others hold, the former primary first among equals.
//! - A switchover fences the primary, waits for the target to apply everything, then promotes
//!   it; it is refused unless the target is a healthy replica.
//! - An empty server replicates the history from a replica; when no server still has the
//!   binary logs since the beginning, it is loaded from the newest verified backup run, then
//!   replicates from the primary what came after. A replica the primary's purged logs left
//!   behind starts again empty when such a run is newer than what it holds.
//! - A new pod template (image, options, certificate) reaches the servers one at a time, only
//!   while all is well: the replicas first, then a switchover to an updated replica, then the
//!   old primary, restarted as a replica.

use visitors_api::visitors_app::{Durability, MemberRole};

use super::model::{
    Act, BackupSeed, Change, ChangeKind, Cluster, Decision, Extraction, Member, PodState, ReseedCause, Standing,
    Switchover, UPDATE_REQUEST, reason, server_of,
};
use super::server::{Position, Server};
/// Looks in a row in which the primary's pod is ready but its server does not answer before it
/// counts as gone.
pub const SILENT_LOOKS: u32 = 2;
/// What to do with the servers of `cluster`.
pub fn servers(cluster: &Cluster) -> Decision {
    let mut decision = Decision { primary: cluster.primary.clone(), ..Decision::default() };
    housekeeping(cluster, &mut decision);
    let Some(primary) = cluster.primary.as_deref() else {
        elect(cluster, None, &mut decision);
        return decision;
    };
    match health(cluster, primary) {
        Health::Writable => match (&cluster.switching, &cluster.requested) {
            (_, Some(request)) => start_switchover(cluster, primary, request, &mut decision),
            _ => {
                steady(cluster, primary, &mut decision);
                roll(cluster, primary, &mut decision);
            }
        },
        Health::ReadOnly => match &cluster.switching {
            Some(switching) => finish_switchover(cluster, primary, switching, &mut decision),
            None => elect(cluster, Some(primary), &mut decision),
        },
        Health::Gone(reason) => failover(cluster, primary, reason, &mut decision),
        Health::Silent => {
            let message = format!("primary {primary} does not answer; it is failed over if it still does not");
            decision.problem = Some((reason::PRIMARY_SILENT, message));
            decision.standings = cluster.members.iter().map(|m| standing(m, primary, m.name == primary)).collect();
        }
    }
    refuse_unanswerable_request(cluster, &mut decision);
    decision
}

enum Health {
    Writable,
    ReadOnly,
    Gone(&'static str),
    Silent,
}

fn health(cluster: &Cluster, primary: &str) -> Health {
    let Some(member) = member(cluster, primary) else { return Health::Gone(reason::POD_DELETED) };
    match (member.pod, &member.server) {
        (PodState::Missing | PodState::Deleting, _) => Health::Gone(reason::POD_DELETED),
        (PodState::NotReady, _) => Health::Gone(reason::POD_NOT_READY),
        (PodState::Ready, None) if cluster.primary_silent >= SILENT_LOOKS => Health::Gone(reason::NOT_ANSWERING),
        (PodState::Ready, None) => Health::Silent,
        (PodState::Ready, Some(server)) if server.read_only => Health::ReadOnly,
        (PodState::Ready, Some(_)) => Health::Writable,
    }
}

fn member<'a>(cluster: &'a Cluster, name: &str) -> Option<&'a Member> {
    cluster.members.iter().find(|m| m.name == name)
}

fn server<'a>(cluster: &'a Cluster, name: &str) -> Option<&'a Server> {
    server_of(&cluster.members, name)
}

/// What every answering server needs whatever else happens: its own server id, the
/// replication account.
fn housekeeping(cluster: &Cluster, decision: &mut Decision) {
    for member in &cluster.members {
        let Some(server) = &member.server else { continue };
        if server.server_id != member.server_id {
            decision.acts.push(Act::SetServerId { member: member.name.clone(), id: member.server_id });
        }
        if !server.has_replication_user {
            decision.acts.push(Act::EnsureReplicationUser(member.name.clone()));
        }
    }
}

/// The primary is writable: every other server replicates from it, and it waits for their
/// acknowledgements as the durability asks.
fn steady(cluster: &Cluster, primary: &str, decision: &mut Decision) {
    let Some(primary_server) = server(cluster, primary) else { return };
    let host = host_of(cluster, primary);
    let mut attached = 0;
    let mut cannot_seed = false;
    for member in cluster.members.iter().filter(|m| m.name != primary) {
        let Some(server) = &member.server else {
            decision.standings.push(standing(member, primary, false));
            continue;
        };
        let errant = server.history.beyond(&primary_server.history);
        if !errant.is_empty() {
            set_aside(member, server, primary_server, &errant, decision);
            continue;
        }
        if !server.read_only {
            decision.acts.push(Act::Fence(member.name.clone()));
        }
        if !server.read_only || cluster.demoted.as_deref() == Some(member.name.as_str()) {
            decision.acts.push(Act::DisconnectClients(member.name.clone()));
        }
        if member.reseeding && server.position.is_empty() {
            decision.acts.push(Act::ClearSeed(member.name.clone()));
        }
        if server.position.is_empty()
            && let Some(standing) = seed_from_backup(cluster, primary, member, server, decision)
        {
            cannot_seed |= standing.role == MemberRole::Unavailable;
            decision.standings.push(standing);
            continue;
        }
        let seed = seed_upstream(cluster, primary, member, server);
        match &server.replica {
            _ if server.replicates_from(&host) => {
                attached += 1;
                decision.standings.push(Standing::new(&member.name, MemberRole::Replica, None));
            }
            Some(replication)
                if seed.as_ref().is_some_and(|(_, seed_host)| &replication.upstream_host == seed_host)
                    && replication.error.is_none() =>
            {
                let from = seed.as_ref().map(|(name, _)| name.as_str()).unwrap_or_default();
                decision.standings.push(Standing::new(
                    &member.name,
                    MemberRole::Seeding,
                    format!("catching up from {from}"),
                ));
            }
            Some(replication) if replication.upstream_host == host && replication.upstream_purged() => {
                let standing = reseed_behind_purged_logs(cluster, primary, member, server, decision);
                cannot_seed |= standing.role == MemberRole::Unavailable;
                decision.standings.push(standing);
            }
            Some(replication) if replication.upstream_host == host && replication.error.is_some() => {
                let (number, text) = replication.error.clone().unwrap_or_default();
                let message = format!("replication from {primary} stopped: error {number}: {text}");
                decision.standings.push(Standing::new(&member.name, MemberRole::Unavailable, message));
            }
            _ => {
                let (upstream, _) = seed.unwrap_or_else(|| (primary.to_string(), host.clone()));
                decision.acts.push(Act::Replicate { member: member.name.clone(), upstream: upstream.clone() });
                let message = format!("starting to replicate from {upstream}");
                decision.standings.push(Standing::new(&member.name, MemberRole::Seeding, message));
            }
        }
    }
    let others = cluster.members.len() - 1;
    let pending = decision.acts.iter().filter(|op| matches!(op, Act::Replicate { .. })).count();
    let wants_acknowledgements = cluster.durability == Durability::Acknowledged;
    match (wants_acknowledgements, primary_server.semi_sync_armed) {
        (true, false) => decision.acts.push(Act::ArmSemiSync(primary.into())),
        (false, true) => decision.acts.push(Act::DisarmSemiSync(primary.into())),
        _ => {}
    }
    decision.standings.insert(0, Standing::new(primary, MemberRole::Primary, None));
    decision.problem = if wants_acknowledgements && primary_server.semi_sync_clients == 0 && pending == 0 {
        Some((
            reason::NO_ACKNOWLEDGING_REPLICA,
            format!("no replica acknowledges the commits of primary {primary}: writes wait until one does"),
        ))
    } else if attached < others {
        let missing: Vec<String> = decision
            .standings
            .iter()
            .filter(|s| s.role != MemberRole::Primary && s.role != MemberRole::Replica)
            .map(|s| format!("{} ({})", s.member, s.message.as_deref().unwrap_or("not replicating")))
            .collect();
        let reason = if decision.standings.iter().any(|s| s.role == MemberRole::Diverged) {
            reason::DIVERGED
        } else if cannot_seed {
            reason::CANNOT_SEED
        } else if decision.standings.iter().any(|s| s.role == MemberRole::Seeding) {
            reason::SEEDING
        } else {
            reason::REPLICA_NOT_REPLICATING
        };
        Some((reason, format!("{attached} of {others} replicas replicate from {primary}: {}", missing.join("; "))))
    } else {
        None
    };
}

/// Brings the next outdated server to the new pod template, while every server is healthy and
/// no other is being restarted: a replica (the highest ordinal first, as a StatefulSet would),
/// or, once every replica is updated, the primary is handed over by a switchover (it is then an
/// outdated replica, restarted next).
fn roll(cluster: &Cluster, primary: &str, decision: &mut Decision) {
    let all_ready = cluster.members.iter().all(|m| m.pod == PodState::Ready && m.server.is_some());
    if decision.problem.is_some() || !all_ready || cluster.updating.is_some() {
        return;
    }
    if let Some(replica) = cluster.members.iter().rev().find(|m| m.outdated && m.name != primary) {
        decision.acts.push(Act::Update(replica.name.clone()));
        let message = format!("restarting replica {} on the new pod template", replica.name);
        for standing in decision.standings.iter_mut().filter(|s| s.member == replica.name) {
            standing.message = Some("restarting on the new pod template".into());
        }
        decision.problem = Some((reason::UPDATING, message));
    } else if member(cluster, primary).is_some_and(|m| m.outdated) {
        let request = Switchover { request: UPDATE_REQUEST.into(), to: None, reason: reason::ROLLING_UPDATE };
        start_switchover(cluster, primary, &request, decision);
    }
}

/// Where a member that does not replicate from the primary yet starts from: an empty server
/// (new, or re-seeded) from a healthy replica, so that seeding reads nothing of the primary; it
/// moves to the primary once it has everything that replica has. `None`: from the primary.
fn seed_upstream(cluster: &Cluster, primary: &str, member: &Member, server: &Server) -> Option<(String, String)> {
    let primary_host = host_of(cluster, primary);
    let healthy =
        cluster.members.iter().filter(|m| m.name != member.name && m.name != primary && m.pod == PodState::Ready);
    let mut upstreams =
        healthy.filter_map(|m| m.server.as_ref().filter(|s| s.replicates_from(&primary_host)).map(|s| (m, s)));
    match &server.replica {
        // Seeding from a replica: until it has everything that replica has.
        Some(replication) if replication.upstream_host != primary_host => upstreams
            .find(|(m, _)| m.host == replication.upstream_host)
            .filter(|(_, upstream)| !server.position.includes(&upstream.position))
            .map(|(m, _)| (m.name.clone(), m.host.clone())),
        _ if server.position.is_empty() => upstreams.next().map(|(m, _)| (m.name.clone(), m.host.clone())),
        _ => None,
    }
}

/// How an empty member is seeded from the app's newest verified backup run, when the binary logs
/// of the server it replicates from no longer reach back to the beginning: the run is loaded
/// (out of its binary log), its binary log then starts at the run's position, and it replicates
/// from the primary what came after. `None`: replication seeds it (or tries first).
fn seed_from_backup(
    cluster: &Cluster,
    primary: &str,
    member: &Member,
    server: &Server,
    decision: &mut Decision,
) -> Option<Standing> {
    let name = member.name.clone();
    let stands = |role: MemberRole, message: String| Standing::new(&name, role, message);
    match &member.backup_seed {
        BackupSeed::Loaded { run, position } => {
            decision.acts.push(Act::AdoptPosition { member: name.clone(), position: position.clone() });
            decision.acts.push(Act::Replicate { member: name.clone(), upstream: primary.into() });
            let message = format!("loaded backup run {run}; replicating from {primary} what came after {position}");
            Some(stands(MemberRole::Seeding, message))
        }
        BackupSeed::Loading { run } => Some(stands(MemberRole::Seeding, format!("loading backup run {run}"))),
        BackupSeed::Failed(why) => {
            Some(stands(MemberRole::Unavailable, format!("loading a backup run to seed it failed: {why}")))
        }
        BackupSeed::NotStarted => {
            let replication = server.replica.as_ref().filter(|r| r.upstream_purged())?;
            let upstream = cluster
                .members
                .iter()
                .find(|m| m.host == replication.upstream_host)
                .map_or(replication.upstream_host.as_str(), |m| m.name.as_str());
            let purged = format!("the binary logs of {upstream} no longer reach back to the beginning");
            Some(match &cluster.seed_backup {
                Some(backup) => {
                    decision.acts.push(Act::SeedFromBackup { member: name.clone(), run: backup.run.clone() });
                    let message = format!(
                        "{purged}: loading backup run {}, taken at {}, then replicating from {primary}",
                        backup.run, backup.position
                    );
                    stands(MemberRole::Seeding, message)
                }
                None => stands(
                    MemberRole::Unavailable,
                    format!(
                        "cannot be seeded: {purged}, and the app has no verified backup run to load instead (a MySQLBackup run of this app that succeeded, passed its restore drill and recorded its GTID position)"
                    ),
                ),
            })
        }
    }
}

/// A replica that cannot catch up, the primary's binary logs it needs next purged, starts again
/// empty to be seeded, when the app has a verified backup run newer than what it holds (else
/// the seeding would end where it stands).
fn reseed_behind_purged_logs(
    cluster: &Cluster,
    primary: &str,
    member: &Member,
    server: &Server,
    decision: &mut Decision,
) -> Standing {
    let purged = format!("the binary logs of {primary} it needs next were purged");
    let (role, message) = match &cluster.seed_backup {
        Some(backup) if !server.position.includes(&backup.position) => {
            let cause = ReseedCause::SourcePurged;
            decision.acts.push(Act::Reseed { member: member.name.clone(), cause });
            (
                MemberRole::Seeding,
                format!(
                    "{purged}; starting it again empty to seed it (backup run {} is newer than what it holds)",
                    backup.run
                ),
            )
        }
        _ => (
            MemberRole::Unavailable,
            format!(
                "cannot catch up: {purged}, and the app has no verified backup run newer than its position {} to seed it from",
                server.position
            ),
        ),
    };
    Standing::new(&member.name, role, message)
}

/// A server holding transactions the primary lacks takes no traffic and does not rejoin as it
/// is: its commits that wait for an acknowledgement are released by a restart (they never
/// reached a client as done), its transactions the primary lacks are copied to a file, then it
/// starts again empty and is seeded. Never discarded silently: the file, an Event and the
/// status name them.
fn set_aside(member: &Member, server: &Server, primary: &Server, errant: &[String], decision: &mut Decision) {
    let name = member.name.clone();
    let lacks = format!("holds transactions the primary lacks: {}", errant.join(", "));
    let next = if server.semi_sync_waiting > 0 {
        if member.pod != PodState::Deleting {
            decision.acts.push(Act::Restart(name.clone()));
        }
        "restarting it: commits on it wait for an acknowledgement no replica will send".to_string()
    } else {
        if !server.read_only {
            decision.acts.push(Act::Fence(name.clone()));
        }
        match &member.extraction {
            Extraction::NotStarted => {
                decision.acts.push(Act::Extract {
                    member: name.clone(),
                    after: server.history.fork(&primary.history),
                    primary_set: primary.position.to_string(),
                    first_log: server.first_binlog.clone().unwrap_or_default(),
                    errant: errant.to_vec(),
                });
                "copying them to a file".into()
            }
            Extraction::Running => "copying them to a file".into(),
            Extraction::Failed(why) => format!("copying them to a file failed ({why}); the server keeps them"),
            Extraction::Done(file) => {
                decision.acts.push(Act::Reseed { member: name.clone(), cause: ReseedCause::Diverged });
                format!("copied to {file}; seeding it again")
            }
        }
    };
    decision.standings.push(Standing::new(&name, MemberRole::Diverged, format!("{lacks}; {next}")));
}

/// The primary is gone: fence, then promote the replica that received the most.
fn failover(cluster: &Cluster, primary: &str, why: &'static str, decision: &mut Decision) {
    if server(cluster, primary).is_some_and(|s| !s.read_only) {
        decision.acts.push(Act::Fence(primary.into()));
    }
    if server(cluster, primary).is_some() {
        decision.acts.push(Act::DisconnectClients(primary.into()));
    }
    let replicas: Vec<&Member> = cluster.members.iter().filter(|m| m.name != primary).collect();
    let standings = |decision: &mut Decision| {
        decision.standings = cluster.members.iter().map(|m| standing(m, primary, false)).collect();
    };
    if stop_receiving(&replicas, decision) {
        standings(decision);
        return;
    }
    if let Some(silent) = replicas.iter().find(|m| m.server.is_none()) {
        let message = format!(
            "primary {primary} is gone ({why}), and replica {} does not answer: it may hold the last acknowledged commit, so the failover waits for it",
            silent.name
        );
        decision.problem = Some((reason::FAILOVER_WAITS, message));
        standings(decision);
        return;
    }
    let change = |to: &str| Change::failover(Some(primary), to, why);
    promote_the_most_advanced(cluster, &replicas, Some(primary), change, decision);
}

/// No primary, or one that came back read-only: the primary is chosen among every server.
fn elect(cluster: &Cluster, previous: Option<&str>, decision: &mut Decision) {
    let all: Vec<&Member> = cluster.members.iter().collect();
    let placeholder = previous.unwrap_or("");
    if stop_receiving(&all, decision) {
        decision.standings = cluster.members.iter().map(|m| standing(m, placeholder, false)).collect();
        return;
    }
    if let Some(silent) = all.iter().find(|m| m.server.is_none()) {
        let message = format!(
            "the primary is chosen once every MySQL server answers, so that none holding the last acknowledged commit is passed over; {} does not",
            silent.name
        );
        decision.problem = Some((reason::ELECTION_WAITS, message));
        decision.standings = cluster.members.iter().map(|m| standing(m, placeholder, false)).collect();
        return;
    }
    let change = |to: &str| Change::failover(previous, to, reason::PRIMARY_RESTARTED);
    promote_the_most_advanced(cluster, &all, previous, change, decision);
    if decision.change.as_ref().is_some_and(|c| previous.is_none() || c.from.as_deref() == Some(c.to.as_str())) {
        // A first primary, or the same one again: no failover to report.
        decision.change = None;
    }
}

/// Stops every answering member's receiver that runs; whether it stopped any (the positions
/// then need another look).
fn stop_receiving(members: &[&Member], decision: &mut Decision) -> bool {
    let receiving: Vec<&&Member> = members
        .iter()
        .filter(|m| m.server.as_ref().and_then(|s| s.replica.as_ref()).is_some_and(|r| r.receiving))
        .collect();
    for member in &receiving {
        decision.acts.push(Act::StopReceiving(member.name.clone()));
    }
    if !receiving.is_empty() {
        decision.look_again = true;
        decision.problem = Some((reason::PROMOTING, "choosing a primary: the replicas stopped receiving".into()));
    }
    !receiving.is_empty()
}

/// Promotes the member of `candidates` that holds or received every transaction any other
/// did (the `preferred` one first among equals, then the lowest ordinal), and points the rest
/// at it.
fn promote_the_most_advanced(
    cluster: &Cluster,
    candidates: &[&Member],
    preferred: Option<&str>,
    change: impl Fn(&str) -> Change,
    decision: &mut Decision,
) {
    let received = received_by(candidates);
    let Some((chosen, position)) = most_advanced(&received, preferred) else {
        let held: Vec<String> = received.iter().map(|(m, p)| format!("{} holds {p}", m.name)).collect();
        let message =
            format!("no MySQL server holds every transaction the others hold ({}); none is promoted", held.join(", "));
        decision.problem = Some((reason::DIVERGED, message));
        decision.standings = cluster.members.iter().map(|m| standing(m, "", false)).collect();
        return;
    };
    let server = chosen.server.as_ref().expect("a member with a position answered");
    let name = chosen.name.clone();
    let backlog = position.count_beyond(&server.position);
    let election = election(&received, &name, &position);
    if !server.position.includes(&position) {
        // Promoted at a later look, once it applied what it received (which is why it was
        // chosen: it had the least of it left).
        decision.acts.push(Act::WaitApplied { member: name.clone(), position: position.to_string() });
        decision.pending = Some(Change { election, backlog, ..change(&name) });
        decision.look_again = true;
        let message = format!(
            "promoting {name} once it applied what it received: of the servers that received everything, it had the least left to apply"
        );
        decision.problem = Some((reason::PROMOTING, message));
        decision.standings = cluster.members.iter().map(|m| standing(m, "", false)).collect();
        return;
    }
    if server.replica.is_some() {
        decision.acts.push(Act::Promote(name.clone()));
    }
    for other in cluster.members.iter().filter(|m| m.name != name && m.server.is_some()) {
        let loading = matches!(other.backup_seed, BackupSeed::Loading { .. });
        if received.iter().any(|(m, _)| m.name == other.name) && !loading {
            decision.acts.push(Act::Replicate { member: other.name.clone(), upstream: name.clone() });
        }
    }
    match cluster.durability {
        Durability::Acknowledged => decision.acts.push(Act::ArmSemiSync(name.clone())),
        Durability::Asynchronous if server.semi_sync_armed => decision.acts.push(Act::DisarmSemiSync(name.clone())),
        Durability::Asynchronous => {}
    }
    decision.acts.push(Act::OpenWrites(name.clone()));
    decision.primary = Some(name.clone());
    decision.change = Some(Change { election, backlog, ..change(&name) });
    decision.standings = cluster
        .members
        .iter()
        .map(|m| {
            if m.name == name {
                Standing::new(&name, MemberRole::Primary, None)
            } else if m.server.is_some() {
                Standing::new(&m.name, MemberRole::Seeding, format!("now replicating from {name}"))
            } else {
                standing(m, &name, false)
            }
        })
        .collect();
}

/// What each answering member of `members` holds or received.
fn received_by<'a>(members: &[&'a Member]) -> Vec<(&'a Member, Position)> {
    members.iter().filter_map(|m| Some((*m, m.server.as_ref()?.received()))).collect()
}

/// The member to promote: of those that hold or received every transaction any other did, the
/// one with the least left to apply (the shortest wait before it can take writes), `preferred`
/// first among equals, then the lowest ordinal. `None` when no one holds everything (their
/// histories diverged).
fn most_advanced<'a>(received: &[(&'a Member, Position)], preferred: Option<&str>) -> Option<(&'a Member, Position)> {
    let holds_all = |position: &Position| received.iter().all(|(_, other)| position.includes(other));
    let mut best: Vec<&(&Member, Position)> = received.iter().filter(|(_, position)| holds_all(position)).collect();
    best.sort_by_key(|(member, position)| (left_to_apply(member, position), Some(member.name.as_str()) != preferred));
    best.first().map(|(member, position)| (*member, position.clone()))
}

/// The replica of `replicas` a failover now would promote, and what it has left to apply.
pub fn failover_candidate<'a>(replicas: &[&'a Member]) -> Option<(&'a Member, u64)> {
    let (member, position) = most_advanced(&received_by(replicas), None)?;
    Some((member, left_to_apply(member, &position)))
}

/// Transactions `member` received (of `received`) and has not applied yet.
fn left_to_apply(member: &Member, received: &Position) -> u64 {
    member.server.as_ref().map_or(0, |server| received.count_beyond(&server.position))
}

/// Why `chosen` was promoted, in words: what each candidate had received and had left to apply.
fn election(received: &[(&Member, Position)], chosen: &str, position: &Position) -> String {
    let others: Vec<String> = received
        .iter()
        .filter(|(member, _)| member.name != chosen)
        .map(|(member, theirs)| match theirs.includes(position) {
            true => format!("{} had {} left to apply", member.name, left_to_apply(member, theirs)),
            false => format!("{} lacked {} of them", member.name, position.count_beyond(theirs)),
        })
        .collect();
    let chosen_left = received.iter().find(|(m, _)| m.name == chosen).map_or(0, |(m, p)| left_to_apply(m, p));
    let mut note = format!(
        "{chosen} had received every transaction any server had ({position}) and had the least left to apply ({chosen_left})"
    );
    if !others.is_empty() {
        note.push_str(&format!("; {}", others.join(", ")));
    }
    note
}

/// A switchover was asked for while the primary is writable: fence it, or refuse.
fn start_switchover(cluster: &Cluster, primary: &str, request: &Switchover, decision: &mut Decision) {
    match switchover_target(cluster, primary, request) {
        Ok(target) => {
            decision.acts.push(Act::Fence(primary.into()));
            decision.look_again = true;
            decision.switching = Some(Switchover { to: Some(target), ..request.clone() });
            decision.problem = Some((reason::PROMOTING, format!("switching over from {primary}")));
            decision.standings = cluster.members.iter().map(|m| standing(m, primary, m.name == primary)).collect();
        }
        Err((reason, message)) => {
            decision.refusal = Some(request.refused(reason, message));
            steady(cluster, primary, decision);
        }
    }
}

/// The replica a switchover hands the primary to: the one asked for, if it is a healthy replica
/// of the primary, or the healthy replica that received the most.
fn switchover_target(cluster: &Cluster, primary: &str, request: &Switchover) -> Result<String, (&'static str, String)> {
    let host = host_of(cluster, primary);
    let healthy = |m: &Member| {
        m.name != primary && m.pod == PodState::Ready && m.server.as_ref().is_some_and(|s| s.replicates_from(&host))
    };
    match &request.to {
        Some(to) => match member(cluster, to) {
            Some(target) if healthy(target) => Ok(to.clone()),
            Some(target) => Err((
                reason::TARGET_NOT_A_HEALTHY_REPLICA,
                format!("{to} is not a healthy replica of {primary}: {}", describe(target, primary)),
            )),
            None => Err((reason::TARGET_NOT_A_HEALTHY_REPLICA, format!("{to} is not a MySQL server of this app"))),
        },
        None => {
            let healthy: Vec<&Member> = cluster.members.iter().filter(|m| healthy(m)).collect();
            most_advanced(&received_by(&healthy), None)
                .map(|(member, _)| member.name.clone())
                .ok_or_else(|| (reason::NO_HEALTHY_REPLICA, format!("no replica of {primary} is healthy")))
        }
    }
}

/// The primary of a switchover is fenced: once the target applied everything, promote it.
fn finish_switchover(cluster: &Cluster, primary: &str, switching: &Switchover, decision: &mut Decision) {
    let target = switching.to.clone().unwrap_or_default();
    let old = server(cluster, primary).expect("a read-only primary answered");
    let ready = member(cluster, &target).filter(|m| m.pod == PodState::Ready && m.server.is_some());
    let Some(target_member) = ready else {
        // The target went away meanwhile: the old primary takes writes again.
        decision.acts.push(Act::OpenWrites(primary.into()));
        let message = format!("{target} stopped answering during the switchover; {primary} stays the primary");
        decision.refusal = Some(switching.refused(reason::TARGET_NOT_A_HEALTHY_REPLICA, message));
        decision.standings = cluster.members.iter().map(|m| standing(m, primary, m.name == primary)).collect();
        return;
    };
    let target_server = target_member.server.as_ref().expect("checked above");
    decision.switching = Some(switching.clone());
    let backlog = old.position.count_beyond(&target_server.position);
    let change = Change {
        kind: ChangeKind::Switchover,
        from: Some(primary.into()),
        to: target.clone(),
        reason: switching.reason,
        request: Some(switching.request.clone()),
        election: format!(
            "{target} was the switchover's target; it had {backlog} of {primary}'s transactions left to apply"
        ),
        backlog,
    };
    if !target_server.position.includes(&old.position) {
        // Promoted at a later look, once it applied everything the fenced primary holds.
        decision.acts.push(Act::WaitApplied { member: target.clone(), position: old.position.to_string() });
        decision.pending = Some(change);
        decision.look_again = true;
        decision.problem = Some((reason::PROMOTING, format!("switching over from {primary} to {target}")));
        decision.standings = cluster.members.iter().map(|m| standing(m, primary, m.name == primary)).collect();
        return;
    }
    decision.acts.push(Act::Promote(target.clone()));
    for other in cluster.members.iter().filter(|m| m.name != target && m.server.is_some()) {
        decision.acts.push(Act::Replicate { member: other.name.clone(), upstream: target.clone() });
    }
    if cluster.durability == Durability::Acknowledged {
        decision.acts.push(Act::ArmSemiSync(target.clone()));
    }
    decision.acts.push(Act::OpenWrites(target.clone()));
    decision.acts.push(Act::DisconnectClients(primary.into()));
    decision.primary = Some(target.clone());
    decision.switching = None;
    decision.change = Some(change);
    decision.standings = cluster
        .members
        .iter()
        .map(|m| match m.name == target {
            true => Standing::new(&m.name, MemberRole::Primary, None),
            false => standing(m, &target, false),
        })
        .collect();
}

/// A switchover request that arrives while the primary is not healthy is refused: a failover,
/// not a switchover, is what the app needs.
fn refuse_unanswerable_request(cluster: &Cluster, decision: &mut Decision) {
    let Some(request) = &cluster.requested else { return };
    if decision.refusal.is_some() || decision.switching.is_some() || decision.change.is_some() {
        return;
    }
    if cluster.primary.as_deref().is_some_and(|p| matches!(health(cluster, p), Health::Writable)) {
        return;
    }
    let message = "the primary is not accepting writes now; a switchover needs a healthy primary";
    decision.refusal = Some(request.refused(reason::PRIMARY_NOT_HEALTHY, message.into()));
}

fn host_of(cluster: &Cluster, name: &str) -> String {
    member(cluster, name).map(|m| m.host.clone()).unwrap_or_default()
}

/// How a member stands while nothing is done to it.
fn standing(member: &Member, primary: &str, is_primary: bool) -> Standing {
    let role = match (&member.server, is_primary) {
        (None, _) => MemberRole::Unavailable,
        (Some(_), true) => MemberRole::Primary,
        (Some(server), false)
            if !primary.is_empty()
                && server.replica.as_ref().is_some_and(|r| r.upstream_host.starts_with(&format!("{primary}."))) =>
        {
            MemberRole::Replica
        }
        (Some(_), false) => MemberRole::Fenced,
    };
    Standing::new(&member.name, role, (role == MemberRole::Unavailable).then(|| describe(member, primary)))
}

fn describe(member: &Member, primary: &str) -> String {
    match (member.pod, &member.server) {
        (PodState::Missing, _) => "its pod does not exist".into(),
        (PodState::Deleting, _) => "its pod is being deleted".into(),
        (PodState::NotReady, _) => "its pod is not ready".into(),
        (PodState::Ready, None) => "it does not answer".into(),
        (PodState::Ready, Some(server)) => match &server.replica {
            Some(r) if r.error.is_some() => format!(
                "its replication stopped: {}",
                r.error.as_ref().map(|(n, t)| format!("{n}: {t}")).unwrap_or_default()
            ),
            Some(r) if !r.upstream_host.starts_with(&format!("{primary}.")) => {
                format!("it replicates from {}", r.upstream_host)
            }
            Some(_) => "its replication is not running".into(),
            None => "it does not replicate".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::model::SeedBackup;
    use crate::replication::server::{History, Replication};
    use crate::replication::sql::Flavor;

    fn host(name: &str) -> String {
        format!("{name}.ex-mysql-headless.shop.svc")
    }

    fn position(text: &str) -> Position {
        Position::parse(text).unwrap()
    }

    /// A MariaDB server with `applied` in its binary log, `history` by writer.
    fn server(id: u32, applied: &str, history: &str) -> Server {
        Server {
            flavor: Flavor::MariaDb,
            server_id: id,
            read_only: true,
            position: position(applied),
            history: History::parse(Flavor::MariaDb, history).unwrap(),
            semi_sync_armed: false,
            semi_sync_clients: 0,
            semi_sync_waiting: 0,
            ssl_ca: Some("/ca.crt".into()),
            has_replication_user: true,
            replica: None,
            first_binlog: Some("binlog.000001".into()),
        }
    }

    fn member(ordinal: u32, server: Option<Server>) -> Member {
        let name = format!("ex-mysql-{ordinal}");
        Member {
            host: host(&name),
            name,
            pod: PodState::Ready,
            server,
            server_id: 100 + ordinal,
            extraction: Extraction::NotStarted,
            reseeding: false,
            backup_seed: BackupSeed::NotStarted,
            outdated: false,
        }
    }

    fn primary(ordinal: u32, applied: &str) -> Member {
        let mut s = server(100 + ordinal, applied, applied);
        s.read_only = false;
        s.semi_sync_armed = true;
        s.semi_sync_clients = 2;
        member(ordinal, Some(s))
    }

    /// A replica of `upstream` that received `received` and applied `applied`, its receiver
    /// running or not.
    fn replica(ordinal: u32, upstream: u32, received: &str, applied: &str, receiving: bool) -> Member {
        let mut s = server(100 + ordinal, applied, applied);
        s.replica = Some(Replication {
            upstream_host: host(&format!("ex-mysql-{upstream}")),
            receiving,
            connected: receiving,
            applying: true,
            received: position(received),
            lag_seconds: Some(0),
            error: None,
        });
        member(ordinal, Some(s))
    }

    fn cluster(members: Vec<Member>, primary: Option<&str>) -> Cluster {
        Cluster {
            members,
            primary: primary.map(Into::into),
            durability: Durability::Acknowledged,
            primary_silent: 0,
            requested: None,
            switching: None,
            updating: None,
            seed_backup: None,
            demoted: None,
        }
    }

    fn roles(decision: &Decision) -> Vec<MemberRole> {
        decision.standings.iter().map(|s| s.role).collect()
    }

    use Act::*;
    use MemberRole::{Diverged, Fenced, Primary, Replica, Seeding, Unavailable};

    fn op(kind: fn(String) -> Act, ordinal: u32) -> Act {
        kind(format!("ex-mysql-{ordinal}"))
    }

    fn replicate(ordinal: u32, upstream: u32) -> Act {
        Replicate { member: format!("ex-mysql-{ordinal}"), upstream: format!("ex-mysql-{upstream}") }
    }

    fn wait(ordinal: u32, position: &str) -> Act {
        WaitApplied { member: format!("ex-mysql-{ordinal}"), position: position.into() }
    }

    #[test]
    fn a_healthy_cluster_needs_nothing() {
        let c = cluster(
            vec![
                primary(0, "0-100-9"),
                replica(1, 0, "0-100-9", "0-100-9", true),
                replica(2, 0, "0-100-9", "0-100-8", true),
            ],
            Some("ex-mysql-0"),
        );
        let d = servers(&c);
        assert_eq!(d.acts, []);
        assert_eq!(roles(&d), [Primary, Replica, Replica]);
        assert_eq!((d.problem, d.change, d.look_again), (None, None, false));
    }

    /// Each case: what the replicas are, what is done, what they are then, and the problem.
    #[test]
    fn replicas_are_attached_fenced_or_set_aside() {
        let mut writable_old_primary = primary(2, "0-100-9");
        writable_old_primary.server.as_mut().unwrap().semi_sync_clients = 0;
        let mut errant_old_primary = primary(2, "0-100-10");
        errant_old_primary.server.as_mut().unwrap().history = History::parse(Flavor::MariaDb, "0-100-10").unwrap();
        let cases: Vec<(Member, Vec<Act>, MemberRole, Option<&str>)> = vec![
            (member(2, Some(server(102, "", ""))), vec![replicate(2, 1)], Seeding, Some(reason::SEEDING)),
            (
                writable_old_primary,
                vec![op(Fence, 2), op(DisconnectClients, 2), replicate(2, 0)],
                Seeding,
                Some(reason::SEEDING),
            ),
            (replica(2, 1, "0-100-9", "0-100-9", true), vec![replicate(2, 0)], Seeding, Some(reason::SEEDING)),
            (member(2, None), vec![], Unavailable, Some(reason::REPLICA_NOT_REPLICATING)),
        ];
        for (third, operations, role, problem) in cases {
            let c = cluster(
                vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), third],
                Some("ex-mysql-0"),
            );
            let d = servers(&c);
            assert_eq!(d.acts, operations, "{:?}", c.members[2]);
            assert_eq!(roles(&d), [Primary, Replica, role]);
            assert_eq!(d.problem.map(|(reason, _)| reason), problem);
        }
    }

    /// A server that stopped on `error` from `upstream`, holding `applied`.
    fn stopped(ordinal: u32, upstream: u32, applied: &str, error: (u32, &str)) -> Member {
        let mut m = replica(ordinal, upstream, applied, applied, false);
        let replication = m.server.as_mut().unwrap().replica.as_mut().unwrap();
        replication.applying = true;
        replication.error = Some((error.0, error.1.into()));
        m
    }

    const PURGED: (u32, &str) = (
        1236,
        "Got fatal error 1236 from master when reading data from binary log: 'Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.'",
    );

    fn seed_backup(position: &str) -> Option<SeedBackup> {
        Some(SeedBackup { run: "nightly-1".into(), position: self::position(position) })
    }

    /// An empty server whose source lacks the binary logs since the beginning is loaded from the
    /// newest verified backup run, then replicates from the primary what came after; with no
    /// such run, or when the load failed, it says it cannot be seeded.
    #[test]
    fn an_empty_server_behind_purged_logs_is_loaded_from_the_newest_verified_run() {
        let empty = |seed: BackupSeed| {
            let mut m = stopped(2, 1, "", PURGED);
            m.backup_seed = seed;
            m
        };
        let loaded = BackupSeed::Loaded { run: "nightly-1".into(), position: "0-100-7".into() };
        let adopt = AdoptPosition { member: "ex-mysql-2".into(), position: "0-100-7".into() };
        let seed_from = SeedFromBackup { member: "ex-mysql-2".into(), run: "nightly-1".into() };
        type Case = (Member, Option<SeedBackup>, Vec<Act>, MemberRole, &'static str);
        let cases: Vec<Case> = vec![
            (empty(BackupSeed::NotStarted), seed_backup("0-100-7"), vec![seed_from], Seeding, reason::SEEDING),
            (empty(BackupSeed::NotStarted), None, vec![], Unavailable, reason::CANNOT_SEED),
            (empty(BackupSeed::Loading { run: "nightly-1".into() }), None, vec![], Seeding, reason::SEEDING),
            (empty(loaded), None, vec![adopt, replicate(2, 0)], Seeding, reason::SEEDING),
            (
                empty(BackupSeed::Failed("Job x".into())),
                seed_backup("0-100-7"),
                vec![],
                Unavailable,
                reason::CANNOT_SEED,
            ),
            (
                stopped(2, 1, "", (2003, "cannot connect")),
                seed_backup("0-100-7"),
                vec![replicate(2, 1)],
                Seeding,
                reason::SEEDING,
            ),
        ];
        for (third, seed_backup, operations, role, problem) in cases {
            let mut c = cluster(
                vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), third],
                Some("ex-mysql-0"),
            );
            c.seed_backup = seed_backup;
            let d = servers(&c);
            assert_eq!(d.acts, operations, "{:?}", c.members[2].backup_seed);
            assert_eq!(roles(&d), [Primary, Replica, role], "{:?}", d.standings[2]);
            assert_eq!(d.problem.map(|(reason, _)| reason), Some(problem));
        }
    }

    /// A replica the primary's purged logs leave behind starts again empty when a verified run
    /// newer than what it holds can seed it; otherwise reseeding would end where it stands.
    #[test]
    fn a_replica_behind_purged_logs_is_reseeded_only_when_a_newer_run_exists() {
        let cases: Vec<(Option<SeedBackup>, Vec<Act>, MemberRole, &str)> = vec![
            (
                seed_backup("0-100-8"),
                vec![Reseed { member: "ex-mysql-2".into(), cause: ReseedCause::SourcePurged }],
                Seeding,
                reason::SEEDING,
            ),
            (seed_backup("0-100-5"), vec![], Unavailable, reason::CANNOT_SEED),
            (None, vec![], Unavailable, reason::CANNOT_SEED),
        ];
        for (seed_backup, operations, role, problem) in cases {
            let mut c = cluster(
                vec![
                    primary(0, "0-100-9"),
                    replica(1, 0, "0-100-9", "0-100-9", true),
                    stopped(2, 0, "0-100-6", PURGED),
                ],
                Some("ex-mysql-0"),
            );
            c.seed_backup = seed_backup.clone();
            let d = servers(&c);
            assert_eq!(d.acts, operations, "{seed_backup:?}");
            assert_eq!(roles(&d), [Primary, Replica, role]);
            assert_eq!(d.problem.map(|(reason, _)| reason), Some(problem));
        }
    }

    /// A failover while a backup run loads into a server leaves that server's replication alone:
    /// replicating now would mix with the load.
    #[test]
    fn a_failover_does_not_point_a_loading_server_at_the_new_primary() {
        let mut gone = primary(0, "0-100-9");
        gone.pod = PodState::Missing;
        gone.server = None;
        let mut loading = stopped(2, 1, "", PURGED);
        loading.backup_seed = BackupSeed::Loading { run: "nightly-1".into() };
        let c = cluster(vec![gone, replica(1, 0, "0-100-9", "0-100-9", false), loading], Some("ex-mysql-0"));
        let d = servers(&c);
        assert_eq!(d.primary.as_deref(), Some("ex-mysql-1"));
        assert!(
            !d.acts.iter().any(|op| matches!(op, Replicate { member, .. } if member == "ex-mysql-2")),
            "{:?}",
            d.acts
        );
    }

    /// A former primary holding a commit no replica received: its waiting commits are released
    /// by a restart, its transactions copied to a file, then it is seeded again; never rejoined
    /// as it is.
    #[test]
    fn a_diverged_server_is_restarted_copied_then_seeded_again() {
        let diverged = |waiting: u32, extraction: Extraction| {
            let mut old = primary(2, "0-100-10");
            old.server.as_mut().unwrap().semi_sync_waiting = waiting;
            old.extraction = extraction;
            old
        };
        let extract = Extract {
            member: "ex-mysql-2".into(),
            after: "0-100-9".into(),
            primary_set: "0-100-9".into(),
            first_log: "binlog.000001".into(),
            errant: vec!["0-100-10..10".into()],
        };
        let cases = [
            (diverged(1, Extraction::NotStarted), vec![op(Restart, 2)], "restarting it"),
            (diverged(0, Extraction::NotStarted), vec![op(Fence, 2), extract], "copying them"),
            (diverged(0, Extraction::Running), vec![op(Fence, 2)], "copying them"),
            (
                diverged(0, Extraction::Done("file f".into())),
                vec![op(Fence, 2), op(|m| Reseed { member: m, cause: ReseedCause::Diverged }, 2)],
                "seeding it again",
            ),
            (diverged(0, Extraction::Failed("no".into())), vec![op(Fence, 2)], "failed (no); the server keeps them"),
        ];
        for (old, operations, said) in cases {
            let c = cluster(
                vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), old],
                Some("ex-mysql-0"),
            );
            let d = servers(&c);
            assert_eq!(d.acts, operations);
            assert_eq!(roles(&d), [Primary, Replica, Diverged]);
            let message = d.standings[2].message.clone().unwrap();
            assert!(message.contains("0-100-10..10") && message.contains(said), "{message}");
            assert_eq!(d.problem.unwrap().0, reason::DIVERGED);
        }
    }

    #[test]
    fn an_empty_server_is_seeded_from_a_replica_then_moves_to_the_primary() {
        let mut reseeded = member(2, Some(server(102, "", "")));
        reseeded.reseeding = true;
        let c = cluster(
            vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), reseeded],
            Some("ex-mysql-0"),
        );
        let d = servers(&c);
        assert_eq!(d.acts, [op(ClearSeed, 2), replicate(2, 1)]);

        let catching_up = replica(2, 1, "0-100-5", "0-100-5", true);
        let c = cluster(
            vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), catching_up],
            Some("ex-mysql-0"),
        );
        let d = servers(&c);
        assert_eq!((d.acts.clone(), roles(&d)), (vec![], vec![Primary, Replica, Seeding]));

        let caught_up = replica(2, 1, "0-100-9", "0-100-9", true);
        let c = cluster(
            vec![primary(0, "0-100-9"), replica(1, 0, "0-100-9", "0-100-9", true), caught_up],
            Some("ex-mysql-0"),
        );
        assert_eq!(servers(&c).acts, [replicate(2, 0)]);
    }

    #[test]
    fn a_primary_no_replica_acknowledges_says_that_writes_wait() {
        let mut lone = primary(0, "0-100-9");
        lone.server.as_mut().unwrap().semi_sync_clients = 0;
        let c = cluster(vec![lone, member(1, None)], Some("ex-mysql-0"));
        let (reason, message) = servers(&c).problem.unwrap();
        assert_eq!(reason, reason::NO_ACKNOWLEDGING_REPLICA);
        assert!(message.contains("writes wait"), "{message}");
    }

    #[test]
    fn a_deleted_primary_is_fenced_off_first_then_the_replica_that_received_most_is_promoted() {
        let mut gone = primary(0, "0-100-12");
        gone.pod = PodState::Deleting;
        gone.server = None;
        let receiving = cluster(
            vec![
                gone.clone(),
                replica(1, 0, "0-100-12", "0-100-10", true),
                replica(2, 0, "0-100-11", "0-100-11", true),
            ],
            Some("ex-mysql-0"),
        );
        let d = servers(&receiving);
        assert_eq!(d.acts, [op(StopReceiving, 1), op(StopReceiving, 2)]);
        assert!(d.look_again && d.change.is_none());

        let stopped = cluster(
            vec![gone, replica(1, 0, "0-100-12", "0-100-10", false), replica(2, 0, "0-100-11", "0-100-11", false)],
            Some("ex-mysql-0"),
        );
        let d = servers(&stopped);
        assert_eq!(d.acts, [wait(1, "0-100-12")], "promoted once it applied what it received");
        assert!(d.look_again && d.change.is_none() && d.pending.as_ref().is_some_and(|p| p.backlog == 2));
        assert_eq!(d.problem.map(|(reason, _)| reason), Some(reason::PROMOTING));

        let mut applied = stopped.clone();
        applied.members[1] = replica(1, 0, "0-100-12", "0-100-12", false);
        let d = servers(&applied);
        assert_eq!(d.acts, [op(Promote, 1), replicate(2, 1), op(ArmSemiSync, 1), op(OpenWrites, 1)]);
        assert_eq!(d.primary.as_deref(), Some("ex-mysql-1"));
        assert_eq!(roles(&d), [Unavailable, Primary, Seeding]);
        let change = d.change.unwrap();
        assert_eq!(
            (change.kind, change.from.as_deref(), change.reason),
            (ChangeKind::Failover, Some("ex-mysql-0"), "PodDeleted")
        );
    }

    #[test]
    fn a_failover_waits_for_every_replica_and_refuses_diverged_ones() {
        let mut gone = primary(0, "0-100-12");
        gone.pod = PodState::NotReady;
        gone.server = None;
        let silent = cluster(
            vec![gone.clone(), replica(1, 0, "0-100-12", "0-100-12", false), member(2, None)],
            Some("ex-mysql-0"),
        );
        let d = servers(&silent);
        assert_eq!((d.acts, d.primary.as_deref()), (vec![], Some("ex-mysql-0")));
        assert_eq!(d.problem.unwrap().0, reason::FAILOVER_WAITS);

        let other = replica(2, 0, "1-103-1", "1-103-1", false);
        let split = cluster(vec![gone, replica(1, 0, "0-100-12", "0-100-12", false), other], Some("ex-mysql-0"));
        let d = servers(&split);
        assert_eq!(d.problem.unwrap().0, reason::DIVERGED);
        assert!(d.change.is_none() && !d.acts.iter().any(|o| matches!(o, Promote(_) | OpenWrites(_))));
    }

    #[test]
    fn a_silent_primary_is_failed_over_at_the_second_look() {
        let mut silent = primary(0, "0-100-12");
        silent.server = None;
        let mut c = cluster(
            vec![silent, replica(1, 0, "0-100-12", "0-100-12", false), replica(2, 0, "0-100-12", "0-100-12", false)],
            Some("ex-mysql-0"),
        );
        c.primary_silent = 1;
        let d = servers(&c);
        assert_eq!((d.acts.len(), d.problem.unwrap().0), (0, reason::PRIMARY_SILENT));
        c.primary_silent = SILENT_LOOKS;
        let d = servers(&c);
        assert_eq!(d.change.map(|c| (c.to, c.reason)), Some(("ex-mysql-1".into(), reason::NOT_ANSWERING)));
    }

    #[test]
    fn a_new_app_elects_its_first_server_once_every_server_answers() {
        let fresh = |ordinal| member(ordinal, Some(server(100 + ordinal, "", "")));
        let waiting = cluster(vec![fresh(0), fresh(1), member(2, None)], None);
        let d = servers(&waiting);
        assert_eq!((d.acts, d.problem.unwrap().0), (vec![], reason::ELECTION_WAITS));

        let d = servers(&cluster(vec![fresh(0), fresh(1), fresh(2)], None));
        assert_eq!(d.acts, [replicate(1, 0), replicate(2, 0), op(ArmSemiSync, 0), op(OpenWrites, 0)]);
        assert_eq!((d.primary.as_deref(), d.change), (Some("ex-mysql-0"), None), "a first primary is no failover");
    }

    #[test]
    fn a_restarted_primary_is_elected_again_unless_a_replica_holds_more() {
        let restarted = |applied| member(0, Some(server(100, applied, applied)));
        let d = servers(&cluster(
            vec![
                restarted("0-100-12"),
                replica(1, 0, "0-100-12", "0-100-12", false),
                replica(2, 0, "0-100-11", "0-100-11", false),
            ],
            Some("ex-mysql-0"),
        ));
        assert_eq!(d.acts, [replicate(1, 0), replicate(2, 0), op(ArmSemiSync, 0), op(OpenWrites, 0)]);
        assert_eq!((d.primary.as_deref(), d.change), (Some("ex-mysql-0"), None));

        // Its last transaction, received by a replica but never acknowledged to the client, was
        // cut from its log when it restarted: the replica holds more.
        let d = servers(&cluster(
            vec![
                restarted("0-100-11"),
                replica(1, 0, "0-100-12", "0-100-12", false),
                replica(2, 0, "0-100-11", "0-100-11", false),
            ],
            Some("ex-mysql-0"),
        ));
        assert_eq!(d.primary.as_deref(), Some("ex-mysql-1"));
        assert_eq!(d.change.map(|c| c.reason), Some(reason::PRIMARY_RESTARTED));
        assert!(d.acts.contains(&replicate(0, 1)));
    }

    #[test]
    fn a_switchover_fences_the_primary_then_promotes_the_target_once_it_applied_everything() {
        let healthy = || {
            vec![
                primary(0, "0-100-9"),
                replica(1, 0, "0-100-9", "0-100-9", true),
                replica(2, 0, "0-100-9", "0-100-8", true),
            ]
        };
        let request = Switchover::requested("r1".into(), Some("ex-mysql-2".into()));
        let mut asked = cluster(healthy(), Some("ex-mysql-0"));
        asked.requested = Some(request.clone());
        let d = servers(&asked);
        assert_eq!(d.acts, [op(Fence, 0)]);
        assert_eq!(d.switching, Some(request.clone()));
        assert!(d.look_again);

        let mut fenced = healthy();
        fenced[0].server.as_mut().unwrap().read_only = true;
        let mut switching = cluster(fenced, Some("ex-mysql-0"));
        switching.switching = Some(request.clone());
        let d = servers(&switching);
        assert_eq!(d.acts, [wait(2, "0-100-9")], "promoted once it applied everything the fenced primary holds");
        assert_eq!((d.switching.as_ref(), d.change.as_ref()), (Some(&request), None));
        assert_eq!(d.pending.as_ref().map(|p| p.backlog), Some(1));
        switching.members[2] = replica(2, 0, "0-100-9", "0-100-9", true);
        let d = servers(&switching);
        assert_eq!(
            d.acts,
            [
                op(Promote, 2),
                replicate(0, 2),
                replicate(1, 2),
                op(ArmSemiSync, 2),
                op(OpenWrites, 2),
                op(DisconnectClients, 0)
            ],
            "the old primary's client sessions are closed, once the labels moved"
        );
        let change = d.change.unwrap();
        assert_eq!(
            (change.kind, change.to.as_str(), change.request.as_deref(), change.backlog),
            (ChangeKind::Switchover, "ex-mysql-2", Some("r1"), 0)
        );
    }

    /// Each case: what the two replicas received and applied when the primary went away; the
    /// one promoted, whether the promotion waits for it to apply, and what it had left.
    #[test]
    fn a_failover_promotes_of_the_replicas_holding_everything_the_one_with_the_least_left_to_apply() {
        type Case = (&'static str, [(&'static str, &'static str); 2], u32, bool, u64);
        let cases: [Case; 6] = [
            ("the other one applied more", [("0-100-12", "0-100-10"), ("0-100-12", "0-100-12")], 2, false, 0),
            ("the first one applied more", [("0-100-12", "0-100-12"), ("0-100-12", "0-100-3")], 1, false, 0),
            ("both behind, the second less", [("0-100-12", "0-100-8"), ("0-100-12", "0-100-9")], 2, true, 3),
            ("equal: the lowest ordinal", [("0-100-12", "0-100-12"), ("0-100-12", "0-100-12")], 1, false, 0),
            ("only the first received everything", [("0-100-12", "0-100-5"), ("0-100-11", "0-100-11")], 1, true, 7),
            ("only the second received everything", [("0-100-11", "0-100-11"), ("0-100-12", "0-100-2")], 2, true, 10),
        ];
        for (case, [(r1, a1), (r2, a2)], chosen, waits, backlog) in cases {
            let mut gone = primary(0, "0-100-12");
            gone.pod = PodState::Missing;
            gone.server = None;
            let c = cluster(vec![gone, replica(1, 0, r1, a1, false), replica(2, 0, r2, a2, false)], Some("ex-mysql-0"));
            let d = servers(&c);
            let name = format!("ex-mysql-{chosen}");
            let waiting = d.acts.iter().any(|op| matches!(op, WaitApplied { member, .. } if *member == name));
            assert_eq!(waiting, waits, "{case}: {:?}", d.acts);
            let change = match waits {
                true => d.pending.clone().expect("a promotion waiting"),
                false => d.change.clone().expect("a failover"),
            };
            assert_eq!((change.to.as_str(), change.backlog), (name.as_str(), backlog), "{case}");
            assert!(
                change.election.starts_with(&format!("{name} had received every transaction")),
                "{}",
                change.election
            );
            let other = format!("ex-mysql-{}", 3 - chosen);
            assert!(change.election.contains(&other), "{case}: the other candidate is named: {}", change.election);
            assert_eq!(
                failover_candidate(&c.members[1..].iter().collect::<Vec<_>>()).map(|(m, b)| (m.name.clone(), b)),
                Some((name.clone(), backlog)),
                "{case}: the expected failover wait reads the same candidate"
            );
        }
    }

    /// A server that took writes and no longer is the primary has its client sessions closed:
    /// when it is fenced (a former primary that answers again), after a failover that could
    /// fence it, and at each look while it was demoted moments ago.
    #[test]
    fn a_demoted_primarys_client_sessions_are_closed() {
        let mut answering_old = primary(0, "0-100-12");
        answering_old.pod = PodState::NotReady;
        let c = cluster(
            vec![
                answering_old,
                replica(1, 0, "0-100-12", "0-100-12", false),
                replica(2, 0, "0-100-12", "0-100-12", false),
            ],
            Some("ex-mysql-0"),
        );
        let d = servers(&c);
        assert_eq!(d.acts[..2], [op(Fence, 0), op(DisconnectClients, 0)], "{:?}", d.acts);

        let mut demoted = cluster(
            vec![
                primary(0, "0-100-9"),
                replica(1, 0, "0-100-9", "0-100-9", true),
                replica(2, 0, "0-100-9", "0-100-9", true),
            ],
            Some("ex-mysql-0"),
        );
        assert_eq!(servers(&demoted).acts, []);
        demoted.demoted = Some("ex-mysql-2".into());
        assert_eq!(servers(&demoted).acts, [op(DisconnectClients, 2)]);
        demoted.members[2].server = None;
        assert_eq!(servers(&demoted).acts, [], "a server that does not answer is left for the next look");
    }

    #[test]
    fn a_switchover_to_anything_but_a_healthy_replica_is_refused_and_nothing_moves() {
        let members = vec![
            primary(0, "0-100-9"),
            replica(1, 0, "0-100-9", "0-100-9", true),
            member(2, Some(server(102, "", ""))),
        ];
        for (to, reason) in [
            (Some("ex-mysql-2"), reason::TARGET_NOT_A_HEALTHY_REPLICA),
            (Some("ex-mysql-0"), reason::TARGET_NOT_A_HEALTHY_REPLICA),
            (Some("nobody"), reason::TARGET_NOT_A_HEALTHY_REPLICA),
        ] {
            let mut c = cluster(members.clone(), Some("ex-mysql-0"));
            c.requested = Some(Switchover::requested("r".into(), to.map(Into::into)));
            let d = servers(&c);
            assert_eq!(d.refusal.map(|r| r.reason), Some(reason), "{to:?}");
            assert!(!d.acts.contains(&op(Fence, 0)), "{to:?}");
            assert_eq!(d.primary.as_deref(), Some("ex-mysql-0"));
        }
        let mut best = cluster(members, Some("ex-mysql-0"));
        best.requested = Some(Switchover::requested("r".into(), None));
        assert_eq!(servers(&best).switching.and_then(|s| s.to).as_deref(), Some("ex-mysql-1"));
    }

    #[test]
    fn every_answering_server_gets_its_own_id_and_the_replication_account() {
        let mut stranger = member(1, Some(server(1, "", "")));
        stranger.server.as_mut().unwrap().has_replication_user = false;
        let d = servers(&cluster(vec![primary(0, ""), stranger], Some("ex-mysql-0")));
        assert_eq!(
            d.acts[..2],
            [SetServerId { member: "ex-mysql-1".into(), id: 101 }, EnsureReplicationUser("ex-mysql-1".into())]
        );
        let _ = Fenced;
    }

    fn healthy_three() -> Vec<Member> {
        vec![
            primary(0, "0-100-9"),
            replica(1, 0, "0-100-9", "0-100-9", true),
            replica(2, 0, "0-100-9", "0-100-9", true),
        ]
    }

    fn outdated(members: &mut [Member], ordinals: &[usize]) {
        for &ordinal in ordinals {
            members[ordinal].outdated = true;
        }
    }

    fn update(ordinal: u32) -> Act {
        op(Update, ordinal)
    }

    #[test]
    fn a_new_pod_template_restarts_one_healthy_replica_at_a_time_the_highest_first() {
        let not_ready = |members: &mut Vec<Member>| members[1].pod = PodState::NotReady;
        let not_replicating = |members: &mut Vec<Member>| members[1].server.as_mut().unwrap().replica = None;
        type Case = (&'static str, Vec<usize>, fn(&mut Vec<Member>), Option<&'static str>, Vec<Act>);
        let cases: Vec<Case> = vec![
            ("nothing outdated", vec![], |_| {}, None, vec![]),
            ("one replica", vec![1], |_| {}, None, vec![update(1)]),
            ("two replicas: the highest first", vec![1, 2], |_| {}, None, vec![update(2)]),
            ("every server: the replicas first", vec![0, 1, 2], |_| {}, None, vec![update(2)]),
            ("another is being restarted", vec![1], |_| {}, Some("ex-mysql-2"), vec![]),
            ("a pod is not ready", vec![2], not_ready, None, vec![]),
            ("a replica does not replicate", vec![2], not_replicating, None, vec![replicate(1, 0)]),
        ];
        for (case, stale, damage, updating, expected) in cases {
            let mut members = healthy_three();
            outdated(&mut members, &stale);
            damage(&mut members);
            let mut c = cluster(members, Some("ex-mysql-0"));
            c.updating = updating.map(Into::into);
            let d = servers(&c);
            assert_eq!(d.acts, expected, "{case}");
            assert_eq!(d.switching, None, "{case}");
            if expected.iter().any(|op| matches!(op, Update(_))) {
                assert_eq!(d.problem.map(|p| p.0), Some(reason::UPDATING), "{case}");
            }
        }
    }

    #[test]
    fn once_every_replica_is_updated_the_primary_is_handed_over_then_restarted_as_a_replica() {
        let mut members = healthy_three();
        outdated(&mut members, &[0]);
        let d = servers(&cluster(members.clone(), Some("ex-mysql-0")));
        assert_eq!(d.acts, [op(Fence, 0)]);
        let switching = d.switching.expect("a switchover starts");
        assert_eq!((switching.reason, switching.request.as_str()), (reason::ROLLING_UPDATE, UPDATE_REQUEST));

        members[0].server.as_mut().unwrap().read_only = true;
        let mut fenced = cluster(members.clone(), Some("ex-mysql-0"));
        fenced.switching = Some(switching);
        let change = servers(&fenced).change.expect("the switchover finishes");
        assert_eq!(
            (change.kind, change.reason, change.to.as_str()),
            (ChangeKind::Switchover, reason::ROLLING_UPDATE, "ex-mysql-1")
        );

        // The old primary is now an outdated replica of the new one.
        let mut after = vec![
            replica(0, 1, "0-100-9", "0-100-9", true),
            primary(1, "0-100-9"),
            replica(2, 1, "0-100-9", "0-100-9", true),
        ];
        outdated(&mut after, &[0]);
        assert_eq!(servers(&cluster(after, Some("ex-mysql-1"))).acts, [update(0)]);
    }
}
