//! What every step of a MySQLBackup reconcile shares: the context and the error a reconcile
//! fails with.

use std::sync::Arc;

use controller_common::Runtime;
use controller_common::operation::AgentSettings;

use crate::metrics::BackupMetrics;

pub struct Context {
    pub runtime: Arc<Runtime>,
    pub settings: AgentSettings,
    pub metrics: Arc<BackupMetrics>,
}

impl Context {
    /// The context of `runtime`, with the backup metrics registered in its registry.
    pub fn new(runtime: Arc<Runtime>, settings: AgentSettings) -> Self {
        let metrics = Arc::new(BackupMetrics::default());
        metrics.register(&runtime.metrics);
        Context { runtime, settings, metrics }
    }
}

/// Why a reconcile failed: its steps only talk to the API.
pub use controller_common::error::Error;
