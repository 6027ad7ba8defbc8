//! The gate that keeps one process to one slot of a [`Semaphore`](super::Semaphore).
//!
//! Each slot is an election of its own, campaigned for by its own elector;
//! the gate is what the process's electors share. An elector reserves the
//! gate before it sends an acquisition (so two slots are never taken at
//! once by one process) and holds it while it leads. While one slot is
//! held, the other slots' electors stand aside: out of their member lists
//! (so nobody counts on them as a successor) and not acquiring; when the
//! tenure ends they rejoin. Safety never rests on the gate: every slot's
//! lease is the same compare-and-set as any election's, so a slot has one
//! holder at most whatever the gate does. The gate is what makes N slots
//! run N different processes' jobs rather than one process's.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::leadership::Shared;
use crate::store::LeaseStoreExt;

/// How long a standing-aside elector's leave may take before it is dropped
/// (the registration then lapses by itself).
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Who has the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Nobody,
    /// This slot's acquisition is in flight.
    Trying(usize),
    /// This slot's elector leads.
    Leading(usize),
}

/// Shared by the electors of one [`Semaphore`](super::Semaphore).
#[derive(Debug)]
pub(crate) struct Gate {
    owner: Mutex<Owner>,
    /// The electors' shared states, by slot, to stand them aside and back.
    seats: Mutex<Vec<Weak<Shared>>>,
    /// Told whenever the gate becomes free.
    freed: Notify,
}

impl Gate {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            owner: Mutex::new(Owner::Nobody),
            seats: Mutex::new(Vec::new()),
            freed: Notify::new(),
        })
    }

    /// Adds the elector of the next slot; it stands aside at once if
    /// another slot already leads.
    pub(crate) fn seat(&self, shared: &Arc<Shared>) {
        let owner = *lock(&self.owner);
        let mut seats = lock(&self.seats);
        let slot = seats.len();
        seats.push(Arc::downgrade(shared));
        if matches!(owner, Owner::Leading(other) if other != slot) {
            stand_aside(shared);
        }
    }

    fn owner(&self) -> Owner {
        *lock(&self.owner)
    }

    fn others(&self, slot: usize) -> Vec<Arc<Shared>> {
        lock(&self.seats)
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != slot)
            .filter_map(|(_, s)| s.upgrade())
            .collect()
    }
}

/// One slot's place at the gate, held by its elector's shared state.
#[derive(Clone, Debug)]
pub(crate) struct Seat {
    pub(crate) gate: Arc<Gate>,
    pub(crate) slot: usize,
}

impl Seat {
    /// Whether another slot of this process is being acquired or is held:
    /// this slot's elector then neither acquires nor counts as a member.
    pub(crate) fn taken_elsewhere(&self) -> bool {
        match self.gate.owner() {
            Owner::Nobody => false,
            Owner::Trying(s) | Owner::Leading(s) => s != self.slot,
        }
    }

    /// Reserves the gate for an acquisition of this slot; false if another
    /// slot has it.
    pub(crate) fn reserve(&self) -> bool {
        let mut owner = lock(&self.gate.owner);
        match *owner {
            Owner::Nobody => {
                *owner = Owner::Trying(self.slot);
                true
            }
            Owner::Trying(s) | Owner::Leading(s) => s == self.slot,
        }
    }

    /// The acquisition did not make this slot's elector lead: frees a
    /// reservation (never a tenure: that ends with [`Self::ended`]).
    pub(crate) fn unreserve(&self) {
        let mut owner = lock(&self.gate.owner);
        if *owner == Owner::Trying(self.slot) {
            *owner = Owner::Nobody;
            drop(owner);
            self.gate.freed.notify_waiters();
        }
    }

    /// This slot's elector leads: the other slots stand aside.
    pub(crate) fn leading(&self) {
        let mut owner = lock(&self.gate.owner);
        if *owner == Owner::Leading(self.slot) {
            return;
        }
        *owner = Owner::Leading(self.slot);
        drop(owner);
        for other in self.gate.others(self.slot) {
            stand_aside(&other);
        }
    }

    /// This slot's tenure is over (or its elector closed): the gate is
    /// free, and the other slots rejoin their elections.
    pub(crate) fn ended(&self) {
        let mut owner = lock(&self.gate.owner);
        let was_leading = *owner == Owner::Leading(self.slot);
        if !matches!(*owner, Owner::Trying(s) | Owner::Leading(s) if s == self.slot) {
            return;
        }
        *owner = Owner::Nobody;
        drop(owner);
        if was_leading {
            for other in self.gate.others(self.slot) {
                other.resume_membership();
            }
        }
        self.gate.freed.notify_waiters();
    }

    /// Resolves once the gate is free (at once if it is, or if this slot has it).
    pub(crate) async fn free(&self) {
        loop {
            let freed = self.gate.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if !self.taken_elsewhere() {
                return;
            }
            freed.await;
        }
    }
}

/// Takes an elector out of its member list while another slot leads: its
/// heartbeats pause and its registration goes (bounded; it lapses anyway).
fn stand_aside(shared: &Arc<Shared>) {
    shared.pause_membership(Duration::from_nanos(u64::MAX));
    let (store, key, holder) = (
        shared.store.clone(),
        shared.key.clone(),
        shared.holder.clone(),
    );
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(LEAVE_TIMEOUT, store.leave(&key, &holder)).await;
        });
    }
}

/// The state behind a lock; a panic elsewhere leaves it whole.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
