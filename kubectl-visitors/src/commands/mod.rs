//! One module per subcommand: read, decide (pure, in `view` and `plan`), act, follow.

pub mod backup;
pub mod drill;
pub mod plan;
pub mod restore;
pub mod runs;
pub mod status;
pub mod switchover;

use jiff::Timestamp;

/// Now, to the second: statuses and annotations keep whole seconds.
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now())
}
