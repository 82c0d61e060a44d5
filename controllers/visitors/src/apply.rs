//! The desired children of an app, applied: server-side apply under the controller's field
//! manager, skipped when the cache shows nothing would change; items another client put in the
//! lists the controller sets are removed; a Service whose address cannot change in place is
//! recreated; the data volume grows when the spec asks for more. A child that cannot be applied
//! does not stop the others: its failure is collected, and the cache stands in for it.

use std::sync::Arc;

use controller_common::apply::apply;
use controller_common::error::{ApiError, api_err};
use controller_common::kind::NamespacedKind;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use visitors_api::labels::names;

use crate::build::{self, Children, Inputs};
use crate::context::{AppScope, Error};
use crate::repair;
use crate::status::Workload;
use crate::wake::cache::{Cached, CachedDeployment, CachedStatefulSet};
use crate::wake::seen::{Fingerprint, News, Ticket};

/// The workloads as the watches cached them before this reconcile: what the desired set keeps of
/// them (the StatefulSet's claim template), and what stands in for an apply that would change
/// nothing or that failed.
#[derive(Default)]
pub struct Existing {
    pub mysql: Option<Arc<CachedStatefulSet>>,
    /// The MySQL StatefulSet's data claim template.
    claim: Option<PersistentVolumeClaim>,
    pub backend: Option<Arc<CachedDeployment>>,
    pub frontend: Option<Arc<CachedDeployment>>,
}

impl Existing {
    pub fn cached(scope: &AppScope<'_>) -> Self {
        let stores = &scope.ctx.stores;
        let mysql = scope.cached(&stores.statefulsets, &names::mysql(&scope.name));
        Existing {
            claim: mysql.as_ref().and_then(|mysql| mysql.claim()),
            mysql,
            backend: scope.cached(&stores.deployments, &names::backend(&scope.name)),
            frontend: scope.cached(&stores.deployments, &names::frontend(&scope.name)),
        }
    }

    /// What the MySQL StatefulSet keeps from its creation, which cannot change.
    pub fn kept(&self) -> build::mysql::Kept<'_> {
        self.mysql.as_deref().map(|mysql| mysql.kept(self.claim.as_ref())).unwrap_or_default()
    }
}

/// What applying found: what each workload's status says now (from the apply's answer, or the
/// cache), the children that could not be applied, and the most a watch reported of a child
/// while its apply was on its way, other than the apply's own echo (see
/// [`crate::wake::seen::Seen::record_apply`]).
#[derive(Default)]
pub struct Applied {
    pub mysql: Workload,
    pub frontend: Workload,
    /// `None` while the backend waits for the database and was never rolled out.
    pub backend: Option<Workload>,
    pub failed: Vec<Error>,
    pub reported: News,
}

impl Applied {
    /// Keeps going after a child's failure: the child is `None`, the failure collected.
    fn collect<K>(&mut self, result: Result<(K, News), Error>) -> Option<K> {
        match result {
            Ok((child, news)) => {
                self.reported = self.reported.max(news);
                Some(child)
            }
            Err(error) => {
                self.failed.push(error);
                None
            }
        }
    }
}

/// Applies every child but the backend, which waits for the database: all at once, so that a
/// reconcile takes one round trip for them.
pub async fn all_but_the_backend(
    scope: &AppScope<'_>,
    desired: &Children,
    inputs: &Inputs<'_>,
    existing: &Existing,
) -> Applied {
    let replicas_service = async {
        match &desired.mysql_replicas {
            Some(service) => Some(ensure_service(scope, service).await),
            None => None,
        }
    };
    let (mysql, headless, client, replicas, frontend, frontend_service) = futures::join!(
        ensure_workload(scope, &desired.mysql, existing.mysql.as_deref()),
        ensure_service(scope, &desired.mysql_headless),
        ensure_service(scope, &desired.mysql_client),
        replicas_service,
        ensure_workload(scope, &desired.frontend, existing.frontend.as_deref()),
        ensure_service(scope, &desired.frontend_service),
    );
    if inputs.kept.claim.is_none()
        && let Ok((Some(created), _)) = &mysql
    {
        let kept = build::mysql::Kept::of(Some(created));
        let settled = build::mysql::statefulset(scope.app, inputs.credentials_secret, kept, inputs.tls);
        scope.ctx.seen.record_settled_form(&desired.mysql, &settled);
    }
    let mut applied = Applied::default();
    let mysql = applied.collect(mysql).flatten();
    applied.mysql =
        workload(mysql.as_ref().map(Workload::from_statefulset), existing.mysql.as_deref()).unwrap_or_default();
    applied.collect(headless);
    applied.collect(client);
    if let Some(replicas) = replicas {
        applied.collect(replicas);
    }
    let frontend = applied.collect(frontend).flatten();
    applied.frontend =
        workload(frontend.as_ref().map(Workload::from_deployment), existing.frontend.as_deref()).unwrap_or_default();
    applied.collect(frontend_service);
    if inputs.kept.claim.is_some_and(|template| build::mysql::asks_for_more_than_template(scope.app, template)) {
        grow_claim_if_asked(scope).await;
    }
    applied
}

/// Applies the backend and its Service, adding to what `applied` found.
pub async fn backend(scope: &AppScope<'_>, desired: &Children, existing: &Existing, applied: &mut Applied) {
    let backend = ensure_workload(scope, &desired.backend, existing.backend.as_deref()).await;
    let backend = applied.collect(backend).flatten();
    applied.backend = workload(backend.as_ref().map(Workload::from_deployment), existing.backend.as_deref());
    let service = ensure_service(scope, &desired.backend_service).await;
    applied.collect(service);
}

/// Asks the claim of pod 0 to grow when the spec asks for more storage. A refusal (a storage
/// class without expansion, a quota) is reported by a Warning Event and does not hold up the
/// rest of the reconcile: the app keeps running on its current volume.
async fn grow_claim_if_asked(scope: &AppScope<'_>) {
    if let Err(error) = grow_claim(scope).await {
        let note = format!("cannot grow the MySQL volume to {}: {error}", scope.app.spec.storage_size());
        scope.runtime().events.warning(scope.app, "StorageResizeFailed", "GrowClaim", note).await;
    }
}

/// A merge patch rather than an apply: the claim belongs to the StatefulSet controller, and a
/// claim not created yet must not be created here (it will be, from the template).
async fn grow_claim(scope: &AppScope<'_>) -> Result<(), Error> {
    let name = build::mysql::claim_name(&scope.name);
    let claims = scope.api::<PersistentVolumeClaim>();
    let live = claims.get_opt(&name).await.map_err(api_err(format!("reading PersistentVolumeClaim {name}")))?;
    let Some(resize) = build::mysql::claim_resize(scope.app, live.as_ref()) else { return Ok(()) };
    let patch = serde_json::json!({ "spec": resize.spec });
    match claims.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(ApiError { action: format!("growing PersistentVolumeClaim {name}"), source }.into()),
    }
}

/// A workload as desired: `None` when it is cached and applying would change nothing (see
/// [`crate::wake::seen::Seen::unchanged_since_applied`]), else the apply response.
async fn ensure_workload<K>(
    scope: &AppScope<'_>,
    desired: &K,
    cached: Option<&Cached<K>>,
) -> Result<(Option<K>, News), Error>
where
    K: NamespacedKind + Fingerprint,
{
    match cached {
        Some(_) if scope.ctx.seen.unchanged_since_applied(desired, scope.runtime().resync) => Ok((None, News::Nothing)),
        _ => apply_child(scope, desired).await.map(|(applied, news)| (Some(applied), news)),
    }
}

/// What a workload's status says: as the apply answered, else as the cache has it.
fn workload<K>(applied: Option<Workload>, cached: Option<&Cached<K>>) -> Option<Workload> {
    applied.or_else(|| cached.map(|cached| cached.workload.clone()))
}

/// A Service as desired: applied unless that would change nothing; recreated when the API
/// server refuses the apply because the Service's address cannot change in place.
async fn ensure_service(scope: &AppScope<'_>, desired: &Service) -> Result<((), News), Error> {
    if scope.ctx.seen.unchanged_since_applied(desired, scope.runtime().resync) {
        return Ok(((), News::Nothing));
    }
    match apply_child(scope, desired).await {
        // Boxed, as in `apply_child`: the reconcile's future must stay small.
        Err(rejected) if rejected.is_rejected() => Box::pin(recreate_service(scope, desired, rejected)).await,
        result => result.map(|(_, news)| ((), news)),
    }
}

/// Deletes the live Service and applies `desired` again, when only that can make it so (see
/// [`repair::needs_recreating`]) and the live one is this app's: a Service of someone else's in
/// the way is never deleted, and `rejected` stays the answer.
async fn recreate_service(scope: &AppScope<'_>, desired: &Service, rejected: Error) -> Result<((), News), Error> {
    let name = desired.name_any();
    let api = scope.api::<Service>();
    let live = api.get_opt(&name).await.map_err(api_err(format!("reading Service {name}")))?;
    let Some(live) =
        live.filter(|live| controls(scope, live) && repair::needs_recreating(&to_json(desired), &to_json(live)))
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
    scope.runtime().events.normal(scope.app, "Recreated", "Recreate", note).await;
    apply_child(scope, desired).await.map(|(_, news)| ((), news))
}

/// Whether the app is the controller owner of `child`.
fn controls<K: Resource>(scope: &AppScope<'_>, child: &K) -> bool {
    let uid = scope.app.uid();
    child.owner_references().iter().any(|owner| owner.controller == Some(true) && Some(&owner.uid) == uid.as_ref())
}

/// Server-side applies one child (an unchanged child is a no-op on the server), then removes
/// what server-side apply cannot: items another client put in the keyed lists the controller
/// sets (see [`repair`]). An apply the API server rejects is retried once after that repair,
/// since foreign items colliding with ours (two ports named `mysql`) make every apply invalid.
/// Answers the child as applied and what a watch reported of it meanwhile.
async fn apply_child<K>(scope: &AppScope<'_>, desired: &K) -> Result<(K, News), Error>
where
    K: NamespacedKind + Fingerprint,
{
    let ticket = scope.ctx.seen.ticket(desired);
    // Boxed: six of these futures inline would make the reconcile's future too big for a
    // thread's stack.
    let result = Box::pin(apply_and_repair(scope, desired, ticket)).await;
    if result.is_err() {
        scope.ctx.seen.abandon(desired);
    }
    result
}

async fn apply_and_repair<K>(scope: &AppScope<'_>, desired: &K, ticket: Ticket) -> Result<(K, News), Error>
where
    K: NamespacedKind + Fingerprint,
{
    let what = format!("{} {}", K::kind(&()), desired.name_any());
    let api = scope.api::<K>();
    let field_manager = &scope.runtime().field_manager;
    let applied = match apply(&api, field_manager, desired).await {
        Ok(applied) => applied,
        Err(kube::Error::Api(status)) if status.code == 422 => {
            let rejected = kube::Error::Api(status);
            let live = api.get_opt(&desired.name_any()).await.map_err(api_err(format!("reading {what}")))?;
            let repaired = match live {
                Some(live) => remove_foreign_items(scope, &api, desired, &live, &what).await?,
                None => None,
            };
            if repaired.is_none() {
                return Err(ApiError { action: format!("applying {what}"), source: rejected }.into());
            }
            apply(&api, field_manager, desired).await.map_err(api_err(format!("applying {what}")))?
        }
        Err(source) => return Err(ApiError { action: format!("applying {what}"), source }.into()),
    };
    let applied = match remove_foreign_items(scope, &api, desired, &applied, &what).await? {
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
    let news = scope.ctx.seen.record_apply(desired, &applied, ticket);
    Ok((applied, news))
}

/// Removes the items of `live` that are not ours from the lists `desired` sets, by a JSON patch
/// conditional on `live`'s resourceVersion. `None` when there were none.
async fn remove_foreign_items<K: NamespacedKind>(
    scope: &AppScope<'_>,
    api: &Api<K>,
    desired: &K,
    live: &K,
    what: &str,
) -> Result<Option<K>, Error> {
    let drifted = repair::drifted_lists(&to_json(desired), &to_json(live));
    if drifted.is_empty() {
        return Ok(None);
    }
    let foreign = repair::describe(&drifted);
    tracing::info!(child = what, %foreign, "removing items another client put in lists the controller sets");
    let patch = repair::repair_patch(&live.resource_version().unwrap_or_default(), &drifted);
    let patch = serde_json::from_value(patch).expect("a JSON patch built from operations is well-formed");
    let params = PatchParams { field_manager: Some(scope.runtime().field_manager.clone()), ..PatchParams::default() };
    let repaired = api
        .patch(&live.name_any(), &params, &Patch::Json::<()>(patch))
        .await
        .map_err(api_err(format!("removing foreign list items from {what}")))?;
    let note = format!("{what}: removed items another client put in lists the controller sets ({foreign})");
    scope.runtime().events.normal(scope.app, "Repaired", "RepairLists", note).await;
    Ok(Some(repaired))
}

fn to_json<K: Serialize>(object: &K) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}
