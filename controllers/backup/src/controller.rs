//! The MySQLBackup reconcile pipeline, its error policy and its watches. A MySQLBackup is a
//! run (validate → resolve → lock → Job → status from the agent's summary, see [`crate::run`])
//! or a schedule of runs (see [`crate::schedule`]).

use std::sync::Arc;

use controller_common::agent_run::AgentSettings;
use controller_common::reconcile::ApiError;
use controller_common::runner::{Identity, api_in, drive, primary_stream, watched_objects};
use controller_common::{ReconcileFailure, Runtime};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;
use visitors_api::MySQLBackup;
use visitors_api::labels::{MANAGED_BY, SCHEDULE_LABEL};

use crate::metrics::BackupMetrics;

pub const IDENTITY: Identity = Identity { name: "backup-controller", crd: "mysqlbackups.example.com" };

pub struct Context {
    pub runtime: Arc<Runtime>,
    pub settings: AgentSettings,
    pub metrics: Arc<BackupMetrics>,
}

impl Context {
    /// The context of `runtime`, with the backup metrics registered in its registry.
    pub fn new(runtime: Arc<Runtime>, settings: AgentSettings) -> Self {
        let metrics = Arc::new(BackupMetrics::default());
        metrics.register(&runtime.metrics);
        Context { runtime, settings, metrics }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "MySQLBackup {0:?} has no namespace, but the kind is namespaced; this is a bug in the API server or the CRD"
    )]
    NoNamespace(String),
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace(_) => "NoNamespace",
            Error::Api(error) => error.metric_label(),
        }
    }
}

pub async fn reconcile(backup: Arc<MySQLBackup>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = context.runtime.clone();
    runtime
        .instrumented(&*backup, async {
            let namespace = backup.namespace().ok_or_else(|| Error::NoNamespace(backup.name_any()))?;
            if backup.spec.is_schedule() {
                crate::schedule::reconcile(&backup, &namespace, &context).await
            } else {
                crate::run::reconcile(&backup, &namespace, &context).await
            }
        })
        .await
}

/// See [`controller_common::reconcile::error_policy`].
pub fn error_policy(backup: Arc<MySQLBackup>, error: &Error, context: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&context.runtime, backup, error)
}

/// Selects the Jobs of backup runs.
pub fn job_selector() -> String {
    format!("app.kubernetes.io/managed-by={MANAGED_BY},app.kubernetes.io/component=backup")
}

/// Watches MySQLBackups, their Jobs (a run wakes when its Job changes or is deleted) and the
/// runs of schedules (a schedule wakes when a run changes or ends), until `shutdown`.
pub async fn run(
    runtime: Arc<Runtime>,
    namespace: Option<String>,
    settings: AgentSettings,
    shutdown: CancellationToken,
) {
    let namespace = namespace.as_deref();
    let client = runtime.client.clone();
    let (reader, writer) = reflector::store();
    let backups = primary_stream(api_in::<MySQLBackup>(client.clone(), namespace), writer);
    let jobs = watched_objects(
        api_in::<PartialObjectMeta<Job>>(client.clone(), namespace),
        watcher::Config::default().labels(&job_selector()),
    );
    let runs = watched_objects(
        api_in::<PartialObjectMeta<MySQLBackup>>(client, namespace),
        watcher::Config::default().labels(SCHEDULE_LABEL),
    );
    let context = Arc::new(Context::new(runtime, settings));
    let controller = Controller::for_stream(backups, reader)
        .with_config(ControllerConfig::default().concurrency(16))
        .owns_stream(jobs)
        .owns_stream(runs);
    drive(controller, reconcile, error_policy, context, shutdown).await;
}
