//! The MySQL side: connections and their errors, the catalog (what to back up), the shared
//! snapshot of backup workers, and row streaming and loading.

pub mod catalog;
pub mod connection;
pub mod snapshot;
pub mod users;

pub use connection::{ConnectionSettings, Connector};
