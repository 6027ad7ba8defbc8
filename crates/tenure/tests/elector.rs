//! Timing and safety logic of the elector, on a hand-driven clock: the store and
//! the elector share a `ManualClock`, so no test waits for real lease time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure::clock::{Clock, ManualClock};
use tenure::store::{Acquire, Claim, ElectionKey, Handover, LeaseStore, LeaseStoreExt};
use tenure::testing::Op;
use tenure::{Elector, State};

use tenure_testsupport::world::{eventually, follows, key, settle, World, TTL};

#[tokio::test]
async fn lost_fires_at_the_deadline_even_if_the_store_hangs_forever() {
    let w = World::new();
    let e = w.elector("a");
    let t0 = w.clock.now();
    let leadership = tokio::time::timeout(Duration::from_secs(5), e.acquired())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leadership.term(), 1);
    // Deadline: t0 + ttl * 0.99 - 50ms margin (no measurable round trip on this clock).
    let deadline = t0 + Duration::from_millis(9850);
    assert_eq!(leadership.deadline(), Some(deadline));

    w.store.set_hang(true);
    let lost = tokio::spawn({
        let l = leadership.clone();
        async move { l.lost().await }
    });
    w.advance(Duration::from_millis(9849), Duration::from_millis(500))
        .await;
    assert!(e.is_leader(), "still leader 1ms before the deadline");
    assert!(!lost.is_finished(), "lost() must not fire early");
    w.clock.advance(Duration::from_millis(1));
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() fired at the deadline")
        .unwrap();
    assert!(!e.is_leader());
    assert!(!leadership.is_valid());
    let mut states = e.leadership();
    tokio::time::timeout(
        Duration::from_secs(5),
        states.wait_for(|s| *s == State::NoLeader),
    )
    .await
    .expect("state leaves Leading at the deadline")
    .unwrap();
}

#[tokio::test]
async fn renews_every_third_of_the_ttl_and_keeps_the_term() {
    let w = World::new();
    let e = w.leader("a").await;
    let writes_before = w.writes();
    w.advance(Duration::from_secs(60), Duration::from_millis(250))
        .await;
    assert!(e.is_leader());
    assert_eq!(e.term(), Some(1), "renewals never change the term");
    let renewals = w.writes() - writes_before;
    // 60 s / (10 s / 3) = 18 renewals, give or take one at the edges.
    assert!((17..=19).contains(&renewals), "{renewals} renewals in 60s");
}

#[tokio::test]
async fn store_outage_retries_until_deadline_then_recampaigns_with_new_term() {
    let w = World::new();
    let e = w.leader("a").await;
    w.store.set_unavailable(true);
    let writes_before = w.writes();
    w.advance(Duration::from_millis(9800), Duration::from_millis(100))
        .await;
    assert!(
        e.is_leader(),
        "a store outage shorter than the deadline changes nothing"
    );
    w.advance(Duration::from_millis(100), Duration::from_millis(50))
        .await;
    assert!(!e.is_leader(), "stepped down at the deadline");
    assert_eq!(
        w.writes(),
        writes_before,
        "the failing store saw no successful writes"
    );
    w.store.set_unavailable(false);
    // The old lease (last renewed at t0) expires at t0 + 10 s by the store's clock.
    w.advance(Duration::from_secs(2), Duration::from_millis(100))
        .await;
    eventually("re-acquisition", || e.is_leader()).await;
    assert_eq!(
        e.term(),
        Some(2),
        "coming back is a new acquisition with a new term"
    );
}

#[tokio::test]
async fn follower_writes_nothing_while_the_lease_is_held_and_takes_over_at_expiry() {
    let w = World::new();
    let key = ElectionKey::new("default", "job");
    let claim = Claim {
        key: key.clone(),
        holder: "dead#1".into(),
        metadata: String::new(),
        ttl: TTL,
    };
    assert!(matches!(
        w.store.try_acquire(&claim).await.unwrap(),
        Acquire::Acquired(_)
    ));
    let acquired_at = w.clock.now();
    let e = w.elector("b");
    let mut states = e.leadership();
    tokio::time::timeout(
        Duration::from_secs(5),
        states.wait_for(|s| matches!(s, State::Following { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        *states.borrow(),
        State::Following {
            leader: "dead#1".into(),
            term: 1
        }
    );
    let writes = w.writes();
    w.advance(Duration::from_millis(9990), Duration::from_millis(30))
        .await;
    assert_eq!(
        w.writes(),
        writes,
        "followers only read while the lease is held"
    );
    assert!(!e.is_leader());
    w.advance(Duration::from_millis(40), Duration::from_millis(5))
        .await;
    eventually("takeover right after expiry", || e.is_leader()).await;
    assert!(w.clock.now() - acquired_at <= TTL + Duration::from_millis(30));
    assert_eq!(w.writes(), writes + 1, "one write per takeover");
    assert_eq!(e.term(), Some(2));
}

#[tokio::test]
async fn run_cancels_the_work_when_leadership_is_lost() {
    let w = World::new();
    let e = Arc::new(w.elector("a"));
    let dropped = Arc::new(AtomicBool::new(false));
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let runner = tokio::spawn({
        let e = e.clone();
        let dropped = dropped.clone();
        async move {
            e.run(|_l| {
                let guard = Guard(dropped.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await
                }
            })
            .await
        }
    });
    eventually("leadership", || e.is_leader()).await;
    settle().await;
    assert!(!dropped.load(Ordering::SeqCst));
    w.store.set_hang(true);
    w.advance(Duration::from_secs(10), Duration::from_millis(500))
        .await;
    eventually("work cancelled", || dropped.load(Ordering::SeqCst)).await;
    assert!(!runner.is_finished(), "run() waits for the next leadership");
    runner.abort();
}

#[tokio::test]
async fn resign_hands_over_and_shutdown_releases() {
    let w = World::new();
    let a = w.leader("a").await;
    let b = w.follower("b").await;
    a.resign().await.expect("resign");
    assert!(!a.is_leader());
    // b notices within one poll period (80 ms), long before any TTL.
    w.advance(Duration::from_millis(100), Duration::from_millis(5))
        .await;
    eventually("b leads after a's resignation", || b.is_leader()).await;
    assert_eq!(b.term(), Some(2));
    assert!(
        matches!(a.resign().await, Err(tenure::Error::NotLeader { .. })),
        "a follower cannot resign"
    );
    b.shutdown().await.unwrap();
    let rec = w.lease().await;
    assert_eq!(rec.holder, None, "shutdown released the lease");
    assert!(matches!(b.acquired().await, Err(tenure::Error::Shutdown)));
    a.shutdown().await.unwrap();
}

/// A leader's proclaim changes its tenure's metadata at once and keeps the
/// term; an ended tenure's proclaim writes nothing; the elector claims its
/// next tenure with the newest metadata.
#[tokio::test]
async fn proclaim_changes_the_metadata_now_and_for_later_tenures() {
    let w = World::new();
    let a = w.builder("a").metadata("http://a:1").build().unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), a.acquired())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.lease().await.metadata, "http://a:1");
    assert!(first.proclaim("http://a:2").await.unwrap());
    assert_eq!(w.lease().await.metadata, "http://a:2");
    assert_eq!(a.term(), Some(first.term()), "proclaim keeps the term");
    assert!(
        matches!(
            first.proclaim("a\nb").await,
            Err(tenure::Error::InvalidConfig { .. })
        ),
        "control characters are refused"
    );
    assert_eq!(
        w.lease().await.metadata,
        "http://a:2",
        "a refused proclaim writes nothing"
    );
    let b = w.builder("b").metadata("http://b:1").build().unwrap();
    follows(&b).await;
    a.resign().await.expect("resign");
    w.advance(Duration::from_millis(100), Duration::from_millis(5))
        .await;
    eventually("b leads after a's resignation", || b.is_leader()).await;
    assert!(
        !first.proclaim("http://a:3").await.unwrap(),
        "an ended tenure proclaims nothing"
    );
    assert_eq!(
        w.lease().await.metadata,
        "http://b:1",
        "the new tenure's metadata stays"
    );
    b.resign().await.expect("resign");
    // a stays out of the member list for a while after its own resignation.
    w.advance(TTL * 3, Duration::from_millis(50)).await;
    eventually("a leads again", || a.is_leader()).await;
    assert_eq!(
        w.lease().await.metadata,
        "http://a:3",
        "the next tenure carries the newest metadata"
    );
    b.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_client_clock_far_off_changes_nothing() {
    // The elector's clock is hours ahead of the store's; only its own differences
    // matter, so leadership and expiry are unchanged.
    let w = World::new();
    let skewed = ManualClock::new();
    skewed.advance(Duration::from_secs(5 * 3600));
    let e = Elector::builder(w.store.clone())
        .election("job")
        .ttl(TTL)
        .clock(Arc::new(skewed.clone()))
        .build()
        .unwrap();
    eventually("leadership", || e.is_leader()).await;
    let rec = w.lease().await;
    assert_eq!(rec.remaining, TTL, "the lease runs on the store's clock");
    e.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_is_prompt_even_while_a_renewal_hangs() {
    let w = World::new();
    let e = w.leader("a").await;
    w.store.set_hang(true);
    // Reach the renewal time: the renewal now hangs in the store.
    w.advance(Duration::from_millis(3400), Duration::from_millis(100))
        .await;
    assert!(e.is_leader());
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), e.shutdown())
        .await
        .expect("shutdown does not wait for the hung renewal or the deadline")
        .ok();
    assert!(!e.is_leader());
    // Bounded by the release (2 s) and leave (1 s) time-outs, not by the TTL.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "took {:?}",
        start.elapsed()
    );
}

/// Shutdown while an acquisition is in flight: the acquisition committed but
/// its answer is slow. The acquisition is let finish and what it took is
/// given back before `shutdown()` returns (dropped, nobody would release the
/// lease, and a successor would wait out the whole TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_an_in_flight_acquisition_releases_what_it_took() {
    let w = World::new();
    w.store.set_acquire_reply_delay(Duration::from_millis(300));
    let e = w.elector("a");
    let key = ElectionKey::new("default", "job");
    // The acquisition has landed in the store; its answer has not come back.
    let start = Instant::now();
    while w
        .store
        .read(&key)
        .await
        .unwrap()
        .and_then(|r| r.holder)
        .is_none()
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the acquisition lands"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!e.is_leader(), "the answer is still on its way");
    tokio::time::timeout(Duration::from_secs(5), e.shutdown())
        .await
        .expect("shutdown is bounded")
        .unwrap();
    let rec = w.store.read(&key).await.unwrap().unwrap();
    assert_eq!(
        rec.holder, None,
        "released: a successor can take over at once"
    );
    assert_eq!(rec.term, 1);
}

/// A leader (preempting after 1 s) whose preemption check, after its next
/// renewal, hangs on the member list.
async fn leader_with_a_hanging_preemption_check(w: &World) -> Elector {
    let e = w
        .builder("a")
        .preempt_after(Duration::from_secs(1))
        .build()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), e.acquired())
        .await
        .unwrap()
        .unwrap();
    w.store.set_hang_members(true);
    // One renewal: the check after it hangs on the member list.
    let members = w.store.calls(Op::Members);
    w.advance(TTL / 2, Duration::from_millis(500)).await;
    eventually("the preemption check to start", || {
        w.store.calls(Op::Members) > members
    })
    .await;
    assert!(e.is_leader());
    e
}

/// The preemption check after a renewal reads the members; when that read is
/// slow, a shutdown must not wait for it (before: up to ttl/4 of real time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_preemption_check_does_not_delay_shutdown() {
    let w = World::new();
    let e = leader_with_a_hanging_preemption_check(&w).await;
    returns_at_once(e.shutdown(), "shutdown", "the preemption check").await;
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(rec.holder, None, "released on shutdown");
}

/// Runs `op` (a shutdown or a resign) and checks that it returned at once,
/// not after `what`, a store call that hangs.
async fn returns_at_once(
    op: impl std::future::Future<Output = tenure::Result<()>>,
    name: &str,
    what: &str,
) {
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), op)
        .await
        .unwrap_or_else(|_| panic!("{name} returns"))
        .unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{name} waited {:?} for {what}",
        start.elapsed()
    );
}

/// Resigns `e` and checks that it returned at once (not after a store call
/// that hangs) and that the lease was handed over as a resignation.
async fn resign_is_prompt(w: &World, e: &Elector, what: &str) {
    returns_at_once(e.resign(), "resign", what).await;
    assert!(!e.is_leader());
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(
        rec.holder, None,
        "handed over: a successor can take over at once"
    );
    assert_eq!(rec.handover, Some(Handover::Anyone), "as a resignation");
}

/// The preemption check after a renewal reads the members; when that read
/// hangs, a resign must not wait for it (a check run inline would delay a
/// resign by up to the check's timeout, ttl/4 of real time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_preemption_check_does_not_delay_resign() {
    let w = World::new();
    let e = leader_with_a_hanging_preemption_check(&w).await;
    resign_is_prompt(&w, &e, "the preemption check").await;
}

/// The leader reaps lapsed members every 30 TTLs (after refreshing its own
/// registration); when that hangs, a resign right after it started must not
/// wait for it (a reap run inline would delay a resign by up to ttl/2 of
/// real time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reap_does_not_delay_resign() {
    let w = World::new();
    let e = w.leader("a").await;
    w.advance(Duration::from_secs(1), Duration::from_millis(500))
        .await;
    let registered = w.store.calls(Op::Heartbeat);
    w.store.set_hang_members(true);
    // Renew until the first reap (30 TTLs after the tenure began) has
    // started: the heartbeat that goes before it, or the reap itself.
    let started = Instant::now();
    while w.store.calls(Op::Reap) == 0 && w.store.calls(Op::Heartbeat) == registered {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no reap within {:?} of clock time",
            w.clock.now()
        );
        w.advance(Duration::from_millis(500), Duration::from_millis(500))
            .await;
    }
    assert!(e.is_leader(), "renewals went on while the reap hangs");
    resign_is_prompt(&w, &e, "the reap").await;
}

/// Work that returns (here: fails) gives the lease up: the leader resigns and
/// a follower takes over within a poll, not after the TTL.
#[tokio::test]
async fn run_resigns_when_the_work_returns_or_fails() {
    let w = World::new();
    let a = w.leader("a").await;
    let b = w.follower("b").await;
    let out: Result<(), &str> = a.run(|_l| async { Err("import failed") }).await.unwrap();
    assert_eq!(out, Err("import failed"));
    assert!(!a.is_leader(), "run() resigned when the work failed");
    w.advance(Duration::from_millis(100), Duration::from_millis(5))
        .await;
    eventually("b takes over after the resignation", || b.is_leader()).await;
    assert!(
        !a.is_leader(),
        "a stays a follower while b leads (it keeps campaigning)"
    );
}

/// A clone of the elector, held by a "signal handler", stops `run_until`:
/// the work is cancelled, the lease released and the elector shut down.
#[tokio::test]
async fn run_until_stops_at_the_signal_shuts_down_and_releases() {
    let w = World::new();
    let e = w.elector("a");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let cancelled = Arc::new(AtomicBool::new(false));
    struct Guard(Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let runner = tokio::spawn({
        let e = e.clone(); // a handle, no Arc needed
        let cancelled = cancelled.clone();
        async move {
            e.run_until(stop_rx, |_l| {
                let guard = Guard(cancelled.clone());
                async move {
                    let _guard = guard;
                    std::future::pending::<()>().await
                }
            })
            .await
        }
    });
    eventually("leadership", || e.is_leader()).await;
    let term = e.term().unwrap();
    stop_tx.send(()).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(5), runner)
        .await
        .expect("run_until returns at the signal")
        .unwrap()
        .unwrap();
    assert_eq!(out, None);
    assert!(cancelled.load(Ordering::SeqCst), "the work was cancelled");
    assert!(!e.is_leader());
    assert!(
        matches!(e.acquired().await, Err(tenure::Error::Shutdown)),
        "the elector is shut down"
    );
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(
        (rec.holder, rec.term),
        (None, term),
        "the lease was released"
    );
}

/// Hooks and the event stream say when this candidate starts and stops
/// leading, why it stopped, and who leads, without a tracing subscriber.
#[tokio::test]
async fn events_say_started_stopped_with_the_reason_and_new_leaders() {
    use std::sync::Mutex;
    use tenure::store::Tenure;
    use tenure::{Event, StopReason};

    let w = World::new();
    let hooked = Arc::new(Mutex::new(Vec::<Event>::new()));
    let a = w
        .builder("a")
        .on_event({
            let hooked = hooked.clone();
            move |e| hooked.lock().unwrap().push(e.clone())
        })
        .build()
        .unwrap();
    let mut a_events = a.events();
    let t1 = tokio::time::timeout(Duration::from_secs(5), a.acquired())
        .await
        .unwrap()
        .unwrap()
        .term();
    let b = w.elector("b");
    let mut b_events = b.events();
    fn next(rx: &mut tokio::sync::broadcast::Receiver<Event>) -> Event {
        rx.try_recv().unwrap_or_else(|e| panic!("no event: {e}"))
    }
    eventually("b sees a", || !b_events.is_empty()).await;
    assert_eq!(
        next(&mut b_events),
        Event::NewLeader {
            leader: a.holder_id().into(),
            term: t1
        }
    );
    // 1. Released: a resigns; b takes over and says so.
    a.resign().await.unwrap();
    w.advance(Duration::from_millis(100), Duration::from_millis(5))
        .await;
    eventually("b leads", || b.is_leader()).await;
    let t2 = b.term().unwrap();
    assert_eq!(
        next(&mut b_events),
        Event::NewLeader {
            leader: b.holder_id().into(),
            term: t2
        }
    );
    assert_eq!(next(&mut b_events), Event::StartedLeading { term: t2 });
    // 2. Lost: the store no longer has b's lease (here: released behind its
    // back); b learns it at its next renewal.
    assert!(w
        .store
        .release(&Tenure {
            key: key(),
            holder: b.holder_id().into(),
            term: t2
        })
        .await
        .unwrap());
    w.advance(Duration::from_secs(4), Duration::from_millis(50))
        .await;
    eventually("b stopped", || !b_events.is_empty()).await;
    assert_eq!(
        next(&mut b_events),
        Event::StoppedLeading {
            term: t2,
            reason: StopReason::Lost
        }
    );
    // 3. Expired: whoever leads now, its store hangs past the deadline.
    eventually("someone leads", || a.is_leader() || b.is_leader()).await;
    let (leader, events) = if a.is_leader() {
        (&a, &mut a_events)
    } else {
        (&b, &mut b_events)
    };
    let t3 = leader.term().unwrap();
    w.store.set_hang(true);
    w.advance(Duration::from_secs(11), Duration::from_millis(100))
        .await;
    eventually("expired", || !leader.is_leader()).await;
    let last = std::iter::from_fn(|| events.try_recv().ok()).last();
    assert_eq!(
        last,
        Some(Event::StoppedLeading {
            term: t3,
            reason: StopReason::Expired
        })
    );
    w.store.set_hang(false);
    // The hook saw what a's stream saw, from the start.
    let hooked = hooked.lock().unwrap().clone();
    assert_eq!(
        hooked[..3],
        [
            Event::NewLeader {
                leader: a.holder_id().into(),
                term: t1
            },
            Event::StartedLeading { term: t1 },
            Event::StoppedLeading {
                term: t1,
                reason: StopReason::Released
            },
        ]
    );
}

/// An idle leader sends its renewals and nothing else for 29 TTLs
/// (no member heartbeat: holding the lease proves it alive, and the store
/// counts the lease's holder as a live member), stays a live, fresh member
/// to every reader, and its rare reap (every 30 TTLs, after refreshing its
/// own registration) removes a dead member but not the leader. Before: a
/// heartbeat every 1.5 TTLs and a reap every 6 (22 calls in 28 TTLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_leader_sends_only_renewals_and_stays_a_live_member() {
    let w = World::new();
    let e = w.leader("a").await;
    // Its first registration (sent when the elector started).
    w.advance(Duration::from_secs(1), Duration::from_millis(500))
        .await;
    eventually("the leader registered", || {
        w.store.calls(Op::Heartbeat) + w.store.calls(Op::HeartbeatAndRead) >= 1
    })
    .await;
    let before = w.store.total_calls() - w.store.calls(Op::Renew);
    let renewals = w.store.calls(Op::Renew);
    // 28 TTLs: past the registration's three-TTL lapse many times over.
    w.advance(TTL * 28, Duration::from_millis(500)).await;
    assert!(e.is_leader());
    let extra = w.store.total_calls() - w.store.calls(Op::Renew) - before;
    assert_eq!(
        extra,
        0,
        "an idle leader sent {extra} requests besides renewals in 28 TTLs \
         (heartbeats {}, reaps {}, reads {})",
        w.store.calls(Op::Heartbeat),
        w.store.calls(Op::Reap),
        w.store.calls(Op::Read),
    );
    let renewed = w.store.calls(Op::Renew) - renewals;
    assert!(renewed >= 80, "{renewed} renewals in 28 TTLs");

    // Every member reader sees the leader live and fresh, heard from at its
    // last renewal (within a renew period).
    let store = w.dyn_store();
    let lease = store.read(&key()).await.unwrap().unwrap();
    let check = |members: &[tenure::store::MemberRecord], what: &str| {
        let m = members
            .iter()
            .find(|m| m.identity == "a")
            .unwrap_or_else(|| panic!("{what}: the leader is not listed: {members:?}"));
        assert!(m.live, "{what}: {m:?}");
        assert!(m.is_fresh(lease.read_at_us, TTL), "{what}: {m:?}");
        assert!(
            lease.read_at_us - m.heartbeat_at_us <= 5_000_000,
            "{what}: last heard from {} µs ago",
            lease.read_at_us - m.heartbeat_at_us
        );
    };
    check(&store.members(&key()).await.unwrap(), "members");
    check(&e.members().await.unwrap(), "Elector::members");
    let records = store.list(None).await.unwrap();
    let all = tenure::store::members_of(&*store, &records, None)
        .await
        .unwrap();
    check(&all[&key()], "members_of");
    check(&store.list_members(None).await.unwrap(), "list_members");

    // A dead member, lapsed by the reap: the leader's reap removes it, after
    // refreshing the leader's own registration, which stays.
    let dead = tenure::store::Member {
        key: key(),
        holder: "dead#1".into(),
        metadata: String::new(),
        priority: 0,
    };
    w.memory.heartbeat(&dead, TTL).await.unwrap();
    let heartbeats = w.store.calls(Op::Heartbeat);
    w.advance(TTL * 4, Duration::from_millis(500)).await;
    eventually("the leader reaped", || w.store.calls(Op::Reap) >= 1).await;
    let members = w.memory.members(&key()).await.unwrap();
    assert!(
        members.iter().all(|m| m.identity != "dead"),
        "the dead member was reaped: {members:?}"
    );
    // Listed at all: the reap did not delete its row (vouching only
    // amends a row that exists).
    assert!(
        members.iter().any(|m| m.identity == "a" && m.live),
        "the leader's registration was kept: {members:?}"
    );
    assert_eq!(
        w.store.calls(Op::Heartbeat) - heartbeats,
        1,
        "one heartbeat, before the reap"
    );
    assert_eq!(w.store.calls(Op::Reap), 1, "one reap in 33 TTLs");
    e.shutdown().await.unwrap();
}

/// A lone leader cut off from its store for longer than its lease steps down,
/// and when the store is back takes its own expired lease again. Dropping the
/// previous holder's registration after an expiry takeover must then not drop
/// its own: it sends no heartbeats while it leads, so it would be missing from
/// the member list until its next reap (30 TTLs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_takes_back_its_own_expired_lease_stays_a_member() {
    let w = World::new();
    let a = w.leader("a").await;
    w.advance(TTL * 2, Duration::from_millis(500)).await;
    w.store.set_unavailable(true);
    w.advance(TTL * 2, Duration::from_millis(500)).await;
    assert!(!a.is_leader(), "cut off for two TTLs");
    w.store.set_unavailable(false);
    w.advance(TTL * 2, Duration::from_millis(500)).await;
    eventually("a leads again", || a.is_leader()).await;
    w.advance(TTL * 4, Duration::from_millis(500)).await;
    let lease = w.memory.read(&key()).await.unwrap().unwrap();
    assert_eq!(
        lease
            .previous_holder
            .as_deref()
            .map(tenure::store::identity_of),
        Some("a"),
        "the lease was taken back after its expiry"
    );
    let members = w.memory.members(&key()).await.unwrap();
    assert!(
        members.iter().any(|m| m.identity == "a" && m.live),
        "the leader is not a live member: {members:?}"
    );
    a.shutdown().await.unwrap();
}

/// A leader that stops leading (here: its store fails past its deadline,
/// and a follower takes over) heartbeats again as a follower: its own
/// registration, not refreshed while it led, is fresh again by itself (the
/// new leader's lease does not vouch for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_leading_heartbeats_again() {
    let w = World::new();
    let a = w.leader("a").await;
    let b_store = Arc::new(tenure::testing::Instrumented::new(w.memory.clone()));
    let b = Elector::builder(b_store as tenure::store::DynStore)
        .election("job")
        .identity("b")
        .ttl(TTL)
        .clock(Arc::new(w.clock.clone()))
        .build()
        .unwrap();
    w.advance(TTL * 5, Duration::from_millis(500)).await;
    assert!(a.is_leader());
    // a's renewals fail from now on: it steps down at its deadline and b
    // takes the lease at its expiry.
    w.store.set_unavailable(true);
    w.advance(TTL * 2, Duration::from_millis(500)).await;
    assert!(!a.is_leader());
    eventually("b leads", || b.is_leader()).await;
    w.store.set_unavailable(false);
    w.advance(TTL, Duration::from_millis(500)).await;
    let lease = w.memory.read(&key()).await.unwrap().unwrap();
    assert_eq!(
        lease.holder.as_deref().map(tenure::store::identity_of),
        Some("b")
    );
    let members = w.memory.members(&key()).await.unwrap();
    let m = members.iter().find(|m| m.identity == "a").expect("listed");
    assert!(
        m.live && m.is_fresh(lease.read_at_us, TTL),
        "{m:?} at {}",
        lease.read_at_us
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A leader whose work holds its tenure, asked to resign: returns once the
/// work was asked to stop, with the resign still waiting.
async fn resigning_while_held(
    w: &World,
) -> (
    Elector,
    tenure::Leadership,
    tenure::HandoverHold,
    tokio::task::JoinHandle<tenure::Result<()>>,
) {
    let a = w.elector("a");
    let leadership = tokio::time::timeout(Duration::from_secs(5), a.acquired())
        .await
        .unwrap()
        .unwrap();
    let hold = leadership.hold();
    let resign = tokio::spawn({
        let a = a.clone();
        async move { a.resign().await }
    });
    tokio::time::timeout(Duration::from_secs(5), leadership.stepping_down())
        .await
        .expect("the work is asked to stop");
    (a, leadership, hold, resign)
}

/// A resign waits for the work that holds the tenure: the lease stays ours
/// in the store (nobody can start a second copy of the work) until the
/// hold is dropped, then it is handed over at once.
#[tokio::test]
async fn resign_hands_over_only_once_the_work_has_stopped() {
    let w = World::new();
    let (a, leadership, hold, resign) = resigning_while_held(&w).await;
    assert!(leadership.is_stepping_down());
    w.advance(Duration::from_secs(1), Duration::from_millis(50))
        .await;
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert!(
        rec.holder.as_deref() == Some(a.holder_id()) && rec.is_held(),
        "the lease is not handed over while the work runs: {rec:?}"
    );
    assert!(a.is_leader(), "still leader until the work stops");
    assert!(!resign.is_finished());
    drop(hold);
    tokio::time::timeout(Duration::from_secs(5), resign)
        .await
        .expect("resign returns once the work stopped")
        .unwrap()
        .expect("resign");
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(rec.holder, None, "handed over: {rec:?}");
    assert!(!a.is_leader());
    a.shutdown().await.unwrap();
}

/// Work that does not stop by the local deadline does not keep the lease:
/// the tenure ends there, and the lease is left to expire (not released
/// while the work may still run).
#[tokio::test]
async fn a_hold_never_keeps_leadership_past_the_deadline() {
    let w = World::new();
    let (a, leadership, hold, resign) = resigning_while_held(&w).await;
    // Past the local deadline (9.85 s), before the store's expiry (10 s).
    w.advance(Duration::from_millis(9900), Duration::from_millis(100))
        .await;
    assert!(!a.is_leader(), "the deadline ends the tenure");
    assert!(!leadership.is_valid());
    let out = tokio::time::timeout(Duration::from_secs(5), resign)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(out, Err(tenure::Error::Timeout { .. })), "{out:?}");
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(
        rec.holder.as_deref(),
        Some(a.holder_id()),
        "not released while the work holds it"
    );
    drop(hold);
    let start = Instant::now();
    loop {
        let rec = w.store.read(&key()).await.unwrap().unwrap();
        if rec.holder.is_none() || rec.term > 1 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the lease is freed once the work is gone: {rec:?}"
        );
        settle().await;
    }
    a.shutdown().await.unwrap();
}

/// `run` stops its work before the hand-over; with a step-down grace the
/// work sees `stepping_down()` and may finish what it does first.
#[tokio::test]
async fn run_lets_the_work_finish_within_its_grace_before_handing_over() {
    let w = World::new();
    let a = w
        .builder("a")
        .step_down_grace(Duration::from_secs(5))
        .build()
        .unwrap();
    let finished = Arc::new(AtomicBool::new(false));
    let runner = tokio::spawn({
        let (a, finished) = (a.clone(), finished.clone());
        async move {
            a.run(|l| {
                let finished = finished.clone();
                async move {
                    l.stepping_down().await;
                    // Wrap up: a little more work, on the runtime's timer.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    finished.store(true, Ordering::SeqCst);
                }
            })
            .await
        }
    });
    eventually("leadership", || a.is_leader()).await;
    a.resign().await.expect("resign");
    assert!(
        finished.load(Ordering::SeqCst),
        "the work finished before the resign returned"
    );
    let rec = w.store.read(&key()).await.unwrap().unwrap();
    assert_eq!(rec.holder, None);
    runner.abort();
    a.shutdown().await.unwrap();
}

/// A store that offers only the lease: no member list, no history, no
/// wake-ups.
#[derive(Debug)]
struct LeaseOnly(tenure::store::DynStore);

#[async_trait::async_trait]
impl LeaseStore for LeaseOnly {
    fn capabilities(&self) -> tenure::store::Capabilities {
        let mut c = tenure::store::Capabilities::default();
        c.min_ttl = self.0.capabilities().min_ttl;
        c
    }
    fn describe(&self) -> String {
        format!("lease only over {}", self.0.describe())
    }
    async fn try_acquire(&self, claim: &Claim) -> tenure::Result<Acquire> {
        self.0.try_acquire(claim).await
    }
    async fn renew(&self, tenure: &tenure::store::Tenure, ttl: Duration) -> tenure::Result<bool> {
        self.0.renew(tenure, ttl).await
    }
    async fn release(&self, tenure: &tenure::store::Tenure) -> tenure::Result<bool> {
        self.0.release(tenure).await
    }
    async fn read(&self, key: &ElectionKey) -> tenure::Result<Option<tenure::store::LeaseRecord>> {
        self.0.read(key).await
    }
    async fn list(
        &self,
        namespace: Option<&str>,
    ) -> tenure::Result<Vec<tenure::store::LeaseRecord>> {
        self.0.list(namespace).await
    }
    async fn hand_over(
        &self,
        tenure: &tenure::store::Tenure,
        to: &Handover,
        window: Duration,
        reason: tenure::store::HandoverReason,
    ) -> tenure::Result<bool> {
        self.0.hand_over(tenure, to, window, reason).await
    }
    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: tenure::store::HandoverReason,
    ) -> tenure::Result<Option<tenure::store::LeaseRecord>> {
        self.0.request_handover(key, to, window, reason).await
    }
}

/// An elector over a store without the optional parts still elects one
/// leader and hands over when it shuts down; the calls of the missing parts
/// do without them instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_only_the_lease_still_elects_and_hands_over() {
    let memory: tenure::store::DynStore = Arc::new(tenure::store::memory::MemoryStore::new());
    let store: tenure::store::DynStore = Arc::new(LeaseOnly(memory));
    assert!(store.membership().is_none() && store.history_log().is_none());
    assert!(store.wakeups().is_none() && store.subscribe().is_none());
    assert_eq!(store.push_health(), tenure::store::PushHealth::NotOffered);
    let build = |id: &str| {
        Elector::builder(store.clone())
            .election("lease-only")
            .identity(id)
            .ttl(Duration::from_secs(1))
            .poll_period(Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let a = build("a");
    let first = tokio::time::timeout(Duration::from_secs(5), a.acquired())
        .await
        .expect("a leads within 5 s")
        .unwrap();
    let b = build("b");
    let k = ElectionKey::new("default", "lease-only");
    assert!(store.members(&k).await.unwrap().is_empty());
    a.shutdown().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), b.acquired())
        .await
        .expect("b takes over within 5 s of a's shutdown")
        .unwrap();
    assert!(second.term() > first.term());
    assert!(store.history(&k, 10).await.unwrap().is_empty());
    b.shutdown().await.unwrap();
}

/// A release or hand-over that fails once (its connection closed by a
/// server restart a moment before) is sent again at once: both are
/// conditional on the tenure, so a second landing changes nothing, and the
/// successor takes over in milliseconds instead of at the lease's expiry.
#[tokio::test]
async fn a_failed_release_or_hand_over_is_tried_again() {
    let w = World::new();
    let a = w.leader("a").await;
    let b = w.follower("b").await;

    w.store.fail_next(Op::HandOver, 1);
    let before = w.store.calls(Op::HandOver);
    a.resign().await.expect("resign, on the second try");
    assert_eq!(w.store.calls(Op::HandOver), before + 2);
    // Well within the TTL: b was handed the lease, not left to wait.
    w.advance(Duration::from_millis(100), Duration::from_millis(5))
        .await;
    eventually("b leads after a's resignation", || b.is_leader()).await;

    w.store.fail_next(Op::Release, 1);
    let before = w.store.calls(Op::Release);
    b.shutdown().await.expect("shutdown, on the second try");
    assert_eq!(w.store.calls(Op::Release), before + 2);
    let rec = w.lease().await;
    assert_eq!(rec.holder, None, "the second release freed the lease");
    a.shutdown().await.unwrap();
}
