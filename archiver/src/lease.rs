//! The archiver's Lease: held while archiving (a second archiver of the same archive waits
//! for it), renewed in the background with the archiver's status in an annotation, and read
//! back for the position retention still needs.
//!
//! An archiver writes only while it is sure to hold the Lease: it stops once another holder
//! took it, or once it could not renew it for [`FENCE_AFTER`], well before a waiting archiver
//! may take it over ([`LEASE_SECONDS`] after the last renewal).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use visitors_agent::binlog::archive::Observer;
use visitors_agent::error::{AgentError, Result};
use visitors_agent_contract::archive::{ArchiveStatus, PRUNE_ANNOTATION, PruneBefore, STATUS_ANNOTATION};

/// How long a holder that stopped renewing keeps the Lease.
const LEASE_SECONDS: i32 = 30;
/// How often a waiting archiver looks at the Lease again, and how often the holder renews it.
const WAIT: Duration = Duration::from_secs(5);
/// The holder stops writing when it could not renew the Lease for this long.
const FENCE_AFTER: Duration = Duration::from_secs(20);

pub struct Holder {
    api: Api<Lease>,
    name: String,
    holder: String,
}

impl Holder {
    pub fn new(client: kube::Client, namespace: &str, name: &str, holder: &str) -> Self {
        Holder { api: Api::namespaced(client, namespace), name: name.into(), holder: holder.into() }
    }

    /// Waits until this archiver holds the Lease; `false` when stopped first.
    pub async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        loop {
            match self.try_acquire().await {
                Ok(None) => return true,
                Ok(Some(why)) => tracing::info!("waiting for Lease {}: {why}", self.name),
                Err(error) => tracing::warn!("cannot take Lease {}: {error}", self.name),
            }
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(WAIT) => {}
            }
        }
    }

    /// Takes the Lease when free, expired or already ours; otherwise why not.
    async fn try_acquire(&mut self) -> std::result::Result<Option<String>, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(Some("it does not exist yet (the backup controller creates it)".into()));
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let now = jiff::Timestamp::now();
        if let Some(other) = spec.holder_identity.as_deref().filter(|h| !h.is_empty() && *h != self.holder) {
            let renewed = spec.renew_time.as_ref().map(|t| t.0).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
            if renewed.as_second() + duration > now.as_second() {
                return Ok(Some(format!("held by {other}, renewed {renewed}")));
            }
            tracing::warn!("Lease {} of {other} expired at {renewed}: taking it over", self.name);
        }
        if spec.holder_identity.as_deref() != Some(&self.holder) {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(MicroTime(now));
        }
        spec.holder_identity = Some(self.holder.clone());
        spec.lease_duration_seconds = Some(LEASE_SECONDS);
        spec.renew_time = Some(MicroTime(now));
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => {
                tracing::info!("holding Lease {}", self.name);
                Ok(None)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Some("another holder wrote it meanwhile".into())),
            Err(error) => Err(error),
        }
    }

    /// Renews the Lease, with `status` when there is one; returns what retention asks.
    async fn renew(&self, status: Option<&ArchiveStatus>) -> std::result::Result<Option<PruneBefore>, Renewal> {
        for _ in 0..3 {
            let mut lease = self
                .api
                .get(&self.name)
                .await
                .map_err(|e| Renewal::Failed(format!("reading Lease {}: {e}", self.name)))?;
            let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
            let prune = annotations.get(PRUNE_ANNOTATION).and_then(|text| serde_json::from_str(text).ok());
            if let Some(status) = status {
                annotations.insert(STATUS_ANNOTATION.into(), status.to_annotation());
            }
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(&self.holder) {
                return Err(Renewal::Lost(format!(
                    "Lease {} is held by {} now",
                    self.name,
                    spec.holder_identity.as_deref().unwrap_or("no one")
                )));
            }
            spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
            match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                Ok(_) => return Ok(prune),
                Err(kube::Error::Api(status)) if status.code == 409 => continue,
                Err(error) => return Err(Renewal::Failed(format!("renewing Lease {}: {error}", self.name))),
            }
        }
        Err(Renewal::Failed(format!("Lease {} kept changing while it was renewed", self.name)))
    }

    /// Renews the Lease every few seconds until stopped, or until this archiver may no longer
    /// write; what the archiver reports through the returned [`Renewer`] goes into the next
    /// renewal.
    pub fn renew_in_background(self, stop: CancellationToken) -> Renewer {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let task = tokio::spawn(keep_renewing(self, shared.clone(), stop));
        Renewer { shared, task }
    }

    /// Lets the Lease go, so that the next archiver need not wait for it to expire.
    pub async fn release(&self) {
        let Ok(mut lease) = self.api.get(&self.name).await else { return };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.holder) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(error) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!("could not release Lease {}: {error}", self.name);
        }
    }
}

/// Why a renewal did not happen.
enum Renewal {
    /// Another holder has the Lease: another archiver writes now.
    Lost(String),
    /// The API server could not be reached or refused; the Lease is still this one's until it
    /// expires.
    Failed(String),
}

/// What the archiver and the renewing task share.
#[derive(Default)]
struct Shared {
    /// The archiver's newest status, for the next renewal.
    status: Option<ArchiveStatus>,
    /// What retention asked at the last renewal.
    prune: Option<PruneBefore>,
    /// Why the archiver may no longer write, once it may not.
    fenced: Option<String>,
}

async fn keep_renewing(holder: Holder, shared: Arc<Mutex<Shared>>, stop: CancellationToken) -> Holder {
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return holder,
            () = tokio::time::sleep(WAIT) => {}
        }
        let status = shared.lock().unwrap().status.clone();
        let fenced = match holder.renew(status.as_ref()).await {
            Ok(prune) => {
                renewed = Instant::now();
                shared.lock().unwrap().prune = prune;
                None
            }
            Err(Renewal::Lost(why)) => Some(why),
            Err(Renewal::Failed(why)) if renewed.elapsed() >= FENCE_AFTER => Some(format!(
                "Lease {} not renewed for {}s ({why}): another archiver may take it over, so this one stops writing",
                holder.name,
                renewed.elapsed().as_secs()
            )),
            Err(Renewal::Failed(why)) => {
                tracing::warn!("{why}");
                None
            }
        };
        if let Some(why) = fenced {
            tracing::warn!("{why}");
            shared.lock().unwrap().fenced = Some(why);
            return holder;
        }
    }
}

/// The archiver's side of the renewing task.
pub struct Renewer {
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<Holder>,
}

impl Renewer {
    /// Stops renewing (after `stop` was cancelled, or once fenced) and gives the Lease back.
    pub async fn finish(self) -> Option<Holder> {
        self.task.await.ok()
    }
}

impl Observer for Renewer {
    async fn report(&mut self, status: &ArchiveStatus) -> Result<()> {
        let mut shared = self.shared.lock().unwrap();
        if let Some(why) = &shared.fenced {
            return Err(AgentError::NotHolder(why.clone()));
        }
        shared.status = Some(status.clone());
        Ok(())
    }

    fn prune_before(&self) -> Option<PruneBefore> {
        self.shared.lock().unwrap().prune.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    /// A client whose API server answers every request with `answer`'s status and JSON.
    fn client_answering(answer: impl Fn() -> (u16, serde_json::Value) + Send + 'static) -> kube::Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            while let Some((_, send)) = handle.next_request().await {
                let (status, body) = answer();
                let response = Response::builder().status(status).body(Body::from(body.to_string().into_bytes()));
                send.send_response(response.unwrap());
            }
        });
        kube::Client::new(service, "shop")
    }

    /// Reports every second until refused; how long that took.
    async fn reports_until_refused(renewer: &mut Renewer) -> (Duration, String) {
        let start = Instant::now();
        loop {
            match renewer.report(&ArchiveStatus::default()).await {
                Ok(()) => tokio::time::sleep(Duration::from_secs(1)).await,
                Err(AgentError::NotHolder(why)) => return (start.elapsed(), why),
                Err(other) => panic!("{other}"),
            }
            assert!(start.elapsed() < Duration::from_secs(120), "never refused");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_archiver_that_cannot_renew_stops_writing_before_its_lease_can_be_taken_over() {
        let failure = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
        let client = client_answering(move || (500, failure.clone()));
        let mut renewer = Holder::new(client, "shop", "nightly-pitr", "pod-a").renew_in_background(Default::default());
        let (after, why) = reports_until_refused(&mut renewer).await;
        assert!(after >= FENCE_AFTER, "{after:?}");
        assert!(after < Duration::from_secs(LEASE_SECONDS as u64) - WAIT, "{after:?}: too late");
        assert!(why.contains("not renewed"), "{why}");
        assert!(renewer.finish().await.is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn an_archiver_whose_lease_another_holds_stops_writing_at_the_next_renewal() {
        let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "nightly-pitr", "namespace": "shop", "resourceVersion": "7",
                         "annotations": {PRUNE_ANNOTATION: r#"{"run":"nightly-1","time":"2026-11-25T03:00:00Z","binlogFile":"binlog.000002","binlogPosition":330}"#}},
            "spec": {"holderIdentity": "pod-b", "leaseDurationSeconds": 30}});
        let client = client_answering(move || (200, lease.clone()));
        let mut renewer = Holder::new(client, "shop", "nightly-pitr", "pod-a").renew_in_background(Default::default());
        let (after, why) = reports_until_refused(&mut renewer).await;
        assert!(after <= WAIT + Duration::from_secs(1), "{after:?}");
        assert!(why.contains("held by pod-b"), "{why}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_brings_back_what_retention_asks() {
        let lease = serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "nightly-pitr", "namespace": "shop", "resourceVersion": "7",
                         "annotations": {PRUNE_ANNOTATION: r#"{"run":"nightly-1","time":"2026-11-25T03:00:00Z","binlogFile":"binlog.000002","binlogPosition":330}"#}},
            "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 30}});
        let client = client_answering(move || (200, lease.clone()));
        let stop = CancellationToken::new();
        let mut renewer = Holder::new(client, "shop", "nightly-pitr", "pod-a").renew_in_background(stop.clone());
        renewer.report(&ArchiveStatus::default()).await.unwrap();
        tokio::time::sleep(WAIT + Duration::from_secs(1)).await;
        let asked = renewer.prune_before().expect("the controller's request");
        assert_eq!((asked.run.as_str(), asked.binlog_position), ("nightly-1", 330));
        renewer.report(&ArchiveStatus::default()).await.expect("still the holder");
        stop.cancel();
        assert!(renewer.finish().await.is_some());
    }
}
