//! What the two kinds that run the agent against a database have in common: a backup run and
//! a restore each go from `Pending` to `Running` to `Succeeded` or `Failed`, with the Job that
//! ran the agent, its times and the error in their status. The controllers write those fields
//! through [`OperationStatus`] once for both kinds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::de::DeserializeOwned;

use crate::backup::{BackupPhase, MySQLBackup, MySQLBackupStatus};
use crate::restore::{MySQLRestore, MySQLRestoreStatus, RestorePhase};

/// The phases every operation has; a kind may have more in between (a restore's `Quiescing`
/// and `Verifying`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// The status fields every operation has.
pub trait OperationStatus: Default + Clone + DeserializeOwned {
    /// Whether the phase is final: `Succeeded` or `Failed`.
    fn has_ended(&self) -> bool;
    fn set_phase(&mut self, phase: OperationPhase);
    fn observed_generation_mut(&mut self) -> &mut Option<i64>;
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    fn job_name(&self) -> Option<&str>;
    fn job_name_mut(&mut self) -> &mut Option<String>;
    fn start_time_mut(&mut self) -> &mut Option<Time>;
    fn completion_time_mut(&mut self) -> &mut Option<Time>;
    fn duration_seconds_mut(&mut self) -> &mut Option<f64>;
    fn error_mut(&mut self) -> &mut Option<String>;
}

/// A kind whose objects are operations.
pub trait OperationKind {
    type Status: OperationStatus;
    /// What the agent does for it, in a word: `backup`, `restore`.
    const WORK: &'static str;
    fn operation_status(&self) -> Option<&Self::Status>;
    /// The VisitorsApp whose database the operation acts on.
    fn database_app(&self) -> &str;
}

macro_rules! operation_status {
    ($status:ty, $phase:ident) => {
        impl OperationStatus for $status {
            fn has_ended(&self) -> bool {
                matches!(self.phase, Some($phase::Succeeded | $phase::Failed))
            }
            fn set_phase(&mut self, phase: OperationPhase) {
                self.phase = Some(match phase {
                    OperationPhase::Pending => $phase::Pending,
                    OperationPhase::Running => $phase::Running,
                    OperationPhase::Succeeded => $phase::Succeeded,
                    OperationPhase::Failed => $phase::Failed,
                });
            }
            fn observed_generation_mut(&mut self) -> &mut Option<i64> {
                &mut self.observed_generation
            }
            fn conditions(&self) -> &[Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> {
                &mut self.conditions
            }
            fn job_name(&self) -> Option<&str> {
                self.job_name.as_deref()
            }
            fn job_name_mut(&mut self) -> &mut Option<String> {
                &mut self.job_name
            }
            fn start_time_mut(&mut self) -> &mut Option<Time> {
                &mut self.start_time
            }
            fn completion_time_mut(&mut self) -> &mut Option<Time> {
                &mut self.completion_time
            }
            fn duration_seconds_mut(&mut self) -> &mut Option<f64> {
                &mut self.duration_seconds
            }
            fn error_mut(&mut self) -> &mut Option<String> {
                &mut self.error
            }
        }
    };
}

operation_status!(MySQLBackupStatus, BackupPhase);
operation_status!(MySQLRestoreStatus, RestorePhase);

impl MySQLBackup {
    /// Whether the run's phase is final: `Succeeded` or `Failed`.
    pub fn has_ended(&self) -> bool {
        self.status.as_ref().is_some_and(OperationStatus::has_ended)
    }
}

impl MySQLRestore {
    /// Whether the restore has ended for good.
    pub fn has_ended(&self) -> bool {
        self.status.as_ref().is_some_and(OperationStatus::has_ended)
    }
}

impl OperationKind for MySQLBackup {
    type Status = MySQLBackupStatus;
    const WORK: &'static str = "backup";
    fn operation_status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn database_app(&self) -> &str {
        &self.spec.source.visitors_app
    }
}

impl OperationKind for MySQLRestore {
    type Status = MySQLRestoreStatus;
    const WORK: &'static str = "restore";
    fn operation_status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn database_app(&self) -> &str {
        &self.spec.target.visitors_app
    }
}
