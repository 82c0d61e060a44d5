//! visitors-archiver: `visitors-agent archive` under a Kubernetes Lease. The backup controller
//! runs it for a schedule with `spec.pointInTime`, as the one pod of a Job that never
//! completes; the Lease keeps a second archiver of the same archive waiting, carries the
//! archiver's status to the controller (an annotation renewed every few seconds), and brings
//! back what retention no longer needs.

mod lease;

use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;
use visitors_agent::binlog::archive::{self, ArchiveOptions, Observer};
use visitors_agent_contract::archive::{ArchiveStatus, ArchiverState};
use visitors_agent_contract::command::{ArchiveArgs, ArchiverCli};
use visitors_agent_contract::env;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = ArchiverCli::parse();
    let telemetry = visitors_agent::telemetry::init();
    let code = match archive_under_lease(cli).await {
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

/// How often options that cannot be used are read again.
const FIX_WAIT: Duration = Duration::from_secs(60);

/// The archive's options once they can be used, or `None` when stopped before. Options that
/// cannot (a key file that holds no age key: a wrong entry in the Secret) are reported through
/// the Lease as `Failed`, the schedule's `ArchiveFailed`, and read again every minute: the
/// kubelet updates a Secret's files in place once the entry is fixed. Exiting instead would
/// only have the Job start pod after pod, and the schedule say no more than `ArchiverStarting`.
async fn usable_options(
    args: &ArchiveArgs,
    renewer: &mut impl Observer,
    stop: &CancellationToken,
) -> visitors_agent::Result<Option<ArchiveOptions>> {
    loop {
        let error = match visitors_agent::cli::archive_options(args) {
            Ok(options) => return Ok(Some(options)),
            Err(error) => error,
        };
        tracing::error!("{}", error.one_line());
        let failed = ArchiveStatus {
            state: ArchiverState::Failed,
            reason: Some(error.kind().to_string()),
            message: Some(error.one_line()),
            location: args.to.clone(),
            updated_time: jiff::Timestamp::now().to_string(),
            ..ArchiveStatus::default()
        };
        renewer.report(&failed).await?;
        tokio::select! {
            () = stop.cancelled() => return Ok(None),
            () = tokio::time::sleep(FIX_WAIT) => {}
        }
    }
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

/// Takes the Lease, archives while renewing it, and releases it once archiving ends.
async fn archive_under_lease(cli: ArchiverCli) -> Result<(), Exit> {
    let namespace = std::env::var(env::POD_NAMESPACE).map_err(|_| format!("{} is not set", env::POD_NAMESPACE))?;
    let holder = std::env::var(env::POD_NAME).map_err(|_| format!("{} is not set", env::POD_NAME))?;
    let client = kube::Client::try_default().await.map_err(|e| format!("no Kubernetes client: {e}"))?;
    let stop = visitors_agent::shutdown::on_signal();
    let mut lease = lease::Holder::new(client, &namespace, &cli.lease, &holder);
    if !lease.acquire(&stop).await {
        return Err(Exit::Stopped);
    }
    // The renewer stops with the archiver, whichever ends first.
    let renewing = stop.child_token();
    let mut renewer = lease.renew_in_background(renewing.clone());
    let archived = match usable_options(&cli.archive, &mut renewer, &stop).await {
        Ok(Some(options)) => archive::archive(&options, &mut renewer, stop.clone()).await,
        Ok(None) => Ok(()),
        Err(error) => Err(error),
    };
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use visitors_agent_contract::archive::PruneBefore;
    use visitors_agent_contract::command::{ConnectionArgs, EncryptArgs};

    use super::*;

    #[derive(Clone, Default)]
    struct Reports(Arc<Mutex<Vec<ArchiveStatus>>>);

    impl Observer for Reports {
        async fn report(&mut self, status: &ArchiveStatus) -> visitors_agent::Result<()> {
            self.0.lock().unwrap().push(status.clone());
            Ok(())
        }

        fn prune_before(&self) -> Option<PruneBefore> {
            None
        }
    }

    /// A Secret entry that is no age key is reported through the Lease, without its content,
    /// and read again a minute later: once fixed, archiving starts.
    #[tokio::test(start_paused = true)]
    async fn an_unusable_key_file_is_reported_failed_and_read_again_until_it_is_fixed() {
        let dir = tempfile::tempdir().unwrap();
        let key_file = dir.path().join("k1");
        std::fs::write(&key_file, "AGE-SECRET-KEY-1NOTAKEYBUTSOMETHINGSECRET\n").unwrap();
        let args = ArchiveArgs {
            connection: ConnectionArgs { host: Some("ex-mysql".into()), ..ConnectionArgs::default() },
            encryption: EncryptArgs { encrypt_key_file: Some(key_file.clone()), encrypt_key_id: Some("k1".into()) },
            ..ArchiveArgs::to("file:///backup/shop/ex/_binlog/nightly")
        };
        let reports = Reports::default();
        let stop = CancellationToken::new();
        let waiting = tokio::spawn({
            let (args, mut reports, stop) = (args.clone(), reports.clone(), stop.clone());
            async move { usable_options(&args, &mut reports, &stop).await.map(|o| o.map(|o| o.seal.is_some())) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        let failed = reports.0.lock().unwrap().last().cloned().expect("a report");
        assert_eq!((failed.state, failed.reason.as_deref()), (ArchiverState::Failed, Some("encryptionKeyFile")));
        let message = failed.message.unwrap();
        assert!(message.contains("line 1") && !message.contains("NOTAKEY"), "{message}");
        assert_eq!(failed.location, "file:///backup/shop/ex/_binlog/nightly");

        let recipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
        std::fs::write(&key_file, format!("{recipient}\n")).unwrap();
        tokio::time::sleep(FIX_WAIT).await;
        assert_eq!(waiting.await.unwrap().unwrap(), Some(true), "archiving starts with the fixed key");
        assert_eq!(reports.0.lock().unwrap().len(), 1);

        std::fs::write(&key_file, "garbage\n").unwrap();
        let stopped = tokio::spawn({
            let (args, mut reports, stop) = (args.clone(), reports.clone(), stop.clone());
            async move { usable_options(&args, &mut reports, &stop).await.map(|o| o.is_some()) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.cancel();
        assert!(!stopped.await.unwrap().unwrap(), "a stop ends the wait");
    }
}
