//! The app's finalizer: added before anything is created, and on deletion held until the
//! controller has said what happens to the data volume. Owner references delete the children;
//! the StatefulSet's claim retention policy decides about the volume.

use controller_common::finalizer::{Cleanup, Finalizer};
use kube::runtime::controller::Action;
use visitors_api::visitors_app::DeletionPolicy;

use crate::build;
use crate::context::{AppScope, Error};

/// Holds a deleted app until the controller has reported what happens to its data volume.
pub const FINALIZER: &str = "example.com/visitors-app-cleanup";
const CLEANUP: Finalizer = Finalizer(FINALIZER);

/// Adds the finalizer before anything is created.
pub async fn add_finalizer(scope: &AppScope<'_>) -> Result<(), Error> {
    if let Some(finalizers) = CLEANUP.keep(scope.runtime(), scope.app, true).await? {
        // The watch will report the app with its finalizer: this reconcile goes on with it.
        let mut with_finalizer = scope.app.clone();
        with_finalizer.metadata.finalizers = Some(finalizers);
        scope.ctx.seen.record(&with_finalizer);
    }
    Ok(())
}

/// The app is being deleted: say what happens to its volume, then let the deletion finish.
pub async fn reconcile_deleted(scope: &AppScope<'_>) -> Result<Action, Error> {
    let report = async { Ok::<_, Error>(report_volume(scope).await) };
    Ok(CLEANUP.finalize(scope.runtime(), scope.app, report).await?.action())
}

async fn report_volume(scope: &AppScope<'_>) -> Cleanup {
    let (app, name) = (scope.app, &scope.name);
    let claim = build::mysql::claim_name(name);
    let events = &scope.runtime().events;
    match app.spec.deletion_policy() {
        DeletionPolicy::Retain => {
            let secret = if build::secret::is_generated(app) {
                format!(" and Secret {}", build::secret::secret_name(app))
            } else {
                String::new()
            };
            let note = format!(
                "deletionPolicy is Retain: PersistentVolumeClaim {claim}{secret} are kept; a new VisitorsApp named {name} in this namespace reuses them; delete them by hand to free the storage"
            );
            tracing::info!(%claim, "retaining the database volume");
            events.normal(app, "VolumeRetained", "Delete", note).await;
        }
        DeletionPolicy::Delete => {
            let note = format!("deletionPolicy is Delete: PersistentVolumeClaim {claim} is deleted with the app");
            events.normal(app, "VolumeDeleted", "Delete", note).await;
        }
    }
    scope.ctx.seen.forget(app);
    scope.ctx.hold.forget(app);
    scope.ctx.replication.forget(app);
    scope.ctx.metrics.forget(&scope.metric_labels(), app.spec.mysql_replicas());
    Cleanup::Done(())
}
