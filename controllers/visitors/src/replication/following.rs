//! How each server follows the primary: how fast it applies transactions against the primary's
//! commits, from the positions the last looks read; the failover budget
//! (docs/high-availability.md). Pure: the controller keeps a member's recent [`Sample`]s between
//! looks and [`following`] judges them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Rates are measured over this much of the recent looks.
pub const RATE_WINDOW_SECONDS: f64 = 30.0;
/// A replica falls behind for good when its distance to the primary grew over this long.
pub const FALLING_BEHIND_SECONDS: f64 = 120.0;
/// A distance below this many seconds of the primary's commits is no backlog to speak of.
const NEGLIGIBLE_SECONDS: f64 = 5.0;
/// Nor one below this many transactions, whatever the commit rate.
const NEGLIGIBLE_TRANSACTIONS: u64 = 100;
/// Samples older than this are dropped.
const KEPT_SECONDS: f64 = FALLING_BEHIND_SECONDS + 30.0;

/// One look at a server, against the primary at the same look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When the look was made.
    pub at: Instant,
    /// The primary's transactions (see `Position::transactions`).
    pub primary: u64,
    /// What the server applied.
    pub applied: u64,
    /// What it received, applied or not.
    pub received: u64,
}

impl Sample {
    /// Transactions the primary committed that the server has not applied.
    pub fn behind(&self) -> u64 {
        self.primary.saturating_sub(self.applied)
    }

    /// Transactions it received and has not applied: what a promotion would wait for.
    pub fn backlog(&self) -> u64 {
        self.received.saturating_sub(self.applied)
    }
}

/// How one server follows the primary.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Following {
    /// Transactions it applied a second over the rate window; `None` until two looks span a
    /// second.
    pub apply_rate: Option<f64>,
    /// Transactions the primary committed a second over the same looks.
    pub commit_rate: Option<f64>,
    /// See [`Sample::behind`], at the last look.
    pub behind: u64,
    /// See [`Sample::backlog`], at the last look.
    pub backlog: u64,
    /// Its distance to the primary grew over the last [`FALLING_BEHIND_SECONDS`] and is more
    /// than a few seconds of commits: it does not keep up.
    pub falling_behind: bool,
    /// Seconds until it holds what the primary holds, at the rates measured; `Some(0.0)` when it
    /// is not behind by more than a few seconds of commits, `None` when it does not gain on the
    /// primary.
    pub catch_up_seconds: Option<f64>,
}

/// Adds `sample` to a server's `samples` (oldest first), dropping those too old to matter; a
/// look within half a second of the last replaces it.
pub fn record(samples: &mut VecDeque<Sample>, sample: Sample) {
    // A server whose counter went back (started again empty) starts a new history.
    if samples.back().is_some_and(|last| sample.applied < last.applied) {
        samples.clear();
    } else if samples.back().is_some_and(|last| sample.at.duration_since(last.at) < Duration::from_millis(500)) {
        samples.pop_back();
    }
    samples.push_back(sample);
    while samples.front().is_some_and(|first| seconds_between(first, &sample) > KEPT_SECONDS) {
        samples.pop_front();
    }
}

/// How the server of `samples` (oldest first) keeps up.
pub fn following(samples: &VecDeque<Sample>) -> Following {
    let Some(last) = samples.back().copied() else { return Following::default() };
    let window: Vec<&Sample> = samples.iter().filter(|s| seconds_between(s, &last) <= RATE_WINDOW_SECONDS).collect();
    let (apply_rate, commit_rate) = match window.first() {
        Some(first) if seconds_between(first, &last) >= 1.0 => {
            let span = seconds_between(first, &last);
            (
                Some(last.applied.saturating_sub(first.applied) as f64 / span),
                Some(last.primary.saturating_sub(first.primary) as f64 / span),
            )
        }
        _ => (None, None),
    };
    let negligible = |behind: u64| {
        behind < NEGLIGIBLE_TRANSACTIONS || commit_rate.is_some_and(|c| (behind as f64) < c * NEGLIGIBLE_SECONDS)
    };
    let catch_up_seconds = match (last.behind(), apply_rate, commit_rate) {
        (behind, _, _) if negligible(behind) => Some(0.0),
        (behind, Some(apply), Some(commit)) if apply > commit => Some(behind as f64 / (apply - commit)),
        _ => None,
    };
    Following {
        apply_rate,
        commit_rate,
        behind: last.behind(),
        backlog: last.backlog(),
        falling_behind: !negligible(last.behind()) && grew_for_good(samples, &last),
        catch_up_seconds,
    }
}

/// Whether the distance to the primary grew over the whole of the last
/// [`FALLING_BEHIND_SECONDS`]: larger now than at the start of that span and than halfway.
fn grew_for_good(samples: &VecDeque<Sample>, last: &Sample) -> bool {
    let Some(start) = samples.iter().rev().find(|s| seconds_between(s, last) >= FALLING_BEHIND_SECONDS) else {
        return false;
    };
    let halfway =
        samples.iter().rev().find(|s| seconds_between(s, last) >= FALLING_BEHIND_SECONDS / 2.0).unwrap_or(start);
    last.behind() > start.behind() && last.behind() > halfway.behind()
}

/// Seconds from `earlier`'s look to `later`'s.
fn seconds_between(earlier: &Sample, later: &Sample) -> f64 {
    later.at.duration_since(earlier.at).as_secs_f64()
}

/// The seconds a failover now would wait for its new primary to apply what it received: the
/// `backlog` of the replica it would promote at its `apply_rate`; `None` when that replica has
/// a backlog and no measured rate.
pub fn expected_failover_wait(backlog: u64, apply_rate: Option<f64>) -> Option<f64> {
    match (backlog, apply_rate) {
        (0, _) => Some(0.0),
        (backlog, Some(rate)) if rate > 0.0 => Some(backlog as f64 / rate),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 2 s: the primary commits `commits` a second, the server applies `applies`
    /// a second, from `behind` transactions behind, for `seconds`.
    fn steady(commits: u64, applies: u64, behind: u64, seconds: u64) -> VecDeque<Sample> {
        let start = Instant::now();
        let mut samples = VecDeque::new();
        for step in 0..=seconds / 2 {
            let t = step * 2;
            let primary = 1_000_000 + commits * t;
            let applied = 1_000_000 - behind + applies * t;
            let at = start + Duration::from_secs(t);
            record(&mut samples, Sample { at, primary, applied, received: primary.min(applied + 50) });
        }
        samples
    }

    /// Each case: commit rate, apply rate, starting distance, seconds watched; falling behind,
    /// and whether it catches up.
    #[test]
    fn a_replica_falls_behind_only_when_its_distance_grows_for_minutes() {
        let cases: [(&str, u64, u64, u64, u64, bool, bool); 7] = [
            ("keeps up", 1500, 1500, 0, 180, false, true),
            ("applies slower, for minutes", 1500, 1000, 0, 180, true, false),
            ("applies slower, not long enough to tell", 1500, 1000, 0, 100, false, false),
            ("applies slower, the distance still negligible", 100, 99, 0, 180, false, true),
            ("catching up a backlog", 1500, 2500, 200_000, 180, false, true),
            ("a steady backlog that does not grow", 1500, 1500, 200_000, 180, false, false),
            ("idle primary, replica idle and even", 0, 0, 0, 180, false, true),
        ];
        for (case, commits, applies, behind, seconds, falling, catching_up) in cases {
            let judged = following(&steady(commits, applies, behind, seconds));
            assert_eq!(judged.falling_behind, falling, "{case}: {judged:?}");
            assert_eq!(judged.catch_up_seconds.is_some(), catching_up, "{case}: {judged:?}");
        }
    }

    #[test]
    fn rates_come_from_the_window_and_the_catch_up_from_the_difference() {
        let caught_up = following(&steady(1000, 3000, 60_000, 60));
        assert_eq!(caught_up.apply_rate, Some(3000.0));
        assert_eq!(caught_up.commit_rate, Some(1000.0));
        // 60,000 behind at t = 0, 120,000 gained by t = 60: caught up.
        assert_eq!(caught_up.behind, 0);
        let behind = following(&steady(1000, 3000, 100_000, 20));
        assert_eq!(behind.behind, 60_000);
        assert_eq!(behind.catch_up_seconds, Some(30.0), "{behind:?}");
        assert_eq!(behind.backlog, 50);
        assert_eq!(following(&VecDeque::new()), Following::default());
    }

    #[test]
    fn a_server_started_again_empty_starts_a_new_history() {
        let mut samples = steady(100, 100, 0, 20);
        let at = samples.back().unwrap().at + Duration::from_secs(10);
        record(&mut samples, Sample { at, primary: 1_003_000, applied: 10, received: 10 });
        assert_eq!(samples.len(), 1);
        assert_eq!(following(&samples).apply_rate, None);
    }

    #[test]
    fn the_expected_failover_wait_is_the_backlog_at_the_apply_rate() {
        assert_eq!(expected_failover_wait(0, None), Some(0.0));
        assert_eq!(expected_failover_wait(3000, Some(1500.0)), Some(2.0));
        assert_eq!(expected_failover_wait(3000, Some(0.0)), None);
        assert_eq!(expected_failover_wait(3000, None), None);
    }
}
