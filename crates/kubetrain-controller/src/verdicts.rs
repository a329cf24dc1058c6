//! Review verdicts remembered for a few seconds: the status server's token reviews and the metrics
//! endpoint's scrape reviews both keep them, so that a token presented again within seconds costs the API
//! server no second review.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Instant;

/// Verdicts by key, each until its own instant, at most `max` of them. When full, the expired ones go, then
/// all of them: a cache emptied costs one more review per caller, never a wrong verdict.
pub(crate) struct Verdicts<K, V> {
    until: Mutex<HashMap<K, (Instant, V)>>,
    max: usize,
}

impl<K: Eq + Hash, V: Clone> Verdicts<K, V> {
    /// An empty cache holding at most `max` verdicts.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            until: Mutex::new(HashMap::new()),
            max,
        }
    }

    /// The verdict on `key` if it is still good at `now`; an expired one is dropped.
    pub(crate) fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        match until.get(key) {
            Some((end, verdict)) if *end > now => Some(verdict.clone()),
            Some(_) => {
                until.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remembers `verdict` on `key` until `end`, making room first if the cache is full at `now`.
    pub(crate) fn insert(&self, key: K, verdict: V, end: Instant, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.len() >= self.max && !until.contains_key(&key) {
            until.retain(|_, (end, _)| *end > now);
            if until.len() >= self.max {
                until.clear();
            }
        }
        until.insert(key, (end, verdict));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.until.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_verdict_is_good_until_its_end_and_gone_after() {
        let verdicts = Verdicts::new(4);
        let now = Instant::now();
        verdicts.insert("token", true, now + SECOND, now);
        assert_eq!(verdicts.get(&"token", now), Some(true));
        assert_eq!(verdicts.get(&"token", now + SECOND / 2), Some(true));
        assert_eq!(verdicts.get(&"token", now + SECOND), None);
        assert_eq!(
            verdicts.len(),
            0,
            "an expired verdict is dropped when asked for"
        );
        assert_eq!(verdicts.get(&"other", now), None);
    }

    #[test]
    fn a_full_cache_drops_expired_verdicts_before_live_ones() {
        let verdicts = Verdicts::new(2);
        let now = Instant::now();
        verdicts.insert("old", 1, now + SECOND, now);
        verdicts.insert("live", 2, now + 10 * SECOND, now);
        let later = now + 2 * SECOND;
        verdicts.insert("new", 3, later + SECOND, later);
        assert_eq!(verdicts.get(&"live", later), Some(2));
        assert_eq!(verdicts.get(&"new", later), Some(3));
        assert_eq!(verdicts.len(), 2);
    }

    #[test]
    fn a_cache_full_of_live_verdicts_is_emptied_and_never_grows_past_its_bound() {
        let verdicts = Verdicts::new(3);
        let now = Instant::now();
        for key in 0..10 {
            verdicts.insert(key, key, now + SECOND, now);
            assert!(
                verdicts.len() <= 3,
                "{} verdicts after {key}",
                verdicts.len()
            );
            assert_eq!(
                verdicts.get(&key, now),
                Some(key),
                "the newest verdict is kept"
            );
        }
    }

    #[test]
    fn renewing_a_verdict_in_a_full_cache_keeps_the_others() {
        let verdicts = Verdicts::new(2);
        let now = Instant::now();
        verdicts.insert("a", 1, now + SECOND, now);
        verdicts.insert("b", 2, now + SECOND, now);
        verdicts.insert("a", 3, now + 2 * SECOND, now);
        assert_eq!(verdicts.get(&"a", now), Some(3));
        assert_eq!(verdicts.get(&"b", now), Some(2));
    }
}
