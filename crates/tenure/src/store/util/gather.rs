//! Gathering calls that arrive together into one statement: the first call of
//! a batch schedules the flush, the others join the queue until it runs.
//! The SQL stores' renewals, heartbeats and reaps, and Redis's, use it: a
//! process in a thousand elections makes one request per instant, not a
//! thousand.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long the first call of a batch waits for others to join: long enough
/// for a thousand electors waking at one grid instant on two cores, short
/// against any renew period.
pub(crate) const GATHER: Duration = Duration::from_millis(10);

/// A gathering batch goes once no call joined it for this long (and
/// [`GATHER`] has passed).
const QUIET: Duration = Duration::from_millis(5);

/// The longest a batch waits for calls to join: still short against any
/// renew period (TTLs are at least a second), and renewals count their
/// deadlines from before they joined.
const GATHER_MAX: Duration = Duration::from_millis(50);

/// Queued calls by group (one statement per group, e.g. per TTL).
pub(crate) struct Gather<T> {
    queue: Mutex<BTreeMap<i64, Vec<T>>>,
    scheduled: AtomicBool,
    arrivals: Arrivals,
}

/// Counts calls joining a batch, so that the batch can tell whether they
/// are still coming.
#[derive(Debug, Default)]
pub(crate) struct Arrivals(AtomicU64);

impl Arrivals {
    /// A call joins.
    pub(crate) fn arrived(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits for the calls of one instant to gather: [`GATHER`], and longer
    /// while they keep arriving ([`QUIET`] at a time), [`GATHER_MAX`] at most.
    /// Electors waking at one grid instant on busy cores reach the queue over
    /// more than [`GATHER`]; a fixed window split them into two statements.
    pub(crate) async fn settled(&self) {
        let started = tokio::time::Instant::now();
        tokio::time::sleep(GATHER - QUIET).await;
        loop {
            let seen = self.0.load(Ordering::Acquire);
            tokio::time::sleep(QUIET).await;
            if self.0.load(Ordering::Acquire) == seen || started.elapsed() + QUIET > GATHER_MAX {
                return;
            }
        }
    }
}

impl<T> Gather<T> {
    pub(crate) fn new() -> Self {
        Self {
            queue: Mutex::new(BTreeMap::new()),
            scheduled: AtomicBool::new(false),
            arrivals: Arrivals::default(),
        }
    }

    /// Queues `item` in `group`. True for the first call of a batch: the
    /// caller then schedules a flush ([`GATHER`] later) that calls [`Self::take`].
    pub(crate) fn push(&self, group: i64, item: T) -> bool {
        self.arrivals.arrived();
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(group)
            .or_default()
            .push(item);
        !self.scheduled.swap(true, Ordering::AcqRel)
    }

    /// Waits until the batch has gathered (see [`Arrivals::settled`]).
    pub(crate) async fn settled(&self) {
        self.arrivals.settled().await;
    }

    /// Takes the batch: calls queued from now on start the next one.
    pub(crate) fn take(&self) -> BTreeMap<i64, Vec<T>> {
        self.scheduled.store(false, Ordering::Release);
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// One statement written for many calls at once, each call answered with its
/// own part of the outcome.
// Public through `testing` (the simulation gathers its renewals with it);
// unreachable in builds without that module.
#[allow(unreachable_pub)]
pub trait Statement: Send + Sync + 'static {
    /// What one call contributes.
    type Item: Send + 'static;
    /// What one call is answered.
    type Answer: Send + 'static;
    /// Items per statement.
    const CHUNK: usize;
    /// The calls, for the error when a batch is abandoned.
    const WHAT: &'static str;
    /// Sends one statement for `items` (all of one group) and answers each,
    /// in order; `Err` is the error's text, already explained, for all.
    fn send(
        &self,
        group: i64,
        items: Vec<&Self::Item>,
    ) -> impl std::future::Future<Output = std::result::Result<Vec<Self::Answer>, String>> + Send;
}

type Reply<A> = tokio::sync::oneshot::Sender<std::result::Result<A, String>>;

/// Gathers the calls of a [`Statement`] and sends them together.
#[allow(unreachable_pub)]
pub struct Batched<S: Statement> {
    statement: S,
    queue: Gather<(S::Item, Reply<S::Answer>)>,
    /// Statements sent (`tenure_store_statements_total`).
    sent: metrics::Counter,
    store: String,
}

impl<S: Statement> std::fmt::Debug for Batched<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batched").field("what", &S::WHAT).finish()
    }
}

impl<S: Statement> Batched<S> {
    /// `store` describes the store (redacted) for errors; `sent` counts
    /// the statements sent.
    #[allow(unreachable_pub)]
    pub fn new(statement: S, store: String, sent: metrics::Counter) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            statement,
            queue: Gather::new(),
            sent,
            store,
        })
    }

    /// Sends `item` alone, now, without waiting for others: for a caller on
    /// a path where the gathering delay would cost (a follower's read).
    // Only the SQL stores use it.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "mysql", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) async fn send_now(
        &self,
        group: i64,
        item: &S::Item,
    ) -> crate::error::Result<S::Answer> {
        self.sent.increment(1);
        self.statement
            .send(group, vec![item])
            .await
            .and_then(|a| {
                a.into_iter()
                    .next()
                    .ok_or_else(|| format!("{} answered nothing", S::WHAT))
            })
            .map_err(|reason| crate::error::Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason,
            })
    }

    /// Queues `item` in `group` and waits for the statement it joins.
    #[allow(unreachable_pub)]
    pub async fn call(
        self: &std::sync::Arc<Self>,
        group: i64,
        item: S::Item,
    ) -> crate::error::Result<S::Answer> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.queue.push(group, (item, tx)) {
            // A task of its own, so a caller that gives up does not strand the others.
            let me = self.clone();
            tokio::spawn(async move {
                me.queue.settled().await;
                // The statements of one batch go out together, not one after
                // another: a thousand renewals in ten statements must not
                // wait ten round trips.
                let mut sending = tokio::task::JoinSet::new();
                for (group, mut pending) in me.queue.take() {
                    while !pending.is_empty() {
                        let rest = pending.split_off(pending.len().min(S::CHUNK));
                        let chunk = std::mem::replace(&mut pending, rest);
                        let me = me.clone();
                        sending.spawn(async move { me.flush(group, chunk).await });
                    }
                }
                while sending.join_next().await.is_some() {}
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
        self.sent.increment(1);
        let n = pending.len();
        let (items, mut replies): (Vec<S::Item>, Vec<Reply<S::Answer>>) =
            pending.into_iter().unzip();
        let sent = self.statement.send(group, items.iter().collect());
        let answers = tokio::select! {
            // The statement first, not tokio's random pick: the simulation
            // runs this code, and one seed must give one run.
            biased;
            answers = sent => answers,
            () = abandoned(&mut replies) => return,
        };
        let answers = answers.and_then(|a| match a.len() {
            len if len == n => Ok(crate::bugs::misdirect_answers(a)),
            len => Err(format!("{} batch answered {len} of {n} calls", S::WHAT)),
        });
        match answers {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Until every caller waiting on `replies` has given up (each has its
/// deadline). A batch sent in a task of its own stops there: a statement
/// whose answer nobody waits for any more must not go on holding its
/// connection (on a network that lost the request, until the socket dies,
/// which without keep-alives is never), and dropping it closes that
/// connection, as a cancelled statement does.
pub(crate) async fn abandoned<T>(replies: &mut [tokio::sync::oneshot::Sender<T>]) {
    futures_util::future::join_all(replies.iter_mut().map(|reply| reply.closed())).await;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A thousand electors waking at one instant on two busy cores reach the
    /// queue over more than [`GATHER`]: while they keep arriving, the batch
    /// waits for them (a process in 1,000 elections sent 1.5 renewal
    /// statements per instant on a loaded machine).
    #[tokio::test(start_paused = true)]
    async fn a_burst_longer_than_the_window_is_one_batch() {
        let g = Arc::new(Gather::new());
        assert!(g.push(0, 0), "the first call schedules the flush");
        let flush = {
            let g = g.clone();
            tokio::spawn(async move {
                g.settled().await;
                g.take()
            })
        };
        for i in 1..=10 {
            tokio::time::sleep(Duration::from_millis(4)).await;
            g.push(0, i);
        }
        let batch = flush.await.expect("flush");
        assert_eq!(batch.get(&0).map(Vec::len), Some(11), "{batch:?}");
    }

    /// Calls that never stop coming do not hold a batch back for long.
    #[tokio::test(start_paused = true)]
    async fn a_batch_goes_within_its_longest_wait() {
        let g = Arc::new(Gather::new());
        g.push(0, 0u32);
        let started = tokio::time::Instant::now();
        let flush = {
            let g = g.clone();
            tokio::spawn(async move {
                g.settled().await;
                g.take();
            })
        };
        let mut i = 0;
        while !flush.is_finished() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            i += 1;
            g.push(0, i);
        }
        let waited = started.elapsed();
        assert!(waited >= GATHER, "{waited:?}");
        assert!(waited <= Duration::from_millis(60), "{waited:?}");
    }

    /// A lone call waits no longer than it did: [`GATHER`].
    #[tokio::test(start_paused = true)]
    async fn a_lone_call_waits_the_window() {
        let g = Gather::new();
        g.push(0, 0u32);
        let started = tokio::time::Instant::now();
        g.settled().await;
        assert_eq!(started.elapsed(), GATHER);
    }
}
