//! Per-object exponential retry backoff. kube's `error_policy` is stateless; this keeps one
//! backoff sequence per object UID so that a failing object retries at 0.5 s, 1 s, 2 s, ... up
//! to a cap (with jitter), while every other object is unaffected, and a success resets it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

pub struct ObjectBackoff {
    builder: ExponentialBuilder,
    sequences: Mutex<HashMap<String, ExponentialBackoff>>,
    max: Duration,
}

impl ObjectBackoff {
    /// Delays start at `base`, double on each failure, and stop growing at `max`; each delay
    /// gets random jitter of up to one more `base`-multiple step, capped at `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(base)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self { builder, sequences: Mutex::new(HashMap::new()), max }
    }

    /// The delay before the next retry of object `uid`, advancing its sequence.
    pub fn next_delay(&self, uid: &str) -> Duration {
        let mut sequences = self.sequences.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sequence = sequences.entry(uid.to_string()).or_insert_with(|| self.builder.build());
        sequence.next().unwrap_or(self.max).min(self.max)
    }

    /// Forgets the failures of `uid` after a successful reconcile (or its deletion).
    pub fn reset(&self, uid: &str) {
        self.sequences.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(uid);
    }

    /// Number of objects currently backing off.
    pub fn tracked(&self) -> usize {
        self.sequences.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(2);

    #[test]
    fn delays_grow_to_the_cap() {
        let backoff = ObjectBackoff::new(BASE, MAX);
        let delays: Vec<Duration> = (0..10).map(|_| backoff.next_delay("a")).collect();
        assert!(delays[0] >= BASE && delays[0] < BASE * 3, "{delays:?}");
        assert!(delays[3] >= BASE * 8, "fourth delay should have doubled three times: {delays:?}");
        assert!(delays.iter().all(|d| *d <= MAX), "{delays:?}");
        assert_eq!(delays[9], MAX, "{delays:?}");
    }

    #[test]
    fn objects_back_off_independently_and_reset() {
        let backoff = ObjectBackoff::new(BASE, MAX);
        for _ in 0..5 {
            backoff.next_delay("failing");
        }
        assert!(backoff.next_delay("other") < BASE * 3);
        assert!(backoff.next_delay("failing") >= BASE * 16);
        backoff.reset("failing");
        assert!(backoff.next_delay("failing") < BASE * 3);
        backoff.reset("failing");
        backoff.reset("other");
        assert_eq!(backoff.tracked(), 0);
    }
}
