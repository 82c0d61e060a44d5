//! The start-up and shut-down sequence every controller binary shares:
//! signals → cluster connection → health server → CRD established → ready → leadership;
//! then, on SIGTERM or lost leadership, stop reconciling, release the lease, stop serving.

use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::batch::v1::Job;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use visitors_api::labels::Component;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::args::{AgentArgs, ControllerArgs, ENVIRONMENT_HELP};
use crate::backoff::ObjectBackoff;
use crate::events::Events;
use crate::kind::NamespacedKind;
use crate::leader::{self, Leadership};
use crate::metrics::Metrics;
use crate::operation::AgentSettings;
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
    let metrics = Arc::new(Metrics::new(identity.name));
    let client = startup::connect(&metrics.api_requests()).await?;
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

/// The whole life of a controller binary: telemetry, start-up, `reconcile_until` shutdown,
/// then clean-up. Start-up errors are printed as one line and give a non-zero exit code.
async fn reconcile_until_shutdown<F, Fut>(
    identity: Identity,
    args: &ControllerArgs,
    reconcile_until: F,
) -> std::process::ExitCode
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
            let trimming = tokio::spawn(crate::heap::trim_periodically());
            reconcile_until(started.runtime.clone(), started.shutdown.clone()).await;
            trimming.abort();
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

/// What a started controller reconciles with: the shared runtime, the namespace it watches,
/// the shutdown signal, and the flags `A` of its own.
pub struct Reconciling<A> {
    pub runtime: Arc<Runtime>,
    /// The namespace it watches, or `None` for all.
    pub namespace: Option<String>,
    /// Cancelled on SIGTERM, SIGINT or lost leadership.
    pub shutdown: CancellationToken,
    /// The controller's own flags.
    pub args: A,
}

impl<A> Reconciling<A> {
    /// The namespace watched, as the API calls take it.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// What every controller of operations watches: the objects of kind `K` (and the cache
    /// they fill), and their agent Jobs of tier `component`.
    #[allow(clippy::type_complexity)]
    pub fn operations<K>(
        &self,
        component: Component,
    ) -> (
        Store<K>,
        impl Stream<Item = Result<K, watcher::Error>> + Send + use<K, A>,
        impl Stream<Item = Result<PartialObjectMeta<Job>, watcher::Error>> + Send + use<K, A>,
    )
    where
        K: NamespacedKind,
    {
        let client = self.runtime.client.clone();
        let (reader, objects) = crate::watch::own_kind::<K>(client.clone(), self.namespace());
        (reader, objects, crate::watch::agent_jobs(client, self.namespace(), component))
    }
}

impl Reconciling<AgentArgs> {
    /// What the agent Jobs of a controller that runs them are started with.
    pub fn agent_settings(&self) -> AgentSettings {
        AgentSettings::from_env(self.args.agent_image.clone())
    }
}

/// The whole `main` of every controller binary: its command line (the flags every controller
/// shares, then its own flags `A`, `about` as its description, the environment in `--help`),
/// then its life: telemetry, start-up, `reconcile_until` shutdown, clean-up.
pub async fn controller_main<A, F, Fut>(
    identity: Identity,
    about: &'static str,
    reconcile_until: F,
) -> std::process::ExitCode
where
    A: clap::Args + clap::FromArgMatches,
    F: FnOnce(Reconciling<A>) -> Fut,
    Fut: Future<Output = ()>,
{
    use clap::{Args, FromArgMatches};
    let command = A::augment_args(ControllerArgs::augment_args(clap::Command::new(identity.name)))
        .version(env!("CARGO_PKG_VERSION"))
        .about(about)
        .after_help(ENVIRONMENT_HELP);
    let matches = command.get_matches();
    let parsed =
        ControllerArgs::from_arg_matches(&matches).and_then(|common| Ok((common, A::from_arg_matches(&matches)?)));
    let (common, args) = parsed.unwrap_or_else(|error| error.exit());
    let namespace = common.watch_namespace().map(str::to_string);
    reconcile_until_shutdown(identity, &common, |runtime, shutdown| {
        reconcile_until(Reconciling { runtime, namespace, shutdown, args })
    })
    .await
}
