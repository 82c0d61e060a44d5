//! A successful run's restore drill: start a throwaway MySQL → once it is ready, the agent's
//! Job restores the run into it and compares (`verify --deep`) → the result into
//! `status.drill` → the drill's Secret, pod (with its volume) and Job deleted. A drill holds no
//! database Lease and never touches the app's MySQL: it reads the stored backup only. Every
//! step reads the API, so a restarted controller picks a drill up where it is.

use std::time::Duration;

use controller_common::agent_job::{self, JobEnd};
use controller_common::certificates;
use controller_common::error::{ApiError, api_err};
use controller_common::kind::NamespacedKind;
use controller_common::operation::DatabaseOperation;
use controller_common::password::random_password;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use visitors_agent_contract::summary::Operation;
use visitors_api::backup::BackupMethod;
use visitors_api::drill::{Drill, DrillPhase, DrillStatus, reason};
use visitors_api::labels::names;
use visitors_api::visitors_app::DEFAULT_MYSQL_IMAGE;
use visitors_api::{MySQLBackup, VisitorsApp};

use crate::build::drill::{self as build, job_name};
use crate::context::{Context, Error};
use crate::status;

/// How often a drill whose database is starting looks again (the pod watch may wake it sooner).
const STARTING_POLL: Duration = Duration::from_secs(5);
/// Time the pod and Job deadlines get to act before the controller ends a drill itself.
const DEADLINE_GRACE: Duration = Duration::from_secs(30);

/// Reconciles the drill of a finished run, if it owes or runs one; `None` when it has nothing to
/// do (the run is converged).
pub async fn reconcile(run: &MySQLBackup, namespace: &str, ctx: &Context) -> Result<Option<Action>, Error> {
    let current = run.status.as_ref().and_then(|s| s.drill.clone());
    let steps = DrillSteps { run, ctx, op: DatabaseOperation::of(run, &ctx.runtime, namespace) };
    match current {
        Some(drill) if !drill.has_ended() => steps.follow(drill).await.map(Some),
        Some(drill) if drill.job_name.is_some() => steps.tear_down(drill).await.map(Some),
        _ => match run.drill_due() {
            Some(requested) => steps.start(requested).await.map(Some),
            None => Ok(None),
        },
    }
}

struct DrillSteps<'a> {
    run: &'a MySQLBackup,
    ctx: &'a Context,
    op: DatabaseOperation<'a, MySQLBackup>,
}

impl DrillSteps<'_> {
    /// The drill failed before anything of it was created: there is nothing to clean up.
    async fn failed_before_start(&self, pending: DrillStatus, message: String) -> Result<Action, Error> {
        let failed =
            DrillStatus { job_name: None, ..status::drill_failed(pending, reason::DRILL_ERROR, message, now()) };
        self.publish(failed.clone()).await?;
        self.announce(&failed).await;
        Ok(self.ctx.runtime.converged(self.run))
    }

    /// The drill's Secret: a new root password and a certificate from a CA made for this drill
    /// alone, valid a day past the drill's deadline.
    fn drill_secret(&self) -> Result<k8s_openapi::api::core::v1::Secret, certificates::CertificateError> {
        let now = jiff::Timestamp::now();
        let validity = jiff::SignedDuration::from_secs(self.settings().active_deadline_seconds() + 86_400);
        let name = build::database_name(self.run);
        let certificate = certificates::new_authority(&format!("{name} CA"), now).and_then(|ca| {
            Ok((certificates::issue_server(&ca, &name, std::slice::from_ref(&name), now, validity)?, ca))
        });
        let (server, ca) = certificate?;
        Ok(build::secret(self.run, &random_password(), &server, &ca.certificate_pem))
    }

    fn settings(&self) -> Drill {
        self.run.spec.drill.clone().unwrap_or_default()
    }

    /// Creates the Secret and the throwaway MySQL, and records the drill as Pending; first
    /// waits until the objects of an earlier drill are gone (a pod or Job still terminating
    /// would otherwise be taken for this drill's).
    async fn start(&self, requested: Timestamp) -> Result<Action, Error> {
        match self.earlier_drill_left(requested).await? {
            Leftover::None => {}
            Leftover::ThisDrills => {
                // Made by a reconcile whose status this one has not seen (read from the cache
                // before it arrived) or whose status write was lost: the drill goes on with it.
                // Deleting it would end this very drill as DatabaseLost. Recorded again only
                // if the stored status does not hold it: it may have moved on since (Running).
                if !self.stored_drill_answers(requested).await? {
                    let pending = status::drill_pending(Time(requested), &job_name(self.run), now());
                    self.publish(pending).await?;
                }
                return Ok(Action::requeue(STARTING_POLL));
            }
            Leftover::Ours(left) => {
                // Still terminating, or created by a reconcile whose status write was lost (no
                // drill records it): deleted (again), and waited for.
                tracing::info!("a new drill waits for {left} of an earlier one to be gone");
                self.delete_if_ours::<Job>("Job", &job_name(self.run)).await?;
                self.delete_if_ours::<Pod>("Pod", &build::database_name(self.run)).await?;
                return Ok(Action::requeue(STARTING_POLL));
            }
            Leftover::Foreign(left) => {
                let message = format!("{left} exists but does not belong to this run; delete or rename it");
                let pending = status::drill_pending(Time(requested), &job_name(self.run), now());
                return self.failed_before_start(pending, message).await;
            }
        }
        let source = self.drill_source().await?;
        let settings = self.settings();
        let pending = status::drill_pending(Time(requested), &job_name(self.run), now());
        let secret = match self.drill_secret() {
            Ok(secret) => secret,
            Err(problem) => {
                let message = format!("generating the drill database's certificate failed: {problem}");
                return self.failed_before_start(pending, message).await;
            }
        };
        // A Secret of the drill's name that exists (left by an earlier attempt whose pod was
        // deleted above) is used as it is: the new pod reads its password from it.
        for created in [
            self.op.create(&secret, "Secret").await,
            self.op
                .create(
                    &build::database_pod_for(self.run, &settings, &source, &self.ctx.settings.inputs(), requested),
                    "Pod",
                )
                .await,
        ] {
            if let Err(error) = created {
                return self.refused(pending, error).await;
            }
        }
        let drill = pending;
        self.publish(drill).await?;
        let note = format!(
            "restore drill started: MySQL {} in pod {} on a {} GiB volume",
            source.image,
            build::database_name(self.run),
            build::volume_gib(self.run)
        );
        self.ctx.runtime.events.normal(self.run, "DrillStarted", "Drill", note).await;
        Ok(Action::requeue(STARTING_POLL))
    }

    /// The API server refused to create the drill's Secret or database for good (admission, a
    /// quota, an invalid object): the drill fails saying why, instead of retrying for ever.
    /// Other errors fail the reconcile, which is retried.
    async fn refused(&self, pending: DrillStatus, error: ApiError) -> Result<Action, Error> {
        let kube::Error::Api(status) = &error.source else { return Err(error.into()) };
        if ![400, 403, 422].contains(&status.code) {
            return Err(error.into());
        }
        // A Secret's refusal gives its reason and code only: the server's message may quote it.
        let why =
            if error.action.starts_with("creating Secret") { status.reason.clone() } else { status.message.clone() };
        let message = format!("{} was refused by the API server ({}): {why}", error.action, status.code);
        let failed = status::drill_failed(pending, reason::DRILL_ERROR, message, now());
        self.end(failed).await
    }

    /// Whether the run's stored status (read from the API server, not the cache) already holds
    /// the drill requested at `requested`.
    async fn stored_drill_answers(&self, requested: Timestamp) -> Result<bool, Error> {
        let name = self.run.name_any();
        let stored = self.op.api::<MySQLBackup>().get_status(&name).await;
        let stored = stored.map_err(api_err(format!("reading the status of MySQLBackup {name}")))?;
        let drill = stored.status.and_then(|s| s.drill);
        Ok(drill.is_some_and(|d| d.requested_at.0.as_second() == requested.as_second()))
    }

    /// What of an earlier drill is still there: a pod or Job of the drill's name, this run's
    /// (being deleted, or left by a reconcile whose status write was lost) or someone else's;
    /// or the database of the drill requested at `requested` itself.
    async fn earlier_drill_left(&self, requested: Timestamp) -> Result<Leftover, Error> {
        let pod = build::database_name(self.run);
        if let Some(found) = self.op.api::<Pod>().get_opt(&pod).await.map_err(api_err(format!("reading Pod {pod}")))? {
            if self.op.owns(&found) && build::serves_request(&found, requested) {
                return Ok(Leftover::ThisDrills);
            }
            return Ok(self.leftover(&found, format!("Pod {pod}")));
        }
        let job = job_name(self.run);
        Ok(match self.op.job(&job).await? {
            Some(found) => self.leftover(&found, format!("Job {job}")),
            None => Leftover::None,
        })
    }

    fn leftover<K: Resource>(&self, object: &K, what: String) -> Leftover {
        if self.op.owns(object) { Leftover::Ours(what) } else { Leftover::Foreign(what) }
    }

    /// The app's MySQL image, so that the drill restores into the server the app runs (the
    /// default image when the app is gone), and the Secret of its root password.
    async fn drill_source(&self) -> Result<build::DrillSource, Error> {
        let app = &self.run.spec.source.visitors_app;
        let found =
            self.op.api::<VisitorsApp>().get_opt(app).await.map_err(api_err(format!("reading VisitorsApp {app}")))?;
        let image = found.as_ref().map_or(DEFAULT_MYSQL_IMAGE, |app| app.spec.mysql_image()).to_string();
        let credentials_secret =
            found.and_then(|app| app.spec.credentials_secret.clone()).unwrap_or_else(|| names::credentials_secret(app));
        Ok(build::DrillSource { image, credentials_secret })
    }

    async fn follow(&self, drill: DrillStatus) -> Result<Action, Error> {
        if self.past_deadline(&drill) {
            let seconds = self.settings().active_deadline_seconds();
            let message = format!("the drill took longer than spec.drill.activeDeadlineSeconds ({seconds} s)");
            return self.end(status::drill_failed(drill, reason::DEADLINE_EXCEEDED, message, now())).await;
        }
        // A Job that has ended says how the drill went, even if its database stopped since.
        if drill.phase == DrillPhase::Running {
            match self.job_outcome().await? {
                JobOutcome::Ended(end) => {
                    let mut ended = status::drill_ended(drill, &end, now());
                    if self.run.spec.method() == BackupMethod::Physical {
                        ended = with_copy_restore_seconds(ended, self.database_pod().await?.as_ref());
                    }
                    return self.end(ended).await;
                }
                JobOutcome::Broken(message) => {
                    return self.end(status::drill_failed(drill, reason::DRILL_ERROR, message, now())).await;
                }
                JobOutcome::Running => {}
            }
        }
        let pod = self.database_pod().await?;
        if let Some(failed) = copy_failed(pod.as_ref()) {
            return self.end(status::drill_ended(drill, &failed, now())).await;
        }
        if let Some((why, lost)) = database_lost(pod.as_ref()) {
            return self.end(status::drill_failed(drill, why, lost, now())).await;
        }
        match (drill.phase, pod) {
            (DrillPhase::Pending, Some(pod)) => self.start_job_when_ready(drill, &pod).await,
            _ => Ok(self.ctx.runtime.watching(self.run)),
        }
    }

    async fn database_pod(&self) -> Result<Option<Pod>, Error> {
        let name = build::database_name(self.run);
        Ok(self.op.api::<Pod>().get_opt(&name).await.map_err(api_err(format!("reading Pod {name}")))?)
    }

    async fn start_job_when_ready(&self, drill: DrillStatus, pod: &Pod) -> Result<Action, Error> {
        let Some(address) = ready_address(pod) else { return Ok(Action::requeue(STARTING_POLL)) };
        let password_secret = build::password_secret_of(pod).unwrap_or_else(|| build::secret_name(self.run));
        let job = build::job(self.run, &self.settings(), &password_secret, &self.ctx.settings.inputs(), &address);
        let note = format!("Job {} restores the run into the drill's database and compares it", job.name_any());
        self.op.create_job(&job, note).await?;
        self.publish(status::drill_running(drill, &job.name_any())).await?;
        Ok(self.ctx.runtime.watching(self.run))
    }

    async fn job_outcome(&self) -> Result<JobOutcome, Error> {
        let name = job_name(self.run);
        let Some(job) = self.op.job(&name).await? else {
            return Ok(JobOutcome::Broken(format!("Job {name} was deleted before the drill finished")));
        };
        if !self.op.owns(&job) {
            return Ok(JobOutcome::Broken(format!(
                "Job {name} exists but does not belong to this run; delete or rename it"
            )));
        }
        let deadline = self.settings().active_deadline_seconds();
        Ok(match self.op.end_of(&job, Operation::Verify, deadline).await? {
            Some(end) => JobOutcome::Ended(Box::new(end)),
            None => JobOutcome::Running,
        })
    }

    fn past_deadline(&self, drill: &DrillStatus) -> bool {
        let Some(start) = &drill.start_time else { return false };
        let deadline = Duration::from_secs(u64::try_from(self.settings().active_deadline_seconds()).unwrap_or(0));
        crate::timing::until(start.0, Timestamp::now()) > deadline + DEADLINE_GRACE
    }

    /// Records the end first (a restarted controller then only cleans up), tells the user,
    /// then deletes the drill's objects.
    async fn end(&self, drill: DrillStatus) -> Result<Action, Error> {
        self.publish(drill.clone()).await?;
        self.announce(&drill).await;
        self.tear_down(drill).await
    }

    async fn announce(&self, drill: &DrillStatus) {
        let events = &self.ctx.runtime.events;
        self.ctx.metrics.drill_ended(self.op.namespace, &self.run.spec.source.visitors_app, drill);
        if drill.phase == DrillPhase::Succeeded {
            let note = format!(
                "restore drill passed: {} tables, {} rows restored in {:.1} s and identical to what was dumped",
                drill.tables.unwrap_or_default(),
                drill.rows.unwrap_or_default(),
                drill.restore_seconds.unwrap_or_default()
            );
            events.normal(self.run, "DrillSucceeded", "Drill", note).await;
        } else {
            let reason = drill.reason.as_deref().unwrap_or(reason::DRILL_ERROR);
            let message = drill.message.clone().unwrap_or_default();
            tracing::warn!(reason, error = %message, "restore drill failed");
            events.warning(self.run, "DrillFailed", "Drill", format!("{reason}: {message}")).await;
        }
    }

    /// Deletes the drill's Job, pod (its volume goes with it) and Secret, those this run owns
    /// only, then forgets the Job.
    async fn tear_down(&self, drill: DrillStatus) -> Result<Action, Error> {
        self.delete_if_ours::<Job>("Job", &job_name(self.run)).await?;
        self.delete_if_ours::<Pod>("Pod", &build::database_name(self.run)).await?;
        self.delete_if_ours::<Secret>("Secret", &build::secret_name(self.run)).await?;
        self.publish(DrillStatus { job_name: None, ..drill }).await?;
        Ok(self.ctx.runtime.converged(self.run))
    }

    /// Deletes object `name` if this run owns it (an object of that name may be someone
    /// else's), with its pods; the uid precondition keeps a newer object of that name.
    async fn delete_if_ours<K: NamespacedKind>(&self, kind: &str, name: &str) -> Result<(), Error> {
        let api: Api<K> = self.op.api();
        let Some(object) = api.get_opt(name).await.map_err(api_err(format!("reading {kind} {name}")))? else {
            return Ok(());
        };
        if !self.op.owns(&object) {
            tracing::warn!("{kind} {name} is not this run's: left in place");
            return Ok(());
        }
        let uid = Preconditions { uid: object.uid(), resource_version: None };
        match api.delete(name, &DeleteParams { preconditions: Some(uid), ..DeleteParams::background() }).await {
            Ok(_) => Ok(()),
            // Gone meanwhile, or replaced by another object of that name.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(source) => Err(ApiError { action: format!("deleting {kind} {name}"), source }.into()),
        }
    }

    async fn publish(&self, drill: DrillStatus) -> Result<bool, Error> {
        let desired = status::with_drill(self.run, drill, now());
        Ok(self.op.publish(self.run.status.as_ref(), &desired).await?)
    }
}

/// An object of an earlier drill's name.
enum Leftover {
    None,
    /// This very drill's database: made for the request being started.
    ThisDrills,
    Ours(String),
    Foreign(String),
}

/// What became of a running drill's Job.
enum JobOutcome {
    Running,
    Ended(Box<JobEnd>),
    /// Gone before it ended, or not this run's: the drill cannot finish.
    Broken(String),
}

/// Why the drill's database can no longer serve it, if it cannot: gone, being deleted, or
/// stopped (a MySQL that exits is never restarted: its data would be gone); a database stopped
/// by its deadline is the drill's deadline.
fn database_lost(pod: Option<&Pod>) -> Option<(&'static str, String)> {
    let Some(pod) = pod else {
        return Some((reason::DATABASE_LOST, "the drill's database pod was deleted before the drill finished".into()));
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Some((reason::DATABASE_LOST, format!("the drill's database pod {} is being deleted", pod.name_any())));
    }
    if agent_job::pod_ended(pod) {
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        let why = pod.status.as_ref().and_then(|s| s.reason.clone());
        if why.as_deref() == Some("DeadlineExceeded") {
            let message = format!("the drill's database pod {} reached its deadline", pod.name_any());
            return Some((reason::DEADLINE_EXCEEDED, message));
        }
        let why = why.map(|r| format!(" ({r})")).unwrap_or_default();
        return Some((
            reason::DATABASE_LOST,
            format!("the drill's database pod {} stopped: {phase}{why}", pod.name_any()),
        ));
    }
    None
}

/// A physical run's copy that could not be made: the unpack's failure as the agent reported
/// it (a chunk that differs from the manifest is the backup's defect), or the prepare's exit.
fn copy_failed(pod: Option<&Pod>) -> Option<JobEnd> {
    let statuses = pod?.status.as_ref()?.init_container_statuses.as_ref()?;
    statuses.iter().find_map(|container| {
        let ended = container.state.as_ref()?.terminated.as_ref().filter(|t| t.exit_code != 0)?;
        let summary = ended.message.as_deref().and_then(agent_job::parse_summary);
        let message = match (&summary, container.name.as_str()) {
            (Some(summary), _) => format!(
                "unpacking the run for its drill failed: {}",
                summary.error.clone().unwrap_or_else(|| "see the pod's log".into())
            ),
            (None, build::PREPARE_CONTAINER) => format!(
                "mariadb-backup --prepare of the unpacked run failed (exit status {}): {}",
                ended.exit_code,
                last_line(ended.message.as_deref()).unwrap_or("it wrote nothing")
            ),
            (None, name) => {
                format!("init container {name} of the drill's pod failed (exit status {})", ended.exit_code)
            }
        };
        Some(JobEnd::Failed { reason: reason::DRILL_ERROR, message, summary })
    })
}

/// The last line a container wrote, from a termination message of its log's tail.
fn last_line(message: Option<&str>) -> Option<&str> {
    message?.lines().rev().map(str::trim).find(|line| !line.is_empty())
}

/// A physical run is restored by its drill's pod before its server starts: the restore's time
/// is from the first init container's start to the server's readiness.
fn with_copy_restore_seconds(mut drill: DrillStatus, pod: Option<&Pod>) -> DrillStatus {
    if drill.restore_seconds.is_none() {
        drill.restore_seconds = pod.and_then(copy_restore_seconds);
    }
    drill
}

fn copy_restore_seconds(pod: &Pod) -> Option<f64> {
    let status = pod.status.as_ref()?;
    let first = status.init_container_statuses.as_ref()?.first()?;
    let started = first.state.as_ref()?.terminated.as_ref()?.started_at.as_ref()?.0;
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready" && c.status == "True")?;
    let ready = ready.last_transition_time.as_ref()?.0;
    let seconds = ready.as_second() - started.as_second();
    (seconds >= 0).then_some(seconds as f64)
}

/// The pod's address once it is ready.
fn ready_address(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    status.pod_ip.clone().filter(|ip| ready && !ip.is_empty())
}

fn now() -> Time {
    Time(Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "r-drill-db"}, "status": status})).unwrap()
    }

    #[test]
    fn the_job_starts_only_once_the_database_is_ready_with_an_address() {
        let ready = serde_json::json!({"phase": "Running", "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(ready_address(&pod(ready)), Some("10.0.0.7".into()));
        let starting = serde_json::json!({"phase": "Running", "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "False"}]});
        assert_eq!(ready_address(&pod(starting)), None);
        let no_ip = serde_json::json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]});
        assert_eq!(ready_address(&pod(no_ip)), None);
    }

    #[test]
    fn a_database_gone_stopped_or_deleted_is_lost_and_one_past_its_deadline_is_the_deadline() {
        assert!(database_lost(None).unwrap().1.contains("deleted"));
        let killed = pod(serde_json::json!({"phase": "Failed", "reason": "OOMKilled"}));
        assert_eq!(database_lost(Some(&killed)).unwrap().0, "DatabaseLost");
        assert!(database_lost(Some(&killed)).unwrap().1.contains("Failed (OOMKilled)"));
        let late = pod(serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert_eq!(database_lost(Some(&late)).unwrap().0, "DeadlineExceeded");
        let mut deleting = pod(serde_json::json!({"phase": "Running"}));
        deleting.metadata.deletion_timestamp = Some(now());
        assert!(database_lost(Some(&deleting)).unwrap().1.contains("being deleted"));
        assert_eq!(database_lost(Some(&pod(serde_json::json!({"phase": "Running"})))), None);
    }

    fn init(name: &str, state: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": state})
    }

    #[test]
    fn a_copy_that_could_not_be_made_fails_the_drill_with_the_unpacks_report_or_the_prepares_last_line() {
        let summary = r#"{"ok":false,"operation":"unpack","error":"physical/000002.mbstream.zst has SHA-256 ab, the manifest says cd","errorKind":"checksumMismatch"}"#;
        let unpack_failed = init("unpack", serde_json::json!({"terminated": {"exitCode": 1, "message": summary}}));
        let unpacked = init("unpack", serde_json::json!({"terminated": {"exitCode": 0}}));
        let prepare_failed = init(
            "prepare",
            serde_json::json!({"terminated": {"exitCode": 1, "message": "[00] starting\n[00] Error: no space left\n"}}),
        );
        let preparing = init("prepare", serde_json::json!({"running": {}}));
        let cases = [
            (vec![unpack_failed], Some(("checksumMismatch", "has SHA-256 ab"))),
            (vec![unpacked.clone(), prepare_failed], Some(("", "failed (exit status 1): [00] Error: no space left"))),
            (vec![unpacked, preparing], None),
            (vec![], None),
        ];
        for (statuses, expected) in cases {
            let failed =
                copy_failed(Some(&pod(serde_json::json!({"phase": "Pending", "initContainerStatuses": statuses}))));
            match (failed, expected) {
                (None, None) => {}
                (Some(JobEnd::Failed { message, summary, .. }), Some((kind, text))) => {
                    assert!(message.contains(text), "{message}");
                    let found = summary.and_then(|s| s.error_kind).unwrap_or_default();
                    assert_eq!(found, kind);
                }
                (got, expected) => panic!("{got:?} against {expected:?}"),
            }
        }
        assert!(copy_failed(None).is_none());
    }

    #[test]
    fn a_copys_restore_time_runs_from_the_unpack_to_the_servers_readiness() {
        let status = |ready: Option<&str>| {
            let mut status = serde_json::json!({"phase": "Running", "initContainerStatuses": [
                init("unpack", serde_json::json!({"terminated": {"exitCode": 0, "startedAt": "2026-12-03T10:00:00Z"}})),
            ]});
            if let Some(at) = ready {
                status["conditions"] =
                    serde_json::json!([{"type": "Ready", "status": "True", "lastTransitionTime": at}]);
            }
            pod(status)
        };
        assert_eq!(copy_restore_seconds(&status(Some("2026-12-03T10:00:42Z"))), Some(42.0));
        assert_eq!(copy_restore_seconds(&status(None)), None);
        let mut drill = status::drill_pending(now(), "b1-drill", now());
        drill.restore_seconds = Some(3.0);
        let kept = with_copy_restore_seconds(drill, Some(&status(Some("2026-12-03T10:00:42Z"))));
        assert_eq!(kept.restore_seconds, Some(3.0), "the agent's own measure wins");
    }
}
