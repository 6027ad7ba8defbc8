//! A hand-driven world for elector tests: a memory store and electors sharing
//! one `ManualClock`, so no test waits for real lease time. The electors use
//! the memory store through `Instrumented`, whose fault switches make it fail
//! or hang. Built with the `world` feature (tenure's `conformance` feature
//! turns it on for tenure's own tests), as `Instrumented` is part of
//! `tenure::testing`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::TestRecorder;
use tenure::clock::ManualClock;
use tenure::store::memory::MemoryStore;
use tenure::store::{DynStore, ElectionKey};
use tenure::testing::Instrumented;
use tenure::{Elector, ElectorBuilder};

/// The lease TTL of every elector [`World::builder`] makes.
pub const TTL: Duration = Duration::from_secs(10);

/// The clock, the store and the counters the electors of one test share.
pub struct World {
    pub clock: ManualClock,
    /// The store the electors use: `memory` with fault switches.
    pub store: Arc<Instrumented>,
    /// The store itself.
    pub memory: Arc<MemoryStore>,
    /// Sees the memory store's write counters.
    recorder: TestRecorder,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    /// A fresh memory store on a fresh manual clock.
    pub fn new() -> Self {
        let clock = ManualClock::new();
        let recorder = TestRecorder::new();
        let memory =
            Arc::new(recorder.scope_sync(|| MemoryStore::with_clock(Arc::new(clock.clone()))));
        let store = Arc::new(Instrumented::new(memory.clone()));
        Self {
            clock,
            store,
            memory,
            recorder,
        }
    }

    /// How many conditional writes to leases (acquire, renew, release and
    /// hand-over attempts) reached the memory store.
    pub fn writes(&self) -> u64 {
        self.recorder.statements("lease_write")
    }

    /// A builder for election "job" with identity `id`, TTL 10 s, on this clock.
    pub fn builder(&self, id: &str) -> ElectorBuilder {
        Elector::builder(self.store.clone())
            .election("job")
            .identity(id)
            .ttl(TTL)
            .clock(Arc::new(self.clock.clone()))
    }

    /// [`World::builder`]'s elector, built.
    pub fn elector(&self, id: &str) -> Elector {
        self.builder(id).build().expect("elector")
    }

    /// [`World::elector`], once it leads (within 5 s of real time: a
    /// vacant election needs no clock movement).
    pub async fn leader(&self, id: &str) -> Elector {
        let e = self.elector(id);
        tokio::time::timeout(Duration::from_secs(5), e.acquired())
            .await
            .expect("leads within 5 s")
            .expect("the elector runs");
        e
    }

    /// [`World::elector`], once it follows a leader (within 5 s).
    pub async fn follower(&self, id: &str) -> Elector {
        let e = self.elector(id);
        follows(&e).await;
        e
    }

    /// Election "job"'s lease as the store has it now.
    pub async fn lease(&self) -> tenure::store::LeaseRecord {
        use tenure::store::LeaseStore;
        self.store
            .read(&ElectionKey::new("default", "job"))
            .await
            .expect("read")
            .expect("the election was acquired")
    }

    /// The electors' store, as the trait object the store API takes.
    pub fn dyn_store(&self) -> DynStore {
        self.store.clone()
    }

    /// Moves time forward in steps, letting the tasks react after each step.
    pub async fn advance(&self, total: Duration, step: Duration) {
        let mut moved = Duration::ZERO;
        while moved < total {
            let s = step.min(total - moved);
            self.clock.advance(s);
            moved += s;
            settle().await;
        }
    }
}

/// Lets spawned tasks run to their next await on the manual clock.
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(3)).await;
}

/// Waits (up to 5 s) until `e` follows a leader.
pub async fn follows(e: &Elector) {
    let mut state = e.leadership();
    tokio::time::timeout(
        Duration::from_secs(5),
        state.wait_for(|s| matches!(s, tenure::State::Following { .. })),
    )
    .await
    .expect("following within 5 s")
    .expect("the elector runs");
}

/// Waits (real time, with a deadline) until `cond` holds.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The key of election "job" in the default namespace.
pub fn key() -> ElectionKey {
    ElectionKey::new("default", "job")
}
