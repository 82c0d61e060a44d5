//! What every step of a VisitorsApp reconcile shares: the context (the runtime, the database
//! check, the caches the watches fill, what the watches have seen) and the error a reconcile
//! fails with.

use std::sync::Arc;

use controller_common::reconcile::ApiError;
use controller_common::{ReconcileFailure, Runtime};
use futures::FutureExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::ResourceExt;
use kube::runtime::reflector::{self, Store};
use visitors_api::MySQLRestore;

use crate::db::DatabaseProbe;
use crate::hold::Hold;
use crate::seen::Seen;

/// What every reconcile shares.
pub struct Context {
    pub runtime: Arc<Runtime>,
    /// The controller's own `SELECT 1`; `None` trusts the pod's readiness probe alone (for a
    /// controller that cannot reach pod networks, e.g. one running outside the cluster).
    pub probe: Option<Arc<dyn DatabaseProbe>>,
    pub stores: Stores,
    /// What the reconciles have seen of each app and child: the watches wake an app only for
    /// news, not for the echoes of its own reconcile's writes.
    pub seen: Seen,
    /// Status-only wake-ups wait while new apps wait for their first reconcile, and for each
    /// app's pace.
    pub hold: Hold,
}

/// Caches of the owned workloads, filled by the owned-object watches. The reconcile reads them
/// instead of the API: to keep the immutable claim templates of a StatefulSet, and to see a
/// backend it does not apply while the database is down.
#[derive(Clone)]
pub struct Stores {
    pub statefulsets: Store<StatefulSet>,
    pub deployments: Store<Deployment>,
    /// The MySQLRestores: one that holds an app's database keeps its backend stopped.
    pub restores: Store<MySQLRestore>,
}

impl Stores {
    /// Both caches hold their initial list. Before that, "absent from the cache" means nothing.
    pub fn ready(&self) -> bool {
        let ready = |wait: Option<Result<(), reflector::store::WriterDropped>>| matches!(wait, Some(Ok(())));
        ready(self.statefulsets.wait_until_ready().now_or_never())
            && ready(self.deployments.wait_until_ready().now_or_never())
            && ready(self.restores.wait_until_ready().now_or_never())
    }

    /// The restore that keeps the backend of app `name` in `namespace` stopped now, if any
    /// (the first by name when several do).
    pub fn quiescing_restore(&self, namespace: &str, name: &str) -> Option<String> {
        let mut holding: Vec<String> = self
            .restores
            .state()
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(namespace) && r.spec.target.visitors_app == name)
            .filter(|r| r.quiesces_app())
            .map(|r| r.name_any())
            .collect();
        holding.sort();
        holding.into_iter().next()
    }
}

/// Why a reconcile failed. Every variant says which object and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "VisitorsApp {0:?} has no namespace, but the kind is namespaced; this is a bug in the API server or the CRD"
    )]
    NoNamespace(String),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(
        "{child} keeps items in lists the controller sets even after they were removed ({items}); a mutating admission webhook may be adding them: exclude the child from it"
    )]
    ForeignItemsReturn { child: String, items: String },
}

impl Error {
    /// The API server found the request invalid (422).
    pub fn is_rejected(&self) -> bool {
        matches!(self, Error::Api(error) if error.is_rejected())
    }
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace(_) => "NoNamespace",
            Error::Api(error) => error.metric_label(),
            Error::ForeignItemsReturn { .. } => "ForeignItemsReturn",
        }
    }
}
