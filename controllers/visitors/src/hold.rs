//! The first reconcile of a new app (or of a new spec) goes before the reconciles that only
//! refresh an app's status. When every worker is busy, kube's scheduler hands out the pending
//! reconciles in no particular order, so in a burst of new apps each app's first reconcile
//! competed at random with the reconciles woken by the StatefulSet and Deployment controllers
//! counting the pods of apps already started, and the last new app waited for nearly all of them.
//!
//! A wake-up that only moves what the app's status reads of a workload ([`crate::seen::News::Status`])
//! is therefore held while any app waits for the reconcile of news of its own, and released
//! once none does; several held wake-ups of one app make one reconcile. Drift, deletions and
//! spec changes are never held. An app deleted before its reconcile no longer counts as
//! waiting. A wake-up is held at most [`MAX_HOLD`], and an app counts as waiting at most that
//! long, so a status is late by that at worst, and only while new apps keep coming: a burst of
//! a thousand new apps takes one to two minutes, and its status refreshes wait for its end.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use visitors_api::VisitorsApp;

/// The longest a status wake-up is held, and the longest an app counts as waiting.
pub const MAX_HOLD: Duration = Duration::from_secs(300);
/// How often held wake-ups look for apps deleted while they waited.
const RECHECK: Duration = Duration::from_secs(1);

/// Shared by the watches (which report news and hold wake-ups) and the reconciles (which say
/// when an app's reconcile starts).
#[derive(Clone, Default)]
pub struct Hold {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Apps whose watch reported news no reconcile has started on yet, since when.
    waiting: HashMap<ObjectRef<VisitorsApp>, Instant>,
    /// Held wake-ups in the order they came, each app once.
    held: VecDeque<(ObjectRef<VisitorsApp>, Instant)>,
    queued: HashSet<ObjectRef<VisitorsApp>>,
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
        let Some((app, since)) = self.held.front().cloned() else { return Next::WaitForChange };
        if self.waiting.is_empty() || now.duration_since(since) >= MAX_HOLD {
            self.held.pop_front();
            self.queued.remove(&app);
            return Next::Release(app);
        }
        let oldest_waiter = self.waiting.values().min().copied().unwrap_or(now);
        Next::WaitUntil((since + MAX_HOLD).min(oldest_waiter + MAX_HOLD).min(now + RECHECK))
    }
}

fn app_ref(app: &VisitorsApp) -> ObjectRef<VisitorsApp> {
    ObjectRef::from_obj(app)
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
    /// The app's watch reported news (a new app, a new spec): its reconcile goes first.
    pub fn news_of(&self, app: &VisitorsApp) {
        self.lock().waiting.entry(app_ref(app)).or_insert_with(Instant::now);
    }

    /// A reconcile of `app` starts: it no longer waits.
    pub fn reconciling(&self, app: &VisitorsApp) {
        let mut state = self.lock();
        if state.waiting.remove(&app_ref(app)).is_some() && state.waiting.is_empty() {
            drop(state);
            self.changed.notify_one();
        }
    }

    /// Whether a status wake-up should be held now: some app waits for a reconcile of its news.
    pub fn holding(&self) -> bool {
        let mut state = self.lock();
        state.forget_stale_waiters(Instant::now());
        !state.waiting.is_empty()
    }

    /// Holds a wake-up of `app` until no app waits (or [`MAX_HOLD`]); one per app at a time.
    pub fn hold(&self, app: ObjectRef<VisitorsApp>) {
        let mut state = self.lock();
        if state.queued.insert(app.clone()) {
            state.held.push_back((app, Instant::now()));
            drop(state);
            self.changed.notify_one();
        }
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

    #[test]
    fn the_owner_of_a_child_is_its_visitors_app() {
        let sts = crate::build::mysql::statefulset(&book_app(), "ex-mysql-credentials", None);
        let owner = owner_of(&sts).expect("an owner");
        assert_eq!((owner.name.as_str(), owner.namespace.as_deref()), ("ex", Some("shop")));
    }
}
