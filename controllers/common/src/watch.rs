//! The watches every controller sets up the same way: the API of a kind in the watched
//! namespace, the stream of its own kind (trimmed, cached, filtered to spec and lifecycle
//! changes), the streams of what wakes it, and the loop that drives the reconciles.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::{Predicate, PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use k8s_openapi::api::batch::v1::Job;
use kube::core::PartialObjectMeta;
use visitors_api::labels::{Component, tier_selector};

use crate::kind::NamespacedKind;

/// Reconciles that may run at once. Reconciles spend their time waiting on the API server (and
/// the visitors controller on a database check of up to a few seconds): 64 keep a burst of new
/// objects moving while slow ones wait, and still bound the load on the API server.
pub const CONCURRENCY: u16 = 64;
/// Triggers of one object closer together than this make one reconcile (trailing edge): the
/// burst of watch events a reconcile's own applies cause (children created, their statuses
/// filled in) costs one more reconcile instead of one per event, and leaves room in the queue
/// for new objects.
pub const DEBOUNCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Reconciles of operations (backup runs, restores) that may run at once: each makes a few API
/// requests, and their work runs in Jobs.
pub const OPERATION_CONCURRENCY: u16 = 16;

/// The controller configuration every controller shares: see [`CONCURRENCY`], [`DEBOUNCE`].
pub fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENCY).debounce(DEBOUNCE)
}

/// Runs `controller` until `shutdown`, letting in-flight reconciles finish. Failures were
/// already logged and counted by the error policy.
pub async fn drive<K, C, F, E>(
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<C>) -> F,
    error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action,
    context: Arc<C>,
    shutdown: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: futures::TryFuture<Ok = Action, Error = E> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    controller
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                // A watch or queue failure means objects are not seen at all: say it loudly.
                Err(error @ kube::runtime::controller::Error::QueueError(_)) => {
                    tracing::warn!(%error, "a watch failed; objects may not be reconciled until it recovers");
                }
                // Reconcile failures were logged and counted by the error policy.
                Err(error) => tracing::debug!(%error, "controller loop reported an error"),
                Ok(_) => {}
            }
        })
        .await;
}

/// An `Api` for `K` in `namespace`, or in all namespaces when `None`.
pub fn api_in<K: NamespacedKind>(client: Client, namespace: Option<&str>) -> Api<K> {
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// What the caches keep of an object: all but `managedFields` and kubectl's last-applied
/// annotation, which no reconcile reads and which are about half of an object's size.
pub fn trim_for_cache<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// The trigger stream of a controller's own kind: objects are trimmed and reflected into
/// `writer`'s store,
/// and only changes of generation (the spec), annotations, finalizers or deletion reach the
/// reconciler.
/// Status writes move only the resourceVersion, so they never re-trigger a reconcile.
pub fn primary_stream<K>(api: Api<K>, writer: Writer<K>) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    reflected_primary(api, writer).predicate_filter(spec_or_lifecycle_changed(), PredicateConfig::default()).boxed()
}

/// Every object of a controller's own kind as its watch reports it, trimmed and reflected into
/// `writer`'s store: for a controller that filters the changes itself. [`primary_stream`]'s
/// filter keeps a copy of every object's name, namespace and UID.
pub fn reflected_primary<K>(api: Api<K>, writer: Writer<K>) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, watcher::Config::default()).default_backoff().modify(trim_for_cache).reflect(writer).applied_objects()
}

/// The objects of a controller's own kind in `namespace` (or all), as [`primary_stream`]
/// reports them, and the cache they fill.
pub fn own_kind<K: NamespacedKind>(
    client: Client,
    namespace: Option<&str>,
) -> (Store<K>, impl Stream<Item = Result<K, watcher::Error>> + Send + use<K>) {
    let (reader, writer) = reflector::store();
    (reader, primary_stream(api_in::<K>(client, namespace), writer))
}

/// The objects a secondary watch of `api` (owned children, or objects a mapper relates to the
/// primary kind) reports changed or deleted, with the watcher's default backoff.
pub fn watched_objects<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).default_backoff().touched_objects()
}

/// The agent Jobs of tier `component` (their metadata: what changes when one ends or goes), for
/// a controller whose objects own them.
pub fn agent_jobs(
    client: Client,
    namespace: Option<&str>,
    component: Component,
) -> impl Stream<Item = Result<PartialObjectMeta<Job>, watcher::Error>> + Send + use<> {
    let config = watcher::Config::default().labels_from(&tier_selector(component));
    watched_objects(api_in::<PartialObjectMeta<Job>>(client, namespace), config)
}

/// Hashes what should trigger a reconcile: generation, annotations (a request such as a
/// drill's, kubectl's last-applied copy being trimmed first), finalizers, deletion.
pub fn spec_or_lifecycle_changed<K: Resource>() -> impl Predicate<K> {
    predicates::generation.combine(predicates::annotations).combine(predicates::finalizers).combine(being_deleted::<K>)
}

fn being_deleted<K: Resource>(object: &K) -> Option<u64> {
    object.meta().deletion_timestamp.as_ref().map(|_| 1)
}
