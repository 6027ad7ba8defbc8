//! The watch: changes under the prefix → wake-ups for followers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{Client, WatchOptions};
use tokio::sync::broadcast;

use super::keys::{is_state_key, parse_election_key};
use crate::store::util::push_health::PushMonitor;
use crate::store::util::push_outage::{Backoff, PushOutage};

/// The channel's name in logs and `tenure status`.
pub(super) const WHAT: &str = "etcd watch";
use crate::store::ElectionKey;

/// Watches the prefix and turns changes of lease and hand-over keys into
/// notifications; reconnects with back-off and then says "anything may have
/// changed" (`None`). Every event received, also those that wake nobody,
/// counts in `activity`: followers read only when it stands still.
pub(super) async fn watch_loop(
    client: Client,
    prefix: String,
    tx: broadcast::Sender<Option<ElectionKey>>,
    activity: Arc<AtomicU64>,
    described: String,
    monitor: Arc<PushMonitor>,
) {
    let mut outage = PushOutage::new(monitor);
    let mut backoff = Backoff::new();
    let mut first = true;
    loop {
        let mut c = client.clone();
        match c
            .watch(
                format!("{prefix}/"),
                Some(WatchOptions::new().with_prefix()),
            )
            .await
        {
            Ok(mut stream) => {
                // Back before the wake-up, so the woken see the channel up.
                outage.restored(WHAT, &described);
                if !first {
                    let _ = tx.send(None);
                }
                backoff.opened();
                loop {
                    match stream.message().await {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                let why = format!("cancelled: {}", resp.cancel_reason());
                                if outage.lost(WHAT, &described, &why) {
                                    let _ = tx.send(None);
                                }
                                break;
                            }
                            for ev in resp.events() {
                                activity.fetch_add(1, Ordering::Relaxed);
                                let Some(kv) = ev.kv() else { continue };
                                // Every renewal rewrites the state key's
                                // informational times: waking followers for
                                // it made each read the lease after every
                                // renewal. A term's start and end always
                                // create or delete the lease key, and a
                                // hand-over writes its own key.
                                if is_state_key(&prefix, kv.key()) {
                                    continue;
                                }
                                if let Some(key) = parse_election_key(&prefix, kv.key()) {
                                    let _ = tx.send(Some(key));
                                }
                            }
                        }
                        Ok(None) => {
                            if outage.lost(WHAT, &described, &"stream ended") {
                                let _ = tx.send(None);
                            }
                            break;
                        }
                        Err(e) => {
                            if outage.lost(WHAT, &described, &e) {
                                let _ = tx.send(None);
                            }
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                if outage.lost(WHAT, &described, &e) {
                    let _ = tx.send(None);
                }
            }
        }
        first = false;
        tokio::time::sleep(backoff.next_pause()).await;
    }
}
