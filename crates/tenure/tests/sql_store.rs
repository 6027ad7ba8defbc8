//! SQL store behaviour beyond the conformance suite, on SQLite, MariaDB and
//! PostgreSQL: batched renewals with an unmatched lease, batched member
//! heartbeats, the history written before `shutdown()` returns, and the
//! upgrade of older schema versions.

use std::time::Duration;

use tenure::store::sql::SqlStore;
use tenure::store::{
    Acquire, Claim, ElectionKey, Handover, LeaseStore, LeaseStoreExt, StoreOptions, Tenure,
};
use tenure_testsupport::metrics::TestRecorder;
use tenure_testsupport::servers;

const N: usize = 40;

/// A store on `url` whose statements a recorder of its own counts.
async fn counted(url: &str) -> (TestRecorder, std::sync::Arc<SqlStore>) {
    let recorder = TestRecorder::new();
    let store = recorder
        .scope(SqlStore::connect(url, &StoreOptions::default()))
        .await
        .unwrap();
    (recorder, std::sync::Arc::new(store))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unmatched_lease_costs_at_most_one_more_statement() {
    let dir = tempfile::tempdir().unwrap();
    let urls = servers::sql_urls(dir.path()).await;
    let run = format!("{:x}", std::process::id());
    for url in urls {
        let (recorder, store) = counted(&url).await;
        let ttl = Duration::from_secs(30);
        let mut tenures = Vec::new();
        for i in 0..N {
            let key = ElectionKey::new("batch", format!("e{i}-{run}"));
            let claim = Claim {
                key: key.clone(),
                holder: format!("h#{run}"),
                metadata: String::new(),
                ttl,
            };
            let Acquire::Acquired(rec) = store.try_acquire(&claim).await.unwrap() else {
                panic!("{url}: fresh election e{i} is free")
            };
            tenures.push(Tenure {
                key,
                holder: claim.holder,
                term: rec.term,
            });
        }
        // A resign request on one lease: its renewal must fail, the others not.
        store
            .request_handover(
                &tenures[7].key,
                &Handover::Anyone,
                ttl,
                tenure::store::HandoverReason::Resign,
            )
            .await
            .unwrap()
            .unwrap();
        let before = recorder.statements("renew");
        let results =
            futures_util::future::join_all(tenures.iter().map(|t| store.renew(t, ttl))).await;
        let statements = recorder.statements("renew") - before;
        for (i, r) in results.into_iter().enumerate() {
            assert_eq!(r.unwrap(), i != 7, "{url}: lease {i}");
        }
        assert!(
            statements <= 2,
            "{url}: {statements} statements for one batch of {N} with one unmatched lease"
        );
        for t in &tenures {
            let _ = store.release(t).await;
        }
    }
}

/// `shutdown()` returns only after the history entry of the release is
/// written: a process that exits right after shutting down must not leave its
/// last term open in `tenure status --history` (seen on SQLite before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_writes_the_end_of_the_term_before_returning() {
    let dir = tempfile::tempdir().unwrap();
    let urls = servers::sql_urls(dir.path()).await;
    let run = format!("{:x}", std::process::id());
    for url in urls {
        let checker = tenure::store::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        for i in 0..10 {
            let store = tenure::store::connect(&url, &StoreOptions::default())
                .await
                .unwrap();
            let election = format!("hist{i}-{run}");
            let e = tenure::Elector::builder(store)
                .election(election.clone())
                .ttl(Duration::from_secs(10))
                .build()
                .unwrap();
            let term = tokio::time::timeout(Duration::from_secs(10), e.acquired())
                .await
                .unwrap()
                .unwrap()
                .term();
            e.shutdown().await.unwrap();
            let history = checker
                .history(&ElectionKey::new("default", election), 5)
                .await
                .unwrap();
            let last = history.iter().find(|h| h.term == term);
            assert!(
                last.is_some_and(|h| h.end_reason == Some(tenure::store::EndReason::Released)
                    && h.end_at_us.is_some()),
                "{url}: run {i}: term {term} not closed right after shutdown: {history:?}"
            );
        }
    }
}

/// A process in many elections registers all its members with one statement
/// per heartbeat instant (reaps of lapsed members go likewise): 40 electors
/// started together on one store cost a statement or a few for their first
/// registrations, not one each, and then, all leading, none for three TTLs
/// (a leader does not heartbeat: the lease vouches for it, and it reaps
/// only every 30 TTLs); each still reads as a live member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_of_one_process_share_a_statement() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        let (recorder, store) = counted(&url).await;
        let ttl = Duration::from_secs(1);
        let before = recorder.statements("heartbeat");
        let reaps_before = recorder.statements("reap");
        let electors: Vec<tenure::Elector> = (0..N)
            .map(|i| {
                tenure::Elector::builder(store.clone())
                    .namespace("heartbeats")
                    .election(format!("e{i}-{run}"))
                    .ttl(ttl)
                    .build()
                    .unwrap()
            })
            .collect();
        tokio::time::sleep(ttl * 3).await;
        let sent = recorder.statements("heartbeat") - before;
        let reaps = recorder.statements("reap") - reaps_before;
        assert_eq!(
            reaps, 0,
            "{url}: {reaps} reap statements for {N} leaders in their first three TTLs"
        );
        // One grid instant for the first registrations, and a straggler or
        // two that missed its batch: far below 40.
        assert!(
            (1..=4).contains(&sent),
            "{url}: {sent} heartbeat statements for {N} electors in three TTLs"
        );
        let members = store
            .members(&ElectionKey::new("heartbeats", format!("e7-{run}")))
            .await
            .unwrap();
        assert!(members.iter().any(|m| m.live), "{url}: {members:?}");
        for e in electors {
            e.shutdown().await.unwrap();
        }
    }
}

/// Several processes using fresh tables for the first time at the same moment
/// (a `tenure run` and a `tenure status` started together) all succeed: on
/// PostgreSQL two concurrent `CREATE TABLE IF NOT EXISTS` race on the
/// catalog, and the loser saw "duplicate key value violates unique
/// constraint pg_type_typname_nsp_index".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_use_of_fresh_tables_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        for round in 0..4 {
            let prefix = format!("race{:08x}_", rand::random::<u32>());
            let options = StoreOptions::default().with_table_prefix(prefix.clone());
            let results = futures_util::future::join_all(
                (0..6).map(|_| tenure::store::connect(&url, &options)),
            )
            .await;
            let mut store = None;
            for r in results {
                match r {
                    Ok(s) => store = Some(s),
                    Err(e) => panic!("{url} round {round}: {e}"),
                }
            }
            // Our own tables only: drop them (SQLite's go with the directory).
            if let Some(s) = store.and_then(|s| {
                s.downcast_ref::<SqlStore>()
                    .map(|s| (s.pool().clone(), s.backend()))
            }) {
                let (pool, backend) = s;
                if backend != "sqlite" {
                    for t in TABLES {
                        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{t}"))
                            .execute(&pool)
                            .await;
                    }
                }
            }
        }
    }
}

/// A woken successor reads the lease and the members and acquires at once;
/// none of that may wait for a new connection. sqlx pings every connection it
/// takes back, and while it does the connection is not idle: the acquisition
/// found both connections of the read in their ping and the pool opened a
/// third, 6–11 ms on PostgreSQL's hand-over path. The lease statements keep
/// one connection out of the pool for that (`store/sql/kept.rs`).
/// Not counted on MySQL/MariaDB, where the pool also lends the connections
/// that hold and wait on named locks, which come and go beside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_successor_opens_no_connection() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        if url.starts_with("mysql") {
            continue;
        }
        let leader = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let successor = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let key = ElectionKey::new("kept", format!("e-{run}"));
        let claim = |holder: &str| Claim {
            key: key.clone(),
            holder: format!("{holder}#{run}"),
            metadata: String::new(),
            ttl: Duration::from_secs(30),
        };
        let member = tenure::store::Member {
            key: key.clone(),
            holder: claim("s").holder,
            metadata: String::new(),
            priority: 0,
        };
        successor
            .heartbeat(&member, Duration::from_secs(60))
            .await
            .unwrap();
        // At least two connections, as a follower that read and heartbeat
        // side by side has: one for the lease statements, one for the
        // history its acquisition queues.
        let (a, b) = tokio::join!(successor.read(&key), successor.read(&key));
        a.unwrap();
        b.unwrap();
        pool_settled(&successor).await;
        let before = successor.pool().size();
        for round in 0..10 {
            let held = match leader.try_acquire(&claim("l")).await {
                Ok(Acquire::Acquired(held)) => held,
                other => panic!("{url}: round {round}: the leader's acquisition: {other:?}"),
            };
            assert!(leader.release(&tenure_of(&held)).await.unwrap());
            let (rec, members) = successor.read_with_members(&key).await.unwrap();
            assert!(rec.is_some_and(|r| !r.is_held()), "{url}: round {round}");
            assert!(
                members.is_some_and(|m| m.iter().any(|m| m.holder == member.holder)),
                "{url}: round {round}"
            );
            let took = match successor.try_acquire(&claim("s")).await {
                Ok(Acquire::Acquired(took)) => took,
                other => panic!("{url}: round {round}: the successor's acquisition: {other:?}"),
            };
            let opened = successor.pool().size() - before;
            assert_eq!(
                opened, 0,
                "{url}: round {round}: the hand-over opened {opened} connection(s)"
            );
            // The history the acquisition queued, then the release's.
            successor.flush().await.unwrap();
            pool_settled(&successor).await;
            assert!(successor.release(&tenure_of(&took)).await.unwrap());
            successor.flush().await.unwrap();
            pool_settled(&successor).await;
        }
    }
}

/// A pool of one connection still elects: the lease statements keep no
/// connection aside there, or the first election's vacant-row insert and
/// every renewal would wait for the kept one until they timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_one_connection_elects_and_renews() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        let mut options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
        options.max_connections = 1;
        let store = SqlStore::connect(&url, &options).await.unwrap();
        let key = ElectionKey::new("kept", format!("one-{run}"));
        let claim = Claim {
            key: key.clone(),
            holder: format!("h#{run}"),
            metadata: String::new(),
            ttl: Duration::from_secs(30),
        };
        let held = match store.try_acquire(&claim).await {
            Ok(Acquire::Acquired(held)) => held,
            other => panic!("{url}: a fresh election on a pool of one: {other:?}"),
        };
        let tenure = tenure_of(&held);
        for _ in 0..3 {
            assert!(
                store.renew(&tenure, claim.ttl).await.unwrap(),
                "{url}: renewal on a pool of one"
            );
        }
        assert!(store.release(&tenure).await.unwrap());
    }
}

/// Closing the pool the store lends to the application
/// ([`SqlStore::pool`]) finishes at once, also while the lease statements
/// keep a connection out of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_pool_finishes() {
    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        let store = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        store
            .read(&ElectionKey::new("kept", "close"))
            .await
            .unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(10), store.pool().close()).await;
        assert!(
            closed.is_ok(),
            "{url}: pool().close() still waiting after 10 s"
        );
    }
}

/// A store dropped outside any Tokio runtime (the runtime that used it shut
/// down first) does not panic, with a connection kept from its last
/// statement.
#[test]
fn a_store_dropped_outside_a_runtime_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let stores = runtime.block_on(async {
        let mut stores = Vec::new();
        for url in servers::sql_urls(dir.path()).await {
            let store = SqlStore::connect(&url, &StoreOptions::default())
                .await
                .unwrap();
            store
                .read(&ElectionKey::new("kept", "dropped"))
                .await
                .unwrap();
            stores.push(store);
        }
        stores
    });
    drop(runtime);
    drop(stores);
}

/// Every table of the current schema, by name without the prefix.
const TABLES: [&str; 5] = ["leases", "members", "history", "runs", "schema"];

/// Tables of schema version 2 (before run records) are brought to the
/// current version in place, their rows kept, by `migrate` (what `tenure
/// migrate` runs, and connecting with `auto_migrate`); without it, a store
/// refuses them and names the fix. The printed DDL creates the runs table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_version_2_is_upgraded_in_place() {
    use tenure::store::sql::SCHEMA_VERSION;
    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        let prefix = format!("upgrade{:08x}_", rand::random::<u32>());
        let options = StoreOptions::default().with_table_prefix(prefix.clone());
        let key = ElectionKey::new("upgrade", "e");
        let claim = Claim {
            key: key.clone(),
            holder: "h#1".into(),
            metadata: String::new(),
            ttl: Duration::from_secs(60),
        };
        {
            let store = SqlStore::connect(&url, &options).await.unwrap();
            let ddl = store.schema_sql().await.unwrap().join(";\n");
            assert!(
                ddl.contains(&format!("CREATE TABLE IF NOT EXISTS {prefix}runs")),
                "{url}: {ddl}"
            );
            assert!(
                matches!(store.try_acquire(&claim).await, Ok(Acquire::Acquired(_))),
                "{url}"
            );
            // Back to what schema version 2 had.
            for sql in [
                format!("DROP TABLE {prefix}runs"),
                format!("UPDATE {prefix}schema SET version = 2"),
            ] {
                sqlx::query(&sql).execute(store.pool()).await.unwrap();
            }
        }
        let refused = SqlStore::connect(&url, &options.clone().with_auto_migrate(false))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("schema version 2") && refused.contains("tenure migrate"),
            "{url}: {refused}"
        );
        let store = SqlStore::connect_lazy(&url, &options).unwrap();
        store.migrate().await.unwrap();
        let version: i64 = sqlx::query_scalar(&format!("SELECT version FROM {prefix}schema"))
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION, "{url}");
        assert_eq!(
            store.read(&key).await.unwrap().and_then(|r| r.holder),
            Some("h#1".to_string()),
            "{url}: the lease survives the upgrade"
        );
        let runs = store.run_records().expect("SQL stores keep run records");
        let written = runs
            .put(&key, "after-upgrade", "{}", 0, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(written.map(|r| r.version), Some(1), "{url}");
        // Migrating again changes nothing.
        store.migrate().await.unwrap();
        assert_eq!(runs.list(&key, 10).await.unwrap().len(), 1, "{url}");
        // Our own tables only (SQLite's go with the directory).
        if store.backend() != "sqlite" {
            for t in TABLES {
                let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{t}"))
                    .execute(store.pool())
                    .await;
            }
        }
    }
}

/// Waits until every pooled connection but the kept one is idle: sqlx has
/// finished pinging those it took back.
async fn pool_settled(store: &SqlStore) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while store.pool().num_idle() + 1 < store.pool().size() as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "pooled connections still busy after 5 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn tenure_of(rec: &tenure::store::LeaseRecord) -> Tenure {
    Tenure {
        key: rec.key.clone(),
        holder: rec.holder.clone().unwrap_or_default(),
        term: rec.term,
    }
}
