//! How a replicated app's servers stand after a look, for its status and metrics, and the
//! records of the role changes the looks made or refused.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use visitors_api::visitors_app::{MemberRole, ReplicationMember, RoleChange};

use super::decide::{self, Change, ChangeKind, Decision, Member, Refusal};

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

pub(super) fn changed(change: &Change, gap: Option<f64>) -> RoleChange {
    let what = match change.kind {
        ChangeKind::Failover => "failed over",
        ChangeKind::Switchover => "switched over",
    };
    RoleChange {
        time: Time(jiff::Timestamp::now()),
        from: change.from.clone(),
        to: Some(change.to.clone()),
        reason: change.reason.to_string(),
        message: Some(format!("{what} from {} to {}", change.from.as_deref().unwrap_or("none"), change.to)),
        write_gap_seconds: gap,
        request: change.request.clone(),
    }
}

pub(super) fn refused(primary: &Option<String>, refusal: &Refusal) -> RoleChange {
    RoleChange {
        time: Time(jiff::Timestamp::now()),
        from: primary.clone(),
        to: None,
        reason: refusal.reason.to_string(),
        message: Some(refusal.message.clone()),
        write_gap_seconds: None,
        request: Some(refusal.request.clone()),
    }
}

/// The report's members, counts and problem, from the last decision and look.
pub(super) fn fill(report: &mut Report, decision: &Decision, members: &[Member]) {
    let primary = members.iter().find(|m| Some(&m.name) == report.primary.as_ref()).and_then(|m| m.server.as_ref());
    report.acknowledged = primary.is_some_and(|s| s.semi_sync_armed && s.semi_sync_clients > 0);
    report.members = decision
        .standings
        .iter()
        .map(|standing| {
            let server = members.iter().find(|m| m.name == standing.member).and_then(|m| m.server.as_ref());
            ReplicationMember {
                name: standing.member.clone(),
                role: standing.role,
                lag_seconds: server.and_then(|s| s.replica.as_ref()).and_then(|r| r.lag_seconds),
                message: standing.message.clone(),
            }
        })
        .collect();
    report.ready_replicas = decision.standings.iter().filter(|s| s.role == MemberRole::Replica).count() as i32;
    report.problem = decision.problem.clone();
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
