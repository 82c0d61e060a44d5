//! The MySQLBackup reconcile: validate the spec, report it in status and events.
//! Running backups (Jobs, schedules, retention) comes with the backup controller issue.

use std::sync::Arc;

use controller_common::runner::{Identity, drive, primary_stream, scoped_api};
use controller_common::{ControllerArgs, ReconcileFailure, Runtime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector;
use tokio_util::sync::CancellationToken;
use visitors_api::MySQLBackup;

use crate::status;

pub const IDENTITY: Identity = Identity { name: "backup-controller", crd: "mysqlbackups.example.com" };

pub struct Context {
    pub runtime: Arc<Runtime>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("MySQLBackup has no namespace")]
    NoNamespace,
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "Kube",
            Error::NoNamespace => "NoNamespace",
        }
    }
}

pub async fn reconcile(backup: Arc<MySQLBackup>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = &context.runtime;
    runtime.instrumented(&*backup, reconcile_backup(&backup, runtime)).await
}

async fn reconcile_backup(backup: &MySQLBackup, runtime: &Runtime) -> Result<Action, Error> {
    backup.namespace().ok_or(Error::NoNamespace)?;
    let validation = backup.spec.validate();
    let desired = status::desired(backup, &validation, Time(jiff::Timestamp::now()));
    let wrote = runtime.write_status(backup, backup.status.as_ref(), &desired).await?;
    Ok(match validation {
        Ok(()) => runtime.converged(backup),
        Err(invalid) => {
            if wrote {
                runtime.report_invalid_spec(backup, &invalid).await;
            }
            runtime.until_spec_changes(backup)
        }
    })
}

pub fn error_policy(backup: Arc<MySQLBackup>, error: &Error, context: Arc<Context>) -> Action {
    context.runtime.failed(&*backup, error)
}

/// Watches MySQLBackups and reconciles them until `shutdown`.
pub async fn run(runtime: Arc<Runtime>, args: ControllerArgs, shutdown: CancellationToken) {
    let api = scoped_api::<MySQLBackup>(runtime.client.clone(), &args);
    let (reader, writer) = reflector::store();
    let controller = Controller::for_stream(primary_stream(api, writer), reader);
    drive(controller, reconcile, error_policy, Arc::new(Context { runtime }), shutdown).await;
}
