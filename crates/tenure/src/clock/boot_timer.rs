//! Sleeping on `CLOCK_BOOTTIME` itself, so an idle process wakes when its
//! deadline comes rather than ten times a second to look.
//!
//! tokio's timers run on `CLOCK_MONOTONIC`, which stops while the machine
//! is suspended; a deadline slept on it alone would fire late by the whole
//! suspension. Slicing every sleep into short tokio sleeps bounds that, at
//! the price of a wake-up per slice in every sleeping task: a few hundred
//! idle replicas on one small machine then spend their cores waking up. A
//! `timerfd` on `CLOCK_BOOTTIME` counts through a suspension and fires
//! once. It is driven by async-io's reactor rather than tokio's: tokio's
//! `AsyncFd` panics in a runtime built without its I/O driver, and a
//! library cannot tell which runtime it was given. No crate offers a
//! boot-time sleep for tokio, hence this module.
//!
//! The timer is relative (armed for the time left, not for an instant):
//! where the process's clock reads are faked (libfaketime, as the chaos
//! harness does), `CLOCK_BOOTTIME` as the process reads it is no longer
//! the kernel's, and an absolute timer would fire at the kernel's idea of
//! that instant. The timer is armed a little short of the time left, and
//! the caller re-reads the clock and sleeps the rest in tokio slices, so a
//! clock that runs fast (faked, or stepped by a suspension while the timer
//! was being armed) never makes a sleep end late.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_io::Async;
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

/// Timers armed at once in a process, at most: each holds a file
/// descriptor. Past it, sleeps fall back to slices (an elector holds a
/// handful at once; this only binds a process running hundreds).
const MAX_ARMED: usize = 256;

static ARMED: AtomicUsize = AtomicUsize::new(0);

/// Sleeps shorter than this are left to the caller's tokio slices: a file
/// descriptor and a reactor registration are not worth it.
const SHORTEST: Duration = Duration::from_millis(200);

/// One of the [`MAX_ARMED`] places, given back when dropped.
struct Place;

impl Place {
    fn take() -> Option<Self> {
        ARMED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |armed| {
                (armed < MAX_ARMED).then_some(armed + 1)
            })
            .ok()
            .map(|_| Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        ARMED.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How much of `left` to arm a timer for: all but a hundredth (at least a
/// millisecond), which the caller sleeps in slices after re-reading the
/// clock.
fn armed_for(left: Duration) -> Duration {
    left.saturating_sub((left / 100).max(Duration::from_millis(1)))
}

/// Sleeps most of `left` on a boot-time timer; returns at once when the
/// sleep is short, when [`MAX_ARMED`] timers are armed, or when the system
/// refused a timer. The caller re-reads its clock after it either way and
/// sleeps what is left in slices.
pub(super) async fn sleep_most_of(left: Duration) {
    if left < SHORTEST {
        return;
    }
    let Some(_place) = Place::take() else {
        return;
    };
    let fired = match arm(armed_for(left)).and_then(Async::new) {
        Ok(timer) => timer.readable().await,
        Err(e) => Err(e),
    };
    if let Err(e) = fired {
        tracing::debug!("no boot-time timer ({e}); sleeping in slices");
    }
}

/// A non-blocking timer on `CLOCK_BOOTTIME`, armed to fire once, `after`
/// from now.
fn arm(after: Duration) -> std::io::Result<OwnedFd> {
    let timer = timerfd_create(
        TimerfdClockId::Boottime,
        TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
    )?;
    let value = Timespec::try_from(after.max(Duration::from_nanos(1)))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let once = Itimerspec {
        it_interval: Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    timerfd_settime(&timer, TimerfdTimerFlags::empty(), &once)?;
    Ok(timer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_is_armed_short_of_the_time_left() {
        assert_eq!(
            armed_for(Duration::from_secs(10)),
            Duration::from_millis(9_900)
        );
        assert_eq!(
            armed_for(Duration::from_millis(50)),
            Duration::from_millis(49)
        );
        assert_eq!(armed_for(Duration::ZERO), Duration::ZERO);
    }
}
