//! The public API of visitors-operator: the three custom resources, their validation, the
//! names and labels of the objects derived from them, and condition helpers.
//! This crate does no I/O.

// kube's derive takes one `printcolumn(...)` per column; clippy mistakes them for duplicates.
#![allow(clippy::duplicated_attributes)]

pub mod backup;
pub mod conditions;
pub mod crds;
pub mod drill;
pub mod encryption;
pub mod labels;
pub mod operation;
pub mod point_in_time;
pub mod recovery;
pub mod restore;
pub mod schedule;
pub mod storage;
pub mod validation;
pub mod visitors_app;

pub use backup::{MySQLBackup, MySQLBackupSpec, MySQLBackupStatus};
pub use restore::{MySQLRestore, MySQLRestoreSpec, MySQLRestoreStatus};
pub use validation::{FieldError, InvalidSpec};
pub use visitors_app::{VisitorsApp, VisitorsAppSpec, VisitorsAppStatus};

/// The API group of every custom resource of the suite.
pub const GROUP: &str = "example.com";
/// The one served and stored version.
pub const VERSION: &str = "v1";
/// The `kubectl get <category>` name that lists every kind of the suite.
pub const CATEGORY: &str = "visitors";
