//! Redis-specific behaviour the shared conformance suite cannot cover: the term
//! surviving a server restart, clear errors for bad input, and one process's
//! renewals, heartbeats and reaps sharing script calls. Tests that
//! restart or reconfigure a server start a private `redis-server` (temp dir,
//! free port); the machine's shared Redis is only read from or written to.

use std::time::{Duration, Instant};

use tenure::store::{
    connect, Acquire, Claim, DynStore, ElectionKey, LeaseStoreExt, StoreOptions, Tenure,
};
use tenure::Error;
use tenure_testsupport::metrics::TestRecorder;
use tenure_testsupport::servers;
use tenure_testsupport::servers::{Kind, Server, ServerOptions};

/// A private `redis-server` (see `tenure-testsupport`), or `None` after
/// printing why when `redis-server` is missing and servers are not required.
fn private_redis(options: ServerOptions) -> Option<Server> {
    Server::start_or_skip(Kind::Redis, options, servers::required())
}

fn persistent() -> ServerOptions {
    ServerOptions::default().with_args(&["--appendonly", "yes", "--appendfsync", "always"])
}

fn free_port() -> u16 {
    tenure_testsupport::servers::free_port().expect("a free port")
}

fn claim(key: &ElectionKey, holder: &str, ttl: Duration) -> Claim {
    Claim {
        key: key.clone(),
        holder: holder.into(),
        metadata: String::new(),
        ttl,
    }
}

async fn acquired(store: &DynStore, c: &Claim) -> u64 {
    match store.try_acquire(c).await.expect("acquire") {
        Acquire::Acquired(r) => r.term,
        Acquire::Held(r) => panic!("expected to acquire, held: {r:?}"),
    }
}

#[tokio::test]
async fn term_survives_lease_expiry_and_a_server_restart() {
    let Some(mut redis) = private_redis(persistent()) else {
        return;
    };
    let store = connect(&format!("{}/0", redis.url()), &StoreOptions::default())
        .await
        .expect("connect");
    let key = ElectionKey::new("default", "restart");
    let t1 = acquired(&store, &claim(&key, "a#1", Duration::from_secs(10))).await;
    assert!(store
        .release(&Tenure {
            key: key.clone(),
            holder: "a#1".into(),
            term: t1
        })
        .await
        .unwrap());
    let t2 = acquired(&store, &claim(&key, "b#1", Duration::from_millis(200))).await;
    assert!(t2 > t1);
    // Let the lease expire by the server's clock.
    let start = Instant::now();
    while store.read(&key).await.unwrap().is_some_and(|r| r.is_held()) {
        assert!(start.elapsed() < Duration::from_secs(5), "lease expires");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // kill -9 and restart from the append-only file.
    redis.crash();
    redis.start().expect("restart redis-server");
    // The same store object reconnects by itself.
    let start = Instant::now();
    let rec = loop {
        match store.read(&key).await {
            Ok(r) => break r.expect("the lease survived the restart"),
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(start.elapsed() < Duration::from_secs(10), "reconnects: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(rec.term, t2, "the term survived the restart");
    let t3 = acquired(&store, &claim(&key, "c#1", Duration::from_secs(10))).await;
    assert_eq!(
        t3,
        t2 + 1,
        "the next term follows the last, never reuses it"
    );
    let history = store.history(&key, 10).await.unwrap();
    let reasons: Vec<(u64, &str, &str)> = history
        .iter()
        .map(|h| {
            (
                h.term,
                h.start_reason.as_str(),
                h.end_reason.map(|r| r.as_str()).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        vec![
            (t3, "expiry", ""),
            (t2, "release", "expired"),
            (t1, "first", "released")
        ]
    );
}

async fn error_of(url: &str, options: &StoreOptions) -> Error {
    match tokio::time::timeout(Duration::from_secs(10), connect(url, options)).await {
        Err(_) => panic!("connect to {url} hung"),
        Ok(Ok(s)) => panic!("connect to {url} succeeded: {s:?}"),
        Ok(Err(e)) => e,
    }
}

#[tokio::test]
async fn bad_input_gives_clear_errors() {
    let Some(redis) =
        private_redis(ServerOptions::default().with_args(&["--requirepass", "s3cret-pw"]))
    else {
        return;
    };
    let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    let base = format!("127.0.0.1:{}", redis.port);

    let e = error_of(&format!("redis://:wrong-pw@{base}/0"), &options).await;
    let s = e.to_string();
    assert!(matches!(e, Error::PermissionDenied { .. }), "{s}");
    assert!(s.contains("password") && !s.contains("wrong-pw"), "{s}");

    let e = error_of(&format!("redis://{base}/0"), &options).await;
    assert!(
        matches!(e, Error::PermissionDenied { .. }),
        "no password: {e}"
    );

    let good = connect(&format!("redis://:s3cret-pw@{base}/0"), &options)
        .await
        .expect("the right password works");
    assert!(!good.describe().contains("s3cret"), "{}", good.describe());

    let e = error_of(&format!("redis://:s3cret-pw@{base}/99"), &options).await;
    let s = e.to_string();
    assert!(e.is_usage() && s.contains("database number"), "{s}");
    assert!(!s.contains("s3cret"), "{s}");

    let e = error_of(&format!("redis://{base}/zero"), &options).await;
    assert!(e.is_usage() && e.to_string().contains("numbered"), "{e}");

    let e = error_of(
        &format!("redis://:s3cret-pw@{base}/0"),
        &options.clone().with_table_prefix("bad prefix!"),
    )
    .await;
    assert!(e.is_usage() && e.to_string().contains("prefix"), "{e}");

    let e = error_of(&format!("redis://{base}/0?cacert=/tmp/ca.pem"), &options).await;
    assert!(e.is_usage() && e.to_string().contains("rediss://"), "{e}");

    let e = error_of(
        &format!("rediss://{base}/0?cacert=/nonexistent/ca.pem"),
        &options,
    )
    .await;
    assert!(
        e.is_usage() && e.to_string().contains("/nonexistent/ca.pem"),
        "{e}"
    );

    // Nothing listens: unavailable, retryable.
    let e = error_of(&format!("redis://127.0.0.1:{}/0", free_port()), &options).await;
    assert!(e.is_retryable(), "{e}");
}

/// A server that is not Redis: a MariaDB greets with a handshake packet, a
/// PostgreSQL says nothing until spoken to, a bare listener never answers.
#[tokio::test]
async fn a_server_that_is_not_redis_is_named_as_such() {
    let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let silent_port = silent.local_addr().unwrap().port();
    let mut targets = vec![(format!("redis://127.0.0.1:{silent_port}/0"), "silent")];
    for (url, name) in [
        (servers::mysql_url(), "mariadb"),
        (servers::postgres_url(), "postgres"),
    ] {
        // Only where that server runs here; its own tests insist on it in CI.
        if servers::connect_or_skip(&url, &StoreOptions::default())
            .await
            .is_some()
        {
            let u = url::Url::parse(&url).unwrap();
            targets.push((
                format!("redis://{}:{}/0", u.host_str().unwrap(), u.port().unwrap()),
                name,
            ));
        }
    }
    for (url, name) in targets {
        let start = Instant::now();
        let e = error_of(&url, &options).await;
        let s = e.to_string();
        assert!(
            s.contains("is this a Redis server?") || s.contains("Redis port?"),
            "{name}: the error says what was expected: {s}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{name}: fails within the connect timeout, took {:?}",
            start.elapsed()
        );
    }
    drop(silent);
}

async fn tls_error_of(url: &str) -> String {
    let e = error_of(
        url,
        &StoreOptions::default().with_connect_timeout(Duration::from_secs(3)),
    )
    .await;
    assert!(matches!(e, Error::Tls { .. }), "a TLS error for {url}: {e}");
    assert!(e.is_usage(), "fix the setup, not retry: {e}");
    e.to_string()
}

/// `rediss://` with the right CA works end to end (the whole conformance
/// suite); a wrong CA, a missing CA and plain `redis://` to a TLS port are
/// refused with errors that name the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_verifies_the_server_certificate() {
    let Some(redis) = private_redis(ServerOptions::tls()) else {
        return;
    };
    let ca = redis.tls().expect("test CA");
    let url = format!(
        "rediss://127.0.0.1:{}/0?cacert={}",
        redis.port,
        ca.ca_cert.display()
    );
    let by_name = format!(
        "rediss://localhost:{}/0?cacert={}",
        redis.port,
        ca.ca_cert.display()
    );
    connect(&by_name, &StoreOptions::default())
        .await
        .expect("the certificate names localhost too");
    let with_client_cert = format!(
        "{url}&cert={}&key={}",
        ca.client_cert.display(),
        ca.client_key.display()
    );
    connect(&with_client_cert, &StoreOptions::default())
        .await
        .expect("a client certificate is accepted");

    let other = tempfile::tempdir().unwrap();
    let wrong = tenure_testsupport::tls::TestCa::generate(other.path(), "x").unwrap();
    let s = tls_error_of(&format!(
        "rediss://127.0.0.1:{}/0?cacert={}",
        redis.port,
        wrong.ca_cert.display()
    ))
    .await;
    assert!(s.contains("not signed by the CA in cacert="), "{s}");
    let s = tls_error_of(&format!("rediss://127.0.0.1:{}/0", redis.port)).await;
    assert!(s.contains("pass cacert="), "{s}");
    let insecure = format!("rediss://127.0.0.1:{}/0#insecure", redis.port);
    connect(&insecure, &StoreOptions::default())
        .await
        .expect("#insecure skips verification");
    let e = error_of(
        &format!("redis://127.0.0.1:{}/0", redis.port),
        &StoreOptions::default().with_connect_timeout(Duration::from_secs(2)),
    )
    .await;
    assert!(
        e.to_string().contains("rediss://"),
        "plain to a TLS port: {e}"
    );

    tenure::testing::Conformance::new("redis over TLS", move || {
        let url = url.clone();
        async move {
            connect(&url, &StoreOptions::default())
                .await
                .expect("TLS store")
        }
    })
    .with_handovers(100)
    .run_all()
    .await;
}

/// Fenced writes on Redis: a leader's SET/HSET/XADD go through; a paused
/// leader (its clock frozen: it still believes it leads and never renews)
/// is refused inside the script once a successor took over, and nothing of
/// its writes lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_refuse_a_paused_leader() {
    use std::sync::Arc;
    use tenure::clock::ManualClock;
    use tenure::store::redis::{FencedWrites, RedisStore};
    use tenure::Elector;

    let url = servers::redis_url();
    let Some(store) = servers::connect_or_skip(&url, &StoreOptions::default()).await else {
        return;
    };
    let run = format!(
        "{:x}{:x}",
        std::process::id(),
        Instant::now().elapsed().subsec_nanos()
    );
    let election = format!("fenced-{run}");
    let paused = Elector::builder(store.clone())
        .namespace("fenced-test")
        .election(election.clone())
        .ttl(Duration::from_millis(500))
        .clock(Arc::new(ManualClock::new()))
        .build()
        .unwrap();
    let stale = tokio::time::timeout(Duration::from_secs(5), paused.acquired())
        .await
        .unwrap()
        .unwrap();
    let redis = store.downcast_ref::<RedisStore>().expect("a Redis store");
    let (k, h, x) = (
        format!("app:{run}:latest"),
        format!("app:{run}:runs"),
        format!("app:{run}:log"),
    );
    let term = stale.term().to_string();
    let writes = |value: &str| {
        FencedWrites::new()
            .set(&k, value)
            .hset(&h, "nightly", value)
            .xadd(&x, [("term", term.as_str()), ("value", value)])
    };
    redis
        .fenced(&stale.tenure(), writes("first"))
        .await
        .expect("the leader writes");
    let successor = Elector::builder(store.clone())
        .namespace("fenced-test")
        .election(election.clone())
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let fresh = tokio::time::timeout(Duration::from_secs(5), successor.acquired())
        .await
        .unwrap()
        .unwrap();
    assert!(fresh.term() > stale.term());
    assert!(stale.is_valid(), "the paused leader still believes");
    let refused = redis.fenced(&stale.tenure(), writes("stale")).await;
    assert!(
        matches!(refused, Err(Error::NotLeader { .. })),
        "a stale leader's write is refused: {refused:?}"
    );
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let latest: String = redis::cmd("GET")
        .arg(&k)
        .query_async(&mut conn)
        .await
        .unwrap();
    let run_: String = redis::cmd("HGET")
        .arg(&h)
        .arg("nightly")
        .query_async(&mut conn)
        .await
        .unwrap();
    let entries: u64 = redis::cmd("XLEN")
        .arg(&x)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        (latest.as_str(), run_.as_str(), entries),
        ("first", "first", 1)
    );
    // The successor writes under its own term.
    redis
        .fenced(
            &fresh.tenure(),
            FencedWrites::new().set(&k, "second").del(&x),
        )
        .await
        .unwrap();
    let latest: String = redis::cmd("GET")
        .arg(&k)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(latest, "second");
    let _: () = redis::cmd("DEL")
        .arg(&k)
        .arg(&h)
        .arg(&x)
        .query_async(&mut conn)
        .await
        .unwrap();
    successor.shutdown().await.unwrap();
    drop(paused);
}

/// A process in many elections renews all its leases with one script call per
/// renew instant, each lease judged on its own (a lease with a hand-over
/// request is refused, the others renewed); heartbeats and reaps likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_one_process_share_a_script_call() {
    const N: usize = 40;
    let url = servers::redis_url();
    let Some(_) = servers::connect_or_skip(&url, &StoreOptions::default()).await else {
        return;
    };
    let recorder = TestRecorder::new();
    let store = std::sync::Arc::new(
        recorder
            .scope(tenure::store::redis::RedisStore::connect(
                &url,
                &StoreOptions::default(),
            ))
            .await
            .expect("connect"),
    );
    let run = format!("{:x}-{:x}", std::process::id(), rand::random::<u32>());
    let ttl = Duration::from_secs(30);
    let mut tenures = Vec::new();
    for i in 0..N {
        let c = claim(
            &ElectionKey::new("batch", format!("e{i}-{run}")),
            "h#1",
            ttl,
        );
        let term = acquired(&(store.clone() as DynStore), &c).await;
        tenures.push(Tenure {
            key: c.key,
            holder: c.holder,
            term,
        });
    }
    use tenure::store::LeaseStore;
    store
        .request_handover(
            &tenures[7].key,
            &tenure::store::Handover::Anyone,
            ttl,
            tenure::store::HandoverReason::Resign,
        )
        .await
        .expect("request")
        .expect("held");
    let before = recorder.statements("renew");
    let results = futures_util::future::join_all(tenures.iter().map(|t| store.renew(t, ttl))).await;
    let calls = recorder.statements("renew") - before;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.expect("renew"), i != 7, "lease {i}");
    }
    assert!(
        calls <= 2,
        "{calls} script calls for {N} renewals at one instant"
    );

    // Electors: 40 leaders for three TTLs renew every ttl/3 on a shared grid.
    let ttl = Duration::from_secs(1);
    let electors: Vec<tenure::Elector> = (0..N)
        .map(|i| {
            tenure::Elector::builder(store.clone())
                .namespace("batch-electors")
                .election(format!("e{i}-{run}"))
                .ttl(ttl)
                .build()
                .expect("elector")
        })
        .collect();
    let start = Instant::now();
    while !electors.iter().all(|e| e.is_leader()) {
        assert!(start.elapsed() < Duration::from_secs(10), "all lead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (renews, beats, reaps) = (
        recorder.statements("renew"),
        recorder.statements("heartbeat"),
        recorder.statements("reap"),
    );
    tokio::time::sleep(ttl * 3).await;
    let renews = recorder.statements("renew") - renews;
    let beats = recorder.statements("heartbeat") - beats;
    let reaps = recorder.statements("reap") - reaps;
    // Nine grid instants (ten if the window straddles one), a straggler or
    // two: not 360. No heartbeats while leading, a reap every 30 TTLs: none
    // or a few (the bounds below are from when leaders heartbeated).
    assert!(
        renews <= 14,
        "{renews} renewal calls for {N} leaders in three TTLs"
    );
    assert!(
        beats <= 6,
        "{beats} heartbeat calls for {N} leaders in three TTLs"
    );
    assert!(
        reaps <= 4,
        "{reaps} reap calls for {N} leaders in three TTLs"
    );
    eprintln!("three TTLs, {N} leaders: {renews} renewal, {beats} heartbeat, {reaps} reap calls");
    for e in electors {
        e.shutdown().await.expect("shutdown");
    }
}
