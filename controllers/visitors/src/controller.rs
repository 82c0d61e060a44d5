//! The reconcile pipeline of a VisitorsApp — validate → build → apply → status — its error
//! policy, and the watches that wake it.

use std::fmt::Debug;
use std::sync::Arc;

use controller_common::apply::{apply, apply_status};
use controller_common::runner::{Identity, api_in, controller_config, drive, primary_stream, trim_for_cache};
use controller_common::{ReconcileFailure, Runtime};
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, PodSpec, PodTemplateSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use visitors_api::conditions::{self, READY};
use visitors_api::labels::{APP_NAME, MANAGED_BY, names};
use visitors_api::visitors_app::{DeletionPolicy, secret_keys};
use visitors_api::{MySQLRestore, VisitorsApp, VisitorsAppStatus};

use crate::build::{self, secret::Credentials};
use crate::db::{DatabaseProbe, Target};
use crate::hold::{Hold, owner_of};
use crate::repair;
use crate::seen::{Fingerprint, News, Seen, Ticket};
use crate::status::{self, Database, Observed, Workload};
use crate::validate::{self, Invalid};

/// Field manager, event reporter and lease name of this controller.
pub const NAME: &str = "visitors-controller";
/// The CRD this controller reconciles.
pub const CRD: &str = "visitorsapps.example.com";
/// Who this controller is, for the shared start-up sequence.
pub const IDENTITY: Identity = Identity { name: NAME, crd: CRD };
/// Holds a deleted app until the controller has reported what happens to its data volume.
pub const FINALIZER: &str = "example.com/visitors-app-cleanup";
/// How long a reconcile waits for the caches' initial list at start-up.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// Selects the children of every VisitorsApp (and nothing else) in the owned-object watches.
pub fn child_selector() -> String {
    format!("app.kubernetes.io/name={APP_NAME},app.kubernetes.io/managed-by={MANAGED_BY}")
}

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

/// The app a MySQLRestore targets: its changes (a phase, a deletion) wake that app.
pub fn target_app(restore: &MySQLRestore) -> Option<ObjectRef<VisitorsApp>> {
    let namespace = restore.namespace()?;
    Some(ObjectRef::new(&restore.spec.target.visitors_app).within(&namespace))
}

/// Why a reconcile failed. Every variant says which object and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "VisitorsApp {0:?} has no namespace, but the kind is namespaced; this is a bug in the API server or the CRD"
    )]
    NoNamespace(String),
    #[error("{action} failed: {}", explain(.source))]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "{child} keeps items in lists the controller sets even after they were removed ({items}); a mutating admission webhook may be adding them: exclude the child from it"
    )]
    ForeignItemsReturn { child: String, items: String },
}

impl Error {
    /// The API server found the request invalid (422).
    fn is_rejected(&self) -> bool {
        matches!(self, Error::Kube { source: kube::Error::Api(status), .. } if status.code == 422)
    }
}

impl ReconcileFailure for Error {
    fn metric_label(&self) -> &'static str {
        match self {
            Error::NoNamespace(_) => "NoNamespace",
            Error::Kube { source: kube::Error::Api(status), .. } if status.code == 403 => "Forbidden",
            Error::Kube { source: kube::Error::Api(status), .. } if status.code == 409 => "Conflict",
            Error::Kube { source: kube::Error::Api(status), .. } if status.code == 422 || status.code == 400 => {
                "Rejected"
            }
            Error::Kube { .. } => "Kube",
            Error::ForeignItemsReturn { .. } => "ForeignItemsReturn",
        }
    }
}

fn explain(error: &kube::Error) -> String {
    match error {
        // RBAC denials read "... cannot <verb> resource ..."; other 403s come from admission
        // (a storage class that cannot expand, a quota) and are no permission problem.
        kube::Error::Api(status) if status.code == 403 && status.message.contains(" cannot ") => format!(
            "the controller's ServiceAccount lacks a permission ({}); check the Role or ClusterRole from the Helm chart",
            status.message
        ),
        kube::Error::Api(status) if status.code == 403 => format!("the API server refused it: {}", status.message),
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
            format!("the API server rejected it: {}", status.message)
        }
        kube::Error::Api(status) => {
            format!("the API server answered {} {}: {}", status.code, status.reason, status.message)
        }
        other => format!("{other} (is the API server reachable?)"),
    }
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// The entry point the kube `Controller` calls.
pub async fn reconcile(app: Arc<VisitorsApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.runtime.instrumented(app.as_ref(), async { Reconciler::new(&app, &ctx)?.run().await }).await
}

/// kube's error policy: count the failure, tell the user by a Warning Event (repeats are
/// aggregated into one Event series), retry after the object's backoff. A conflict only means
/// the app changed meanwhile, and the retry sees the new version: no Event for that.
pub fn error_policy(app: Arc<VisitorsApp>, error: &Error, ctx: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&ctx.runtime, app, error)
}

/// One reconcile of one app.
struct Reconciler<'a> {
    app: &'a VisitorsApp,
    ctx: &'a Context,
    name: String,
    namespace: String,
    /// The most a watch reported of a child while this reconcile's apply of it was on its way
    /// (see [`Seen::record_apply`]): the app needs another look.
    reported: std::sync::Mutex<News>,
}

impl<'a> Reconciler<'a> {
    fn new(app: &'a VisitorsApp, ctx: &'a Context) -> Result<Self, Error> {
        let namespace = app.namespace().ok_or_else(|| Error::NoNamespace(app.name_any()))?;
        Ok(Self { app, ctx, name: app.name_any(), namespace, reported: std::sync::Mutex::new(News::Nothing) })
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.ctx.runtime.client.clone(), &self.namespace)
    }

    async fn run(&self) -> Result<Action, Error> {
        self.ctx.hold.reconciling(self.app);
        self.ctx.seen.record(self.app);
        if self.app.metadata.deletion_timestamp.is_some() {
            return self.clean_up().await;
        }
        if !self.ctx.stores.ready() {
            // Only right after start-up: without the caches the claim template and the
            // existing backend are unknown, so wait for them instead of guessing.
            return Ok(Action::requeue(CACHE_WAIT));
        }
        self.add_finalizer().await?;
        if let Err(invalid) = validate::spec(&self.app.spec) {
            return self.reject(invalid).await;
        }
        // Checked at the first reconcile of each spec and once a resync period; in between only
        // the database check needs the credentials, and reads them then.
        let credentials = if self.ctx.seen.credentials_checked_within(self.app, self.ctx.runtime.resync) {
            None
        } else {
            match self.credentials().await? {
                Ok(credentials) => Some(credentials),
                Err(invalid) => return self.reject(invalid).await,
            }
        };
        let (observed, failed) = match self.apply_children(credentials).await? {
            Ok(applied) => applied,
            Err(invalid) => return self.reject(invalid).await,
        };
        let status = status::compute(self.app, &observed, now());
        let ready = conditions::is_true(&status.conditions, READY);
        if readiness(self.app.status.as_ref()) != readiness(Some(&status)) {
            self.ctx.hold.progressed(self.app);
        }
        self.publish(status).await?;
        if let Some(first) = failed.into_iter().next() {
            // The status names every failed child; the error policy backs off and tells.
            return Err(first);
        }
        let runtime = &self.ctx.runtime;
        let action = match (ready, observed.waits_for_the_query()) {
            (true, _) => runtime.converged(self.app),
            // No watch sees the database start answering: poll, backing off to about a minute.
            (false, true) => runtime.waiting(self.app),
            // Workloads becoming ready wake the app through the owned-object watches.
            (false, false) => runtime.watching(self.app),
        };
        Ok(self.look_again_if_reported(action))
    }

    /// A watch reported a child while this reconcile's apply of it was on its way, other than
    /// the apply's own echo: the wake-up it did not cause comes now, or as [`Hold::wake`] says.
    fn look_again_if_reported(&self, action: Action) -> Action {
        let reported = *self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.ctx.hold.wake(ObjectRef::from_obj(self.app), reported) {
            return Action::requeue(controller_common::runner::DEBOUNCE);
        }
        action
    }

    fn note_reported(&self, news: News) {
        let mut reported = self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *reported = match (*reported, news) {
            (News::Change, _) | (_, News::Change) => News::Change,
            (News::Readiness, _) | (_, News::Readiness) => News::Readiness,
            (News::Status, _) | (_, News::Status) => News::Status,
            _ => News::Nothing,
        };
    }

    // ----- lifecycle -----

    async fn add_finalizer(&self) -> Result<(), Error> {
        if self.app.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let mut finalizers = self.app.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        self.set_finalizers(finalizers.clone())
            .await
            .map_err(kube_err(format!("adding finalizer to VisitorsApp {}", self.name)))?;
        // The watch will report the app with its finalizer: this reconcile goes on with it.
        let mut with_finalizer = self.app.clone();
        with_finalizer.metadata.finalizers = Some(finalizers);
        self.ctx.seen.record(&with_finalizer);
        Ok(())
    }

    /// The app is being deleted. Owner references delete the children; the StatefulSet's claim
    /// retention policy decides about the volume. Say which, then let the deletion finish.
    async fn clean_up(&self) -> Result<Action, Error> {
        if !self.app.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::await_change());
        }
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
        let remaining = self.app.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
        match self.set_finalizers(remaining).await {
            Ok(()) => {}
            // Already gone: nothing left to do.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(Error::Kube {
                    action: format!("removing finalizer from VisitorsApp {}", self.name),
                    source,
                });
            }
        }
        self.ctx.runtime.forget(self.app);
        self.ctx.seen.forget(self.app);
        self.ctx.hold.forget(self.app);
        Ok(Action::await_change())
    }

    /// Replaces the finalizer list, on the condition that the app did not change meanwhile
    /// (the resourceVersion is a precondition), so another controller's finalizer is never lost.
    async fn set_finalizers(&self, finalizers: Vec<String>) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "metadata": { "finalizers": finalizers, "resourceVersion": self.app.resource_version() }
        });
        self.api::<VisitorsApp>()
            .patch_metadata(&self.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// The spec (or an object it names) is unusable: say so in status and once as an Event,
    /// and do not retry hot.
    async fn reject(&self, invalid: Invalid) -> Result<Action, Error> {
        tracing::info!(reason = invalid.reason(), problem = %invalid, "not reconciling");
        let status = status::invalid(self.app, &invalid, now());
        self.publish(status).await?;
        Ok(if invalid.fixed_elsewhere() {
            self.ctx.runtime.waiting(self.app)
        } else {
            self.ctx.runtime.until_spec_changes(self.app)
        })
    }

    // ----- credentials -----

    /// The database credentials: the user's Secret checked, or the generated one (created once).
    async fn credentials(&self) -> Result<Result<Credentials, Invalid>, Error> {
        let name = build::secret::secret_name(self.app);
        let secrets = self.api::<Secret>();
        let existing = secrets.get_opt(&name).await.map_err(kube_err(format!("reading Secret {name}")))?;
        let secret = match existing {
            Some(secret) => secret,
            None if build::secret::is_generated(self.app) => match self.generate_secret(&name).await? {
                Ok(secret) => secret,
                Err(invalid) => return Ok(Err(invalid)),
            },
            None => return Ok(Err(Invalid::SecretMissing { name })),
        };
        if build::secret::is_generated(self.app)
            && let Err(invalid) = validate::generated_secret_is_ours(&self.name, &secret)
        {
            return Ok(Err(invalid));
        }
        if let Err(invalid) = validate::user_secret(&name, Some(&secret)) {
            return Ok(Err(invalid));
        }
        if build::secret::is_generated(self.app) {
            self.sync_secret_owner(&secret).await?;
        }
        self.ctx.seen.record_credentials_checked(self.app);
        let text =
            |key: &str| String::from_utf8(validate::secret_value(&secret, key).unwrap_or_default()).unwrap_or_default();
        Ok(Ok(Credentials {
            username: text(secret_keys::USERNAME),
            password: text(secret_keys::PASSWORD),
            root_password: text(secret_keys::ROOT_PASSWORD),
        }))
    }

    async fn generate_secret(&self, name: &str) -> Result<Result<Secret, Invalid>, Error> {
        // New passwords for a volume initialised with the old ones would lock the backend out.
        let claim = build::mysql::claim_name(&self.name);
        let claims = self.api::<PersistentVolumeClaim>();
        if claims
            .get_metadata_opt(&claim)
            .await
            .map_err(kube_err(format!("reading PersistentVolumeClaim {claim}")))?
            .is_some()
        {
            return Ok(Err(Invalid::CredentialsLost { secret: name.to_string(), claim }));
        }
        let secret = build::secret::generated(self.app, &Credentials::generate());
        let params =
            PostParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PostParams::default() };
        match self.api::<Secret>().create(&params, &secret).await {
            Ok(created) => Ok(Ok(created)),
            // Created meanwhile (by a previous, interrupted reconcile, or by someone else: the
            // caller checks whose it is).
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Ok(self.api::<Secret>().get(name).await.map_err(kube_err(format!("reading Secret {name}")))?))
            }
            Err(source) => Err(Error::Kube { action: format!("creating Secret {name}"), source }),
        }
    }

    /// Owns the generated Secret exactly when the deletion policy is Delete; patches only on a
    /// change, so a converged app sends nothing.
    async fn sync_secret_owner(&self, secret: &Secret) -> Result<(), Error> {
        let uid = self.app.uid();
        let current = secret.owner_references();
        let mine = |r: &OwnerReference| Some(&r.uid) == uid.as_ref();
        let wanted = build::secret::owner_references(self.app);
        let have: Vec<&OwnerReference> = current.iter().filter(|r| mine(r)).collect();
        if have.len() == wanted.len() && have.iter().zip(&wanted).all(|(a, b)| *a == b) {
            return Ok(());
        }
        let mut refs: Vec<OwnerReference> = current.iter().filter(|r| !mine(r)).cloned().collect();
        refs.extend(wanted);
        let patch = serde_json::json!({ "metadata": { "ownerReferences": refs, "resourceVersion": secret.resource_version() } });
        let name = secret.name_any();
        self.api::<Secret>()
            .patch_metadata(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(kube_err(format!("updating the owner of Secret {name}")))?;
        Ok(())
    }

    // ----- children -----

    /// Applies every child. A child that cannot be applied does not stop the others: its
    /// failure is collected, the status is computed from what is there (the cache stands in for
    /// a child whose apply failed) and names it. The children that do not wait for the database
    /// are applied at once, not one after the other: a reconcile takes one round trip for them.
    /// `credentials` are read for the database check when `None`; a Secret found unusable then
    /// is the `Invalid` answer.
    async fn apply_children(
        &self,
        credentials: Option<Credentials>,
    ) -> Result<Result<(Observed, Vec<Error>), Invalid>, Error> {
        let mut failed = Vec::new();
        let secret = build::secret::secret_name(self.app);
        let existing_sts = self.cached(&self.ctx.stores.statefulsets, &names::mysql(&self.name));
        let claim = existing_sts.as_deref().and_then(build::mysql::data_claim_template);
        let desired_sts = build::mysql::statefulset(self.app, &secret, claim);
        let headless = build::mysql::headless_service(self.app);
        let client = build::mysql::client_service(self.app);
        let frontend_name = names::frontend(&self.name);
        let existing_frontend = self.cached(&self.ctx.stores.deployments, &frontend_name);
        let desired_frontend = build::frontend::deployment(self.app);
        let frontend_service = build::frontend::service(self.app);
        let (sts, headless, client, frontend, frontend_service) = futures::join!(
            self.ensure_workload(&desired_sts, existing_sts.as_deref()),
            self.ensure_service(&headless),
            self.ensure_service(&client),
            self.ensure_workload(&desired_frontend, existing_frontend.as_deref()),
            self.ensure_service(&frontend_service),
        );
        if claim.is_none()
            && let Ok(created) = &sts
        {
            let settled = build::mysql::statefulset(self.app, &secret, build::mysql::data_claim_template(created));
            self.ctx.seen.record_settled_form(&desired_sts, &settled);
        }
        let sts = collect(sts, &mut failed).or_else(|| existing_sts.as_deref().cloned());
        collect(headless, &mut failed);
        collect(client, &mut failed);
        let frontend = collect(frontend, &mut failed).or_else(|| existing_frontend.as_deref().cloned());
        collect(frontend_service, &mut failed);
        if claim.is_some_and(|template| build::mysql::asks_for_more_than_template(self.app, template)) {
            self.grow_claim_if_asked().await;
        }

        let mysql = sts.as_ref().map(Workload::from_statefulset).unwrap_or_default();
        let database = match self.check_database(&mysql, credentials).await? {
            Ok(database) => database,
            Err(invalid) => return Ok(Err(invalid)),
        };

        let backend_name = names::backend(&self.name);
        let existing_backend = self.cached(&self.ctx.stores.deployments, &backend_name);
        let quiesced_by = self.ctx.stores.quiescing_restore(&self.namespace, &self.name);
        // A restore stops the backend even while the database is not ready.
        let (backend, backend_held) = if database.is_ready() || quiesced_by.is_some() {
            let mut desired = build::backend::deployment(self.app, &secret);
            if quiesced_by.is_some() {
                desired = build::backend::quiesced(desired);
            }
            let applied = collect(self.ensure_workload(&desired, existing_backend.as_deref()).await, &mut failed);
            collect(self.ensure_service(&build::backend::service(self.app)).await, &mut failed);
            let backend = applied.or_else(|| existing_backend.as_deref().cloned());
            (backend.as_ref().map(Workload::from_deployment), false)
        } else {
            (existing_backend.as_deref().map(Workload::from_deployment), true)
        };

        let observed = Observed {
            secret,
            mysql,
            database,
            backend,
            backend_held,
            quiesced_by,
            frontend: frontend.as_ref().map(Workload::from_deployment).unwrap_or_default(),
            failed_children: failed.iter().map(ToString::to_string).collect(),
        };
        Ok(Ok((observed, failed)))
    }

    /// Asks the claim of pod 0 to grow when the spec asks for more storage. A refusal (a
    /// storage class without expansion, a quota) is reported by a Warning Event and does not
    /// hold up the rest of the reconcile: the app keeps running on its current volume.
    async fn grow_claim_if_asked(&self) {
        if let Err(error) = self.grow_claim().await {
            let note = format!("cannot grow the MySQL volume to {}: {error}", self.app.spec.storage_size());
            self.ctx.runtime.events.warning(self.app, "StorageResizeFailed", "GrowClaim", note).await;
        }
    }

    /// A merge patch rather than an apply: the claim belongs to the StatefulSet controller, and
    /// a claim not created yet must not be created here (it will be, from the template).
    async fn grow_claim(&self) -> Result<(), Error> {
        let name = build::mysql::claim_name(&self.name);
        let claims = self.api::<PersistentVolumeClaim>();
        let live = claims.get_opt(&name).await.map_err(kube_err(format!("reading PersistentVolumeClaim {name}")))?;
        let Some(resize) = build::mysql::claim_resize(self.app, live.as_ref()) else { return Ok(()) };
        let patch = serde_json::json!({ "spec": resize.spec });
        match claims.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(Error::Kube { action: format!("growing PersistentVolumeClaim {name}"), source }),
        }
    }

    fn cached<K>(&self, store: &Store<K>, name: &str) -> Option<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone,
    {
        store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// A workload as desired: the cached one when applying would change nothing (see
    /// [`Seen::unchanged_since_applied`]), else the apply response.
    async fn ensure_workload<K>(&self, desired: &K, cached: Option<&K>) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Fingerprint
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        match cached {
            Some(cached) if self.ctx.seen.unchanged_since_applied(desired, self.ctx.runtime.resync) => {
                Ok(cached.clone())
            }
            _ => self.apply_child(desired).await,
        }
    }

    /// A Service as desired: applied unless that would change nothing; recreated when the
    /// API server refuses the apply because the Service's address cannot change in place.
    async fn ensure_service(&self, desired: &Service) -> Result<(), Error> {
        if self.ctx.seen.unchanged_since_applied(desired, self.ctx.runtime.resync) {
            return Ok(());
        }
        match self.apply_child(desired).await {
            // Boxed, as in `apply_child`: the reconcile's future must stay small.
            Err(rejected) if rejected.is_rejected() => Box::pin(self.recreate_service(desired, rejected)).await,
            result => result.map(drop),
        }
    }

    /// Deletes the live Service and applies `desired` again, when only that can make it so
    /// (see [`repair::needs_recreating`]) and the live one is this app's: a Service of someone
    /// else's in the way is never deleted, and `rejected` stays the answer.
    async fn recreate_service(&self, desired: &Service, rejected: Error) -> Result<(), Error> {
        let name = desired.name_any();
        let api = self.api::<Service>();
        let live = api.get_opt(&name).await.map_err(kube_err(format!("reading Service {name}")))?;
        let Some(live) =
            live.filter(|live| self.controls(live) && repair::needs_recreating(&to_json(desired), &to_json(live)))
        else {
            return Err(rejected);
        };
        let preconditions = Preconditions { uid: live.uid(), resource_version: live.resource_version() };
        api.delete(&name, &DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() })
            .await
            .map_err(kube_err(format!("deleting Service {name} to recreate it")))?;
        let address = |service: &Service| service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).unwrap_or_default();
        let note = format!(
            "Service {name} recreated: its clusterIP cannot change from {} to {} in place",
            address(&live),
            address(desired)
        );
        tracing::info!(service = %name, "recreating a Service whose clusterIP cannot change in place");
        self.ctx.runtime.events.normal(self.app, "Recreated", "Recreate", note).await;
        self.apply_child(desired).await.map(drop)
    }

    /// Whether this app is the controller owner of `child`.
    fn controls<K: Resource>(&self, child: &K) -> bool {
        let uid = self.app.uid();
        child.owner_references().iter().any(|owner| owner.controller == Some(true) && Some(&owner.uid) == uid.as_ref())
    }

    /// Server-side applies one child (an unchanged child is a no-op on the server), then
    /// removes what server-side apply cannot: items another client put in the keyed lists the
    /// controller sets (see [`repair`]). An apply the API server rejects is retried once after
    /// that repair, since foreign items colliding with ours (two ports named `mysql`) make every
    /// apply invalid.
    async fn apply_child<K>(&self, desired: &K) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Fingerprint
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let ticket = self.ctx.seen.ticket(desired);
        // Boxed: six of these futures inline would make the reconcile's future too big for a
        // thread's stack.
        let result = Box::pin(self.apply_and_repair(desired, ticket)).await;
        if result.is_err() {
            self.ctx.seen.abandon(desired);
        }
        result
    }

    async fn apply_and_repair<K>(&self, desired: &K, ticket: Ticket) -> Result<K, Error>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Fingerprint
            + Serialize
            + DeserializeOwned
            + Clone
            + Debug,
    {
        let what = format!("{} {}", K::kind(&()), desired.name_any());
        let api = self.api::<K>();
        let field_manager = &self.ctx.runtime.field_manager;
        let applied = match apply(&api, field_manager, desired).await {
            Ok(applied) => applied,
            Err(kube::Error::Api(status)) if status.code == 422 => {
                let rejected = kube::Error::Api(status);
                let live = api.get_opt(&desired.name_any()).await.map_err(kube_err(format!("reading {what}")))?;
                let repaired = match live {
                    Some(live) => self.remove_foreign_items(&api, desired, &live, &what).await?,
                    None => None,
                };
                if repaired.is_none() {
                    return Err(Error::Kube { action: format!("applying {what}"), source: rejected });
                }
                apply(&api, field_manager, desired).await.map_err(kube_err(format!("applying {what}")))?
            }
            Err(source) => return Err(Error::Kube { action: format!("applying {what}"), source }),
        };
        let applied = match self.remove_foreign_items(&api, desired, &applied, &what).await? {
            None => applied,
            Some(repaired) => {
                let left = repair::drifted_lists(&to_json(desired), &to_json(&repaired));
                if !left.is_empty() {
                    return Err(Error::ForeignItemsReturn { child: what, items: repair::describe(&left) });
                }
                repaired
            }
        };
        // Its watch event is the echo of this write: no news for the app.
        self.note_reported(self.ctx.seen.record_apply(desired, &applied, ticket));
        Ok(applied)
    }

    /// Removes the items of `live` that are not ours from the lists `desired` sets, by a JSON
    /// patch conditional on `live`'s resourceVersion. `None` when there were none.
    async fn remove_foreign_items<K>(&self, api: &Api<K>, desired: &K, live: &K, what: &str) -> Result<Option<K>, Error>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        let drifted = repair::drifted_lists(&to_json(desired), &to_json(live));
        if drifted.is_empty() {
            return Ok(None);
        }
        let foreign = repair::describe(&drifted);
        tracing::info!(child = what, %foreign, "removing items another client put in lists the controller sets");
        let patch = repair::repair_patch(&live.resource_version().unwrap_or_default(), &drifted);
        let patch = serde_json::from_value(patch).expect("a JSON patch built from operations is well-formed");
        let params =
            PatchParams { field_manager: Some(self.ctx.runtime.field_manager.clone()), ..PatchParams::default() };
        let repaired = api
            .patch(&live.name_any(), &params, &Patch::Json::<()>(patch))
            .await
            .map_err(kube_err(format!("removing foreign list items from {what}")))?;
        let note = format!("{what}: removed items another client put in lists the controller sets ({foreign})");
        self.ctx.runtime.events.normal(self.app, "Repaired", "RepairLists", note).await;
        Ok(Some(repaired))
    }

    async fn check_database(
        &self,
        mysql: &Workload,
        credentials: Option<Credentials>,
    ) -> Result<Result<Database, Invalid>, Error> {
        if mysql.ready < 1 {
            return Ok(Ok(Database::PodNotReady));
        }
        let Some(probe) = &self.ctx.probe else {
            return Ok(Ok(Database::PodReady));
        };
        let credentials = match credentials {
            Some(credentials) => credentials,
            None => match self.credentials().await? {
                Ok(credentials) => credentials,
                Err(invalid) => return Ok(Err(invalid)),
            },
        };
        let target = Target {
            host: build::mysql::client_host(self.app),
            port: visitors_api::visitors_app::MYSQL_PORT as u16,
            user: credentials.username.clone(),
            password: credentials.password.clone(),
        };
        // Host and port only: the target's credentials never reach a span.
        let span = tracing::info_span!(
            "db.check",
            "db.system" = "mysql",
            "db.query.text" = "SELECT 1",
            "server.address" = %target.host,
            "server.port" = target.port,
            "db.check.result" = tracing::field::Empty,
        );
        let result = probe.select_one(&target).instrument(span.clone()).await;
        span.record("db.check.result", result.as_ref().err().map_or("connected", String::as_str));
        Ok(Ok(match result {
            Ok(()) => Database::Connected,
            Err(why) => {
                tracing::info!(%why, "database not answering yet");
                Database::QueryFailed(why)
            }
        }))
    }

    // ----- status -----

    /// Writes the status when it changed, and announces a change of the Ready condition that
    /// matters to a user: a problem (Warning), becoming ready, and losing readiness. The progress
    /// of a new app is in its status only: at scale an Event per app and step is thousands of
    /// writes to the API server.
    async fn publish(&self, status: VisitorsAppStatus) -> Result<(), Error> {
        if self.app.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let before = self.app.status.as_ref().and_then(|s| conditions::find(&s.conditions, READY)).cloned();
        apply_status(&self.api::<VisitorsApp>(), &self.ctx.runtime.field_manager, &self.name, &status)
            .await
            .map_err(kube_err(format!("writing the status of VisitorsApp {}", self.name)))?;
        let Some(after) = conditions::find(&status.conditions, READY) else { return Ok(()) };
        let changed = before
            .as_ref()
            .is_none_or(|b| (&b.status, &b.reason, &b.message) != (&after.status, &after.reason, &after.message));
        let was_ready = before.as_ref().is_some_and(|b| b.status == "True");
        if changed {
            let events = &self.ctx.runtime.events;
            match (after.status.as_str(), after.reason.as_str()) {
                // The error policy's Warning Event says it, with the API error.
                (_, status::CHILD_APPLY_FAILED) => {}
                ("True", _) => events.normal(self.app, "Ready", "Reconcile", after.message.clone()).await,
                (_, reason) if is_problem(reason) => {
                    events.warning(self.app, reason, "Reconcile", after.message.clone()).await
                }
                (_, reason) if was_ready => events.normal(self.app, reason, "Reconcile", after.message.clone()).await,
                _ => {}
            }
        }
        Ok(())
    }
}

/// Keeps going after a child's failure: the child is `None`, the failure collected.
fn collect<K>(result: Result<K, Error>, failed: &mut Vec<Error>) -> Option<K> {
    result.map_err(|error| failed.push(error)).ok()
}

fn to_json<K: Serialize>(object: &K) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// Reasons that need a user's action (the rest are progress).
fn is_problem(reason: &str) -> bool {
    ["InvalidSpec", "InvalidCredentialsSecret", "CredentialsLost", "CredentialsSecretConflict"].contains(&reason)
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Whether each condition holds: what a change of the app's readiness moves.
fn readiness(status: Option<&VisitorsAppStatus>) -> Vec<(&str, &str)> {
    status.map_or_else(Vec::new, |status| {
        status.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect()
    })
}

/// The watches of the controller: VisitorsApps (filtered so that status writes do not wake
/// them), and the children, whose changes and deletions wake their owner. The StatefulSet and
/// Deployment watches also fill [`Stores`]; Services are watched as metadata only.
pub struct Watches {
    pub stores: Stores,
    statefulsets: reflector::store::Writer<StatefulSet>,
    deployments: reflector::store::Writer<Deployment>,
    restores: reflector::store::Writer<MySQLRestore>,
}

impl Watches {
    pub fn new() -> Self {
        let statefulsets = reflector::store::Writer::default();
        let deployments = reflector::store::Writer::default();
        let restores = reflector::store::Writer::default();
        let stores = Stores {
            statefulsets: statefulsets.as_reader(),
            deployments: deployments.as_reader(),
            restores: restores.as_reader(),
        };
        Self { stores, statefulsets, deployments, restores }
    }

    /// Runs the controller until `shutdown` is cancelled.
    pub async fn run(
        self,
        runtime: Arc<Runtime>,
        namespace: Option<&str>,
        probe: Option<Arc<dyn DatabaseProbe>>,
        shutdown: CancellationToken,
    ) {
        let client = runtime.client.clone();
        let seen = Seen::default();
        let hold = Hold::default();
        let children = watcher::Config::default().labels(&child_selector());
        let (app_reader, app_writer) = reflector::store::store();
        let (app_news, app_hold) = (seen.clone(), hold.clone());
        let apps =
            primary_stream(api_in::<VisitorsApp>(client.clone(), namespace), app_writer).try_filter(move |app| {
                let news = app_news.is_news(app);
                if news {
                    app_hold.news_of(app);
                }
                std::future::ready(news)
            });
        let statefulsets = owned(
            watcher(api_in::<StatefulSet>(client.clone(), namespace), children.clone())
                .modify(trim_statefulset)
                .reflect(self.statefulsets),
            seen.clone(),
            hold.clone(),
        );
        let deployments = owned(
            watcher(api_in::<Deployment>(client.clone(), namespace), children.clone())
                .modify(trim_deployment)
                .reflect(self.deployments),
            seen.clone(),
            hold.clone(),
        );
        // Secrets are not watched: that would need list and watch on every Secret. A deleted
        // generated Secret is noticed at the next reconcile.
        let services = owned(
            watcher(api_in::<PartialObjectMeta<Service>>(client.clone(), namespace), children),
            seen.clone(),
            hold.clone(),
        );
        // Every change of a restore (its phase above all) wakes the app it targets.
        let restores = watcher(api_in::<MySQLRestore>(client, namespace), watcher::Config::default())
            .default_backoff()
            .modify(trim_for_cache)
            .reflect(self.restores)
            .touched_objects();
        let held_wake_ups = hold.clone().released(app_reader.clone());
        let ctx = Arc::new(Context { runtime, probe, stores: self.stores, seen, hold });
        let controller = Controller::for_stream(apps, app_reader)
            .with_config(controller_config())
            .owns_stream(statefulsets)
            .owns_stream(deployments)
            .owns_stream(services)
            .watches_stream(restores, |restore| target_app(&restore))
            .reconcile_on(held_wake_ups);
        drive(controller, reconcile, error_policy, ctx, shutdown).await;
    }
}

impl Default for Watches {
    fn default() -> Self {
        Self::new()
    }
}

/// What the workload caches keep of a pod template: the containers' names and images (the
/// status reads the first image), not their env, probes, mounts or resources, which no
/// reconcile reads from the cache (it applies its own desired form). With a thousand apps
/// the full templates were a large part of the controller's memory.
fn keep_images_only(template: &mut PodTemplateSpec) {
    if let Some(spec) = template.spec.as_mut() {
        let containers = spec
            .containers
            .iter()
            .map(|c| Container { name: c.name.clone(), image: c.image.clone(), ..Container::default() })
            .collect();
        *spec = PodSpec { containers, ..PodSpec::default() };
    }
}

/// The StatefulSet as its cache keeps it: see [`trim_for_cache`] and [`keep_images_only`]; the
/// claim templates stay whole (the reconcile keeps them verbatim).
pub fn trim_statefulset(sts: &mut StatefulSet) {
    trim_for_cache(sts);
    if let Some(spec) = sts.spec.as_mut() {
        keep_images_only(&mut spec.template);
    }
}

/// The Deployment as its cache keeps it: see [`trim_for_cache`] and [`keep_images_only`].
pub fn trim_deployment(deployment: &mut Deployment) {
    trim_for_cache(deployment);
    if let Some(spec) = deployment.spec.as_mut() {
        keep_images_only(&mut spec.template);
    }
}

/// A child's deletion wakes its owner (a deleted child must come back), and so does a change no
/// reconcile has seen ([`Seen`]): drift at once, a workload's status moving through [`Hold`]
/// (held while new apps wait for their first reconcile, and a mere refresh also for the app's
/// pace). The echoes of the controller's own applies do not.
pub fn owned<K, S>(events: S, seen: Seen, hold: Hold) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Fingerprint + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    events.default_backoff().filter_map(move |event| {
        let wake = match event {
            Ok(watcher::Event::Apply(child) | watcher::Event::InitApply(child)) => match seen.news(&child) {
                News::Nothing => None,
                news => match owner_of(&child) {
                    Some(owner) => hold.wake(owner, news).then_some(Ok(child)),
                    None => Some(Ok(child)),
                },
            },
            Ok(watcher::Event::Delete(child)) => {
                seen.forget(&child);
                if let Some(owner) = owner_of(&child) {
                    hold.reset_pace(&owner);
                }
                Some(Ok(child))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(error) => Some(Err(error)),
        };
        std::future::ready(wake)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::StatefulSetStatus;
    use kube::runtime::controller::trigger_owners;

    /// What the StatefulSet watch reports when the MySQL pod becomes ready: a status change
    /// only (no new generation), which must still wake the app.
    fn became_ready() -> StatefulSet {
        let app = book_app();
        let mut sts = build::mysql::statefulset(&app, "ex-mysql-credentials", None);
        sts.metadata.generation = Some(1);
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(1),
            replicas: 1,
            ready_replicas: Some(1),
            ..Default::default()
        });
        sts
    }

    #[tokio::test]
    async fn a_child_status_change_wakes_its_app_through_the_owned_watch() {
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(became_ready())),
            Ok(watcher::Event::Delete(became_ready())),
        ]);
        let requests: Vec<_> =
            trigger_owners::<VisitorsApp, _>(owned(events, Seen::default(), Hold::default()), (), ()).collect().await;
        let woken: Vec<String> = requests.into_iter().map(|r| r.expect("no watch error").obj_ref.to_string()).collect();
        assert_eq!(woken.len(), 2, "both the status change and the deletion wake the owner: {woken:?}");
        assert!(woken.iter().all(|r| r.starts_with("VisitorsApp.v1.example.com/ex.shop")), "{woken:?}");
    }

    /// What the StatefulSet watch reports right after the reconcile created it: the apply
    /// response itself, and then the StatefulSet controller's first status.
    fn created() -> StatefulSet {
        let mut sts = build::mysql::statefulset(&book_app(), "ex-mysql-credentials", None);
        sts.metadata.uid = Some("uid-sts".into());
        sts.metadata.generation = Some(1);
        sts.metadata.resource_version = Some("5".into());
        sts
    }

    /// While a new app waits for its first reconcile, a workload counting its pods does not wake
    /// its app at once (that reconcile would compete with the new app's for a worker): it is
    /// held, and released once the new app's reconcile has started. Drift is never held.
    #[tokio::test]
    async fn a_status_change_waits_for_the_first_reconcile_of_a_new_app_but_drift_does_not() {
        let seen = Seen::default();
        seen.record(&created());
        let hold = Hold::default();
        let mut new_app = book_app();
        new_app.metadata.name = Some("new".into());
        hold.news_of(&new_app);
        let mut counted = created();
        counted.metadata.resource_version = Some("6".into());
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        let mut edited = counted.clone();
        edited.metadata.generation = Some(2);
        let events = futures::stream::iter([Ok(watcher::Event::Apply(counted)), Ok(watcher::Event::Apply(edited))]);

        let woken: Vec<StatefulSet> =
            owned(events, seen, hold.clone()).map(|r| r.expect("no watch error")).collect().await;

        assert_eq!(woken.len(), 1, "only the drift wakes the app at once");
        assert_eq!(woken[0].metadata.generation, Some(2));
        assert_eq!(hold.held(), 1, "the status change is held");
        hold.reconciling(&new_app);
        let mut apps = reflector::store::Writer::default();
        apps.apply_watcher_event(&watcher::Event::Apply(book_app()));
        let released =
            tokio::time::timeout(std::time::Duration::from_secs(5), Box::pin(hold.released(apps.as_reader())).next())
                .await;
        assert_eq!(released.ok().flatten().map(|r| r.name).as_deref(), Some("ex"));
    }

    /// The caches keep a slim copy of each workload: what the reconcile reads of it (status,
    /// images, replicas, claim templates) and what the watches compare must be the same as
    /// in the full object, or a cached workload would look changed.
    #[test]
    fn a_trimmed_workload_reads_and_compares_as_the_full_one() {
        let full = became_ready();
        let mut trimmed = full.clone();
        trim_statefulset(&mut trimmed);
        assert_eq!(Workload::from_statefulset(&trimmed), Workload::from_statefulset(&full));
        assert_eq!((trimmed.fingerprint(), trimmed.observed()), (full.fingerprint(), full.observed()));
        assert_eq!(build::mysql::data_claim_template(&trimmed), build::mysql::data_claim_template(&full));

        let mut deployment = build::frontend::deployment(&book_app());
        deployment.metadata.generation = Some(1);
        let mut trimmed = deployment.clone();
        trim_deployment(&mut trimmed);
        assert_eq!(Workload::from_deployment(&trimmed), Workload::from_deployment(&deployment));
        assert_eq!((trimmed.fingerprint(), trimmed.observed()), (deployment.fingerprint(), deployment.observed()));
    }

    #[test]
    fn a_trimmed_statefulset_template_is_a_fraction_of_the_full_one() {
        let full = became_ready();
        let mut trimmed = full.clone();
        trim_statefulset(&mut trimmed);
        let size = |sts: &StatefulSet| serde_json::to_vec(&sts.spec.as_ref().unwrap().template).unwrap().len();
        assert!(size(&trimmed) * 4 < size(&full), "{} of {} bytes", size(&trimmed), size(&full));
    }

    /// Under load the watch reports a created child before the apply's answer arrives: that
    /// echo must not wake the app either.
    #[tokio::test]
    async fn the_echo_of_an_apply_still_on_its_way_does_not_wake_the_app() {
        let seen = Seen::default();
        let desired = build::mysql::statefulset(&book_app(), "ex-mysql-credentials", None);
        let ticket = seen.ticket(&desired);
        let events = futures::stream::iter([Ok(watcher::Event::Apply(created()))]);
        let woken: Vec<StatefulSet> =
            owned(events, seen.clone(), Hold::default()).map(|r| r.expect("no watch error")).collect().await;
        assert!(woken.is_empty(), "{woken:?}");
        assert_eq!(seen.record_apply(&desired, &created(), ticket), News::Nothing);
    }

    #[tokio::test]
    async fn the_echo_of_the_reconciles_own_apply_does_not_wake_the_app() {
        let seen = Seen::default();
        // The reconcile recorded the apply response.
        seen.record(&created());
        let mut counted = created();
        counted.metadata.resource_version = Some("6".into());
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(created())),
            Ok(watcher::Event::Apply(counted.clone())),
            Ok(watcher::Event::Apply(counted)),
            Ok(watcher::Event::Delete(created())),
        ]);
        let hold = Hold::default();
        let woken: Vec<String> = trigger_owners::<VisitorsApp, _>(owned(events, seen.clone(), hold.clone()), (), ())
            .map(|r| r.expect("no watch error").obj_ref.to_string())
            .collect()
            .await;
        assert_eq!(woken.len(), 1, "the deletion; not the echo: {woken:?}");
        assert_eq!(hold.held(), 1, "the status refresh once, at the app's pace");
        assert!(seen.is_empty(), "a deleted child is forgotten");
    }

    /// The StatefulSet controller's status with `pods` pods of which `updated` at the latest
    /// revision and `ready` ready.
    fn counting(pods: i32, updated: i32, ready: i32) -> StatefulSet {
        let mut sts = created();
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(1),
            replicas: pods,
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            ..Default::default()
        });
        sts
    }

    /// When each wake-up of app "ex" comes, in seconds after the start, as the controller would
    /// have it: wake-ups from the StatefulSet watch fed `updates` (each at its time), and the
    /// held ones as [`Hold`] releases them. Each wake-up starts a reconcile at once.
    async fn wake_ups(updates: Vec<(u64, StatefulSet)>, until: u64) -> Vec<u64> {
        let start = tokio::time::Instant::now();
        let seen = Seen::default();
        seen.record(&created());
        let hold = Hold::default();
        let mut apps = reflector::store::Writer::default();
        apps.apply_watcher_event(&watcher::Event::Apply(book_app()));
        // The app's first reconcile: it created the StatefulSet.
        hold.reconciling(&book_app());
        let events = futures::stream::iter(updates).then(move |(at, sts)| async move {
            tokio::time::sleep_until(start + std::time::Duration::from_secs(at)).await;
            Ok(watcher::Event::Apply(sts))
        });
        let from_watch = owned(events, seen, hold.clone()).map(|sts| owner_of(&sts.expect("no watch error")));
        let held = hold.clone().released(apps.as_reader()).map(Some);
        let mut woken = futures::stream::select(Box::pin(from_watch), Box::pin(held));
        let mut times = Vec::new();
        let deadline = start + std::time::Duration::from_secs(until);
        while let Ok(Some(app)) = tokio::time::timeout_at(deadline, woken.next()).await {
            assert_eq!(app.map(|a| a.name).as_deref(), Some("ex"));
            times.push(start.elapsed().as_secs());
            hold.reconciling(&book_app());
        }
        times
    }

    /// Right after a burst the controller-manager is still creating the pods and claims of a
    /// waiting app, and each count it updates moves what the app's status reads. Those refreshes
    /// back off per app: five of them within a minute make at most two reconciles in that minute
    /// (its first one included), and one more at the end of the wait (the status still ends up
    /// right). A pod becoming ready wakes the app at once, and brings the backoff back to a few
    /// seconds.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_apps_status_refreshes_back_off_but_its_readiness_does_not() {
        let updates = vec![
            (1, counting(1, 0, 0)),
            (12, counting(1, 1, 0)),
            (24, counting(2, 1, 0)),
            (36, counting(2, 2, 0)),
            (48, counting(1, 1, 0)),
            (150, counting(1, 1, 1)),
            (151, counting(2, 1, 1)),
        ];
        let times = wake_ups(updates, 200).await;

        let in_the_minute = times.iter().filter(|t| **t < 60).count();
        assert!(in_the_minute <= 1, "five refreshes in the minute after the first reconcile: {times:?}");
        assert!(times.iter().any(|t| (48..=48 + 60).contains(t)), "the last refresh still comes: {times:?}");
        assert!(!times.iter().any(|t| (109..150).contains(t)), "no refresh left to make: {times:?}");
        assert!(times.contains(&150), "the database pod became ready: at once: {times:?}");
        let after = times.iter().find(|t| **t > 150).copied();
        assert!(after.is_some_and(|t| t <= 151 + 5), "the backoff starts again from a few seconds: {times:?}");
    }
}
