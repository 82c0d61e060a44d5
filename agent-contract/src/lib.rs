//! The contract between the controllers and the agent they run in Jobs, shared by both sides so
//! that they cannot drift apart:
//! - [`command`]: the agent's subcommands and arguments, which the agent parses and the
//!   controllers render into a Job's arguments;
//! - [`env`]: the environment variables the agent reads;
//! - [`summary`]: the one-line JSON summary the agent reports, which the controllers read from
//!   the Job's termination message.

pub mod command;
pub mod env;
pub mod summary;
pub mod text;

pub use command::{AgentCli, BackupArgs, Command, Compression, DeleteArgs, RestoreArgs};
pub use summary::{AgentSummary, Operation};
