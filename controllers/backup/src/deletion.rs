//! `deletionPolicy: Delete`: deleting a run deletes its stored backup first. A run with that
//! policy carries [`FINALIZER`]; once it is being deleted, its backup Job is stopped and its pods
//! waited for, then a short Job runs `visitors-agent delete <location> --break-lock`, followed
//! through the Job watch. The finalizer goes only when that Job succeeded, or when the run never
//! started a Job (nothing was stored). A delete the storage refuses keeps the finalizer: the
//! `Deleting` condition (`StorageDeleteFailed`) and a Warning Event say why, and it is retried
//! with the run's backoff. Switching the policy to `Retain` lets the run go and keeps the files.
//! Retention deletes runs through the API, so its deletions take the same path.

use controller_common::agent_run::AgentRun;
use controller_common::job::{self, JobState, RunEnd};
use controller_common::reconcile::{ApiError, api_err};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use visitors_api::agent_summary::Operation;
use visitors_api::backup::condition::DELETING;
use visitors_api::conditions::{self, Desired, Status};
use visitors_api::visitors_app::DeletionPolicy;
use visitors_api::{MySQLBackup, MySQLBackupStatus};

use crate::build::backup_path;
use crate::build::job::{delete_job, delete_job_name, job_name};
use crate::controller::{Context, Error};

/// Held by runs whose stored backup must be deleted with them.
pub const FINALIZER: &str = "example.com/delete-stored-backup";
const REASON_DELETING: &str = "DeletingStorage";
const REASON_FAILED: &str = "StorageDeleteFailed";
const REASON_MOVED: &str = "StorageLocationChanged";

fn has_finalizer(backup: &MySQLBackup) -> bool {
    backup.finalizers().iter().any(|f| f == FINALIZER)
}

fn wants_finalizer(backup: &MySQLBackup) -> bool {
    !backup.spec.is_schedule() && backup.spec.deletion_policy() == DeletionPolicy::Delete
}

/// Where the run's backup is stored.
enum Stored {
    /// The run never started a backup Job.
    Nothing,
    At(String),
    /// The spec was edited since the backup ran and now points elsewhere: a delete there could
    /// remove another run's backup.
    Elsewhere(String),
}

/// The run's stored backup: the location the run recorded, which must still be the one its
/// spec gives (the delete Job is built from the spec); without a record (the status write after
/// the Job's creation was lost), the spec's location when the run `started` a Job.
fn stored_at(backup: &MySQLBackup, recorded: Option<String>, started: bool) -> Stored {
    let path = backup_path(backup);
    let (shown, agent) = (backup.spec.storage.location(&path), backup.spec.storage.agent_location(&path));
    match recorded {
        Some(recorded) if recorded == shown || recorded == agent => Stored::At(shown),
        Some(recorded) => Stored::Elsewhere(format!(
            "the run's backup is stored at {recorded}, but its spec (spec.source, spec.storage) now points at {shown}: nothing is deleted; put the spec back, or set deletionPolicy to Retain to delete the run and keep the files"
        )),
        None if started => Stored::At(shown),
        None => Stored::Nothing,
    }
}

/// For a live run: adds the finalizer under `Delete`, removes it under `Retain`.
pub async fn keep_finalizer_in_line(backup: &MySQLBackup, agent: &AgentRun<'_, MySQLBackup>) -> Result<(), Error> {
    match (wants_finalizer(backup), has_finalizer(backup)) {
        (true, false) => {
            let mut finalizers = backup.finalizers().to_vec();
            finalizers.push(FINALIZER.into());
            set_finalizers(backup, agent, finalizers).await
        }
        (false, true) => remove_finalizer(backup, agent).await,
        _ => Ok(()),
    }
}

/// A run being deleted.
pub async fn reconcile_deleted(
    backup: &MySQLBackup,
    ctx: &Context,
    agent: &AgentRun<'_, MySQLBackup>,
) -> Result<Action, Error> {
    let runtime = &ctx.runtime;
    if !has_finalizer(backup) {
        runtime.forget(backup);
        return Ok(Action::await_change());
    }
    let recorded = backup.status.as_ref().and_then(|s| s.location.clone());
    if backup.spec.deletion_policy() == DeletionPolicy::Retain {
        let note = format!("deletionPolicy is Retain: the stored backup at {} is kept", recorded.unwrap_or_default());
        return let_go(backup, ctx, agent, "StorageRetained", note).await;
    }
    let started = backup.status.as_ref().is_some_and(|s| s.job_name.is_some())
        || agent.job(&job_name(backup)).await?.is_some_and(|job| agent.owns(&job));
    let location = match stored_at(backup, recorded, started) {
        Stored::Nothing => {
            let note = "the run never started a backup Job".to_string();
            return let_go(backup, ctx, agent, "NothingStored", note).await;
        }
        Stored::At(location) => location,
        Stored::Elsewhere(message) => {
            if publish(backup, agent, Status::False, REASON_MOVED, message.clone()).await? {
                tracing::warn!(error = %message, "the stored backup is not where the spec points");
                runtime.events.warning(backup, REASON_MOVED, "DeleteStorage", message).await;
            }
            return Ok(runtime.until_spec_changes(backup));
        }
    };
    // A delete must never race a backup still writing there.
    if !agent.stop_job(&job_name(backup)).await? {
        return Ok(runtime.waiting(backup));
    }
    agent.release_lock().await?;
    let name = delete_job_name(backup);
    let Some(job) = agent.job(&name).await? else {
        return start_delete_job(backup, ctx, agent, &location).await;
    };
    if !agent.owns(&job) {
        let wait = agent.job_name_taken(&job);
        publish(backup, agent, Status::False, wait.reason, wait.message).await?;
        return Ok(runtime.waiting(backup));
    }
    match job::job_state(&job) {
        JobState::Active => Ok(runtime.watching(backup)),
        JobState::Complete => {
            let note = format!("deleted the stored backup at {location}");
            let_go(backup, ctx, agent, "StorageDeleted", note).await
        }
        state @ JobState::Failed { .. } => {
            let pods = agent.pods(&name).await?;
            let deadline = backup.spec.active_deadline_seconds();
            let message = match job::run_end(&state, &pods, Operation::Delete, deadline) {
                Some(RunEnd::Failed { message, .. }) => message,
                _ => format!("Job {name} failed"),
            };
            let message = format!("deleting the stored backup at {location} failed: {message}; retrying");
            if publish(backup, agent, Status::False, REASON_FAILED, message.clone()).await? {
                tracing::warn!(error = %message, "deleting the stored backup failed");
                runtime.events.warning(backup, REASON_FAILED, "DeleteStorage", message).await;
                return Ok(runtime.waiting(backup));
            }
            // Reported at the last reconcile, which asked to come back after the backoff: retry
            // (the Job watch sees the failed Job go and starts the next attempt).
            agent.delete_job(&name).await?;
            Ok(runtime.watching(backup))
        }
    }
}

async fn start_delete_job(
    backup: &MySQLBackup,
    ctx: &Context,
    agent: &AgentRun<'_, MySQLBackup>,
    location: &str,
) -> Result<Action, Error> {
    let job = delete_job(backup, &ctx.settings.inputs());
    let note = format!("Job {} deletes the stored backup at {location}", job.name_any());
    match agent.create_job(&job, note).await {
        Ok(()) => {}
        // A namespace being deleted accepts no new Job: the files are kept rather than the
        // namespace left stuck.
        Err(ApiError { source: kube::Error::Api(status), .. })
            if status.code == 403 && status.message.contains("being terminated") =>
        {
            let note = format!(
                "the namespace is being deleted and can run no Job: the stored backup at {location} is kept; delete it with visitors-agent delete"
            );
            return let_go(backup, ctx, agent, "StorageRetained", note).await;
        }
        Err(error) => return Err(error.into()),
    }
    let message = format!("Job {} deletes the stored backup at {location}", job.name_any());
    publish(backup, agent, Status::True, REASON_DELETING, message).await?;
    Ok(ctx.runtime.watching(backup))
}

/// Removes the finalizer (the run then disappears) and says why with a Normal Event.
async fn let_go(
    backup: &MySQLBackup,
    ctx: &Context,
    agent: &AgentRun<'_, MySQLBackup>,
    reason: &'static str,
    note: String,
) -> Result<Action, Error> {
    remove_finalizer(backup, agent).await?;
    ctx.runtime.events.normal(backup, reason, "DeleteStorage", note).await;
    ctx.runtime.forget(backup);
    Ok(Action::await_change())
}

async fn remove_finalizer(backup: &MySQLBackup, agent: &AgentRun<'_, MySQLBackup>) -> Result<(), Error> {
    let finalizers = backup.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
    set_finalizers(backup, agent, finalizers).await
}

/// A merge patch of the finalizer list that holds the resourceVersion read: if anything
/// changed meanwhile (another finalizer added), the API server answers 409 and the next
/// reconcile works on the fresh object.
async fn set_finalizers(
    backup: &MySQLBackup,
    agent: &AgentRun<'_, MySQLBackup>,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let api: Api<MySQLBackup> = agent.api();
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": backup.resource_version()}
    });
    let params = PatchParams { field_manager: Some(agent.runtime.field_manager.clone()), ..PatchParams::default() };
    match api.patch(&backup.name_any(), &params, &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => {
            Err(api_err(format!("updating the finalizers of MySQLBackup {}", backup.name_any()))(source).into())
        }
    }
}

/// Writes the `Deleting` condition; returns whether the status changed.
async fn publish(
    backup: &MySQLBackup,
    agent: &AgentRun<'_, MySQLBackup>,
    status: Status,
    reason: &str,
    message: String,
) -> Result<bool, Error> {
    let current = backup.status.clone();
    let mut desired: MySQLBackupStatus = current.clone().unwrap_or_default();
    let condition = Desired { type_: DELETING, status, reason, message };
    conditions::set(&mut desired.conditions, condition, backup.metadata.generation, Time(jiff::Timestamp::now()));
    Ok(agent.publish(current.as_ref(), &desired).await?)
}
