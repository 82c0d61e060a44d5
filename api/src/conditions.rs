//! Standard `metav1.Condition` helpers. A condition's `lastTransitionTime` moves only when its
//! status changes, so writing an unchanged status is a no-op and never re-triggers a reconcile.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::InvalidSpec;

pub const READY: &str = "Ready";
pub const DATABASE_READY: &str = "DatabaseReady";
pub const BACKEND_READY: &str = "BackendReady";
pub const FRONTEND_READY: &str = "FrontendReady";
/// A replicated app's replicas all replicate from its primary.
pub const REPLICATING: &str = "Replicating";
/// A replicated app's primary waits for a replica's acknowledgement of each commit, and one
/// gives it.
pub const WRITES_ACKNOWLEDGED: &str = "WritesAcknowledged";
/// A replicated app's replica falls further behind its primary for minutes: True names it (it
/// applies fewer transactions than the primary commits); False while every replica keeps up.
pub const REPLICA_FALLING_BEHIND: &str = "ReplicaFallingBehind";
/// Condition types whose True status is the problem (the others' is False).
pub const TRUE_WHEN_WRONG: [&str; 1] = [REPLICA_FALLING_BEHIND];

/// Whether `condition` tells of a problem: False, or True for the types of [`TRUE_WHEN_WRONG`].
pub fn tells_a_problem(condition: &Condition) -> bool {
    match TRUE_WHEN_WRONG.contains(&condition.type_.as_str()) {
        true => condition.status == "True",
        false => condition.status == "False",
    }
}

/// An operation (a backup run, a restore): True while it waits to start (the reason names what
/// for), False once its Job runs.
pub const PENDING: &str = "Pending";
/// Reason used on every condition when the spec is invalid.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";

/// The reasons of an operation's conditions (a backup run, a restore): waiting, started, and
/// how its Job ended.
pub mod reason {
    /// `Pending` False: the Job was created.
    pub const STARTED: &str = "Started";
    /// `Ready` False while the Job runs.
    pub const RUNNING: &str = "Running";
    /// `Ready` True: the agent reported success.
    pub const SUCCEEDED: &str = "Succeeded";

    // What an operation waits for before its Job.
    pub const WAITING_FOR_VISITORS_APP: &str = "WaitingForVisitorsApp";
    pub const WAITING_FOR_CREDENTIALS_SECRET: &str = "WaitingForCredentialsSecret";
    pub const WAITING_FOR_STORAGE_SECRET: &str = "WaitingForStorageSecret";
    pub const WAITING_FOR_BACKUP_VOLUME: &str = "WaitingForBackupVolume";
    /// The Secret of the encryption keys is missing, or lacks the key the run needs.
    pub const WAITING_FOR_ENCRYPTION_KEY: &str = "WaitingForEncryptionKey";
    /// A backup run that reads only a replica finds none healthy.
    pub const WAITING_FOR_REPLICA: &str = "WaitingForReplica";
    /// Another operation holds the database's lock.
    pub const WAITING_FOR_DATABASE_LOCK: &str = "WaitingForDatabaseLock";
    /// A Job of the operation's name exists but is someone else's.
    pub const JOB_NAME_TAKEN: &str = "JobNameTaken";

    // How a Job ended other than in success.
    pub const JOB_DELETED: &str = "JobDeleted";
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    pub const INVALID_SUMMARY: &str = "InvalidSummary";
    pub const NO_SUMMARY: &str = "NoSummary";
    pub const AGENT_FAILED: &str = "AgentFailed";
    pub const NODE_LOST: &str = "NodeLost";
    pub const POD_PREEMPTED: &str = "PodPreempted";
    pub const POD_EVICTED: &str = "PodEvicted";
    pub const OUT_OF_MEMORY: &str = "OutOfMemory";
    pub const POD_DELETED: &str = "PodDeleted";
    pub const POD_LOST: &str = "PodLost";
    pub const JOB_FAILED: &str = "JobFailed";
}

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Status {
    fn from(value: bool) -> Self {
        if value { Status::True } else { Status::False }
    }
}

/// The desired state of one condition, before it is merged into a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: Status,
    /// CamelCase reason, for example `WaitingForDatabase`.
    pub reason: &'a str,
    /// One sentence a user can act on. Never holds a time or a counter that changes each
    /// reconcile.
    pub message: String,
}

impl<'a> Desired<'a> {
    /// A condition that holds (`True`).
    pub fn met(type_: &'a str, reason: &'a str, message: impl Into<String>) -> Self {
        Desired { type_, status: Status::True, reason, message: message.into() }
    }

    /// A condition that does not hold (`False`).
    pub fn unmet(type_: &'a str, reason: &'a str, message: impl Into<String>) -> Self {
        Desired { type_, status: Status::False, reason, message: message.into() }
    }
}

/// Sets `desired` in `conditions`, keeping `lastTransitionTime` when the status is unchanged.
pub fn set(conditions: &mut Vec<Condition>, desired: Desired<'_>, observed_generation: Option<i64>, now: Time) {
    let existing = conditions.iter_mut().find(|c| c.type_ == desired.type_);
    let status = desired.status.as_str().to_string();
    match existing {
        Some(condition) => {
            if condition.status != status {
                condition.last_transition_time = now;
            }
            condition.status = status;
            condition.reason = desired.reason.to_string();
            condition.message = desired.message;
            condition.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: desired.type_.to_string(),
            status,
            reason: desired.reason.to_string(),
            message: desired.message,
            observed_generation,
            last_transition_time: now,
        }),
    }
}

/// The `Ready` condition of a spec that failed validation: False, reason `InvalidSpec`, and a
/// message naming every bad field.
pub fn invalid_spec(invalid: &InvalidSpec) -> Desired<'static> {
    Desired { type_: READY, status: Status::False, reason: REASON_INVALID_SPEC, message: invalid.to_string() }
}

/// Finds a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of that type is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn ready(status: Status, message: &str) -> Desired<'static> {
        Desired { type_: READY, status, reason: "Test", message: message.into() }
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut conditions = Vec::new();
        set(&mut conditions, ready(Status::False, "waiting"), Some(1), at(10));
        set(&mut conditions, ready(Status::False, "still waiting"), Some(2), at(20));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(10));
        assert_eq!(conditions[0].message, "still waiting");
        assert_eq!(conditions[0].observed_generation, Some(2));
        set(&mut conditions, ready(Status::True, "ok"), Some(2), at(30));
        assert_eq!(conditions[0].last_transition_time, at(30));
        assert!(is_true(&conditions, READY));
        assert!(!is_true(&conditions, DATABASE_READY));
    }

    /// Each case: a condition's type and status, and whether it tells of a problem.
    #[test]
    fn a_problem_is_false_but_for_the_conditions_that_are_true_when_wrong() {
        let cases = [
            (READY, Status::False, true),
            (READY, Status::True, false),
            (REPLICA_FALLING_BEHIND, Status::True, true),
            (REPLICA_FALLING_BEHIND, Status::False, false),
        ];
        for (type_, status, problem) in cases {
            let mut conditions = Vec::new();
            set(&mut conditions, Desired { type_, status, reason: "Test", message: String::new() }, None, at(1));
            assert_eq!(tells_a_problem(&conditions[0]), problem, "{type_} {status:?}");
        }
    }
}
