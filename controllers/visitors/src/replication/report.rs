//! How a replicated app's servers stand after a look, for its status and metrics, and the
//! records of the role changes the looks made or refused.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::visitors_app::{MemberRole, ReplicationMember, RoleChange};

use super::decide::{self, Change, ChangeKind, Decision, Member, Refusal};
use super::following::{self, Following};

/// How the servers stand after a look, for the status.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    pub primary: Option<String>,
    pub members: Vec<ReplicationMember>,
    /// Replicas replicating from the primary.
    pub ready_replicas: i32,
    /// The primary waits for acknowledgements and some replica gives them.
    pub acknowledged: bool,
    /// Why the servers are not all as they should be: a condition reason and message.
    pub problem: Option<(&'static str, String)>,
    /// A failover these looks made.
    pub failover: Option<RoleChange>,
    /// A switchover these looks made or refused.
    pub switchover: Option<RoleChange>,
    /// The switchover request of the app's annotation these looks answered (done or refused).
    pub answered_request: Option<String>,
    /// Something is under way: look again soon.
    pub busy: bool,
    /// The primary's commits a second.
    pub commit_rate: Option<f64>,
    /// What a failover now would wait for (see `following::expected_failover_wait`).
    pub expected_failover_wait: Option<f64>,
    /// Replicas that fall further behind the primary for minutes.
    pub falling_behind: Vec<String>,
}

impl Report {
    /// Records a switchover made or refused, and the annotation's request it answers, if an
    /// annotation (not a rolling update) asked for it.
    pub(super) fn switched(&mut self, record: RoleChange, asked_by: &str) {
        if asked_by == decide::reason::REQUESTED {
            self.answered_request = record.request.clone();
        }
        self.switchover = Some(record);
    }
}

/// The record of `change`: its write gap, and the seconds its promotion waited for the new
/// primary to apply what it had received.
pub(super) fn changed(change: &Change, gap: Option<f64>, apply_wait: f64) -> RoleChange {
    RoleChange {
        time: Time(jiff::Timestamp::now()),
        from: change.from.clone(),
        to: Some(change.to.clone()),
        reason: change.reason.to_string(),
        message: Some(change_message(change, apply_wait)),
        write_gap_seconds: gap,
        apply_wait_seconds: Some(apply_wait),
        request: change.request.clone(),
    }
}

/// What a change of primary did, why that server, and what its promotion waited for.
pub(super) fn change_message(change: &Change, apply_wait: f64) -> String {
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

pub(super) fn refused(primary: &Option<String>, refusal: &Refusal) -> RoleChange {
    RoleChange {
        time: Time(jiff::Timestamp::now()),
        from: primary.clone(),
        to: None,
        reason: refusal.reason.to_string(),
        message: Some(refusal.message.clone()),
        write_gap_seconds: None,
        apply_wait_seconds: None,
        request: Some(refusal.request.clone()),
    }
}

/// The report's members, counts and problem, from the last decision and look, and how each
/// server follows the primary.
pub(super) fn fill(
    report: &mut Report,
    decision: &Decision,
    members: &[Member],
    followings: &BTreeMap<String, Following>,
) {
    let primary_name = report.primary.clone().unwrap_or_default();
    let primary = members.iter().find(|m| m.name == primary_name).and_then(|m| m.server.as_ref());
    report.acknowledged = primary.is_some_and(|s| s.semi_sync_armed && s.semi_sync_clients > 0);
    let follows = |role: MemberRole| matches!(role, MemberRole::Replica | MemberRole::Seeding);
    report.members = decision
        .standings
        .iter()
        .map(|standing| {
            let server = members.iter().find(|m| m.name == standing.member).and_then(|m| m.server.as_ref());
            let follows_at = followings.get(&standing.member).filter(|_| follows(standing.role) && primary.is_some());
            ReplicationMember {
                name: standing.member.clone(),
                role: standing.role,
                lag_seconds: server.and_then(|s| s.replica.as_ref()).and_then(|r| r.lag_seconds),
                message: standing.message.clone(),
                received: server.filter(|s| s.replica.is_some()).map(|s| s.received().to_string()),
                applied: server.filter(|_| follows(standing.role)).map(|s| s.position.to_string()),
                backlog: follows_at.map(|p| p.backlog as i64),
                behind_primary: follows_at.map(|p| p.behind as i64),
                apply_rate: follows_at.and_then(|p| p.apply_rate).map(rounded),
                catch_up_seconds: follows_at.and_then(|p| p.catch_up_seconds).filter(|s| *s > 0.0).map(rounded),
                falling_behind: follows_at.is_some_and(|p| p.falling_behind),
            }
        })
        .collect();
    report.ready_replicas = decision.standings.iter().filter(|s| s.role == MemberRole::Replica).count() as i32;
    report.problem = decision.problem.clone();
    report.commit_rate =
        followings.get(&primary_name).and_then(|p| p.apply_rate).filter(|_| primary.is_some()).map(rounded);
    report.falling_behind = report.members.iter().filter(|m| m.falling_behind).map(|m| m.name.clone()).collect();
    let replicas: Vec<&Member> = members
        .iter()
        .filter(|m| report.members.iter().any(|r| r.name == m.name && r.role == MemberRole::Replica))
        .collect();
    report.expected_failover_wait = decide::failover_candidate(&replicas)
        .and_then(|(member, backlog)| {
            following::expected_failover_wait(backlog, followings.get(&member.name)?.apply_rate)
        })
        .map(rounded);
}

/// A rate or a duration to one decimal: what the status shows.
fn rounded(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// A role change that answers `request`, and no more, for tests.
#[cfg(test)]
pub(super) fn asked_by(request: &str) -> RoleChange {
    RoleChange {
        time: Time(jiff::Timestamp::UNIX_EPOCH),
        from: None,
        to: None,
        reason: String::new(),
        message: None,
        write_gap_seconds: None,
        apply_wait_seconds: None,
        request: Some(request.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_switchover_an_annotation_asked_for_answers_it() {
        let mut report = Report::default();
        report.switched(asked_by("second"), decide::reason::REQUESTED);
        report.switched(asked_by(decide::UPDATE_REQUEST), decide::reason::ROLLING_UPDATE);
        assert_eq!(report.answered_request.as_deref(), Some("second"));
        assert_eq!(report.switchover.and_then(|s| s.request).as_deref(), Some(decide::UPDATE_REQUEST));
    }
}
