//! The wiring of the MySQLRestore controller ([`crate::reconcile`]): the watches that wake a
//! restore (the restores, their Jobs and the Jobs' pods, and the backend Deployments they wait
//! on while quiescing) and the loop that drives its reconciles.

use std::sync::Arc;

use controller_common::args::AgentArgs;
use controller_common::process::{Identity, Reconciling};
use controller_common::watch::{OPERATION_CONCURRENCY, api_in, drive, watched_objects};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use visitors_api::MySQLRestore;
use visitors_api::labels::{Component, tier_selector};

use crate::context::Context;
use crate::metrics::RestoreMetrics;
use crate::reconcile::{error_policy, reconcile};

pub const IDENTITY: Identity = Identity { name: "restore-controller", crd: "mysqlrestores.example.com" };

/// The restore a pod of a restore Job runs for, from the pod's restore label: its containers
/// changing (the staging step ending) move the restore from `Running` to `Verifying`.
pub fn restore_of_pod(pod: &Pod) -> Option<ObjectRef<MySQLRestore>> {
    let restore = pod.labels().get(crate::build::RESTORE_LABEL)?;
    Some(ObjectRef::new(restore).within(&pod.namespace()?))
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
pub async fn watch_and_reconcile(started: Reconciling<AgentArgs>) {
    let (reader, restores, jobs) = started.operations::<MySQLRestore>(Component::Restore);
    let (client, namespace) = (started.runtime.client.clone(), started.namespace());
    // Full pods and Deployments: a metadata-only watch would not report their status changing.
    let pods = watched_objects(
        api_in::<Pod>(client.clone(), namespace),
        watcher::Config::default().labels_from(&tier_selector(Component::Restore)),
    );
    let backends = watched_objects(
        api_in::<Deployment>(client, namespace),
        watcher::Config::default().labels_from(&tier_selector(Component::Backend)),
    );
    let settings = started.agent_settings();
    let Reconciling { runtime, shutdown, .. } = started;
    let metrics = RestoreMetrics::default();
    metrics.register(&runtime.metrics);
    let context = Arc::new(Context { runtime, settings, metrics });
    let controller = Controller::for_stream(restores, reader)
        .with_config(ControllerConfig::default().concurrency(OPERATION_CONCURRENCY));
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
