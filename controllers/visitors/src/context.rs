//! What every step of a VisitorsApp reconcile shares: the context (the runtime, the database
//! check, the caches the watches fill, what the watches have seen), the app one reconcile works
//! on ([`AppScope`]), and the error a reconcile fails with.

use std::sync::Arc;

use controller_common::error::{ApiError, NoNamespace, api_err, namespace_of};
use controller_common::kind::NamespacedKind;
use controller_common::{ReconcileFailure, Runtime};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::PostParams;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use visitors_api::{MySQLRestore, VisitorsApp};

use crate::build::secret::Credentials;
use crate::build::tls::ServingTls;
use crate::database::check::DatabaseCheck;
use crate::replication;
use crate::wake::cache::{CachedDeployment, CachedStatefulSet};
use crate::wake::hold::Hold;
use crate::wake::seen::Seen;

/// What every reconcile shares.
pub struct Context {
    pub runtime: Arc<Runtime>,
    /// The controller's own `SELECT 1`; `None` trusts the pod's readiness probe alone (for a
    /// controller that cannot reach pod networks, e.g. one running outside the cluster).
    pub database_check: Option<Arc<dyn DatabaseCheck>>,
    /// What the Jobs that seed a replicated app's server from a backup run are started with;
    /// `None`: the controller was given no agent image.
    pub agent: Option<controller_common::operation::AgentSettings>,
    pub stores: Stores,
    /// What the reconciles have seen of each app and child: the watches wake an app only for
    /// news, not for the echoes of its own reconcile's writes.
    pub seen: Seen,
    /// Status-only wake-ups wait while new apps wait for their first reconcile, and for each
    /// app's pace.
    pub hold: Hold,
    /// What the replication manager remembers of each replicated app between looks.
    pub replication: replication::memory::Memories,
    /// How the replicated apps' servers replicate, for `/metrics`.
    pub metrics: crate::metrics::ReplicationMetrics,
}

/// Caches of the owned workloads, filled by the owned-object watches. The reconcile reads them
/// instead of the API: to keep the immutable claim templates of a StatefulSet, and to see a
/// backend it does not apply while the database is down.
#[derive(Clone)]
pub struct Stores {
    pub statefulsets: Store<CachedStatefulSet>,
    pub deployments: Store<CachedDeployment>,
    /// The MySQLRestores: one that holds an app's database keeps its backend stopped.
    pub restores: Store<MySQLRestore>,
    /// The MySQL pods of replicated apps: their readiness, deletion and role labels.
    pub pods: Store<Pod>,
}

impl Stores {
    /// Both caches hold their initial list. Before that, "absent from the cache" means nothing.
    pub fn ready(&self) -> bool {
        let ready = |wait: Option<Result<(), reflector::store::WriterDropped>>| matches!(wait, Some(Ok(())));
        ready(self.statefulsets.wait_until_ready().now_or_never())
            && ready(self.deployments.wait_until_ready().now_or_never())
            && ready(self.restores.wait_until_ready().now_or_never())
            && ready(self.pods.wait_until_ready().now_or_never())
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

/// The app one reconcile works on, with the context: what each step of the reconcile takes.
pub struct AppScope<'a> {
    pub app: &'a VisitorsApp,
    pub ctx: &'a Context,
    pub name: String,
    pub namespace: String,
}

impl<'a> AppScope<'a> {
    pub fn of(app: &'a VisitorsApp, ctx: &'a Context) -> Result<Self, Error> {
        Ok(AppScope { app, ctx, name: app.name_any(), namespace: namespace_of(app)? })
    }

    pub fn runtime(&self) -> &Runtime {
        &self.ctx.runtime
    }

    /// What the replication manager of the app needs: the app, the API and the cached MySQL
    /// pods, its memory, and how to reach the servers.
    pub fn replication<'b>(
        &'b self,
        credentials: &'b Credentials,
        tls: Option<&'b ServingTls>,
    ) -> replication::Scope<'b> {
        let statefulset = self.cached(&self.ctx.stores.statefulsets, &visitors_api::labels::names::mysql(&self.name));
        replication::Scope {
            app: self.app,
            name: &self.name,
            namespace: &self.namespace,
            runtime: &self.ctx.runtime,
            pods: &self.ctx.stores.pods,
            update_revision: statefulset.and_then(|sts| sts.mysql().update_revision.clone()),
            agent: self.ctx.agent.as_ref(),
            memories: &self.ctx.replication,
            credentials,
            tls,
        }
    }

    /// The labels of the app's own metrics.
    pub fn metric_labels(&self) -> crate::metrics::AppLabels {
        crate::metrics::AppLabels { namespace: self.namespace.clone(), visitors_app: self.name.clone() }
    }

    /// The API of kind `K` in the app's namespace.
    pub fn api<K: NamespacedKind>(&self) -> Api<K> {
        Api::namespaced(self.ctx.runtime.client.clone(), &self.namespace)
    }

    /// Object `name` of the app's namespace, as the watch of its kind cached it.
    pub fn cached<K: Resource<DynamicType = ()> + Clone>(&self, store: &Store<K>, name: &str) -> Option<Arc<K>> {
        store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// No reconcile has written the app's status yet: the Secrets the controller generates for
    /// it are almost certainly absent, so they are created without a read first (a create that
    /// finds one reads it, see [`Self::create_or_read_secret`]). With thousands of new apps at
    /// once, the reads that would only answer 404 were a fifth of a first reconcile's requests.
    pub fn is_new(&self) -> bool {
        self.app.status.is_none()
    }

    /// Creates `secret` under the controller's field manager; one created meanwhile (by an
    /// interrupted reconcile, or by someone else: the caller checks whose it is) is read instead.
    pub async fn create_or_read_secret(&self, secret: &Secret) -> Result<Secret, Error> {
        let name = secret.name_any();
        match self.create_secret(secret).await? {
            Some(created) => Ok(created),
            None => Ok(self.api::<Secret>().get(&name).await.map_err(api_err(format!("reading Secret {name}")))?),
        }
    }

    /// Creates `secret` under the controller's field manager: `None` when one of its name exists.
    pub async fn create_secret(&self, secret: &Secret) -> Result<Option<Secret>, Error> {
        let name = secret.name_any();
        let params = PostParams { field_manager: Some(self.runtime().field_manager.clone()), ..PostParams::default() };
        match self.api::<Secret>().create(&params, secret).await {
            Ok(created) => Ok(Some(created)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(source) => Err(ApiError { action: format!("creating Secret {name}"), source }.into()),
        }
    }
}

/// Why a reconcile failed: what every controller can fail with, and the one failure of its own.
/// Every variant says which object and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Common(#[from] controller_common::error::Error),
    #[error(
        "{child} keeps items in lists the controller sets even after they were removed ({items}); a mutating admission webhook may be adding them: exclude the child from it"
    )]
    ForeignItemsReturn { child: String, items: String },
    /// A replication operation on one MySQL server failed (the server's answer, never a
    /// statement: some hold a password).
    #[error(transparent)]
    Replication(#[from] replication::act::ActError),
}

impl From<ApiError> for Error {
    fn from(error: ApiError) -> Self {
        Error::Common(error.into())
    }
}

impl From<replication::Error> for Error {
    fn from(error: replication::Error) -> Self {
        match error {
            replication::Error::Api(error) => error.into(),
            replication::Error::Act(act) => act.into(),
        }
    }
}

impl From<NoNamespace> for Error {
    fn from(error: NoNamespace) -> Self {
        Error::Common(error.into())
    }
}

impl Error {
    /// The API server found the request invalid (422).
    pub fn is_rejected(&self) -> bool {
        matches!(self, Error::Common(controller_common::error::Error::Api(error)) if error.is_rejected())
    }
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::Common(error) => error.metric_label(),
            Error::ForeignItemsReturn { .. } => "ForeignItemsReturn",
            Error::Replication(_) => "Replication",
        }
    }
}
