//! restore-controller: reconciles MySQLRestore resources.

use clap::Parser;
use controller_common::args::{AgentControllerArgs, ENVIRONMENT_HELP};
use restore_controller::controller;

/// Reconciles MySQLRestore resources: safe, verified restores into a VisitorsApp.
#[derive(Parser)]
#[command(name = "restore-controller", version, after_help = ENVIRONMENT_HELP)]
struct Cli {
    #[command(flatten)]
    args: AgentControllerArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    controller_common::runner::main_with_agent(controller::IDENTITY, Cli::parse().args, controller::run).await
}
