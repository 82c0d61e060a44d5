//! The status of an operation (a backup run, a restore) at each step, written once for both
//! kinds: waiting, started, ended, or refused for an invalid spec. Pure: the reconcile passes
//! what it saw and the time. Each controller adds what its kind records besides (where a backup
//! is stored, which backup a restore read) and sets `Ready` itself where its wording differs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use visitors_agent_contract::summary::AgentSummary;
use visitors_api::InvalidSpec;
use visitors_api::conditions::{self, Desired, PENDING, READY, Status, reason};
use visitors_api::operation::{OperationKind, OperationPhase, OperationStatus};

use crate::agent_job::JobEnd;

/// A status being written for `object` at `now`.
pub struct Update<'a, K: OperationKind> {
    pub object: &'a K,
    pub now: Time,
    pub status: K::Status,
}

impl<'a, K: OperationKind + Resource> Update<'a, K> {
    /// The current status (or an empty one) of `object`, describing its current spec.
    pub fn of(object: &'a K, now: Time) -> Self {
        let mut status = object.operation_status().cloned().unwrap_or_default();
        *status.observed_generation_mut() = object.meta().generation;
        Update { object, now, status }
    }

    /// Sets one condition; its transition time moves only when its status changes.
    pub fn set(&mut self, desired: Desired<'_>) -> &mut Self {
        let generation = self.object.meta().generation;
        conditions::set(self.status.conditions_mut(), desired, generation, self.now.clone());
        self
    }

    /// `Ready` is False for `reason`.
    pub fn not_ready(&mut self, reason: &str, message: String) -> &mut Self {
        self.set(Desired { type_: READY, status: Status::False, reason, message })
    }

    /// The spec is invalid: `Ready` False naming every bad field. Only a spec change can fix it.
    pub fn invalid(&mut self, invalid: &InvalidSpec) -> &mut Self {
        self.set(conditions::invalid_spec(invalid))
    }

    /// The operation cannot succeed as its spec stands: `Failed` with the reason.
    pub fn failed_for(&mut self, invalid: &InvalidSpec) -> &mut Self {
        self.invalid(invalid);
        self.status.set_phase(OperationPhase::Failed);
        *self.status.error_mut() = Some(invalid.to_string());
        self
    }

    /// The operation waits for something (`reason`, `message` say what) before its Job.
    pub fn pending(&mut self, reason: &str, message: String) -> &mut Self {
        self.status.set_phase(OperationPhase::Pending);
        *self.status.error_mut() = None;
        self.set(Desired { type_: PENDING, status: Status::True, reason, message: message.clone() });
        self.not_ready(reason, message)
    }

    /// The Job `job` exists: it started at `started` (kept when already recorded), `Pending`
    /// is over. `Ready` is the caller's: it may set more conditions first.
    pub fn started(&mut self, job: &str, started: Option<Time>) -> &mut Self {
        self.status.set_phase(OperationPhase::Running);
        *self.status.job_name_mut() = Some(job.to_string());
        *self.status.error_mut() = None;
        let start = self.status.start_time_mut();
        if start.is_none() {
            *start = started;
        }
        let message = runs(job, K::WORK);
        self.set(Desired { type_: PENDING, status: Status::False, reason: reason::STARTED, message })
    }

    /// `Ready` while the Job runs.
    pub fn running(&mut self, job: &str) -> &mut Self {
        self.not_ready(reason::RUNNING, runs(job, K::WORK))
    }

    /// The operation ended as `end` says. Success needs the agent's own summary: its end and
    /// duration are the operation's, and `fill` copies the rest into the status; `succeeded`
    /// is `Ready`'s message then. Times the summary does not give are the Job's start and `now`.
    pub fn ended(
        &mut self,
        job: Option<&str>,
        end: &JobEnd,
        succeeded: &str,
        fill: impl FnOnce(&mut K::Status, &AgentSummary),
    ) -> &mut Self {
        if let Some(job) = job {
            *self.status.job_name_mut() = Some(job.to_string());
        }
        if let Some(summary) = end.summary() {
            if let Some(finished) = summary_finished(summary) {
                *self.status.completion_time_mut() = Some(finished);
            }
            let duration = self.status.duration_seconds_mut();
            *duration = summary.duration_seconds.or(*duration);
            fill(&mut self.status, summary);
        }
        if self.status.completion_time_mut().is_none() {
            *self.status.completion_time_mut() = Some(self.now.clone());
        }
        if self.status.duration_seconds_mut().is_none()
            && let (Some(start), Some(end)) =
                (self.status.start_time_mut().clone(), self.status.completion_time_mut().clone())
        {
            *self.status.duration_seconds_mut() = Some(seconds_between(&start, &end));
        }
        match end {
            JobEnd::Succeeded(_) => {
                self.status.set_phase(OperationPhase::Succeeded);
                *self.status.error_mut() = None;
                let message = succeeded.to_string();
                self.set(Desired { type_: READY, status: Status::True, reason: reason::SUCCEEDED, message })
            }
            JobEnd::Failed { reason, message, .. } => {
                self.status.set_phase(OperationPhase::Failed);
                *self.status.error_mut() = Some(message.clone());
                self.not_ready(reason, message.clone())
            }
        }
    }

    pub fn done(self) -> K::Status {
        self.status
    }
}

fn runs(job: &str, work: &str) -> String {
    format!("Job {job} runs the {work}")
}

/// When the agent started, if it said so in a form Kubernetes can hold.
pub fn summary_started(summary: &AgentSummary) -> Option<Time> {
    parse_time(summary.started_at.as_deref())
}

/// When the agent finished, if it said so.
pub fn summary_finished(summary: &AgentSummary) -> Option<Time> {
    parse_time(summary.finished_at.as_deref())
}

/// The tables and rows the agent counted, as a status holds them.
pub fn summary_counts(summary: &AgentSummary) -> (Option<i64>, Option<i64>) {
    (status_count(summary.tables), status_count(summary.rows))
}

fn parse_time(text: Option<&str>) -> Option<Time> {
    text.and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(Time)
}

/// A count as a status field holds it (an `int64`).
pub fn status_count(n: Option<u64>) -> Option<i64> {
    n.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// Seconds from `start` to `end`.
pub fn seconds_between(start: &Time, end: &Time) -> f64 {
    (end.0.as_millisecond() - start.0.as_millisecond()) as f64 / 1000.0
}
