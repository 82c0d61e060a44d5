//! The backup controller: MySQLBackup runs and schedules of runs.
//!
//! [`controller`] wires the watches to [`reconcile`], which dispatches a run to
//! [`backup_run`] (validate → resolve → lock → the Job from [`build`] → [`status`] from the
//! agent's summary, then the restore [`drill`] of a successful run), a schedule to
//! [`schedule`] (fire times, drill fire times, [`retention`], the binary-log archiver of
//! [`archiving`]), and a deleted run to [`cleanup`].

pub mod archiving;
pub mod backup_run;
pub mod build;
pub mod cleanup;
pub mod context;
pub mod controller;
pub mod drill;
pub mod metrics;
pub mod read_from;
pub mod reconcile;
pub mod retention;
pub mod schedule;
pub mod schedule_drills;
pub mod status;
pub mod timing;
pub mod validate;
