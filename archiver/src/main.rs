//! visitors-archiver: `visitors-agent archive` under a Kubernetes Lease. The backup controller
//! runs it for a schedule with `spec.pointInTime`, as the one pod of a Job that never
//! completes; the Lease keeps a second archiver of the same archive waiting, carries the
//! archiver's status to the controller (an annotation renewed every few seconds), and brings
//! back what retention no longer needs.

mod lease;

use clap::Parser;
use visitors_agent::binlog::archive;
use visitors_agent_contract::command::ArchiverCli;
use visitors_agent_contract::env;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = ArchiverCli::parse();
    let telemetry = visitors_agent::telemetry::init();
    let code = match run(cli).await {
        Ok(()) => 0,
        // Stopped cleanly on SIGTERM, but not done: its Job must not count the pod complete.
        Err(Exit::Stopped) => STOPPED,
        Err(Exit::Failed(error)) => {
            tracing::error!("{error}");
            1
        }
    };
    telemetry.shutdown();
    std::process::exit(code);
}

/// The exit code after a clean stop on SIGTERM: 128 + 15, as a shell reports a process
/// SIGTERM ended. Archiving never completes, so its Job replaces the pod.
const STOPPED: i32 = 143;

enum Exit {
    Stopped,
    Failed(String),
}

impl From<String> for Exit {
    fn from(error: String) -> Self {
        Exit::Failed(error)
    }
}

async fn run(cli: ArchiverCli) -> Result<(), Exit> {
    let namespace = std::env::var(env::POD_NAMESPACE).map_err(|_| format!("{} is not set", env::POD_NAMESPACE))?;
    let holder = std::env::var(env::POD_NAME).map_err(|_| format!("{} is not set", env::POD_NAME))?;
    let options = visitors_agent::cli::archive_options(&cli.archive).map_err(|e| e.one_line())?;
    let client = kube::Client::try_default().await.map_err(|e| format!("no Kubernetes client: {e}"))?;
    let stop = visitors_agent::shutdown::on_signal();
    let mut lease = lease::Holder::new(client, &namespace, &cli.lease, &holder);
    if !lease.acquire(&stop).await {
        return Err(Exit::Stopped);
    }
    // The renewer stops with the archiver, whichever ends first.
    let renewing = stop.child_token();
    let mut renewer = lease.renew_in_background(renewing.clone());
    let archived = archive::run(&options, &mut renewer, stop.clone()).await;
    renewing.cancel();
    if let Some(lease) = renewer.finish().await {
        lease.release().await;
    }
    archived.map_err(|e| e.one_line())?;
    if stop.is_cancelled() {
        tracing::info!("stopped: what was whole is stored and the Lease released");
        return Err(Exit::Stopped);
    }
    Ok(())
}
