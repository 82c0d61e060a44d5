//! The reconcile of a MySQLBackup and its error policy. A MySQLBackup is one backup run
//! ([`crate::backup_run`]) or a schedule of runs ([`crate::schedule`]); a run being deleted goes
//! through [`crate::cleanup`], which may delete its stored backup first.

use std::sync::Arc;

use controller_common::error::namespace_of;
use kube::runtime::controller::Action;
use visitors_api::MySQLBackup;

use crate::context::{Context, Error};

pub async fn reconcile(backup: Arc<MySQLBackup>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = context.runtime.clone();
    runtime
        .instrumented(&*backup, async {
            let namespace = namespace_of(&*backup)?;
            let deleted = backup.metadata.deletion_timestamp.is_some();
            match (backup.spec.is_schedule(), deleted) {
                (true, true) => Ok(crate::schedule::reconcile_deleted(&backup, &namespace, &context)),
                (true, false) => crate::schedule::reconcile(&backup, &namespace, &context).await,
                (false, true) => crate::cleanup::reconcile_deleted(&backup, &namespace, &context).await,
                (false, false) => crate::backup_run::reconcile(&backup, &namespace, &context).await,
            }
        })
        .await
}

/// See [`controller_common::reconcile::error_policy`].
pub fn error_policy(backup: Arc<MySQLBackup>, error: &Error, context: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&context.runtime, backup, error)
}
