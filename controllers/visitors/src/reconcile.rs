//! The reconcile of a VisitorsApp — validate → build → apply → status — and its error
//! policy. A deleted app goes to [`crate::cleanup`] first.

use std::sync::Arc;

use controller_common::reconcile::api_err;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use visitors_api::conditions::{self, READY, REASON_INVALID_SPEC};
use visitors_api::visitors_app::reason::{CREDENTIALS_LOST, CREDENTIALS_SECRET_CONFLICT, INVALID_CREDENTIALS_SECRET};
use visitors_api::{VisitorsApp, VisitorsAppStatus};

use crate::context::{Context, Error};
use crate::seen::News;
use crate::status;
use crate::validate::{self, Invalid};

/// How long a reconcile waits for the caches' initial list at start-up.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The entry point the kube `Controller` calls.
pub async fn reconcile(app: Arc<VisitorsApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.runtime.instrumented(app.as_ref(), async { Reconciler::new(&app, &ctx)?.reconcile().await }).await
}

/// kube's error policy: count the failure, tell the user by a Warning Event (repeats are
/// aggregated into one Event series), retry after the object's backoff. A conflict only means
/// the app changed meanwhile, and the retry sees the new version: no Event for that.
pub fn error_policy(app: Arc<VisitorsApp>, error: &Error, ctx: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&ctx.runtime, app, error)
}

/// One reconcile of one app. Its steps live in the modules of the crate: [`crate::cleanup`],
/// [`crate::credentials`], [`crate::apply`], [`crate::db`]; this module holds the pipeline
/// that calls them and the status it ends with.
pub(crate) struct Reconciler<'a> {
    pub(crate) app: &'a VisitorsApp,
    pub(crate) ctx: &'a Context,
    pub(crate) name: String,
    pub(crate) namespace: String,
    /// The most a watch reported of a child while this reconcile's apply of it was on its way
    /// (see [`crate::seen::Seen::record_apply`]): the app needs another look.
    reported: std::sync::Mutex<News>,
}

impl<'a> Reconciler<'a> {
    fn new(app: &'a VisitorsApp, ctx: &'a Context) -> Result<Self, Error> {
        let namespace = app.namespace().ok_or_else(|| Error::NoNamespace(app.name_any()))?;
        Ok(Self { app, ctx, name: app.name_any(), namespace, reported: std::sync::Mutex::new(News::Nothing) })
    }

    pub(crate) fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    {
        Api::namespaced(self.ctx.runtime.client.clone(), &self.namespace)
    }

    async fn reconcile(&self) -> Result<Action, Error> {
        self.ctx.hold.reconciling(self.app);
        self.ctx.seen.record(self.app);
        if self.app.metadata.deletion_timestamp.is_some() {
            return self.clean_up().await;
        }
        if !self.ctx.stores.ready() {
            // Only right after start-up: without the caches the claim template and the
            // existing backend are unknown, so wait for them instead of guessing.
            return Ok(Action::requeue(CACHE_WAIT));
        }
        self.add_finalizer().await?;
        if let Err(invalid) = validate::spec(&self.app.spec) {
            return self.reject(invalid).await;
        }
        // Checked at the first reconcile of each spec and once a resync period; in between only
        // the database check needs the credentials, and reads them then.
        let credentials = if self.ctx.seen.credentials_checked_within(self.app, self.ctx.runtime.resync) {
            None
        } else {
            match self.credentials().await? {
                Ok(credentials) => Some(credentials),
                Err(invalid) => return self.reject(invalid).await,
            }
        };
        let tls = match self.serving_tls().await? {
            Ok(tls) => tls,
            Err(invalid) => return self.reject(invalid).await,
        };
        let (observed, failed) = match self.apply_children(credentials, tls.as_ref()).await? {
            Ok(applied) => applied,
            Err(invalid) => return self.reject(invalid).await,
        };
        let status = status::compute(self.app, &observed, now());
        let ready = conditions::is_true(&status.conditions, READY);
        if readiness(self.app.status.as_ref()) != readiness(Some(&status)) {
            self.ctx.hold.progressed(self.app);
        }
        self.publish(status).await?;
        if let Some(first) = failed.into_iter().next() {
            // The status names every failed child; the error policy backs off and tells.
            return Err(first);
        }
        let runtime = &self.ctx.runtime;
        let action = match (ready, observed.waits_for_the_query()) {
            // The user's certificate Secret is not watched: a replaced one is seen here.
            (true, _) if tls.is_some() && !crate::build::tls::is_generated(self.app) => {
                Action::requeue(self.tls_recheck())
            }
            (true, _) => runtime.converged(self.app),
            // No watch sees the database start answering: poll, backing off to about a minute.
            (false, true) => runtime.waiting(self.app),
            // Workloads becoming ready wake the app through the owned-object watches.
            (false, false) => runtime.watching(self.app),
        };
        Ok(self.look_again_if_reported(action))
    }

    /// A watch reported a child while this reconcile's apply of it was on its way, other than
    /// the apply's own echo: the wake-up it did not cause comes now, or as [`Hold::wake`] says.
    fn look_again_if_reported(&self, action: Action) -> Action {
        let reported = *self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.ctx.hold.wake(ObjectRef::from_obj(self.app), reported) {
            return Action::requeue(controller_common::watch::DEBOUNCE);
        }
        action
    }

    pub(crate) fn note_reported(&self, news: News) {
        let mut reported = self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *reported = match (*reported, news) {
            (News::Change, _) | (_, News::Change) => News::Change,
            (News::Readiness, _) | (_, News::Readiness) => News::Readiness,
            (News::Status, _) | (_, News::Status) => News::Status,
            _ => News::Nothing,
        };
    }

    /// The spec (or an object it names) is unusable: say so in status and once as an Event,
    /// and do not retry hot.
    pub(crate) async fn reject(&self, invalid: Invalid) -> Result<Action, Error> {
        tracing::info!(reason = invalid.reason(), problem = %invalid, "not reconciling");
        let status = status::invalid(self.app, &invalid, now());
        self.publish(status).await?;
        Ok(if invalid.fixed_elsewhere() {
            self.ctx.runtime.waiting(self.app)
        } else {
            self.ctx.runtime.until_spec_changes(self.app)
        })
    }

    // ----- status -----

    /// Writes the status when it changed, and announces a change of the Ready condition that
    /// matters to a user: a problem (Warning), becoming ready, and losing readiness. The progress
    /// of a new app is in its status only: at scale an Event per app and step is thousands of
    /// writes to the API server.
    async fn publish(&self, status: VisitorsAppStatus) -> Result<(), Error> {
        let before = self.app.status.as_ref().and_then(|s| conditions::find(&s.conditions, READY)).cloned();
        let written = self
            .ctx
            .runtime
            .write_status(self.app, self.app.status.as_ref(), &status)
            .await
            .map_err(api_err(format!("writing the status of VisitorsApp {}", self.name)))?;
        if !written {
            return Ok(());
        }
        let Some(after) = conditions::find(&status.conditions, READY) else { return Ok(()) };
        let changed = before
            .as_ref()
            .is_none_or(|b| (&b.status, &b.reason, &b.message) != (&after.status, &after.reason, &after.message));
        let was_ready = before.as_ref().is_some_and(|b| b.status == "True");
        if changed {
            let events = &self.ctx.runtime.events;
            match (after.status.as_str(), after.reason.as_str()) {
                // The error policy's Warning Event says it, with the API error.
                (_, status::CHILD_APPLY_FAILED) => {}
                ("True", _) => {
                    events
                        .normal(self.app, visitors_api::visitors_app::reason::READY, "Reconcile", after.message.clone())
                        .await
                }
                (_, reason) if is_problem(reason) => {
                    events.warning(self.app, reason, "Reconcile", after.message.clone()).await
                }
                (_, reason) if was_ready => events.normal(self.app, reason, "Reconcile", after.message.clone()).await,
                _ => {}
            }
        }
        Ok(())
    }
}

/// Reasons that need a user's action (the rest are progress).
fn is_problem(reason: &str) -> bool {
    [REASON_INVALID_SPEC, INVALID_CREDENTIALS_SECRET, CREDENTIALS_LOST, CREDENTIALS_SECRET_CONFLICT].contains(&reason)
}

pub(crate) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// Whether each condition holds: what a change of the app's readiness moves.
fn readiness(status: Option<&VisitorsAppStatus>) -> Vec<(&str, &str)> {
    status.map_or_else(Vec::new, |status| {
        status.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect()
    })
}
