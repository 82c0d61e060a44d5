//! When an app is looked at again, and why: every way a VisitorsApp's reconcile is started.
//!
//! **News from a watch** wakes the app at once ([`watches`]):
//! - the app itself: a new generation, its finalizers, its deletion, a switchover annotation
//!   (status writes never do: [`seen::Fingerprint`] of the app);
//! - a child (the MySQL StatefulSet, the Deployments, the Services): a change no reconcile made
//!   (drift) or its deletion, at once; a change of what the app's readiness depends on (a pod
//!   ready, a rollout done, readiness lost) at once unless new apps wait (below); a status
//!   refresh that moves only counts, at the app's pace ([`hold`]). The echoes of the
//!   reconcile's own applies are no news ([`seen`]);
//! - a MySQLRestore that targets the app: every change (its phase stops and starts the
//!   backend);
//! - a MySQL pod of a replicated app: created, deleted, or its readiness changed (a failover
//!   starts there).
//!
//! **Held wake-ups** ([`hold`]): while any app waits for the reconcile of news of its own (a new
//! app, a new spec), status refreshes wait, so that first reconciles come first; and a waiting
//! app's status refreshes come no sooner than 5 s after its last reconcile, then a minute.
//!
//! **The reconcile's own requeue** ([`next_look`]): a replicated app every 2 s (every half
//! second while something is under way: a failover, a switchover, a demoted server's clients
//! being sent on), since no watch sees a primary stop answering; an app waiting for its database
//! to answer the controller's query on a backoff growing to about a minute (no watch sees
//! that); an app whose certificate comes from the user's Secret once a minute (that Secret is not
//! watched); a converged app at the resync period; an invalid spec never (its next change
//! wakes it). A failed reconcile is retried after the app's backoff (the error policy).
//!
//! [`cache`] is what the watches keep of each workload ([`workload`]: what its status says),
//! which the reconcile reads instead of the API.

pub mod cache;
pub mod hold;
pub mod seen;
pub mod watches;
pub mod workload;

use std::time::Duration;

use controller_common::Runtime;
use kube::runtime::controller::Action;
use visitors_api::VisitorsApp;

/// How the reconcile of a live app ended, for when to look at it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The app is Ready.
    pub ready: bool,
    /// The database's pod is ready but the controller's query does not answer yet.
    pub waits_for_the_query: bool,
    /// MySQL serves a certificate of the user's Secret, which is not watched: after how long it
    /// is read again.
    pub certificate_recheck: Option<Duration>,
    /// A replicated app: whether something is under way among its servers.
    pub replication_busy: Option<bool>,
}

/// When the app of a reconcile that ended as `ended` is looked at again, unless a watch wakes it
/// sooner.
pub fn next_look(runtime: &Runtime, app: &VisitorsApp, ended: Ended) -> Action {
    // Each arm also keeps the app's backoff as its case needs (reset once converged, advanced
    // while waiting), replicated or not.
    let action = match (ended.ready, ended.waits_for_the_query, ended.certificate_recheck) {
        (true, _, Some(recheck)) => Action::requeue(recheck),
        (true, _, None) => runtime.converged(app),
        (false, true, _) => runtime.waiting(app),
        (false, false, _) => runtime.watching(app),
    };
    match ended.replication_busy {
        Some(true) => Action::requeue(crate::replication::BUSY_LOOK_INTERVAL),
        Some(false) => Action::requeue(crate::replication::LOOK_INTERVAL),
        None => action,
    }
}
