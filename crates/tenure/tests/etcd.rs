//! etcd-specific behaviour: clear errors for wrong endpoints, whole-second
//! TTLs, and stepping down when the cluster loses quorum.

use std::time::{Duration, Instant};

use tenure::store::{connect, StoreOptions};
use tenure::testing::etcd_server::EtcdCluster;
use tenure::{Elector, Error};

fn opts() -> StoreOptions {
    StoreOptions::default().with_connect_timeout(Duration::from_secs(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_an_etcd_server_is_named_within_the_connect_timeout() {
    // A TCP server that accepts and never speaks gRPC.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let start = Instant::now();
    let err = connect(&format!("etcd://{addr}"), &opts())
        .await
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    assert!(matches!(err, Error::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("is this an etcd server?"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_is_unavailable_and_secrets_are_redacted() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let err = connect(&format!("etcd://root:SECRET@127.0.0.1:{port}"), &opts())
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert!(!err.to_string().contains("SECRET"), "{err}");
    assert!(err.to_string().contains("root:***@"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_second_ttl_is_a_usage_error() {
    let Some(server) = EtcdCluster::start_or_skip(1).await else {
        return;
    };
    let store = connect(&server.url(), &opts()).await.expect("store");
    let err = Elector::builder(store)
        .election("x")
        .ttl(Duration::from_millis(500))
        .build()
        .unwrap_err();
    assert!(err.is_usage(), "{err:?}");
    assert!(err.to_string().contains("whole seconds"), "{err}");
}

/// Kill 2 of 3 members: the leader cannot renew and must step down by its
/// deadline (ttl), without panicking; it keeps campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_steps_down_when_the_cluster_loses_quorum() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3).await else {
        return;
    };
    let store = connect(&cluster.url(), &opts()).await.expect("store");
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
    cluster.kill(1);
    cluster.kill(2);
    let killed = Instant::now();
    tokio::time::timeout(ttl + Duration::from_millis(200), leadership.lost())
        .await
        .expect("lost() fires by the deadline");
    assert!(!elector.is_leader());
    assert!(killed.elapsed() <= ttl + Duration::from_millis(200));
    // Still alive and campaigning (not panicked): shutdown answers.
    tokio::time::timeout(Duration::from_secs(5), elector.shutdown())
        .await
        .expect("shutdown answers")
        .ok();
}
