//! Redis pub/sub: a release, acquisition or hand-over wakes followers and
//! observers at once instead of at their next poll.
//!
//! One subscriber connection per store, started on the first subscription; it
//! reconnects by itself and then tells every subscriber that anything may
//! have changed (messages published while it was away are lost: pub/sub does
//! not queue).

use std::sync::Weak;
use std::time::Duration;

use crate::store::push_outage::PushOutage;
use crate::store::wakeups::{Sender, Wakeups};
use crate::store::Changes;
use futures_util::StreamExt;

pub(super) struct PushHub {
    client: redis::Client,
    channel: String,
    /// The store's URL without its password, for the outage log lines.
    described: String,
    wakeups: Wakeups,
}

impl PushHub {
    pub(super) fn new(client: redis::Client, channel: String, described: String) -> Self {
        Self {
            client,
            channel,
            described,
            wakeups: Wakeups::new(),
        }
    }

    pub(super) fn subscribe(&self) -> Option<Changes> {
        let (client, channel) = (self.client.clone(), self.channel.clone());
        let described = self.described.clone();
        self.wakeups
            .subscribe(|tx| listen(client, channel, described, tx))
    }
}

/// Runs until the store (and with it the sender) is dropped.
async fn listen(client: redis::Client, channel: String, store: String, tx: Weak<Sender>) {
    const WHAT: &str = "Redis pub/sub";
    // Redis errors can quote the password: only their kind goes in the log.
    let kind = |e: &redis::RedisError| format!("{:?}", e.kind());
    let mut outage = PushOutage::default();
    let mut delay = Duration::from_millis(100);
    loop {
        if tx.strong_count() == 0 {
            return;
        }
        let mut pubsub = match client.get_async_pubsub().await {
            Ok(p) => p,
            Err(e) => {
                outage.lost(WHAT, &store, &kind(&e));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = pubsub.subscribe(&channel).await {
            outage.lost(WHAT, &store, &kind(&e));
            tokio::time::sleep(delay).await;
            continue;
        }
        delay = Duration::from_millis(100);
        match tx.upgrade() {
            Some(t) => {
                let _ = t.send(None);
            }
            None => return,
        }
        outage.restored(WHAT, &store);
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
    }
}
