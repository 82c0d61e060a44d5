//! Point-in-time recovery's data path: the binary log archive.
//!
//! - [`archive`]: the archiver, which streams the server's binary log as a replication client
//!   and stores it in segments;
//! - [`layout`]: where an archive keeps what (docs/backup-format.md, "Binary log archive");
//! - [`resume`]: where the archiver goes on when it (re)connects, perhaps to another server;
//! - [`segment`]: a segment, a binary log file of its own;
//! - [`event`]: events as bytes, and where transactions begin and end;
//! - [`replay`]: replaying the archive after a base backup, up to a time or a GTID set;
//! - [`prune`]: retention of segments no kept backup needs.

pub mod archive;
pub mod event;
pub mod layout;
pub mod prune;
pub mod replay;
pub mod resume;
pub mod segment;
