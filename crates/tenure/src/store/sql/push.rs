//! PostgreSQL LISTEN/NOTIFY: a graceful handover wakes followers and observers
//! in milliseconds instead of at their next poll.
//!
//! One listening connection per store (per process), started on the first
//! subscription; it reconnects by itself and, after a reconnect, tells every
//! subscriber that anything may have changed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::store::push_health::{PushHealth, PushMonitor};
use crate::store::push_outage::{Backoff, PushOutage};
use crate::store::wakeups::{wake_all, Sender, Wakeups};
use crate::store::{Changes, ElectionKey};
use sqlx::postgres::PgListener;
use sqlx::AnyPool;

const WHAT: &str = "PostgreSQL LISTEN";

/// Separates namespace and election in a payload; names cannot contain it.
const SEP: char = '\u{1f}';

#[derive(Debug)]
pub(super) struct PushHub {
    url: String,
    channel: String,
    wakeups: Wakeups,
    monitor: Arc<PushMonitor>,
}

impl PushHub {
    pub(super) fn new(url: String, prefix: &str) -> Self {
        Self {
            url,
            channel: super::statements::changes_channel(prefix),
            wakeups: Wakeups::new(),
            monitor: Arc::new(PushMonitor::new(WHAT)),
        }
    }

    pub(super) fn subscribe(&self) -> Option<Changes> {
        let (url, channel) = (self.url.clone(), self.channel.clone());
        let monitor = Arc::clone(&self.monitor);
        self.wakeups
            .subscribe(|tx| listen(url, channel, tx, monitor))
    }

    pub(super) fn health(&self) -> PushHealth {
        self.monitor.health()
    }

    pub(super) async fn notify(&self, pool: &AnyPool, key: &ElectionKey) {
        let payload = format!("{}{SEP}{}", key.namespace, key.election);
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(self.channel.as_str())
            .bind(payload)
            .execute(pool)
            .await;
        if let Err(e) = sent {
            tracing::debug!("pg_notify failed: {e}");
        }
    }
}

fn parse(payload: &str) -> Option<ElectionKey> {
    let (ns, election) = payload.split_once(SEP)?;
    Some(ElectionKey::new(ns, election))
}

/// Runs until the store (and with it the sender) is dropped.
async fn listen(url: String, channel: String, tx: Weak<Sender>, monitor: Arc<PushMonitor>) {
    let store = crate::store::redact_url(&url);
    let mut outage = PushOutage::new(monitor);
    let mut backoff = Backoff::new();
    loop {
        if tx.strong_count() == 0 {
            return;
        }
        let failed = match PgListener::connect(&url).await {
            Ok(mut listener) => match listener.listen(&channel).await {
                Ok(()) => Ok(listener),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let mut listener = match failed {
            Ok(l) => l,
            Err(e) => {
                if outage.lost(WHAT, &store, &e) {
                    wake_all(&tx);
                }
                tokio::time::sleep(backoff.next_pause()).await;
                continue;
            }
        };
        backoff.opened();
        // Back before the wake-up, so the woken see the channel up.
        outage.restored(WHAT, &store);
        // We may have missed notifications while disconnected.
        match tx.upgrade() {
            Some(t) => {
                let _ = t.send(None);
            }
            None => return,
        }
        loop {
            // Wake up now and then to notice that the store was dropped.
            let next = tokio::time::timeout(Duration::from_secs(5), listener.try_recv()).await;
            let Some(t) = tx.upgrade() else { return };
            match next {
                Err(_) => continue,
                Ok(Ok(Some(n))) => {
                    let _ = t.send(parse(n.payload()));
                }
                Ok(Ok(None)) => {
                    // Connection lost: connect again above (which says when
                    // it is back), waking everyone first.
                    outage.lost(WHAT, &store, &"connection closed");
                    let _ = t.send(None);
                    break;
                }
                Ok(Err(e)) => {
                    outage.lost(WHAT, &store, &e);
                    let _ = t.send(None);
                    break;
                }
            }
        }
        // At once after a channel that stayed up; otherwise backing off.
        tokio::time::sleep(backoff.next_pause()).await;
    }
}
