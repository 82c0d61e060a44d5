//! `deletionPolicy: Delete`: deleting a run deletes its stored backup first. A run with that
//! policy carries [`FINALIZER`]; once it is being deleted, its backup Job is stopped and its pods
//! waited for, then a short Job runs `visitors-agent delete <location> --break-lock`, followed
//! through the Job watch. The finalizer goes only when that Job succeeded, or when the run never
//! started a Job (nothing was stored). A delete the storage refuses keeps the finalizer: the
//! `Deleting` condition (`StorageDeleteFailed`) and a Warning Event say why, and it is retried
//! with the run's backoff. Switching the policy to `Retain` lets the run go and keeps the files.
//! Retention deletes runs through the API, so its deletions take the same path.

use controller_common::Runtime;
use controller_common::agent_job::{self, JobEnd, JobState};
use controller_common::error::ApiError;
use controller_common::finalizer::{Cleanup, Finalized, Finalizer};
use controller_common::operation::DatabaseOperation;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use visitors_agent_contract::summary::Operation;
use visitors_api::backup::condition::DELETING;
use visitors_api::backup::reason;
use visitors_api::conditions::{self, Desired, Status};
use visitors_api::visitors_app::DeletionPolicy;
use visitors_api::{MySQLBackup, MySQLBackupStatus};

use crate::build::backup_path;
use crate::build::job::{delete_job, delete_job_name, job_name};
use crate::context::{Context, Error};

/// Held by runs whose stored backup must be deleted with them.
pub const FINALIZER: &str = "example.com/delete-stored-backup";
const DELETE_STORED: Finalizer = Finalizer(FINALIZER);
const REASON_DELETING: &str = reason::DELETING_STORAGE;
const REASON_FAILED: &str = reason::STORAGE_DELETE_FAILED;
const REASON_MOVED: &str = reason::STORAGE_LOCATION_CHANGED;

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
pub async fn keep_finalizer_in_line(backup: &MySQLBackup, runtime: &Runtime) -> Result<(), Error> {
    DELETE_STORED.keep(runtime, backup, wants_finalizer(backup)).await?;
    Ok(())
}

/// Why a run let go of its stored backup: a Normal Event's reason and note, said once the run
/// is gone.
type LetGo = (&'static str, String);

/// A run being deleted.
pub async fn reconcile_deleted(backup: &MySQLBackup, namespace: &str, ctx: &Context) -> Result<Action, Error> {
    let op = DatabaseOperation::of(backup, &ctx.runtime, namespace);
    let finalized = DELETE_STORED.finalize(&ctx.runtime, backup, before_removal(backup, ctx, &op)).await?;
    if let Finalized::Released((reason, note)) = &finalized {
        ctx.runtime.events.normal(backup, reason, "DeleteStorage", note.clone()).await;
    }
    Ok(finalized.action())
}

async fn before_removal(
    backup: &MySQLBackup,
    ctx: &Context,
    agent: &DatabaseOperation<'_, MySQLBackup>,
) -> Result<Cleanup<LetGo>, Error> {
    let runtime = &ctx.runtime;
    let let_go = |reason: &'static str, note: String| Ok(Cleanup::Done((reason, note)));
    let waiting = |action: Action| Ok(Cleanup::Waiting(action));
    let recorded = backup.status.as_ref().and_then(|s| s.location.clone());
    if backup.spec.deletion_policy() == DeletionPolicy::Retain {
        let note = format!("deletionPolicy is Retain: the stored backup at {} is kept", recorded.unwrap_or_default());
        return let_go("StorageRetained", note);
    }
    let started = backup.status.as_ref().is_some_and(|s| s.job_name.is_some())
        || agent.job(&job_name(backup)).await?.is_some_and(|job| agent.owns(&job));
    let location = match stored_at(backup, recorded, started) {
        Stored::Nothing => {
            return let_go("NothingStored", "the run never started a backup Job".to_string());
        }
        Stored::At(location) => location,
        Stored::Elsewhere(message) => {
            if publish(backup, agent, Status::False, REASON_MOVED, message.clone()).await? {
                tracing::warn!(error = %message, "the stored backup is not where the spec points");
                runtime.events.warning(backup, REASON_MOVED, "DeleteStorage", message).await;
            }
            return waiting(runtime.until_spec_changes(backup));
        }
    };
    // A delete must never race a backup still writing there.
    if !agent.stop_job(&job_name(backup)).await? {
        return waiting(runtime.waiting(backup));
    }
    agent.release_lock().await?;
    let name = delete_job_name(backup);
    let Some(job) = agent.job(&name).await? else {
        return start_delete_job(backup, ctx, agent, &location).await;
    };
    if !agent.owns(&job) {
        let wait = agent.job_name_taken(&job);
        publish(backup, agent, Status::False, wait.reason, wait.message).await?;
        return waiting(runtime.waiting(backup));
    }
    match agent_job::job_state(&job) {
        JobState::Active => waiting(runtime.watching(backup)),
        JobState::Complete => let_go("StorageDeleted", format!("deleted the stored backup at {location}")),
        state @ JobState::Failed { .. } => {
            let pods = agent.pods(&name).await?;
            let deadline = backup.spec.active_deadline_seconds();
            let message = match agent_job::job_end(&state, &pods, Operation::Delete, deadline) {
                Some(JobEnd::Failed { message, .. }) => message,
                _ => format!("Job {name} failed"),
            };
            let message = format!("deleting the stored backup at {location} failed: {message}; retrying");
            if publish(backup, agent, Status::False, REASON_FAILED, message.clone()).await? {
                tracing::warn!(error = %message, "deleting the stored backup failed");
                runtime.events.warning(backup, REASON_FAILED, "DeleteStorage", message).await;
                return waiting(runtime.waiting(backup));
            }
            // Reported at the last reconcile, which asked to come back after the backoff: retry
            // (the Job watch sees the failed Job go and starts the next attempt).
            agent.delete_job(&name).await?;
            waiting(runtime.watching(backup))
        }
    }
}

async fn start_delete_job(
    backup: &MySQLBackup,
    ctx: &Context,
    agent: &DatabaseOperation<'_, MySQLBackup>,
    location: &str,
) -> Result<Cleanup<LetGo>, Error> {
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
            return Ok(Cleanup::Done(("StorageRetained", note)));
        }
        Err(error) => return Err(error.into()),
    }
    let message = format!("Job {} deletes the stored backup at {location}", job.name_any());
    publish(backup, agent, Status::True, REASON_DELETING, message).await?;
    Ok(Cleanup::Waiting(ctx.runtime.watching(backup)))
}

/// Writes the `Deleting` condition; returns whether the status changed.
async fn publish(
    backup: &MySQLBackup,
    agent: &DatabaseOperation<'_, MySQLBackup>,
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
