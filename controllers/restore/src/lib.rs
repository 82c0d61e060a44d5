//! The restore controller as a library, so tests can drive its reconcile.

pub mod build;
pub mod controller;
pub mod metrics;
pub mod run;
pub mod status;
pub mod validate;
