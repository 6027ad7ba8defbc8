//! The elector's randomness (session ids, jitter), seedable per thread so a
//! simulation on a current-thread runtime replays exactly from its seed.
//!
//! Unseeded threads use `rand::thread_rng()`, as before.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes this thread's tenure randomness (session ids, jitter) a pure
/// function of `seed`, or restores `thread_rng()` with `None`.
///
/// For deterministic simulation (`tenure-chaos sim`), which runs every
/// elector on one current-thread runtime; never needed in production.
///
/// ```
/// tenure::seed_thread_rng(Some(7));
/// tenure::seed_thread_rng(None);
/// ```
#[doc(hidden)]
pub fn seed_thread_rng(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// Runs `f` with this thread's generator: the seeded one if any.
fn with_rng<T>(f: impl FnOnce(&mut dyn rand::RngCore) -> T) -> T {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => f(rng),
        None => f(&mut rand::thread_rng()),
    })
}

/// A random u64 (session ids).
pub(crate) fn u64() -> u64 {
    with_rng(|r| r.gen())
}

/// A factor uniform in `[lo, hi]` (jitter).
pub(crate) fn factor(lo: f64, hi: f64) -> f64 {
    with_rng(|r| r.gen_range(lo..=hi))
}
