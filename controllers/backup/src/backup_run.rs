//! One on-demand (or scheduled) backup run: validate → resolve the app, its credentials and
//! the storage → take the database lock → start the Job → follow it → status from the agent's
//! summary, release the lock → its restore drills ([`crate::drill`]), once it succeeded. Every step reads the API, so a restarted controller picks a run
//! up where it is; a finished run makes no request at all.

use controller_common::agent_job::DatabaseAccess;
use controller_common::agent_job::JobEnd;
use controller_common::error::ApiError;
use controller_common::operation::{DatabaseOperation, JobSteps};
use controller_common::ready;
use controller_common::step::{Blocked, Step, Wait};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use visitors_agent_contract::summary::Operation;
use visitors_api::backup::{BackupPhase, TakenFrom};
use visitors_api::conditions::reason;
use visitors_api::{InvalidSpec, MySQLBackup, MySQLBackupStatus};

use crate::build::backup_path;
use crate::build::job::{backup_job, job_name, taken_from};
use crate::context::{Context, Error};
use crate::metrics::SourceLabels;
use crate::read_from::{self, ReadFrom};
use crate::{status, validate};

/// How soon a run that succeeded looks again, to start the drill it owes.
const DRILL_AFTER_SUCCESS: std::time::Duration = std::time::Duration::from_secs(1);

pub async fn reconcile(backup: &MySQLBackup, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    BackupRun { backup, ctx, op: DatabaseOperation::of(backup, &ctx.runtime, namespace) }.reconcile().await
}

struct BackupRun<'a> {
    backup: &'a MySQLBackup,
    ctx: &'a Context,
    op: DatabaseOperation<'a, MySQLBackup>,
}

impl BackupRun<'_> {
    fn location(&self) -> String {
        self.backup.spec.storage.location(&backup_path(self.backup))
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        let runtime = &self.ctx.runtime;
        crate::cleanup::keep_finalizer_in_line(self.backup, runtime).await?;
        if let Err(invalid) = validate::backup(self.backup) {
            return self.reject(&invalid).await;
        }
        if status::is_finished(self.backup) {
            self.remember_success();
            let drilled = crate::drill::reconcile(self.backup, self.op.namespace, self.ctx).await?;
            return Ok(drilled.unwrap_or_else(|| runtime.converged(self.backup)));
        }
        self.op.next_step(self, &job_name(self.backup)).await
    }

    /// Everything the Job needs that the run does not hold: the app, its credentials Secret,
    /// the server to read, the storage's Secret or claim, then the database lock. Returns how
    /// the Job reaches the database, and which server it reads.
    async fn resolve(&self) -> Result<Step<(DatabaseAccess, ReadFrom)>, ApiError> {
        let access = ready!(self.op.serving_app_access("spec.source.visitorsApp").await?);
        let from = self.backup.spec.source.reads_from();
        let read_from = ready!(read_from::choose(from, self.op.app, self.op.namespace, &access.servers));
        if let Some(encryption) = &self.backup.spec.encryption {
            let field = "spec.encryption";
            ready!(self.op.encryption_keys_ready(&encryption.key_secret, Some(&encryption.key_id), field).await?);
        }
        let claim_field = "spec.storage.persistentVolumeClaim.claimName";
        ready!(self.op.storage_ready(&self.backup.spec.storage, claim_field).await?);
        Ok(self.op.take_lock().await?.map(|()| (access, read_from)))
    }

    /// A run whose Job cannot start: it waits and says for what, or, blocked, it fails.
    async fn stopped<T>(&self, stopped: Step<T>) -> Result<Action, Error> {
        match stopped {
            Step::Ready(_) => Ok(self.ctx.runtime.watching(self.backup)),
            Step::Wait(wait) => self.wait(wait).await,
            Step::Blocked(Blocked { reason, message }) => {
                self.finish(&job_name(self.backup), JobEnd::Failed { reason, message, summary: None }).await
            }
            Step::InvalidSpec(invalid) => self.reject(&invalid).await,
        }
    }

    async fn wait(&self, wait: Wait) -> Result<Action, Error> {
        let before = self.op.waiting_for();
        if self.publish(status::pending(self.backup, wait.reason, wait.message.clone(), now())).await? {
            self.op.announce_wait(&wait, before.as_deref()).await;
        }
        Ok(self.ctx.runtime.waiting(self.backup))
    }

    async fn reject(&self, invalid: &InvalidSpec) -> Result<Action, Error> {
        let runtime = &self.ctx.runtime;
        if self.publish(status::invalid(self.backup, invalid, now())).await? {
            runtime.report_invalid_spec(self.backup, invalid).await;
        }
        Ok(runtime.until_spec_changes(self.backup))
    }

    /// Releases the lock first: a status write that fails is retried, a lock held by a finished
    /// run would only be taken over later.
    async fn finish(&self, job_name: &str, end: JobEnd) -> Result<Action, Error> {
        self.op.release_lock().await?;
        let status = status::finished(self.backup, job_name, &end, self.location(), now());
        if self.publish(status.clone()).await? {
            self.announce(&end, &status).await;
        }
        // A status write wakes no reconcile: the drill owed after a success starts at the next.
        let drill_owed = matches!(end, JobEnd::Succeeded(_))
            && self.backup.spec.drill.as_ref().is_some_and(|drill| drill.after_each_run());
        Ok(if drill_owed { Action::requeue(DRILL_AFTER_SUCCESS) } else { self.ctx.runtime.converged(self.backup) })
    }

    fn source(&self) -> SourceLabels {
        SourceLabels { namespace: self.op.namespace.to_string(), visitors_app: self.op.app.to_string() }
    }

    /// A successful run found finished (after a controller restart, the reconcile that
    /// finished it ran in another process) still counts for the last-success gauge.
    fn remember_success(&self) {
        let Some(status) = &self.backup.status else { return };
        if status.phase == Some(BackupPhase::Succeeded)
            && let Some(completed) = &status.completion_time
        {
            self.ctx.metrics.success_seen(&self.source(), completed.0.as_millisecond() as f64 / 1000.0);
        }
    }

    async fn announce(&self, end: &JobEnd, status: &MySQLBackupStatus) {
        let source = self.source();
        let completed =
            status.completion_time.as_ref().map(|t| t.0.as_millisecond() as f64 / 1000.0).unwrap_or_default();
        let succeeded = matches!(end, JobEnd::Succeeded(_));
        self.ctx.metrics.run_ended(source, succeeded, completed, status.duration_seconds, status.size_bytes);
        let stored = || {
            format!(
                "backup stored at {}: {} bytes, {} tables, {} rows",
                status.location.as_deref().unwrap_or_default(),
                status.size_bytes.unwrap_or_default(),
                status.tables.unwrap_or_default(),
                status.rows.unwrap_or_default()
            )
        };
        self.op.announce_end(end, "Backup", stored).await;
    }

    async fn publish(&self, status: MySQLBackupStatus) -> Result<bool, Error> {
        Ok(self.op.publish(self.backup.status.as_ref(), &status).await?)
    }
}

impl JobSteps for BackupRun<'_> {
    type Error = Error;

    async fn start(&self, job_name: &str) -> Result<Action, Error> {
        let (access, read_from) = match self.resolve().await? {
            Step::Ready(resolved) => resolved,
            stopped => return self.stopped(stopped).await,
        };
        let job = backup_job(self.backup, &self.ctx.settings.inputs(), &access, &read_from);
        let TakenFrom { pod, role } = &read_from.taken_from;
        let note =
            format!("Job {job_name} backs up VisitorsApp {} from {pod} ({role:?}) to {}", self.op.app, self.location());
        self.op.create_job(&job, note).await?;
        let running = status::running(self.backup, job_name, self.location(), None, Some(read_from.taken_from), now());
        self.publish(running).await?;
        // The Job watch wakes the run when the Job changes, ends or disappears.
        Ok(self.ctx.runtime.watching(self.backup))
    }

    async fn follow(&self, job: &Job) -> Result<Action, Error> {
        if !self.op.owns(job) {
            return self.wait(self.op.job_name_taken(job)).await;
        }
        let job_name = job.name_any();
        let deadline = self.backup.spec.active_deadline_seconds();
        match self.op.end_of(job, Operation::Backup, deadline).await? {
            Some(end) => self.finish(&job_name, encrypted_as_asked(self.backup, end)).await,
            None => {
                let started = controller_common::agent_job::started_at(job);
                let running = status::running(self.backup, &job_name, self.location(), started, taken_from(job), now());
                self.publish(running).await?;
                Ok(self.ctx.runtime.watching(self.backup))
            }
        }
    }

    async fn job_lost(&self, job_name: &str) -> Result<Action, Error> {
        let message = format!("Job {job_name} was deleted before it finished; the backup did not complete");
        self.finish(job_name, JobEnd::Failed { reason: reason::JOB_DELETED, message, summary: None }).await
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// A run asked to encrypt succeeds only when the agent says it encrypted with the key asked
/// for: a backup stored in the clear against the spec is a failure, never a silent success.
pub fn encrypted_as_asked(backup: &MySQLBackup, end: JobEnd) -> JobEnd {
    let (Some(encryption), JobEnd::Succeeded(summary)) = (&backup.spec.encryption, &end) else { return end };
    if summary.encryption_key_id.as_deref() == Some(encryption.key_id.as_str()) {
        return end;
    }
    let message = format!(
        "spec.encryption asks for key {:?}, but the agent reported {}; the stored backup is not trusted",
        encryption.key_id,
        summary.encryption_key_id.as_deref().map_or("no encryption".to_string(), |id| format!("key {id:?}"))
    );
    JobEnd::Failed { reason: reason::AGENT_FAILED, message, summary: Some(summary.clone()) }
}

#[cfg(test)]
mod tests {
    use visitors_agent_contract::summary::AgentSummary;
    use visitors_api::encryption::BackupEncryption;

    use super::*;
    use crate::build::fixtures::run;

    fn succeeded(key: Option<&str>) -> JobEnd {
        let summary: AgentSummary = serde_json::from_value(serde_json::json!({
            "ok": true, "operation": "backup", "encryptionKeyId": key,
        }))
        .unwrap();
        JobEnd::Succeeded(summary)
    }

    #[test]
    fn a_run_asked_to_encrypt_fails_unless_the_agent_encrypted_with_its_key() {
        let mut encrypted = run();
        encrypted.spec.encryption = Some(BackupEncryption { key_secret: "keys".into(), key_id: "k1".into() });
        assert!(matches!(encrypted_as_asked(&encrypted, succeeded(Some("k1"))), JobEnd::Succeeded(_)));
        for reported in [None, Some("k0")] {
            let JobEnd::Failed { message, .. } = encrypted_as_asked(&encrypted, succeeded(reported)) else {
                panic!("a backup not encrypted as asked must fail")
            };
            assert!(message.contains("spec.encryption asks for key \"k1\""), "{message}");
        }
        assert!(matches!(encrypted_as_asked(&run(), succeeded(None)), JobEnd::Succeeded(_)), "no encryption asked");
    }
}
