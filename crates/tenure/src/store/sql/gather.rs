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

/// One statement written for many calls at once, every call answered with
/// the statement's outcome (member heartbeats, reaps).
pub(super) trait Statement: Send + Sync + 'static {
    /// What one call contributes.
    type Item: Send + 'static;
    /// What every call of one statement is answered.
    type Answer: Clone + Send + 'static;
    /// Items per statement.
    const CHUNK: usize;
    /// The calls, for the error when a batch is abandoned.
    const WHAT: &'static str;
    /// Sends one statement for `items` (all of one group); `Err` is the
    /// error's text, already explained.
    fn send(
        &self,
        group: i64,
        items: Vec<&Self::Item>,
    ) -> impl std::future::Future<Output = std::result::Result<Self::Answer, String>> + Send;
}

type Reply<A> = tokio::sync::oneshot::Sender<std::result::Result<A, String>>;

/// Gathers the calls of a [`Statement`] and sends them together.
pub(super) struct Batched<S: Statement> {
    statement: S,
    queue: Gather<(S::Item, Reply<S::Answer>)>,
    sent: std::sync::atomic::AtomicU64,
    store: String,
}

impl<S: Statement> std::fmt::Debug for Batched<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batched").field("what", &S::WHAT).finish()
    }
}

impl<S: Statement> Batched<S> {
    /// `store` describes the store (redacted) for errors.
    pub(super) fn new(statement: S, store: String) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            statement,
            queue: Gather::new(),
            sent: std::sync::atomic::AtomicU64::new(0),
            store,
        })
    }

    /// Statements sent so far.
    pub(super) fn statements(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Sends `item` alone, now, without waiting for others: for a caller on
    /// a path where the gathering delay would cost (a follower's read).
    pub(super) async fn send_now(
        &self,
        group: i64,
        item: &S::Item,
    ) -> crate::error::Result<S::Answer> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.statement
            .send(group, vec![item])
            .await
            .map_err(|reason| crate::error::Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason,
            })
    }

    /// Queues `item` in `group` and waits for the statement it joins.
    pub(super) async fn call(
        self: &std::sync::Arc<Self>,
        group: i64,
        item: S::Item,
    ) -> crate::error::Result<S::Answer> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.queue.push(group, (item, tx)) {
            // A task of its own, so a caller that gives up does not strand the others.
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                for (group, mut pending) in me.queue.take() {
                    while !pending.is_empty() {
                        let rest = pending.split_off(pending.len().min(S::CHUNK));
                        me.flush(group, std::mem::replace(&mut pending, rest)).await;
                    }
                }
            });
        }
        let answer = rx
            .await
            .unwrap_or_else(|_| Err(format!("{} batch was abandoned", S::WHAT)));
        answer.map_err(|reason| crate::error::Error::Unavailable {
            source: None,
            store: self.store.clone(),
            reason,
        })
    }

    async fn flush(&self, group: i64, pending: Vec<(S::Item, Reply<S::Answer>)>) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .statement
            .send(group, pending.iter().map(|(item, _)| item).collect())
            .await;
        for (_, reply) in pending {
            let _ = reply.send(answer.clone());
        }
    }
}
