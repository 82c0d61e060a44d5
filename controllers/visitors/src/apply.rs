//! The children of an app, applied: server-side apply under the controller's field manager,
//! skipped when the cache shows nothing would change; items another client put in the lists the
//! controller sets are removed; a Service whose address cannot change in place is recreated; the
//! data volume grows when the spec asks for more.

use std::fmt::Debug;
use std::sync::Arc;

use controller_common::apply::apply;
use controller_common::reconcile::{ApiError, api_err};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use visitors_api::labels::names;

use crate::build::tls::ServingTls;
use crate::build::{self, secret::Credentials};
use crate::context::Error;
use crate::reconcile::Reconciler;
use crate::repair;
use crate::seen::{Fingerprint, Ticket};
use crate::status::{Observed, Workload};
use crate::validate::Invalid;

/// What the controller applies: a namespaced kind whose applies it can fingerprint.
pub trait Child:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Fingerprint
    + Serialize
    + DeserializeOwned
    + Clone
    + Debug
{
}

impl<K> Child for K where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Fingerprint
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug
{
}

impl Reconciler<'_> {
    /// Applies every child. A child that cannot be applied does not stop the others: its
    /// failure is collected, the status is computed from what is there (the cache stands in for
    /// a child whose apply failed) and names it. The children that do not wait for the database
    /// are applied at once, not one after the other: a reconcile takes one round trip for them.
    /// `credentials` are read for the database check when `None`; a Secret found unusable then
    /// is the `Invalid` answer.
    pub(crate) async fn apply_children(
        &self,
        credentials: Option<Credentials>,
        tls: Option<&ServingTls>,
    ) -> Result<Result<(Observed, Vec<Error>), Invalid>, Error> {
        let mut failed = Vec::new();
        let secret = build::secret::secret_name(self.app);
        let existing_sts = self.cached(&self.ctx.stores.statefulsets, &names::mysql(&self.name));
        let claim = existing_sts.as_deref().and_then(build::mysql::data_claim_template);
        let desired_sts = build::mysql::statefulset(self.app, &secret, claim, tls);
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
            let settled = build::mysql::statefulset(self.app, &secret, build::mysql::data_claim_template(created), tls);
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
        let database = match self.check_database(&mysql, credentials, tls).await? {
            Ok(database) => database,
            Err(invalid) => return Ok(Err(invalid)),
        };

        let backend_name = names::backend(&self.name);
        let existing_backend = self.cached(&self.ctx.stores.deployments, &backend_name);
        let quiesced_by = self.ctx.stores.quiescing_restore(&self.namespace, &self.name);
        // A restore stops the backend even while the database is not ready.
        let (backend, backend_held) = if database.is_ready() || quiesced_by.is_some() {
            let mut desired = build::backend::deployment(self.app, &secret, tls);
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
            tls: tls.cloned(),
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
        let live = claims.get_opt(&name).await.map_err(api_err(format!("reading PersistentVolumeClaim {name}")))?;
        let Some(resize) = build::mysql::claim_resize(self.app, live.as_ref()) else { return Ok(()) };
        let patch = serde_json::json!({ "spec": resize.spec });
        match claims.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(ApiError { action: format!("growing PersistentVolumeClaim {name}"), source }.into()),
        }
    }

    pub(crate) fn cached<K>(&self, store: &Store<K>, name: &str) -> Option<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone,
    {
        store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// A workload as desired: the cached one when applying would change nothing (see
    /// [`Seen::unchanged_since_applied`]), else the apply response.
    async fn ensure_workload<K>(&self, desired: &K, cached: Option<&K>) -> Result<K, Error>
    where
        K: Child,
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
        let live = api.get_opt(&name).await.map_err(api_err(format!("reading Service {name}")))?;
        let Some(live) =
            live.filter(|live| self.controls(live) && repair::needs_recreating(&to_json(desired), &to_json(live)))
        else {
            return Err(rejected);
        };
        let preconditions = Preconditions { uid: live.uid(), resource_version: live.resource_version() };
        api.delete(&name, &DeleteParams { preconditions: Some(preconditions), ..DeleteParams::default() })
            .await
            .map_err(api_err(format!("deleting Service {name} to recreate it")))?;
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
        K: Child,
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
        K: Child,
    {
        let what = format!("{} {}", K::kind(&()), desired.name_any());
        let api = self.api::<K>();
        let field_manager = &self.ctx.runtime.field_manager;
        let applied = match apply(&api, field_manager, desired).await {
            Ok(applied) => applied,
            Err(kube::Error::Api(status)) if status.code == 422 => {
                let rejected = kube::Error::Api(status);
                let live = api.get_opt(&desired.name_any()).await.map_err(api_err(format!("reading {what}")))?;
                let repaired = match live {
                    Some(live) => self.remove_foreign_items(&api, desired, &live, &what).await?,
                    None => None,
                };
                if repaired.is_none() {
                    return Err(ApiError { action: format!("applying {what}"), source: rejected }.into());
                }
                apply(&api, field_manager, desired).await.map_err(api_err(format!("applying {what}")))?
            }
            Err(source) => return Err(ApiError { action: format!("applying {what}"), source }.into()),
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
            .map_err(api_err(format!("removing foreign list items from {what}")))?;
        let note = format!("{what}: removed items another client put in lists the controller sets ({foreign})");
        self.ctx.runtime.events.normal(self.app, "Repaired", "RepairLists", note).await;
        Ok(Some(repaired))
    }
}

/// Keeps going after a child's failure: the child is `None`, the failure collected.
fn collect<K>(result: Result<K, Error>, failed: &mut Vec<Error>) -> Option<K> {
    result.map_err(|error| failed.push(error)).ok()
}

fn to_json<K: Serialize>(object: &K) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}
