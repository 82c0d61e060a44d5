//! The VisitorsApp controller: keeps a Visitors Site (MySQL, the REST backend and the web
//! frontend) converged with its VisitorsApp.
//!
//! [`controller`] wires the watches to [`reconcile`], whose pipeline is: [`validate`] the app,
//! read the [`credentials`], find or issue MySQL's certificate ([`tls`]), [`build`] the desired
//! children (pure), [`apply`] them, check the database ([`db_check`], through [`db`]), apply the
//! backend, then compute the [`status`]. A deleted app goes through [`cleanup`]. [`seen`] and
//! [`hold`] decide which watch events wake an app; [`repair`] finds what apply cannot fix;
//! [`cache`] is what the caches keep of the workloads.

pub mod apply;
pub mod build;
pub mod cleanup;
pub mod context;
pub mod controller;
pub mod credentials;
pub mod database;
pub mod metrics;
pub mod reconcile;
pub mod repair;
pub mod replication;
pub mod status;
pub mod tls;
pub mod validate;
pub mod wake;
