//! The MySQLRestore reconcile: validate the spec, report it in status and events.
//! Running restores (quiesce, Job, verify) comes with the restore controller issue.

use std::sync::Arc;

use controller_common::runner::{Identity, drive, primary_stream, scoped_api};
use controller_common::{ControllerArgs, ReconcileFailure, Runtime};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector;
use tokio_util::sync::CancellationToken;
use visitors_api::MySQLRestore;

use crate::status;

pub const IDENTITY: Identity = Identity { name: "restore-controller", crd: "mysqlrestores.example.com" };

pub struct Context {
    pub runtime: Arc<Runtime>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("MySQLRestore has no namespace")]
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

pub async fn reconcile(restore: Arc<MySQLRestore>, context: Arc<Context>) -> Result<Action, Error> {
    let runtime = &context.runtime;
    runtime.instrumented(&*restore, reconcile_restore(&restore, runtime)).await
}

async fn reconcile_restore(restore: &MySQLRestore, runtime: &Runtime) -> Result<Action, Error> {
    restore.namespace().ok_or(Error::NoNamespace)?;
    let validation = restore.spec.validate();
    let desired = status::desired(restore, &validation, Time(jiff::Timestamp::now()));
    let wrote = runtime.write_status(restore, restore.status.as_ref(), &desired).await?;
    Ok(match validation {
        Ok(()) => runtime.converged(restore),
        Err(invalid) => {
            if wrote {
                runtime.report_invalid_spec(restore, &invalid).await;
            }
            runtime.until_spec_changes(restore)
        }
    })
}

pub fn error_policy(restore: Arc<MySQLRestore>, error: &Error, context: Arc<Context>) -> Action {
    context.runtime.failed(&*restore, error)
}

/// Watches MySQLRestores and reconciles them until `shutdown`.
pub async fn run(runtime: Arc<Runtime>, args: ControllerArgs, shutdown: CancellationToken) {
    let api = scoped_api::<MySQLRestore>(runtime.client.clone(), &args);
    let (reader, writer) = reflector::store();
    let controller = Controller::for_stream(primary_stream(api, writer), reader);
    drive(controller, reconcile, error_policy, Arc::new(Context { runtime }), shutdown).await;
}
