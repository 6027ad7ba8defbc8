//! The conformance suite every [`LeaseStore`] must pass (feature `conformance`),
//! and [`Instrumented`], a wrapper that counts a store's calls and injects
//! faults.
//!
//! **Unstable**: this module is not covered by semver. It is for store
//! authors and this project's own tests, like object_store's `integration`
//! module: checks are added, tightened and renamed in minor releases.
//!
//! Each check opens its own store connections through a factory (one connection
//! per simulated process) and works in a fresh random namespace, so checks can
//! run against a shared database without interfering, also at the same time.
//! Checks panic with a message naming the violated property.
//!
//! [`conformance_tests!`](crate::conformance_tests) turns the suite into one
//! test per check, so `cargo test <check>` runs one check and a failing check
//! does not hide the others; [`Conformance::run_all`] runs every check in one
//! call.
//!
//! ```no_run
//! # #[tokio::main] async fn main() {
//! use std::sync::Arc;
//! use tenure::store::{memory::MemoryStore, DynStore};
//! use tenure::testing::Conformance;
//! // A memory store is private to one "connection", so share one instance.
//! let store: DynStore = Arc::new(MemoryStore::new());
//! Conformance::new("memory", move || { let s = store.clone(); async move { s } })
//!     .run_all()
//!     .await;
//! # }
//! ```
//!
//! The checks live in one file per group: exclusion and compare-and-set
//! (`leases.rs`), expiry and the store's clock (`expiry.rs`), hand-over,
//! members, history, push and observers (`push.rs`), the parts a store
//! offers against its capabilities (`parts.rs`), run records
//! (`runs.rs`), and elector-level checks (`electors.rs`). [`Instrumented`]
//! wraps any store with call counters and fault switches.
//!
//! [`LeaseStore`]: crate::store::LeaseStore

mod electors;
mod expiry;
mod handover;
mod history;
mod instrumented;
mod leases;
mod macros;
mod members;
mod parts;
mod push;
mod runs;
mod slots;

pub use instrumented::{Instrumented, Op};
// How the Redis and etcd stores gather the renewals of one instant into one
// request: the simulation's store gathers its own with it, so the simulation
// runs this code under its faults.
pub use crate::store::util::gather::{Batched, Statement};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::{Acquire, Claim, DynStore, ElectionKey, LeaseRecord, Tenure};
use crate::Elector;

type Factory = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = DynStore> + Send>> + Send + Sync>;

/// A store under test and the way to open more connections to it.
#[derive(Clone)]
pub struct Conformance {
    name: String,
    factory: Factory,
    handovers: usize,
    herd_bound: u64,
}

impl std::fmt::Debug for Conformance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conformance")
            .field("name", &self.name)
            .finish()
    }
}

fn claim(key: &ElectionKey, holder: &str, ttl: Duration) -> Claim {
    Claim {
        key: key.clone(),
        holder: holder.to_string(),
        metadata: format!("meta of {holder}"),
        ttl,
    }
}

fn tenure(rec: &LeaseRecord) -> Tenure {
    Tenure {
        key: rec.key.clone(),
        holder: rec.holder.clone().unwrap_or_default(),
        term: rec.term,
    }
}

/// A candidate for `key` named `id`, with the given TTL and poll period.
fn elector(store: DynStore, key: &ElectionKey, id: &str, ttl: Duration, poll: Duration) -> Elector {
    Elector::builder(store)
        .namespace(key.namespace.clone())
        .election(key.election.clone())
        .identity(id)
        .ttl(ttl)
        .poll_period(poll)
        .build()
        .expect("elector")
}

async fn must_acquire(store: &DynStore, c: &Claim) -> LeaseRecord {
    match store.try_acquire(c).await {
        Ok(Acquire::Acquired(rec)) => {
            assert_eq!(
                rec.holder.as_deref(),
                Some(c.holder.as_str()),
                "acquired record names the claimant"
            );
            assert!(
                rec.remaining > Duration::ZERO,
                "a fresh lease has time left"
            );
            rec
        }
        other => panic!("{} should have acquired {}: {other:?}", c.holder, c.key),
    }
}

async fn must_not_acquire(store: &DynStore, c: &Claim) -> Option<LeaseRecord> {
    match store.try_acquire(c).await {
        Ok(Acquire::Held(rec)) => rec,
        other => panic!(
            "{} must not acquire a held lease of {}: {other:?}",
            c.holder, c.key
        ),
    }
}

/// Polls `read` until the lease is free by the store's clock.
async fn wait_expired(store: &DynStore, key: &ElectionKey, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let rec = store.read(key).await.expect("read");
        match rec {
            Some(r) if r.is_held() => {
                assert!(
                    start.elapsed() < within,
                    "lease of {key} did not expire within {within:?}"
                );
                tokio::time::sleep(
                    r.remaining.min(Duration::from_millis(20)) + Duration::from_millis(1),
                )
                .await;
            }
            _ => return start.elapsed(),
        }
    }
}

/// How a store's capabilities stretch the suite's durations.
#[derive(Clone, Copy, Debug)]
struct Timing {
    k: u32,
    min_ttl: Duration,
    sparse_terms: bool,
}

impl Timing {
    /// `ms` milliseconds, stretched for stores with a minimum TTL.
    fn ms(&self, ms: u64) -> Duration {
        Duration::from_millis(ms) * self.k
    }

    /// A TTL of at least `d` that the store can honour.
    fn ttl(&self, d: Duration) -> Duration {
        d.max(self.min_ttl)
    }

    /// Asserts `next` is the term after `prev`: exactly `prev + 1`, or (for
    /// stores whose terms are revisions) strictly greater.
    fn next_term(&self, name: &str, prev: u64, next: u64) {
        if self.sparse_terms {
            assert!(next > prev, "[{name}] term {next} must exceed {prev}");
        } else {
            assert_eq!(next, prev + 1, "[{name}] the next term is one higher");
        }
    }
}

impl Conformance {
    /// A suite for the store named `name`; `factory` opens a new connection
    /// (or, for a store that cannot be shared, returns the same instance).
    pub fn new<F, Fut>(name: impl Into<String>, factory: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = DynStore> + Send + 'static,
    {
        Self {
            name: name.into(),
            factory: Arc::new(move || Box::pin(factory())),
            handovers: 1000,
            herd_bound: 3,
        }
    }

    /// How many acquisition attempts [`Self::failover_without_a_herd`] allows
    /// for one failover (default 3). Only for etcd (single node and a cluster
    /// with a member killed), where followers may still disagree about the
    /// designated successor (open). Above 3, the check also accepts a
    /// winner other than the designated successor (a herd means anyone may
    /// win); one winner is always required.
    pub fn with_herd_bound(mut self, attempts: u64) -> Self {
        self.herd_bound = attempts;
        self
    }

    /// How many consecutive handovers [`Self::handovers_increase_terms`] makes (default 1000).
    pub fn with_handovers(mut self, n: usize) -> Self {
        self.handovers = n;
        self
    }

    async fn store(&self) -> DynStore {
        (self.factory)().await
    }

    /// The store's timing constraints: how much to stretch the suite's short
    /// durations (stores with whole-second leases cannot do 150 ms), and
    /// whether terms may skip numbers. The checks stay the same; only their
    /// durations scale.
    async fn timing(&self) -> Timing {
        let caps = self.store().await.capabilities();
        let per = Duration::from_millis(150);
        let k = if caps.min_ttl <= per {
            1
        } else {
            caps.min_ttl.as_nanos().div_ceil(per.as_nanos()) as u32
        };
        Timing {
            k,
            min_ttl: caps.min_ttl,
            sparse_terms: caps.sparse_terms,
        }
    }

    fn key(&self, election: &str) -> ElectionKey {
        ElectionKey::new(
            format!("conformance-{:016x}", rand::random::<u64>()),
            election,
        )
    }

    /// Runs every check in turn. Suites run this way in one process run one
    /// at a time: several timing-sensitive suites sharing two cores would
    /// test the machine's scheduler, not the store.
    pub async fn run_all(&self) {
        static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _turn = ONE_AT_A_TIME.lock().await;
        crate::conformance_tests!(@with_checks [run_all self]);
    }
}

/// Checks in one process take turns: a timing-sensitive check (short TTLs,
/// windows of a few hundred milliseconds, wall-clock bounds) runs alone,
/// the others run side by side. Several timing-sensitive checks sharing two
/// cores would test the machine's scheduler, not the store.
static TURNS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Waits until no other check runs, and keeps it so while held.
async fn alone() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    TURNS.write().await
}

/// Waits until no timing-sensitive check runs, and keeps it so while held.
async fn shared() -> tokio::sync::RwLockReadGuard<'static, ()> {
    TURNS.read().await
}
