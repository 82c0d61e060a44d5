//! What to do at one look, from what was observed and what the controller remembers:
//! [`decide`], pure. It owns every judgement of replication: the server rules
//! ([`super::rules`]), every time-out (a switchover given up, a restart forgotten, a silent
//! primary counted, the seconds a demoted server's clients are sent on), whether something is
//! under way (the next look comes soon), the write gap and the promotion's wait of a change of
//! primary, the records and Events of changes and refusals, and how each server follows the
//! primary. [`super::act`] carries the acts out; the next look checks them.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::visitors_app::{MemberRole, RoleChange};

use super::following::{self, Sample};
use super::model::{
    Act, Change, ChangeKind, Cluster, Decision, Memory, Note, Observed, PodState, Refusal, Switchover, reason,
    server_of,
};
use super::report::rounded;
use super::rules;

/// A switchover whose target does not apply the fenced primary's transactions within this is
/// given up.
pub const SWITCHOVER_LIMIT: Duration = Duration::from_secs(30);
/// A server restarted on a new pod template that is not seen at it within this is looked at
/// afresh (restarted again if it still runs the old one).
pub const UPDATE_LIMIT: Duration = Duration::from_secs(600);
/// A server that stopped being the primary has its client sessions closed at each look this
/// long after: a client that reconnected through a name that still led to it (a DNS answer
/// cached, the client Service not yet moved) is sent on too.
pub const DISCONNECT_WINDOW: Duration = Duration::from_secs(10);

/// The decision at the look `observed`, and what to remember after it (when its acts are
/// carried out; a failed act leaves `memory` as it was, and the next look decides again).
pub fn decide(observed: &Observed, memory: &Memory) -> (Decision, Memory) {
    let mut next = memory.clone();
    next.primary = memory.primary.clone().or_else(|| observed.recorded_primary.clone());
    let given_up = give_up_a_late_switchover(observed, &mut next);
    remember_the_primary(observed, &mut next);
    forget_a_finished_update(observed, &mut next);
    let cluster = Cluster {
        members: observed.members.clone(),
        primary: next.primary.clone(),
        durability: observed.durability,
        primary_silent: next.primary_silent,
        requested: requested(observed, &next).filter(|_| given_up.is_none()),
        switching: next.switching.as_ref().map(|(switchover, _)| switchover.clone()),
        updating: next.updating.as_ref().map(|(member, _)| member.clone()),
        seed_backup: observed.seed_backup.clone(),
        demoted: recently_demoted(observed, &next),
    };
    let mut decision = rules::servers(&cluster);
    if let Some(refusal) = given_up {
        refused(observed, &mut decision, &next, &refusal);
    }
    if let Some(refusal) = decision.refusal.clone() {
        refused(observed, &mut decision, &next, &refusal);
        next.switching = None;
    }
    if let Some(switching) = decision.switching.clone().filter(|_| next.switching.is_none()) {
        next.switching = Some((switching, observed.at));
    }
    if let Some(Act::Update(member)) = decision.acts.iter().find(|act| matches!(act, Act::Update(_))) {
        next.updating = Some((member.clone(), observed.at));
    }
    match decision.change.clone() {
        Some(change) => changed(observed, &mut decision, &mut next, &change),
        None => note_applying(&decision, observed, &mut next),
    }
    next.primary = decision.primary.clone();
    note_seeding(&mut decision);
    note_divergence(observed, &mut decision, &mut next);
    follow(observed, &mut decision, &mut next);
    decision.busy = decision.look_again || under_way(&decision.problem) || recently_demoted(observed, &next).is_some();
    (decision, next)
}

/// A switchover whose primary was fenced longer than [`SWITCHOVER_LIMIT`] ago is given up.
fn give_up_a_late_switchover(observed: &Observed, next: &mut Memory) -> Option<Refusal> {
    let late = next.switching.as_ref().is_some_and(|(_, since)| observed.at.duration_since(*since) > SWITCHOVER_LIMIT);
    if !late {
        return None;
    }
    let (switching, _) = next.switching.take()?;
    let message =
        format!("the target did not apply the primary's transactions within {} s", SWITCHOVER_LIMIT.as_secs());
    Some(switching.refused(reason::TARGET_NOT_A_HEALTHY_REPLICA, message))
}

/// Counts the looks in a row in which the primary's pod is ready and its server silent, and
/// notes when it was last seen taking writes.
fn remember_the_primary(observed: &Observed, next: &mut Memory) {
    let primary = next.primary.as_deref().and_then(|p| observed.members.iter().find(|m| m.name == p));
    let Some(member) = primary else { return };
    match (&member.server, member.pod) {
        (Some(server), _) => {
            next.primary_silent = 0;
            if !server.read_only {
                next.writable = Some((member.name.clone(), observed.time));
            }
        }
        (None, PodState::Ready) => next.primary_silent += 1,
        (None, _) => {}
    }
}

/// Forgets the member restarted on the new pod template once its new pod runs it, or after
/// [`UPDATE_LIMIT`].
fn forget_a_finished_update(observed: &Observed, next: &mut Memory) {
    let Some((member, since)) = &next.updating else { return };
    let updated = observed.members.iter().any(|m| &m.name == member && !m.outdated && m.pod == PodState::Ready);
    if updated || observed.at.duration_since(*since) > UPDATE_LIMIT {
        next.updating = None;
    }
}

/// The switchover the app's annotations ask for, unless it was answered or is under way.
fn requested(observed: &Observed, next: &Memory) -> Option<Switchover> {
    let (request, to) = observed.annotated_switchover.clone()?;
    let under_way = next.switching.as_ref().is_some_and(|(switching, _)| switching.request == request);
    if observed.answered_request.as_deref() == Some(request.as_str()) || under_way {
        return None;
    }
    Some(Switchover::requested(request, to.filter(|to| !to.is_empty())))
}

/// The server demoted less than [`DISCONNECT_WINDOW`] ago, whose clients are sent on.
fn recently_demoted(observed: &Observed, next: &Memory) -> Option<String> {
    let (member, since) = next.demoted.as_ref()?;
    (observed.at.duration_since(*since) < DISCONNECT_WINDOW).then(|| member.clone())
}

/// Records a change of primary with its write gap and its promotion's wait, and tells it. A
/// promotion that waited is told as it was decided at its first look: what each candidate had
/// received and had left to apply then.
fn changed(observed: &Observed, decision: &mut Decision, next: &mut Memory, made: &Change) {
    let gap = write_gap(observed, next, made);
    let waited = next.applying.take().filter(|(pending, _)| pending.to == made.to && pending.kind == made.kind);
    let apply_wait =
        waited.as_ref().map_or(0.0, |(_, since)| rounded(observed.at.duration_since(*since).as_secs_f64()));
    let change = &match waited {
        Some((pending, _)) => Change { reason: made.reason, request: made.request.clone(), ..pending },
        None => made.clone(),
    };
    let record = RoleChange {
        time: Time(observed.time),
        from: change.from.clone(),
        to: Some(change.to.clone()),
        reason: change.reason.to_string(),
        message: Some(change_message(change, apply_wait)),
        write_gap_seconds: gap,
        apply_wait_seconds: Some(apply_wait),
        request: change.request.clone(),
    };
    let from = change.from.as_deref().unwrap_or("none");
    let paused = gap.map(|g| format!("; writes paused about {g} s")).unwrap_or_default();
    let waited = match change.backlog {
        0 => String::new(),
        backlog => {
            format!(", of which {apply_wait:.1} s waited for it to apply {backlog} transactions it had received")
        }
    };
    let note = match change.kind {
        ChangeKind::Failover => {
            decision.failover = Some(record);
            let (reason, to, election) = (change.reason, &change.to, &change.election);
            Note::replication(
                "Failover",
                format!("primary {from} is gone ({reason}); promoted {to}{paused}{waited} ({election})"),
            )
        }
        ChangeKind::Switchover => {
            decision.switchover = Some((record, change.reason));
            Note::replication(
                "Switchover",
                format!("switched the primary over from {from} to {}{paused}{waited}", change.to),
            )
        }
    };
    decision.notes.push(note);
    next.switching = None;
    next.writable = Some((change.to.clone(), observed.time));
    next.demoted = change.from.clone().map(|from| (from, observed.at));
}

/// Seconds from the last moment the old primary was seen accepting writes to this look.
fn write_gap(observed: &Observed, next: &Memory, change: &Change) -> Option<f64> {
    let (pod, at) = next.writable.as_ref()?;
    (change.from.as_deref() == Some(pod.as_str())).then(|| rounded(observed.time.duration_since(*at).as_secs_f64()))
}

/// What a change of primary did, why that server, and what its promotion waited for.
pub fn change_message(change: &Change, apply_wait: f64) -> String {
    let what = match change.kind {
        ChangeKind::Failover => "failed over",
        ChangeKind::Switchover => "switched over",
    };
    let mut message = format!("{what} from {} to {}", change.from.as_deref().unwrap_or("none"), change.to);
    if !change.election.is_empty() {
        message.push_str(&format!(": {}", change.election));
    }
    match change.backlog {
        0 => message.push_str("; its promotion waited for nothing to apply"),
        backlog => message.push_str(&format!(
            "; its promotion waited {apply_wait:.1} s for it to apply the {backlog} transactions it had received"
        )),
    }
    message
}

/// Records a switchover that will not happen, and tells it.
fn refused(observed: &Observed, decision: &mut Decision, next: &Memory, refusal: &Refusal) {
    let record = RoleChange {
        time: Time(observed.time),
        from: next.primary.clone(),
        to: None,
        reason: refusal.reason.to_string(),
        message: Some(refusal.message.clone()),
        write_gap_seconds: None,
        apply_wait_seconds: None,
        request: Some(refusal.request.clone()),
    };
    decision.switchover = Some((record, refusal.asked_by));
    let note =
        Note { warning: true, reason: "SwitchoverRefused", action: "Switchover", message: refusal.message.clone() };
    decision.notes.push(note);
}

/// A promotion that waits for its server to apply what it received: as decided at the first
/// look that waited, and since then, for its record.
fn note_applying(decision: &Decision, observed: &Observed, next: &mut Memory) {
    match &decision.pending {
        Some(pending) if next.applying.as_ref().is_none_or(|(waiting, _)| waiting.to != pending.to) => {
            next.applying = Some((pending.clone(), observed.at));
        }
        Some(_) => {}
        None => next.applying = None,
    }
}

/// Tells of each server that starts replicating from a replica rather than from the primary:
/// an empty one being seeded, which reads nothing of the primary.
fn note_seeding(decision: &mut Decision) {
    let Some(primary) = decision.primary.clone() else { return };
    let notes: Vec<Note> = decision
        .acts
        .iter()
        .filter_map(|act| match act {
            Act::Replicate { member, upstream } if *upstream != primary => {
                let message =
                    format!("MySQL server {member} is seeded from replica {upstream}, not from the primary {primary}");
                Some(Note::replication("Seeding", message))
            }
            _ => None,
        })
        .collect();
    decision.notes.extend(notes);
}

/// Tells, once, of each server newly found holding transactions the primary lacks: it takes no
/// traffic and does not rejoin until they are dealt with (docs/high-availability.md).
fn note_divergence(observed: &Observed, decision: &mut Decision, next: &mut Memory) {
    let diverged: Vec<(String, Option<String>)> = decision
        .standings
        .iter()
        .filter(|s| s.role == MemberRole::Diverged)
        .map(|s| (s.member.clone(), s.message.clone()))
        .collect();
    next.told_diverged.retain(|member| diverged.iter().any(|(name, _)| name == member));
    for (member, message) in diverged {
        if observed.shown_diverged.contains(&member) || !next.told_diverged.insert(member.clone()) {
            continue;
        }
        let message = format!("MySQL server {member} {}", message.unwrap_or_default());
        decision.notes.push(Note { warning: true, ..Note::replication("Diverged", message) });
    }
}

/// Adds this look's positions of every answering server to their samples, against the primary
/// the decision leaves (when it takes writes), and judges how each follows it.
fn follow(observed: &Observed, decision: &mut Decision, next: &mut Memory) {
    let primary = decision.primary.as_deref().and_then(|p| server_of(&observed.members, p));
    if let Some(primary) = primary.filter(|s| !s.read_only) {
        let committed = primary.position.transactions();
        for member in &observed.members {
            let Some(server) = &member.server else { continue };
            let sample = Sample {
                at: observed.at,
                primary: committed,
                applied: server.position.transactions(),
                received: server.received().transactions(),
            };
            following::record(next.samples.entry(member.name.clone()).or_default(), sample);
        }
    }
    next.samples.retain(|name, _| observed.members.iter().any(|m| &m.name == name));
    decision.followings =
        next.samples.iter().map(|(name, samples)| (name.clone(), following::following(samples))).collect();
}

/// Whether a problem means something under way that the next look may finish.
fn under_way(problem: &Option<(&'static str, String)>) -> bool {
    use reason::{ELECTION_WAITS, FAILOVER_WAITS, PRIMARY_SILENT, PROMOTING};
    problem
        .as_ref()
        .is_some_and(|(reason, _)| [PROMOTING, FAILOVER_WAITS, ELECTION_WAITS, PRIMARY_SILENT].contains(reason))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Instant;

    /// The time `seconds` after `start`, for the tables of cases.
    fn after(start: Instant, seconds: u64) -> Instant {
        start + Duration::from_secs(seconds)
    }

    use visitors_api::visitors_app::Durability;

    use super::*;
    use crate::replication::model::{BackupSeed, Extraction, Member, UPDATE_REQUEST};
    use crate::replication::server::{History, Position, Replication, Server};
    use crate::replication::sql::Flavor;

    fn host(name: &str) -> String {
        format!("{name}.ex-mysql-headless.shop.svc")
    }

    fn server(applied: &str, read_only: bool) -> Server {
        Server {
            flavor: Flavor::MariaDb,
            server_id: 100,
            read_only,
            position: Position::parse(applied).unwrap(),
            history: History::parse(Flavor::MariaDb, applied).unwrap(),
            semi_sync_armed: !read_only,
            semi_sync_clients: if read_only { 0 } else { 2 },
            semi_sync_waiting: 0,
            ssl_ca: None,
            has_replication_user: true,
            replica: None,
            first_binlog: None,
        }
    }

    fn member(ordinal: u32, server: Option<Server>) -> Member {
        let name = format!("ex-mysql-{ordinal}");
        Member {
            host: host(&name),
            name,
            pod: PodState::Ready,
            server: server.map(|mut s| {
                s.server_id = 100 + ordinal;
                s
            }),
            server_id: 100 + ordinal,
            extraction: Extraction::NotStarted,
            reseeding: false,
            backup_seed: BackupSeed::NotStarted,
            outdated: false,
        }
    }

    fn replica(ordinal: u32, received: &str, applied: &str, receiving: bool) -> Member {
        let mut s = server(applied, true);
        s.replica = Some(Replication {
            upstream_host: host("ex-mysql-0"),
            receiving,
            connected: receiving,
            applying: true,
            received: Position::parse(received).unwrap(),
            lag_seconds: Some(0),
            error: None,
        });
        member(ordinal, Some(s))
    }

    /// A healthy app of three at `applied`: `ex-mysql-0` the primary.
    fn healthy(applied: &str) -> Vec<Member> {
        vec![
            member(0, Some(server(applied, false))),
            replica(1, applied, applied, true),
            replica(2, applied, applied, true),
        ]
    }

    fn observed(members: Vec<Member>, at: Instant, second: i64) -> Observed {
        Observed {
            members,
            recorded_primary: Some("ex-mysql-0".into()),
            durability: Durability::Acknowledged,
            annotated_switchover: None,
            answered_request: None,
            shown_diverged: BTreeSet::new(),
            seed_backup: None,
            at,
            time: jiff::Timestamp::from_second(1_800_000_000 + second).unwrap(),
        }
    }

    fn remembering(primary: &str) -> Memory {
        Memory { primary: Some(primary.into()), ..Memory::default() }
    }

    fn fenced(members: &mut [Member], ordinal: usize) {
        let server = members[ordinal].server.as_mut().unwrap();
        server.read_only = true;
    }

    /// Each case: how long ago the switchover's primary was fenced, and whether it is given up
    /// (a refusal recorded and told, nothing remembered), or goes on (the target waited for).
    #[test]
    fn a_switchover_whose_target_does_not_catch_up_is_given_up_after_its_limit() {
        let start = Instant::now();
        let switchover = Switchover::requested("r1".into(), Some("ex-mysql-2".into()));
        for (since, given_up) in [(5, false), (29, false), (31, true), (600, true)] {
            let now = after(start, 600);
            let mut members = healthy("0-100-9");
            fenced(&mut members, 0);
            members[2] = replica(2, "0-100-9", "0-100-7", true);
            let memory = Memory {
                switching: Some((switchover.clone(), now - Duration::from_secs(since))),
                ..remembering("ex-mysql-0")
            };
            let (decision, next) = decide(&observed(members, now, 600), &memory);
            let refused = decision.switchover.as_ref().is_some_and(|(record, _)| record.to.is_none());
            assert_eq!(refused, given_up, "{since} s: {decision:?}");
            assert_eq!(next.switching.is_none(), given_up, "{since} s");
            if given_up {
                let (record, asked_by) = decision.switchover.clone().unwrap();
                assert_eq!(
                    (record.reason.as_str(), asked_by),
                    (reason::TARGET_NOT_A_HEALTHY_REPLICA, reason::REQUESTED)
                );
                assert!(decision.notes.iter().any(|n| n.reason == "SwitchoverRefused" && n.warning));
            } else {
                assert!(decision.acts.iter().any(|a| matches!(a, Act::WaitApplied { .. })), "{:?}", decision.acts);
            }
        }
    }

    /// Each case: the primary's pod and server at this look, the silent looks before, and the
    /// count after; a server that answers writable is when the primary was last seen writable.
    #[test]
    fn a_silent_primary_is_counted_and_a_writable_one_remembered() {
        let start = Instant::now();
        let cases: [(PodState, bool, u32, u32, bool); 5] = [
            (PodState::Ready, true, 0, 0, true),
            (PodState::Ready, false, 0, 1, false),
            (PodState::Ready, false, 1, 2, false),
            (PodState::NotReady, false, 1, 1, false),
            (PodState::Ready, true, 1, 0, true),
        ];
        for (pod, answers, before, after_look, writable) in cases {
            let mut members = healthy("0-100-9");
            members[0].pod = pod;
            if !answers {
                members[0].server = None;
            }
            let memory = Memory { primary_silent: before, ..remembering("ex-mysql-0") };
            let (_, next) = decide(&observed(members, start, 10), &memory);
            assert_eq!(next.primary_silent, after_look, "{pod:?} answers {answers}, {before} before");
            assert_eq!(next.writable.is_some(), writable, "{pod:?} answers {answers}");
        }
    }

    /// Each case: the restarted member's pod at this look (outdated, ready), how long ago it was
    /// restarted, whether that restart is still remembered, and whether it is restarted again
    /// (once its limit passed, a server still on the old template is).
    #[test]
    fn a_restart_on_the_new_template_is_remembered_until_its_pod_runs_it_or_its_limit() {
        let start = Instant::now();
        let cases = [
            (true, true, 10, true, false),
            (false, false, 10, true, false),
            (false, true, 10, false, false),
            (true, true, 601, false, true),
        ];
        for (outdated, ready, since, remembered, again) in cases {
            let now = after(start, 1000);
            let mut members = healthy("0-100-9");
            members[2].outdated = outdated;
            if !ready {
                members[2].pod = PodState::NotReady;
            }
            let memory = Memory {
                updating: Some(("ex-mysql-2".into(), now - Duration::from_secs(since))),
                ..remembering("ex-mysql-0")
            };
            let (decision, next) = decide(&observed(members, now, 1000), &memory);
            let restarted = decision.acts.contains(&Act::Update("ex-mysql-2".into()));
            let kept = next.updating.as_ref().is_some_and(|(_, at)| *at < now);
            assert_eq!((kept, restarted), (remembered, again), "outdated {outdated}, ready {ready}, {since} s");
            assert_eq!(next.updating.as_ref().is_some_and(|(_, at)| *at == now), again, "a new restart is remembered");
        }
    }

    /// Each case: the annotation's request, the request answered, the switchover under way, and
    /// whether the request is started (its primary fenced).
    #[test]
    fn an_annotations_switchover_is_carried_out_once() {
        let start = Instant::now();
        let under_way = |request: &str| Some((Switchover::requested(request.into(), None), start));
        let cases = [
            ("a new request", Some("second"), Some("first"), None, true),
            ("answered", Some("second"), Some("second"), None, false),
            ("under way", Some("second"), Some("first"), under_way("second"), false),
            ("no annotation", None, Some("first"), None, false),
        ];
        for (case, annotation, answered, switching, started) in cases {
            let mut seen = observed(healthy("0-100-9"), start, 0);
            seen.annotated_switchover = annotation.map(|a| (a.to_string(), None));
            seen.answered_request = answered.map(Into::into);
            let memory = Memory { switching: switching.clone(), ..remembering("ex-mysql-0") };
            let (decision, _) = decide(&seen, &memory);
            let fenced = decision.acts.contains(&Act::Fence("ex-mysql-0".into()));
            assert_eq!(fenced, started, "{case}: {:?}", decision.acts);
        }
        assert_eq!(UPDATE_REQUEST, "rolling update", "a rolling update's request never answers an annotation");
    }

    /// A failover: the replicas stop receiving; the chosen one, with transactions left to apply,
    /// is waited for over two looks; then promoted, its record holding the write gap since the
    /// old primary was last seen writable and the promotion's wait since the first look that
    /// waited; the old primary is remembered as demoted.
    #[test]
    fn a_failover_records_its_write_gap_and_its_wait_for_apply() {
        let start = Instant::now();
        let mut members = healthy("0-100-12");
        let (_, memory) = decide(&observed(members.clone(), start, 0), &remembering("ex-mysql-0"));
        assert_eq!(memory.writable.as_ref().map(|(pod, _)| pod.as_str()), Some("ex-mysql-0"));

        members[0].pod = PodState::Missing;
        members[0].server = None;
        let (first, memory) = decide(&observed(members.clone(), after(start, 2), 2), &memory);
        assert!(first.acts.iter().all(|a| matches!(a, Act::StopReceiving(_))) && first.busy, "{first:?}");

        members[1] = replica(1, "0-100-12", "0-100-10", false);
        members[2] = replica(2, "0-100-11", "0-100-11", false);
        let (waiting, memory) = decide(&observed(members.clone(), after(start, 3), 3), &memory);
        assert_eq!(waiting.acts, [Act::WaitApplied { member: "ex-mysql-1".into(), position: "0-100-12".into() }]);
        assert!(waiting.change.is_none() && waiting.look_again && waiting.busy);
        let (again, memory) = decide(&observed(members.clone(), after(start, 4), 4), &memory);
        assert!(again.change.is_none(), "still waiting");
        let applying = memory.applying.as_ref().map(|(change, since)| (change.to.as_str(), change.backlog, *since));
        assert_eq!(applying, Some(("ex-mysql-1", 2, after(start, 3))));

        members[1] = replica(1, "0-100-12", "0-100-12", false);
        let (promoted, memory) = decide(&observed(members, after(start, 5), 5), &memory);
        let record = promoted.failover.clone().expect("a failover recorded");
        assert_eq!(
            (record.to.as_deref(), record.write_gap_seconds, record.apply_wait_seconds),
            (Some("ex-mysql-1"), Some(5.0), Some(2.0))
        );
        let message = record.message.unwrap();
        assert!(message.contains("ex-mysql-1 had received every transaction"), "{message}");
        assert!(message.contains("the least left to apply (2)"), "as decided at its first look: {message}");
        assert!(message.contains("waited 2.0 s for it to apply the 2 transactions"), "{message}");
        assert!(promoted.notes.iter().any(|n| n.reason == "Failover"));
        assert_eq!(memory.primary.as_deref(), Some("ex-mysql-1"));
        assert_eq!(memory.demoted.as_ref().map(|(m, _)| m.as_str()), Some("ex-mysql-0"));
        assert!(memory.applying.is_none());
    }

    /// Each case: seconds since the old primary was demoted; whether its client sessions are
    /// closed at this look, and whether the next look comes soon.
    #[test]
    fn a_demoted_servers_clients_are_sent_on_at_each_look_for_a_while() {
        let start = Instant::now();
        for (since, closed) in [(1, true), (9, true), (11, false)] {
            let now = after(start, 100);
            let mut members = healthy("0-100-9");
            members[0] = replica(0, "0-100-9", "0-100-9", true);
            members[1] = member(1, Some(server("0-100-9", false)));
            for m in &mut members {
                if let Some(r) = m.server.as_mut().and_then(|s| s.replica.as_mut()) {
                    r.upstream_host = host("ex-mysql-1");
                }
            }
            let memory = Memory {
                demoted: Some(("ex-mysql-0".into(), now - Duration::from_secs(since))),
                ..remembering("ex-mysql-1")
            };
            let (decision, _) = decide(&observed(members, now, 100), &memory);
            let disconnects = decision.acts.contains(&Act::DisconnectClients("ex-mysql-0".into()));
            assert_eq!((disconnects, decision.busy), (closed, closed), "{since} s: {:?}", decision.acts);
        }
    }

    /// A server newly diverged is told once; one the status already shows is not told again.
    #[test]
    fn a_diverged_server_is_told_once() {
        let start = Instant::now();
        let mut members = healthy("0-100-9");
        let mut old = server("0-102-10", true);
        old.history = History::parse(Flavor::MariaDb, "0-100-9,0-102-10").unwrap();
        members[2] = member(2, Some(old));
        let (first, memory) = decide(&observed(members.clone(), start, 0), &remembering("ex-mysql-0"));
        assert_eq!(first.notes.iter().filter(|n| n.reason == "Diverged").count(), 1, "{:?}", first.notes);
        let (second, _) = decide(&observed(members.clone(), after(start, 2), 2), &memory);
        assert!(!second.notes.iter().any(|n| n.reason == "Diverged"), "told once: {:?}", second.notes);
        let mut shown = observed(members, start, 0);
        shown.shown_diverged.insert("ex-mysql-2".into());
        let (after_restart, _) = decide(&shown, &Memory::default());
        assert!(!after_restart.notes.iter().any(|n| n.reason == "Diverged"), "the status shows it already");
    }

    /// The memory's primary is newer than the status's (a status write that failed); a
    /// controller that restarted has only the status's.
    #[test]
    fn the_primary_is_the_one_decided_last_else_the_one_the_status_records() {
        let start = Instant::now();
        let mut members = healthy("0-100-9");
        members.swap(0, 1);
        let mut seen = observed(members, start, 0);
        seen.recorded_primary = Some("ex-mysql-1".into());
        let (decision, _) = decide(&seen, &Memory::default());
        assert_eq!(decision.primary.as_deref(), Some("ex-mysql-1"));
        let (decision, _) = decide(&seen, &remembering("ex-mysql-0"));
        assert_eq!(decision.primary.as_deref(), Some("ex-mysql-0"));
    }

    /// Each case: the decision's problem, and whether the next look comes soon.
    #[test]
    fn something_under_way_brings_the_next_look_sooner() {
        let cases = [
            (Some(reason::PROMOTING), true),
            (Some(reason::FAILOVER_WAITS), true),
            (Some(reason::ELECTION_WAITS), true),
            (Some(reason::PRIMARY_SILENT), true),
            (Some(reason::SEEDING), false),
            (Some(reason::DIVERGED), false),
            (None, false),
        ];
        for (problem, busy) in cases {
            assert_eq!(under_way(&problem.map(|p| (p, String::new()))), busy, "{problem:?}");
        }
    }

    /// Positions of every answering server against a writable primary's go into the samples;
    /// none while the primary does not take writes.
    #[test]
    fn every_look_measures_how_each_server_follows_a_writable_primary() {
        let start = Instant::now();
        let (decision, memory) = decide(&observed(healthy("0-100-9"), start, 0), &remembering("ex-mysql-0"));
        assert_eq!(memory.samples.len(), 3);
        assert_eq!(decision.followings.get("ex-mysql-1").map(|f| f.behind), Some(0));
        let mut members = healthy("0-100-12");
        members[1] = replica(1, "0-100-12", "0-100-10", true);
        let (decision, memory) = decide(&observed(members.clone(), after(start, 2), 2), &memory);
        assert_eq!(decision.followings.get("ex-mysql-1").map(|f| (f.behind, f.backlog)), Some((2, 2)));
        assert_eq!(memory.samples["ex-mysql-1"].len(), 2);
        fenced(&mut members, 0);
        let (_, fenced_memory) = decide(&observed(members, after(start, 4), 4), &memory);
        assert_eq!(fenced_memory.samples["ex-mysql-1"].len(), 2, "no sample against a fenced primary");
    }
}
