//! Says when a store's push channel (PostgreSQL LISTEN, Redis pub/sub, the
//! etcd watch) goes down and when it is back: once per outage, so an operator
//! sees it without debug logging, and a flapping connection does not flood
//! the log. While it is down, followers are not woken by releases: they read
//! every tenth of a TTL (`PushHealth`), and everyone reads once the channel
//! is back.

use std::fmt::Display;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::push_health::PushMonitor;

/// One listener task's view of its channel, also published to its store's
/// [`PushMonitor`] (for `push_health()`).
#[derive(Debug)]
pub(crate) struct PushOutage {
    since: Option<Instant>,
    monitor: Arc<PushMonitor>,
}

impl PushOutage {
    pub(crate) fn new(monitor: Arc<PushMonitor>) -> Self {
        Self {
            since: None,
            monitor,
        }
    }

    /// The channel failed; `why` must not quote secrets (callers pass what
    /// their error type prints without a password). True when this begins
    /// an outage: the caller then wakes every subscriber, so followers that
    /// were waiting for a push (until a lease's expiry) start reading at the
    /// slow period instead.
    pub(crate) fn lost(&mut self, channel: &str, store: &str, why: &dyn Display) -> bool {
        if let Some(since) = self.since {
            self.monitor.down(since, why.to_string());
            tracing::debug!(store, "{channel} still down: {why}");
            return false;
        }
        let since = Instant::now();
        self.since = Some(since);
        self.monitor.down(since, why.to_string());
        tracing::warn!(
            store,
            "{channel} lost ({why}): until it is back, followers read the leases every tenth of a TTL"
        );
        true
    }

    /// The channel works again (everyone has been told to read).
    pub(crate) fn restored(&mut self, channel: &str, store: &str) {
        self.monitor.up();
        if let Some(since) = self.since.take() {
            tracing::info!(
                store,
                down_for = ?since.elapsed(),
                "{channel} is back; followers read the leases again"
            );
        }
    }
}

/// A listener's pauses between connection attempts: doubling from 100 ms
/// to 5 s, and back to none only once a channel has stayed up for
/// [`Self::STABLE`]. A channel that opens and drops at once (a proxy's idle
/// timeout, a subscriber killed for its output buffer) would otherwise be
/// reopened, and every follower woken to read, ten times a second.
#[derive(Debug)]
pub(crate) struct Backoff {
    delay: Duration,
    up_since: Option<Instant>,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);
    /// How long a channel must stay up for its next loss to be retried at once.
    pub(crate) const STABLE: Duration = Duration::from_secs(10);

    pub(crate) fn new() -> Self {
        Self {
            delay: Self::FIRST,
            up_since: None,
        }
    }

    /// The channel is open.
    pub(crate) fn opened(&mut self) {
        self.up_since = Some(Instant::now());
    }

    /// How long to wait before the next attempt, after a failed attempt or
    /// a lost channel; advances the back-off.
    pub(crate) fn next_pause(&mut self) -> Duration {
        if self
            .up_since
            .take()
            .is_some_and(|t| t.elapsed() >= Self::STABLE)
        {
            self.delay = Self::FIRST;
            return Duration::ZERO;
        }
        let pause = self.delay;
        self.delay = (self.delay * 2).min(Self::MAX);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_reported_once_and_ends_once() {
        let monitor = Arc::new(PushMonitor::new("watch"));
        let mut o = PushOutage::new(Arc::clone(&monitor));
        assert!(!monitor.health().is_down(), "not down before a loss");
        o.restored("watch", "s");
        assert!(o.since.is_none(), "nothing to end before a loss");
        assert!(o.lost("watch", "s", &"reset"), "a loss begins an outage");
        let first = o.since;
        assert!(!o.lost("watch", "s", &"refused"), "not a second time");
        assert_eq!(o.since, first, "a second failure is the same outage");
        assert!(
            matches!(monitor.health(), crate::store::PushHealth::Down { reason, .. } if reason == "refused"),
            "the store sees the outage and its latest reason"
        );
        o.restored("watch", "s");
        assert!(o.since.is_none());
        assert!(matches!(
            monitor.health(),
            crate::store::PushHealth::Up { .. }
        ));
    }

    #[test]
    fn a_channel_that_drops_at_once_is_reopened_ever_more_slowly() {
        let mut b = Backoff::new();
        let mut pauses = Vec::new();
        for _ in 0..8 {
            b.opened();
            pauses.push(b.next_pause().as_millis());
        }
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // Failed attempts (never opened) back off the same way.
        let mut b = Backoff::new();
        assert_eq!(b.next_pause().as_millis(), 100);
        assert_eq!(b.next_pause().as_millis(), 200);
    }
}
