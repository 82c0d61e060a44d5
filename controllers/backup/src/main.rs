//! backup-controller: reconciles MySQLBackup resources.

use backup_controller::controller;
use clap::Parser;
use controller_common::ControllerArgs;
use controller_common::args::ENVIRONMENT_HELP;

/// Reconciles MySQLBackup resources: on-demand backup runs and cron schedules of runs.
#[derive(Parser)]
#[command(name = "backup-controller", version, after_help = ENVIRONMENT_HELP)]
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
