//! Gathering calls that arrive together into one statement: the first call of
//! a batch schedules the flush, the others join the queue until it runs.
//! Renewals and member heartbeats both use it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long the first call of a batch waits for others to join: long enough
/// for a thousand electors waking at one grid instant on two cores, short
/// against any renew period.
pub(super) const GATHER: Duration = Duration::from_millis(10);

/// Queued calls by group (one statement per group, e.g. per TTL).
pub(super) struct Gather<T> {
    queue: Mutex<BTreeMap<i64, Vec<T>>>,
    scheduled: AtomicBool,
}

impl<T> Gather<T> {
    pub(super) fn new() -> Self {
        Self {
            queue: Mutex::new(BTreeMap::new()),
            scheduled: AtomicBool::new(false),
        }
    }

    /// Queues `item` in `group`. True for the first call of a batch: the
    /// caller then schedules a flush ([`GATHER`] later) that calls [`Self::take`].
    pub(super) fn push(&self, group: i64, item: T) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(group)
            .or_default()
            .push(item);
        !self.scheduled.swap(true, Ordering::AcqRel)
    }

    /// Takes the batch: calls queued from now on start the next one.
    pub(super) fn take(&self) -> BTreeMap<i64, Vec<T>> {
        self.scheduled.store(false, Ordering::Release);
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
