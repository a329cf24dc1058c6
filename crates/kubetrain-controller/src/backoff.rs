//! Per-TrainJob exponential backoff after failed reconciles.
//!
//! kube-runtime's `error_policy` never hears about successes (kube-rs/kube#1916), so the attempt counter lives
//! here: [`Backoff::failed`] counts a failure and says how long to wait, [`Backoff::succeeded`] forgets the
//! TrainJob. Delays are `base × 2^(failures-1)`, capped at `max`; no jitter, so tests and operators can predict
//! the schedule.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A TrainJob's key: namespace and name.
pub type Key = (String, String);

/// Failure counts per TrainJob.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<Key, u32>>,
}

impl Backoff {
    /// A backoff starting at `base` and never waiting longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max: max.max(base),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a failed reconcile of `key` and returns the delay before the next try.
    pub fn failed(&self, key: &Key) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        self.delay(*n)
    }

    /// Forgets the failures of `key` after a successful reconcile.
    pub fn succeeded(&self, key: &Key) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Failures of `key` since its last success.
    #[cfg(test)]
    pub(crate) fn failures(&self, key: &Key) -> u32 {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// The delay after `failures` consecutive failures (`failures >= 1`).
    pub fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << exponent)
            .map_or(self.max, |d| d.min(self.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        ("ns".into(), name.into())
    }

    #[test]
    fn doubles_per_failure_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(500), Duration::from_secs(5));
        let delays: Vec<_> = (0..7).map(|_| b.failed(&key("a"))).collect();
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(b.failures(&key("a")), 7);
    }

    #[test]
    fn keys_are_independent_and_success_resets() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        b.failed(&key("a"));
        b.failed(&key("a"));
        assert_eq!(b.failed(&key("b")), Duration::from_secs(1));
        b.succeeded(&key("a"));
        assert_eq!(b.failures(&key("a")), 0);
        assert_eq!(b.failed(&key("a")), Duration::from_secs(1));
        assert_eq!(b.failures(&key("b")), 1);
    }

    #[test]
    fn huge_failure_counts_do_not_overflow() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(b.delay(40), Duration::from_secs(300));
    }
}
