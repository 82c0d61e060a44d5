//! The streams of watch events that wake an app: what each kind's news is, and which app it
//! wakes (see the module's doc, [`super`]).

use controller_common::watch::trim_for_cache;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use visitors_api::{MySQLRestore, VisitorsApp};

use super::hold::{Hold, owner_of};
use super::seen::{Fingerprint, News, Seen};

/// The app a MySQLRestore targets: its changes (a phase, a deletion) wake that app.
pub fn target_app(restore: &MySQLRestore) -> Option<ObjectRef<VisitorsApp>> {
    let namespace = restore.namespace()?;
    Some(ObjectRef::new(&restore.spec.target.visitors_app).within(&namespace))
}

/// What the controller's queue needs of an app that is news: its name and namespace. kube's
/// trigger copies the UID and resource version of the object it is given into each queued
/// request, which no lookup compares; the reconcile reads the app from the cache.
pub fn as_trigger(mut app: VisitorsApp) -> VisitorsApp {
    let (name, namespace) = (app.metadata.name.take(), app.metadata.namespace.take());
    app.metadata = ObjectMeta { name, namespace, ..ObjectMeta::default() };
    app
}

/// The app a MySQL pod belongs to (its `instance` label).
pub fn app_of_pod(pod: &Pod) -> Option<ObjectRef<VisitorsApp>> {
    let app = pod.labels().get("app.kubernetes.io/instance")?;
    Some(ObjectRef::new(app).within(&pod.namespace()?))
}

/// What the cache keeps of a MySQL pod: its metadata (labels, UID, deletion) and its readiness,
/// what the replication step reads.
pub fn trim_pod(pod: &mut Pod) {
    trim_for_cache(pod);
    pod.spec = None;
    if let Some(status) = pod.status.as_mut() {
        let ready = status.conditions.take().map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect());
        *status = PodStatus { conditions: ready, ..PodStatus::default() };
    }
}

/// The pods whose news can change a replication decision: a new pod, readiness gained or lost,
/// a deletion begun or done. Status refreshes that change none of it wake nothing.
pub fn mysql_pod_news<S>(events: S) -> impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static
where
    S: Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
{
    let mut seen: std::collections::HashMap<String, (bool, bool)> = std::collections::HashMap::new();
    events.default_backoff().filter_map(move |event| {
        let wake = match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                let state = (crate::replication::observe::is_ready(&pod), pod.metadata.deletion_timestamp.is_some());
                let key = pod.uid().unwrap_or_default();
                (seen.insert(key, state) != Some(state)).then_some(Ok(pod))
            }
            Ok(watcher::Event::Delete(pod)) => {
                seen.remove(&pod.uid().unwrap_or_default());
                Some(Ok(pod))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(error) => Some(Err(error)),
        };
        std::future::ready(wake)
    })
}

/// A child's deletion wakes its owner (a deleted child must come back), and so does a change no
/// reconcile has seen ([`Seen`]): drift at once, a workload's status moving through [`Hold`]
/// (held while new apps wait for their first reconcile, and a mere refresh also for the app's
/// pace). The echoes of the controller's own applies do not.
pub fn owned<K, S>(events: S, seen: Seen, hold: Hold) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Fingerprint + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    events.default_backoff().filter_map(move |event| {
        let wake = match event {
            Ok(watcher::Event::Apply(child) | watcher::Event::InitApply(child)) => match seen.news(&child) {
                News::Nothing => None,
                news => match owner_of(&child) {
                    Some(owner) => hold.wake(owner, news).then_some(Ok(child)),
                    None => Some(Ok(child)),
                },
            },
            Ok(watcher::Event::Delete(child)) => {
                seen.forget(&child);
                if let Some(owner) = owner_of(&child) {
                    hold.reset_pace(&owner);
                }
                Some(Ok(child))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(error) => Some(Err(error)),
        };
        std::future::ready(wake)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::build::fixtures::book_app;
    use crate::wake::cache::{CachedDeployment, CachedStatefulSet};
    use crate::wake::workload::Workload;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::apps::v1::StatefulSetStatus;
    use kube::runtime::controller::trigger_owners;
    use kube::runtime::reflector;

    /// What the StatefulSet watch reports when the MySQL pod becomes ready: a status change
    /// only (no new generation), which must still wake the app.
    fn became_ready() -> StatefulSet {
        let app = book_app();
        let mut sts =
            build::mysql::statefulset(&app, "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        sts.metadata.generation = Some(1);
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(1),
            replicas: 1,
            ready_replicas: Some(1),
            ..Default::default()
        });
        sts
    }

    #[tokio::test]
    async fn a_child_status_change_wakes_its_app_through_the_owned_watch() {
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(became_ready())),
            Ok(watcher::Event::Delete(became_ready())),
        ]);
        let requests: Vec<_> =
            trigger_owners::<VisitorsApp, _>(owned(events, Seen::default(), Hold::default()), (), ()).collect().await;
        let woken: Vec<String> = requests.into_iter().map(|r| r.expect("no watch error").obj_ref.to_string()).collect();
        assert_eq!(woken.len(), 2, "both the status change and the deletion wake the owner: {woken:?}");
        assert!(woken.iter().all(|r| r.starts_with("VisitorsApp.v1.example.com/ex.shop")), "{woken:?}");
    }

    /// What the StatefulSet watch reports right after the reconcile created it: the apply
    /// response itself, and then the StatefulSet controller's first status.
    fn created() -> StatefulSet {
        let mut sts =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        sts.metadata.uid = Some("uid-sts".into());
        sts.metadata.generation = Some(1);
        sts.metadata.resource_version = Some("5".into());
        sts
    }

    /// While a new app waits for its first reconcile, a workload counting its pods does not wake
    /// its app at once (that reconcile would compete with the new app's for a worker): it is
    /// held, and released once the new app's reconcile has started. Drift is never held.
    #[tokio::test]
    async fn a_status_change_waits_for_the_first_reconcile_of_a_new_app_but_drift_does_not() {
        let seen = Seen::default();
        seen.record(&created());
        let hold = Hold::default();
        let mut new_app = book_app();
        new_app.metadata.name = Some("new".into());
        hold.news_of(&new_app);
        let mut counted = created();
        counted.metadata.resource_version = Some("6".into());
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        let mut edited = counted.clone();
        edited.metadata.generation = Some(2);
        let events = futures::stream::iter([Ok(watcher::Event::Apply(counted)), Ok(watcher::Event::Apply(edited))]);

        let woken: Vec<StatefulSet> =
            owned(events, seen, hold.clone()).map(|r| r.expect("no watch error")).collect().await;

        assert_eq!(woken.len(), 1, "only the drift wakes the app at once");
        assert_eq!(woken[0].metadata.generation, Some(2));
        assert_eq!(hold.held(), 1, "the status change is held");
        hold.reconciling(&new_app);
        let mut apps = reflector::store::Writer::default();
        apps.apply_watcher_event(&watcher::Event::Apply(book_app()));
        let released =
            tokio::time::timeout(std::time::Duration::from_secs(5), Box::pin(hold.released(apps.as_reader())).next())
                .await;
        assert_eq!(released.ok().flatten().map(|r| r.name).as_deref(), Some("ex"));
    }

    /// The caches keep what a reconcile reads of each workload: what they hold must read and
    /// compare as the full object does, or a cached workload would look changed.
    #[test]
    fn a_cached_workload_reads_and_compares_as_the_full_one() {
        let full = became_ready();
        let cached = CachedStatefulSet::from(&full);
        assert_eq!(cached.workload, Workload::from_statefulset(&full));
        assert_eq!((cached.fingerprint(), cached.observed()), (full.fingerprint(), full.observed()));
        assert_eq!(cached.claim().map(|c| c.spec), build::mysql::data_claim_template(&full).map(|c| c.spec.clone()));

        let mut deployment = build::frontend::deployment(&book_app());
        deployment.metadata.generation = Some(1);
        let cached = CachedDeployment::from(&deployment);
        assert_eq!(cached.workload, Workload::from_deployment(&deployment));
        assert_eq!((cached.fingerprint(), cached.observed()), (deployment.fingerprint(), deployment.observed()));
    }

    /// Under load the watch reports a created child before the apply's answer arrives: that
    /// echo must not wake the app either.
    #[tokio::test]
    async fn the_echo_of_an_apply_still_on_its_way_does_not_wake_the_app() {
        let seen = Seen::default();
        let desired =
            build::mysql::statefulset(&book_app(), "ex-mysql-credentials", crate::build::mysql::Kept::default(), None);
        let ticket = seen.ticket(&desired);
        let events = futures::stream::iter([Ok(watcher::Event::Apply(created()))]);
        let woken: Vec<StatefulSet> =
            owned(events, seen.clone(), Hold::default()).map(|r| r.expect("no watch error")).collect().await;
        assert!(woken.is_empty(), "{woken:?}");
        assert_eq!(seen.record_apply(&desired, &created(), ticket), News::Nothing);
    }

    #[tokio::test]
    async fn the_echo_of_the_reconciles_own_apply_does_not_wake_the_app() {
        let seen = Seen::default();
        // The reconcile recorded the apply response.
        seen.record(&created());
        let mut counted = created();
        counted.metadata.resource_version = Some("6".into());
        counted.status = Some(StatefulSetStatus { observed_generation: Some(1), replicas: 1, ..Default::default() });
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(created())),
            Ok(watcher::Event::Apply(counted.clone())),
            Ok(watcher::Event::Apply(counted)),
            Ok(watcher::Event::Delete(created())),
        ]);
        let hold = Hold::default();
        let woken: Vec<String> = trigger_owners::<VisitorsApp, _>(owned(events, seen.clone(), hold.clone()), (), ())
            .map(|r| r.expect("no watch error").obj_ref.to_string())
            .collect()
            .await;
        assert_eq!(woken.len(), 1, "the deletion; not the echo: {woken:?}");
        assert_eq!(hold.held(), 1, "the status refresh once, at the app's pace");
        assert!(seen.is_empty(), "a deleted child is forgotten");
    }

    /// The StatefulSet controller's status with `pods` pods of which `updated` at the latest
    /// revision and `ready` ready.
    fn counting(pods: i32, updated: i32, ready: i32) -> StatefulSet {
        let mut sts = created();
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(1),
            replicas: pods,
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            ..Default::default()
        });
        sts
    }

    /// When each wake-up of app "ex" comes, in seconds after the start, as the controller would
    /// have it: wake-ups from the StatefulSet watch fed `updates` (each at its time), and the
    /// held ones as [`Hold`] releases them. Each wake-up starts a reconcile at once.
    async fn wake_ups(updates: Vec<(u64, StatefulSet)>, until: u64) -> Vec<u64> {
        let start = tokio::time::Instant::now();
        let seen = Seen::default();
        seen.record(&created());
        let hold = Hold::default();
        let mut apps = reflector::store::Writer::default();
        apps.apply_watcher_event(&watcher::Event::Apply(book_app()));
        // The app's first reconcile: it created the StatefulSet.
        hold.reconciling(&book_app());
        let events = futures::stream::iter(updates).then(move |(at, sts)| async move {
            tokio::time::sleep_until(start + std::time::Duration::from_secs(at)).await;
            Ok(watcher::Event::Apply(sts))
        });
        let from_watch = owned(events, seen, hold.clone()).map(|sts| owner_of(&sts.expect("no watch error")));
        let held = hold.clone().released(apps.as_reader()).map(Some);
        let mut woken = futures::stream::select(Box::pin(from_watch), Box::pin(held));
        let mut times = Vec::new();
        let deadline = start + std::time::Duration::from_secs(until);
        while let Ok(Some(app)) = tokio::time::timeout_at(deadline, woken.next()).await {
            assert_eq!(app.map(|a| a.name).as_deref(), Some("ex"));
            times.push(start.elapsed().as_secs());
            hold.reconciling(&book_app());
        }
        times
    }

    /// Right after a burst the controller-manager is still creating the pods and claims of a
    /// waiting app, and each count it updates moves what the app's status reads. Those refreshes
    /// back off per app: five of them within a minute make at most two reconciles in that minute
    /// (its first one included), and one more at the end of the wait (the status still ends up
    /// right). A pod becoming ready wakes the app at once, and brings the backoff back to a few
    /// seconds.
    #[tokio::test(start_paused = true)]
    async fn a_waiting_apps_status_refreshes_back_off_but_its_readiness_does_not() {
        let updates = vec![
            (1, counting(1, 0, 0)),
            (12, counting(1, 1, 0)),
            (24, counting(2, 1, 0)),
            (36, counting(2, 2, 0)),
            (48, counting(1, 1, 0)),
            (150, counting(1, 1, 1)),
            (151, counting(2, 1, 1)),
        ];
        let times = wake_ups(updates, 200).await;

        let in_the_minute = times.iter().filter(|t| **t < 60).count();
        assert!(in_the_minute <= 1, "five refreshes in the minute after the first reconcile: {times:?}");
        assert!(times.iter().any(|t| (48..=48 + 60).contains(t)), "the last refresh still comes: {times:?}");
        assert!(!times.iter().any(|t| (109..150).contains(t)), "no refresh left to make: {times:?}");
        assert!(times.contains(&150), "the database pod became ready: at once: {times:?}");
        let after = times.iter().find(|t| **t > 150).copied();
        assert!(after.is_some_and(|t| t <= 151 + 5), "the backoff starts again from a few seconds: {times:?}");
    }

    #[test]
    fn a_trigger_names_the_app_it_wakes_and_keeps_no_copy_of_its_uid_or_version() {
        let mut app = book_app();
        app.metadata.uid = Some("u-1".into());
        app.metadata.resource_version = Some("42".into());
        let trigger = as_trigger(app.clone());
        assert_eq!(ObjectRef::from_obj(&trigger), ObjectRef::from_obj(&app), "the same store lookup");
        let extra = ObjectRef::from_obj(&trigger).extra;
        assert_eq!((extra.uid, extra.resource_version), (None, None));
    }
}
