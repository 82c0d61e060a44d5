//! restore-controller: reconciles MySQLBackup resources.

use clap::Parser;
use controller_common::ControllerArgs;
use controller_common::args::ENVIRONMENT_HELP;
use restore_controller::controller;

/// Reconciles MySQLRestore resources: safe, verified restores into a VisitorsApp.
#[derive(Parser)]
#[command(name = "restore-controller", version, after_help = ENVIRONMENT_HELP)]
struct Cli {
    #[command(flatten)]
    common: ControllerArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let args = cli.common.clone();
    controller_common::runner::main(controller::IDENTITY, &cli.common, |runtime, shutdown| {
        controller::run(runtime, args, shutdown)
    })
    .await
}
