//! Leader election on a coordination.k8s.io Lease (through kube-lease-manager), so each
//! controller can run several replicas with one reconciling at a time. A replica that loses
//! the lease stops at once (its reconciles could otherwise race the new leader's); Kubernetes
//! restarts it and it stands by again.

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::startup::StartupError;

/// Lease validity after the last renewal, and how early the holder renews it.
const LEASE_DURATION_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;

/// Held leadership. Dropping it without [`Leadership::release`] lets the lease expire.
pub struct Leadership {
    state: watch::Receiver<bool>,
    task: JoinHandle<Result<LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

/// Blocks until this replica holds Lease `lease` in `namespace`, or `shutdown` is cancelled
/// (then returns `None`).
pub async fn acquire(
    client: Client,
    lease: &str,
    namespace: &str,
    identity: &str,
    shutdown: &CancellationToken,
) -> Result<Option<Leadership>, StartupError> {
    let manager = LeaseManagerBuilder::new(client, lease)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_GRACE_SECONDS)
        .build()
        .await
        .map_err(|e| StartupError::LeaderElection(e.to_string()))?;
    let (mut state, task) = manager.watch().await;
    tracing::info!(lease, namespace, identity, "waiting for leadership");
    while !*state.borrow_and_update() {
        tokio::select! {
            changed = state.changed() => {
                if changed.is_err() {
                    return Err(StartupError::LeaderElection("the lease manager stopped".into()));
                }
            }
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
    tracing::info!(lease, identity, "acquired leadership");
    Ok(Some(Leadership { state, task }))
}

impl Leadership {
    /// Cancels `shutdown` as soon as the lease is lost.
    pub fn stop_on_loss(&self, shutdown: CancellationToken) {
        let mut state = self.state.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = state.changed() => {
                        if changed.is_err() || !*state.borrow_and_update() {
                            tracing::error!("lost leadership; stopping so that only the new leader reconciles");
                            shutdown.cancel();
                            return;
                        }
                    }
                    _ = shutdown.cancelled() => return,
                }
            }
        });
    }

    /// Gives the lease up so another replica takes over without waiting for it to expire.
    pub async fn release(self) {
        drop(self.state);
        match self.task.await {
            Ok(Ok(manager)) => {
                if let Err(error) = manager.release().await {
                    tracing::warn!(%error, "could not release the lease; it will expire");
                }
            }
            Ok(Err(error)) => tracing::warn!(%error, "the lease manager failed; the lease will expire"),
            Err(error) => tracing::warn!(%error, "the lease manager task failed; the lease will expire"),
        }
    }
}
