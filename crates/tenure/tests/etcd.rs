//! etcd-specific behaviour: clear errors for wrong endpoints, whole-second
//! TTLs, and stepping down when the cluster loses quorum.

use std::time::{Duration, Instant};

use tenure::store::{connect, LeaseStoreExt, StoreOptions};
use tenure::{Elector, Error};
use tenure_testsupport::metrics::TestRecorder;
use tenure_testsupport::servers;
use tenure_testsupport::EtcdCluster;

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
    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
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
    let Some(mut cluster) = EtcdCluster::start_or_skip(3, servers::required()) else {
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

/// One store, 20 elections led by 20 electors of one process: every lease key
/// is on one etcd lease (plus one for the member registrations, whose TTL is
/// another length), and renewals cost about one keep-alive per renew period,
/// not 20.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_lease_and_one_keep_alive_for_many_elections() {
    use std::sync::Arc;
    use tenure::store::etcd::EtcdStore;
    use tenure::store::DynStore;

    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let counters = TestRecorder::new();
    let store: DynStore = Arc::new(
        counters
            .scope(EtcdStore::connect(&server.url(), &opts()))
            .await
            .expect("store"),
    );
    let ttl = Duration::from_secs(2);
    let electors: Vec<Elector> = (0..20)
        .map(|i| {
            Elector::builder(store.clone())
                .election(format!("shared-{i:02}"))
                .ttl(ttl)
                .build()
                .expect("elector")
        })
        .collect();
    for e in &electors {
        tokio::time::timeout(Duration::from_secs(10), e.acquired())
            .await
            .expect("leads")
            .expect("alive");
    }
    let (mut client, keys) = keys_under(&server, "tenure_/lease/").await;
    assert_eq!(keys.kvs().len(), 20);
    let on: std::collections::BTreeSet<i64> = keys.kvs().iter().map(|kv| kv.lease()).collect();
    assert_eq!(on.len(), 1, "all 20 lease keys on one etcd lease: {on:?}");
    let leases = client.leases().await.expect("leases").leases().len();
    // One for the tenures (2 s) and one for the member registrations (3 × ttl).
    assert!(leases <= 2, "{leases} etcd leases for 20 elections");

    // Count keep-alive rounds over 9 renew periods (ttl/3 each).
    let before = counters.statements("keepalive");
    let txns_before = counters.statements("renew");
    let beats_before = counters.statements("heartbeat");
    let reads_before = counters.statements("heartbeat_read");
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let rounds = counters.statements("keepalive") - before;
    let txns = counters.statements("renew") - txns_before;
    let beats = counters.statements("heartbeat") - beats_before;
    let beat_reads = counters.statements("heartbeat_read") - reads_before;
    let periods = (window.as_millis() / (ttl / 3).as_millis()) as u64;
    eprintln!(
        "keep-alive rounds in {window:?}: {rounds} for 20 elections ({periods} renew periods; unshared: >= {})",
        20 * periods
    );
    // About one per renew period, plus the member lease's (once per 2 s here).
    assert!(
        rounds <= 2 * periods + 6,
        "{rounds} keep-alive rounds in {periods} renew periods"
    );
    // The renewals' checks of their own keys share transactions too (one
    // per renew instant, each lease judged in a nested transaction of its own).
    eprintln!(
        "renewal transactions in {window:?}: {txns} for 20 elections; \
         heartbeat transactions {beats}, heartbeats with a read first {beat_reads}"
    );
    // Each leader heartbeats every 1.5 TTLs (about 40 in the window), on a
    // grid of TTL/2; a heartbeat is a keep-alive of the member lease its
    // registration names, so none rewrites its key (all 20 in one
    // transaction if that lease had to be granted again, under load).
    assert!(
        beats <= 1,
        "{beats} heartbeat transactions in {window:?} for 20 elections"
    );
    // Each registration was written by this process before the window: no
    // heartbeat needs to read its key first.
    assert_eq!(
        beat_reads, 0,
        "{beat_reads} heartbeats read their member key first in {window:?}"
    );
    assert!(
        txns <= periods + 6,
        "{txns} renewal transactions in {periods} renew periods for 20 elections"
    );
    for e in &electors {
        assert!(e.is_leader(), "still leading");
    }
    let leases = client.leases().await.expect("leases").leases().len();
    assert!(leases <= 2, "{leases} etcd leases after renewals");
    for e in electors {
        e.shutdown().await.expect("shutdown");
    }
}

/// A tenure abandoned without release (its elector stopped, another election
/// of the same store still renewing the shared lease) is swept, and another
/// process takes over within ttl + sweep interval + 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_tenure_on_the_shared_lease_is_taken_over() {
    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let a = connect(&server.url(), &opts()).await.expect("store a");
    let b = connect(&server.url(), &opts()).await.expect("store b");
    let ttl = Duration::from_secs(2);
    let build = |store: &tenure::store::DynStore, election: &str, id: &str| {
        Elector::builder(store.clone())
            .election(election)
            .identity(id)
            .ttl(ttl)
            .release_on_shutdown(false)
            .build()
            .expect("elector")
    };
    let keep = build(&a, "kept", "a-keep");
    let abandoned = build(&a, "abandoned", "a-gone");
    let term = tokio::time::timeout(Duration::from_secs(10), abandoned.acquired())
        .await
        .expect("leads")
        .expect("alive")
        .term();
    tokio::time::timeout(Duration::from_secs(10), keep.acquired())
        .await
        .expect("leads")
        .expect("alive");
    let successor = build(&b, "abandoned", "b");
    tokio::time::sleep(Duration::from_millis(300)).await;
    abandoned.shutdown().await.expect("stop without release");
    let stopped = Instant::now();
    let leadership = tokio::time::timeout(Duration::from_secs(10), successor.acquired())
        .await
        .expect("taken over")
        .expect("alive");
    let took = stopped.elapsed();
    eprintln!("abandoned tenure taken over after {took:?}");
    assert!(leadership.term() > term);
    // ttl + sweep interval (ttl/4) + 1 s.
    assert!(
        took <= ttl + ttl / 4 + Duration::from_secs(1),
        "took {took:?}"
    );
    assert!(keep.is_leader(), "the other election kept its leader");
    let rec = b
        .read(&tenure::store::ElectionKey::new("default", "abandoned"))
        .await
        .expect("read")
        .expect("record");
    assert_eq!(rec.start_reason, Some(tenure::store::StartReason::Expiry));
    assert_eq!(
        rec.previous_holder
            .as_deref()
            .map(|h| h.starts_with("a-gone#")),
        Some(true)
    );
    keep.shutdown().await.ok();
    successor.shutdown().await.ok();
}

/// With authentication on: a wrong password is `PermissionDenied` naming the
/// fix and never the password; the right one works. A bad key prefix is a
/// usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_and_bad_prefix_are_named() {
    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let plain = server.url();
    let endpoint = plain.trim_start_matches("etcd://").to_string();
    let mut admin = etcd_client::Client::connect([endpoint.clone()], None)
        .await
        .expect("admin client");
    admin.user_add("root", "rootpw", None).await.expect("root");
    admin
        .user_grant_role("root", "root")
        .await
        .expect("root role");
    admin.auth_enable().await.expect("auth on");

    let err = connect(&format!("etcd://root:wrong-pw@{endpoint}"), &opts())
        .await
        .unwrap_err();
    let s = err.to_string();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(s.contains("password") && !s.contains("wrong-pw"), "{s}");

    let store = connect(&format!("etcd://root:rootpw@{endpoint}"), &opts())
        .await
        .expect("the right password works");
    let elector = Elector::builder(store)
        .election("auth")
        .ttl(Duration::from_secs(2))
        .build()
        .expect("elector");
    tokio::time::timeout(Duration::from_secs(10), elector.acquired())
        .await
        .expect("leads in time")
        .expect("leads");
    elector.shutdown().await.expect("shutdown");

    let err = connect(&plain, &opts().with_table_prefix("bad prefix!"))
        .await
        .unwrap_err();
    assert!(
        err.is_usage() && err.to_string().contains("prefix"),
        "{err}"
    );
}

/// Fenced writes on etcd: the application's put commits in the transaction
/// that compares the lease key; a paused leader (its clock frozen: it still
/// believes it leads, and never keeps its lease alive) is refused once its
/// lease expired and a successor took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_txn_refuses_a_paused_leader() {
    use std::sync::Arc;
    use tenure::clock::ManualClock;
    use tenure::store::etcd::etcd_client::{GetOptions, TxnOp};
    use tenure::store::etcd::EtcdStore;

    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let a = connect(&server.url(), &opts()).await.expect("store a");
    let b = connect(&server.url(), &opts()).await.expect("store b");
    let paused = Elector::builder(a.clone())
        .election("fenced")
        .ttl(Duration::from_secs(1))
        .clock(Arc::new(ManualClock::new()))
        .build()
        .unwrap();
    let stale = tokio::time::timeout(Duration::from_secs(5), paused.acquired())
        .await
        .unwrap()
        .unwrap();
    let etcd_a = a.downcast_ref::<EtcdStore>().expect("an etcd store");
    etcd_a
        .fenced_txn(&stale.tenure(), [TxnOp::put("/app/latest", "first", None)])
        .await
        .expect("the leader writes");
    let successor = Elector::builder(b.clone())
        .election("fenced")
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let fresh = tokio::time::timeout(Duration::from_secs(10), successor.acquired())
        .await
        .unwrap()
        .unwrap();
    assert!(fresh.term() > stale.term());
    assert!(stale.is_valid(), "the paused leader still believes");
    let refused = etcd_a
        .fenced_txn(&stale.tenure(), [TxnOp::put("/app/latest", "stale", None)])
        .await;
    assert!(
        matches!(refused, Err(Error::NotLeader { .. })),
        "a stale leader's write is refused: {refused:?}"
    );
    let etcd_b = b.downcast_ref::<EtcdStore>().unwrap();
    let read = etcd_b
        .fenced_txn(
            &fresh.tenure(),
            [TxnOp::get("/app/latest", None::<GetOptions>)],
        )
        .await
        .unwrap();
    let value = match read.op_responses().first() {
        Some(tenure::store::etcd::etcd_client::TxnOpResponse::Get(g)) => {
            g.kvs().first().map(|kv| kv.value().to_vec())
        }
        other => panic!("a get response: {other:?}"),
    };
    assert_eq!(
        value.as_deref(),
        Some(&b"first"[..]),
        "only the fenced write landed"
    );
    successor.shutdown().await.unwrap();
    drop(paused);
}

/// A quiet watch stays up: nothing happens in the store for 12 s while a
/// follower's store subscribes. etcd (grpc-go) answers a client that pings
/// more often than its `--grpc-keepalive-min-time` (5 s by default) with
/// GOAWAY "too_many_pings" and closes the connection, the watch with it, so
/// the client's HTTP/2 keep-alive must ping no more often than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_not_dropped_by_the_server() {
    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let store = connect(&server.url(), &opts()).await.expect("store");
    let _changes = store.subscribe().expect("etcd pushes");
    let start = Instant::now();
    while !matches!(store.push_health(), tenure::store::PushHealth::Up { .. }) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the watch opens: {:?}",
            store.push_health()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        let health = store.push_health();
        assert!(
            matches!(health, tenure::store::PushHealth::Up { .. }),
            "the quiet watch went down after {:?}: {health:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A plain etcd client of `server`, and the keys under `prefix` as it reads them.
async fn keys_under(
    server: &EtcdCluster,
    prefix: &str,
) -> (etcd_client::Client, etcd_client::GetResponse) {
    let mut client =
        etcd_client::Client::connect([server.url().replace("etcd://", "http://")], None)
            .await
            .expect("etcd client");
    let keys = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .expect("keys under the prefix");
    (client, keys)
}

/// How many `method` calls etcd (member 0 of `server`) has answered, from
/// its `/metrics`.
async fn handled(server: &EtcdCluster, method: &str) -> u64 {
    let addr = server.metrics_addr(0).parse().expect("metrics address");
    let (_, body) = tenure_testsupport::http::get(addr, "/metrics").await;
    tenure_testsupport::etcd::sum_counter(&body, "grpc_server_handled_total", Some(method)) as u64
}

/// A member list of a fleet asks etcd which registrations' leases live in
/// one request, not one lease TTL query per process: every follower reads
/// the list after each change of hands, so a fleet of N processes made N²
/// queries per hand-over (200 replicas: ~80,000, and etcd's reads then
/// timed out). A registration whose lease is gone is still listed as not
/// live, and the others as live and fresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_member_list_asks_etcd_once_which_leases_live() {
    use tenure::store::{ElectionKey, Member};

    let Some(server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    const PROCESSES: usize = 12;
    let key = ElectionKey::new("fleet", "members");
    let ttl = Duration::from_secs(10);
    let mut stores = Vec::new();
    for i in 0..PROCESSES {
        // A store of its own per process: a process lease of its own.
        let store = connect(&server.url(), &opts()).await.expect("store");
        let member = Member {
            key: key.clone(),
            holder: format!("p{i:02}#1"),
            metadata: String::new(),
            priority: 0,
        };
        store.heartbeat(&member, ttl * 3).await.expect("heartbeat");
        stores.push(store);
    }
    let before = handled(&server, "LeaseTimeToLive").await;
    let members = stores[0].members(&key).await.expect("members");
    let asked = handled(&server, "LeaseTimeToLive").await - before;
    assert_eq!(members.len(), PROCESSES, "{members:?}");
    let now_us = members[0].heartbeat_at_us.max(members[0].joined_at_us);
    assert!(
        members.iter().all(|m| m.live && m.is_fresh(now_us, ttl)),
        "every registration live and fresh: {members:?}"
    );
    assert!(
        asked <= 2,
        "one member list of {PROCESSES} processes asked etcd for {asked} lease TTLs"
    );

    // The last process's lease is revoked: its registration is listed, not live.
    let (mut client, listed) = keys_under(&server, "tenure_/member/").await;
    let last = format!("p{:02}", PROCESSES - 1);
    let kv = listed
        .kvs()
        .iter()
        .find(|kv| String::from_utf8_lossy(kv.key()).contains(&last))
        .expect("the last registration's key");
    let value: serde_json::Value = serde_json::from_slice(kv.value()).expect("member value");
    let lease = value["lease"].as_i64().expect("the lease it names");
    client.lease_revoke(lease).await.expect("revoke");
    let members = stores[0].members(&key).await.expect("members");
    let gone: Vec<&str> = members
        .iter()
        .filter(|m| !m.live)
        .map(|m| m.identity.as_str())
        .collect();
    assert_eq!(gone, [last.as_str()], "{members:?}");
}

/// A crashed etcd member that restarts on its data remembers the terms it
/// committed: the next acquisition gets a higher term, never one again
/// (the chaos harness's restart faults rely on it too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_survive_a_crash_and_restart_on_the_data() {
    use tenure::store::{Acquire, Claim, ElectionKey, Tenure};
    let Some(mut server) = EtcdCluster::start_or_skip(1, servers::required()) else {
        return;
    };
    let key = ElectionKey::new("default", "restarted");
    let claim = |holder: &str| Claim {
        key: key.clone(),
        holder: holder.into(),
        metadata: String::new(),
        ttl: Duration::from_secs(2),
    };
    let store = connect(&server.url(), &opts()).await.expect("store");
    let Acquire::Acquired(first) = store.try_acquire(&claim("a")).await.expect("acquire") else {
        panic!("a free election was not acquired");
    };
    let released = Tenure {
        key: key.clone(),
        holder: "a".into(),
        term: first.term,
    };
    assert!(store.release(&released).await.expect("release"));
    drop(store);
    server.crash(0).expect("crash");
    server.restart(0).expect("restart on its data");
    let store = connect(&server.url(), &opts()).await.expect("store again");
    let Acquire::Acquired(second) = store.try_acquire(&claim("b")).await.expect("acquire") else {
        panic!("the released election was not acquired after the restart");
    };
    assert!(
        second.term > first.term,
        "term {} handed out after term {} before the restart",
        second.term,
        first.term
    );
}
