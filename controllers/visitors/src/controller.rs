//! The wiring of the VisitorsApp controller: the watches that wake an app and the loop that
//! drives its reconciles ([`crate::reconcile`]).

use std::sync::Arc;

use std::time::Duration;

use clap::ValueEnum;
use controller_common::Runtime;
use controller_common::operation::AgentSettings;
use controller_common::process::{Identity, Reconciling};
use controller_common::watch::{api_in, controller_config, drive, reflected_primary, trim_for_cache};
use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Controller;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;
use visitors_api::labels::{children_selector, replicated_mysql_pods};
use visitors_api::{MySQLRestore, VisitorsApp};

use crate::context::{Context, Stores};
use crate::database::check::{DatabaseCheck, MysqlCheck};
use crate::reconcile::{error_policy, reconcile};
use crate::wake::cache::{CachedDeployment, CachedStatefulSet, cached_event};
use crate::wake::hold::Hold;
use crate::wake::seen::Seen;
use crate::wake::watches::{app_of_pod, as_trigger, mysql_pod_news, owned, target_app, trim_pod};

/// Field manager, event reporter and lease name of this controller.
pub const NAME: &str = "visitors-controller";
/// The CRD this controller reconciles.
pub const CRD: &str = "visitorsapps.example.com";
/// Who this controller is, for the shared start-up sequence.
pub const IDENTITY: Identity = Identity { name: NAME, crd: CRD };

/// How the controller decides that a database is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatabaseCheckMode {
    /// The pod's readiness probe, then the controller's own `SELECT 1` through the client
    /// Service (the controller needs network access to the app's namespace).
    Query,
    /// The pod's readiness probe only (for a controller outside the cluster network).
    Pod,
}

/// The flags of this controller besides those every controller has.
#[derive(Debug, Clone, clap::Args)]
pub struct DatabaseCheckArgs {
    /// How the database's readiness is decided.
    #[arg(long, env = "DATABASE_CHECK", value_enum, default_value_t = DatabaseCheckMode::Query)]
    pub database_check: DatabaseCheckMode,

    /// Time limit of the controller's `SELECT 1`, in milliseconds; a reconcile never waits
    /// longer on a database.
    #[arg(long, env = "DATABASE_CHECK_TIMEOUT_MS", default_value_t = 2000)]
    pub database_check_timeout_ms: u64,

    /// Image of the Jobs that load a backup run into an empty MySQL server of a replicated app
    /// (to seed it), which run /usr/local/bin/visitors-agent from it; the Helm chart sets it to
    /// the controllers' own image. Unset: such a server reports that it cannot be seeded.
    #[arg(long, env = "AGENT_IMAGE")]
    pub agent_image: Option<String>,
}

impl DatabaseCheckArgs {
    /// The controller's own check, unless it trusts the pod's readiness probe alone.
    pub fn check(&self) -> Option<Arc<dyn DatabaseCheck>> {
        match self.database_check {
            DatabaseCheckMode::Query => {
                Some(Arc::new(MysqlCheck { timeout: Duration::from_millis(self.database_check_timeout_ms) }))
            }
            DatabaseCheckMode::Pod => None,
        }
    }
}

/// Watches and reconciles VisitorsApps (see [`Watches`]) until the controller shuts down.
pub async fn watch_and_reconcile(reconciling: Reconciling<DatabaseCheckArgs>) {
    let database_check = reconciling.args.check();
    let agent = reconciling.args.agent_image.clone().map(AgentSettings::from_env);
    let Reconciling { runtime, namespace, shutdown, .. } = reconciling;
    Watches::default().watch_and_reconcile(runtime, namespace.as_deref(), database_check, agent, shutdown).await
}

/// The watches of the controller: VisitorsApps (filtered so that status writes do not wake
/// them), and the children, whose changes and deletions wake their owner. The StatefulSet and
/// Deployment watches also fill [`Stores`] (with what [`crate::wake::cache`] keeps of each); Services
/// are watched as metadata only.
pub struct Watches {
    pub stores: Stores,
    statefulsets: reflector::store::Writer<CachedStatefulSet>,
    deployments: reflector::store::Writer<CachedDeployment>,
    restores: reflector::store::Writer<MySQLRestore>,
    pods: reflector::store::Writer<Pod>,
}

impl Watches {
    /// Watches and reconciles until `shutdown` is cancelled.
    pub async fn watch_and_reconcile(
        self,
        runtime: Arc<Runtime>,
        namespace: Option<&str>,
        database_check: Option<Arc<dyn DatabaseCheck>>,
        agent: Option<AgentSettings>,
        shutdown: CancellationToken,
    ) {
        let client = runtime.client.clone();
        let seen = Seen::default();
        let hold = Hold::default();
        let children = watcher::Config::default().labels_from(&children_selector());
        let (app_reader, app_writer) = reflector::store::store();
        let (app_news, app_hold) = (seen.clone(), hold.clone());
        // The seen-records decide what is news of an app (see `Fingerprint for VisitorsApp`).
        let apps = reflected_primary(api_in::<VisitorsApp>(client.clone(), namespace), app_writer)
            .try_filter(move |app| {
                let news = app_news.is_news(app);
                if news {
                    app_hold.news_of(app);
                }
                std::future::ready(news)
            })
            .map_ok(as_trigger);
        let statefulsets = owned(
            watcher(api_in::<StatefulSet>(client.clone(), namespace), children.clone())
                .map_ok(cached_event)
                .reflect(self.statefulsets),
            seen.clone(),
            hold.clone(),
        );
        let deployments = owned(
            watcher(api_in::<Deployment>(client.clone(), namespace), children.clone())
                .map_ok(cached_event)
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
        // A replicated app's MySQL pod going, coming, or changing readiness wakes the app at once:
        // a failover starts there.
        let pods = mysql_pod_news(
            watcher(
                api_in::<Pod>(client.clone(), namespace),
                watcher::Config::default().labels_from(&replicated_mysql_pods()),
            )
            .modify(trim_pod)
            .reflect(self.pods),
        );
        // Every change of a restore (its phase above all) wakes the app it targets.
        let restores = watcher(api_in::<MySQLRestore>(client, namespace), watcher::Config::default())
            .default_backoff()
            .modify(trim_for_cache)
            .reflect(self.restores)
            .touched_objects();
        let held_wake_ups = hold.clone().released(app_reader.clone());
        let metrics = crate::metrics::ReplicationMetrics::default();
        metrics.register(&runtime.metrics);
        let ctx = Arc::new(Context {
            runtime,
            database_check,
            agent,
            stores: self.stores,
            seen,
            hold,
            replication: Default::default(),
            metrics,
        });
        let controller = Controller::for_stream(apps, app_reader)
            .with_config(controller_config())
            .owns_stream(statefulsets)
            .owns_stream(deployments)
            .owns_stream(services)
            .watches_stream(restores, |restore| target_app(&restore))
            .watches_stream(pods, |pod| app_of_pod(&pod))
            .reconcile_on(held_wake_ups);
        drive(controller, reconcile, error_policy, ctx, shutdown).await;
    }
}

impl Default for Watches {
    fn default() -> Self {
        let statefulsets = reflector::store::Writer::default();
        let deployments = reflector::store::Writer::default();
        let restores = reflector::store::Writer::default();
        let pods = reflector::store::Writer::default();
        let stores = Stores {
            statefulsets: statefulsets.as_reader(),
            deployments: deployments.as_reader(),
            restores: restores.as_reader(),
            pods: pods.as_reader(),
        };
        Self { stores, statefulsets, deployments, restores, pods }
    }
}
