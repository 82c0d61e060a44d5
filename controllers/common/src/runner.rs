//! The start-up and shut-down sequence every controller binary shares:
//! signals → cluster connection → health server → CRD established → ready → leadership;
//! then, on SIGTERM or lost leadership, stop reconciling, release the lease, stop serving.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::utils::{Predicate, PredicateConfig, predicates};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent_run::AgentSettings;
use crate::args::{AgentControllerArgs, ControllerArgs};
use crate::backoff::ObjectBackoff;
use crate::events::Events;
use crate::leader::{self, Leadership};
use crate::metrics::Metrics;
use crate::reconcile::Runtime;
use crate::server::{self, Health};
use crate::shutdown;
use crate::startup::{self, StartupError};

/// Who a controller is: its name (field manager, event reporter, lease and service name) and
/// the CRD it reconciles.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    /// For example `visitors-controller`.
    pub name: &'static str,
    /// For example `visitorsapps.example.com`.
    pub crd: &'static str,
}

/// A started controller, ready to reconcile.
pub struct Started {
    pub runtime: Arc<Runtime>,
    /// Cancelled on SIGTERM, SIGINT or lost leadership.
    pub shutdown: CancellationToken,
    pub health: Arc<Health>,
    leadership: Option<Leadership>,
    server: JoinHandle<std::io::Result<()>>,
}

/// Runs the start-up sequence. Returns `Ok(None)` when a shutdown signal came while standing
/// by for leadership.
pub async fn start(identity: Identity, args: &ControllerArgs) -> Result<Option<Started>, StartupError> {
    let shutdown = shutdown::on_signals();
    let client = startup::connect().await?;
    let metrics = Arc::new(Metrics::new(identity.name));
    let health = Health::new(metrics.clone());
    let server = spawn_server(args, health.clone(), shutdown.clone()).await?;

    startup::wait_for_crd(client.clone(), identity.crd, std::time::Duration::from_secs(args.crd_wait_seconds)).await?;
    // A standby replica is ready too: it is healthy and takes over when the leader goes. If
    // readiness waited for leadership, a rolling update would stall (the new pod waits for the
    // old one's lease, the old one is kept until the new one is ready).
    health.set_ready(true);

    let leadership = if args.leader_election {
        let lease = format!("{}-leader", identity.name);
        match leader::acquire(client.clone(), &lease, &args.lease_namespace(), &args.identity(), &shutdown).await? {
            Some(leadership) => {
                leadership.stop_on_loss(shutdown.clone());
                Some(leadership)
            }
            None => return Ok(None),
        }
    } else {
        None
    };
    metrics.set_leader(true);

    let runtime = Arc::new(Runtime {
        client: client.clone(),
        metrics,
        backoff: ObjectBackoff::new(args.backoff_base(), args.backoff_max()),
        events: Events::new(client, identity.name, Some(args.identity())),
        field_manager: identity.name.to_string(),
        resync: args.resync(),
    });
    tracing::info!(controller = identity.name, namespace = args.watch_namespace().unwrap_or("<all>"), "reconciling");
    Ok(Some(Started { runtime, shutdown, health, leadership, server }))
}

async fn spawn_server(
    args: &ControllerArgs,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> Result<JoinHandle<std::io::Result<()>>, StartupError> {
    let address = args.metrics_address;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| StartupError::Server { address: address.to_string(), reason: e.to_string() })?;
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    Ok(tokio::spawn(async move {
        axum::serve(listener, server::router(health)).with_graceful_shutdown(shutdown.cancelled_owned()).await
    }))
}

impl Started {
    /// Called once the controller loop has ended: stops being ready, releases the lease and
    /// stops the HTTP server.
    pub async fn finish(self) {
        self.health.set_ready(false);
        self.runtime.metrics.set_leader(false);
        self.shutdown.cancel();
        if let Some(leadership) = self.leadership {
            leadership.release().await;
        }
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "the HTTP server failed"),
            Err(error) => tracing::warn!(%error, "the HTTP server task failed"),
        }
        tracing::info!("stopped");
    }
}

/// The whole life of a controller binary: telemetry, start-up, `run` until shutdown, then
/// clean-up. Start-up errors are printed as one line and give a non-zero exit code.
pub async fn main<F, Fut>(identity: Identity, args: &ControllerArgs, run: F) -> std::process::ExitCode
where
    F: FnOnce(Arc<Runtime>, CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let _telemetry = match crate::telemetry::init(identity.name, args.log_format) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("{}: {error}", identity.name);
            return std::process::ExitCode::FAILURE;
        }
    };
    match start(identity, args).await {
        Ok(Some(started)) => {
            run(started.runtime.clone(), started.shutdown.clone()).await;
            started.finish().await;
            std::process::ExitCode::SUCCESS
        }
        Ok(None) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            eprintln!("{}: {error}", identity.name);
            std::process::ExitCode::FAILURE
        }
    }
}

/// [`main`] for a controller that runs the agent in Jobs: `run` gets the namespace to watch
/// and the agent's settings.
pub async fn main_with_agent<F, Fut>(identity: Identity, args: AgentControllerArgs, run: F) -> std::process::ExitCode
where
    F: FnOnce(Arc<Runtime>, Option<String>, AgentSettings, CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let namespace = args.common.watch_namespace().map(str::to_string);
    let settings = AgentSettings::from_env(args.agent_image);
    main(identity, &args.common, |runtime, shutdown| run(runtime, namespace, settings, shutdown)).await
}

/// Reconciles that may run at once. Reconciles spend their time waiting on the API server (and
/// the visitors controller on a database check of up to a few seconds): 64 keep a burst of new
/// objects moving while slow ones wait, and still bound the load on the API server.
pub const CONCURRENCY: u16 = 64;
/// Triggers of one object closer together than this make one reconcile (trailing edge): the
/// burst of watch events a reconcile's own applies cause (children created, their statuses
/// filled in) costs one more reconcile instead of one per event, and leaves room in the queue
/// for new objects.
pub const DEBOUNCE: std::time::Duration = std::time::Duration::from_secs(1);

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

/// An `Api` for `K` in the watched namespace, or in all namespaces.
pub fn scoped_api<K>(client: Client, args: &ControllerArgs) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    api_in(client, args.watch_namespace())
}

/// An `Api` for `K` in `namespace`, or in all namespaces when `None`.
pub fn api_in<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
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
/// and only changes of generation (the spec), finalizers or deletion reach the reconciler.
/// Status writes move only the resourceVersion, so they never re-trigger a reconcile.
pub fn primary_stream<K>(api: Api<K>, writer: Writer<K>) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(trim_for_cache)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(spec_or_lifecycle_changed(), PredicateConfig::default())
        .boxed()
}

/// The objects a secondary watch of `api` (owned children, or objects a mapper relates to the
/// primary kind) reports changed or deleted, with the watcher's default backoff.
pub fn watched_objects<K>(api: Api<K>, config: watcher::Config) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config).default_backoff().touched_objects()
}

/// Hashes what should trigger a reconcile: generation, finalizers, deletion.
pub fn spec_or_lifecycle_changed<K: Resource>() -> impl Predicate<K> {
    predicates::generation.combine(predicates::finalizers).combine(being_deleted::<K>)
}

fn being_deleted<K: Resource>(object: &K) -> Option<u64> {
    object.meta().deletion_timestamp.as_ref().map(|_| 1)
}
