//! A backup schedule's cron expression and time zone, parsed once when the spec is checked
//! ([`crate::backup::MySQLBackupSpec::checked`]), and the schedule maths: a 5-field cron
//! expression evaluated in an IANA time zone (croner on jiff's bundled time zone database). Daylight saving changes follow croner's (and Vixie cron's)
//! rules: a fire time that falls into a gap runs once, right after the gap; one that falls into
//! an overlap runs once, at its first occurrence.

use std::time::Duration;

use crate::validation::Problems;
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A parsed schedule.
#[derive(Debug, Clone)]
pub struct Plan {
    cron: croner::Cron,
    zone: TimeZone,
}

impl Plan {
    /// Parses a cron expression (`spec.schedule.cron`) and an IANA time zone
    /// (`spec.schedule.timeZone`); each one that cannot be parsed is a problem of its field.
    pub fn parse(cron: &str, time_zone: &str, problems: &mut Problems) -> Option<Self> {
        Self::parse_fields(cron, time_zone, "spec.schedule.cron", "spec.schedule.timeZone", problems)
    }

    /// [`Plan::parse`] of the fields `cron_field` and `zone_field`.
    pub fn parse_fields(
        cron: &str,
        time_zone: &str,
        cron_field: &str,
        zone_field: &str,
        problems: &mut Problems,
    ) -> Option<Self> {
        let cron = cron_expression(cron).map_err(|problem| problems.add(cron_field, problem));
        let zone = TimeZone::get(time_zone).map_err(|_| {
            let problem =
                format!("{time_zone:?} is not an IANA time zone name (examples: UTC, Europe/Paris, America/New_York)");
            problems.add(zone_field, problem);
        });
        Some(Self { cron: cron.ok()?, zone: zone.ok()? })
    }

    /// The latest fire time after `after` and at or before `now`: the one run a schedule
    /// starts for, however many fire times it missed.
    pub fn latest_due(&self, after: Timestamp, now: Timestamp) -> Option<Timestamp> {
        let previous = self.cron.find_previous_occurrence(&now.to_zoned(self.zone.clone()), true).ok()?;
        let previous = previous.timestamp();
        (previous > after).then_some(previous)
    }

    /// The first fire time after `now`.
    pub fn next_after(&self, now: Timestamp) -> Option<Timestamp> {
        self.cron.find_next_occurrence(&now.to_zoned(self.zone.clone()), false).ok().map(|z| z.timestamp())
    }

    /// The time between the next two fire times after `now`.
    pub fn interval(&self, now: Timestamp) -> Option<Duration> {
        let first = self.next_after(now)?;
        let second = self.next_after(first)?;
        Some(Duration::from_millis(u64::try_from(second.as_millisecond() - first.as_millisecond()).ok()?))
    }
}

/// Parses a standard 5-field cron expression (no seconds field, no year field).
fn cron_expression(expression: &str) -> Result<croner::Cron, String> {
    let fields = expression.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "{expression:?} has {fields} fields; use the standard 5: minute hour day-of-month month day-of-week (for example \"0 3 * * *\")"
        ));
    }
    expression.parse::<croner::Cron>().map_err(|e| format!("{expression:?} is not a valid cron expression: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cron: &str, zone: &str) -> Plan {
        Plan::parse(cron, zone, &mut Problems::default()).unwrap()
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn next_fire_time_is_in_the_zone() {
        let daily = plan("0 3 * * *", "Europe/Paris");
        assert_eq!(daily.next_after(ts("2026-06-01T00:00:00Z")), Some(ts("2026-06-01T01:00:00Z")));
        assert_eq!(daily.next_after(ts("2026-12-01T00:00:00Z")), Some(ts("2026-12-01T02:00:00Z")));
        assert_eq!(daily.interval(ts("2026-06-01T00:00:00Z")), Some(Duration::from_secs(86_400)));
    }

    #[test]
    fn spring_forward_gap_runs_once_after_the_gap() {
        // Europe/Paris, 2026-03-29: 02:00 jumps to 03:00; 02:30 does not exist that day.
        let gap = plan("30 2 * * *", "Europe/Paris");
        let next = gap.next_after(ts("2026-03-28T12:00:00Z")).unwrap();
        assert_eq!(next, ts("2026-03-29T01:00:00Z"), "runs at 03:00 CEST, right after the gap");
        let after = gap.next_after(next).unwrap();
        assert_eq!(after, ts("2026-03-30T00:30:00Z"), "then 02:30 CEST as usual");
    }

    #[test]
    fn fall_back_overlap_runs_once() {
        // Europe/Paris, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
        let overlap = plan("30 2 * * *", "Europe/Paris");
        let first = overlap.next_after(ts("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(first, ts("2026-10-25T00:30:00Z"), "02:30 CEST, the first occurrence");
        assert_eq!(overlap.next_after(first).unwrap(), ts("2026-10-26T01:30:00Z"), "not again at 02:30 CET");
    }

    #[test]
    fn missed_fire_times_give_only_the_latest() {
        let hourly = plan("0 * * * *", "UTC");
        let last_run = ts("2026-01-01T00:00:00Z");
        // The controller was down for five hours: one due time, the latest.
        assert_eq!(hourly.latest_due(last_run, ts("2026-01-01T05:20:00Z")), Some(ts("2026-01-01T05:00:00Z")));
        // Nothing due until the next fire time.
        assert_eq!(hourly.latest_due(ts("2026-01-01T05:00:00Z"), ts("2026-01-01T05:59:59Z")), None);
        // A fire time exactly now is due.
        assert_eq!(hourly.latest_due(last_run, ts("2026-01-01T01:00:00Z")), Some(ts("2026-01-01T01:00:00Z")));
    }

    #[test]
    fn bad_expressions_and_zones_name_their_field() {
        let bad = |cron: &str, zone: &str| {
            let mut problems = Problems::default();
            assert!(Plan::parse(cron, zone, &mut problems).is_none());
            problems.into_result().unwrap_err().first_field().to_string()
        };
        assert_eq!(bad("61 * * * *", "UTC"), "spec.schedule.cron");
        assert_eq!(bad("0 0 3 * * *", "UTC"), "spec.schedule.cron");
        assert_eq!(bad("0 3 * * *", "Mars/Olympus"), "spec.schedule.timeZone");
    }
}
