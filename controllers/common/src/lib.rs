//! What every visitors-operator controller shares: flags, telemetry, the metrics and health
//! server, per-object backoff, server-side apply, events, leader election, startup checks and
//! graceful shutdown. A controller crate adds its reconcile and its builders; nothing else.

pub mod agent_job;
pub mod apply;
pub mod args;
pub mod backoff;
pub mod certificates;
pub mod events;
pub mod finalizer;
pub mod leader;
pub mod lock;
pub mod metrics;
pub mod operation;
pub mod password;
pub mod process;
pub mod reconcile;
pub mod server;
pub mod shutdown;
pub mod startup;
pub mod status;
pub mod telemetry;
pub mod testing;
pub mod watch;

pub use args::ControllerArgs;
pub use reconcile::{ReconcileFailure, Runtime};
