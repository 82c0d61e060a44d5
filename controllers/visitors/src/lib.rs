//! The VisitorsApp controller: keeps a Visitors Site (MySQL, the REST backend and the web
//! frontend) converged with its VisitorsApp.
//!
//! The reconcile is a pipeline: [`validate`] the spec, [`build`] the desired children (pure),
//! apply them with server-side apply, then compute the [`status`].

pub mod build;
pub mod controller;
pub mod db;
pub mod hold;
pub mod repair;
pub mod seen;
pub mod status;
pub mod validate;
