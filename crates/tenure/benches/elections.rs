//! Succession and batching, measured per store side by side.
//!
//! 1. Writes per failover: 50 followers wait; the leader crashes (no release);
//!    we count the acquisition attempts that reach the store until the next
//!    leader is settled. A naive race makes one attempt per follower (50).
//! 2. Graceful handover: the leader resigns; time until a follower leads.
//! 3. Renewal statements per second for one process holding 1 and 1,000
//!    elections (batched on a shared grid), and the server's own count of
//!    committed transactions per second (PostgreSQL) or UPDATE statements
//!    (MariaDB) over the same window, which includes membership heartbeats.
//!
//! Run: `cargo bench -p tenure --bench elections --all-features -- [--store URL]...`

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Row;
use tenure::store::sql::SqlStore;
use tenure::store::{DynStore, LeaseStoreExt, StoreOptions};
use tenure::testing::Instrumented;
use tenure::Elector;
use tenure_testsupport::metrics::TestRecorder;
use tenure_testsupport::servers;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

async fn wait(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn failover(url: &str) {
    let inner: DynStore = Arc::new(
        SqlStore::connect(url, &StoreOptions::default())
            .await
            .expect("store"),
    );
    let counting = Arc::new(Instrumented::new(inner));
    let store: DynStore = counting.clone();
    let election = format!("herd-{}", rand::random::<u32>());
    let build = |id: String, release: bool| {
        Elector::builder(store.clone())
            .election(election.clone())
            .identity(id)
            .ttl(Duration::from_secs(2))
            .release_on_shutdown(release)
            .build()
            .expect("elector")
    };
    let mut attempts = Vec::new();
    let mut handover = Vec::new();
    let leader = build("leader".into(), false);
    leader.acquired().await.expect("leader");
    let mut followers: Vec<Elector> = (0..50).map(|i| build(format!("f{i:02}"), true)).collect();
    let key = leader.election().clone();
    let start = Instant::now();
    while store
        .members(&key)
        .await
        .expect("members")
        .iter()
        .filter(|m| m.live)
        .count()
        < 51
    {
        assert!(start.elapsed() < Duration::from_secs(20), "members");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Crash failovers.
    let mut current = leader;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = counting.acquires();
        current.shutdown().await.expect("crash");
        wait("takeover", Duration::from_secs(10), || {
            followers.iter().any(|f| f.is_leader())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        attempts.push((counting.acquires() - before) as f64);
        let idx = followers
            .iter()
            .position(|f| f.is_leader())
            .expect("leader");
        current = followers.remove(idx);
        followers.push(build(format!("n{}", rand::random::<u16>()), true));
    }
    // Graceful handovers.
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        current.resign().await.expect("resign");
        wait("handover", Duration::from_secs(10), || {
            followers.iter().any(|f| f.is_leader())
        })
        .await;
        handover.push(t.elapsed().as_secs_f64() * 1000.0);
        let idx = followers
            .iter()
            .position(|f| f.is_leader())
            .expect("leader");
        let next = followers.remove(idx);
        followers.push(current);
        current = next;
    }
    println!(
        "  crash failover with 50 waiting: acquisition attempts per failover max {:.0} (n={}); graceful resign -> new leader p50 {:.1} ms, p99 {:.1} ms (n={})",
        attempts.iter().cloned().fold(0.0, f64::max),
        attempts.len(),
        pct(&mut handover, 0.5),
        pct(&mut handover, 0.99),
        handover.len()
    );
    current.shutdown().await.ok();
    for f in followers {
        f.shutdown().await.ok();
    }
}

async fn server_writes(url: &str) -> Option<i64> {
    use sqlx::Connection;
    if url.starts_with("postgres") {
        let mut c = sqlx::AnyConnection::connect(url).await.ok()?;
        let r = sqlx::query("SELECT CAST(xact_commit AS BIGINT) FROM pg_stat_database WHERE datname = current_database()")
            .fetch_one(&mut c)
            .await
            .ok()?;
        r.try_get::<i64, _>(0).ok()
    } else if url.starts_with("mysql") {
        let mut c = sqlx::AnyConnection::connect(url).await.ok()?;
        let r = sqlx::query("SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'COM_UPDATE'")
            .fetch_one(&mut c)
            .await
            .ok()?;
        r.try_get::<i64, _>(0).ok()
    } else {
        None
    }
}

async fn renewals(url: &str, n: usize) {
    let counters = TestRecorder::new();
    let store: DynStore = Arc::new(
        counters
            .scope(SqlStore::connect(url, &StoreOptions::default()))
            .await
            .expect("store"),
    );
    let tag = rand::random::<u32>();
    let electors: Vec<Elector> = (0..n)
        .map(|i| {
            Elector::builder(store.clone())
                .namespace(format!("batch-{tag}"))
                .election(format!("e{i}"))
                .ttl(Duration::from_secs(3))
                .build()
                .expect("elector")
        })
        .collect();
    wait("all leading", Duration::from_secs(60), || {
        electors.iter().all(|e| e.is_leader())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (s0, w0, t0) = (
        counters.statements("renew"),
        server_writes(url).await,
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let secs = t0.elapsed().as_secs_f64();
    let renew_rate = (counters.statements("renew") - s0) as f64 / secs;
    let server = match (w0, server_writes(url).await) {
        (Some(a), Some(b)) => format!("{:.1}/s", (b - a) as f64 / secs),
        _ => "n/a".into(),
    };
    let all = electors.iter().all(|e| e.is_leader());
    println!(
        "  {n:>4} elections, renew every 1 s: {renew_rate:.2} renewal statements/s; server-side writes {server} (all still leading: {all})"
    );
    for e in electors {
        e.shutdown().await.ok();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut urls: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--store" {
            urls.extend(args.next());
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    if urls.is_empty() {
        urls = vec![
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            servers::mysql_url(),
            servers::postgres_url(),
        ];
    }
    for url in &urls {
        if tenure::store::connect(url, &StoreOptions::default())
            .await
            .is_err()
        {
            println!("{}: skipped (unreachable)", tenure::store::redact_url(url));
            continue;
        }
        println!("{}:", tenure::store::redact_url(url));
        failover(url).await;
        renewals(url, 1).await;
        renewals(url, 1000).await;
    }
}
