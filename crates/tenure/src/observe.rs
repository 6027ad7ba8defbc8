//! Watching elections without competing.
//!
//! An [`Observer`] reads the store, never writes to it, and reports every change
//! of leader, including "no leader", as a [`Change`]. Like a follower it sleeps
//! until the next lease is due to expire, or a poll period, whichever is sooner.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::store::{AcquisitionWatch, DynStore, ElectionKey, LeaseRecord, LeaseStoreExt};

/// How often an observer re-reads when the store pushes changes and no lease
/// is due to expire sooner: only to recover from a lost notification.
const PUSH_FALLBACK_POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// How often an observer re-reads while the store's push channel is down
/// ([`Wakeups::push_health`](crate::store::Wakeups::push_health)).
const PUSH_DOWN_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Which elections to observe.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selection {
    /// Every election in the store.
    All,
    /// Every election of one namespace.
    Namespace(String),
    /// These elections (they need not exist yet: they report "no leader").
    Elections(Vec<ElectionKey>),
}

impl Selection {
    /// Whether `key` is one of the selected elections.
    fn contains(&self, key: &ElectionKey) -> bool {
        match self {
            Selection::All => true,
            Selection::Namespace(ns) => key.namespace == *ns,
            Selection::Elections(keys) => keys.contains(key),
        }
    }
}

/// A change seen by an [`Observer`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Change {
    /// `leader` leads `key` under `term`: a new leader, a new term, or new
    /// metadata under the same term ([`Leadership::proclaim`](crate::Leadership::proclaim)).
    /// Between two terms there is always a [`Change::NoLeader`].
    Leader {
        /// The election.
        key: ElectionKey,
        /// The leader's holder id (`identity#session`), as
        /// [`Elector::holder_id`](crate::Elector::holder_id) names it.
        leader: String,
        /// The leader's term.
        term: u64,
        /// What the leader attached to its lease.
        metadata: String,
    },
    /// Nobody leads `key` (released, expired, or never acquired).
    NoLeader {
        /// The election.
        key: ElectionKey,
        /// The last term handed out (0 if never).
        last_term: u64,
    },
    /// The store could not be read; the observer keeps retrying.
    StoreUnavailable {
        /// Why.
        error: String,
    },
    /// The store can be read again; changes missed meanwhile follow.
    StoreRecovered,
}

/// Settings of an [`Observer`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ObserveOptions {
    /// Longest sleep between reads (default 80 ms, like followers).
    pub poll_period: Duration,
    /// Wait after a failed read (default 500 ms).
    pub retry_period: Duration,
}

impl Default for ObserveOptions {
    fn default() -> Self {
        Self {
            poll_period: crate::DEFAULT_POLL,
            retry_period: Duration::from_millis(500),
        }
    }
}

/// A stream of [`Change`]s; see [`observe`].
#[derive(Debug)]
pub struct Observer {
    rx: mpsc::Receiver<Change>,
    task: JoinHandle<()>,
}

impl Observer {
    /// The next change; `None` only if the observing task ended (it does not
    /// end by itself).
    pub async fn next(&mut self) -> Option<Change> {
        self.rx.recv().await
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Observes `selection` on `store`. The first changes describe the current
/// state of every selected election; after that, only changes are reported.
///
/// Must be called inside a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use tenure::observe::{observe, Change, ObserveOptions, Selection};
/// use tenure::store::{connect, ElectionKey};
/// let store = connect("memory://", &Default::default()).await?;
/// let key = ElectionKey::new("default", "nightly");
/// let mut changes = observe(store, Selection::Elections(vec![key.clone()]), ObserveOptions::default());
/// assert_eq!(changes.next().await, Some(Change::NoLeader { key, last_term: 0 }));
/// # Ok(()) }
/// ```
pub fn observe(store: DynStore, selection: Selection, options: ObserveOptions) -> Observer {
    let (tx, rx) = mpsc::channel(1024);
    let task = tokio::spawn(run(store, selection, options, tx));
    Observer { rx, task }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Leader {
        holder: String,
        term: u64,
        metadata: String,
    },
    NoLeader {
        last_term: u64,
    },
}

/// How many elections get metric series of their own (leader present,
/// term, lease left, leader changes, leader identity; see the list in the
/// crate's metrics documentation) in this process; the ones seen after
/// that many are counted together (`tenure_elections_unexported`,
/// `tenure_elections_unexported_without_leader`), so that a store with
/// many elections cannot swamp a metrics backend. 1,000 by default; set it
/// before the first read.
///
/// ```
/// tenure::observe::set_metrics_election_cap(50);
/// ```
pub fn set_metrics_election_cap(cap: usize) {
    crate::telemetry::set_election_cap(cap);
}

fn seen(rec: Option<&LeaseRecord>) -> Seen {
    match rec {
        Some(r) if r.is_held() => Seen::Leader {
            holder: r.holder.clone().unwrap_or_default(),
            term: r.term,
            metadata: r.metadata.clone(),
        },
        Some(r) => Seen::NoLeader { last_term: r.term },
        None => Seen::NoLeader { last_term: 0 },
    }
}

async fn read(
    store: &DynStore,
    selection: &Selection,
) -> crate::Result<Vec<(ElectionKey, Option<LeaseRecord>)>> {
    Ok(match selection {
        Selection::All => store
            .list(None)
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), Some(r)))
            .collect(),
        Selection::Namespace(ns) => store
            .list(Some(ns))
            .await?
            .into_iter()
            .map(|r| (r.key.clone(), Some(r)))
            .collect(),
        Selection::Elections(keys) => {
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                out.push((k.clone(), store.read(k).await?));
            }
            out
        }
    })
}

async fn run(
    store: DynStore,
    selection: Selection,
    options: ObserveOptions,
    tx: mpsc::Sender<Change>,
) {
    let mut last: BTreeMap<ElectionKey, Seen> = BTreeMap::new();
    let mut failing = false;
    let mut changes = store.subscribe();
    let acquisitions_pushed = changes.is_some() && store.capabilities().push_acquisitions;
    // Where acquisitions are not pushed to everyone, the free elections
    // this observer asked the store to ring it for
    // ([`Wakeups::watch_acquisitions`](crate::store::Wakeups::watch_acquisitions)).
    let mut watches: HashMap<ElectionKey, AcquisitionWatch> = HashMap::new();
    /// How often a corrupt lease ([`Error::Corrupt`](crate::Error::Corrupt)) is read again.
    const CORRUPT_RETRY: Duration = Duration::from_secs(10);
    loop {
        let wait = match read(&store, &selection).await {
            Err(e) => {
                if !failing {
                    failing = true;
                    if tx
                        .send(Change::StoreUnavailable {
                            error: e.to_string(),
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                // A corrupt lease stays so until someone repairs it: look
                // again slowly rather than every retry period.
                if matches!(e, crate::Error::Corrupt { .. }) {
                    options.retry_period.max(CORRUPT_RETRY)
                } else {
                    options.retry_period
                }
            }
            Ok(rows) => {
                if failing {
                    failing = false;
                    if tx.send(Change::StoreRecovered).await.is_err() {
                        return;
                    }
                }
                // With push, a release or hand-over wakes us and held leases
                // are read when they would expire; the slow poll only covers
                // a lost push. An election nobody holds is polled where the
                // store does not push acquisitions (MySQL's named locks
                // signal only a leader letting go), unless the store rings
                // this observer when it is acquired (MySQL: the observers'
                // doorbell), which leaves the slow poll to cover a lost ring.
                let mut wait = if changes.is_none() {
                    options.poll_period
                } else if store.push_health().is_down() {
                    PUSH_DOWN_POLL.max(options.poll_period)
                } else {
                    PUSH_FALLBACK_POLL.max(options.poll_period)
                };
                let mut free: HashSet<ElectionKey> = HashSet::new();
                for (key, rec) in rows {
                    crate::telemetry::observed(&key, rec.as_ref());
                    match rec.as_ref().filter(|r| r.is_held()) {
                        // Wake when this lease is due to expire, to report it at once.
                        Some(r) => wait = wait.min(r.remaining + Duration::from_millis(2)),
                        None if !acquisitions_pushed => {
                            free.insert(key.clone());
                            let rung = changes.is_some()
                                && (watches.contains_key(&key)
                                    || store.watch_acquisitions(&key).is_some_and(|w| {
                                        watches.insert(key.clone(), w);
                                        true
                                    }));
                            if !rung {
                                wait = wait.min(options.poll_period);
                            }
                        }
                        None => {}
                    }
                    let now = seen(rec.as_ref());
                    if last.get(&key) == Some(&now) {
                        continue;
                    }
                    // A term ends before the next begins (a release, a
                    // hand-over or an expiry): report the gap even when the
                    // successor was already in place at this read.
                    if let (Some(Seen::Leader { term: was, .. }), Seen::Leader { term, .. }) =
                        (last.get(&key), &now)
                    {
                        if was != term {
                            let gap = Change::NoLeader {
                                key: key.clone(),
                                last_term: *was,
                            };
                            if tx.send(gap).await.is_err() {
                                return;
                            }
                        }
                    }
                    let change = match (&now, rec) {
                        (Seen::Leader { holder, term, .. }, Some(r)) => Change::Leader {
                            key: key.clone(),
                            leader: holder.clone(),
                            term: *term,
                            metadata: r.metadata,
                        },
                        (Seen::NoLeader { last_term }, _)
                        | (
                            Seen::Leader {
                                term: last_term, ..
                            },
                            None,
                        ) => Change::NoLeader {
                            key: key.clone(),
                            last_term: *last_term,
                        },
                    };
                    last.insert(key, now);
                    if tx.send(change).await.is_err() {
                        return;
                    }
                }
                // Held (its release wakes us) or gone: no more ringing.
                watches.retain(|k, _| free.contains(k));
                wait
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            // Only changes of the observed elections: on a shared store,
            // others' elections must not make every observer read.
            _ = crate::store::changed_matching(&mut changes, |k| selection.contains(k)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::store::{Acquire, Claim, LeaseStore, Tenure};
    use crate::testing::Instrumented;

    async fn next(o: &mut Observer) -> Change {
        tokio::time::timeout(Duration::from_secs(5), o.next())
            .await
            .expect("a change")
            .expect("alive")
    }

    #[tokio::test]
    async fn reports_leaders_releases_and_outages_without_writing() {
        let recorder = tenure_testsupport::metrics::TestRecorder::new();
        let memory = Arc::new(recorder.scope_sync(MemoryStore::new));
        let store = Arc::new(Instrumented::new(memory.clone()));
        let key = ElectionKey::new("default", "job");
        let opts = ObserveOptions {
            poll_period: Duration::from_millis(10),
            retry_period: Duration::from_millis(10),
        };
        let mut o = observe(store.clone(), Selection::Elections(vec![key.clone()]), opts);
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 0
            }
        );
        let claim = Claim {
            key: key.clone(),
            holder: "a#1".into(),
            metadata: "10.0.0.1".into(),
            ttl: Duration::from_secs(30),
        };
        let Acquire::Acquired(rec) = store.try_acquire(&claim).await.unwrap() else {
            panic!()
        };
        let writes = recorder.statements("lease_write");
        assert_eq!(
            next(&mut o).await,
            Change::Leader {
                key: key.clone(),
                leader: "a#1".into(),
                term: 1,
                metadata: "10.0.0.1".into()
            }
        );
        store.set_unavailable(true);
        assert!(matches!(
            next(&mut o).await,
            Change::StoreUnavailable { .. }
        ));
        store.set_unavailable(false);
        assert_eq!(next(&mut o).await, Change::StoreRecovered);
        assert!(store
            .release(&Tenure {
                key: key.clone(),
                holder: "a#1".into(),
                term: rec.term
            })
            .await
            .unwrap());
        assert_eq!(next(&mut o).await, Change::NoLeader { key, last_term: 1 });
        assert_eq!(
            recorder.statements("lease_write"),
            writes + 1,
            "only the test's release wrote; the observer never writes"
        );
    }

    /// A leader's proclaim is a change under the same term, with the new
    /// metadata; a proclaim that was refused is none.
    #[tokio::test]
    async fn a_proclaim_is_reported_under_the_same_term() {
        let memory = Arc::new(MemoryStore::new());
        let key = ElectionKey::new("default", "job");
        let opts = ObserveOptions {
            poll_period: Duration::from_millis(10),
            retry_period: Duration::from_millis(10),
        };
        let claim = Claim {
            key: key.clone(),
            holder: "a#1".into(),
            metadata: "10.0.0.1".into(),
            ttl: Duration::from_secs(30),
        };
        let Acquire::Acquired(rec) = memory.try_acquire(&claim).await.unwrap() else {
            panic!("acquired")
        };
        let mut o = observe(
            memory.clone(),
            Selection::Elections(vec![key.clone()]),
            opts,
        );
        let leader = |metadata: &str| Change::Leader {
            key: key.clone(),
            leader: "a#1".into(),
            term: rec.term,
            metadata: metadata.into(),
        };
        assert_eq!(next(&mut o).await, leader("10.0.0.1"));
        let tenure = Tenure {
            key: key.clone(),
            holder: "a#1".into(),
            term: rec.term,
        };
        let stale = Tenure {
            term: rec.term + 1,
            ..tenure.clone()
        };
        assert!(!memory.proclaim(&stale, "forged").await.unwrap());
        assert!(memory.proclaim(&tenure, "10.0.0.2").await.unwrap());
        assert_eq!(next(&mut o).await, leader("10.0.0.2"));
    }

    /// A release and the takeover that follows before the observer's next
    /// read are two changes, not one: "no leader", then the new leader.
    #[tokio::test]
    async fn a_takeover_between_two_reads_still_reports_no_leader_first() {
        let memory = Arc::new(MemoryStore::new());
        let key = ElectionKey::new("default", "job");
        let opts = ObserveOptions {
            poll_period: Duration::from_millis(10),
            retry_period: Duration::from_millis(10),
        };
        let mut o = observe(
            memory.clone(),
            Selection::Elections(vec![key.clone()]),
            opts,
        );
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 0
            }
        );
        let claim = |holder: &str| Claim {
            key: key.clone(),
            holder: holder.into(),
            metadata: String::new(),
            ttl: Duration::from_secs(30),
        };
        let Acquire::Acquired(a) = memory.try_acquire(&claim("a#1")).await.unwrap() else {
            panic!()
        };
        assert!(matches!(next(&mut o).await, Change::Leader { term: 1, .. }));
        // On this single-threaded runtime the observer cannot read between
        // the release and the takeover.
        let tenure = Tenure {
            key: key.clone(),
            holder: "a#1".into(),
            term: a.term,
        };
        assert!(memory.release(&tenure).await.unwrap());
        assert!(matches!(
            memory.try_acquire(&claim("b#1")).await.unwrap(),
            Acquire::Acquired(_)
        ));
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 1
            }
        );
        assert!(matches!(
            next(&mut o).await,
            Change::Leader { term: 2, ref leader, .. } if leader == "b#1"
        ));
    }
}
