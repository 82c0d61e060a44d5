//! restore-controller: reconciles MySQLRestore resources.

use clap::Parser;
use controller_common::ControllerArgs;
use controller_common::args::ENVIRONMENT_HELP;
use controller_common::telemetry::OTLP_ENDPOINT_ENV;
use restore_controller::controller::{self, Settings};

/// Reconciles MySQLRestore resources: safe, verified restores into a VisitorsApp.
#[derive(Parser)]
#[command(name = "restore-controller", version, after_help = ENVIRONMENT_HELP)]
struct Cli {
    #[command(flatten)]
    common: ControllerArgs,

    /// Image of the restore Jobs, which run /usr/local/bin/visitors-agent from it; the Helm
    /// chart sets it to the controllers' own image.
    #[arg(long, env = "AGENT_IMAGE")]
    agent_image: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let args = cli.common.clone();
    let settings = Settings {
        agent_image: cli.agent_image,
        otlp_endpoint: std::env::var(OTLP_ENDPOINT_ENV).ok().filter(|e| !e.is_empty()),
    };
    controller_common::runner::main(controller::IDENTITY, &cli.common, |runtime, shutdown| async move {
        controller::run(runtime, args.watch_namespace(), settings, shutdown).await
    })
    .await
}
