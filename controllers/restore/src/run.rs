//! One restore: validate → resolve the backup, the target app and its credentials → take the
//! database lock → quiesce (the VisitorsApp controller stops the backend; this one only waits
//! for it) → start the Job → follow it → status from the agent's summary, release the lock.
//! Every step reads the API, so a restarted controller picks a restore up where it is; an
//! ended restore makes no request at all.

use controller_common::agent_run::{AgentRun, Wait, pending_reason};
use controller_common::job::RunEnd;
use controller_common::reconcile::{ApiError, api_err};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use visitors_api::agent_summary::Operation;
use visitors_api::backup::BackupPhase;
use visitors_api::labels::names;
use visitors_api::restore::RestorePhase;
use visitors_api::{MySQLBackup, MySQLRestore, MySQLRestoreStatus};

use crate::build::job::{STAGE_CONTAINER, job_name, restore_job};
use crate::build::{Backup, agent_location_of_recorded, display_location};
use crate::controller::{Context, Error};
use crate::metrics::RestoreLabels;
use crate::{status, validate};

/// Why a restore cannot start now: it waits (and says for what), or it can never run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    Wait(Wait),
    Refuse { reason: &'static str, message: String },
}

impl From<Wait> for Blocked {
    fn from(wait: Wait) -> Self {
        Blocked::Wait(wait)
    }
}

fn wait(reason: &'static str, message: String) -> Blocked {
    Blocked::Wait(Wait::new(reason, message))
}

fn refuse(reason: &'static str, message: String) -> Blocked {
    Blocked::Refuse { reason, message }
}

pub async fn reconcile(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    Restore::new(restore, namespace, ctx).reconcile().await
}

/// Whether a deleted restore's agent may still act on the database: its Job is stopped, and
/// until its pod has stopped too the lock stays held and the backend stopped (the clean-up
/// waits for this).
pub async fn agent_still_running(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<bool, Error> {
    if restore.has_ended() {
        return Ok(false);
    }
    let run = Restore::new(restore, namespace, ctx);
    let job_name = job_name(restore);
    let stopped = run.agent.stop_job(&job_name).await?;
    if !stopped {
        tracing::info!(job = %job_name, "restore deleted: waiting for its Job's pod to stop");
    }
    Ok(!stopped)
}

/// The clean-up of a deleted restore whose agent has stopped: the database lock is released.
/// The VisitorsApp controller starts the backend again once the restore is gone.
pub async fn clean_up(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    let run = Restore::new(restore, namespace, ctx);
    run.agent.release_lock().await?;
    ctx.metrics.deleted(&run.metric_labels());
    ctx.runtime.forget(restore);
    Ok(Action::await_change())
}

struct Restore<'a> {
    restore: &'a MySQLRestore,
    ctx: &'a Context,
    agent: AgentRun<'a, MySQLRestore>,
}

impl<'a> Restore<'a> {
    fn new(restore: &'a MySQLRestore, namespace: &'a str, ctx: &'a Context) -> Self {
        let agent =
            AgentRun { object: restore, runtime: &ctx.runtime, namespace, app: &restore.spec.target.visitors_app };
        Restore { restore, ctx, agent }
    }

    fn app(&self) -> &str {
        self.agent.app
    }

    fn phase(&self) -> Option<RestorePhase> {
        self.restore.status.as_ref().and_then(|s| s.phase)
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        let runtime = &self.ctx.runtime;
        if self.restore.has_ended() {
            return self.ended().await;
        }
        if let Err(invalid) = validate::restore(self.restore) {
            if self.publish(status::invalid(self.restore, &invalid, now())).await? {
                runtime.report_invalid_spec(self.restore, &invalid).await;
            }
            return Ok(runtime.until_spec_changes(self.restore));
        }
        let job_name = job_name(self.restore);
        match self.agent.job(&job_name).await? {
            Some(job) => self.follow(&job).await,
            None if self.job_was_started() => self.job_lost(&job_name).await,
            None => self.start(&job_name).await,
        }
    }
    /// An ended restore is a record: a later spec change is only noted.
    async fn ended(&self) -> Result<Action, Error> {
        let status = self.restore.status.as_ref();
        self.ctx.metrics.observe(self.metric_labels(), status);
        let observed = status.and_then(|s| s.observed_generation);
        if observed.is_some() && observed != self.restore.metadata.generation {
            let noted = status::spec_ignored(self.restore, now());
            if self.publish(noted).await? {
                let note = "the restore has ended; a change to its spec does nothing: create a new MySQLRestore";
                self.ctx.runtime.events.warning(self.restore, "SpecChangeIgnored", "Validate", note).await;
            }
        }
        Ok(self.ctx.runtime.until_spec_changes(self.restore))
    }

    fn job_was_started(&self) -> bool {
        self.restore.status.as_ref().is_some_and(|s| s.job_name.is_some())
    }

    // ----- before the Job -----

    async fn start(&self, job_name: &str) -> Result<Action, Error> {
        let backup = match self.resolve_backup().await? {
            Ok(backup) => backup,
            Err(blocked) => return self.blocked(blocked, None).await,
        };
        let credentials = match self.agent.app_credentials("spec.target.visitorsApp").await? {
            Ok(credentials) => credentials,
            Err(wait) => return self.blocked(wait.into(), Some(&backup)).await,
        };
        if let Err(wait) = self.agent.take_lock().await? {
            return self.blocked(wait.into(), Some(&backup)).await;
        }
        if self.restore.spec.quiesce()
            && let Some(running) = self.backend_still_running().await?
        {
            return self.quiescing(&backup, running).await;
        }
        let job = restore_job(self.restore, &backup, &self.ctx.settings.inputs(), &credentials);
        let note = format!("Job {job_name} restores {} into VisitorsApp {}", backup.location, self.app());
        self.agent.create_job(&job, note).await?;
        self.publish(status::running(self.restore, job_name, &backup, None, now())).await?;
        Ok(self.ctx.runtime.watching(self.restore))
    }

    /// The backup to read: a run that succeeded (its recorded location and manifest), or the
    /// explicit storage location; its storage's Secret or claim must exist.
    async fn resolve_backup(&self) -> Result<Result<Backup, Blocked>, ApiError> {
        let source = &self.restore.spec.source;
        let (backup, claim_field) = match &source.backup {
            None => {
                let storage = source.storage.clone().unwrap_or_default();
                let path = source.path.clone().unwrap_or_default();
                let backup = Backup {
                    agent_location: storage.agent_location(&path),
                    location: storage.location(&path),
                    storage,
                    ..Backup::default()
                };
                (backup, "spec.source.storage.persistentVolumeClaim.claimName".to_string())
            }
            Some(run_name) => {
                let Some(run) = self
                    .agent
                    .api::<MySQLBackup>()
                    .get_opt(run_name)
                    .await
                    .map_err(api_err(format!("reading MySQLBackup {run_name}")))?
                else {
                    let message = format!(
                        "MySQLBackup {run_name} (spec.source.backup) does not exist in namespace {}; the restore waits for it",
                        self.agent.namespace
                    );
                    return Ok(Err(wait("BackupNotFound", message)));
                };
                match backup_of_run(&run) {
                    Ok(backup) => (backup, format!("the storage of MySQLBackup {run_name}")),
                    Err(blocked) => return Ok(Err(blocked)),
                }
            }
        };
        let ready = self.agent.storage_ready(&backup.storage, &claim_field).await?;
        Ok(ready.map(|()| backup).map_err(Blocked::from))
    }

    /// What still runs of the app's backend (`None` once it has no pods), read from its
    /// Deployment; the VisitorsApp controller scales it to zero while this restore quiesces.
    async fn backend_still_running(&self) -> Result<Option<String>, Error> {
        let name = names::backend(self.app());
        let deployment = self
            .agent
            .api::<Deployment>()
            .get_opt(&name)
            .await
            .map_err(api_err(format!("reading Deployment {name}")))?;
        let Some(deployment) = deployment else { return Ok(None) };
        let wanted = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let status = deployment.status.unwrap_or_default();
        let (pods, ready) = (status.replicas.unwrap_or(0), status.ready_replicas.unwrap_or(0));
        Ok((wanted > 0 || pods > 0 || ready > 0).then(|| {
            format!(
                "waiting for the backend Deployment {name} to stop: the VisitorsApp controller scales it to 0 while the restore runs ({pods} pods, {ready} ready)"
            )
        }))
    }

    async fn quiescing(&self, backup: &Backup, message: String) -> Result<Action, Error> {
        let first = self.phase() != Some(RestorePhase::Quiescing);
        self.publish(status::quiescing(self.restore, backup, message, now())).await?;
        if first {
            let note =
                format!("the restore holds the database; the backend of VisitorsApp {} is being stopped", self.app());
            self.ctx.runtime.events.normal(self.restore, "Quiescing", "Quiesce", note).await;
        }
        // The Deployment watch wakes the restore when the backend changes.
        Ok(self.ctx.runtime.watching(self.restore))
    }

    async fn blocked(&self, blocked: Blocked, backup: Option<&Backup>) -> Result<Action, Error> {
        match blocked {
            Blocked::Wait(wait) => {
                let before = self
                    .restore
                    .status
                    .as_ref()
                    .and_then(|s| pending_reason(&s.conditions, status::condition::PENDING));
                if self.publish(status::pending(self.restore, wait.reason, wait.message.clone(), now())).await? {
                    self.agent.announce_wait(&wait, before.as_deref()).await;
                }
                Ok(self.ctx.runtime.waiting(self.restore))
            }
            Blocked::Refuse { reason, message } => {
                let end = RunEnd::Failed { reason, message, summary: None };
                self.finish(None, backup.cloned().unwrap_or_default(), end).await
            }
        }
    }

    // ----- while and after the Job -----

    /// The backup as recorded in status when the Job started (a restarted controller does not
    /// resolve it again: the run could have been deleted meanwhile).
    fn recorded_backup(&self) -> Backup {
        let status = self.restore.status.clone().unwrap_or_default();
        Backup {
            location: status.restored_from.unwrap_or_default(),
            run: status.backup_name,
            manifest_sha256: status.manifest_sha256,
            completion_time: status.backup_completion_time,
            ..Backup::default()
        }
    }

    async fn follow(&self, job: &Job) -> Result<Action, Error> {
        if !self.agent.owns(job) {
            return self.blocked(self.agent.job_name_taken(job).into(), None).await;
        }
        let job_name = job.name_any();
        let backup = self.recorded_backup();
        let deadline = self.restore.spec.active_deadline_seconds();
        match self.agent.end_of(job, Operation::Restore, deadline).await? {
            Some(end) => {
                let end = self.verified(end);
                self.finish(Some(&job_name), backup, end).await
            }
            None => {
                let started = controller_common::job::started_at(job);
                // The pod watch wakes the restore when its staging step ends.
                let pods = self.agent.pods(&job_name).await?;
                if !controller_common::job::init_step_done(&pods, STAGE_CONTAINER) {
                    self.publish(status::running(self.restore, &job_name, &backup, started, now())).await?;
                    return Ok(self.ctx.runtime.watching(self.restore));
                }
                let first = self.phase() != Some(RestorePhase::Verifying);
                self.publish(status::verifying(self.restore, &job_name, &backup, started, now())).await?;
                if first {
                    let note = format!(
                        "the backup is loaded and checked in staging schemas; Job {job_name} checks it against the manifest again and swaps it in"
                    );
                    self.ctx.runtime.events.normal(self.restore, "Verifying", "Verify", note).await;
                }
                Ok(self.ctx.runtime.watching(self.restore))
            }
        }
    }
    /// A successful agent run checked against what the backup run recorded: the same manifest
    /// and the same number of tables and rows.
    fn verified(&self, end: RunEnd) -> RunEnd {
        let RunEnd::Succeeded(summary) = &end else { return end };
        if !self.restore.spec.verify() {
            return end;
        }
        let status = self.restore.status.clone().unwrap_or_default();
        let expected_sha = status.manifest_sha256.as_deref();
        let mismatch = |what: String| RunEnd::Failed {
            reason: "VerifyMismatch",
            message: format!("the restore does not match the backup: {what}"),
            summary: Some(summary.clone()),
        };
        if let (Some(expected), Some(got)) = (expected_sha, summary.manifest_sha256.as_deref())
            && expected != got
        {
            return mismatch(format!("manifest SHA-256 {got}, the backup run recorded {expected}"));
        }
        end
    }

    async fn job_lost(&self, job_name: &str) -> Result<Action, Error> {
        let message = format!(
            "Job {job_name} was deleted before it finished; the agent restores all or nothing, so the database is as it was or fully restored: check it, and create a new MySQLRestore to restore again"
        );
        self.finish(
            Some(job_name),
            self.recorded_backup(),
            RunEnd::Failed { reason: "JobDeleted", message, summary: None },
        )
        .await
    }

    /// Releases the lock first, then writes the end; the phase leaving `Running` is what lets
    /// the VisitorsApp controller start the backend again.
    async fn finish(&self, job_name: Option<&str>, backup: Backup, end: RunEnd) -> Result<Action, Error> {
        self.agent.release_lock().await?;
        let status = status::finished(self.restore, job_name, &backup, &end, now());
        if self.publish(status.clone()).await? {
            self.announce(&end, &status).await;
        }
        Ok(self.ctx.runtime.until_spec_changes(self.restore))
    }

    async fn announce(&self, end: &RunEnd, status: &MySQLRestoreStatus) {
        let events = &self.ctx.runtime.events;
        match end {
            RunEnd::Succeeded(_) => {
                let note = format!(
                    "restored {} into VisitorsApp {}: {} tables, {} rows",
                    status.restored_from.as_deref().unwrap_or_default(),
                    self.app(),
                    status.tables.unwrap_or_default(),
                    status.rows.unwrap_or_default()
                );
                events.normal(self.restore, "Succeeded", "Restore", note).await;
            }
            RunEnd::Failed { reason, message, .. } => {
                tracing::warn!(reason, error = %message, "restore failed");
                events.warning(self.restore, reason, "Restore", message.clone()).await;
            }
        }
    }

    async fn publish(&self, status: MySQLRestoreStatus) -> Result<bool, Error> {
        let written = self.agent.publish(self.restore.status.as_ref(), &status).await?;
        self.ctx.metrics.observe(self.metric_labels(), Some(&status));
        Ok(written)
    }

    fn metric_labels(&self) -> RestoreLabels {
        RestoreLabels { namespace: self.agent.namespace.to_string(), restore: self.restore.name_any() }
    }
}

/// The backup of run `run`, if it can be restored: a `Succeeded` run with a recorded location
/// and manifest; a failed one is refused, one still to finish is waited for.
pub fn backup_of_run(run: &MySQLBackup) -> Result<Backup, Blocked> {
    let name = run.name_any();
    if run.spec.is_schedule() {
        let message = format!(
            "MySQLBackup {name} (spec.source.backup) is a schedule, not a run: name one of its runs (status.lastSuccessfulRun)"
        );
        return Err(refuse("BackupIsSchedule", message));
    }
    let status = run.status.clone().unwrap_or_default();
    match status.phase {
        Some(BackupPhase::Succeeded) => {}
        Some(BackupPhase::Failed) => {
            let why = status.error.map(|e| format!(": {e}")).unwrap_or_default();
            let message = format!(
                "MySQLBackup {name} (spec.source.backup) failed{why}; a failed backup is never restored, nothing was touched"
            );
            return Err(refuse("BackupFailed", message));
        }
        phase => {
            let phase = phase.map(|p| format!("{p:?}")).unwrap_or_else(|| "not started".into());
            let message =
                format!("MySQLBackup {name} (spec.source.backup) is {phase}; the restore waits until it succeeds");
            return Err(wait("BackupNotFinished", message));
        }
    }
    let recorded = status.location.clone().unwrap_or_default();
    let Some(agent_location) = agent_location_of_recorded(&recorded) else {
        let message = format!("MySQLBackup {name} records no location the restore can read ({recorded:?})");
        return Err(refuse("BackupLocationUnknown", message));
    };
    let Some(manifest_sha256) = status.manifest_sha256.clone() else {
        let message = format!(
            "MySQLBackup {name} records no manifestSha256, so a backup changed in storage could not be detected"
        );
        return Err(refuse("BackupUnverifiable", message));
    };
    Ok(Backup {
        location: display_location(&run.spec.storage, &agent_location),
        agent_location,
        storage: run.spec.storage.clone(),
        run: Some(name),
        manifest_sha256: Some(manifest_sha256),
        completion_time: status.completion_time,
        tables: status.tables,
        rows: status.rows,
    })
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: serde_json::Value) -> MySQLBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "b1", "namespace": "shop", "uid": "u-1"},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "backups"}}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_a_succeeded_run_is_restored_and_a_failed_one_is_refused() {
        let succeeded = run(serde_json::json!({"phase": "Succeeded", "location": "file:///backup/shop/ex/b1",
            "manifestSha256": "ab".repeat(32), "completionTime": "2026-11-23T10:00:00Z", "tables": 2, "rows": 7}));
        let backup = backup_of_run(&succeeded).unwrap();
        assert_eq!(backup.agent_location, "file:///backup/shop/ex/b1");
        assert_eq!(backup.location, "pvc://backups/shop/ex/b1");
        assert_eq!(backup.manifest_sha256, Some("ab".repeat(32)));
        assert_eq!((backup.tables, backup.rows), (Some(2), Some(7)));

        let failed = run(serde_json::json!({"phase": "Failed", "error": "MySQL rejected user root"}));
        let Err(Blocked::Refuse { reason, message }) = backup_of_run(&failed) else {
            panic!("a failed run is refused")
        };
        assert_eq!(reason, "BackupFailed");
        assert!(message.contains("MySQLBackup b1") && message.contains("rejected user root"), "{message}");

        for phase in ["Running", "Pending"] {
            let unfinished = run(serde_json::json!({"phase": phase}));
            assert!(matches!(backup_of_run(&unfinished), Err(Blocked::Wait(Wait { reason: "BackupNotFinished", .. }))));
        }
        let unverifiable = run(serde_json::json!({"phase": "Succeeded", "location": "s3://b/x"}));
        assert!(matches!(backup_of_run(&unverifiable), Err(Blocked::Refuse { reason: "BackupUnverifiable", .. })));
    }
}
