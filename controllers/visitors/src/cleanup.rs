//! The app's finalizer: added before anything is created, and on deletion held until the
//! controller has said what happens to the data volume. Owner references delete the children;
//! the StatefulSet's claim retention policy decides about the volume.

use controller_common::finalizer::{Cleanup, Finalizer};
use kube::runtime::controller::Action;
use visitors_api::visitors_app::DeletionPolicy;

use crate::build;
use crate::context::Error;
use crate::reconcile::Reconciler;

/// Holds a deleted app until the controller has reported what happens to its data volume.
pub const FINALIZER: &str = "example.com/visitors-app-cleanup";
const CLEANUP: Finalizer = Finalizer(FINALIZER);

impl Reconciler<'_> {
    pub(crate) async fn add_finalizer(&self) -> Result<(), Error> {
        if let Some(finalizers) = CLEANUP.keep(&self.ctx.runtime, self.app, true).await? {
            // The watch will report the app with its finalizer: this reconcile goes on with it.
            let mut with_finalizer = self.app.clone();
            with_finalizer.metadata.finalizers = Some(finalizers);
            self.ctx.seen.record(&with_finalizer);
        }
        Ok(())
    }

    /// The app is being deleted: say what happens to its volume, then let the deletion finish.
    pub(crate) async fn clean_up(&self) -> Result<Action, Error> {
        let finalized =
            CLEANUP.finalize(&self.ctx.runtime, self.app, async { Ok::<_, Error>(self.report_volume().await) }).await?;
        Ok(finalized.action())
    }

    async fn report_volume(&self) -> Cleanup {
        let claim = build::mysql::claim_name(&self.name);
        match self.app.spec.deletion_policy() {
            DeletionPolicy::Retain => {
                let secret = if build::secret::is_generated(self.app) {
                    format!(" and Secret {}", build::secret::secret_name(self.app))
                } else {
                    String::new()
                };
                let note = format!(
                    "deletionPolicy is Retain: PersistentVolumeClaim {claim}{secret} are kept; a new VisitorsApp named {} in this namespace reuses them; delete them by hand to free the storage",
                    self.name
                );
                tracing::info!(%claim, "retaining the database volume");
                self.ctx.runtime.events.normal(self.app, "VolumeRetained", "Delete", note).await;
            }
            DeletionPolicy::Delete => {
                let note = format!("deletionPolicy is Delete: PersistentVolumeClaim {claim} is deleted with the app");
                self.ctx.runtime.events.normal(self.app, "VolumeDeleted", "Delete", note).await;
            }
        }
        self.ctx.seen.forget(self.app);
        self.ctx.hold.forget(self.app);
        Cleanup::Done(())
    }
}
