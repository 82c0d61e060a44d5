//! The contract between the controllers and the agent they run in Jobs, shared by both sides so
//! that they cannot drift apart:
//! - [`command`]: the agent's subcommands and arguments, which the agent parses and the
//!   controllers render into a Job's arguments;
//! - [`env`]: the environment variables the agent reads;
//! - [`summary`]: the one-line JSON summary the agent reports, which the controllers read from
//!   the Job's termination message;
//! - [`archive`]: what the binary-log archiver and the backup controller tell each other
//!   through the archiver's Lease;
//! - [`gtid`]: global transaction identifiers of MariaDB and MySQL, and their sets;
//! - [`physical`]: how a physical backup's tool container hands its stream to the agent.

pub mod archive;
pub mod command;
pub mod env;
pub mod gtid;
pub mod physical;
pub mod summary;
pub mod text;

pub use command::{
    AgentCli, ArchiveArgs, ArchiverCli, BackupArgs, Command, Compression, DeleteArgs, RestoreArgs, SslMode,
};
pub use summary::{AgentSummary, Operation};
