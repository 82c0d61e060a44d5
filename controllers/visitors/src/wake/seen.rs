//! What the reconciles have already seen of each object, so that a watch wakes an app only for
//! news. Without it, every write of a reconcile comes back through the watches and wakes the app
//! again: the finalizer it adds, each child it creates (five of them for a new app), each child
//! it updates. At scale those repeat reconciles crowd out the first reconciles of new apps (kube's
//! scheduler hands out due reconciles in no particular order once every worker is busy).
//!
//! A reconcile records the state of each object it read or wrote (the apply responses); a watch
//! event whose object is in a recorded state is dropped, any other state wakes the app and is
//! recorded. What counts as "state" is what a reconcile acts on, per kind: see [`Fingerprint`].
//!
//! The same record spares a reconcile the applies that would change nothing: a child that is
//! as the controller's last apply left it (no one changed what the controller sets since, as
//! far as the watch reports) and whose desired form is unchanged is not applied again
//! ([`Seen::unchanged_since_applied`]). Server-side apply is the API server's most expensive
//! request; without this, the reconcile a workload's status change causes re-applies every
//! child. Each child is still applied again once a resync period has passed, the safety net for
//! a change no watch reported.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Service;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use visitors_api::VisitorsApp;
use visitors_api::visitors_app::{SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION};

use super::workload::Workload;
use crate::build::secret::Credentials;
use crate::build::tls::ServingTls;

/// The part of an object a reconcile acts on, as hashes: two states with the same fingerprints
/// lead to the same reconcile.
pub trait Fingerprint: Resource<DynamicType = ()> {
    /// What the controller sets (or, for the app, what triggers a reconcile): it stays as an
    /// apply response says until someone changes it.
    fn fingerprint(&self) -> u64;
    /// What the controller reads of the object's status; 0 for none.
    fn observed(&self) -> u64 {
        0
    }
    /// The part of [`Fingerprint::observed`] the app's readiness depends on; 0 for none.
    fn readiness(&self) -> u64 {
        0
    }
}

/// Identity and metadata a reconcile reads or repairs: the object's incarnation (uid), its spec
/// (generation: every spec change moves it), labels, owners and deletion. Not annotations: the
/// children carry none of ours, and the Deployment controller writes its own (the revision).
fn metadata_fingerprint<K: Resource>(object: &K) -> u64 {
    let meta = object.meta();
    let owners = serde_json::to_string(&meta.owner_references).unwrap_or_default();
    hash_of(&(&meta.uid, meta.generation, &meta.labels, owners, meta.deletion_timestamp.is_some()))
}

/// A hash of `part`: of what a fingerprint covers (for a workload's status, what the app's status
/// reads of it, [`Workload`], or of that its readiness, [`Workload::readiness`]: a status update
/// that moves none of it, a condition's timestamp say, is no news).
pub(crate) fn hash_of(part: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    part.hash(&mut hasher);
    hasher.finish()
}

impl Fingerprint for StatefulSet {
    fn fingerprint(&self) -> u64 {
        metadata_fingerprint(self)
    }
    fn observed(&self) -> u64 {
        hash_of(&Workload::from_statefulset(self))
    }
    fn readiness(&self) -> u64 {
        hash_of(&Workload::from_statefulset(self).readiness())
    }
}

impl Fingerprint for Deployment {
    fn fingerprint(&self) -> u64 {
        metadata_fingerprint(self)
    }
    fn observed(&self) -> u64 {
        hash_of(&Workload::from_deployment(self))
    }
    fn readiness(&self) -> u64 {
        hash_of(&Workload::from_deployment(self).readiness())
    }
}

/// A Service has no generation: any change moves its resourceVersion, and only ours leave it
/// where the apply response says.
fn version_fingerprint<K: Resource>(object: &K) -> u64 {
    hash_of(&(&object.meta().uid, &object.meta().resource_version))
}

impl Fingerprint for Service {
    fn fingerprint(&self) -> u64 {
        version_fingerprint(self)
    }
}

impl Fingerprint for PartialObjectMeta<Service> {
    fn fingerprint(&self) -> u64 {
        version_fingerprint(self)
    }
}

/// The app itself triggers a reconcile on a new generation, a change of its finalizers or its
/// deletion (status writes never do): the same here, so the finalizer a reconcile adds is no news.
impl Fingerprint for VisitorsApp {
    fn fingerprint(&self) -> u64 {
        let meta = self.meta();
        let requests =
            [SWITCHOVER_REQUESTED_AT_ANNOTATION, SWITCHOVER_TO_ANNOTATION].map(|a| self.annotations().get(a));
        hash_of(&(&meta.uid, meta.generation, self.finalizers(), meta.deletion_timestamp.is_some(), requests))
    }
}

/// The app's incarnation and spec: what names its credentials Secret.
fn spec_fingerprint(app: &VisitorsApp) -> u64 {
    hash_of(&(&app.meta().uid, app.meta().generation))
}

/// How long what a watch reports of a child waits for the answer of an apply on its way.
const IN_FLIGHT_AT_MOST: Duration = Duration::from_secs(30);

/// What a watch event of an object brings, from the least to the most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum News {
    /// A state a reconcile has seen (the echo of its own write) or been woken for.
    #[default]
    Nothing,
    /// Only what the app's status reads of the object moved (a workload counting its pods), not
    /// what its readiness depends on: the app's reconcile only refreshes its status text.
    Status,
    /// What the app's readiness depends on moved (a pod became ready, a rollout ended, readiness
    /// was lost): the app moves on.
    Readiness,
    /// Anything else: a new object, drift, a new spec.
    Change,
}

/// An object's `(kind, namespace, name)` as a 128-bit hash: a Service and its metadata-only
/// watch share one entry. A hash, not the names: with ten thousand apps the names' copies were
/// half the records' memory. That two of a million objects collide is less likely than 10^-26.
/// Two halves rather than a `u128`: aligned to 8 bytes, not 16, a record's map entry is smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key([u64; 2]);

impl Key {
    fn of(kind: &str, namespace: &str, name: &str) -> Self {
        // Two SipHash-1-3 passes with different leading tags: 128 bits from std alone.
        let half = |tag: u8| {
            let mut hasher = DefaultHasher::new();
            (tag, kind, namespace, name).hash(&mut hasher);
            hasher.finish()
        };
        Key([half(0), half(1)])
    }
}

/// An object's fingerprints: see [`Fingerprint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    fingerprint: u64,
    readiness: u64,
    observed: u64,
}

fn state<K: Fingerprint>(object: &K) -> State {
    State { fingerprint: object.fingerprint(), readiness: object.readiness(), observed: object.observed() }
}

impl State {
    /// What moved from `self` to `now`.
    fn news(self, now: State) -> News {
        if now == self {
            News::Nothing
        } else if now.fingerprint != self.fingerprint {
            News::Change
        } else if now.readiness != self.readiness {
            News::Readiness
        } else {
            News::Status
        }
    }
}

/// The controller's last apply of a child: a hash of what it sent (and of the same desired form
/// as rebuilt from the response, see [`Seen::record_settled_form`]; until then the same hash),
/// the fingerprint of what the API server answered, and when.
struct Applied {
    desired: u64,
    settled: u64,
    fingerprint: u64,
    at: Instant,
}

/// Everything remembered of one object, in one entry: with ten thousand apps (seven objects
/// each) a map per kind of record, each with its own copy of the key, was several KiB per app.
#[derive(Default)]
struct Record {
    state: Option<State>,
    applied: Option<Applied>,
    /// Moves whenever a watch reports news of the object or its deletion: an apply answered
    /// before that must not record its older state over the news. It only needs to differ from
    /// the ticket's: wrapping after four billion changes of one object is harmless.
    epoch: u32,
    /// An apply on its way, and what a watch reported of the object meanwhile: decided when the
    /// answer comes ([`Seen::record_apply`]). Boxed: seldom there, and every object has a record.
    in_flight: Option<Box<(Instant, Option<State>)>>,
    /// An app's: what its reconciles last read of its Secrets.
    reads: Option<Box<Reads>>,
}

/// What the reconciles of an app last read of its Secrets, for which fingerprint of the app (a
/// spec change can name other Secrets or switch TLS), and when.
#[derive(Default)]
struct Reads {
    /// The credentials, as their Secret held them when found usable.
    credentials: Option<(u64, Instant, Credentials)>,
    /// The TLS the app's MySQL serves.
    tls: Option<(u64, Instant, Option<ServingTls>)>,
}

type Records = HashMap<Key, Record>;

/// Taken before an apply: what the watches had reported of the object then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u32);

impl Record {
    /// What [`Seen::forget`] leaves of an object while an apply of it is on its way.
    fn is_tombstone(&self) -> bool {
        self.state.is_none() && self.applied.is_none() && self.in_flight.is_none() && self.reads.is_none()
    }
}

/// The seen states, shared by the reconciles (which record) and the watches (which ask).
#[derive(Clone, Default)]
pub struct Seen {
    records: Arc<Mutex<Records>>,
}

fn desired_hash<K: Serialize>(desired: &K) -> u64 {
    hash_of(&serde_json::to_vec(desired).unwrap_or_default())
}

fn key<K: Resource<DynamicType = ()>>(object: &K) -> Key {
    let meta = object.meta();
    let name = meta.name.as_deref().or(meta.generate_name.as_deref()).unwrap_or_default();
    Key::of(&K::kind(&()), meta.namespace.as_deref().unwrap_or_default(), name)
}

impl Seen {
    /// A reconcile has seen `object` in this state (it read it, or an apply returned it).
    pub fn record<K: Fingerprint>(&self, object: &K) {
        self.lock().entry(key(object)).or_default().state = Some(state(object));
    }

    /// To take before applying `desired`, for [`Seen::record_apply`] (or [`Seen::abandon`] when
    /// the apply fails). Until then, what a watch reports of the child wakes nothing: under load
    /// the echo of the apply often comes before its answer.
    pub fn ticket<K: Fingerprint>(&self, desired: &K) -> Ticket {
        let mut records = self.lock();
        let record = records.entry(key(desired)).or_default();
        record.in_flight = Some(Box::new((Instant::now(), None)));
        Ticket(record.epoch)
    }

    /// The apply of `desired` failed: what a watch reports of the child is news again (the
    /// failed reconcile is retried anyway).
    pub fn abandon<K: Fingerprint>(&self, desired: &K) {
        if let Some(record) = self.lock().get_mut(&key(desired)) {
            record.in_flight = None;
        }
    }

    /// The controller applied `desired` and the API server answered `response`. What a watch
    /// reported of the child while the apply was on its way is the answer: [`News::Nothing`] when
    /// it was the apply's own echo, [`News::Status`] or [`News::Readiness`] when only its status
    /// moved, [`News::Change`]
    /// when someone else changed it (then the apply is not recorded: the caller must look again,
    /// and the next reconcile applies again). A deletion reported meanwhile already woke the app:
    /// nothing is recorded.
    pub fn record_apply<K: Fingerprint + Serialize>(&self, desired: &K, response: &K, ticket: Ticket) -> News {
        let (key, response_state) = (key(response), state(response));
        let mut records = self.lock();
        let record = records.entry(key).or_default();
        let reported = record.in_flight.take().and_then(|in_flight| in_flight.1);
        if record.epoch != ticket.0 && record.state != Some(response_state) {
            if record.is_tombstone() {
                records.remove(&key);
            }
            return News::Nothing;
        }
        let news = reported.map_or(News::Nothing, |reported| response_state.news(reported));
        if news == News::Change {
            record.epoch = record.epoch.wrapping_add(1);
            return news;
        }
        if news == News::Nothing {
            record.state = Some(response_state);
        }
        let desired = desired_hash(desired);
        record.applied =
            Some(Applied { desired, settled: desired, fingerprint: response.fingerprint(), at: Instant::now() });
        news
    }

    /// The controller sent `sent`, and builds its desired form from what the server keeps of the
    /// child (a StatefulSet's immutable claim template, which the server fills in): `settled` is
    /// that form rebuilt from the apply response. Applying it would change nothing the server
    /// did not already make of `sent`, so it counts as applied too.
    pub fn record_settled_form<K: Fingerprint + Serialize>(&self, sent: &K, settled: &K) {
        let key = key(sent);
        let sent = desired_hash(sent);
        let mut records = self.lock();
        let applied = records.get_mut(&key).and_then(|record| record.applied.as_mut());
        if let Some(applied) = applied.filter(|applied| applied.desired == sent) {
            applied.settled = desired_hash(settled);
        }
    }

    /// Whether applying `desired` would change nothing: the controller applied the same less
    /// than `max_age` ago, and no watch has reported a change of what it sets since.
    pub fn unchanged_since_applied<K: Fingerprint + Serialize>(&self, desired: &K, max_age: Duration) -> bool {
        let key = key(desired);
        let records = self.lock();
        let Some(Record { applied: Some(applied), state: Some(seen), .. }) = records.get(&key) else {
            return false;
        };
        let desired = desired_hash(desired);
        applied.at.elapsed() < max_age
            && applied.fingerprint == seen.fingerprint
            && (applied.desired == desired || applied.settled == desired)
    }

    /// Whether a watch reporting `object` brings news: a state no reconcile has seen nor been
    /// woken for. Either way the state counts as seen from now on: the reconcile it wakes sees it.
    pub fn is_news<K: Fingerprint>(&self, object: &K) -> bool {
        self.news(object) != News::Nothing
    }

    /// What a watch reporting `object` brings (see [`Seen::is_news`]), telling a change of what
    /// the app's status reads (and of that, what its readiness depends on) from any other.
    pub fn news<K: Fingerprint>(&self, object: &K) -> News {
        let state = state(object);
        let mut records = self.lock();
        let record = records.entry(key(object)).or_default();
        let news = match record.state.replace(state) {
            Some(previous) => previous.news(state),
            None => News::Change,
        };
        if news == News::Nothing {
            return news;
        }
        // A bound, in case an apply's future was dropped without an answer (at shut-down).
        if let Some(in_flight) = record.in_flight.as_mut()
            && in_flight.0.elapsed() < IN_FLIGHT_AT_MOST
        {
            in_flight.1 = Some(state);
            return News::Nothing;
        }
        record.epoch = record.epoch.wrapping_add(1);
        news
    }

    /// The reconcile of `app` read its credentials Secret and found these usable.
    pub fn record_credentials(&self, app: &VisitorsApp, credentials: Credentials) {
        self.lock().entry(key(app)).or_default().reads.get_or_insert_default().credentials =
            Some((spec_fingerprint(app), Instant::now(), credentials));
    }

    /// The credentials of `app` (as it is now) when they were found usable less than `max_age`
    /// ago. A Secret is not watched (that would take list and watch on every Secret): a reconcile
    /// uses what the last read found, and reads the Secret again once it is a resync period old,
    /// the same delay after which a converged app notices a deleted Secret.
    pub fn credentials_within(&self, app: &VisitorsApp, max_age: Duration) -> Option<Credentials> {
        let records = self.lock();
        let (fingerprint, at, credentials) = records.get(&key(app))?.reads.as_ref()?.credentials.as_ref()?;
        (*fingerprint == spec_fingerprint(app) && at.elapsed() < max_age).then(|| credentials.clone())
    }

    /// The reconcile of `app` found (or made) the TLS its MySQL serves: `None` for plain text.
    pub fn record_tls(&self, app: &VisitorsApp, tls: Option<ServingTls>) {
        self.lock().entry(key(app)).or_default().reads.get_or_insert_default().tls =
            Some((spec_fingerprint(app), Instant::now(), tls));
    }

    /// The TLS of `app` (as it is now) as a reconcile found it less than `max_age` ago: like
    /// the credentials, a Secret is read again only after that (see
    /// [`Self::credentials_within`]).
    pub fn tls_checked_within(&self, app: &VisitorsApp, max_age: Duration) -> Option<Option<ServingTls>> {
        let records = self.lock();
        let (fingerprint, at, tls) = records.get(&key(app))?.reads.as_ref()?.tls.as_ref()?;
        (*fingerprint == spec_fingerprint(app) && at.elapsed() < max_age).then(|| tls.clone())
    }

    /// The object is gone (deleted, or an app's reconciles are over).
    pub fn forget<K: Fingerprint>(&self, object: &K) {
        let key = key(object);
        let mut records = self.lock();
        let Some(record) = records.get_mut(&key) else { return };
        if record.in_flight.is_some() {
            // The answer of that apply must not record the object as it was: the record stays,
            // emptied, with its epoch moved (see `record_apply`).
            *record = Record { epoch: record.epoch.wrapping_add(1), ..Record::default() };
        } else {
            records.remove(&key);
        }
    }

    /// Objects remembered.
    pub fn len(&self) -> usize {
        self.lock().values().filter(|record| record.state.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{self, fixtures::book_app};
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    fn created_statefulset() -> StatefulSet {
        let mut sts =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        sts.metadata.uid = Some("uid-sts".into());
        sts.metadata.generation = Some(1);
        sts.metadata.resource_version = Some("10".into());
        sts
    }

    #[test]
    fn a_key_tells_kind_namespace_and_name_apart_and_a_cached_workload_shares_the_whole_ones() {
        let sts = created_statefulset();
        let keys = [
            Key::of("StatefulSet", "shop", "ex-mysql"),
            Key::of("Deployment", "shop", "ex-mysql"),
            Key::of("StatefulSet", "shop2", "ex-mysql"),
            Key::of("StatefulSet", "shop", "ex-mysql2"),
            Key::of("StatefulSet", "shopex", "-mysql"),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        assert_eq!(key(&sts), key(&crate::wake::cache::CachedStatefulSet::from(&sts)));
        assert_eq!(key(&sts), Key::of("StatefulSet", &sts.namespace().unwrap(), &sts.name_any()));
    }

    #[test]
    fn the_echo_of_a_recorded_apply_is_no_news_but_a_status_change_is() {
        let seen = Seen::default();
        let applied = created_statefulset();
        seen.record(&applied);
        assert!(!seen.is_news(&applied), "the watch event of our own create");

        let mut counted = applied.clone();
        counted.metadata.resource_version = Some("11".into());
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        assert!(seen.is_news(&counted), "the StatefulSet controller counted the pod: the app's status moves");
        assert!(!seen.is_news(&counted), "once");

        let mut edited = counted.clone();
        edited.metadata.generation = Some(2);
        assert!(seen.is_news(&edited), "someone edited the spec: drift to repair");

        let mut relabelled = edited.clone();
        relabelled.labels_mut().insert("app.kubernetes.io/name".into(), "other".into());
        assert!(seen.is_news(&relabelled), "someone edited the labels");
    }

    #[test]
    fn a_workload_counting_its_pods_is_status_news_and_an_edit_is_a_change() {
        let seen = Seen::default();
        let applied = created_statefulset();
        assert_eq!(seen.news(&applied), News::Change, "never seen");
        assert_eq!(seen.news(&applied), News::Nothing);
        let mut counted = applied.clone();
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        assert_eq!(seen.news(&counted), News::Status);
        let mut created_pod = counted.clone();
        created_pod.status.as_mut().unwrap().updated_replicas = Some(1);
        assert_eq!(seen.news(&created_pod), News::Status, "one more count, still no pod ready");
        let mut ready = created_pod.clone();
        ready.status.as_mut().unwrap().ready_replicas = Some(1);
        assert_eq!(seen.news(&ready), News::Readiness, "the database pod became ready: the app moves on");
        assert_eq!(seen.news(&created_pod), News::Readiness, "and lost it");
        let mut edited = counted.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(seen.news(&edited), News::Change);
    }

    #[test]
    fn an_apply_is_spared_only_while_the_child_is_as_it_left_it() {
        const RESYNC: Duration = Duration::from_secs(600);
        let seen = Seen::default();
        let desired =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        assert!(!seen.unchanged_since_applied(&desired, RESYNC), "never applied");
        let response = created_statefulset();
        seen.record_apply(&desired, &response, seen.ticket(&desired));
        assert!(seen.unchanged_since_applied(&desired, RESYNC));
        assert!(!seen.unchanged_since_applied(&desired, Duration::ZERO), "a resync period later: apply again");

        let mut counted = response.clone();
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        assert!(seen.is_news(&counted));
        assert!(seen.unchanged_since_applied(&desired, RESYNC), "a status change leaves what the controller set");

        let mut resized = desired.clone();
        resized.spec.as_mut().unwrap().replicas = Some(2);
        assert!(!seen.unchanged_since_applied(&resized, RESYNC), "the desired form changed");

        let mut edited = counted.clone();
        edited.metadata.generation = Some(2);
        assert!(seen.is_news(&edited));
        assert!(!seen.unchanged_since_applied(&desired, RESYNC), "someone edited the spec: apply to repair");
        seen.forget(&edited);
        assert!(!seen.unchanged_since_applied(&desired, RESYNC));
    }

    /// Under load the watch often reports a child before the apply's answer arrives. What the
    /// watch reports while the apply is on its way is decided when the answer comes: the echo of
    /// the apply itself is no news (it used to wake the app, and so cost every new app a second
    /// reconcile in a burst); anything else is, and the edit is repaired.
    #[test]
    fn an_apply_answered_after_its_echo_or_a_reported_edit_or_deletion_hides_only_the_echo() {
        const RESYNC: Duration = Duration::from_secs(600);
        let seen = Seen::default();
        let desired =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        let response = created_statefulset();

        let ticket = seen.ticket(&desired);
        assert_eq!(seen.news(&response), News::Nothing, "the echo of our own apply arrives first");
        assert_eq!(seen.record_apply(&desired, &response, ticket), News::Nothing);
        assert!(seen.unchanged_since_applied(&desired, RESYNC), "our own echo is no reason to apply again");
        assert_eq!(seen.news(&response), News::Nothing);

        let ticket = seen.ticket(&desired);
        let mut edited = response.clone();
        edited.metadata.generation = Some(2);
        assert_eq!(seen.news(&edited), News::Nothing, "decided when the answer comes");
        assert_eq!(seen.record_apply(&desired, &response, ticket), News::Change, "someone edited it meanwhile");
        assert!(!seen.unchanged_since_applied(&desired, RESYNC), "the edit must be repaired");

        let ticket = seen.ticket(&desired);
        let mut counted = response.clone();
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        assert_eq!(seen.news(&counted), News::Nothing);
        assert_eq!(seen.record_apply(&desired, &response, ticket), News::Status, "its status moved meanwhile");
        assert!(seen.unchanged_since_applied(&desired, RESYNC), "a status change leaves what the controller set");

        let ticket = seen.ticket(&desired);
        seen.forget(&response);
        assert_eq!(seen.record_apply(&desired, &response, ticket), News::Nothing, "the deletion woke the app");
        assert!(!seen.unchanged_since_applied(&desired, RESYNC), "the deleted child must be created again");

        let ticket = seen.ticket(&desired);
        seen.abandon(&desired);
        let _ = ticket;
        assert_eq!(seen.news(&edited), News::Change, "no apply on its way: news as usual");
    }

    /// With apps made and deleted all day, a deleted object must not leave a record behind
    /// (it used to leave its epoch).
    #[test]
    fn a_forgotten_object_leaves_nothing_behind_unless_an_apply_is_on_its_way() {
        let seen = Seen::default();
        let app = book_app();
        let sts = created_statefulset();
        seen.record(&sts);
        seen.record_credentials(&app, Credentials::generate());
        seen.forget(&sts);
        seen.forget(&app);
        assert_eq!(seen.lock().len(), 0);

        let desired =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        let ticket = seen.ticket(&desired);
        seen.forget(&sts);
        assert_eq!(seen.lock().len(), 1, "kept for the answer of the apply on its way");
        assert_eq!(seen.record_apply(&desired, &sts, ticket), News::Nothing);
        assert_eq!(seen.lock().len(), 0, "and that answer records nothing, and ends it");
    }

    #[test]
    fn a_service_is_news_whenever_its_version_moves_past_ours() {
        let seen = Seen::default();
        let mut service = build::mysql::client_service(&book_app());
        service.metadata.uid = Some("uid-svc".into());
        service.metadata.resource_version = Some("7".into());
        seen.record(&service);
        let watched = PartialObjectMeta::<Service> {
            metadata: service.metadata.clone(),
            ..PartialObjectMeta::<Service>::default()
        };
        assert!(!seen.is_news(&watched), "the metadata watch echoes our own apply");
        let mut edited = watched.clone();
        edited.metadata.resource_version = Some("8".into());
        assert!(seen.is_news(&edited));
    }

    #[test]
    fn an_added_finalizer_is_no_news_once_recorded_but_a_new_generation_is() {
        let seen = Seen::default();
        let mut app = book_app();
        app.metadata.generation = Some(1);
        assert!(seen.is_news(&app), "a new app");
        app.finalizers_mut().push("example.com/visitors-app-cleanup".into());
        seen.record(&app);
        assert!(!seen.is_news(&app), "the watch event of the finalizer the reconcile added");
        app.metadata.generation = Some(2);
        assert!(seen.is_news(&app));
        seen.forget(&app);
        assert!(seen.is_empty());
    }
}
