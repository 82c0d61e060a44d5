//! One restore: validate → resolve the backup, the target app and its credentials → take the
//! database lock → quiesce (the VisitorsApp controller stops the backend; this one only waits
//! for it) → start the Job → follow it → status from the agent's summary, release the lock.
//! Every step reads the API, so a restarted controller picks a restore up where it is; an
//! ended restore makes no request at all.

use controller_common::job::{self, JobState, RunEnd, TRACEPARENT_ENV, traceparent};
use controller_common::lock::{Acquired, DatabaseLock, Holder, REASON_WAITING_FOR_LOCK};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use visitors_api::agent_summary::Operation;
use visitors_api::backup::BackupPhase;
use visitors_api::conditions;
use visitors_api::labels::names;
use visitors_api::restore::RestorePhase;
use visitors_api::storage::BackupStorage;
use visitors_api::visitors_app::secret_keys;
use visitors_api::{MySQLBackup, MySQLRestore, MySQLRestoreStatus, VisitorsApp};

use crate::build::job::{JobInputs, job_name, restore_job};
use crate::build::{Backup, agent_location, agent_location_of_recorded, display_location};
use crate::controller::{Context, Error, kube_err};
use crate::{status, validate};

/// Why a restore cannot start now: it waits (and says for what), or it can never run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    Wait { reason: &'static str, message: String },
    Refuse { reason: &'static str, message: String },
}

fn wait(reason: &'static str, message: String) -> Blocked {
    Blocked::Wait { reason, message }
}

fn refuse(reason: &'static str, message: String) -> Blocked {
    Blocked::Refuse { reason, message }
}

pub async fn reconcile(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    Restore { restore, ctx, namespace, name: restore.name_any() }.reconcile().await
}

/// The clean-up of a deleted restore: its Job is stopped and the database lock released. The
/// VisitorsApp controller starts the backend again on its own: a restore being deleted does not
/// quiesce its app.
pub async fn clean_up(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    let run = Restore { restore, ctx, namespace, name: restore.name_any() };
    if !restore.has_ended() {
        let job_name = job_name(restore);
        let params =
            DeleteParams { propagation_policy: Some(PropagationPolicy::Background), ..DeleteParams::default() };
        match run.api::<Job>().delete(&job_name, &params).await {
            Ok(_) => tracing::info!(job = %job_name, "restore deleted: its Job is stopped"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => return Err(Error::Kube { action: format!("deleting Job {job_name}"), source }),
        }
    }
    run.release().await?;
    ctx.runtime.forget(restore);
    Ok(Action::await_change())
}

struct Restore<'a> {
    restore: &'a MySQLRestore,
    ctx: &'a Context,
    namespace: &'a str,
    name: String,
}

impl Restore<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.ctx.runtime.client.clone(), self.namespace)
    }

    fn app(&self) -> &str {
        &self.restore.spec.target.visitors_app
    }

    fn holder(&self) -> Holder {
        Holder { kind: "MySQLRestore".into(), name: self.name.clone(), uid: self.restore.uid().unwrap_or_default() }
    }

    fn lock(&self) -> DatabaseLock {
        DatabaseLock::new(self.ctx.runtime.client.clone(), self.namespace, self.app())
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
        match self.api::<Job>().get_opt(&job_name).await.map_err(kube_err(format!("reading Job {job_name}")))? {
            Some(job) => self.follow(&job).await,
            None if self.job_was_started() => self.job_lost(&job_name).await,
            None => self.start(&job_name).await,
        }
    }

    /// An ended restore is a record: a later spec change is only noted.
    async fn ended(&self) -> Result<Action, Error> {
        let status = self.restore.status.as_ref();
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
        let credentials = match self.resolve_target().await? {
            Ok(credentials) => credentials,
            Err(blocked) => return self.blocked(blocked, Some(&backup)).await,
        };
        if let Err(blocked) = self.take_lock().await? {
            return self.blocked(blocked, Some(&backup)).await;
        }
        if self.restore.spec.quiesce()
            && let Some(running) = self.backend_still_running().await?
        {
            return self.quiescing(&backup, running).await;
        }
        let inputs = JobInputs {
            image: self.ctx.settings.agent_image.clone(),
            credentials_secret: credentials,
            backup: backup.clone(),
            traceparent: traceparent(&tracing::Span::current()),
            otlp_endpoint: self.ctx.settings.otlp_endpoint.clone(),
        };
        if inputs.traceparent.is_some() {
            tracing::debug!(env = TRACEPARENT_ENV, "the Job joins this reconcile's trace");
        }
        let params =
            PostParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PostParams::default() };
        match self.api::<Job>().create(&params, &restore_job(self.restore, &inputs)).await {
            Ok(_) => {
                let note = format!("Job {job_name} restores {} into VisitorsApp {}", backup.location, self.app());
                self.ctx.runtime.events.normal(self.restore, "Started", "CreateJob", note).await;
            }
            // Created by an earlier reconcile whose status write was lost: follow that one.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => return Err(Error::Kube { action: format!("creating Job {job_name}"), source }),
        }
        self.publish(status::running(self.restore, job_name, &backup, None, now())).await?;
        Ok(self.ctx.runtime.watching(self.restore))
    }

    /// The backup to read: a run that succeeded (its recorded location and manifest), or the
    /// explicit storage location.
    async fn resolve_backup(&self) -> Result<Result<Backup, Blocked>, Error> {
        let source = &self.restore.spec.source;
        let Some(run_name) = &source.backup else {
            let storage = source.storage.clone().unwrap_or_default();
            let path = source.path.clone().unwrap_or_default();
            let backup = Backup {
                agent_location: agent_location(&storage, &path),
                location: storage.location(&path),
                storage,
                ..Backup::default()
            };
            return Ok(self.check_storage(&backup.storage).await?.map(|()| backup));
        };
        let run = self
            .api::<MySQLBackup>()
            .get_opt(run_name)
            .await
            .map_err(kube_err(format!("reading MySQLBackup {run_name}")))?;
        let Some(run) = run else {
            let message = format!(
                "MySQLBackup {run_name} (spec.source.backup) does not exist in namespace {}; the restore waits for it",
                self.namespace
            );
            return Ok(Err(wait("BackupNotFound", message)));
        };
        let backup = match backup_of_run(&run) {
            Ok(backup) => backup,
            Err(blocked) => return Ok(Err(blocked)),
        };
        Ok(self.check_storage(&backup.storage).await?.map(|()| backup))
    }

    /// The storage's Secret or claim exists.
    async fn check_storage(&self, storage: &BackupStorage) -> Result<Result<(), Blocked>, Error> {
        if let Some(keys) = storage.s3.as_ref().and_then(|s3| s3.credentials_secret.as_ref()) {
            let needed = [keys.access_key_id_key(), keys.secret_access_key_key()];
            return self.secret_has_keys(&keys.name, &needed, "WaitingForStorageSecret").await;
        }
        if let Some(pvc) = &storage.persistent_volume_claim {
            let claim = &pvc.claim_name;
            let found = self
                .api::<PersistentVolumeClaim>()
                .get_metadata_opt(claim)
                .await
                .map_err(kube_err(format!("reading PersistentVolumeClaim {claim}")))?;
            if found.is_none() {
                let message = format!(
                    "PersistentVolumeClaim {claim} of the backup does not exist in namespace {}",
                    self.namespace
                );
                return Ok(Err(wait("WaitingForBackupVolume", message)));
            }
        }
        Ok(Ok(()))
    }

    /// The target app and its credentials Secret; returns the Secret's name.
    async fn resolve_target(&self) -> Result<Result<String, Blocked>, Error> {
        let app_name = self.app();
        let app = self
            .api::<VisitorsApp>()
            .get_opt(app_name)
            .await
            .map_err(kube_err(format!("reading VisitorsApp {app_name}")))?;
        let Some(app) = app else {
            let message = format!(
                "VisitorsApp {app_name} (spec.target.visitorsApp) does not exist in namespace {}",
                self.namespace
            );
            return Ok(Err(wait("WaitingForVisitorsApp", message)));
        };
        let secret = app.spec.credentials_secret.clone().unwrap_or_else(|| names::credentials_secret(app_name));
        let check = self.secret_has_keys(&secret, &[secret_keys::ROOT_PASSWORD], "WaitingForCredentialsSecret").await?;
        Ok(check.map(|()| secret))
    }

    /// Checks that Secret `name` holds non-empty `keys`; the values go nowhere but this check.
    async fn secret_has_keys(
        &self,
        name: &str,
        keys: &[&str],
        reason: &'static str,
    ) -> Result<Result<(), Blocked>, Error> {
        let secret = self.api::<Secret>().get_opt(name).await.map_err(kube_err(format!("reading Secret {name}")))?;
        let Some(secret) = secret else {
            return Ok(Err(wait(reason, format!("Secret {name} does not exist in namespace {}", self.namespace))));
        };
        let has = |key: &str| {
            let data = secret.data.as_ref().and_then(|d| d.get(key)).is_some_and(|v: &ByteString| !v.0.is_empty());
            let string = secret.string_data.as_ref().and_then(|d| d.get(key)).is_some_and(|v| !v.is_empty());
            data || string
        };
        let missing: Vec<&str> = keys.iter().copied().filter(|key| !has(key)).collect();
        if missing.is_empty() {
            return Ok(Ok(()));
        }
        Ok(Err(wait(reason, format!("Secret {name} has no value for key {}", missing.join(", ")))))
    }

    async fn take_lock(&self) -> Result<Result<(), Blocked>, Error> {
        let owner =
            self.restore.controller_owner_ref(&()).expect("a MySQLRestore read from the API has a name and UID");
        let lock = self.lock();
        let acquired = lock.acquire(&self.holder(), owner, &self.ctx.runtime.field_manager).await.map_err(kube_err(
            format!("taking Lease {} (the database lock of VisitorsApp {})", lock.name(), self.app()),
        ))?;
        Ok(match acquired {
            Acquired::Held => Ok(()),
            Acquired::Busy(holder) => Err(wait(
                REASON_WAITING_FOR_LOCK,
                format!(
                    "{holder} is using the database of VisitorsApp {}; one backup or restore runs at a time per database",
                    self.app()
                ),
            )),
        })
    }

    /// What still runs of the app's backend (`None` once it has no pods), read from its
    /// Deployment; the VisitorsApp controller scales it to zero while this restore quiesces.
    async fn backend_still_running(&self) -> Result<Option<String>, Error> {
        let name = names::backend(self.app());
        let deployment =
            self.api::<Deployment>().get_opt(&name).await.map_err(kube_err(format!("reading Deployment {name}")))?;
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
            Blocked::Wait { reason, message } => {
                let before = self.pending_reason();
                let wrote = self.publish(status::pending(self.restore, reason, message.clone(), now())).await?;
                if wrote && before.as_deref() != Some(reason) {
                    tracing::info!(reason, why = %message, "waiting");
                    self.ctx.runtime.events.normal(self.restore, reason, "Start", message).await;
                }
                Ok(self.ctx.runtime.waiting(self.restore))
            }
            Blocked::Refuse { reason, message } => {
                let end = RunEnd::Failed { reason, message, summary: None };
                self.finish(None, backup.cloned().unwrap_or_default(), end).await
            }
        }
    }

    fn pending_reason(&self) -> Option<String> {
        let status = self.restore.status.as_ref()?;
        conditions::find(&status.conditions, status::condition::PENDING)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.clone())
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
        let job_name = job.name_any();
        if !job.owner_references().iter().any(|o| Some(&o.uid) == self.restore.uid().as_ref()) {
            let message = format!("Job {job_name} exists but does not belong to this restore; delete or rename it");
            return self.blocked(wait("JobNameTaken", message), None).await;
        }
        let backup = self.recorded_backup();
        let state = job::job_state(job);
        if state == JobState::Active {
            let started = job::started_at(job);
            self.publish(status::running(self.restore, &job_name, &backup, started, now())).await?;
            return Ok(self.ctx.runtime.watching(self.restore));
        }
        let pods = self.pods(&job_name).await?;
        let deadline = self.restore.spec.active_deadline_seconds();
        let end = job::run_end(&state, &pods, Operation::Restore, deadline).expect("a finished Job has an end");
        let end = self.verified(end);
        self.finish(Some(&job_name), backup, end).await
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

    async fn pods(&self, job_name: &str) -> Result<Vec<Pod>, Error> {
        let params = ListParams::default().labels(&format!("{}={job_name}", job::JOB_NAME_LABEL));
        let pods =
            self.api::<Pod>().list(&params).await.map_err(kube_err(format!("listing the pods of Job {job_name}")))?;
        Ok(pods.items)
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

    async fn release(&self) -> Result<(), Error> {
        let lock = self.lock();
        lock.release(&self.holder())
            .await
            .map_err(kube_err(format!("releasing Lease {} (the database lock)", lock.name())))
    }

    /// Releases the lock first, then writes the end; the phase leaving `Running` is what lets
    /// the VisitorsApp controller start the backend again.
    async fn finish(&self, job_name: Option<&str>, backup: Backup, end: RunEnd) -> Result<Action, Error> {
        self.release().await?;
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
        self.ctx
            .runtime
            .write_status(self.restore, self.restore.status.as_ref(), &status)
            .await
            .map_err(kube_err(format!("writing the status of MySQLRestore {}", self.name)))
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
            assert!(matches!(backup_of_run(&unfinished), Err(Blocked::Wait { reason: "BackupNotFinished", .. })));
        }
        let unverifiable = run(serde_json::json!({"phase": "Succeeded", "location": "s3://b/x"}));
        assert!(matches!(backup_of_run(&unverifiable), Err(Blocked::Refuse { reason: "BackupUnverifiable", .. })));
    }
}
