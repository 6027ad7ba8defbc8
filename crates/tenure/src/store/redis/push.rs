//! Redis pub/sub: a release, acquisition or hand-over wakes followers and
//! observers at once instead of at their next poll.
//!
//! One subscriber connection per store, started on the first subscription; it
//! reconnects by itself and then tells every subscriber that anything may
//! have changed (messages published while it was away are lost: pub/sub does
//! not queue).

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::store::util::push_health::{PushHealth, PushMonitor};
use crate::store::util::push_outage::{Backoff, PushOutage};
use crate::store::util::wakeups::{wake_all, Sender, Wakeups};
use crate::store::Changes;
use futures_util::StreamExt;

const WHAT: &str = "Redis pub/sub";

pub(super) struct PushHub {
    client: redis::Client,
    channel: String,
    /// The store's URL without its password, for the outage log lines.
    described: String,
    wakeups: Wakeups,
    monitor: Arc<PushMonitor>,
}

impl PushHub {
    pub(super) fn new(client: redis::Client, channel: String, described: String) -> Self {
        Self {
            client,
            channel,
            described,
            wakeups: Wakeups::new(),
            monitor: Arc::new(PushMonitor::new(WHAT)),
        }
    }

    pub(super) fn subscribe(&self) -> Option<Changes> {
        let (client, channel) = (self.client.clone(), self.channel.clone());
        let described = self.described.clone();
        let monitor = Arc::clone(&self.monitor);
        self.wakeups
            .subscribe(|tx| listen(client, channel, described, tx, monitor))
    }

    pub(super) fn health(&self) -> PushHealth {
        self.monitor.health()
    }
}

/// Runs until the store (and with it the sender) is dropped.
async fn listen(
    client: redis::Client,
    channel: String,
    store: String,
    tx: Weak<Sender>,
    monitor: Arc<PushMonitor>,
) {
    // Redis errors can quote the password: only their kind goes in the log.
    let kind = |e: &redis::RedisError| format!("{:?}", e.kind());
    let mut outage = PushOutage::new(monitor);
    let mut backoff = Backoff::new();
    loop {
        if tx.strong_count() == 0 {
            return;
        }
        let subscribed = match client.get_async_pubsub().await {
            Ok(mut p) => match p.subscribe(&channel).await {
                Ok(()) => Ok(p),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        // A refused SUBSCRIBE (an ACL, a proxy without pub/sub) backs off
        // like a refused connection: it will not pass on the next try.
        let pubsub = match subscribed {
            Ok(p) => p,
            Err(e) => {
                if outage.lost(WHAT, &store, &kind(&e)) {
                    wake_all(&tx);
                }
                tokio::time::sleep(backoff.next_pause()).await;
                continue;
            }
        };
        backoff.opened();
        // Back before the wake-up, so the woken see the channel up.
        outage.restored(WHAT, &store);
        match tx.upgrade() {
            Some(t) => {
                let _ = t.send(None);
            }
            None => return,
        }
        let mut messages = pubsub.into_on_message();
        loop {
            // Wake up now and then to notice that the store was dropped.
            let next = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
            let Some(t) = tx.upgrade() else { return };
            match next {
                Err(_) => continue,
                Ok(Some(msg)) => {
                    let payload = String::from_utf8_lossy(msg.get_payload_bytes()).into_owned();
                    let _ = t.send(super::RedisStore::parse_member(&payload));
                }
                Ok(None) => {
                    outage.lost(WHAT, &store, &"connection closed");
                    let _ = t.send(None);
                    break;
                }
            }
        }
        // At once after a channel that stayed up; otherwise backing off.
        tokio::time::sleep(backoff.next_pause()).await;
    }
}
