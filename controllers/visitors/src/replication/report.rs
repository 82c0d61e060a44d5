//! How a replicated app's servers stand after the looks of a reconcile, for its status and
//! metrics: the last decision's standings, problem and measurements, and the role changes the
//! looks made or refused. Pure.

use std::collections::BTreeMap;

use visitors_api::visitors_app::{MemberRole, ReplicationMember, RoleChange};

use super::following::{self, Following};
use super::model::{Decision, Member, Observed, reason, server_of};
use super::rules;

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
    /// Adds what a look decided: the primary it leaves, the changes it recorded, how the servers
    /// stand after it.
    pub fn add(&mut self, decision: &Decision, observed: &Observed) {
        if let Some(record) = &decision.failover {
            self.failover = Some(record.clone());
        }
        if let Some((record, asked_by)) = &decision.switchover {
            self.switched(record.clone(), asked_by);
        }
        self.primary = decision.primary.clone();
        self.busy = decision.busy;
        fill(self, decision, &observed.members, &decision.followings);
    }

    /// Records a switchover made or refused, and the annotation's request it answers, if an
    /// annotation (not a rolling update) asked for it.
    fn switched(&mut self, record: RoleChange, asked_by: &str) {
        if asked_by == reason::REQUESTED {
            self.answered_request = record.request.clone();
        }
        self.switchover = Some(record);
    }
}

/// The report's members, counts and problem, from the last decision and look, and how each
/// server follows the primary.
fn fill(report: &mut Report, decision: &Decision, members: &[Member], followings: &BTreeMap<String, Following>) {
    let primary_name = report.primary.clone().unwrap_or_default();
    let primary = server_of(members, &primary_name);
    report.acknowledged = primary.is_some_and(|s| s.semi_sync_armed && s.semi_sync_clients > 0);
    let follows = |role: MemberRole| matches!(role, MemberRole::Replica | MemberRole::Seeding);
    report.members = decision
        .standings
        .iter()
        .map(|standing| {
            let server = server_of(members, &standing.member);
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
    report.expected_failover_wait = rules::failover_candidate(&replicas)
        .and_then(|(member, backlog)| {
            following::expected_failover_wait(backlog, followings.get(&member.name)?.apply_rate)
        })
        .map(rounded);
}

/// A rate or a duration to one decimal: what the status shows.
pub fn rounded(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// A role change that answers `request`, and no more, for tests.
#[cfg(test)]
fn asked_by(request: &str) -> RoleChange {
    RoleChange {
        time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
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
        report.switched(asked_by("second"), reason::REQUESTED);
        report.switched(asked_by(crate::replication::model::UPDATE_REQUEST), reason::ROLLING_UPDATE);
        assert_eq!(report.answered_request.as_deref(), Some("second"));
        assert_eq!(
            report.switchover.and_then(|s| s.request).as_deref(),
            Some(crate::replication::model::UPDATE_REQUEST)
        );
    }
}
