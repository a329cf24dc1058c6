//! Exponential backoff with jitter between attempts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Backoff before retry number `retry` (1-based): `initial * 2^(retry-1)`, capped, with up to
/// 25 % jitter so parallel downloads do not retry in lockstep.
pub(crate) fn backoff(initial: Duration, retry: u32) -> Duration {
    let factor = 1u32 << retry.saturating_sub(1).min(16);
    let base = initial.saturating_mul(factor).min(MAX_BACKOFF);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // The clock's low digits are random enough to spread retries apart.
    let jitter = base.mul_f64(f64::from(nanos % 1000) / 4000.0);
    base + jitter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let initial = Duration::from_millis(100);
        for (retry, low) in [(1, 100), (2, 200), (3, 400), (4, 800)] {
            let got = backoff(initial, retry);
            let low = Duration::from_millis(low);
            assert!(
                got >= low && got <= low.mul_f64(1.25),
                "retry {retry}: {got:?}"
            );
        }
        assert!(backoff(initial, 40) <= MAX_BACKOFF.mul_f64(1.25));
        assert!(backoff(initial, 40) >= MAX_BACKOFF);
    }
}
