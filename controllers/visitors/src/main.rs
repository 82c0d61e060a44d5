//! visitors-controller: keeps each VisitorsApp's MySQL, backend and frontend converged.

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use controller_common::ControllerArgs;
use controller_common::args::ENVIRONMENT_HELP;
use visitors_controller::controller::{self, Watches};
use visitors_controller::db::{DatabaseProbe, MysqlProbe};

/// How the controller decides that a database is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DatabaseCheck {
    /// The pod's readiness probe, then the controller's own `SELECT 1` through the client
    /// Service (the controller needs network access to the app's namespace).
    Query,
    /// The pod's readiness probe only (for a controller outside the cluster network).
    Pod,
}

/// Reconciles VisitorsApp resources: a Visitors Site (MySQL with a volume, the REST backend and
/// the web frontend) per resource, kept converged.
#[derive(Parser)]
#[command(name = "visitors-controller", version, after_help = ENVIRONMENT_HELP)]
struct Cli {
    #[command(flatten)]
    common: ControllerArgs,

    /// How the database's readiness is decided.
    #[arg(long, env = "DATABASE_CHECK", value_enum, default_value_t = DatabaseCheck::Query)]
    database_check: DatabaseCheck,

    /// Time limit of the controller's `SELECT 1`, in milliseconds; a reconcile never waits
    /// longer on a database.
    #[arg(long, env = "DATABASE_CHECK_TIMEOUT_MS", default_value_t = 2000)]
    database_check_timeout_ms: u64,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let namespace = cli.common.watch_namespace().map(ToString::to_string);
    let probe: Option<Arc<dyn DatabaseProbe>> = match cli.database_check {
        DatabaseCheck::Query => {
            Some(Arc::new(MysqlProbe { timeout: Duration::from_millis(cli.database_check_timeout_ms) }))
        }
        DatabaseCheck::Pod => None,
    };
    controller_common::process::main(controller::IDENTITY, &cli.common, |runtime, shutdown| async move {
        Watches::new().watch_and_reconcile(runtime, namespace.as_deref(), probe, shutdown).await
    })
    .await
}
