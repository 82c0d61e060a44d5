//! visitors-agent: consistent, parallel, verifiable MySQL/MariaDB backups, logical and physical.
//!
//! - [`cli`]: the command line and the JSON summary;
//! - [`backup`], [`restore`], [`verify`], [`delete`], [`unpack`]: the operations;
//! - [`physical`]: physical backups, the stream of the server's own backup tool;
//! - [`binlog`]: the binary log archive, its archiver and its replay (point-in-time recovery);
//! - [`mysql`]: connections, catalog, the shared snapshot;
//! - [`storage`]: directories and S3 buckets through `object_store`;
//! - [`format`]: the backup format (see docs/backup-format.md);
//! - [`telemetry`]: logs, and spans in the caller's trace.

pub mod backup;
pub mod binlog;
pub mod cli;
pub mod content;
pub mod delete;
pub mod drill;
pub mod encryption;
pub mod error;
pub mod format;
pub mod mysql;
pub mod physical;
pub mod progress;
pub mod restore;
pub mod shutdown;
pub mod storage;
pub mod telemetry;
pub mod unpack;
pub mod verify;

pub use error::{AgentError, Result};
