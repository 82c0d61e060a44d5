//! The restore controller as a library, so tests can drive its reconcile.

pub mod controller;
pub mod status;
