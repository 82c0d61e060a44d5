//! The MySQLRestore reconcile pipeline (see [`crate::run`]), its error policy and its watches:
//! the restores, their Jobs and the Jobs' pods, and the backend Deployments they wait on
//! while quiescing.

use std::sync::Arc;

use controller_common::agent_run::AgentSettings;
use controller_common::finalizer::{FinalizerError, reconcile_with_finalizer};
use controller_common::reconcile::ApiError;
use controller_common::runner::{Identity, api_in, drive, primary_stream, watched_objects};
use controller_common::{ReconcileFailure, Runtime};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;
use visitors_api::MySQLRestore;
use visitors_api::labels::MANAGED_BY;

use crate::metrics::RestoreMetrics;

pub const IDENTITY: Identity = Identity { name: "restore-controller", crd: "mysqlrestores.example.com" };
/// Held on a restore until its Job is stopped and its database lock released.
pub const FINALIZER: &str = "example.com/restore-cleanup";

pub struct Context {
    pub runtime: Arc<Runtime>,
    pub settings: AgentSettings,
    pub metrics: RestoreMetrics,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "MySQLRestore {0:?} has no namespace, but the kind is namespaced; this is a bug in the API server or the CRD"
    )]
    NoNamespace(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("the finalizer {FINALIZER} could not be handled: {0}")]
    Finalizer(String),
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace(_) => "NoNamespace",
            Error::Finalizer(_) => "Finalizer",
            Error::Api(error) => error.metric_label(),
        }
    }
}

pub async fn reconcile(restore: Arc<MySQLRestore>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = context.runtime.clone();
    runtime
        .instrumented(&*restore, async {
            let namespace = restore.namespace().ok_or_else(|| Error::NoNamespace(restore.name_any()))?;
            if restore.metadata.deletion_timestamp.is_some()
                && restore.finalizers().iter().any(|f| f == FINALIZER)
                && crate::run::agent_still_running(&restore, &namespace, &context).await?
            {
                // The pod watch wakes the restore when the agent's pod stops.
                return Ok(runtime.watching(&*restore));
            }
            let api: Api<MySQLRestore> = Api::namespaced(runtime.client.clone(), &namespace);
            let (live, deleted) = (context.clone(), context.clone());
            let (live_ns, deleted_ns) = (namespace.clone(), namespace.clone());
            reconcile_with_finalizer(
                &api,
                FINALIZER,
                restore.clone(),
                |restore| async move { crate::run::reconcile(&restore, &live_ns, &live).await },
                |restore| async move { crate::run::clean_up(&restore, &deleted_ns, &deleted).await },
            )
            .await
            .map_err(|error| match error {
                FinalizerError::Reconcile(error) => error,
                FinalizerError::Add(source) => {
                    Error::Api(ApiError { action: format!("adding the finalizer {FINALIZER}"), source })
                }
                FinalizerError::Remove(source) => {
                    Error::Api(ApiError { action: format!("removing the finalizer {FINALIZER}"), source })
                }
                other => Error::Finalizer(other.to_string()),
            })
        })
        .await
}

/// See [`controller_common::reconcile::error_policy`].
pub fn error_policy(restore: Arc<MySQLRestore>, error: &Error, context: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&context.runtime, restore, error)
}

/// Selects the Jobs of restores.
pub fn job_selector() -> String {
    format!("app.kubernetes.io/managed-by={MANAGED_BY},app.kubernetes.io/component=restore")
}

/// The restore a pod of a restore Job runs for, from the pod's restore label: its containers
/// changing (the staging step ending) move the restore from `Running` to `Verifying`.
pub fn restore_of_pod(pod: &Pod) -> Option<ObjectRef<MySQLRestore>> {
    let restore = pod.labels().get(crate::build::RESTORE_LABEL)?;
    Some(ObjectRef::new(restore).within(&pod.namespace()?))
}

/// Selects the backend Deployments of VisitorsApps.
pub fn backend_selector() -> String {
    format!("app.kubernetes.io/managed-by={MANAGED_BY},app.kubernetes.io/component=backend")
}

/// The restores a backend Deployment concerns: those of its app (its `instance` label) that
/// have not ended.
pub fn restores_of_backend(restores: &Store<MySQLRestore>, deployment: &Deployment) -> Vec<ObjectRef<MySQLRestore>> {
    let Some(app) = deployment.labels().get("app.kubernetes.io/instance").cloned() else { return Vec::new() };
    let namespace = deployment.namespace();
    restores
        .state()
        .into_iter()
        .filter(|r| r.namespace() == namespace && r.spec.target.visitors_app == app && !r.has_ended())
        .map(|r| ObjectRef::from_obj(&*r))
        .collect()
}

/// Watches MySQLRestores, their Jobs (a restore wakes when its Job changes or is deleted) and
/// the backend Deployments (a quiescing restore wakes when its app's backend stops), until
/// `shutdown`.
pub async fn run(
    runtime: Arc<Runtime>,
    namespace: Option<String>,
    settings: AgentSettings,
    shutdown: CancellationToken,
) {
    let namespace = namespace.as_deref();
    let client = runtime.client.clone();
    let (reader, writer) = reflector::store();
    let restores = primary_stream(api_in::<MySQLRestore>(client.clone(), namespace), writer);
    let jobs = watched_objects(
        api_in::<PartialObjectMeta<Job>>(client.clone(), namespace),
        watcher::Config::default().labels(&job_selector()),
    );
    // Full pods and Deployments: a metadata-only watch would not report their status changing.
    let pods =
        watched_objects(api_in::<Pod>(client.clone(), namespace), watcher::Config::default().labels(&job_selector()));
    let backends = watched_objects(
        api_in::<Deployment>(client, namespace),
        watcher::Config::default().labels(&backend_selector()),
    );
    let metrics = RestoreMetrics::default();
    metrics.register(&runtime.metrics);
    let context = Arc::new(Context { runtime, settings, metrics });
    let controller = Controller::for_stream(restores, reader).with_config(ControllerConfig::default().concurrency(16));
    let store = controller.store();
    let controller = controller
        .owns_stream(jobs)
        .watches_stream(pods, |pod| restore_of_pod(&pod))
        .watches_stream(backends, move |deployment| restores_of_backend(&store, &deployment));
    drive(controller, reconcile, error_policy, context, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_jobs_pod_wakes_its_restore() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r1-restore-x7", "namespace": "shop",
                         "labels": {"example.com/restore": "r1", "app.kubernetes.io/component": "restore"}},
        }))
        .unwrap();
        assert_eq!(restore_of_pod(&pod), Some(ObjectRef::new("r1").within("shop")));
        assert_eq!(restore_of_pod(&Pod::default()), None, "a pod without the label wakes nothing");
    }
}
