//! The API side of one operation of the agent on a VisitorsApp's database (a backup run or a
//! restore), shared by the backup and restore controllers: resolving the app's credentials and
//! the storage, the per-database lock, creating and following the Job, and writing the
//! object's status. Each controller adds what its operation means (which Job, which status);
//! the steps they share live here once.

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::ListParams;
use kube::core::Selector;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use visitors_agent_contract::summary::Operation;
use visitors_api::VisitorsApp;
use visitors_api::conditions::{PENDING, reason};
use visitors_api::labels::names;
use visitors_api::operation::{OperationKind, OperationStatus};
use visitors_api::storage::BackupStorage;
use visitors_api::visitors_app::{TlsMode, secret_keys};

use crate::agent_job::{self, AgentInputs, DatabaseAccess, JobEnd, JobState, MysqlServers, ServerTls};
use crate::error::{ApiError, api_err};
use crate::kind::NamespacedKind;
use crate::lock::{Acquired, DatabaseLock, Holder, HolderKind, REASON_WAITING_FOR_LOCK};
use crate::ready;
use crate::reconcile::Runtime;
use crate::step::{Step, Wait};

/// What a controller that runs the agent is configured with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSettings {
    /// The image of the agent Jobs.
    pub agent_image: String,
    /// The OTLP endpoint handed to the agent, when the controller exports traces.
    pub otlp_endpoint: Option<String>,
}

impl AgentSettings {
    /// `agent_image`, and the OTLP endpoint the controller itself exports to (if any).
    pub fn from_env(agent_image: String) -> Self {
        AgentSettings { agent_image, otlp_endpoint: visitors_telemetry::otlp_endpoint() }
    }

    /// The inputs of a Job started now: the Job joins the current span's trace.
    pub fn inputs(&self) -> AgentInputs {
        let traceparent = visitors_telemetry::traceparent(&tracing::Span::current());
        if traceparent.is_some() {
            tracing::debug!(env = visitors_telemetry::TRACEPARENT_ENV, "the Job joins this reconcile's trace");
        }
        AgentInputs { image: self.agent_image.clone(), traceparent, otlp_endpoint: self.otlp_endpoint.clone() }
    }
}

/// The reason of `type_`'s condition while it is `True`.
pub fn pending_reason(conditions: &[Condition], type_: &str) -> Option<String> {
    visitors_api::conditions::find(conditions, type_).filter(|c| c.status == "True").map(|c| c.reason.clone())
}

/// The steps of an operation around its Job: start it, follow it, or notice it is gone.
pub trait JobSteps {
    type Error: From<ApiError>;
    /// No Job was started yet: start it once what it needs is there.
    fn start(&self, job_name: &str) -> impl Future<Output = Result<Action, Self::Error>> + Send;
    /// The Job exists: follow it to its end.
    fn follow(&self, job: &Job) -> impl Future<Output = Result<Action, Self::Error>> + Send;
    /// The status says a Job was started, but it is gone: someone deleted it.
    fn job_lost(&self, job_name: &str) -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// One operation (a MySQLBackup run or a MySQLRestore) acting on the database of VisitorsApp
/// `app`.
pub struct DatabaseOperation<'a, K> {
    pub object: &'a K,
    pub runtime: &'a Runtime,
    pub namespace: &'a str,
    /// The VisitorsApp whose database the operation acts on.
    pub app: &'a str,
}

impl<'a, K: OperationKind> DatabaseOperation<'a, K> {
    /// The operation `object`, in `namespace`, on the database its spec names.
    pub fn of(object: &'a K, runtime: &'a Runtime, namespace: &'a str) -> Self {
        DatabaseOperation { object, runtime, namespace, app: object.database_app() }
    }
}

impl<K> DatabaseOperation<'_, K>
where
    K: NamespacedKind,
{
    pub fn api<T>(&self) -> Api<T>
    where
        T: NamespacedKind,
    {
        Api::namespaced(self.runtime.client.clone(), self.namespace)
    }

    fn describe(&self) -> String {
        format!("{} {}", K::kind(&()), self.object.name_any())
    }

    // ----- what the Job needs -----

    /// How a Job reaches the app's MySQL, once the app exists, its credentials Secret holds the
    /// root password and its status says whether MySQL serves TLS. `app_field` names the spec
    /// field that names the app.
    pub async fn app_access(&self, app_field: &str) -> Result<Step<DatabaseAccess>, ApiError> {
        let app = ready!(self.app(app_field).await?);
        self.access_to(&app, app_field).await
    }

    /// [`Self::app_access`], once the app's database also answers (`DatabaseReady`): a backup
    /// or restore applied with its app (one `kubectl apply`, a GitOps sync) waits for MySQL to
    /// initialise instead of failing its Job against a server that is not there yet.
    pub async fn serving_app_access(&self, app_field: &str) -> Result<Step<DatabaseAccess>, ApiError> {
        let app = ready!(self.app(app_field).await?);
        if let Some(message) = database_not_serving(&app, app_field) {
            return Ok(Step::wait(reason::WAITING_FOR_VISITORS_APP, message));
        }
        self.access_to(&app, app_field).await
    }

    async fn app(&self, app_field: &str) -> Result<Step<VisitorsApp>, ApiError> {
        let app_name = self.app;
        let app = self
            .api::<VisitorsApp>()
            .get_opt(app_name)
            .await
            .map_err(api_err(format!("reading VisitorsApp {app_name}")))?;
        Ok(match app {
            Some(app) => Step::Ready(app),
            None => Step::wait(
                reason::WAITING_FOR_VISITORS_APP,
                format!("VisitorsApp {app_name} ({app_field}) does not exist in namespace {}", self.namespace),
            ),
        })
    }

    async fn access_to(&self, app: &VisitorsApp, app_field: &str) -> Result<Step<DatabaseAccess>, ApiError> {
        let app_name = self.app;
        let Some(tls) = app_tls(app) else {
            let message =
                format!("VisitorsApp {app_name} ({app_field}) has not reported whether its MySQL serves TLS yet");
            return Ok(Step::wait(reason::WAITING_FOR_VISITORS_APP, message));
        };
        let secret = app.spec.credentials_secret.clone().unwrap_or_else(|| names::credentials_secret(app_name));
        let check = self
            .secret_has_keys(&secret, &[secret_keys::ROOT_PASSWORD], reason::WAITING_FOR_CREDENTIALS_SECRET)
            .await?;
        let servers = MysqlServers::of(app);
        Ok(check.map(|()| DatabaseAccess { credentials_secret: secret, tls, servers }))
    }

    /// The storage's Secret holds its keys, or its claim exists. `claim_field` says where the
    /// claim is named, for example `spec.storage.persistentVolumeClaim.claimName`.
    pub async fn storage_ready(&self, storage: &BackupStorage, claim_field: &str) -> Result<Step<()>, ApiError> {
        if let Some(keys) = storage.s3.as_ref().and_then(|s3| s3.credentials_secret.as_ref()) {
            let needed = [keys.access_key_id_key(), keys.secret_access_key_key()];
            return self.secret_has_keys(&keys.name, &needed, reason::WAITING_FOR_STORAGE_SECRET).await;
        }
        if let Some(pvc) = &storage.persistent_volume_claim {
            let claim = &pvc.claim_name;
            let found = self
                .api::<PersistentVolumeClaim>()
                .get_metadata_opt(claim)
                .await
                .map_err(api_err(format!("reading PersistentVolumeClaim {claim}")))?;
            if found.is_none() {
                let message = format!(
                    "PersistentVolumeClaim {claim} ({claim_field}) does not exist in namespace {}",
                    self.namespace
                );
                return Ok(Step::wait(reason::WAITING_FOR_BACKUP_VOLUME, message));
            }
        }
        Ok(Step::Ready(()))
    }

    /// The Secret of encryption keys `secret` exists and holds `key_id` (when given); `field`
    /// names where the spec names the Secret.
    pub async fn encryption_keys_ready(
        &self,
        secret: &str,
        key_id: Option<&str>,
        field: &str,
    ) -> Result<Step<()>, ApiError> {
        let keys: Vec<&str> = key_id.into_iter().collect();
        Ok(match self.secret_has_keys(secret, &keys, reason::WAITING_FOR_ENCRYPTION_KEY).await? {
            Step::Wait(wait) => Step::wait(wait.reason, format!("{} ({field})", wait.message)),
            checked => checked,
        })
    }

    /// Checks that Secret `name` exists and holds non-empty `keys`; its values are never read
    /// into anything but this check.
    async fn secret_has_keys(&self, name: &str, keys: &[&str], reason: &'static str) -> Result<Step<()>, ApiError> {
        let secret = self.api::<Secret>().get_opt(name).await.map_err(api_err(format!("reading Secret {name}")))?;
        let Some(secret) = secret else {
            return Ok(Step::wait(reason, format!("Secret {name} does not exist in namespace {}", self.namespace)));
        };
        let has = |key: &str| {
            let data = secret.data.as_ref().and_then(|d| d.get(key)).is_some_and(|v: &ByteString| !v.0.is_empty());
            let string = secret.string_data.as_ref().and_then(|d| d.get(key)).is_some_and(|v| !v.is_empty());
            data || string
        };
        let missing: Vec<&str> = keys.iter().copied().filter(|key| !has(key)).collect();
        if missing.is_empty() {
            return Ok(Step::Ready(()));
        }
        Ok(Step::wait(reason, format!("Secret {name} has no value for key {}", missing.join(", "))))
    }

    // ----- the database lock -----

    pub fn holder(&self) -> Holder {
        Holder { kind: HolderKind::of::<K>(), name: self.object.name_any(), uid: self.object.uid().unwrap_or_default() }
    }

    pub fn lock(&self) -> DatabaseLock {
        DatabaseLock::new(self.runtime.client.clone(), self.namespace, self.app)
    }

    /// Takes the app's database lock, or says who holds it.
    pub async fn take_lock(&self) -> Result<Step<()>, ApiError> {
        let owner = self.object.controller_owner_ref(&()).expect("an object read from the API has a name and UID");
        let lock = self.lock();
        let acquired = lock.acquire(&self.holder(), owner, &self.runtime.field_manager).await.map_err(api_err(
            format!("taking Lease {} (the database lock of VisitorsApp {})", lock.name(), self.app),
        ))?;
        Ok(match acquired {
            Acquired::Held => Step::Ready(()),
            Acquired::Busy(holder) => Step::wait(
                REASON_WAITING_FOR_LOCK,
                format!(
                    "{holder} is using the database of VisitorsApp {}; one backup or restore runs at a time per database",
                    self.app
                ),
            ),
        })
    }

    /// Releases the lock if this run holds it.
    pub async fn release_lock(&self) -> Result<(), ApiError> {
        let lock = self.lock();
        lock.release(&self.holder())
            .await
            .map_err(api_err(format!("releasing Lease {} (the database lock)", lock.name())))
    }

    // ----- the Job -----

    /// The next of `steps` for the operation's Job `job_name`: follow it while it exists; a Job
    /// the status says was started but is gone was deleted; else start it.
    pub async fn next_step<S: JobSteps>(&self, steps: &S, job_name: &str) -> Result<Action, S::Error>
    where
        K: OperationKind,
    {
        let started = self.object.operation_status().is_some_and(|s| s.job_name().is_some());
        match self.job(job_name).await? {
            Some(job) => steps.follow(&job).await,
            None if started => steps.job_lost(job_name).await,
            None => steps.start(job_name).await,
        }
    }

    pub async fn job(&self, name: &str) -> Result<Option<Job>, ApiError> {
        self.api::<Job>().get_opt(name).await.map_err(api_err(format!("reading Job {name}")))
    }

    /// Creates `job` and tells the user with a `Started` Event saying `note`. A Job of that name
    /// created by an earlier reconcile whose status write was lost is followed, not recreated.
    pub async fn create_job(&self, job: &Job, note: String) -> Result<(), ApiError> {
        if self.create(job, "Job").await? {
            self.runtime.events.normal(self.object, "Started", "CreateJob", note).await;
        }
        Ok(())
    }

    /// Creates `child` (a `kind`) under the controller's field manager unless an object of its
    /// name exists; returns whether it created it.
    pub async fn create<C>(&self, child: &C, kind: &str) -> Result<bool, ApiError>
    where
        C: NamespacedKind,
    {
        crate::apply::create_unless_present(&self.api::<C>(), &self.runtime.field_manager, child, kind).await
    }

    /// Stops and deletes Job `name` with its pods; a Job already gone is fine.
    pub async fn delete_job(&self, name: &str) -> Result<(), ApiError> {
        crate::apply::delete_if_present(&self.api::<Job>(), "Job", name).await
    }

    /// Stops Job `name` if it still runs, and says whether none of its pods runs any more:
    /// only then has the agent stopped acting on the database and the storage.
    pub async fn stop_job(&self, name: &str) -> Result<bool, ApiError> {
        if let Some(job) = self.job(name).await?
            && agent_job::job_state(&job) == JobState::Active
        {
            self.delete_job(name).await?;
            return Ok(false);
        }
        Ok(self.pods(name).await?.iter().all(agent_job::pod_ended))
    }

    /// Whether `child` (a Job, a pod) belongs to this operation (an object of the same name
    /// could be someone else's).
    pub fn owns<C: Resource>(&self, child: &C) -> bool {
        child.owner_references().iter().any(|o| Some(&o.uid) == self.object.uid().as_ref())
    }

    /// A Job that exists but is not this run's: the run waits until it is gone.
    pub fn job_name_taken(&self, job: &Job) -> Wait {
        let message =
            format!("Job {} exists but does not belong to {}; delete or rename it", job.name_any(), self.describe());
        Wait::new(reason::JOB_NAME_TAKEN, message)
    }

    /// How the run of `job` ended, from the Job, its pods and the agent's summary of
    /// `operation`; `None` while the Job is active.
    pub async fn end_of(
        &self,
        job: &Job,
        operation: Operation,
        deadline_seconds: i64,
    ) -> Result<Option<JobEnd>, ApiError> {
        let state = agent_job::job_state(job);
        if state == JobState::Active {
            return Ok(None);
        }
        let mut pods = self.pods(&job.name_any()).await?;
        // A Job deleted in the background leaves its pods for a while: one of a Job of the
        // same name before this one must not give this one's result.
        pods.retain(|pod| pod.owner_references().iter().all(|o| o.kind != "Job" || Some(&o.uid) == job.uid().as_ref()));
        Ok(agent_job::job_end(&state, &pods, operation, deadline_seconds))
    }

    pub async fn pods(&self, job_name: &str) -> Result<Vec<Pod>, ApiError> {
        let selector = Selector::from_iter([(agent_job::JOB_NAME_LABEL.to_string(), job_name.to_string())]);
        let params = ListParams::default().labels_from(&selector);
        let pods =
            self.api::<Pod>().list(&params).await.map_err(api_err(format!("listing the pods of Job {job_name}")))?;
        Ok(pods.items)
    }

    // ----- status and Events -----

    /// Writes `desired` as the status unless it equals `current`; returns whether it wrote.
    pub async fn publish<S>(&self, current: Option<&S>, desired: &S) -> Result<bool, ApiError>
    where
        S: Serialize + PartialEq,
    {
        self.runtime
            .write_status(self.object, current, desired)
            .await
            .map_err(api_err(format!("writing the status of {}", self.describe())))
    }

    /// Tells the user how the operation ended, once its status says so: a Normal Event with
    /// `success` (the note of a success), or a Warning Event with the failure's reason.
    /// `action` names the operation (`Backup`, `Restore`).
    pub async fn announce_end(&self, end: &JobEnd, action: &str, success: impl FnOnce() -> String) {
        let events = &self.runtime.events;
        match end {
            JobEnd::Succeeded(_) => events.normal(self.object, reason::SUCCEEDED, action, success()).await,
            JobEnd::Failed { reason, message, .. } => {
                tracing::warn!(reason, error = %message, "{} failed", action.to_lowercase());
                events.warning(self.object, reason, action, message.clone()).await;
            }
        }
    }

    /// What the operation's status says it waits for (the reason of `Pending`), if it waits.
    pub fn waiting_for(&self) -> Option<String>
    where
        K: OperationKind,
    {
        self.object.operation_status().and_then(|status| pending_reason(status.conditions(), PENDING))
    }

    /// Tells the user what the run now waits for, once: after a status write, when the reason
    /// differs from the `previous` one.
    pub async fn announce_wait(&self, wait: &Wait, previous: Option<&str>) {
        if previous == Some(wait.reason) {
            return;
        }
        tracing::info!(reason = wait.reason, why = %wait.message, "waiting");
        self.runtime.events.normal(self.object, wait.reason, "Start", wait.message.clone()).await;
    }
}

/// The TLS an app's MySQL serves, as the app's status says; `None` until it says.
/// Why the app's database does not answer yet, when its `DatabaseReady` condition is not True.
pub fn database_not_serving(app: &VisitorsApp, app_field: &str) -> Option<String> {
    let conditions = app.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let ready = visitors_api::conditions::find(conditions, visitors_api::conditions::DATABASE_READY);
    match ready {
        Some(condition) if condition.status == "True" => None,
        Some(condition) => Some(format!(
            "the database of VisitorsApp {} ({app_field}) is not ready yet ({}: {})",
            app.name_any(),
            condition.reason,
            condition.message
        )),
        None => {
            Some(format!("the database of VisitorsApp {} ({app_field}) has not reported ready yet", app.name_any()))
        }
    }
}

pub fn app_tls(app: &VisitorsApp) -> Option<ServerTls> {
    let tls = app.status.as_ref()?.tls.as_ref()?;
    Some(match (tls.mode, &tls.secret_name) {
        (TlsMode::Required, Some(secret)) => ServerTls::Verified { ca_secret: secret.clone(), check_name: true },
        (TlsMode::Required, None) => return None,
        (TlsMode::Disabled, _) => ServerTls::Disabled,
    })
}

#[cfg(test)]
mod tests {
    use visitors_api::VisitorsAppStatus;
    use visitors_api::visitors_app::TlsStatus;

    use super::*;

    fn app_with(tls: Option<TlsStatus>) -> VisitorsApp {
        let mut app = VisitorsApp::new("ex", Default::default());
        app.status = Some(VisitorsAppStatus { tls, ..VisitorsAppStatus::default() });
        app
    }

    #[test]
    fn a_backup_or_restore_waits_until_the_apps_database_answers() {
        let condition = |status: &str, reason: &str| Condition {
            type_: visitors_api::conditions::DATABASE_READY.into(),
            status: status.into(),
            reason: reason.into(),
            message: "the pod is starting".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        };
        let with = |conditions: Vec<Condition>| {
            let mut app = app_with(None);
            app.status.as_mut().unwrap().conditions = conditions;
            app
        };
        let field = "spec.source.visitorsApp";
        assert_eq!(database_not_serving(&with(vec![condition("True", "Connected")]), field), None);
        let starting = database_not_serving(&with(vec![condition("False", "WaitingForMysqlPod")]), field).unwrap();
        assert!(starting.contains("WaitingForMysqlPod") && starting.contains(field), "{starting}");
        assert!(database_not_serving(&with(vec![]), field).is_some(), "no condition yet: not ready");
        assert!(database_not_serving(&VisitorsApp::new("ex", Default::default()), field).is_some(), "no status");
    }

    #[test]
    fn jobs_use_tls_exactly_as_the_apps_status_says_and_wait_while_it_does_not_say() {
        assert_eq!(app_tls(&VisitorsApp::new("ex", Default::default())), None);
        assert_eq!(app_tls(&app_with(None)), None);
        let plain = TlsStatus { mode: TlsMode::Disabled, ..TlsStatus::default() };
        assert_eq!(app_tls(&app_with(Some(plain))), Some(ServerTls::Disabled));
        let required = TlsStatus { mode: TlsMode::Required, secret_name: Some("ex-mysql-tls".into()), not_after: None };
        assert_eq!(
            app_tls(&app_with(Some(required))),
            Some(ServerTls::Verified { ca_secret: "ex-mysql-tls".into(), check_name: true })
        );
    }
}
