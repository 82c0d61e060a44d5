//! The restore controller: verified, all-or-nothing restores into a VisitorsApp.
//!
//! [`controller`] wires the watches to [`reconcile`]: validate, find the backup
//! ([`source`]), lock and quiesce, the Job from [`build`], [`status`] from the agent's summary;
//! a deleted restore goes through [`cleanup`].

pub mod build;
pub mod cleanup;
pub mod context;
pub mod controller;
pub mod metrics;
pub mod reconcile;
pub mod source;
pub mod status;
pub mod validate;
