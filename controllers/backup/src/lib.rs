//! The backup controller as a library, so tests can drive its reconcile.

pub mod build;
pub mod controller;
pub mod cron;
pub mod deletion;
pub mod metrics;
pub mod retention;
pub mod run;
pub mod schedule;
pub mod status;
pub mod validate;
