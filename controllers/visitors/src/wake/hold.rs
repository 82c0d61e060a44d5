//! When a wake-up that only refreshes an app's status ([`super::seen::News::Status`]) is let
//! through, for two reasons.
//!
//! **First reconciles first.** When every worker is busy, kube's scheduler hands out the pending
//! reconciles in no particular order, so in a burst of new apps each app's first reconcile
//! competed at random with the reconciles woken by the StatefulSet and Deployment controllers
//! counting the pods of apps already started, and the last new app waited for nearly all of them.
//! A status wake-up is therefore held while any app waits for the reconcile of news of its own (a
//! new app, a new spec), and released once none does. An app deleted before its reconcile no
//! longer counts as waiting. A wake-up is held at most [`MAX_HOLD`] past its due time, and an app
//! counts as waiting at most that long, so a status is late by that at worst, and only while new
//! apps keep coming: a burst of a thousand new apps takes one to two minutes, and its status
//! refreshes wait for its end.
//!
//! **A waiting app backs off.** While its database and pods are not ready, the controller-manager
//! keeps updating an app's workloads (pods and claims created, replicas counted, generations
//! observed), each update a status wake-up: right after a burst, on a control plane still catching
//! up, that was about two reconciles per waiting app a minute. Each app has a pace: a status
//! wake-up comes no sooner than [`FIRST_LOOK`] after the app's last reconcile began, and once one
//! had to wait for that, the next ones come no sooner than [`SLOWEST_LOOK`] after it. Several
//! status wake-ups inside the wait make one reconcile at its end. What the app's readiness
//! depends on ([`super::seen::News::Readiness`]: a pod ready, a rollout done, readiness lost),
//! drift, deletions and spec changes never wait for the pace, and bring it back to [`FIRST_LOOK`]
//! (see [`Hold::wake`]); they wait for new apps only as before (readiness), or not at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use visitors_api::VisitorsApp;

use super::seen::News;

/// The longest a status wake-up is held past its due time for new apps, and the longest an app
/// counts as waiting.
pub const MAX_HOLD: Duration = Duration::from_secs(300);
/// The soonest a status wake-up follows the app's last reconcile, while the app makes progress.
pub const FIRST_LOOK: Duration = Duration::from_secs(5);
/// The wait of a status wake-up once one has waited for the pace: a waiting app costs at most a
/// reconcile a minute. One step, not a doubling: a burst's apps wait from its first seconds, and
/// the steps of a doubling (5, 10, 20, 40 s) were three more reconciles of each app in its first
/// minute.
pub const SLOWEST_LOOK: Duration = Duration::from_secs(60);
/// How often held wake-ups look for apps deleted while they waited.
const RECHECK: Duration = Duration::from_secs(1);

/// Shared by the watches (which report news and hold wake-ups) and the reconciles (which say
/// when an app's reconcile starts).
#[derive(Clone, Default)]
pub struct Hold {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

/// When an app's next status wake-up may come.
struct Pace {
    /// The app's last reconcile began then.
    last_look: Instant,
    wait: Duration,
}

/// A held wake-up's place: when it is due, then the order of arrival.
type Slot = (Instant, u64);

#[derive(Default)]
struct State {
    /// Apps whose watch reported news no reconcile has started on yet, since when.
    waiting: HashMap<ObjectRef<VisitorsApp>, Instant>,
    /// Held wake-ups by when they are due, each app once; `true` for one that waits for the
    /// app's pace.
    held: BTreeMap<Slot, (ObjectRef<VisitorsApp>, bool)>,
    slots: HashMap<ObjectRef<VisitorsApp>, Slot>,
    paces: HashMap<ObjectRef<VisitorsApp>, Pace>,
    arrivals: u64,
}

enum Next {
    Release(ObjectRef<VisitorsApp>),
    WaitUntil(Instant),
    WaitForChange,
}

impl State {
    fn forget_stale_waiters(&mut self, now: Instant) {
        self.waiting.retain(|_, since| now.duration_since(*since) < MAX_HOLD);
    }

    fn forget_deleted_waiters(&mut self, apps: &Store<VisitorsApp>) {
        self.waiting.retain(|app, _| apps.get(app).is_some());
    }

    fn next(&mut self, now: Instant) -> Next {
        self.forget_stale_waiters(now);
        let Some((&(due, arrival), _)) = self.held.first_key_value() else { return Next::WaitForChange };
        if due > now {
            return Next::WaitUntil(due);
        }
        if self.waiting.is_empty() || now.duration_since(due) >= MAX_HOLD {
            let (app, paced) = self.held.remove(&(due, arrival)).expect("the first held wake-up");
            self.slots.remove(&app);
            if paced {
                self.slow_down(&app);
            }
            return Next::Release(app);
        }
        let oldest_waiter = self.waiting.values().min().copied().unwrap_or(now);
        Next::WaitUntil((due + MAX_HOLD).min(oldest_waiter + MAX_HOLD).min(now + RECHECK))
    }

    /// When a status wake-up of `app` may come: [`Pace`].
    fn due(&self, app: &ObjectRef<VisitorsApp>, now: Instant) -> Instant {
        self.paces.get(app).map_or(now, |pace| (pace.last_look + pace.wait).max(now))
    }

    fn slow_down(&mut self, app: &ObjectRef<VisitorsApp>) {
        if let Some(pace) = self.paces.get_mut(app) {
            pace.wait = SLOWEST_LOOK;
        }
    }

    fn reset_pace(&mut self, app: &ObjectRef<VisitorsApp>) {
        if let Some(pace) = self.paces.get_mut(app) {
            pace.wait = FIRST_LOOK;
        }
    }

    /// Holds a wake-up of `app` until `due` (or keeps the one already held, moved to `due` if
    /// that is sooner). Whether the held wake-up came sooner.
    fn hold_until(&mut self, app: ObjectRef<VisitorsApp>, due: Instant, paced: bool) -> bool {
        if let Some(&slot) = self.slots.get(&app) {
            if slot.0 <= due {
                if let Some(held) = self.held.get_mut(&slot).filter(|_| !paced) {
                    held.1 = false;
                }
                return false;
            }
            self.held.remove(&slot);
        }
        self.arrivals += 1;
        let slot = (due, self.arrivals);
        self.slots.insert(app.clone(), slot);
        self.held.insert(slot, (app, paced));
        true
    }

    fn release_held(&mut self, app: &ObjectRef<VisitorsApp>) {
        if let Some(slot) = self.slots.remove(app) {
            self.held.remove(&slot);
        }
    }
}

/// The app's name and namespace: not its UID nor resource version, which `ObjectRef::from_obj`
/// would copy into every key of the maps above, and which no lookup compares.
fn app_ref(app: &VisitorsApp) -> ObjectRef<VisitorsApp> {
    let reference = ObjectRef::new(&app.name_any());
    match app.namespace() {
        Some(namespace) => reference.within(&namespace),
        None => reference,
    }
}

/// The VisitorsApp that owns `child`, if any.
pub fn owner_of<K: Resource>(child: &K) -> Option<ObjectRef<VisitorsApp>> {
    let namespace = child.namespace()?;
    let owner = child
        .owner_references()
        .iter()
        .find(|owner| owner.kind == VisitorsApp::kind(&()) && owner.api_version == VisitorsApp::api_version(&()))?;
    Some(ObjectRef::new(&owner.name).within(&namespace))
}

impl Hold {
    /// The app's watch reported news (a new app, a new spec): its reconcile goes first, and its
    /// status wake-ups come soon again.
    pub fn news_of(&self, app: &VisitorsApp) {
        let app = app_ref(app);
        let mut state = self.lock();
        state.waiting.entry(app.clone()).or_insert_with(Instant::now);
        state.reset_pace(&app);
    }

    /// A reconcile of `app` starts: it no longer waits, it sees every change the watches
    /// reported so far (a wake-up held for it is no longer needed), and its pace counts from now.
    pub fn reconciling(&self, app: &VisitorsApp) {
        let app = app_ref(app);
        let now = Instant::now();
        let mut state = self.lock();
        state.release_held(&app);
        state.paces.entry(app.clone()).or_insert(Pace { last_look: now, wait: FIRST_LOOK }).last_look = now;
        if state.waiting.remove(&app).is_some() && state.waiting.is_empty() {
            drop(state);
            self.changed.notify_one();
        }
    }

    /// What a watch reported of a child of `app` (or a reconcile of its apply): whether it wakes
    /// the app now. [`News::Status`] waits for the app's pace and for new apps; [`News::Readiness`]
    /// waits for new apps only; a [`News::Change`] wakes the app at once. Anything but a status
    /// refresh brings the pace back to [`FIRST_LOOK`].
    pub fn wake(&self, app: ObjectRef<VisitorsApp>, news: News) -> bool {
        match news {
            News::Nothing => false,
            News::Status => {
                self.pace(app);
                false
            }
            News::Readiness => {
                self.reset_pace(&app);
                if self.holding() {
                    self.hold(app);
                    return false;
                }
                true
            }
            News::Change => {
                self.reset_pace(&app);
                true
            }
        }
    }

    /// A deleted child of `app` is created again at once: the app is making progress.
    pub fn reset_pace(&self, app: &ObjectRef<VisitorsApp>) {
        self.lock().reset_pace(app);
    }

    /// The readiness the app's reconcile computed differs from the one in its status (the
    /// database answered, readiness lost): the app made progress.
    pub fn progressed(&self, app: &VisitorsApp) {
        self.reset_pace(&app_ref(app));
    }

    /// Whether a status wake-up should be held now: some app waits for a reconcile of its news.
    pub fn holding(&self) -> bool {
        let mut state = self.lock();
        state.forget_stale_waiters(Instant::now());
        !state.waiting.is_empty()
    }

    /// Holds a wake-up of `app` until no app waits (or [`MAX_HOLD`]); one per app at a time.
    pub fn hold(&self, app: ObjectRef<VisitorsApp>) {
        let now = Instant::now();
        if self.lock().hold_until(app, now, false) {
            self.changed.notify_one();
        }
    }

    /// Holds a status wake-up of `app` until its pace lets it come, and no app waits.
    pub fn pace(&self, app: ObjectRef<VisitorsApp>) {
        let mut state = self.lock();
        let due = state.due(&app, Instant::now());
        if state.hold_until(app, due, true) {
            drop(state);
            self.changed.notify_one();
        }
    }

    /// The app is gone: its pace and held wake-up with it.
    pub fn forget(&self, app: &VisitorsApp) {
        let app = app_ref(app);
        let mut state = self.lock();
        state.release_held(&app);
        state.paces.remove(&app);
        state.waiting.remove(&app);
    }

    /// Held wake-ups pending release.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// The held wake-ups as they are released: for the controller's `reconcile_on`. `apps` is
    /// the cache of the apps: one no longer in it was deleted and waits for nothing.
    pub fn released(self, apps: Store<VisitorsApp>) -> impl Stream<Item = ObjectRef<VisitorsApp>> + Send + 'static {
        futures::stream::unfold((self, apps), |(hold, apps)| async move {
            loop {
                let notify = hold.changed.clone();
                let changed = notify.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let next = {
                    let mut state = hold.lock();
                    state.forget_deleted_waiters(&apps);
                    state.next(Instant::now())
                };
                match next {
                    Next::Release(app) => return Some((app, (hold, apps))),
                    Next::WaitUntil(deadline) => {
                        tokio::select! {
                            () = &mut changed => {}
                            () = tokio::time::sleep_until(deadline) => {}
                        }
                    }
                    Next::WaitForChange => changed.await,
                }
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::fixtures::book_app;
    use futures::StreamExt;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    fn app(name: &str) -> VisitorsApp {
        let mut app = book_app();
        app.metadata.name = Some(name.to_string());
        app
    }

    async fn next_within(
        released: &mut (impl Stream<Item = ObjectRef<VisitorsApp>> + Unpin),
        wait: Duration,
    ) -> Option<String> {
        tokio::time::timeout(wait, released.next()).await.ok().flatten().map(|r| r.name)
    }

    /// The cache of the apps, holding `names`.
    fn apps(names: &[&str]) -> (Store<VisitorsApp>, Writer<VisitorsApp>) {
        let mut writer = Writer::default();
        for name in names {
            writer.apply_watcher_event(&watcher::Event::Apply(app(name)));
        }
        (writer.as_reader(), writer)
    }

    #[tokio::test(start_paused = true)]
    async fn status_wake_ups_wait_until_every_new_app_has_started_its_reconcile() {
        let hold = Hold::default();
        let (store, _writer) = apps(&["new", "started"]);
        let mut released = Box::pin(hold.clone().released(store));
        hold.news_of(&app("new"));
        assert!(hold.holding());
        hold.hold(ObjectRef::from_obj(&app("started")));
        hold.hold(ObjectRef::from_obj(&app("started")));
        assert_eq!(hold.held(), 1, "one wake-up per app");
        assert_eq!(next_within(&mut released, Duration::from_secs(120)).await, None, "held while 'new' waits");

        hold.reconciling(&app("new"));
        assert!(!hold.holding());
        assert_eq!(next_within(&mut released, Duration::from_secs(1)).await.as_deref(), Some("started"));
        assert_eq!(next_within(&mut released, Duration::from_secs(5)).await, None, "once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_is_held_at_most_max_hold() {
        let hold = Hold::default();
        let (store, _writer) = apps(&["never-reconciled", "started"]);
        let mut released = Box::pin(hold.clone().released(store));
        hold.news_of(&app("never-reconciled"));
        hold.hold(ObjectRef::from_obj(&app("started")));
        assert_eq!(next_within(&mut released, MAX_HOLD - Duration::from_secs(2)).await, None);
        assert_eq!(next_within(&mut released, Duration::from_secs(3)).await.as_deref(), Some("started"));
        assert!(!hold.holding(), "an app waits that long at most");
    }

    #[tokio::test(start_paused = true)]
    async fn an_app_deleted_before_its_reconcile_holds_nothing() {
        let hold = Hold::default();
        let (store, mut writer) = apps(&["deleted-early", "started"]);
        let mut released = Box::pin(hold.clone().released(store));
        hold.news_of(&app("deleted-early"));
        hold.hold(ObjectRef::from_obj(&app("started")));
        assert_eq!(next_within(&mut released, Duration::from_secs(5)).await, None);
        writer.apply_watcher_event(&watcher::Event::Delete(app("deleted-early")));
        assert_eq!(next_within(&mut released, Duration::from_secs(2)).await.as_deref(), Some("started"));
    }

    /// Releases the held wake-ups of app "waiting" one by one, each starting its reconcile at
    /// once, and says how many seconds after the previous one each came.
    async fn waits_between_reconciles(hold: &Hold, count: usize) -> Vec<u64> {
        let (store, _writer) = apps(&["waiting"]);
        let mut released = Box::pin(hold.clone().released(store));
        let mut waits = Vec::new();
        for _ in 0..count {
            let since = Instant::now();
            hold.pace(ObjectRef::from_obj(&app("waiting")));
            hold.pace(ObjectRef::from_obj(&app("waiting")));
            assert_eq!(hold.held(), 1, "several refreshes inside the wait make one");
            assert_eq!(next_within(&mut released, SLOWEST_LOOK * 2).await.as_deref(), Some("waiting"));
            waits.push(since.elapsed().as_secs());
            hold.reconciling(&app("waiting"));
        }
        waits
    }

    #[tokio::test(start_paused = true)]
    async fn status_refreshes_of_a_waiting_app_come_once_soon_then_once_a_minute() {
        let hold = Hold::default();
        hold.reconciling(&app("waiting"));
        assert_eq!(waits_between_reconciles(&hold, 4).await, [5, 60, 60, 60]);
    }

    #[tokio::test(start_paused = true)]
    async fn readiness_drift_and_a_new_spec_bring_the_pace_back_to_a_few_seconds() {
        let hold = Hold::default();
        let waiting = || ObjectRef::from_obj(&app("waiting"));
        hold.reconciling(&app("waiting"));
        waits_between_reconciles(&hold, 3).await;

        assert!(hold.wake(waiting(), News::Readiness), "a pod became ready: at once");
        hold.reconciling(&app("waiting"));
        assert_eq!(waits_between_reconciles(&hold, 2).await, [5, 60]);

        assert!(hold.wake(waiting(), News::Change), "drift: at once");
        hold.reconciling(&app("waiting"));
        assert_eq!(waits_between_reconciles(&hold, 1).await, [5]);

        hold.news_of(&app("waiting"));
        hold.reconciling(&app("waiting"));
        assert_eq!(waits_between_reconciles(&hold, 1).await, [5], "a new spec");
        assert!(!hold.wake(waiting(), News::Status), "a status refresh waits");
        assert!(!hold.wake(waiting(), News::Nothing));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_long_after_the_last_reconcile_comes_at_once() {
        let hold = Hold::default();
        hold.reconciling(&app("waiting"));
        waits_between_reconciles(&hold, 3).await;
        tokio::time::sleep(SLOWEST_LOOK).await;
        assert_eq!(waits_between_reconciles(&hold, 1).await, [0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_for_another_reason_takes_the_held_refresh_along() {
        let hold = Hold::default();
        hold.reconciling(&app("waiting"));
        hold.pace(ObjectRef::from_obj(&app("waiting")));
        assert_eq!(hold.held(), 1);
        hold.reconciling(&app("waiting"));
        assert_eq!(hold.held(), 0, "the reconcile sees what the refresh was for");

        hold.pace(ObjectRef::from_obj(&app("waiting")));
        hold.forget(&app("waiting"));
        assert_eq!(hold.held(), 0, "a deleted app's refresh is dropped");
    }

    /// A refresh waiting for the pace also waits for new apps; readiness waits for new apps only.
    #[tokio::test(start_paused = true)]
    async fn readiness_waits_for_new_apps_but_not_for_the_pace() {
        let hold = Hold::default();
        let (store, _writer) = apps(&["new", "waiting"]);
        let mut released = Box::pin(hold.clone().released(store));
        hold.reconciling(&app("waiting"));
        hold.news_of(&app("new"));
        hold.pace(ObjectRef::from_obj(&app("waiting")));
        assert!(!hold.wake(ObjectRef::from_obj(&app("waiting")), News::Readiness), "held while 'new' waits");
        assert_eq!(hold.held(), 1);
        assert_eq!(next_within(&mut released, Duration::from_secs(30)).await, None);
        hold.reconciling(&app("new"));
        assert_eq!(next_within(&mut released, Duration::from_secs(1)).await.as_deref(), Some("waiting"));
    }

    #[test]
    fn the_owner_of_a_child_is_its_visitors_app() {
        let sts = crate::build::mysql::statefulset(
            &book_app(),
            "ex-mysql-credentials",
            crate::build::mysql::Kept::default(),
            None,
        );
        let owner = owner_of(&sts).expect("an owner");
        assert_eq!((owner.name.as_str(), owner.namespace.as_deref()), ("ex", Some("shop")));
    }
}
