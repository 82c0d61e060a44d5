//! `kubectl visitors`: the visitors-operator suite from one command (docs/kubectl-plugin.md).

mod cli;
mod client;
mod commands;
mod error;
mod follow;
mod format;
#[cfg(test)]
mod golden_tests;
mod output;
mod problems;
mod render;
mod report;
mod runbook;
mod snapshot;
mod view;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::Error;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Both ring and aws-lc-rs can be linked into one workspace build: name the provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli));
    if let Err(error) = &result {
        eprintln!("{} {error}", console::style("error:").red().bold().for_stderr());
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => ExitCode::from(error.exit_code()),
    }
}

async fn run(cli: Cli) -> Result<(), Error> {
    let session = client::connect(&cli.global).await?;
    let screen = output::screen(&cli.global);
    let result = match cli.command {
        Command::Status { app, output } => {
            commands::status::run(&session, app.as_deref(), cli.global.all_namespaces, output.output, screen).await
        }
        Command::Runs { app, output } => commands::runs::run(&session, &app, output.output, screen).await,
        Command::Backup(args) => commands::backup::run(&session, &args).await,
        Command::Restore(args) => commands::restore::run(&session, &args).await,
        Command::Drill(args) => commands::drill::run(&session, &args).await,
        Command::Switchover(args) => commands::switchover::run(&session, &args).await,
        Command::Report(args) => report::run(&session, &args).await,
    };
    if cli.global.verbose {
        eprintln!("{} API requests", client::requests_sent());
    }
    result
}
