//! What an elector tells the application as it happens: started leading,
//! stopped leading (and why), a new leader seen. Delivered to hooks given to
//! [`ElectorBuilder::on_event`](crate::ElectorBuilder::on_event) and to every
//! receiver of [`Elector::events`](crate::Elector::events); no `tracing`
//! subscriber needed.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

/// Something that happened to an elector; see [`Elector::events`](crate::Elector::events).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// This candidate became leader under `term` (after a
    /// [`NewLeader`](Event::NewLeader) naming it).
    StartedLeading {
        /// The fencing token of the new tenure.
        term: u64,
    },
    /// This candidate stopped leading: from now on
    /// [`is_leader`](crate::Elector::is_leader) is false and leader-only work
    /// must stop.
    StoppedLeading {
        /// The term that ended.
        term: u64,
        /// Why it ended.
        reason: StopReason,
    },
    /// The elector saw a leader it had not seen before: another candidate,
    /// or this one (`leader` is then [`holder_id`](crate::Elector::holder_id)).
    NewLeader {
        /// The leader's holder id (`identity#session`).
        leader: String,
        /// Its term.
        term: u64,
    },
}

/// Why a tenure ended; see [`Event::StoppedLeading`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// This candidate gave the lease up: [`shutdown`](crate::Elector::shutdown),
    /// [`resign`](crate::Elector::resign), [`transfer`](crate::Elector::transfer),
    /// the work of [`run`](crate::Elector::run) finished, or a resign/transfer
    /// request from another process.
    Released,
    /// Handed over to a member of higher priority
    /// ([`preempt_after`](crate::ElectorBuilder::preempt_after)).
    Preempted,
    /// The local deadline passed without a successful renewal (the store was
    /// unreachable or too slow); the lease may still be ours in the store
    /// for a moment, but nobody may act on it.
    Expired,
    /// The store says the lease is no longer ours (it expired by the store's
    /// clock, or a successor holds it), or the elector's task ended.
    Lost,
    /// Shut down without releasing
    /// ([`release_on_shutdown(false)`](crate::ElectorBuilder::release_on_shutdown)):
    /// the lease runs out by itself.
    Abandoned,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Released => "released",
            StopReason::Preempted => "preempted",
            StopReason::Expired => "expired",
            StopReason::Lost => "lost",
            StopReason::Abandoned => "abandoned",
        })
    }
}

/// A hook given to [`ElectorBuilder::on_event`](crate::ElectorBuilder::on_event).
pub(crate) type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

/// The hooks of one elector.
#[derive(Clone, Default)]
pub(crate) struct Hooks(pub(crate) Vec<Hook>);

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} hook(s)", self.0.len())
    }
}

/// How many events a slow receiver of [`Elector::events`](crate::Elector::events)
/// may fall behind before it misses some.
const BACKLOG: usize = 256;

/// Where an elector's events go.
pub(crate) struct Events {
    tx: broadcast::Sender<Event>,
    hooks: Hooks,
    /// The last leader announced by a `NewLeader`.
    last_leader: Mutex<Option<(String, u64)>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl Events {
    pub(crate) fn new(hooks: Hooks) -> Self {
        Self {
            tx: broadcast::channel(BACKLOG).0,
            hooks,
            last_leader: Mutex::new(None),
        }
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    /// Announces `leader` under `term` unless it was the last one announced.
    pub(crate) fn leader_seen(&self, leader: &str, term: u64) {
        {
            let mut last = self.last_leader.lock().unwrap_or_else(|p| p.into_inner());
            if last
                .as_ref()
                .is_some_and(|(l, t)| l == leader && *t == term)
            {
                return;
            }
            *last = Some((leader.to_string(), term));
        }
        self.emit(Event::NewLeader {
            leader: leader.to_string(),
            term,
        });
    }

    pub(crate) fn emit(&self, event: Event) {
        for hook in &self.hooks.0 {
            // A hook that panics must not take the campaign down with it.
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&event)));
            if called.is_err() {
                tracing::warn!(target: "tenure::elector", ?event, "an event hook panicked");
            }
        }
        let _ = self.tx.send(event);
    }
}
