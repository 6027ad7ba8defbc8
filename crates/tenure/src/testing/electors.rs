//! Conformance checks. Elector-level checks: electors on the store lead one at
//! a time, hand over on shutdown, and fail over without a herd.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{alone, elector, shared, Conformance, Instrumented, Op};
use crate::store::EndReason;
use crate::store::{DynStore, ElectionKey, LeaseStoreExt};
use crate::{Elector, State};

impl Conformance {
    /// Two electors with one identity get different holder ids and never lead at once.
    pub async fn same_identity_never_both_lead(&self) {
        let _turn = alone().await;
        let key = self.key("same-identity");
        let ttl = self.timing().await.ttl(Duration::from_millis(600));
        let build = |store: DynStore| elector(store, &key, "twin", ttl, Duration::from_millis(20));
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
        let _turn = alone().await;
        let key = self.key("elector");
        let build = |store: DynStore, id: &str| {
            elector(
                store,
                &key,
                id,
                Duration::from_secs(30),
                Duration::from_millis(20),
            )
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

    /// Transfers in a row, every elector alive, each reach their target
    /// within a twentieth of the lease time once the request is written
    /// (milliseconds on every store that pushes; the bound leaves room
    /// for a loaded CI; where nothing
    /// pushes, at the target's next read, within the lease time and a
    /// quarter). A follower that is not the target must
    /// hear of the target's acquisition too: one that slept through the
    /// transfer window missed the next release and, as the next transfer's
    /// target, left the election leaderless for the rest of its old window
    /// (MySQL, whose named locks ring only when a leader lets go: the
    /// failover bench once stalled 10 s on MariaDB).
    pub async fn transfers_in_a_row_reach_their_targets(&self) {
        let _turn = alone().await;
        let key = self.key("transfers");
        let ttl = self.timing().await.ttl(Duration::from_secs(10));
        let ids = ["a", "b", "c"];
        let mut electors = Vec::new();
        for id in ids {
            let e = elector(self.store().await, &key, id, ttl, Duration::from_millis(20));
            if electors.is_empty() {
                tokio::time::timeout(ttl, e.acquired())
                    .await
                    .expect("a leads")
                    .expect("alive");
            }
            electors.push(e);
        }
        // Where nothing pushes (`Capabilities::reads_at_expiry`), a
        // transfer reaches its target at its next read: within a tenth of
        // a TTL if it is first in line, at the lease's expiry otherwise (a
        // target that just stepped down ranks itself again only then).
        let bound = if self.store().await.capabilities().reads_at_expiry {
            ttl + ttl / 2
        } else {
            ttl / 20
        };
        for round in 0..6 {
            let (from, to) = (round % ids.len(), (round + 1) % ids.len());
            // The target must be a listed member; one that stepped down
            // rejoins the list after its hold-off.
            let listed = Instant::now();
            while !electors[from]
                .members()
                .await
                .is_ok_and(|m| m.iter().any(|m| m.identity == ids[to]))
            {
                assert!(
                    listed.elapsed() < ttl,
                    "[{}] round {round}: {} never listed",
                    self.name,
                    ids[to]
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let asked = Instant::now();
            electors[from]
                .transfer(ids[to])
                .await
                .unwrap_or_else(|e| panic!("[{}] round {round}: transfer: {e}", self.name));
            // The request is a commit that on a busy disk SQLite's flush
            // alone makes slow: the bound is for what follows it, the
            // target's wake-up and acquisition.
            let requested = asked.elapsed();
            tokio::time::timeout(ttl * 2, electors[to].acquired())
                .await
                .unwrap_or_else(|_| panic!("[{}] round {round}: {} never led", self.name, ids[to]))
                .expect("alive");
            let took = asked.elapsed();
            eprintln!(
                "[{}] transfer {} -> {}: {took:?} (request {requested:?})",
                self.name, ids[from], ids[to]
            );
            assert!(
                took < bound + requested,
                "[{}] round {round}: transfer {} -> {} took {took:?}, the request \
                 {requested:?} of it (TTL {ttl:?})",
                self.name,
                ids[from],
                ids[to]
            );
        }
        for e in electors {
            e.shutdown().await.expect("shutdown");
        }
    }

    /// Waits until every one of `ids` is a live member of `key`; fails the
    /// check after `within`.
    async fn until_listed(
        &self,
        store: &DynStore,
        key: &ElectionKey,
        ids: &[&str],
        within: Duration,
    ) {
        let start = Instant::now();
        while !store.members(key).await.is_ok_and(|members| {
            ids.iter()
                .all(|id| members.iter().any(|m| m.identity == *id && m.live))
        }) {
            assert!(
                start.elapsed() < within,
                "[{}] {ids:?} never listed",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `Elector::transfer` to a member third in line, where followers out
    /// of line read only at the lease's expiry (PostgreSQL, MySQL: their
    /// next read can be a TTL and a quarter away), reaches it: the window
    /// the leader writes by default lasts until such a member has read.
    /// The transfer is asked just after the target's read, when its next
    /// one is furthest off. Elsewhere every follower hears the push.
    pub async fn a_transfer_reaches_a_member_that_reads_at_the_expiry(&self) {
        let _turn = alone().await;
        let caps = self.store().await.capabilities();
        if !((caps.push && caps.push_holds_a_connection) || caps.reads_at_expiry) {
            return;
        }
        let key = self.key("out-of-line-target");
        let ttl = self.timing().await.ttl(Duration::from_secs(1));
        let poll = Duration::from_millis(20);
        let a = elector(self.store().await, &key, "a", ttl, poll);
        tokio::time::timeout(ttl * 5, a.acquired())
            .await
            .expect("a leads")
            .expect("alive");
        // Joined in this order, b and c are first in line, d third.
        let mut electors = vec![a];
        let store = self.store().await;
        for id in ["b", "c"] {
            electors.push(elector(self.store().await, &key, id, ttl, poll));
            self.until_listed(&store, &key, &[id], ttl * 10).await;
        }
        let counting = Arc::new(Instrumented::new(self.store().await));
        let d = elector(counting.clone(), &key, "d", ttl, poll);
        let reads = || counting.calls(Op::Read) + counting.calls(Op::HeartbeatAndRead);
        // Settled: listed, ranked, reading about once a TTL.
        tokio::time::sleep(ttl * 3).await;
        let before = reads();
        let waited = Instant::now();
        while reads() == before {
            assert!(waited.elapsed() < ttl * 3, "[{}] d never read", self.name);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let asked = Instant::now();
        electors[0]
            .transfer("d")
            .await
            .unwrap_or_else(|e| panic!("[{}] transfer to d: {e}", self.name));
        let mut next = store.read(&key).await.expect("read");
        while !next.as_ref().is_some_and(|r| r.is_held()) {
            assert!(
                asked.elapsed() < ttl * 5,
                "[{}] nobody led after the transfer",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
            next = store.read(&key).await.expect("read");
        }
        let holder = next.and_then(|r| r.holder).unwrap_or_default();
        assert_eq!(
            crate::store::identity_of(&holder),
            "d",
            "[{}] the transfer to d went to {holder} after {:?} (TTL {ttl:?})",
            self.name,
            asked.elapsed()
        );
        eprintln!(
            "[{}] transfer to a member out of line: it led after {:?}",
            self.name,
            asked.elapsed()
        );
        electors.push(d);
        for e in electors {
            e.shutdown().await.expect("shutdown");
        }
    }

    /// A transfer to a member that died just before (still listed and heard
    /// from within two TTLs, so the request is accepted) does not leave the
    /// election leaderless for the window the request asked for: the
    /// leader writes a window no longer than a live target needs to wake
    /// and take the lease, and then succession goes on as after a release.
    pub async fn a_transfer_to_a_dead_target_ends_early(&self) {
        let _turn = alone().await;
        let key = self.key("dead-target");
        let ttl = self.timing().await.ttl(Duration::from_secs(1));
        let poll = Duration::from_millis(20);
        let a = elector(self.store().await, &key, "a", ttl, poll);
        let first = tokio::time::timeout(ttl * 5, a.acquired())
            .await
            .expect("a leads")
            .expect("alive")
            .term();
        let frozen = Arc::new(Instrumented::new(self.store().await));
        let b = elector(frozen.clone(), &key, "b", ttl, poll);
        let c = elector(self.store().await, &key, "c", ttl, poll);
        let store = self.store().await;
        self.until_listed(&store, &key, &["b", "c"], ttl * 10).await;
        // b dies: from now on none of its calls reach the store.
        frozen.set_hang(true);
        let window = Duration::from_secs(30);
        let asked = Instant::now();
        crate::handover::transfer(&store, &key, "b", window)
            .await
            .unwrap_or_else(|e| panic!("[{}] b was heard from lately: {e}", self.name));
        // A next tenure, of a or c (b's calls cannot reach the store).
        while !store
            .read(&key)
            .await
            .is_ok_and(|r| r.is_some_and(|r| r.is_held() && r.term > first))
        {
            assert!(
                asked.elapsed() < window / 3,
                "[{}] nobody led {:?} after a transfer to a dead member (window {window:?}, TTL {ttl:?})",
                self.name,
                asked.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!(
            "[{}] transfer to a dead member: led again after {:?}",
            self.name,
            asked.elapsed()
        );
        frozen.set_hang(false);
        for e in [a, b, c] {
            e.shutdown().await.expect("shutdown");
        }
    }

    /// `shutdown()` returns only once the end of the released term is in the
    /// history, read through another connection: a process that exits right
    /// after shutting down must not leave its last term open. Five runs, each
    /// on a store of its own, as five processes would.
    pub async fn shutdown_closes_the_term_before_returning(&self) {
        let _turn = shared().await;
        let checker = self.store().await;
        for i in 0..5 {
            let key = self.key(&format!("shutdown-history-{i}"));
            let elector = Elector::builder(self.store().await)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .ttl(self.timing().await.ttl(Duration::from_secs(10)))
                .build()
                .expect("elector");
            let term = tokio::time::timeout(Duration::from_secs(10), elector.acquired())
                .await
                .expect("leads")
                .expect("alive")
                .term();
            elector.shutdown().await.expect("shutdown");
            drop(elector);
            let history = checker.history(&key, 5).await.expect("history");
            assert!(
                history.iter().any(|h| h.term == term
                    && h.end_reason == Some(EndReason::Released)
                    && h.end_at_us.is_some()),
                "[{}] run {i}: term {term} not closed right after shutdown: {history:?}",
                self.name
            );
        }
    }

    /// 20 followers, the leader crashes: the designated successor takes over
    /// with at most 3 acquisition attempts in all (a herd would make 20).
    pub async fn failover_without_a_herd(&self) {
        let _turn = alone().await;
        let counting = Arc::new(Instrumented::new(self.store().await));
        let store: DynStore = counting.clone();
        // Two seconds: twenty followers registering must not stall the
        // leader's renewals into a lapse, which would pick another winner.
        let ttl = self.timing().await.ttl(Duration::from_secs(2));
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
        if self.herd_bound <= 3 && leaders != [expected.as_str()] {
            // Where a herd is tolerated (see `with_herd_bound`), so is another winner.
            let now = store.members(&key).await.map(|m| {
                m.iter()
                    .map(|m| {
                        format!(
                            "{} joined {} hb {} live {}",
                            m.identity, m.joined_at_us, m.heartbeat_at_us, m.live
                        )
                    })
                    .collect::<Vec<_>>()
            });
            panic!(
                "[{}] the designated successor {expected} did not succeed: {leaders:?}; members now: {now:#?}",
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

    /// A graceful release is read at once only by the first two in line:
    /// where every follower hears the same push (etcd, Redis, ZooKeeper),
    /// the others read later, once the successor has taken over, instead of
    /// all competing with it for the store and the machine (a hundred
    /// processes reading at once made a hand-over take seconds); where
    /// only the first in line listen, the others read at the expiry.
    pub async fn a_release_is_read_at_once_only_by_the_first_in_line(&self) {
        let _turn = alone().await;
        let inner = self.store().await;
        // Without push, followers poll: nothing here applies.
        if !inner.capabilities().push {
            return;
        }
        // Long, so that few followers' timed reads (at the lease's expiry,
        // on stores that do not push it) fall into the counted window.
        let ttl = self.timing().await.ttl(Duration::from_secs(10));
        let key = self.key("first-in-line");
        // One store, so one push channel, as in one process; each elector
        // counts its own calls.
        let build = |id: String| {
            let counting = Arc::new(Instrumented::new(inner.clone()));
            let elector = Elector::builder(counting.clone() as DynStore)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity(id)
                .ttl(ttl)
                .build()
                .expect("elector");
            (elector, counting)
        };
        let lease_reads = |c: &Instrumented| c.calls(Op::Read) + c.calls(Op::HeartbeatAndRead);
        let (leader, _) = build("leader".into());
        tokio::time::timeout(Duration::from_secs(5), leader.acquired())
            .await
            .expect("leads")
            .expect("alive");
        const FOLLOWERS: usize = 12;
        let followers: Vec<(Elector, Arc<Instrumented>)> =
            (0..FOLLOWERS).map(|i| build(format!("f{i:02}"))).collect();
        let all_reads = || followers.iter().map(|(_, c)| lease_reads(c)).sum::<u64>();
        // Registered, then no read for 400 ms: the start-up's reads are over
        // (a follower's first read after it registered ranks it; one not
        // yet registered reads again every 100 ms).
        let start = Instant::now();
        let mut last = (all_reads(), Instant::now());
        let members = loop {
            let members = inner.members(&key).await.expect("members");
            let live = members.iter().filter(|m| m.live).count();
            if all_reads() != last.0 {
                last = (all_reads(), Instant::now());
            } else if live == FOLLOWERS + 1 && last.1.elapsed() >= Duration::from_millis(400) {
                break members;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "[{}] the followers did not register and fall quiet ({live} live members)",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The first two in line: the first live members after the leader.
        let in_line: Vec<String> = members
            .iter()
            .filter(|m| m.live && m.identity != "leader")
            .take(2)
            .map(|m| m.identity.clone())
            .collect();
        let before: Vec<u64> = followers.iter().map(|(_, c)| lease_reads(c)).collect();
        let resigned = leader.term().expect("leads");
        leader.resign().await.expect("resign");
        tokio::time::sleep(Duration::from_millis(150)).await;
        let read_at_once: Vec<&str> = followers
            .iter()
            .zip(before)
            .filter(|((e, c), b)| {
                !in_line.iter().any(|id| id == e.identity()) && lease_reads(c) > *b
            })
            .map(|((e, _), _)| e.identity())
            .collect();
        // A timed read (at the lease's expiry it saw, where the store does
        // not push that) may fall into the window: 2 of 10 at most (all 10
        // read when every follower answers a push at once).
        assert!(
            read_at_once.len() <= 2,
            "[{}] followers not first in line ({in_line:?} are) read within 150 ms of a \
             release: {read_at_once:?}",
            self.name
        );
        // And the election goes on: a new term within a TTL. (Not always a
        // follower's: where thirteen electors share one MariaDB store, the
        // resigned leader sometimes takes it back once its hold-off ends.)
        let start = Instant::now();
        loop {
            let now = inner.read(&key).await.expect("read");
            if now
                .as_ref()
                .is_some_and(|r| r.is_held() && r.term > resigned)
            {
                break;
            }
            assert!(
                start.elapsed() < ttl,
                "[{}] no new term within a TTL of the release: {now:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        leader.shutdown().await.expect("shutdown");
        for (f, _) in followers {
            f.shutdown().await.expect("shutdown");
        }
    }
}
