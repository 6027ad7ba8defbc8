//! Says when a store's push channel (PostgreSQL LISTEN, Redis pub/sub, the
//! etcd watch) goes down and when it is back: once per outage, so an operator
//! sees it without debug logging, and a flapping connection does not flood
//! the log. While it is down, followers are not woken by releases: they read
//! every tenth of a TTL (`PushHealth`), and everyone reads once the channel
//! is back.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Instant;

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
}
