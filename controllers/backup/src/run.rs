//! One on-demand (or scheduled) backup run: validate → resolve the app, its credentials and
//! the storage → take the database lock → start the Job → follow it → status from the agent's
//! summary, release the lock. Every step reads the API, so a restarted controller picks a run
//! up where it is; a finished run makes no request at all.

use controller_common::job::{self, JobState, RunEnd, TRACEPARENT_ENV, traceparent};
use controller_common::lock::{Acquired, DatabaseLock, Holder, REASON_WAITING_FOR_LOCK};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use visitors_api::agent_summary::Operation;
use visitors_api::labels::names;
use visitors_api::visitors_app::secret_keys;
use visitors_api::{MySQLBackup, MySQLBackupStatus, VisitorsApp};

use crate::build::backup_path;
use crate::build::job::{JobInputs, backup_job, job_name};
use crate::controller::{Context, Error, kube_err};
use crate::metrics::SourceLabels;
use crate::{status, validate};

/// What a run waits for before its Job can start: a condition reason and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: &'static str,
    pub message: String,
}

fn wait(reason: &'static str, message: String) -> Wait {
    Wait { reason, message }
}

pub async fn reconcile(backup: &MySQLBackup, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    Run { backup, ctx, namespace, name: backup.name_any() }.reconcile().await
}

struct Run<'a> {
    backup: &'a MySQLBackup,
    ctx: &'a Context,
    namespace: &'a str,
    name: String,
}

impl Run<'_> {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.ctx.runtime.client.clone(), self.namespace)
    }

    fn app(&self) -> &str {
        &self.backup.spec.source.visitors_app
    }

    fn holder(&self) -> Holder {
        Holder { kind: "MySQLBackup".into(), name: self.name.clone(), uid: self.backup.uid().unwrap_or_default() }
    }

    fn lock(&self) -> DatabaseLock {
        DatabaseLock::new(self.ctx.runtime.client.clone(), self.namespace, self.app())
    }

    fn location(&self) -> String {
        self.backup.spec.storage.location(&backup_path(self.backup))
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        let runtime = &self.ctx.runtime;
        if self.backup.metadata.deletion_timestamp.is_some() {
            runtime.forget(self.backup);
            return Ok(Action::await_change());
        }
        if let Err(invalid) = validate::backup(self.backup) {
            let wrote = self.publish(status::invalid(self.backup, &invalid, now())).await?;
            if wrote {
                runtime.report_invalid_spec(self.backup, &invalid).await;
            }
            return Ok(runtime.until_spec_changes(self.backup));
        }
        if status::is_finished(self.backup) {
            return Ok(runtime.converged(self.backup));
        }
        let job_name = job_name(self.backup);
        match self.api::<Job>().get_opt(&job_name).await.map_err(kube_err(format!("reading Job {job_name}")))? {
            Some(job) => self.follow(&job).await,
            None if self.job_was_started() => self.job_lost(&job_name).await,
            None => self.start(&job_name).await,
        }
    }

    /// The status says a Job was started (a Job that is gone now was deleted by someone).
    fn job_was_started(&self) -> bool {
        self.backup.status.as_ref().is_some_and(|s| s.job_name.is_some())
    }

    // ----- before the Job -----

    async fn start(&self, job_name: &str) -> Result<Action, Error> {
        let credentials = match self.resolve().await? {
            Ok(credentials) => credentials,
            Err(wait) => return self.wait(wait).await,
        };
        let owner = self.backup.controller_owner_ref(&()).expect("a MySQLBackup read from the API has a name and UID");
        let lock = self.lock();
        match lock.acquire(&self.holder(), owner, &self.ctx.runtime.field_manager).await.map_err(kube_err(format!(
            "taking Lease {} (the database lock of VisitorsApp {})",
            lock.name(),
            self.app()
        )))? {
            Acquired::Held => {}
            Acquired::Busy(holder) => {
                let message = format!(
                    "{holder} is using the database of VisitorsApp {}; one backup or restore runs at a time per database",
                    self.app()
                );
                return self.wait(wait(REASON_WAITING_FOR_LOCK, message)).await;
            }
        }
        let inputs = JobInputs {
            image: self.ctx.settings.agent_image.clone(),
            credentials_secret: credentials,
            traceparent: traceparent(&tracing::Span::current()),
            otlp_endpoint: self.ctx.settings.otlp_endpoint.clone(),
        };
        if inputs.traceparent.is_some() {
            tracing::debug!(env = TRACEPARENT_ENV, "the Job joins this reconcile's trace");
        }
        let params =
            PostParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PostParams::default() };
        match self.api::<Job>().create(&params, &backup_job(self.backup, &inputs)).await {
            Ok(_) => {
                let note = format!("Job {job_name} backs up VisitorsApp {} to {}", self.app(), self.location());
                self.ctx.runtime.events.normal(self.backup, "Started", "CreateJob", note).await;
            }
            // Created by an earlier reconcile whose status write was lost: follow that one.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => return Err(Error::Kube { action: format!("creating Job {job_name}"), source }),
        }
        self.publish(status::running(self.backup, job_name, self.location(), None, now())).await?;
        // The Job watch wakes the run when the Job changes, ends or disappears.
        Ok(self.ctx.runtime.watching(self.backup))
    }

    /// Everything the Job needs that the run does not hold: the app, its credentials Secret,
    /// and the storage's Secret or claim. Returns the credentials Secret's name.
    async fn resolve(&self) -> Result<Result<String, Wait>, Error> {
        let app_name = self.app();
        let Some(app) = self
            .api::<VisitorsApp>()
            .get_opt(app_name)
            .await
            .map_err(kube_err(format!("reading VisitorsApp {app_name}")))?
        else {
            let message = format!("VisitorsApp {app_name} does not exist in namespace {}", self.namespace);
            return Ok(Err(wait("WaitingForVisitorsApp", message)));
        };
        let secret = app.spec.credentials_secret.clone().unwrap_or_else(|| names::credentials_secret(app_name));
        if let Err(wait) =
            self.secret_has_keys(&secret, &[secret_keys::ROOT_PASSWORD], "WaitingForCredentialsSecret").await?
        {
            return Ok(Err(wait));
        }
        if let Some(s3) = &self.backup.spec.storage.s3
            && let Some(keys) = &s3.credentials_secret
        {
            let needed = [keys.access_key_id_key(), keys.secret_access_key_key()];
            if let Err(wait) = self.secret_has_keys(&keys.name, &needed, "WaitingForStorageSecret").await? {
                return Ok(Err(wait));
            }
        }
        if let Some(pvc) = &self.backup.spec.storage.persistent_volume_claim {
            let claim = &pvc.claim_name;
            let claims = self.api::<PersistentVolumeClaim>();
            if claims
                .get_metadata_opt(claim)
                .await
                .map_err(kube_err(format!("reading PersistentVolumeClaim {claim}")))?
                .is_none()
            {
                let message = format!(
                    "PersistentVolumeClaim {claim} (spec.storage.persistentVolumeClaim.claimName) does not exist in namespace {}",
                    self.namespace
                );
                return Ok(Err(wait("WaitingForBackupVolume", message)));
            }
        }
        Ok(Ok(secret))
    }

    /// Checks that Secret `name` exists and holds non-empty `keys`; its values are never read
    /// into anything but this check.
    async fn secret_has_keys(
        &self,
        name: &str,
        keys: &[&str],
        reason: &'static str,
    ) -> Result<Result<(), Wait>, Error> {
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

    async fn wait(&self, wait: Wait) -> Result<Action, Error> {
        let before = self.pending_reason();
        let wrote = self.publish(status::pending(self.backup, wait.reason, wait.message.clone(), now())).await?;
        if wrote && before.as_deref() != Some(wait.reason) {
            tracing::info!(reason = wait.reason, why = %wait.message, "waiting");
            self.ctx.runtime.events.normal(self.backup, wait.reason, "Start", wait.message).await;
        }
        Ok(self.ctx.runtime.waiting(self.backup))
    }

    fn pending_reason(&self) -> Option<String> {
        let status = self.backup.status.as_ref()?;
        visitors_api::conditions::find(&status.conditions, visitors_api::backup::condition::PENDING)
            .filter(|c| c.status == "True")
            .map(|c| c.reason.clone())
    }

    // ----- while and after the Job -----

    async fn follow(&self, job: &Job) -> Result<Action, Error> {
        let job_name = job.name_any();
        if !job.owner_references().iter().any(|o| Some(&o.uid) == self.backup.uid().as_ref()) {
            let message = format!("Job {job_name} exists but does not belong to this run; delete or rename it");
            return self.wait(wait("JobNameTaken", message)).await;
        }
        let state = job::job_state(job);
        if state == JobState::Active {
            let started = job::started_at(job);
            self.publish(status::running(self.backup, &job_name, self.location(), started, now())).await?;
            return Ok(self.ctx.runtime.watching(self.backup));
        }
        let pods = self.pods(&job_name).await?;
        let deadline = self.backup.spec.active_deadline_seconds();
        let end = job::run_end(&state, &pods, Operation::Backup, deadline).expect("a finished Job has an end");
        self.finish(&job_name, end).await
    }

    async fn pods(&self, job_name: &str) -> Result<Vec<Pod>, Error> {
        let params = ListParams::default().labels(&format!("{}={job_name}", job::JOB_NAME_LABEL));
        let pods =
            self.api::<Pod>().list(&params).await.map_err(kube_err(format!("listing the pods of Job {job_name}")))?;
        Ok(pods.items)
    }

    async fn job_lost(&self, job_name: &str) -> Result<Action, Error> {
        let message = format!("Job {job_name} was deleted before it finished; the backup did not complete");
        self.finish(job_name, RunEnd::Failed { reason: "JobDeleted", message, summary: None }).await
    }

    /// Releases the lock first: a status write that fails is retried, a lock held by a finished
    /// run would only be taken over later.
    async fn finish(&self, job_name: &str, end: RunEnd) -> Result<Action, Error> {
        let lock = self.lock();
        lock.release(&self.holder())
            .await
            .map_err(kube_err(format!("releasing Lease {} (the database lock)", lock.name())))?;
        let status = status::finished(self.backup, job_name, &end, self.location(), now());
        if self.publish(status.clone()).await? {
            self.announce(&end, &status).await;
        }
        Ok(self.ctx.runtime.converged(self.backup))
    }

    async fn announce(&self, end: &RunEnd, status: &MySQLBackupStatus) {
        let source = SourceLabels { namespace: self.namespace.to_string(), visitors_app: self.app().to_string() };
        let completed =
            status.completion_time.as_ref().map(|t| t.0.as_millisecond() as f64 / 1000.0).unwrap_or_default();
        let succeeded = matches!(end, RunEnd::Succeeded(_));
        self.ctx.metrics.run_ended(source, succeeded, completed, status.duration_seconds, status.size_bytes);
        let events = &self.ctx.runtime.events;
        match end {
            RunEnd::Succeeded(_) => {
                let note = format!(
                    "backup stored at {}: {} bytes, {} tables, {} rows",
                    status.location.as_deref().unwrap_or_default(),
                    status.size_bytes.unwrap_or_default(),
                    status.tables.unwrap_or_default(),
                    status.rows.unwrap_or_default()
                );
                events.normal(self.backup, "Succeeded", "Backup", note).await;
            }
            RunEnd::Failed { reason, message, .. } => {
                tracing::warn!(reason, error = %message, "backup failed");
                events.warning(self.backup, reason, "Backup", message.clone()).await;
            }
        }
    }

    async fn publish(&self, status: MySQLBackupStatus) -> Result<bool, Error> {
        self.ctx
            .runtime
            .write_status(self.backup, self.backup.status.as_ref(), &status)
            .await
            .map_err(kube_err(format!("writing the status of MySQLBackup {}", self.name)))
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}
