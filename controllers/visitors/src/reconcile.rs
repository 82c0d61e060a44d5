//! The reconcile of a VisitorsApp and its error policy. A deleted app goes through
//! [`crate::cleanup`]; a live one down one pipeline, each step in its own module:
//! [`crate::validate`] → [`crate::credentials`] and [`crate::tls`] → [`crate::build`] (the whole
//! desired set, pure) → [`crate::apply`] (every child but the backend) → [`crate::replication`]
//! (with replicas: the servers' manager) → [`crate::database`] (the check) → [`crate::apply`]
//! (the backend, once the database is ready) → [`crate::status`] (pure), written here, and the
//! next look ([`crate::wake::next_look`]). A step that cannot go on stops the pipeline with a
//! [`Step`] that the status names.

use std::sync::Arc;

use controller_common::error::api_err;
use controller_common::ready;
use controller_common::step::Step;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use visitors_api::conditions::{self, READY};
use visitors_api::{VisitorsApp, VisitorsAppStatus};

use crate::apply::{self, Applied, Existing};
use crate::build::{self, Inputs};
use crate::context::{AppScope, Context, Error};
use crate::status::{self, Announcement, Facts};
use crate::validate::{self, ValidApp};
use crate::{cleanup, credentials, database, replication, tls, wake};

/// How long a reconcile waits for the caches' initial list at start-up.
const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The entry point the kube `Controller` calls.
pub async fn reconcile(app: Arc<VisitorsApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.runtime.instrumented(app.as_ref(), async { reconcile_app(&AppScope::of(&app, &ctx)?).await }).await
}

/// kube's error policy: count the failure, tell the user by a Warning Event (repeats are
/// aggregated into one Event series), retry after the object's backoff. A conflict only means
/// the app changed meanwhile, and the retry sees the new version: no Event for that.
pub fn error_policy(app: Arc<VisitorsApp>, error: &Error, ctx: Arc<Context>) -> Action {
    controller_common::reconcile::error_policy(&ctx.runtime, app, error)
}

async fn reconcile_app(scope: &AppScope<'_>) -> Result<Action, Error> {
    let (app, ctx) = (scope.app, scope.ctx);
    ctx.hold.reconciling(app);
    ctx.seen.record(app);
    if app.metadata.deletion_timestamp.is_some() {
        return cleanup::reconcile_deleted(scope).await;
    }
    if !ctx.stores.ready() {
        // Only right after start-up: without the caches the claim template and the existing
        // backend are unknown, so wait for them instead of guessing.
        return Ok(Action::requeue(CACHE_WAIT));
    }
    cleanup::add_finalizer(scope).await?;
    let valid = match validate::app(app) {
        Ok(valid) => valid,
        Err(invalid) => return stop(scope, Step::<()>::from(invalid)).await,
    };
    // Boxed: the steps' futures inline would make the reconcile's future too big for a thread's
    // stack.
    match Box::pin(converge(scope, &valid)).await? {
        Step::Ready((observed, applied)) => Box::pin(report(scope, &observed, applied)).await,
        stopped => Box::pin(stop(scope, stopped)).await,
    }
}

/// The steps of a live app with a valid spec, in order: what they found and applied.
async fn converge(scope: &AppScope<'_>, valid: &ValidApp<'_>) -> Result<Step<(Facts, Applied)>, Error> {
    let (app, ctx) = (scope.app, scope.ctx);
    // Read at the first reconcile of each spec and once a resync period; side by side, as
    // neither needs the other (a new app's first reconcile waits for one round trip less).
    let (credentials, tls) =
        futures::join!(Box::pin(credentials::current(scope, valid)), Box::pin(tls::serving(scope, valid)));
    let credentials = ready!(credentials?);
    let tls = ready!(tls?);
    let existing = Existing::cached(scope);
    let quiesced_by = ctx.stores.quiescing_restore(&scope.namespace, &scope.name);
    let inputs = Inputs {
        credentials_secret: &valid.credentials.name,
        kept: existing.kept(),
        tls: tls.as_ref(),
        quiesced: quiesced_by.is_some(),
    };
    // Boxed, as the steps' futures are: seven objects inline would make the reconcile's future
    // too big for a thread's stack.
    let desired = Box::new(build::children(app, &inputs));
    let mut applied = Box::pin(apply::all_but_the_backend(scope, &desired, &inputs, &existing)).await;
    let replication = match app.spec.replicated() {
        true => Some(Box::pin(replication::manage(&scope.replication(&credentials, tls.as_ref()))).await?),
        false => None,
    };
    let labels = scope.metric_labels();
    match &replication {
        Some(report) => {
            let acknowledgements = app.spec.durability() == visitors_api::visitors_app::Durability::Acknowledged;
            ctx.metrics.observe(&labels, app.spec.mysql_replicas() - 1, report, acknowledgements);
        }
        None if app.status.as_ref().is_some_and(|s| s.replication.is_some()) => {
            ctx.metrics.forget(&labels, app.spec.mysql_replicas());
        }
        None => {}
    }
    let check = ctx.database_check.as_deref();
    let database = Box::pin(database::check::check(check, app, applied.mysql.ready, &credentials, tls.as_ref())).await;
    // A restore stops the backend even while the database is not ready.
    let backend_held = !database.is_ready() && quiesced_by.is_none();
    if backend_held {
        applied.backend = existing.backend.as_ref().map(|backend| backend.workload.clone());
    } else {
        Box::pin(apply::backend(scope, &desired, &existing, &mut applied)).await;
    }
    let observed = Facts {
        secret: valid.credentials.name.clone(),
        mysql: applied.mysql.clone(),
        database,
        backend: applied.backend.clone(),
        backend_held,
        quiesced_by,
        frontend: applied.frontend.clone(),
        tls,
        failed_children: applied.failed.iter().map(ToString::to_string).collect(),
        replication,
    };
    Ok(Step::Ready((observed, applied)))
}

/// Writes the status of what the pipeline observed, and says when to look again.
async fn report(scope: &AppScope<'_>, observed: &Facts, applied: Applied) -> Result<Action, Error> {
    let (app, ctx, runtime) = (scope.app, scope.ctx, scope.runtime());
    let status = status::compute(app, observed, now());
    let ready = conditions::is_true(&status.conditions, READY);
    if readiness(app.status.as_ref()) != readiness(Some(&status)) {
        ctx.hold.progressed(app);
    }
    publish(scope, status).await?;
    if let Some(first) = applied.failed.into_iter().next() {
        // The status names every failed child; the error policy backs off and tells.
        return Err(first);
    }
    let certificate_recheck =
        (observed.tls.is_some() && !build::tls::is_generated(app)).then(|| tls::recheck(app, runtime.resync));
    let ended = wake::Ended {
        ready,
        waits_for_the_query: observed.waits_for_the_query(),
        certificate_recheck,
        replication_busy: observed.replication.as_ref().map(|report| report.busy),
    };
    let action = wake::next_look(runtime, app, ended);
    // A watch reported a child while this reconcile's apply of it was on its way, other than
    // the apply's own echo: the wake-up it did not cause comes now, or as `Hold::wake` says.
    if ctx.hold.wake(ObjectRef::from_obj(app), applied.reported) {
        return Ok(Action::requeue(controller_common::watch::DEBOUNCE));
    }
    Ok(action)
}

/// A step stopped the pipeline: say why in the status (and, for a problem, once as an Event),
/// and do not retry hot. An invalid spec waits for its next change; what waits for another
/// object (a Secret, a volume: not watched) is looked at again after a backoff.
async fn stop<T>(scope: &AppScope<'_>, stopped: Step<T>) -> Result<Action, Error> {
    let runtime = scope.runtime();
    let Some((reason, message)) = stopped.stopped_because() else { return Ok(runtime.watching(scope.app)) };
    tracing::info!(reason, problem = %message, "not reconciling");
    publish(scope, status::stopped(scope.app, reason, message, now())).await?;
    Ok(match stopped {
        Step::InvalidSpec(_) | Step::Blocked(_) => runtime.until_spec_changes(scope.app),
        Step::Wait(_) | Step::Ready(_) => runtime.waiting(scope.app),
    })
}

/// Writes the status when it changed, and tells a change of the Ready condition that matters
/// to a user by an Event (see [`status::announcement`]).
async fn publish(scope: &AppScope<'_>, status: VisitorsAppStatus) -> Result<(), Error> {
    let (app, runtime) = (scope.app, scope.runtime());
    let written = runtime
        .write_status(app, app.status.as_ref(), &status)
        .await
        .map_err(api_err(format!("writing the status of VisitorsApp {}", scope.name)))?;
    let before = app.status.as_ref().and_then(|s| conditions::find(&s.conditions, READY));
    let told = conditions::find(&status.conditions, READY).and_then(|after| status::announcement(before, after));
    match told.filter(|_| written) {
        Some(Announcement::Normal { reason, note }) => runtime.events.normal(app, &reason, "Reconcile", note).await,
        Some(Announcement::Warning { reason, note }) => runtime.events.warning(app, &reason, "Reconcile", note).await,
        None => {}
    }
    Ok(())
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Whether each condition holds: what a change of the app's readiness moves.
fn readiness(status: Option<&VisitorsAppStatus>) -> Vec<(&str, &str)> {
    status.map_or_else(Vec::new, |status| {
        status.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect()
    })
}
