//! visitors-controller: keeps each VisitorsApp's MySQL, backend and frontend converged.

use visitors_controller::controller;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let about = "Reconciles VisitorsApp resources: a Visitors Site (MySQL with a volume, the REST backend and the web frontend) per resource, kept converged.";
    controller_common::process::controller_main(controller::IDENTITY, about, controller::watch_and_reconcile).await
}
