//! ZooKeeper-specific behaviour: the session timeout bounds the TTL, leaders
//! step down when the ensemble loses quorum, and terms survive a restart.

use std::time::{Duration, Instant};

use tenure::store::{connect, Acquire, Claim, ElectionKey, LeaseStore, StoreOptions, Tenure};
use tenure::Elector;
use tenure_testsupport::servers;
use tenure_testsupport::ZkEnsemble;

fn opts() -> StoreOptions {
    StoreOptions::default().with_connect_timeout(Duration::from_secs(3))
}

fn claim(key: &ElectionKey, holder: &str, ttl: Duration) -> Claim {
    Claim {
        key: key.clone(),
        holder: holder.into(),
        metadata: String::new(),
        ttl,
    }
}

/// The private servers grant sessions of at most 1200 ticks (120 s), and a
/// lease needs a session of twice its TTL: a longer TTL would let the
/// ensemble expire the leader's session before its deadline, so it is
/// refused as a usage error that names the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_longer_than_the_granted_session_timeout_is_a_usage_error() {
    let Some(zk) = ZkEnsemble::start_or_skip(1, servers::required()) else {
        return;
    };
    let store = connect(&zk.url(), &opts()).await.expect("store");
    let key = ElectionKey::new("default", "long-ttl");
    let err = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(120)))
        .await
        .unwrap_err();
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("maxSessionTimeout"), "{err}");
    assert!(
        store.read(&key).await.expect("read").is_none(),
        "nothing written"
    );
    let err = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(61)))
        .await
        .unwrap_err();
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("at most 60s"), "{err}");
    // At the bound it works.
    let got = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(60)))
        .await
        .expect("acquire");
    assert!(matches!(got, Acquire::Acquired(_)), "{got:?}");
}

/// A lease session of twice the TTL outlives the holder's deadline only
/// while `tickTime` is at most 2/3 of the TTL: a TTL too short for the
/// ensemble's tick is refused as a usage error naming both fixes, and
/// nothing is written; an elector with that TTL stops campaigning and
/// answers the refusal (no retry mends it); a TTL the tick allows works.
/// The servers tick every 1.5 s (so grant sessions of 3 s or more): 2 s is
/// too short, 3 s is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_too_short_for_the_ensembles_tick_is_a_usage_error() {
    if tenure_testsupport::zookeeper::classpath().is_none() && !servers::required() {
        eprintln!("skipping: no ZooKeeper installed (apt-get install zookeeper)");
        return;
    }
    let zk = ZkEnsemble::start_with_tick(1, 1500).expect("private ZooKeeper with a 1.5 s tick");
    let store = connect(&zk.url(), &opts()).await.expect("store");
    let key = ElectionKey::new("default", "long-tick");
    let err = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(err.is_usage(), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("tickTime"), "{text}");
    assert!(text.contains("at least 2.25s"), "{text}");
    assert!(
        store.read(&key).await.expect("read").is_none(),
        "nothing written"
    );
    let elector = Elector::builder(store.clone())
        .election("long-tick")
        .ttl(Duration::from_secs(2))
        .build()
        .expect("elector");
    let answer = tokio::time::timeout(Duration::from_secs(20), elector.acquired())
        .await
        .expect("the elector answers the refusal, not retries");
    let err = answer.expect_err("refused");
    assert!(
        err.is_usage() && err.to_string().contains("tickTime"),
        "{err:?}"
    );
    let got = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(3)))
        .await
        .expect("acquire");
    assert!(matches!(got, Acquire::Acquired(_)), "{got:?}");
}

/// Kill 2 of 3 servers: the leader cannot renew and must step down by its
/// deadline (ttl), without panicking; it keeps campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_steps_down_when_the_ensemble_loses_quorum() {
    let Some(mut zk) = ZkEnsemble::start_or_skip(3, servers::required()) else {
        return;
    };
    let store = connect(&zk.url(), &opts()).await.expect("store");
    let ttl = Duration::from_secs(2);
    let elector = Elector::builder(store)
        .election("quorum")
        .ttl(ttl)
        .build()
        .expect("elector");
    let leadership = tokio::time::timeout(Duration::from_secs(10), elector.acquired())
        .await
        .expect("leads")
        .expect("alive");
    zk.kill(1);
    zk.kill(2);
    let killed = Instant::now();
    tokio::time::timeout(ttl + Duration::from_millis(200), leadership.lost())
        .await
        .expect("lost() fires by the deadline");
    assert!(!elector.is_leader());
    assert!(killed.elapsed() <= ttl + Duration::from_millis(200));
    tokio::time::timeout(Duration::from_secs(5), elector.shutdown())
        .await
        .expect("shutdown answers")
        .ok();
}

/// Terms live in the ensemble's log: after SIGKILL and restart of the
/// (only) server, the next acquisition's term is the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_survive_a_server_restart() {
    let Some(mut zk) = ZkEnsemble::start_or_skip(1, servers::required()) else {
        return;
    };
    let key = ElectionKey::new("default", "restart");
    let ttl = Duration::from_secs(2);
    let first = {
        let store = connect(&zk.url(), &opts()).await.expect("store");
        let mut last = 0;
        for i in 0..3 {
            let Acquire::Acquired(rec) = store
                .try_acquire(&claim(&key, &format!("a#{i}"), ttl))
                .await
                .expect("acquire")
            else {
                panic!("vacant election not acquired");
            };
            assert!(store
                .release(&Tenure {
                    key: key.clone(),
                    holder: rec.holder.clone().expect("holder"),
                    term: rec.term,
                })
                .await
                .expect("release"));
            last = rec.term;
        }
        last
    };
    zk.kill(0);
    zk.restart(0).expect("restart");
    let store = connect(&zk.url(), &opts())
        .await
        .expect("store after restart");
    let Acquire::Acquired(rec) = store
        .try_acquire(&claim(&key, "b#1", ttl))
        .await
        .expect("acquire")
    else {
        panic!("vacant election not acquired");
    };
    assert_eq!(rec.term, first + 1, "the term continues after a restart");
}

/// `zks://` speaks TLS to the servers' `secureClientPort` (a private
/// server with the test CA, demanding a client certificate): leases work
/// through it; a CA that did not sign the server's certificate, a missing
/// client certificate, or a plain client port are refused as TLS errors
/// that name the fix; `zk://` with TLS files says to use `zks://`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zks_urls_speak_tls_and_refuse_what_does_not() {
    use tenure_testsupport::tls::TestCa;
    if tenure_testsupport::zookeeper::classpath().is_none() {
        assert!(
            !servers::required(),
            "ZooKeeper is required (CI=true or TENURE_REQUIRE_SERVERS=1) but not installed"
        );
        eprintln!("SKIPPED: no ZooKeeper (apt-get install zookeeper)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::generate(&dir.path().join("ca"), "tenure").expect("test CA");
    let other = TestCa::generate(&dir.path().join("other"), "tenure").expect("other CA");
    let zk = ZkEnsemble::start_tls(1, &ca, true).expect("private ZooKeeper with TLS");
    let files = |ca: &TestCa, with_cert: bool| {
        let mut q = format!("?cacert={}", ca.ca_cert.display());
        if with_cert {
            q += &format!(
                "&cert={}&key={}",
                ca.client_cert.display(),
                ca.client_key.display()
            );
        }
        q
    };
    let opts = || StoreOptions::default().with_connect_timeout(Duration::from_secs(5));

    // Leases through TLS. The first handshake waits for the server's TLS
    // port, which opens after the plain one that `start_tls` waits for,
    // and for a cold JVM's first handshake: on a loaded machine (tests in
    // parallel, two cores) that took longer than the refusals' 5 s.
    let url = format!("{}{}", zk.tls_url(), files(&ca, true));
    let first = StoreOptions::default().with_connect_timeout(Duration::from_secs(30));
    let store = connect(&url, &first).await.expect("zks:// connects");
    let key = ElectionKey::new("default", "over-tls");
    let Acquire::Acquired(rec) = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(5)))
        .await
        .expect("acquire over TLS")
    else {
        panic!("a fresh election is free");
    };
    let tenure = Tenure {
        key: key.clone(),
        holder: "a#1".into(),
        term: rec.term,
    };
    assert!(store
        .renew(&tenure, Duration::from_secs(5))
        .await
        .expect("renew"));
    assert!(store.release(&tenure).await.expect("release"));

    // What does not fit is refused, naming TLS and what to check.
    for (why, url) in [
        (
            "a CA that did not sign the server",
            format!("{}{}", zk.tls_url(), files(&other, true)),
        ),
        (
            "no client certificate",
            format!("{}{}", zk.tls_url(), files(&ca, false)),
        ),
        (
            "the plain client port",
            format!(
                "{}{}",
                zk.url().replacen("zk://", "zks://", 1),
                files(&ca, true)
            ),
        ),
    ] {
        let err = match connect(&url, &opts()).await {
            Ok(store) => store
                .try_acquire(&claim(&key, "b#1", Duration::from_secs(5)))
                .await
                .expect_err(why),
            Err(e) => e,
        };
        assert!(matches!(err, tenure::Error::Tls { .. }), "{why}: {err:?}");
        assert!(err.to_string().contains("cacert="), "{why}: {err}");
    }
    let err = connect(&format!("{}{}", zk.url(), files(&ca, true)), &opts())
        .await
        .expect_err("zk:// with TLS files");
    assert!(
        err.is_usage() && err.to_string().contains("zks://"),
        "{err}"
    );
}

/// ZooKeeper stamps each write's `mtime` with its leader's wall clock.
/// After the ZooKeeper leader changes to a server whose clock is thirty
/// seconds ahead (libfaketime), no other process takes a lease before its
/// holder's deadline (with a 10 s TTL, it did 1.4 s before when expiry
/// compared the two leaders' stamps), and a holder that never renews is
/// still succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_zookeeper_leader_with_a_clock_ahead_does_not_expire_a_live_lease() {
    if tenure_testsupport::zookeeper::classpath().is_none() && !servers::required() {
        println!("SKIPPED: no ZooKeeper (apt-get install zookeeper)");
        return;
    }
    // Servers 0 and 1 thirty seconds ahead; server 2 (myid 3, which wins
    // elections among equals) on the host's clock.
    let mut zk = ZkEnsemble::start_with_clocks(3, &[Some("+30s"), Some("+30s"), None])
        .expect("ensemble with shifted clocks (needs libfaketime)");
    for _ in 0..3 {
        match zk.leader() {
            Some(2) => break,
            Some(i) => {
                zk.kill(i);
                zk.restart(i).expect("restart");
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    assert_eq!(zk.leader(), Some(2), "the host-clock server leads");
    let ttl = Duration::from_secs(10);
    let holder = connect(&zk.url(), &opts()).await.expect("store");
    let other = connect(&zk.url(), &opts()).await.expect("store");
    let key = ElectionKey::new("default", "skew");
    // The holder's deadline as an elector counts it, less a little more:
    // from before its acquisition, the TTL less the 1% drift bound.
    let t0 = Instant::now();
    let Acquire::Acquired(held) = holder
        .try_acquire(&claim(&key, "a#1", ttl))
        .await
        .expect("acquire")
    else {
        panic!("vacant election not acquired");
    };
    let deadline = t0 + ttl.mul_f64(0.98);
    // The host-clock leader goes; a server thirty seconds ahead takes over.
    // The holder has not renewed yet (it may wait a third of a TTL).
    zk.kill(2);
    // A holder that never renews again is still succeeded: judged by this
    // process's clock once the ZooKeeper leader changed.
    let give_up = deadline + 2 * ttl;
    let taken = loop {
        let tried = other.try_acquire(&claim(&key, "b#1", ttl)).await;
        if let Ok(Acquire::Acquired(rec)) = tried {
            break (Instant::now(), rec.term);
        }
        assert!(
            Instant::now() < give_up,
            "no takeover within two TTLs of the holder's deadline; the last try: {tried:?}; \
             the ensemble's leader: {:?}",
            zk.leader()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        taken.0 >= deadline,
        "term {} taken {:?} before the deadline of term {}",
        taken.1,
        deadline - taken.0,
        held.term
    );
    assert_eq!(taken.1, held.term + 1, "the next term");
}

/// A ZooKeeper follower server touches the sessions of its clients at the
/// ZooKeeper leader only when it relays them, once per half tick; a
/// renewal it forwarded and answered extends the holder's deadline even
/// if the server dies before relaying that touch. The session (and the
/// ephemeral `leader` znode) must still outlive the holder's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_dying_after_a_renewal_does_not_end_the_session_early() {
    let Some(mut zk) = ZkEnsemble::start_or_skip(3, servers::required()) else {
        return;
    };
    let leader = zk.leader().expect("the ensemble has a leader");
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    // The holder reaches the follower only: once it dies, the holder's
    // session cannot move to another server (a holder partitioned with it).
    let holder = connect(&format!("zk://{}", zk.server_addr(follower)), &opts())
        .await
        .expect("holder store");
    let observer = connect(&format!("zk://{}", zk.server_addr(leader)), &opts())
        .await
        .expect("observer store");
    let ttl = Duration::from_secs(3);
    let key = ElectionKey::new("default", "relay");
    let Acquire::Acquired(rec) = holder
        .try_acquire(&claim(&key, "a#1", ttl))
        .await
        .expect("acquire")
    else {
        panic!("a free election was not acquired");
    };
    let tenure = Tenure {
        key: key.clone(),
        holder: "a#1".into(),
        term: rec.term,
    };
    tokio::time::sleep(Duration::from_millis(900)).await;
    let t0 = Instant::now();
    assert!(holder.renew(&tenure, ttl).await.expect("renew"), "renewed");
    zk.kill(follower);
    // The holder's deadline counts from t0 (its drift allowance and margin
    // only make it earlier); nobody may acquire before ttl * 0.99 - 100 ms.
    let earliest = ttl.mul_f64(0.99) - Duration::from_millis(100);
    let taken = loop {
        let got = observer
            .try_acquire(&claim(&key, "b#1", ttl))
            .await
            .expect("observer acquire");
        if matches!(got, Acquire::Acquired(_)) {
            break t0.elapsed();
        }
        assert!(t0.elapsed() < ttl * 4, "never taken over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("taken over {taken:?} after the renewal (holder's deadline ≥ {earliest:?})");
    assert!(
        taken >= earliest,
        "taken over {taken:?} after a renewal the holder counts on until {earliest:?}"
    );
}
