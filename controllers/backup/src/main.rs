//! backup-controller: reconciles MySQLBackup resources.

use backup_controller::controller;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let about = "Reconciles MySQLBackup resources: on-demand backup runs and cron schedules of runs.";
    controller_common::process::controller_main(controller::IDENTITY, about, controller::watch_and_reconcile).await
}
