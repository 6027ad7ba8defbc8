//! Local clocks for the leader's own deadline.
//!
//! A leader believes it leads until a local deadline computed from an instant taken
//! *before* it sent the successful acquire or renew (the design's rule 3: a leader's belief is local and conservative). That instant
//! must come from a clock that keeps counting while the machine is suspended, or a
//! laptop lid or a frozen VM would stretch the belief past the lease:
//! [`BootClock`] reads Linux `CLOCK_BOOTTIME`. Tests use [`ManualClock`], which
//! only moves when told to.
//!
//! Times are [`Duration`]s since the clock's own origin; only differences matter.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// A future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A monotonic clock that can also sleep until one of its own instants.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current instant, as time since the clock's origin.
    fn now(&self) -> Duration;

    /// A future that completes once [`now`](Clock::now) has reached `deadline`.
    fn sleep_until(&self, deadline: Duration) -> Sleep;
}

/// The production clock: `CLOCK_BOOTTIME` on Linux (counts through suspend),
/// `CLOCK_MONOTONIC` elsewhere.
///
/// ```
/// use tenure::clock::{BootClock, Clock};
/// let c = BootClock;
/// let a = c.now();
/// assert!(c.now() >= a);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

#[cfg(target_os = "linux")]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_BOOTTIME;
#[cfg(not(target_os = "linux"))]
const CLOCK_ID: libc::clockid_t = libc::CLOCK_MONOTONIC;

/// Longest single tokio sleep inside [`BootClock::sleep_until`] where no
/// boot-time timer sleeps (`boot_timer.rs`): short sleeps, the end of a
/// long one, other systems. tokio's timer runs on `CLOCK_MONOTONIC`, which
/// stops during suspend; waking at least this often and re-reading the
/// clock bounds how late a deadline fires after a resume.
const MAX_SLEEP_SLICE: Duration = Duration::from_millis(100);

#[cfg(target_os = "linux")]
mod boot_timer;

impl BootClock {
    fn read() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the
        // kernel supports on every target we build for.
        let rc = unsafe { libc::clock_gettime(CLOCK_ID, &mut ts) };
        if rc != 0 {
            // Cannot happen with a valid clock id; fall back to tokio's monotonic
            // clock rather than panicking.
            return tokio_fallback();
        }
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

fn tokio_fallback() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

impl Clock for BootClock {
    fn now(&self) -> Duration {
        Self::read()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        Box::pin(async move {
            // Most of the wait on one boot-time timer, where there is one.
            #[cfg(target_os = "linux")]
            if let Some(left) = deadline.checked_sub(Self::read()) {
                boot_timer::sleep_most_of(left).await;
            }
            loop {
                let now = Self::read();
                if now >= deadline {
                    return;
                }
                tokio::time::sleep((deadline - now).min(MAX_SLEEP_SLICE)).await;
            }
        })
    }
}

/// A clock for tests: it stands still until [`advance`](ManualClock::advance) moves it.
///
/// ```
/// use std::time::Duration;
/// use tenure::clock::{Clock, ManualClock};
/// let c = ManualClock::new();
/// let t = c.now();
/// c.advance(Duration::from_secs(3));
/// assert_eq!(c.now() - t, Duration::from_secs(3));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<Duration>>,
}

impl ManualClock {
    /// A clock standing at an arbitrary non-zero origin.
    pub fn new() -> Self {
        Self {
            now: Arc::new(watch::Sender::new(Duration::from_secs(1_000))),
        }
    }

    /// Moves the clock forward and wakes every sleeper whose deadline has passed.
    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|now| *now += by);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Duration) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            loop {
                if *rx.borrow_and_update() >= deadline {
                    return;
                }
                if rx.changed().await.is_err() {
                    // The clock is gone; nothing will ever wake us.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

/// A clock shared by the pieces of one elector.
pub type SharedClock = Arc<dyn Clock>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_only_when_advanced_past_deadline() {
        let c = ManualClock::new();
        let deadline = c.now() + Duration::from_secs(5);
        let sleeper = tokio::spawn(c.sleep_until(deadline));
        c.advance(Duration::from_secs(4));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        c.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("sleeper woke")
            .expect("no panic");
    }

    /// A long sleep wakes its task a few times, not once per slice: an
    /// idle process must not spend its core waking up. Also in a runtime
    /// without tokio's I/O driver, which an application may build.
    #[test]
    fn a_boot_clock_sleep_wakes_its_task_a_few_times_even_without_tokio_io() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let c = BootClock;
        let start = c.now();
        let deadline = start + Duration::from_millis(600);
        let mut sleep = c.sleep_until(deadline);
        runtime.block_on(std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::Relaxed);
            sleep.as_mut().poll(cx)
        }));
        assert!(c.now() >= deadline, "woke early");
        let polls = polls.load(Ordering::Relaxed);
        // The first poll, the timer's end, the rest's slice, and a spare.
        assert!(polls <= 4, "polled {polls} times in 600 ms");
    }

    #[tokio::test]
    async fn boot_clock_sleeps_until_deadline() {
        let c = BootClock;
        let start = c.now();
        c.sleep_until(start + Duration::from_millis(30)).await;
        assert!(c.now() - start >= Duration::from_millis(30));
    }
}
