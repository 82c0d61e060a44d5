//! The per-database lock: one backup or restore at a time per VisitorsApp. It is a
//! `coordination.k8s.io` Lease named `<app>-mysql-operations` whose `holderIdentity` is the run
//! that holds it, `<Kind>/<name>/<uid>`. Taking it is a create, or a replace on the Lease's
//! resourceVersion, so two controllers racing for it cannot both win. A holder that no longer
//! exists (another UID or deleted) or has finished is stale, and its Lease is taken over; the
//! Lease is also owned by its holder, so the garbage collector removes it with a deleted run.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Deserialize;
use visitors_api::labels::{Component, labels, names};
use visitors_api::operation::{OperationKind, OperationStatus};
use visitors_api::{MySQLBackup, MySQLRestore};

/// Reason of a run's `Pending` condition while another run holds its database's lock.
pub const REASON_WAITING_FOR_LOCK: &str = visitors_api::conditions::reason::WAITING_FOR_DATABASE_LOCK;

/// The kinds of run that take the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderKind {
    Backup,
    Restore,
    /// A kind this code does not know (written by a newer release): assumed active.
    Other(String),
}

impl HolderKind {
    /// The kind of `K`.
    pub fn of<K: Resource<DynamicType = ()>>() -> Self {
        Self::parse(&K::kind(&()))
    }

    fn parse(kind: &str) -> Self {
        if kind == MySQLBackup::kind(&()) {
            HolderKind::Backup
        } else if kind == MySQLRestore::kind(&()) {
            HolderKind::Restore
        } else {
            HolderKind::Other(kind.to_string())
        }
    }

    fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match self {
            HolderKind::Backup => MySQLBackup::kind(&()),
            HolderKind::Restore => MySQLRestore::kind(&()),
            HolderKind::Other(kind) => kind.as_str().into(),
        }
    }
}

/// Who holds (or wants) the lock: a run, by kind, name and UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub kind: HolderKind,
    pub name: String,
    pub uid: String,
}

impl Holder {
    /// The holder identity written into the Lease.
    pub fn identity(&self) -> String {
        format!("{}/{}/{}", self.kind.as_str(), self.name, self.uid)
    }

    /// Reads an identity written by [`Holder::identity`].
    pub fn parse(identity: &str) -> Option<Self> {
        let mut parts = identity.splitn(3, '/');
        let (kind, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Self { kind: HolderKind::parse(kind), name: name.into(), uid: uid.into() })
    }

    /// `MySQLBackup nightly`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind.as_str(), self.name)
    }
}

/// The outcome of trying to take the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This run holds the lock.
    Held,
    /// Another active run holds it (its description, for example `MySQLRestore r1`).
    Busy(String),
}

/// The lock of the database of one VisitorsApp.
pub struct DatabaseLock {
    client: Client,
    namespace: String,
    app: String,
}

impl DatabaseLock {
    pub fn new(client: Client, namespace: &str, app: &str) -> Self {
        Self { client, namespace: namespace.to_string(), app: app.to_string() }
    }

    /// The Lease's name.
    pub fn name(&self) -> String {
        names::database_lease(&self.app)
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Takes the lock for `me` (a no-op when it already holds it). `owner` is `me` as an owner
    /// reference; `field_manager` names the controller. A lost race is reported as `Busy`, and
    /// the caller waits and tries again.
    pub async fn acquire(
        &self,
        me: &Holder,
        owner: OwnerReference,
        field_manager: &str,
    ) -> Result<Acquired, kube::Error> {
        let leases = self.leases();
        let name = self.name();
        let params = PostParams { field_manager: Some(field_manager.to_string()), ..PostParams::default() };
        let Some(mut lease) = leases.get_opt(&name).await? else {
            return match leases.create(&params, &self.lease(me, owner)).await {
                Ok(_) => Ok(Acquired::Held),
                Err(kube::Error::Api(status)) if status.code == 409 => self.race_lost(&leases, me).await,
                Err(error) => Err(error),
            };
        };
        let current = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
        if current == me.identity() {
            return Ok(Acquired::Held);
        }
        if let Some(holder) = Holder::parse(&current)
            && self.is_active(&holder).await?
        {
            return Ok(Acquired::Busy(holder.describe()));
        }
        if !current.is_empty() {
            tracing::info!(lease = %name, stale = %current, "taking over the lock of a finished or deleted run");
        }
        let fresh = self.lease(me, owner);
        lease.spec = fresh.spec;
        lease.metadata.owner_references = fresh.metadata.owner_references;
        lease.metadata.managed_fields = None;
        match leases.replace(&name, &params, &lease).await {
            Ok(_) => Ok(Acquired::Held),
            Err(kube::Error::Api(status)) if status.code == 409 => self.race_lost(&leases, me).await,
            Err(error) => Err(error),
        }
    }

    /// After a create or replace lost to another writer: reads who won, so the waiting run's
    /// condition and Event name the run it waits for. The winner has just taken the lock, so
    /// it is not asked whether it is still active.
    async fn race_lost(&self, leases: &Api<Lease>, me: &Holder) -> Result<Acquired, kube::Error> {
        let lease = leases.get_opt(&self.name()).await?;
        let winner = lease.and_then(|lease| lease.spec?.holder_identity).and_then(|identity| Holder::parse(&identity));
        Ok(match winner {
            Some(winner) if winner == *me => Acquired::Held,
            Some(winner) => Acquired::Busy(winner.describe()),
            None => Acquired::Busy("another run".into()),
        })
    }

    /// Gives the lock up if `me` holds it; deleting only the version it read, so a lock taken
    /// over meanwhile is left alone.
    pub async fn release(&self, me: &Holder) -> Result<(), kube::Error> {
        let leases = self.leases();
        let name = self.name();
        let Some(lease) = leases.get_opt(&name).await? else { return Ok(()) };
        if lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) != Some(me.identity().as_str()) {
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions { resource_version: lease.resource_version(), uid: lease.uid() }),
            ..DeleteParams::default()
        };
        match leases.delete(&name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Whether `holder` still exists with the same UID and has not finished. A kind this code
    /// does not know is assumed active: better wait than run beside it.
    async fn is_active(&self, holder: &Holder) -> Result<bool, kube::Error> {
        match holder.kind {
            HolderKind::Backup => self.still_running::<MySQLBackup>(holder).await,
            HolderKind::Restore => self.still_running::<MySQLRestore>(holder).await,
            HolderKind::Other(_) => Ok(true),
        }
    }

    /// The holder is judged by its status alone (its typed phase), whatever its spec says.
    async fn still_running<K>(&self, holder: &Holder) -> Result<bool, kube::Error>
    where
        K: OperationKind + Resource<DynamicType = ()>,
    {
        let resource = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        let Some(object) = api.get_opt(&holder.name).await? else { return Ok(false) };
        if object.uid().as_deref() != Some(holder.uid.as_str()) {
            return Ok(false);
        }
        let status = object.data.get("status").and_then(|status| K::Status::deserialize(status).ok());
        Ok(!status.is_some_and(|status| status.has_ended()))
    }

    fn lease(&self, me: &Holder, owner: OwnerReference) -> Lease {
        let mut owner = owner;
        owner.controller = None;
        owner.block_owner_deletion = None;
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels(&self.app, Component::Mysql)),
                owner_references: Some(vec![owner]),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(me.identity()),
                acquire_time: Some(MicroTime(jiff::Timestamp::now())),
                ..LeaseSpec::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{mock_client, status_error};
    use http::{Method, StatusCode};
    use serde_json::json;

    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases/ex-mysql-operations";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/shop/leases";

    fn me() -> Holder {
        Holder { kind: HolderKind::Backup, name: "b2".into(), uid: "u-2".into() }
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "MySQLBackup".into(),
            name: "b2".into(),
            uid: "u-2".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    fn lease_held_by(identity: &str) -> serde_json::Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "ex-mysql-operations", "namespace": "shop", "resourceVersion": "7", "uid": "l-1"},
            "spec": {"holderIdentity": identity},
        })
    }

    fn backup(uid: &str, phase: &str) -> serde_json::Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "MySQLBackup",
            "metadata": {"name": "b1", "namespace": "shop", "uid": uid},
            "spec": {"source": {"visitorsApp": "ex"}, "storage": {"persistentVolumeClaim": {"claimName": "c"}}},
            "status": {"phase": phase},
        })
    }

    #[tokio::test]
    async fn a_free_lock_is_created_for_the_run() {
        let (client, mut server) = mock_client();
        let lock = DatabaseLock::new(client, "shop", "ex");
        let task = tokio::spawn(async move { lock.acquire(&me(), owner(), "backup-controller").await });
        server.expect(Method::GET, LEASE, StatusCode::NOT_FOUND, status_error(404, "NotFound", "")).await;
        let created = server.expect_echo(Method::POST, LEASES).await;
        assert_eq!(created.body["spec"]["holderIdentity"], "MySQLBackup/b2/u-2");
        assert_eq!(created.body["metadata"]["ownerReferences"][0]["uid"], "u-2");
        assert!(created.body["metadata"]["ownerReferences"][0].get("controller").is_none());
        assert_eq!(task.await.unwrap().unwrap(), Acquired::Held);
    }

    #[tokio::test]
    async fn an_active_holder_keeps_it() {
        let (client, mut server) = mock_client();
        let lock = DatabaseLock::new(client, "shop", "ex");
        let task = tokio::spawn(async move { lock.acquire(&me(), owner(), "backup-controller").await });
        server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLBackup/b1/u-1")).await;
        server
            .expect(
                Method::GET,
                "/apis/example.com/v1/namespaces/shop/mysqlbackups/b1",
                StatusCode::OK,
                backup("u-1", "Running"),
            )
            .await;
        assert_eq!(task.await.unwrap().unwrap(), Acquired::Busy("MySQLBackup b1".into()));
    }

    #[tokio::test]
    async fn a_finished_or_replaced_holder_is_taken_over_on_its_version() {
        for stale in [backup("u-1", "Succeeded"), backup("u-other", "Running")] {
            let (client, mut server) = mock_client();
            let lock = DatabaseLock::new(client, "shop", "ex");
            let task = tokio::spawn(async move { lock.acquire(&me(), owner(), "backup-controller").await });
            server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLBackup/b1/u-1")).await;
            server
                .expect(Method::GET, "/apis/example.com/v1/namespaces/shop/mysqlbackups/b1", StatusCode::OK, stale)
                .await;
            let replaced = server.expect_echo(Method::PUT, LEASE).await;
            assert_eq!(replaced.body["metadata"]["resourceVersion"], "7", "replaced only on the version read");
            assert_eq!(replaced.body["spec"]["holderIdentity"], "MySQLBackup/b2/u-2");
            assert_eq!(task.await.unwrap().unwrap(), Acquired::Held);
        }
    }

    #[tokio::test]
    async fn a_lost_race_is_busy_not_an_error() {
        let (client, mut server) = mock_client();
        let lock = DatabaseLock::new(client, "shop", "ex");
        let task = tokio::spawn(async move { lock.acquire(&me(), owner(), "backup-controller").await });
        server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLRestore/r1/u-9")).await;
        server
            .expect(
                Method::GET,
                "/apis/example.com/v1/namespaces/shop/mysqlrestores/r1",
                StatusCode::NOT_FOUND,
                status_error(404, "NotFound", ""),
            )
            .await;
        server.expect(Method::PUT, LEASE, StatusCode::CONFLICT, status_error(409, "Conflict", "")).await;
        server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLBackup/b3/u-3")).await;
        assert_eq!(task.await.unwrap().unwrap(), Acquired::Busy("MySQLBackup b3".into()), "names the winner");
    }

    #[tokio::test]
    async fn two_runs_creating_the_lock_at_once_the_loser_names_the_winner_if_still_there() {
        let cases = [
            ((StatusCode::OK, lease_held_by("MySQLBackup/b1/u-1")), "MySQLBackup b1"),
            ((StatusCode::NOT_FOUND, status_error(404, "NotFound", "")), "another run"),
        ];
        for ((status, reread), expected) in cases {
            let (client, mut server) = mock_client();
            let lock = DatabaseLock::new(client, "shop", "ex");
            let task = tokio::spawn(async move { lock.acquire(&me(), owner(), "backup-controller").await });
            server.expect(Method::GET, LEASE, StatusCode::NOT_FOUND, status_error(404, "NotFound", "")).await;
            server.expect(Method::POST, LEASES, StatusCode::CONFLICT, status_error(409, "AlreadyExists", "")).await;
            server.expect(Method::GET, LEASE, status, reread).await;
            assert_eq!(task.await.unwrap().unwrap(), Acquired::Busy(expected.into()));
        }
    }

    #[tokio::test]
    async fn release_deletes_only_its_own_version() {
        let (client, mut server) = mock_client();
        let lock = DatabaseLock::new(client, "shop", "ex");
        let task = tokio::spawn(async move { lock.release(&me()).await });
        server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLBackup/b2/u-2")).await;
        let deleted = server.expect(Method::DELETE, LEASE, StatusCode::OK, lease_held_by("")).await;
        assert_eq!(deleted.body["preconditions"]["resourceVersion"], "7");
        task.await.unwrap().unwrap();

        let (client, mut server) = mock_client();
        let lock = DatabaseLock::new(client, "shop", "ex");
        let task = tokio::spawn(async move { lock.release(&me()).await });
        server.expect(Method::GET, LEASE, StatusCode::OK, lease_held_by("MySQLBackup/b1/u-1")).await;
        task.await.unwrap().unwrap();
        server.expect_no_request(std::time::Duration::from_millis(50)).await;
    }
}
