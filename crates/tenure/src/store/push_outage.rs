//! Says when a store's push channel (PostgreSQL LISTEN, Redis pub/sub, the
//! etcd watch) goes down and when it is back: once per outage, so an operator
//! sees it without debug logging, and a flapping connection does not flood
//! the log. While it is down, followers are not woken by releases: they read
//! when the lease they last saw would expire, and everyone reads once the
//! channel is back.

use std::fmt::Display;
use std::time::Instant;

/// One listener task's view of its channel.
#[derive(Debug, Default)]
pub(crate) struct PushOutage {
    since: Option<Instant>,
}

impl PushOutage {
    /// The channel failed; `why` must not quote secrets (callers pass what
    /// their error type prints without a password).
    pub(crate) fn lost(&mut self, channel: &str, store: &str, why: &dyn Display) {
        if self.since.is_some() {
            tracing::debug!(store, "{channel} still down: {why}");
            return;
        }
        self.since = Some(Instant::now());
        tracing::warn!(
            store,
            "{channel} lost ({why}): until it is back, followers take over only when the lease they saw expires"
        );
    }

    /// The channel works again (everyone has been told to read).
    pub(crate) fn restored(&mut self, channel: &str, store: &str) {
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
        let mut o = PushOutage::default();
        o.restored("watch", "s");
        assert!(o.since.is_none(), "nothing to end before a loss");
        o.lost("watch", "s", &"reset");
        let first = o.since;
        o.lost("watch", "s", &"refused");
        assert_eq!(o.since, first, "a second failure is the same outage");
        o.restored("watch", "s");
        assert!(o.since.is_none());
    }
}
