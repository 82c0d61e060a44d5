//! The VisitorsApp controller: keeps a Visitors Site (MySQL, the REST backend and the web
//! frontend) converged with its VisitorsApp.
//!
//! [`controller`] wires the watches to [`reconcile`]; [`wake`] says when an app is looked at
//! again and why (the watches' news, the held wake-ups, the requeues). The pipeline of a live app,
//! each step a module:
//!
//! 1. [`validate`] the spec;
//! 2. read the [`credentials`] and find or issue MySQL's certificate ([`tls`]), side by side;
//! 3. [`build`] the desired children (pure);
//! 4. [`apply`] every child but the backend ([`repair`] for what apply cannot fix);
//! 5. with replicas, [`replication`]: the manager of the MySQL servers (observe → decide → act:
//!    failover, switchover, seeding, rolling updates, the role labels);
//! 6. check the [`database`] (the controller's own `SELECT 1` through the client Service);
//! 7. [`apply`] the backend, once the database is ready (or held stopped by a restore);
//! 8. compute the [`status`] (pure; [`metrics`] for the replicated apps' series) and write it.
//!
//! A deleted app goes through [`cleanup`]. [`context`] is what every step shares.

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
