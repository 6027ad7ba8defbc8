//! The conformance suite every [`LeaseStore`] must pass (feature `conformance`).
//!
//! Each check opens its own store connections through a factory (one connection
//! per simulated process) and works in a fresh random namespace, so checks can
//! run against a shared database without interfering. Checks panic with a
//! message naming the violated property, in the manner of object_store's
//! `integration` module.
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
//! [`LeaseStore`]: crate::store::LeaseStore

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::{Acquire, Claim, DynStore, ElectionKey, LeaseRecord, Tenure};
use crate::{Elector, State};

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

/// Waits, with a deadline, until `cond` holds.
pub async fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
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

    /// Runs every check in turn. Suites in one process run one at a time:
    /// several timing-sensitive suites sharing two cores would test the
    /// machine's scheduler, not the store.
    pub async fn run_all(&self) {
        static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let _turn = ONE_AT_A_TIME.lock().await;
        self.concurrent_candidates_one_winner_per_term().await;
        self.non_holder_cannot_renew_or_release().await;
        self.renew_after_expiry_fails_and_next_term_is_higher()
            .await;
        self.release_lets_another_acquire_at_once().await;
        self.handovers_increase_terms().await;
        self.sub_second_ttl().await;
        self.times_come_from_the_store_clock().await;
        self.same_identity_never_both_lead().await;
        self.elector_handover_on_shutdown().await;
        self.names_are_exact().await;
        self.push_wakes_followers_on_release().await;
        self.members_register_heartbeat_and_are_reaped().await;
        self.handover_lets_only_the_target_acquire_within_the_window()
            .await;
        self.handover_request_makes_renewal_fail().await;
        self.history_records_every_term_with_reasons().await;
        self.failover_without_a_herd().await;
        self.observers_see_every_change_and_never_write().await;
    }

    /// An observer reports "no leader" for an election that does not exist,
    /// then each leader and the release, without writing.
    pub async fn observers_see_every_change_and_never_write(&self) {
        use crate::observe::{observe, Change, ObserveOptions, Selection};
        let s = self.store().await;
        let key = self.key("observed");
        let opts = ObserveOptions {
            poll_period: Duration::from_millis(10),
            ..ObserveOptions::default()
        };
        let mut o = observe(
            self.store().await,
            Selection::Elections(vec![key.clone()]),
            opts,
        );
        async fn next(o: &mut crate::observe::Observer) -> Change {
            tokio::time::timeout(Duration::from_secs(5), o.next())
                .await
                .expect("a change")
                .expect("alive")
        }
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 0
            },
            "[{}]",
            self.name
        );
        let rec = must_acquire(&s, &claim(&key, "a#1", Duration::from_secs(30))).await;
        assert_eq!(
            next(&mut o).await,
            Change::Leader {
                key: key.clone(),
                holder: "a#1".into(),
                term: rec.term,
                metadata: "meta of a#1".into()
            },
            "[{}]",
            self.name
        );
        assert!(s.release(&tenure(&rec)).await.expect("release"));
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: rec.term
            },
            "[{}]",
            self.name
        );
        let version = s.read(&key).await.expect("read").expect("row").version;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            s.read(&key).await.expect("read").expect("row").version,
            version,
            "[{}] observers never write",
            self.name
        );
    }

    /// 20 followers, the leader crashes: the designated successor takes over
    /// with at most 3 acquisition attempts in all (a herd would make 20).
    pub async fn failover_without_a_herd(&self) {
        let counting = Arc::new(CountingStore {
            inner: self.store().await,
            acquires: Default::default(),
        });
        let store: DynStore = counting.clone();
        let ttl = self.timing().await.ttl(Duration::from_secs(1));
        let key = self.key("herd");
        let build = |id: String, release: bool| {
            Elector::builder(store.clone())
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity(id)
                .ttl(ttl)
                .release_on_shutdown(release)
                .build()
                .expect("elector")
        };
        let leader = build("leader".into(), false);
        tokio::time::timeout(Duration::from_secs(5), leader.acquired())
            .await
            .expect("leads")
            .expect("alive");
        let followers: Vec<Elector> = (0..20).map(|i| build(format!("f{i:02}"), true)).collect();
        let start = Instant::now();
        while store
            .members(&key)
            .await
            .expect("members")
            .iter()
            .filter(|m| m.live)
            .count()
            < 21
        {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "[{}] members did not register",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The designated successor: first live member other than the leader.
        let expected = store
            .members(&key)
            .await
            .expect("members")
            .into_iter()
            .find(|m| m.live && m.identity != "leader")
            .map(|m| m.identity)
            .expect("a successor");
        let before = counting.acquires();
        leader.shutdown().await.expect("crash"); // no release: the lease must expire
        let start = Instant::now();
        while !followers.iter().any(|f| f.is_leader()) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "[{}] no takeover",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        let attempts = counting.acquires() - before;
        let leaders: Vec<&str> = followers
            .iter()
            .filter(|f| f.is_leader())
            .map(|f| f.identity())
            .collect();
        assert_eq!(
            leaders.len(),
            1,
            "[{}] one successor: {leaders:?}",
            self.name
        );
        if self.herd_bound <= 3 {
            // Where a herd is tolerated (see `with_herd_bound`), so is another winner.
            assert_eq!(
                leaders,
                [expected.as_str()],
                "[{}] the designated successor succeeds",
                self.name
            );
        }
        assert!(
            attempts <= self.herd_bound,
            "[{}] {attempts} acquisition attempts for one failover",
            self.name
        );
        for f in followers {
            f.shutdown().await.expect("shutdown");
        }
    }

    /// Members register with a heartbeat, list best successor first, lapse and are reaped.
    pub async fn members_register_heartbeat_and_are_reaped(&self) {
        let s = self.store().await;
        let t = self.timing().await;
        let key = self.key("members");
        let member = |holder: &str, priority| crate::store::Member {
            key: key.clone(),
            holder: holder.into(),
            metadata: format!("addr of {holder}"),
            priority,
        };
        s.heartbeat(&member("old#1", 0), t.ms(300))
            .await
            .expect("join");
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.heartbeat(&member("young#1", 0), Duration::from_secs(30))
            .await
            .expect("join");
        s.heartbeat(&member("vip#1", 5), Duration::from_secs(30))
            .await
            .expect("join");
        let m = s.members(&key).await.expect("members");
        let order: Vec<&str> = m.iter().map(|m| m.holder.as_str()).collect();
        assert_eq!(
            order,
            ["vip#1", "old#1", "young#1"],
            "[{}] priority, then seniority",
            self.name
        );
        assert!(m.iter().all(|m| m.live));
        assert_eq!(m[0].identity, "vip");
        assert_eq!(m[0].metadata, "addr of vip#1");
        // A heartbeat keeps the join time.
        let joined = m[1].joined_at_us;
        s.heartbeat(&member("old#1", 0), t.ms(300))
            .await
            .expect("beat");
        let m = s.members(&key).await.expect("members");
        let old = m.iter().find(|m| m.holder == "old#1").expect("old");
        assert_eq!(
            old.joined_at_us, joined,
            "[{}] heartbeats keep seniority",
            self.name
        );
        // old lapses after 300 ms and is reaped.
        let start = Instant::now();
        loop {
            let m = s.members(&key).await.expect("members");
            if !m.iter().find(|m| m.holder == "old#1").expect("old").live {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5) * t.k,
                "[{}] member did not lapse",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            s.reap(&key).await.expect("reap"),
            1,
            "[{}] one lapsed member reaped",
            self.name
        );
        assert!(s.leave(&key, "young#1").await.expect("leave"));
        let m = s.members(&key).await.expect("members");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].holder, "vip#1");
    }

    /// After a hand-over to an identity, only that identity may acquire until
    /// the window ends; then anyone.
    pub async fn handover_lets_only_the_target_acquire_within_the_window(&self) {
        let s = self.store().await;
        let t = self.timing().await;
        let key = self.key("transfer");
        let ttl = Duration::from_secs(30);
        let rec = must_acquire(&s, &claim(&key, "a#1", ttl)).await;
        assert!(s
            .hand_over(
                &tenure(&rec),
                &crate::store::Handover::To("b".into()),
                t.ms(300),
                "transfer"
            )
            .await
            .expect("hand over"));
        must_not_acquire(&s, &claim(&key, "c#1", ttl)).await;
        must_not_acquire(&s, &claim(&key, "a#1", ttl)).await;
        let b = must_acquire(&s, &claim(&key, "b#9", ttl)).await;
        t.next_term(&self.name, rec.term, b.term);
        assert_eq!(
            b.start_reason, "transfer",
            "[{}] reason recorded",
            self.name
        );
        assert_eq!(
            b.handover_to, None,
            "[{}] acquisition clears the hand-over",
            self.name
        );
        // A target that never comes: anyone after the window.
        assert!(s
            .hand_over(
                &tenure(&b),
                &crate::store::Handover::To("ghost".into()),
                t.ms(200),
                "transfer"
            )
            .await
            .expect("hand over"));
        must_not_acquire(&s, &claim(&key, "c#1", ttl)).await;
        let start = Instant::now();
        loop {
            if let Ok(Acquire::Acquired(r)) = s.try_acquire(&claim(&key, "c#1", ttl)).await {
                assert!(
                    start.elapsed() >= t.ms(100),
                    "[{}] window honoured",
                    self.name
                );
                t.next_term(&self.name, b.term, r.term);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5) * t.k,
                "[{}] window never ended",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A hand-over request from anyone makes the leader's next renewal fail;
    /// with nobody leading, there is nothing to request.
    pub async fn handover_request_makes_renewal_fail(&self) {
        let s = self.store().await;
        let key = self.key("request");
        let ttl = Duration::from_secs(30);
        assert!(
            s.request_handover(&key, &crate::store::Handover::Anyone, ttl, "resign")
                .await
                .expect("request")
                .is_none(),
            "[{}] no leader, nothing to resign",
            self.name
        );
        let rec = must_acquire(&s, &claim(&key, "a#1", ttl)).await;
        let marked = s
            .request_handover(&key, &crate::store::Handover::Anyone, ttl, "resign")
            .await
            .expect("request")
            .expect("leader");
        assert_eq!(marked.handover_to.as_deref(), Some("*"));
        assert!(
            !s.renew(&tenure(&rec), ttl).await.expect("renew"),
            "[{}] renewal fails once a hand-over is requested",
            self.name
        );
        must_not_acquire(&s, &claim(&key, "b#1", ttl)).await;
        assert!(s
            .hand_over(
                &tenure(&rec),
                &crate::store::Handover::Anyone,
                ttl,
                "resign"
            )
            .await
            .expect("step down"));
        let b = must_acquire(&s, &claim(&key, "b#1", ttl)).await;
        assert_eq!(b.start_reason, "resign");
    }

    /// Every term is in the history with why it began and ended.
    pub async fn history_records_every_term_with_reasons(&self) {
        let s = self.store().await;
        let t = self.timing().await;
        let key = self.key("history");
        let a = must_acquire(&s, &claim(&key, "a#1", t.ms(150))).await;
        wait_expired(&s, &key, Duration::from_secs(5) * t.k).await;
        let b = must_acquire(&s, &claim(&key, "b#1", Duration::from_secs(30))).await;
        assert!(s.release(&tenure(&b)).await.expect("release"));
        let c = must_acquire(&s, &claim(&key, "c#1", Duration::from_secs(30))).await;
        // History is written just after each change, off the caller's path.
        let start = Instant::now();
        let h = loop {
            let h = s.history(&key, 10).await.expect("history");
            let complete =
                h.len() == 3 && h[1].end_reason == "released" && h[2].end_reason == "expired";
            if complete || start.elapsed() > Duration::from_secs(5) {
                break h;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let terms: Vec<u64> = h.iter().map(|r| r.term).collect();
        assert_eq!(
            terms,
            [c.term, b.term, a.term],
            "[{}] newest first",
            self.name
        );
        assert_eq!(
            (h[2].start_reason.as_str(), h[2].end_reason.as_str()),
            ("first", "expired"),
            "[{}] {:?}",
            self.name,
            h[2]
        );
        assert_eq!(
            h[2].end_at_us,
            Some(a.expires_at_us),
            "[{}] an expired term ends at its expiry",
            self.name
        );
        assert_eq!(
            (h[1].start_reason.as_str(), h[1].end_reason.as_str()),
            ("expiry", "released"),
            "[{}] {:?}",
            self.name,
            h[1]
        );
        assert_eq!(
            (h[0].start_reason.as_str(), h[0].end_at_us),
            ("release", None),
            "[{}] {:?}",
            self.name,
            h[0]
        );
        assert_eq!(h[0].holder, "c#1");
        assert_eq!(
            s.history(&key, 1).await.expect("history").len(),
            1,
            "[{}] limit",
            self.name
        );
    }

    /// Stores with push wake followers on a release: with a 10 s poll period, a
    /// follower still takes over within half a second.
    pub async fn push_wakes_followers_on_release(&self) {
        let probe = self.store().await;
        if !probe.capabilities().push {
            return;
        }
        let key = self.key("push");
        let build = |store: DynStore, id: &str| {
            Elector::builder(store)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity(id)
                .ttl(Duration::from_secs(30))
                .poll_period(Duration::from_secs(10))
                .build()
                .expect("elector")
        };
        let a = build(self.store().await, "a");
        tokio::time::timeout(Duration::from_secs(5), a.acquired())
            .await
            .expect("a leads")
            .expect("alive");
        let b = build(self.store().await, "b");
        let mut rx = b.leadership();
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|s| matches!(s, State::Following { .. })),
        )
        .await
        .expect("b follows")
        .expect("alive");
        // Let b settle into its long sleep.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        a.shutdown().await.expect("shutdown");
        tokio::time::timeout(Duration::from_millis(500), b.acquired())
            .await
            .unwrap_or_else(|_| {
                panic!("[{}] push did not wake the follower (10 s poll)", self.name)
            })
            .expect("alive");
        assert!(released.elapsed() < Duration::from_millis(500));
        b.shutdown().await.expect("shutdown");
    }

    /// 16 candidates on 16 connections race for one lease, five rounds: exactly
    /// one wins each round, and the terms of the rounds strictly increase.
    pub async fn concurrent_candidates_one_winner_per_term(&self) {
        let key = self.key("race");
        let mut stores = Vec::new();
        for _ in 0..16 {
            stores.push(self.store().await);
        }
        let mut last_term = 0;
        for round in 0..5 {
            let mut tasks = Vec::new();
            for (i, store) in stores.iter().enumerate() {
                let store = store.clone();
                let c = claim(&key, &format!("cand-{i}#r{round}"), Duration::from_secs(30));
                tasks.push(tokio::spawn(async move { store.try_acquire(&c).await }));
            }
            let mut winners = Vec::new();
            for t in tasks {
                match t.await.expect("task") {
                    Ok(Acquire::Acquired(rec)) => winners.push(rec),
                    Ok(Acquire::Held(_)) => {}
                    Err(e) => panic!("[{}] concurrent acquire failed: {e}", self.name),
                }
            }
            assert_eq!(
                winners.len(),
                1,
                "[{}] round {round}: exactly one of 16 must win, got {winners:?}",
                self.name
            );
            let w = &winners[0];
            assert!(
                w.term > last_term,
                "[{}] terms must increase: {} after {last_term}",
                self.name,
                w.term
            );
            last_term = w.term;
            let now = stores[0].read(&key).await.expect("read").expect("row");
            assert_eq!(
                now.holder, w.holder,
                "[{}] the store names the winner",
                self.name
            );
            assert_eq!(now.term, w.term);
            assert!(
                stores[0].release(&tenure(w)).await.expect("release"),
                "winner can release"
            );
        }
    }

    /// Renew and release succeed only for the exact holder and term.
    pub async fn non_holder_cannot_renew_or_release(&self) {
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("owner");
        let ttl = Duration::from_secs(30);
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        let mine = tenure(&rec);
        let thief = Tenure {
            holder: "b#1".into(),
            ..mine.clone()
        };
        let same_identity_other_session = Tenure {
            holder: "a#2".into(),
            ..mine.clone()
        };
        let wrong_term = Tenure {
            term: mine.term + 1,
            ..mine.clone()
        };
        let old_term = Tenure {
            term: mine.term.saturating_sub(1),
            ..mine.clone()
        };
        for t in [&thief, &same_identity_other_session, &wrong_term, &old_term] {
            assert!(
                !b.renew(t, ttl).await.expect("renew"),
                "[{}] {t:?} must not renew",
                self.name
            );
            assert!(
                !b.release(t).await.expect("release"),
                "[{}] {t:?} must not release",
                self.name
            );
        }
        must_not_acquire(&b, &claim(&key, "b#1", ttl)).await;
        must_not_acquire(&a, &claim(&key, "a#1", ttl)).await;
        let after = a.read(&key).await.expect("read").expect("row");
        assert_eq!(after.holder.as_deref(), Some("a#1"));
        assert_eq!(
            after.term, mine.term,
            "[{}] failed writes leave the term alone",
            self.name
        );
        assert!(
            a.renew(&mine, ttl).await.expect("renew"),
            "[{}] the holder renews",
            self.name
        );
        assert!(a.release(&mine).await.expect("release"));
        assert!(
            !a.renew(&mine, ttl).await.expect("renew"),
            "[{}] no renew after release",
            self.name
        );
    }

    /// Once a lease expires by the store's clock, its holder cannot renew it and
    /// the next acquisition gets a higher term; the old holder cannot release it.
    pub async fn renew_after_expiry_fails_and_next_term_is_higher(&self) {
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("expiry");
        let t = self.timing().await;
        let rec = must_acquire(&a, &claim(&key, "a#1", t.ms(200))).await;
        wait_expired(&b, &key, Duration::from_secs(5) * t.k).await;
        assert!(
            !a.renew(&tenure(&rec), Duration::from_secs(30))
                .await
                .expect("renew"),
            "[{}] renew after expiry must fail",
            self.name
        );
        let next = must_acquire(&b, &claim(&key, "b#1", Duration::from_secs(30))).await;
        assert!(
            next.term > rec.term,
            "[{}] next term {} must exceed {}",
            self.name,
            next.term,
            rec.term
        );
        assert!(
            !a.release(&tenure(&rec)).await.expect("release"),
            "[{}] stale release must fail",
            self.name
        );
        let now = a.read(&key).await.expect("read").expect("row");
        assert_eq!(now.holder.as_deref(), Some("b#1"));
        // The same holder coming back after a loss also gets a new term.
        assert!(b.release(&tenure(&next)).await.expect("release"));
        let again = must_acquire(&a, &claim(&key, "a#1", Duration::from_secs(30))).await;
        assert!(
            again.term > next.term,
            "[{}] re-acquisition must get a new term",
            self.name
        );
    }

    /// A release frees the lease at once: another candidate acquires immediately.
    pub async fn release_lets_another_acquire_at_once(&self) {
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("release");
        let rec = must_acquire(&a, &claim(&key, "a#1", Duration::from_secs(60))).await;
        assert!(a.release(&tenure(&rec)).await.expect("release"));
        let read = b.read(&key).await.expect("read").expect("row");
        assert!(
            !read.is_held(),
            "[{}] released lease reads as free: {read:?}",
            self.name
        );
        assert_eq!(
            read.term, rec.term,
            "[{}] release keeps the term",
            self.name
        );
        let next = must_acquire(&b, &claim(&key, "b#1", Duration::from_secs(60))).await;
        self.timing()
            .await
            .next_term(&self.name, rec.term, next.term);
    }

    /// Consecutive handovers between two connections give strictly increasing terms.
    pub async fn handovers_increase_terms(&self) {
        let stores = [self.store().await, self.store().await];
        let key = self.key("handovers");
        let mut last = 0;
        for i in 0..self.handovers {
            let store = &stores[i % 2];
            let rec = must_acquire(
                store,
                &claim(&key, &format!("c{}#x", i % 2), Duration::from_secs(60)),
            )
            .await;
            assert!(
                rec.term > last,
                "[{}] handover {i}: term {} after {last}",
                self.name,
                rec.term
            );
            last = rec.term;
            assert!(store.release(&tenure(&rec)).await.expect("release"));
        }
    }

    /// A 200 ms TTL is honoured with sub-second precision.
    pub async fn sub_second_ttl(&self) {
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("short-ttl");
        let t = self.timing().await;
        let ttl = t.ms(200);
        let start = Instant::now();
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        assert!(
            rec.remaining <= ttl && rec.remaining > t.ms(100),
            "[{}] remaining {:?} of a fresh 200ms lease",
            self.name,
            rec.remaining
        );
        assert_eq!(rec.ttl, ttl);
        let held = must_not_acquire(&b, &claim(&key, "b#1", ttl))
            .await
            .expect("record");
        assert!(
            held.remaining <= ttl,
            "[{}] remaining {:?}",
            self.name,
            held.remaining
        );
        wait_expired(&b, &key, Duration::from_secs(5) * t.k).await;
        let took = start.elapsed();
        assert!(
            took >= t.ms(150) && took < t.ms(900),
            "[{}] a 200ms lease expired after {took:?}",
            self.name
        );
        must_acquire(&b, &claim(&key, "b#1", ttl)).await;
    }

    /// Lease times are the store's: expiry = renewal + TTL exactly, and the
    /// renewal time agrees with the store's clock, whatever the client's clock says.
    pub async fn times_come_from_the_store_clock(&self) {
        let a = self.store().await;
        let key = self.key("clock");
        let ttl = Duration::from_secs(7);
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        assert_eq!(
            rec.expires_at_us - rec.renewed_at_us,
            7_000_000,
            "[{}] expiry = renewal + ttl",
            self.name
        );
        assert_eq!(rec.acquired_at_us, rec.renewed_at_us);
        let read = a.read(&key).await.expect("read").expect("row");
        let store_now = read.expires_at_us - read.remaining.as_micros() as i64;
        assert!(
            (store_now - rec.renewed_at_us).abs() < 5_000_000,
            "[{}] renewal time {} is the store's clock ({store_now})",
            self.name,
            rec.renewed_at_us
        );
        assert!(a.renew(&tenure(&rec), ttl).await.expect("renew"));
        let renewed = a.read(&key).await.expect("read").expect("row");
        assert!(renewed.renewed_at_us >= rec.renewed_at_us);
        assert!(
            renewed.version > rec.version,
            "[{}] version bumps on renew",
            self.name
        );
    }

    /// Two electors with one identity get different holder ids and never lead at once.
    pub async fn same_identity_never_both_lead(&self) {
        let key = self.key("same-identity");
        let ttl = self.timing().await.ttl(Duration::from_millis(600));
        let build = |store: DynStore| {
            Elector::builder(store)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity("twin")
                .ttl(ttl)
                .poll_period(Duration::from_millis(20))
                .build()
                .expect("elector")
        };
        let a = build(self.store().await);
        let b = build(self.store().await);
        assert_ne!(a.holder_id(), b.holder_id());
        let start = Instant::now();
        let mut both = 0;
        let mut seen_leader = false;
        while start.elapsed() < Duration::from_millis(1500) {
            let (la, lb) = (a.is_leader(), b.is_leader());
            both += (la && lb) as u32;
            seen_leader |= la || lb;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(
            both, 0,
            "[{}] two electors with one identity both led",
            self.name
        );
        assert!(seen_leader, "[{}] one of them leads", self.name);
        let (leader, other) = if a.is_leader() { (a, b) } else { (b, a) };
        leader.shutdown().await.expect("shutdown");
        let mut rx = other.leadership();
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|s| matches!(s, State::Leading { .. })),
        )
        .await
        .expect("the twin takes over after a release")
        .expect("elector alive");
        other.shutdown().await.expect("shutdown");
    }

    /// An elector that shuts down releases; the follower takes over within a poll.
    pub async fn elector_handover_on_shutdown(&self) {
        let key = self.key("elector");
        let build = |store: DynStore, id: &str| {
            Elector::builder(store)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity(id)
                .ttl(Duration::from_secs(30))
                .poll_period(Duration::from_millis(20))
                .build()
                .expect("elector")
        };
        let a = build(self.store().await, "a");
        let first = tokio::time::timeout(Duration::from_secs(5), a.acquired())
            .await
            .expect("a leads")
            .expect("alive");
        let b = build(self.store().await, "b");
        let mut rx = b.leadership();
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|s| matches!(s, State::Following { .. })),
        )
        .await
        .expect("b follows")
        .expect("alive");
        assert_eq!(
            *rx.borrow(),
            State::Following {
                leader: a.holder_id().to_string(),
                term: first.term()
            }
        );
        let released = Instant::now();
        a.shutdown().await.expect("shutdown");
        assert!(!a.is_leader());
        let second = tokio::time::timeout(Duration::from_secs(5), b.acquired())
            .await
            .expect("b takes over well before the 30s TTL")
            .expect("alive");
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "[{}] handover took {:?}",
            self.name,
            released.elapsed()
        );
        assert!(second.term() > first.term());
        b.shutdown().await.expect("shutdown");
    }

    /// Election names are compared exactly: case, Unicode and length limits.
    pub async fn names_are_exact(&self) {
        let a = self.store().await;
        let ns = self.key("x").namespace;
        let ttl = Duration::from_secs(30);
        let names = ["Cron", "cron", "cron ", "日本語", &"n".repeat(255)];
        for n in names {
            must_acquire(&a, &claim(&ElectionKey::new(ns.clone(), n), "a#1", ttl)).await;
        }
        let listed = a.list(Some(&ns)).await.expect("list");
        assert_eq!(
            listed.len(),
            names.len(),
            "[{}] each name is its own election",
            self.name
        );
        for rec in &listed {
            assert!(
                names.contains(&rec.key.election.as_str()),
                "[{}] name round-trips: {:?}",
                self.name,
                rec.key
            );
        }
    }
}

/// Where the test servers are, and whether their absence fails the run.
///
/// Tests that need a server of their own (TLS, crashes) start a private one
/// with the workspace's dev-only crate `tenure-testsupport`.
pub mod servers {
    use crate::store::{connect, DynStore, StoreOptions};

    /// MariaDB/MySQL URL for tests: `TENURE_TEST_MYSQL`, default the local server.
    pub fn mysql_url() -> String {
        std::env::var("TENURE_TEST_MYSQL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
    }

    /// PostgreSQL URL for tests: `TENURE_TEST_POSTGRES`, default the local server.
    pub fn postgres_url() -> String {
        std::env::var("TENURE_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    }

    /// Redis URL for tests: `TENURE_TEST_REDIS`, default the local server's database 0.
    pub fn redis_url() -> String {
        std::env::var("TENURE_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into())
    }

    /// True when a missing server must fail the test run: in CI (`CI=true`) or
    /// when `TENURE_REQUIRE_SERVERS=1`.
    pub fn required() -> bool {
        std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
            || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
    }

    /// Connects to a test server, or returns `None` after printing why the test
    /// is skipped. Panics instead when servers are [`required`].
    pub async fn connect_or_skip(url: &str, options: &StoreOptions) -> Option<DynStore> {
        match connect(url, options).await {
            Ok(s) => Some(s),
            Err(e) if required() => panic!(
                "test server {} is required (CI=true or TENURE_REQUIRE_SERVERS=1) but unusable: {e}",
                crate::store::redact_url(url)
            ),
            Err(e) => {
                eprintln!("SKIPPED: server {} unavailable: {e}", crate::store::redact_url(url));
                None
            }
        }
    }
}

/// Private etcd servers for tests (feature `etcd`): started on free loopback
/// ports with a temporary data directory, killed when dropped.
#[cfg(feature = "etcd")]
pub mod etcd_server {
    use std::path::PathBuf;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use crate::store::{connect, StoreOptions};

    /// The etcd binary: `TENURE_ETCD_BIN`, else `etcd` on the `PATH`
    /// (Debian package `etcd-server`).
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("TENURE_ETCD_BIN") {
            return Some(PathBuf::from(p));
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|d| d.join("etcd"))
            .find(|p| p.is_file())
    }

    fn free_port() -> std::io::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    }

    /// A private etcd cluster of one or more members on loopback.
    #[derive(Debug)]
    pub struct EtcdCluster {
        members: Vec<Option<Child>>,
        client_ports: Vec<u16>,
        dir: PathBuf,
    }

    impl EtcdCluster {
        /// Starts `n` members and waits (up to 30 s) until the cluster serves
        /// requests. Election timeout 250 ms, so leases can be as short as 1 s.
        pub async fn start(n: usize) -> Result<Self, String> {
            let bin =
                binary().ok_or("no etcd binary (install etcd-server or set TENURE_ETCD_BIN)")?;
            // On tmpfs where there is one: etcd fsyncs every write, and on a
            // busy two-core machine one fsync now and then takes longer than
            // a 1 s TTL's 500 ms release budget. Data still survives what the
            // tests do to a member (SIGKILL, restart); only a machine crash
            // would lose it, and no test crashes the machine.
            let base = Some(std::path::Path::new("/dev/shm"))
                .filter(|p| p.is_dir())
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir);
            let dir = base.join(format!(
                "tenure-etcd-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let mut client_ports = Vec::new();
            let mut peer_ports = Vec::new();
            for _ in 0..n {
                client_ports.push(free_port().map_err(|e| e.to_string())?);
                peer_ports.push(free_port().map_err(|e| e.to_string())?);
            }
            let initial: Vec<String> = peer_ports
                .iter()
                .enumerate()
                .map(|(i, p)| format!("m{i}=http://127.0.0.1:{p}"))
                .collect();
            let token = format!("tenure-{:08x}", rand::random::<u32>());
            let mut cluster = Self {
                members: Vec::new(),
                client_ports: client_ports.clone(),
                dir: dir.clone(),
            };
            for i in 0..n {
                let log = std::fs::File::create(dir.join(format!("m{i}.log")))
                    .map_err(|e| e.to_string())?;
                let child = Command::new(&bin)
                    .arg(format!("--name=m{i}"))
                    .arg(format!(
                        "--data-dir={}",
                        dir.join(format!("m{i}")).display()
                    ))
                    .arg(format!(
                        "--listen-client-urls=http://127.0.0.1:{}",
                        client_ports[i]
                    ))
                    .arg(format!(
                        "--advertise-client-urls=http://127.0.0.1:{}",
                        client_ports[i]
                    ))
                    .arg(format!(
                        "--listen-peer-urls=http://127.0.0.1:{}",
                        peer_ports[i]
                    ))
                    .arg(format!(
                        "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                        peer_ports[i]
                    ))
                    .arg(format!("--initial-cluster={}", initial.join(",")))
                    .arg("--initial-cluster-state=new")
                    .arg(format!("--initial-cluster-token={token}"))
                    .arg("--heartbeat-interval=25")
                    .arg("--election-timeout=250")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::from(log))
                    .spawn()
                    .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
                cluster.members.push(Some(child));
            }
            let start = Instant::now();
            loop {
                let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(1));
                match connect(&cluster.url(), &options).await {
                    Ok(_) => return Ok(cluster),
                    Err(e) if start.elapsed() > Duration::from_secs(30) => {
                        return Err(format!(
                            "etcd did not become ready within 30s: {e} (logs in {})",
                            dir.display()
                        ))
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }

        /// Starts a cluster, or returns `None` after printing SKIPPED when etcd
        /// is not installed; panics instead when servers are
        /// [`required`](super::servers::required) or the start fails.
        pub async fn start_or_skip(n: usize) -> Option<Self> {
            if binary().is_none() {
                if super::servers::required() {
                    panic!("etcd is required (CI=true or TENURE_REQUIRE_SERVERS=1) but not installed: apt-get install etcd-server");
                }
                eprintln!("SKIPPED: no etcd binary (install etcd-server or set TENURE_ETCD_BIN)");
                return None;
            }
            match Self::start(n).await {
                Ok(c) => Some(c),
                Err(e) => panic!("private etcd did not start: {e}"),
            }
        }

        /// The store URL naming every member.
        pub fn url(&self) -> String {
            let hosts: Vec<String> = self
                .client_ports
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect();
            format!("etcd://{}", hosts.join(","))
        }

        /// The client address (`127.0.0.1:port`) of member `i`.
        pub fn member_addr(&self, i: usize) -> String {
            format!("127.0.0.1:{}", self.client_ports[i])
        }

        /// How many members were started.
        pub fn len(&self) -> usize {
            self.members.len()
        }

        /// True for a cluster without members.
        pub fn is_empty(&self) -> bool {
            self.members.is_empty()
        }

        /// Kills member `i` with SIGKILL and reaps it.
        pub fn kill(&mut self, i: usize) {
            if let Some(mut child) = self.members.get_mut(i).and_then(Option::take) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    impl Drop for EtcdCluster {
        fn drop(&mut self) {
            for i in 0..self.members.len() {
                self.kill(i);
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Wraps a store and counts the acquisition attempts that reach it (for the
/// herd checks and the succession benchmark).
#[derive(Debug)]
pub struct CountingStore {
    inner: DynStore,
    acquires: std::sync::atomic::AtomicU64,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: DynStore) -> Self {
        Self {
            inner,
            acquires: Default::default(),
        }
    }

    /// Acquisition attempts so far.
    pub fn acquires(&self) -> u64 {
        self.acquires.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl crate::store::LeaseStore for CountingStore {
    fn capabilities(&self) -> crate::store::Capabilities {
        self.inner.capabilities()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn try_acquire(&self, claim: &Claim) -> crate::Result<Acquire> {
        self.acquires
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.try_acquire(claim).await
    }
    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> crate::Result<bool> {
        self.inner.renew(tenure, ttl).await
    }
    async fn release(&self, tenure: &Tenure) -> crate::Result<bool> {
        self.inner.release(tenure).await
    }
    async fn read(&self, key: &ElectionKey) -> crate::Result<Option<LeaseRecord>> {
        self.inner.read(key).await
    }
    async fn list(&self, namespace: Option<&str>) -> crate::Result<Vec<LeaseRecord>> {
        self.inner.list(namespace).await
    }
    fn subscribe(&self) -> Option<crate::store::Changes> {
        self.inner.subscribe()
    }
    async fn heartbeat(&self, member: &crate::store::Member, ttl: Duration) -> crate::Result<()> {
        self.inner.heartbeat(member, ttl).await
    }
    async fn leave(&self, key: &ElectionKey, holder: &str) -> crate::Result<bool> {
        self.inner.leave(key, holder).await
    }
    async fn members(&self, key: &ElectionKey) -> crate::Result<Vec<crate::store::MemberRecord>> {
        self.inner.members(key).await
    }
    async fn reap(&self, key: &ElectionKey) -> crate::Result<u64> {
        self.inner.reap(key).await
    }
    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &crate::store::Handover,
        window: Duration,
        reason: &str,
    ) -> crate::Result<bool> {
        self.inner.hand_over(tenure, to, window, reason).await
    }
    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &crate::store::Handover,
        window: Duration,
        reason: &str,
    ) -> crate::Result<Option<LeaseRecord>> {
        self.inner.request_handover(key, to, window, reason).await
    }
    async fn history(
        &self,
        key: &ElectionKey,
        limit: usize,
    ) -> crate::Result<Vec<crate::store::HistoryRecord>> {
        self.inner.history(key, limit).await
    }
    async fn flush(&self) -> crate::Result<()> {
        self.inner.flush().await
    }
}
