//! Restore drills: a successful run restored into a throwaway MySQL of the app's image (a
//! short-lived pod the drill owns, never the app's own database) and compared with what was
//! dumped: every file's SHA-256, every table's rows and content digest, and the views,
//! routines, triggers and accounts. The evidence goes into the run's `status.drill`; the
//! newest verified run of a schedule into its `status.lastVerifiedRun`, and retention never
//! deletes it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schedule::Plan;
use crate::validation::{Problems, parse_duration};

/// Default deadline of one drill: one hour.
pub const DEFAULT_DRILL_DEADLINE_SECONDS: i64 = 3600;
pub const MIN_DRILL_DEADLINE_SECONDS: i64 = 60;
/// Default of `spec.drill.maxUnverifiedAge`.
pub const DEFAULT_MAX_UNVERIFIED_AGE: &str = "48h";
/// Annotation on a run that asks for a drill (RFC 3339 time of the request): set by a
/// schedule's drill cron, or by hand to drill a run now.
pub const DRILL_REQUESTED_AT: &str = "example.com/drill-requested-at";

/// When and how a MySQLBackup's runs are drilled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Drill {
    /// Drills after each successful run (or on `cron`) run while true (the default). A drill
    /// asked for by hand with the `example.com/drill-requested-at` annotation runs regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Schedule only: drill the newest successful run on this 5-field cron expression instead
    /// of after each successful run (for schedules that run often).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 9, max = 128))]
    pub cron: Option<String>,
    /// IANA time zone of `cron`. Defaults to `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Deadline of one drill in seconds, from the creation of its database to the end of the
    /// comparison; a drill that takes longer fails and is cleaned up. Defaults to 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub active_deadline_seconds: Option<i64>,
    /// CPU and memory requests and limits of the throwaway MySQL. Unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Storage class of the throwaway MySQL's ephemeral volume (sized from the backup). Unset:
    /// the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Schedule only: when its newest verified run is older than this (for example `48h` or
    /// `7d`), the schedule reports it (metric `visitors_operator_backup_schedule_unverified`,
    /// alert `VisitorsBackupUnverified`). Defaults to `48h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unverified_age: Option<String>,
}

impl Drill {
    pub fn enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }

    /// What a schedule's run keeps of the schedule's drill: the settings of one drill, and
    /// whether it is drilled after it succeeds (the schedule's cron asks by annotation instead).
    pub fn for_scheduled_run(&self) -> Drill {
        Drill {
            enabled: Some(self.after_each_run()),
            cron: None,
            time_zone: None,
            max_unverified_age: None,
            ..self.clone()
        }
    }

    /// Whether each successful run is drilled as soon as it ends (no cron of its own).
    pub fn after_each_run(&self) -> bool {
        self.enabled() && self.cron.is_none()
    }

    pub fn time_zone(&self) -> &str {
        self.time_zone.as_deref().unwrap_or("UTC")
    }

    pub fn active_deadline_seconds(&self) -> i64 {
        self.active_deadline_seconds.unwrap_or(DEFAULT_DRILL_DEADLINE_SECONDS)
    }

    pub fn max_unverified_age(&self) -> Duration {
        let text = self.max_unverified_age.as_deref().unwrap_or(DEFAULT_MAX_UNVERIFIED_AGE);
        parse_duration(text).unwrap_or(Duration::from_secs(48 * 3600))
    }

    /// The drill cron's plan, when it has one.
    pub fn plan(&self, problems: &mut Problems) -> Option<Plan> {
        let cron = self.cron.as_deref()?;
        Plan::parse_fields(cron, self.time_zone(), "spec.drill.cron", "spec.drill.timeZone", problems)
    }

    pub(crate) fn validate(&self, is_schedule: bool, problems: &mut Problems) {
        if !is_schedule && self.cron.is_some() {
            problems.add("spec.drill.cron", "needs a schedule: an on-demand run is drilled once it succeeds");
        }
        if !is_schedule && self.max_unverified_age.is_some() {
            problems.add(
                "spec.drill.maxUnverifiedAge",
                "needs a schedule: it is the age of a schedule's newest verified run",
            );
        }
        if self.cron.is_none() && self.time_zone.is_some() {
            problems.add("spec.drill.timeZone", "is the time zone of spec.drill.cron, which is not set");
        }
        self.plan(problems);
        if let Some(seconds) = self.active_deadline_seconds
            && seconds < MIN_DRILL_DEADLINE_SECONDS
        {
            problems.add(
                "spec.drill.activeDeadlineSeconds",
                format!("{seconds} is too short: use at least {MIN_DRILL_DEADLINE_SECONDS} seconds"),
            );
        }
        if let Some(age) = &self.max_unverified_age
            && let Err(problem) = parse_duration(age)
        {
            problems.add("spec.drill.maxUnverifiedAge", problem);
        }
    }
}

/// The lifecycle phase of a drill.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DrillPhase {
    /// Its throwaway MySQL is starting.
    Pending,
    /// The agent restores and compares.
    Running,
    /// The backup restored, and everything matched.
    Succeeded,
    Failed,
}

/// The newest drill of a run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillStatus {
    pub phase: DrillPhase,
    /// The request this drill answers: the run's completion (drills after each run), a drill
    /// cron's fire time, or the time of an `example.com/drill-requested-at` annotation.
    pub requested_at: Time,
    /// When the drill's database was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Wall time of the restore alone, in seconds: what restoring this run takes (its RTO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<f64>,
    /// Wall time of the whole drill, database start included, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,
    /// Tables restored and compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<i64>,
    /// Rows restored and compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    /// Why it failed: `BackupDefect` (the backup does not restore what was dumped; the message
    /// names the first chunk, table or object that differed) or the drill's own trouble
    /// (`DatabaseLost`, `DeadlineExceeded`, `DrillError`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Job that runs the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// What a drill that succeeded compared: `Content` or, weaker, `Tables`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<DrillCheck>,
}

/// What a drill compared with the source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DrillCheck {
    /// Every table's rows and content digest equal what the backup read at its snapshot:
    /// logical runs, and physical runs of a replica (held at the snapshot while the tool ran).
    Content,
    /// Every table of the prepared copy opens and passes `CHECK TABLE`, and the copy holds the
    /// run's position; its rows were not compared with the source (a physical run of a
    /// primary, which is never held, records none).
    Tables,
}

impl DrillStatus {
    pub fn has_ended(&self) -> bool {
        matches!(self.phase, DrillPhase::Succeeded | DrillPhase::Failed)
    }

    /// Whether the drill proved the backup itself wrong (not merely that the drill could not
    /// run): a restore from such a run is refused.
    pub fn found_defect(&self) -> bool {
        self.phase == DrillPhase::Failed && self.reason.as_deref() == Some(reason::BACKUP_DEFECT)
    }
}

/// Reasons of a failed drill, and of a run's `Verified` condition.
pub mod reason {
    /// `Verified` True.
    pub const VERIFIED: &str = "Verified";
    /// `Verified` Unknown: a drill is starting or running.
    pub const DRILL_RUNNING: &str = "DrillRunning";
    /// The backup does not restore what was dumped.
    pub const BACKUP_DEFECT: &str = "BackupDefect";
    /// The drill's database pod ended or was deleted before the drill did.
    pub const DATABASE_LOST: &str = "DatabaseLost";
    /// The drill took longer than `spec.drill.activeDeadlineSeconds`.
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// The drill could not run to its end for another reason (the message says which).
    pub const DRILL_ERROR: &str = "DrillError";
}

/// The agent's error kinds (`errorKind` of its summary) that prove a backup wrong.
pub const DEFECT_ERROR_KINDS: [&str; 12] = [
    "checksumMismatch",
    "sizeMismatch",
    "fileMissing",
    "manifestMissing",
    "manifestInvalid",
    "badChunk",
    "verifyMismatch",
    "contentDiffers",
    "objectMissing",
    "notABackup",
    "physicalStreamInvalid",
    "streamDiffersFromManifest",
];
