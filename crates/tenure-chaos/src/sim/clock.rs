//! A [`Clock`] on tokio's (paused, simulated) time, with its own rate and
//! origin, that can step and be frozen.
//!
//! Why not `ManualClock`: the campaign also uses tokio timers (time-outs),
//! and two independent notions of time would have to be advanced in
//! lock-step by hand. On a paused current-thread runtime tokio's clock jumps
//! to the next timer whenever every task is idle, so a clock derived from it
//! makes the real elector run at simulation speed, in one exact order.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::clock::{Clock, Sleep};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug)]
struct State {
    /// The tokio instant at which this clock read `base_local`.
    base_real: Instant,
    base_local: Duration,
    /// Local seconds per real second.
    rate: f64,
    /// While frozen, sleeps do not complete (a stopped process's timers).
    frozen: bool,
}

/// A simulated clock: `local = base_local + (tokio_now − base_real) · rate`.
#[derive(Debug, Clone)]
pub struct SimClock {
    state: Arc<Mutex<State>>,
    /// Wakes sleepers on every change of rate, step or freeze, to re-plan.
    /// A `Notify`, not a `watch`: tokio's watch wakes its receivers in a
    /// random order (sharded), which would break one seed, one run.
    changed: Arc<Notify>,
}

impl SimClock {
    /// A clock reading `origin` now, running at `rate`.
    pub fn new(origin: Duration, rate: f64) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                base_real: Instant::now(),
                base_local: origin,
                rate,
                frozen: false,
            })),
            changed: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(s: &State) -> Duration {
        s.base_local + (Instant::now() - s.base_real).mul_f64(s.rate)
    }

    fn rebase(s: &mut State) {
        s.base_local = Self::read(s);
        s.base_real = Instant::now();
    }

    /// Changes the rate from now on (the reading stays continuous).
    pub fn set_rate(&self, rate: f64) {
        {
            let mut s = self.lock();
            Self::rebase(&mut s);
            s.rate = rate;
        }
        self.changed.notify_waiters();
    }

    /// Steps the clock forward by `by` at once (a wall clock set by hand).
    pub fn step(&self, by: Duration) {
        {
            let mut s = self.lock();
            Self::rebase(&mut s);
            s.base_local += by;
        }
        self.changed.notify_waiters();
    }

    /// Freezes or thaws sleepers (the clock itself keeps counting).
    pub fn set_frozen(&self, frozen: bool) {
        self.lock().frozen = frozen;
        self.changed.notify_waiters();
    }

    /// The real (tokio) instant at which this clock reaches `local`, or `None` if it
    /// has already; `None` too while frozen with no wake-up to plan.
    fn plan(&self, local: Duration) -> Result<Instant, bool> {
        let s = self.lock();
        let now = Self::read(&s);
        if now >= local {
            return Err(!s.frozen);
        }
        // Round up by a nanosecond so the wake-up never reads just short.
        Ok(Instant::now() + (local - now).div_f64(s.rate) + Duration::from_nanos(1))
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        Self::read(&self.lock())
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let this = self.clone();
        Box::pin(async move {
            loop {
                // Registered before the clock is read, so no change is missed.
                let changed = this.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                match this.plan(deadline) {
                    Err(true) => return,
                    // Due, but frozen: wait for the thaw.
                    Err(false) => changed.await,
                    Ok(at) => {
                        tokio::select! {
                            // Listed order when several are ready (not tokio's random pick),
                            // so a simulation seed replays exactly; either order is handled.
                            biased;
                            _ = tokio::time::sleep_until(at) => {}
                            _ = changed => {}
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_slow_clock_sleeps_longer_in_real_time_and_frozen_sleeps_wait() {
        let c = SimClock::new(Duration::from_secs(100), 0.5);
        let start = Instant::now();
        c.sleep_until(Duration::from_secs(101)).await;
        // tokio's timer wheel has millisecond resolution: wake-ups round up.
        let slept = Instant::now() - start;
        assert!(
            slept >= Duration::from_secs(2) && slept <= Duration::from_millis(2_001),
            "{slept:?}"
        );
        c.set_frozen(true);
        let sleeper = tokio::spawn(c.sleep_until(Duration::from_secs(102)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            !sleeper.is_finished(),
            "a frozen clock's sleeper stays asleep"
        );
        c.set_frozen(false);
        tokio::time::timeout(Duration::from_millis(1), sleeper)
            .await
            .expect("woke at the thaw")
            .expect("no panic");
        c.step(Duration::from_secs(10));
        assert!(c.now() >= Duration::from_secs(113));
    }
}
