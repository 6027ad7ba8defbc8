//! Pushed change notifications in the simulation, as the stores' push
//! channels deliver them (LISTEN/NOTIFY, pub/sub, watches): every change
//! that applies (an acquisition, a release, a hand-over, a hand-over
//! request, a proclaim) is announced to every live candidate's channel,
//! each delivery on its own fate: at once, delayed up to 1.2 TTL, dropped,
//! or delivered twice. A partitioned candidate's channel is broken: it
//! hears nothing, then "anything may have changed" (`None`) once the
//! partition heals, as a store's reconnecting channel says. A paused one
//! reads what was sent when it runs again. A store outage (a restart that
//! keeps every committed write) breaks every channel; each reopens with
//! "anything may have changed" when the store is back. A broken channel
//! reports itself down (`FaultyStore::push_health`), so followers read at
//! the slow period meanwhile.
//!
//! On seeds where the store ends expired leases itself (as etcd does), its
//! sweeper (`super::sweep_expired`) releases a lease at its expiry and
//! announces that, and each channel counts what it delivered
//! (`Subscriber::delivered`), renewals too (they wake nobody, as etcd's watch
//! skips the rewritten state key but counts it): followers then read only
//! when that count stood still for a TTL, as on etcd.
//!
//! Push never decides anything: every wake-up is followed by a read, so
//! what this exercises is the campaign's push paths (the pushed read, the
//! member read after a push, answering pushes late when out of line) under
//! lost, late and repeated notifications.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::Rng;
use tenure::store::ElectionKey;
use tokio::sync::broadcast;

use super::store::Net;
use super::{lock, World};

/// How many notifications a candidate's channel holds unread; beyond that
/// its receiver lags, which the campaign treats as "anything may have
/// changed".
pub const CHANNEL_CAPACITY: usize = 64;

/// One candidate incarnation's end of the push channel.
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub cand: String,
    pub net: Arc<Net>,
    pub tx: broadcast::Sender<Option<ElectionKey>>,
    /// Notifications delivered on this channel (its push activity).
    pub delivered: Arc<AtomicU64>,
}

impl Subscriber {
    fn deliver(&self, change: Option<ElectionKey>) {
        if self.tx.send(change).is_ok() {
            self.delivered.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What happens to one delivery.
enum Fate {
    Now,
    Dropped,
    Delayed(std::time::Duration),
    Twice,
}

impl World {
    /// Registers a candidate incarnation's channel.
    pub fn subscribe(&self, sub: Subscriber) {
        lock(&self.subscribers).push(sub);
    }

    /// Announces a change of `key` that just applied to every live
    /// candidate, each delivery on its own fate.
    pub fn announce(self: &Arc<Self>, key: &ElectionKey) {
        // A request that was on the wire lands while the store is down
        // (restarting): the channels are broken, and reopen after it.
        if !self.push || self.store_down.load(Ordering::SeqCst) {
            return;
        }
        let subs: Vec<Subscriber> = {
            let mut subs = lock(&self.subscribers);
            subs.retain(|s| !s.net.dead.load(Ordering::SeqCst));
            subs.clone()
        };
        let t = self.now_ns();
        for sub in subs {
            if sub.net.partitioned.get() {
                reopen_after_partition(sub);
                continue;
            }
            let fate = self.push_fate();
            let kind = match fate {
                Fate::Now => {
                    sub.deliver(Some(key.clone()));
                    continue;
                }
                Fate::Dropped => "push-dropped",
                Fate::Twice => {
                    sub.deliver(Some(key.clone()));
                    sub.deliver(Some(key.clone()));
                    "push-twice"
                }
                Fate::Delayed(d) => {
                    let key = key.clone();
                    let sub = sub.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(d).await;
                        if !sub.net.dead.load(Ordering::SeqCst) && !sub.net.partitioned.get() {
                            sub.deliver(Some(key));
                        }
                    });
                    "push-delayed"
                }
            };
            self.record_fault(kind, &sub.cand, t, t, String::new());
        }
    }

    /// A renewal of `key` just applied, on a store that pushes the ends of
    /// expired leases: it wakes nobody but counts as activity on every live,
    /// connected channel (delivered at once; the faults are on the
    /// notifications that wake).
    pub fn count_renewal(&self) {
        if !self.push || self.store_down.load(Ordering::SeqCst) {
            return;
        }
        for sub in lock(&self.subscribers).iter() {
            if !sub.net.dead.load(Ordering::SeqCst) && !sub.net.partitioned.get() {
                sub.delivered.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// After a store outage (a restart keeps every committed write): each
    /// live candidate's channel reopens with "anything may have changed".
    pub fn reopen_channels(&self) {
        if !self.push {
            return;
        }
        let subs: Vec<Subscriber> = lock(&self.subscribers).clone();
        for sub in subs {
            if sub.net.dead.load(Ordering::SeqCst) {
                continue;
            }
            if sub.net.partitioned.get() {
                reopen_after_partition(sub);
            } else {
                sub.deliver(None);
            }
        }
    }

    fn push_fate(&self) -> Fate {
        let p = self.cfg.call_fault_rate;
        let ttl = self.cfg.ttl;
        let mut rng = self.rng();
        if !rng.gen_bool(p) {
            return Fate::Now;
        }
        match rng.gen_range(0..3) {
            0 => Fate::Dropped,
            1 => Fate::Delayed(ttl.mul_f64(rng.gen_range(0.0..1.2))),
            _ => Fate::Twice,
        }
    }
}

/// A partitioned candidate's channel is broken: it hears that the channel
/// reopened once the partition heals, not what it missed.
fn reopen_after_partition(sub: Subscriber) {
    tokio::spawn(async move {
        sub.net.partitioned.until(false).await;
        if !sub.net.dead.load(Ordering::SeqCst) {
            sub.deliver(None);
        }
    });
}
