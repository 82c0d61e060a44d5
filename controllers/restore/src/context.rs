//! What every step of a MySQLRestore reconcile shares: the context and the error a reconcile
//! fails with.

use std::sync::Arc;

use controller_common::Runtime;
use controller_common::operation::AgentSettings;

use crate::metrics::RestoreMetrics;

pub struct Context {
    pub runtime: Arc<Runtime>,
    pub settings: AgentSettings,
    pub metrics: RestoreMetrics,
}

/// Why a reconcile failed: its steps only talk to the API.
pub use controller_common::error::Error;
