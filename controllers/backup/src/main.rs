//! backup-controller: reconciles MySQLBackup resources.

use backup_controller::controller;
use clap::Parser;
use controller_common::args::{AgentControllerArgs, ENVIRONMENT_HELP};

/// Reconciles MySQLBackup resources: on-demand backup runs and cron schedules of runs.
#[derive(Parser)]
#[command(name = "backup-controller", version, after_help = ENVIRONMENT_HELP)]
struct Cli {
    #[command(flatten)]
    args: AgentControllerArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    controller_common::runner::main_with_agent(controller::IDENTITY, Cli::parse().args, controller::run).await
}
