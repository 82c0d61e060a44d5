//! The times a schedule's fire times, drills and deadlines are counted from and to.

use std::time::Duration;

use jiff::Timestamp;
use visitors_api::MySQLBackup;

/// When `object` was created, as the API server recorded it.
pub fn created(object: &MySQLBackup) -> Option<Timestamp> {
    object.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// How long from `from` to `to`; nothing when `to` is not later.
pub fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::from_millis(u64::try_from(to.as_millisecond() - from.as_millisecond()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_already_past_is_no_wait() {
        let at = |second| Timestamp::from_second(second).unwrap();
        assert_eq!(until(at(10), at(70)), Duration::from_secs(60));
        assert_eq!(until(at(70), at(10)), Duration::ZERO);
    }
}
