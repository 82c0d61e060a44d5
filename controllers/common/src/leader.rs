//! Leader election on a coordination.k8s.io Lease (through kube-lease-manager), so each
//! controller can run several replicas with one reconciling at a time. A replica that loses
//! the lease stops (its reconciles could otherwise race the new leader's); Kubernetes restarts
//! it and it stands by again.
//!
//! kube-lease-manager reports a lease taken by another replica, but not renewals that fail or
//! hang (it logs them and retries), so a watchdog also reads the Lease itself, each request on
//! a short timeout, and stops the replica as soon as it cannot show that it still holds it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
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
    watchdog: Watchdog,
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
    let client_for_watchdog = client.clone();
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
    let watchdog = Watchdog {
        api: Api::namespaced(client_for_watchdog, namespace),
        lease: lease.to_string(),
        identity: identity.to_string(),
        every: Duration::from_secs(LEASE_GRACE_SECONDS),
        confirm_within: Duration::from_secs(LEASE_DURATION_SECONDS - LEASE_GRACE_SECONDS),
    };
    Ok(Some(Leadership { state, task, watchdog }))
}

impl Leadership {
    /// Cancels `shutdown` as soon as the lease is lost, by the lease manager's account or the
    /// watchdog's.
    pub fn stop_on_loss(&self, shutdown: CancellationToken) {
        tokio::spawn(self.watchdog.clone().watch_until(shutdown.clone()));
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

/// Reads the Lease every `every` and stops the replica when another holder is recorded, the
/// Lease is gone or expired, or no read has confirmed this replica's hold for `confirm_within`.
#[derive(Clone)]
pub struct Watchdog {
    pub api: Api<Lease>,
    pub lease: String,
    pub identity: String,
    pub every: Duration,
    pub confirm_within: Duration,
}

impl Watchdog {
    pub async fn watch_until(self, shutdown: CancellationToken) {
        let mut last_confirmed = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = shutdown.cancelled() => return,
            }
            let read = tokio::time::timeout(self.every, self.api.get_opt(&self.lease)).await;
            let verdict = match read {
                Ok(Ok(lease)) => self.judge(lease.as_ref(), jiff::Timestamp::now()),
                Ok(Err(error)) => Err(format!("cannot read the Lease: {error}")),
                Err(_) => Err("reading the Lease timed out".to_string()),
            };
            match verdict {
                Ok(()) => last_confirmed = tokio::time::Instant::now(),
                Err(reason) if reason.starts_with("lost:") => return self.stop(&shutdown, &reason),
                Err(reason) if last_confirmed.elapsed() >= self.confirm_within => {
                    return self
                        .stop(&shutdown, &format!("lost: no confirmed hold for {:?} ({reason})", self.confirm_within));
                }
                Err(reason) => tracing::warn!(%reason, "could not confirm leadership; retrying"),
            }
        }
    }

    /// `Ok` while the Lease shows this replica as its unexpired holder; `Err("lost: ...")` when
    /// it shows otherwise.
    pub fn judge(&self, lease: Option<&Lease>, now: jiff::Timestamp) -> Result<(), String> {
        let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
            return Err("lost: the Lease is gone".to_string());
        };
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        if holder != self.identity {
            return Err(format!("lost: the Lease is held by {holder:?}"));
        }
        let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
        let renewed = spec.renew_time.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
        if renewed + duration < now.as_second() {
            return Err("lost: the Lease expired; renewals are not reaching the API server".to_string());
        }
        Ok(())
    }

    fn stop(&self, shutdown: &CancellationToken, reason: &str) {
        tracing::error!(lease = %self.lease, %reason, "lost leadership; stopping so that only the new leader reconciles");
        shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{mock_client, status_error};
    use http::{Method, StatusCode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/visitors-controller-leader";

    fn watchdog(client: Client) -> Watchdog {
        Watchdog {
            api: Api::namespaced(client, "ops"),
            lease: "visitors-controller-leader".into(),
            identity: "pod-a".into(),
            every: Duration::from_millis(20),
            confirm_within: Duration::from_millis(100),
        }
    }

    fn lease(holder: &str, renewed: jiff::Timestamp) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta { name: Some("visitors-controller-leader".into()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
        }
    }

    #[tokio::test]
    async fn judges_holder_and_expiry() {
        let (client, _server) = mock_client();
        let dog = watchdog(client);
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(dog.judge(Some(&lease("pod-a", now)), now), Ok(()));
        assert!(dog.judge(Some(&lease("pod-b", now)), now).unwrap_err().contains("held by \"pod-b\""));
        let stale = now.checked_sub(jiff::SignedDuration::from_secs(16)).unwrap();
        assert!(dog.judge(Some(&lease("pod-a", stale)), now).unwrap_err().contains("expired"));
        assert!(dog.judge(None, now).unwrap_err().starts_with("lost:"));
    }

    #[tokio::test]
    async fn stops_the_replica_when_another_holds_the_lease() {
        let (client, mut server) = mock_client();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(watchdog(client).watch_until(shutdown.clone()));
        let now = jiff::Timestamp::now();
        server.expect(Method::GET, PATH, StatusCode::OK, serde_json::to_value(lease("pod-a", now)).unwrap()).await;
        assert!(!shutdown.is_cancelled(), "still the holder");
        server.expect(Method::GET, PATH, StatusCode::OK, serde_json::to_value(lease("pod-b", now)).unwrap()).await;
        task.await.unwrap();
        assert!(shutdown.is_cancelled());
    }

    #[tokio::test]
    async fn stops_the_replica_when_its_hold_cannot_be_confirmed() {
        let (client, mut server) = mock_client();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(watchdog(client).watch_until(shutdown.clone()));
        let answering = tokio::spawn(async move {
            loop {
                let answer = status_error(503, "ServiceUnavailable", "etcd is down");
                server.expect(Method::GET, PATH, StatusCode::SERVICE_UNAVAILABLE, answer).await;
            }
        });
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("the watchdog stops").unwrap();
        answering.abort();
        assert!(shutdown.is_cancelled(), "unconfirmed for longer than confirm_within");
    }
}
