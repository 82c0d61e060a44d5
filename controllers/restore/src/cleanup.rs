//! The restore's finalizer: added before the restore touches anything, and on deletion held
//! until its agent has stopped acting on the database, then the database lock is released.
//! The VisitorsApp controller starts the backend again once the restore is gone.

use controller_common::Runtime;
use controller_common::finalizer::{Cleanup, Finalizer};
use controller_common::operation::DatabaseOperation;
use kube::runtime::controller::Action;
use visitors_api::MySQLRestore;

use crate::build::job::job_name;
use crate::context::{Context, Error};
use crate::metrics::RestoreLabels;

/// Held on a restore until its Job is stopped and its database lock released.
pub const FINALIZER: &str = "example.com/restore-cleanup";
const CLEANUP: Finalizer = Finalizer(FINALIZER);

/// Adds the finalizer; returns whether it had to.
pub async fn add_finalizer(restore: &MySQLRestore, runtime: &Runtime) -> Result<bool, Error> {
    Ok(CLEANUP.keep(runtime, restore, true).await?.is_some())
}

/// A restore being deleted.
pub async fn reconcile_deleted(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    Ok(CLEANUP.finalize(&ctx.runtime, restore, before_removal(restore, namespace, ctx)).await?.action())
}

/// Its Job is stopped; until its pod has stopped too, the agent may still act on the database,
/// so the lock stays held and the backend stopped (the pod watch wakes the restore when the pod
/// stops). Then the lock is released.
async fn before_removal(restore: &MySQLRestore, namespace: &str, ctx: &Context) -> Result<Cleanup, Error> {
    let op = DatabaseOperation::of(restore, &ctx.runtime, namespace);
    if !restore.has_ended() {
        let job = job_name(restore);
        if !op.stop_job(&job).await? {
            tracing::info!(%job, "restore deleted: waiting for its Job's pod to stop");
            return Ok(Cleanup::Waiting(ctx.runtime.watching(restore)));
        }
    }
    op.release_lock().await?;
    ctx.metrics.deleted(&RestoreLabels::of(restore, namespace));
    Ok(Cleanup::Done(()))
}
