//! What the controller's caches keep of the workloads it owns: not the objects, but what a
//! reconcile reads of them. A StatefulSet or Deployment as k8s-openapi types it is about 2.5 KiB
//! before any field is filled (every optional field of a pod template inline), and a trimmed one
//! still held 7 to 10 KiB; with ten thousand apps the two caches were most of the controller's
//! memory. A [`Cached`] workload keeps its identity and owners, the fingerprint of what the
//! controller sets ([`Fingerprint`]), what its status reports ([`Workload`]) and, for the MySQL
//! StatefulSet, what it keeps from its creation ([`MysqlKept`]). Everything else a reconcile
//! needs it builds from the app; a change of what it does not keep is still seen, through the
//! fingerprint.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;

use super::seen::Fingerprint;
use super::workload::Workload;
use crate::build::mysql::{Kept, data_claim_template};
use crate::build::tls::recorded_mode;

/// A workload of kind `K` as its cache keeps it.
#[derive(Debug, Clone)]
pub struct Cached<K> {
    /// Name, namespace, UID, generation, owners and deletion; not labels (in the fingerprint),
    /// annotations (a map of one entry costs more than half a KiB) nor the resource version
    /// (no reconcile reads it, and the cache's key would keep a second copy).
    metadata: ObjectMeta,
    /// [`Fingerprint::fingerprint`] of the whole object.
    fingerprint: u64,
    pub workload: Workload,
    /// The MySQL StatefulSet's; `None` for a Deployment (boxed: a Deployment pays 8 bytes).
    mysql: Option<Box<MysqlKept>>,
    kind: PhantomData<fn() -> K>,
}

pub type CachedStatefulSet = Cached<StatefulSet>;
pub type CachedDeployment = Cached<Deployment>;

/// What a reconcile reads of the MySQL StatefulSet besides its status.
#[derive(Debug, Clone, Default)]
pub struct MysqlKept {
    /// The data claim template, without status, as JSON (a third of its typed size): immutable,
    /// so every apply sends it verbatim. See [`Cached::claim`].
    claim: Option<Box<str>>,
    /// The pod management policy: immutable too.
    pub policy: Option<String>,
    /// The pod template revision the pods should run, once the StatefulSet controller has seen
    /// the latest spec.
    pub update_revision: Option<String>,
    /// The TLS mode it was built with ([`recorded_mode`]).
    pub tls_mode: Option<String>,
}

/// The metadata a cached workload keeps.
fn kept_metadata(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        generation: meta.generation,
        owner_references: meta.owner_references.clone(),
        deletion_timestamp: meta.deletion_timestamp.clone(),
        ..ObjectMeta::default()
    }
}

impl From<&StatefulSet> for CachedStatefulSet {
    fn from(sts: &StatefulSet) -> Self {
        let status = sts.status.as_ref();
        let observed = match (status.and_then(|s| s.observed_generation), sts.metadata.generation) {
            (Some(observed), Some(generation)) => observed >= generation,
            _ => false,
        };
        let mysql = MysqlKept {
            claim: data_claim_template(sts).map(|claim| {
                let claim = PersistentVolumeClaim { status: None, ..claim.clone() };
                serde_json::to_string(&claim).unwrap_or_default().into_boxed_str()
            }),
            policy: sts.spec.as_ref().and_then(|spec| spec.pod_management_policy.clone()),
            update_revision: status.and_then(|s| s.update_revision.clone()).filter(|_| observed),
            tls_mode: recorded_mode(&sts.metadata).map(str::to_string),
        };
        Cached {
            metadata: kept_metadata(&sts.metadata),
            fingerprint: sts.fingerprint(),
            workload: Workload::from_statefulset(sts),
            mysql: Some(Box::new(mysql)),
            kind: PhantomData,
        }
    }
}

impl From<&Deployment> for CachedDeployment {
    fn from(deployment: &Deployment) -> Self {
        Cached {
            metadata: kept_metadata(&deployment.metadata),
            fingerprint: deployment.fingerprint(),
            workload: Workload::from_deployment(deployment),
            mysql: None,
            kind: PhantomData,
        }
    }
}

impl<K> Cached<K> {
    /// The MySQL StatefulSet's kept parts (empty for a Deployment).
    pub fn mysql(&self) -> &MysqlKept {
        static NONE: MysqlKept = MysqlKept { claim: None, policy: None, update_revision: None, tls_mode: None };
        self.mysql.as_deref().unwrap_or(&NONE)
    }

    /// The StatefulSet's data claim template.
    pub fn claim(&self) -> Option<PersistentVolumeClaim> {
        serde_json::from_str(self.mysql().claim.as_deref()?).ok()
    }

    /// What the StatefulSet keeps from its creation, for the desired one (see [`Kept::of`]),
    /// with its `claim` (see [`Self::claim`]).
    pub fn kept<'a>(&'a self, claim: Option<&'a PersistentVolumeClaim>) -> Kept<'a> {
        // A StatefulSet made before the policy was set has the API server's default.
        Kept { claim, policy: Some(self.mysql().policy.as_deref().unwrap_or("OrderedReady")) }
    }
}

/// A watch event of a workload, as its cache keeps it.
pub fn cached_event<K>(event: watcher::Event<K>) -> watcher::Event<Cached<K>>
where
    for<'a> Cached<K>: From<&'a K>,
{
    let cached = |object: K| Cached::from(&object);
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(cached(object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(cached(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(cached(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Cached<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The same fingerprints as the whole object's ([`Fingerprint`] for StatefulSet and
/// Deployment): a watch event and an apply response are compared across the two forms.
impl<K: Resource<DynamicType = ()>> Fingerprint for Cached<K> {
    fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
    fn observed(&self) -> u64 {
        crate::wake::seen::hash_of(&self.workload)
    }
    fn readiness(&self) -> u64 {
        crate::wake::seen::hash_of(&self.workload.readiness())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, fixtures::book_app};
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    fn created_statefulset() -> StatefulSet {
        let mut sts = build::mysql::statefulset(&book_app(), "creds", build::mysql::Kept::default(), None);
        sts.metadata.uid = Some("u1".into());
        sts.metadata.generation = Some(2);
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(2),
            update_revision: Some("ex-mysql-7d".into()),
            ready_replicas: Some(1),
            replicas: 1,
            ..StatefulSetStatus::default()
        });
        sts
    }

    #[test]
    fn a_cached_statefulset_has_the_fingerprints_and_kept_parts_of_the_whole() {
        let sts = created_statefulset();
        let cached = CachedStatefulSet::from(&sts);
        assert_eq!(
            (cached.fingerprint(), cached.observed(), cached.readiness()),
            (sts.fingerprint(), sts.observed(), sts.readiness())
        );
        assert_eq!(cached.workload, Workload::from_statefulset(&sts));
        let whole = build::mysql::Kept::of(Some(&sts));
        let claim = cached.claim();
        let kept = cached.kept(claim.as_ref());
        assert_eq!((kept.claim, kept.policy), (whole.claim, whole.policy));
        assert_eq!(cached.mysql().update_revision.as_deref(), Some("ex-mysql-7d"));
        assert_eq!(cached.meta().labels, None, "labels live in the fingerprint");
    }

    #[test]
    fn a_revision_the_controller_has_not_seen_the_spec_of_is_not_kept() {
        let mut sts = created_statefulset();
        sts.metadata.generation = Some(3);
        assert_eq!(CachedStatefulSet::from(&sts).mysql().update_revision, None);
    }

    #[test]
    fn a_label_edit_moves_the_cached_fingerprint() {
        let sts = created_statefulset();
        let mut edited = sts.clone();
        edited.metadata.labels.get_or_insert_default().insert("edited".into(), "yes".into());
        assert_ne!(CachedStatefulSet::from(&sts).fingerprint(), CachedStatefulSet::from(&edited).fingerprint());
    }

    #[test]
    fn the_tls_mode_annotation_is_kept_apart_and_no_annotation_in_the_metadata() {
        let mut sts = created_statefulset();
        let annotations = sts.metadata.annotations.get_or_insert_default();
        annotations.insert(crate::build::tls::MODE_ANNOTATION.into(), "Required".into());
        annotations.insert("deployment.kubernetes.io/revision".into(), "3".into());
        let cached = CachedStatefulSet::from(&sts);
        assert_eq!(cached.mysql().tls_mode.as_deref(), Some("Required"));
        assert_eq!(cached.meta().annotations, None);
    }
}
