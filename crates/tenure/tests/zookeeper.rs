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

/// The private servers grant sessions of at most 600 ticks (60 s): a longer
/// TTL would let the ensemble expire the leader's session before its
/// deadline, so it is refused as a usage error that names the fix.
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
    // At the bound it works.
    let got = store
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(60)))
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
