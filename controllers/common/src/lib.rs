//! What every visitors-operator controller shares: flags, telemetry, the metrics and health
//! server, per-object backoff, server-side apply, events, leader election, startup checks and
//! graceful shutdown. A controller crate adds its reconcile and its builders; nothing else.

pub mod agent_job;
pub mod apply;
pub mod args;
pub mod backoff;
pub mod certificates;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod heap;
pub mod kind;
pub mod leader;
pub mod lock;
pub mod metrics;
pub mod mysql_server;
pub mod operation;
pub mod password;
pub mod process;
pub mod reconcile;
pub mod server;
pub mod shutdown;
pub mod startup;
pub mod status;
pub mod step;
pub mod telemetry;
pub mod testing;
pub mod watch;

pub use args::ControllerArgs;
pub use error::ReconcileFailure;
pub use reconcile::Runtime;
pub use step::Step;
