//! The reconcile of a MySQLRestore and its error policy. A deleted restore goes through
//! [`crate::cleanup`]; a live one is one pipeline: validate → resolve the backup
//! ([`crate::source`]), the target app and its credentials → take the database lock → quiesce
//! (the VisitorsApp controller stops the backend; this one only waits for it) → start the Job
//! → follow it → status from the agent's summary, release the lock. Every step reads the API,
//! so a restarted controller picks a restore up where it is; an ended restore makes no request
//! at all.

use std::sync::Arc;

use controller_common::agent_job::DatabaseAccess;
use controller_common::agent_job::JobEnd;
use controller_common::error::{ApiError, api_err, namespace_of};
use controller_common::operation::{DatabaseOperation, JobSteps};
use controller_common::ready;
use controller_common::step::{Blocked, Step};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use visitors_agent_contract::summary::Operation;
use visitors_api::conditions::reason;
use visitors_api::labels::{names, runs_of_schedule};
use visitors_api::point_in_time::PointInTimeSource;
use visitors_api::restore::{RestorePhase, reason as restore_reason};
use visitors_api::{InvalidSpec, MySQLBackup, MySQLRestore, MySQLRestoreStatus};

use crate::build::Backup;
use crate::build::job::{STAGE_CONTAINER, job_name, restore_job};
use crate::context::{Context, Error};
use crate::metrics::RestoreLabels;
use crate::source::{backup_of_point_in_time, backup_of_run};
use crate::{status, validate};

pub async fn reconcile(restore: Arc<MySQLRestore>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = context.runtime.clone();
    runtime
        .instrumented(&*restore, async {
            let namespace = namespace_of(&*restore)?;
            if restore.metadata.deletion_timestamp.is_some() {
                return crate::cleanup::reconcile_deleted(&restore, &namespace, &context).await;
            }
            // Added first, before the restore touches anything; its watch event brings the
            // restore back.
            if crate::cleanup::add_finalizer(&restore, &runtime).await? {
                return Ok(Action::await_change());
            }
            Restore::new(&restore, &namespace, &context).reconcile().await
        })
        .await
}

/// See [`controller_common::reconcile::error_policy`].
pub fn error_policy(restore: Arc<MySQLRestore>, error: &Error, context: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&context.runtime, restore, error)
}

struct Restore<'a> {
    restore: &'a MySQLRestore,
    ctx: &'a Context,
    op: DatabaseOperation<'a, MySQLRestore>,
}

impl<'a> Restore<'a> {
    fn new(restore: &'a MySQLRestore, namespace: &'a str, ctx: &'a Context) -> Self {
        Restore { restore, ctx, op: DatabaseOperation::of(restore, &ctx.runtime, namespace) }
    }

    fn app(&self) -> &str {
        self.op.app
    }

    fn phase(&self) -> Option<RestorePhase> {
        self.restore.status.as_ref().and_then(|s| s.phase)
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        if self.restore.has_ended() {
            return self.ended().await;
        }
        if let Err(invalid) = validate::restore(self.restore) {
            return self.reject(&invalid).await;
        }
        self.op.next_step(self, &job_name(self.restore)).await
    }

    async fn reject(&self, invalid: &InvalidSpec) -> Result<Action, Error> {
        let runtime = &self.ctx.runtime;
        if self.publish(status::invalid(self.restore, invalid, now())).await? {
            runtime.report_invalid_spec(self.restore, invalid).await;
        }
        Ok(runtime.until_spec_changes(self.restore))
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

    /// The backup to read: a run that succeeded (its recorded location and manifest), or the
    /// explicit storage location; its storage's Secret or claim must exist.
    async fn resolve_backup(&self) -> Result<Step<Backup>, ApiError> {
        let source = &self.restore.spec.source;
        if let Some(point_in_time) = &source.point_in_time {
            let backup = ready!(self.resolve_point_in_time(point_in_time).await?);
            let claim_field = format!("the storage of MySQLBackup {}", point_in_time.backup);
            return self.ready_to_read(backup, &claim_field).await;
        }
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
                    .op
                    .api::<MySQLBackup>()
                    .get_opt(run_name)
                    .await
                    .map_err(api_err(format!("reading MySQLBackup {run_name}")))?
                else {
                    let message = format!(
                        "MySQLBackup {run_name} (spec.source.backup) does not exist in namespace {}; the restore waits for it",
                        self.op.namespace
                    );
                    return Ok(Step::wait(restore_reason::BACKUP_NOT_FOUND, message));
                };
                (ready!(backup_of_run(&run)), format!("the storage of MySQLBackup {run_name}"))
            }
        };
        self.ready_to_read(backup, &claim_field).await
    }

    /// The backup, once its storage's Secret or claim exists, and the Secret of its keys
    /// (`spec.source.keySecret`, else its MySQLBackup's) when it has one.
    async fn ready_to_read(&self, mut backup: Backup, claim_field: &str) -> Result<Step<Backup>, ApiError> {
        if let Some(secret) = &self.restore.spec.source.key_secret {
            backup.key_secret = Some(secret.clone());
        }
        if let Some(secret) = &backup.key_secret {
            let field = if self.restore.spec.source.key_secret.is_some() {
                "spec.source.keySecret"
            } else {
                "spec.encryption.keySecret of the backup"
            };
            ready!(self.op.encryption_keys_ready(secret, None, field).await?);
        }
        Ok(self.op.storage_ready(&backup.storage, claim_field).await?.map(|()| backup))
    }

    /// The base run and the archive of a restore to a point in time, from the schedule and its
    /// runs as they are now.
    async fn resolve_point_in_time(&self, source: &PointInTimeSource) -> Result<Step<Backup>, ApiError> {
        let name = &source.backup;
        let api = self.op.api::<MySQLBackup>();
        let Some(schedule) = api.get_opt(name).await.map_err(api_err(format!("reading MySQLBackup {name}")))? else {
            let message = format!(
                "MySQLBackup {name} (spec.source.pointInTime.backup) does not exist in namespace {}; the restore waits for it",
                self.op.namespace
            );
            return Ok(Step::wait(restore_reason::BACKUP_NOT_FOUND, message));
        };
        let listed = api
            .list(&ListParams::default().labels_from(&runs_of_schedule(name)))
            .await
            .map_err(api_err(format!("listing the runs of MySQLBackup {name}")))?;
        let uid = schedule.uid();
        let runs: Vec<MySQLBackup> = listed
            .items
            .into_iter()
            .filter(|run| run.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
            .collect();
        let now = jiff::Timestamp::now();
        let created = self.restore.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
        let age = now.as_second() - created.as_second();
        Ok(backup_of_point_in_time(&schedule, &runs, source, age, now))
    }

    /// How the Job reaches the target app's MySQL, then the app's database lock.
    async fn access_and_lock(&self) -> Result<Step<DatabaseAccess>, ApiError> {
        let access = ready!(self.op.serving_app_access("spec.target.visitorsApp").await?);
        Ok(self.op.take_lock().await?.map(|()| access))
    }

    /// What still runs of the app's backend (`None` once it has no pods), read from its
    /// Deployment; the VisitorsApp controller scales it to zero while this restore quiesces.
    async fn backend_still_running(&self) -> Result<Option<String>, Error> {
        let name = names::backend(self.app());
        let deployment =
            self.op.api::<Deployment>().get_opt(&name).await.map_err(api_err(format!("reading Deployment {name}")))?;
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

    /// A restore whose Job cannot start: it waits and says for what, or it is refused and ends.
    async fn stopped<T>(&self, stopped: Step<T>, backup: Option<&Backup>) -> Result<Action, Error> {
        match stopped {
            Step::Ready(_) => Ok(self.ctx.runtime.watching(self.restore)),
            Step::Wait(wait) => {
                let before = self.op.waiting_for();
                if self.publish(status::pending(self.restore, wait.reason, wait.message.clone(), now())).await? {
                    self.op.announce_wait(&wait, before.as_deref()).await;
                }
                Ok(self.ctx.runtime.waiting(self.restore))
            }
            Step::Blocked(Blocked { reason, message }) => {
                let end = JobEnd::Failed { reason, message, summary: None };
                self.finish(None, backup.cloned().unwrap_or_default(), end).await
            }
            Step::InvalidSpec(invalid) => self.reject(&invalid).await,
        }
    }

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

    /// A successful agent run checked against what the backup run recorded: the same manifest
    /// and the same number of tables and rows.
    fn verified(&self, end: JobEnd) -> JobEnd {
        let JobEnd::Succeeded(summary) = &end else { return end };
        if !self.restore.spec.verify() {
            return end;
        }
        let status = self.restore.status.clone().unwrap_or_default();
        let expected_sha = status.manifest_sha256.as_deref();
        let mismatch = |what: String| JobEnd::Failed {
            reason: restore_reason::VERIFY_MISMATCH,
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

    /// Releases the lock first, then writes the end; the phase leaving `Running` is what lets
    /// the VisitorsApp controller start the backend again.
    async fn finish(&self, job_name: Option<&str>, backup: Backup, end: JobEnd) -> Result<Action, Error> {
        self.op.release_lock().await?;
        let status = status::finished(self.restore, job_name, &backup, &end, now());
        if self.publish(status.clone()).await? {
            self.announce(&end, &status).await;
        }
        Ok(self.ctx.runtime.until_spec_changes(self.restore))
    }

    async fn announce(&self, end: &JobEnd, status: &MySQLRestoreStatus) {
        let restored = || {
            format!(
                "restored {} into VisitorsApp {}: {} tables, {} rows",
                status.restored_from.as_deref().unwrap_or_default(),
                self.app(),
                status.tables.unwrap_or_default(),
                status.rows.unwrap_or_default()
            )
        };
        self.op.announce_end(end, "Restore", restored).await;
    }

    async fn publish(&self, status: MySQLRestoreStatus) -> Result<bool, Error> {
        let written = self.op.publish(self.restore.status.as_ref(), &status).await?;
        self.ctx.metrics.observe(self.metric_labels(), Some(&status));
        Ok(written)
    }

    fn metric_labels(&self) -> RestoreLabels {
        RestoreLabels::of(self.restore, self.op.namespace)
    }
}

impl JobSteps for Restore<'_> {
    type Error = Error;

    async fn start(&self, job_name: &str) -> Result<Action, Error> {
        let backup = match self.resolve_backup().await? {
            Step::Ready(backup) => backup,
            stopped => return self.stopped(stopped, None).await,
        };
        let access = match self.access_and_lock().await? {
            Step::Ready(access) => access,
            stopped => return self.stopped(stopped, Some(&backup)).await,
        };
        if self.restore.spec.quiesce()
            && let Some(running) = self.backend_still_running().await?
        {
            return self.quiescing(&backup, running).await;
        }
        let job = restore_job(self.restore, &backup, &self.ctx.settings.inputs(), &access);
        let note = format!("Job {job_name} restores {} into VisitorsApp {}", backup.location, self.app());
        self.op.create_job(&job, note).await?;
        self.publish(status::running(self.restore, job_name, &backup, None, now())).await?;
        Ok(self.ctx.runtime.watching(self.restore))
    }

    async fn follow(&self, job: &Job) -> Result<Action, Error> {
        if !self.op.owns(job) {
            return self.stopped(Step::<()>::Wait(self.op.job_name_taken(job)), None).await;
        }
        let job_name = job.name_any();
        let backup = self.recorded_backup();
        let deadline = self.restore.spec.active_deadline_seconds();
        match self.op.end_of(job, Operation::Restore, deadline).await? {
            Some(end) => {
                let end = self.verified(end);
                self.finish(Some(&job_name), backup, end).await
            }
            None => {
                let started = controller_common::agent_job::started_at(job);
                // The pod watch wakes the restore when its staging step ends.
                let pods = self.op.pods(&job_name).await?;
                if !controller_common::agent_job::init_step_done(&pods, STAGE_CONTAINER) {
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

    async fn job_lost(&self, job_name: &str) -> Result<Action, Error> {
        let message = format!(
            "Job {job_name} was deleted before it finished; the agent restores all or nothing, so the database is as it was or fully restored: check it, and create a new MySQLRestore to restore again"
        );
        self.finish(
            Some(job_name),
            self.recorded_backup(),
            JobEnd::Failed { reason: reason::JOB_DELETED, message, summary: None },
        )
        .await
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}
