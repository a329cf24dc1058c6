//! Seeded randomness: every draw is a pure function of (seed, trial index, purpose).

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Stream offsets so that the random startup draws and the TPE draws of one trial never share numbers.
pub(crate) const STREAM_RANDOM: u64 = 0;
/// The stream TPE's candidate draws use.
pub(crate) const STREAM_TPE: u64 = 1 << 32;

/// A generator for trial `index` of a study seeded with `seed`, on stream `purpose`.
pub(crate) fn for_trial(seed: u64, index: u32, purpose: u64) -> Rng {
    let mut inner = ChaCha8Rng::seed_from_u64(seed);
    inner.set_stream(purpose | u64::from(index));
    Rng { inner }
}

/// The draws the samplers need, on top of ChaCha8.
pub(crate) struct Rng {
    inner: ChaCha8Rng,
}

impl Rng {
    /// A uniform draw in `[0, 1)` with 53 random bits.
    pub(crate) fn unit(&mut self) -> f64 {
        #[allow(
            clippy::cast_precision_loss,
            reason = "53 bits fit an f64 mantissa exactly"
        )]
        let bits = (self.inner.next_u64() >> 11) as f64;
        bits * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (`n > 0`), by widening multiplication.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.inner.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).unwrap_or(0)
    }

    /// A standard normal draw (Box-Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}
