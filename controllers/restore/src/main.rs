//! restore-controller: reconciles MySQLRestore resources.

use restore_controller::controller;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let about = "Reconciles MySQLRestore resources: safe, verified restores into a VisitorsApp.";
    controller_common::process::controller_main(controller::IDENTITY, about, controller::watch_and_reconcile).await
}
