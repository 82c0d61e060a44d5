//! The first reconcile of a new app (or of a new spec) goes before the reconciles that only
//! refresh an app's status. When every worker is busy, kube's scheduler hands out the pending
//! reconciles in no particular order, so in a burst of new apps each app's first reconcile
//! competed at random with the reconciles woken by the StatefulSet and Deployment controllers
//! counting the pods of apps already started, and the last new app waited for nearly all of them.
//!
//! A wake-up that only moves what the app's status reads of a workload ([`crate::seen::News::Status`])
//! is therefore held while any app waits for the reconcile of news of its own, and released
//! once none does; several held wake-ups of one app make one reconcile. Drift, deletions and
//! spec changes are never held. A wake-up is held at most [`MAX_HOLD`], and an app counts as
//! waiting at most that long (one deleted before its first reconcile never has one), so a status
//! is late by a minute at worst, and only while new apps keep coming.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use visitors_api::VisitorsApp;

/// The longest a status wake-up is held, and the longest an app counts as waiting.
pub const MAX_HOLD: Duration = Duration::from_secs(60);

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

    fn next(&mut self, now: Instant) -> Next {
        self.forget_stale_waiters(now);
        let Some((app, since)) = self.held.front().cloned() else { return Next::WaitForChange };
        if self.waiting.is_empty() || now.duration_since(since) >= MAX_HOLD {
            self.held.pop_front();
            self.queued.remove(&app);
            return Next::Release(app);
        }
        let oldest_waiter = self.waiting.values().min().copied().unwrap_or(now);
        Next::WaitUntil((since + MAX_HOLD).min(oldest_waiter + MAX_HOLD))
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

    /// The held wake-ups as they are released: for the controller's `reconcile_on`.
    pub fn released(self) -> impl Stream<Item = ObjectRef<VisitorsApp>> + Send + 'static {
        futures::stream::unfold(self, |hold| async move {
            loop {
                let notify = hold.changed.clone();
                let changed = notify.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let next = hold.lock().next(Instant::now());
                match next {
                    Next::Release(app) => return Some((app, hold)),
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

    #[tokio::test(start_paused = true)]
    async fn status_wake_ups_wait_until_every_new_app_has_started_its_reconcile() {
        let hold = Hold::default();
        let mut released = Box::pin(hold.clone().released());
        hold.news_of(&app("new"));
        assert!(hold.holding());
        hold.hold(ObjectRef::from_obj(&app("started")));
        hold.hold(ObjectRef::from_obj(&app("started")));
        assert_eq!(hold.held(), 1, "one wake-up per app");
        assert_eq!(next_within(&mut released, Duration::from_secs(5)).await, None, "held while 'new' waits");

        hold.reconciling(&app("new"));
        assert!(!hold.holding());
        assert_eq!(next_within(&mut released, Duration::from_secs(1)).await.as_deref(), Some("started"));
        assert_eq!(next_within(&mut released, Duration::from_secs(5)).await, None, "once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_is_held_a_minute_at_most() {
        let hold = Hold::default();
        let mut released = Box::pin(hold.clone().released());
        hold.news_of(&app("never-reconciled"));
        hold.hold(ObjectRef::from_obj(&app("started")));
        assert_eq!(next_within(&mut released, MAX_HOLD - Duration::from_secs(1)).await, None);
        assert_eq!(next_within(&mut released, Duration::from_secs(2)).await.as_deref(), Some("started"));
        assert!(!hold.holding(), "an app waits a minute at most");
    }

    #[test]
    fn the_owner_of_a_child_is_its_visitors_app() {
        let sts = crate::build::mysql::statefulset(&book_app(), "ex-mysql-credentials", None);
        let owner = owner_of(&sts).expect("an owner");
        assert_eq!((owner.name.as_str(), owner.namespace.as_deref()), ("ex", Some("shop")));
    }
}
