//! Fenced transactions (DESIGN rule 7) on every SQL store: work commits only
//! under a live lease, and a takeover cannot commit while fenced work is open.

use std::time::{Duration, Instant};

use sqlx::Executor;
use tenure::store::sql::SqlStore;
use tenure::store::{Acquire, Claim, ElectionKey, LeaseStore, StoreOptions, Tenure};
use tenure_testsupport::servers;

fn claim(key: &ElectionKey, holder: &str, ttl: Duration) -> Claim {
    Claim {
        key: key.clone(),
        holder: holder.into(),
        metadata: String::new(),
        ttl,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_work_commits_only_under_the_lease_and_blocks_takeover() {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = servers::sql_urls(dir.path()).await;
    // PostgreSQL through a pooler in transaction mode as well.
    let bouncer = urls
        .contains(&servers::postgres_url())
        .then(|| tenure_testsupport::PgBouncer::start_or_skip(&servers::postgres_url(), 4))
        .flatten();
    urls.extend(bouncer.as_ref().map(|b| b.url()));
    for url in urls {
        let a = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let b = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let table = format!("fenced_work_{}", rand_suffix());
        let none = a
            .begin_fenced(&Tenure {
                key: ElectionKey::new("x", "y"),
                holder: "nobody#0".into(),
                term: 1,
            })
            .await;
        assert!(
            matches!(none, Err(tenure::Error::NotLeader { .. })),
            "[{url}] no lease, no fenced transaction"
        );
        let setup = SqlStore::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let key = ElectionKey::new(format!("fenced-{}", rand_suffix()), "job");
        let Acquire::Acquired(rec) = a
            .try_acquire(&claim(&key, "a#1", Duration::from_millis(300)))
            .await
            .unwrap()
        else {
            panic!("[{url}] a acquires");
        };
        let tenure = Tenure {
            key: key.clone(),
            holder: "a#1".into(),
            term: rec.term,
        };
        // Create the application table outside any fenced transaction.
        {
            let mut tx = setup.begin_fenced(&tenure).await.unwrap();
            tx.connection()
                .execute(format!("CREATE TABLE {table} (term BIGINT NOT NULL)").as_str())
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        // Open fenced work, let the lease expire by the store's clock, and race a takeover.
        let mut tx = a.begin_fenced(&tenure).await.unwrap();
        tx.connection()
            .execute(format!("INSERT INTO {table} (term) VALUES ({})", rec.term).as_str())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await; // past the 300 ms lease
        let started = Instant::now();
        let takeover = tokio::spawn({
            let key = key.clone();
            async move {
                b.try_acquire(&claim(&key, "b#1", Duration::from_secs(30)))
                    .await
                    .map(|r| (r, Instant::now()))
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !takeover.is_finished(),
            "[{url}] a takeover must wait for the open fenced transaction"
        );
        let committed_at = Instant::now();
        tx.commit().await.unwrap();
        let (result, done_at) = takeover.await.unwrap().unwrap();
        assert!(
            matches!(result, Acquire::Acquired(ref r) if r.term == rec.term + 1),
            "[{url}] b takes over after the commit: {result:?}"
        );
        assert!(
            done_at >= committed_at,
            "[{url}] takeover finished before the fenced commit"
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        // The old leader's fence is now shut.
        assert!(
            matches!(
                a.begin_fenced(&tenure).await,
                Err(tenure::Error::NotLeader { .. })
            ),
            "[{url}] stale leader is fenced out"
        );
        let mut tx = setup
            .begin_fenced(&Tenure {
                key: key.clone(),
                holder: "b#1".into(),
                term: rec.term + 1,
            })
            .await
            .unwrap();
        tx.connection()
            .execute(format!("DROP TABLE {table}").as_str())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
}

fn rand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
            ^ std::process::id()
    )
}

/// A fenced transaction whose BEGIN is abandoned while it waits for SQLite's
/// write lock must not leave its connection in the pool inside an open
/// transaction (renewals through it would never commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_fenced_begin_does_not_poison_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("f.db").display());
    let a = SqlStore::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let b = SqlStore::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new("poison", "job");
    let Acquire::Acquired(rec) = a
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(30)))
        .await
        .unwrap()
    else {
        panic!("acquire");
    };
    let tenure = Tenure {
        key: key.clone(),
        holder: "a#1".into(),
        term: rec.term,
    };
    let holding = b.begin_fenced(&tenure).await.unwrap(); // holds the write lock
    let abandoned = tokio::time::timeout(Duration::from_millis(200), a.begin_fenced(&tenure)).await;
    assert!(
        abandoned.is_err(),
        "BEGIN IMMEDIATE waits while another writer holds the lock"
    );
    holding.commit().await.unwrap();
    for _ in 0..4 {
        let before = b.read(&key).await.unwrap().unwrap().renewed_at_us;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(a.renew(&tenure, Duration::from_secs(30)).await.unwrap());
        let after = b.read(&key).await.unwrap().unwrap().renewed_at_us;
        assert!(
            after > before,
            "a renewal must be visible to other connections (committed)"
        );
    }
}

/// The quick start's store (`store::connect`) does fenced writes through
/// `Leadership::fenced`: a leader writes; a paused leader (its clock frozen,
/// so it still believes it leads and never renews) is refused once a
/// successor took over, and its work never runs; failing work rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closure_fencing_from_a_connected_store_refuses_a_paused_leader() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tenure::clock::ManualClock;
    use tenure::Elector;

    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        let store = tenure::store::connect(&url, &StoreOptions::default())
            .await
            .unwrap();
        let sql = store.downcast_ref::<SqlStore>().expect("a SQL store");
        let table = format!("ledger_{}", rand_suffix());
        sql.pool()
            .execute(format!("CREATE TABLE {table} (term BIGINT NOT NULL)").as_str())
            .await
            .unwrap();
        let election = format!("fenced-closure-{}", rand_suffix());
        // A frozen clock: this leader is "paused" from the moment it leads.
        let paused = Elector::builder(store.clone())
            .election(election.clone())
            .ttl(Duration::from_secs(1))
            .clock(Arc::new(ManualClock::new()))
            .build()
            .unwrap();
        let stale = tokio::time::timeout(Duration::from_secs(10), paused.acquired())
            .await
            .unwrap()
            .unwrap();
        let insert = format!("INSERT INTO {table} (term) VALUES ({})", stale.term());
        stale
            .fenced(&store, async |tx| {
                tx.connection().execute(insert.as_str()).await?;
                Ok(())
            })
            .await
            .unwrap_or_else(|e| panic!("[{url}] the leader writes: {e}"));
        // A successor on a concrete store (no Arc needed) takes over once the
        // lease expires by the database's clock.
        let successor = Elector::builder(
            SqlStore::connect(&url, &StoreOptions::default())
                .await
                .unwrap(),
        )
        .election(election.clone())
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
        let fresh = tokio::time::timeout(Duration::from_secs(10), successor.acquired())
            .await
            .unwrap()
            .unwrap();
        assert!(fresh.term() > stale.term());
        assert!(stale.is_valid(), "[{url}] the paused leader still believes");
        let ran = AtomicBool::new(false);
        let refused = stale
            .fenced(&store, async |tx| {
                ran.store(true, Ordering::SeqCst);
                tx.connection().execute(insert.as_str()).await?;
                Ok(())
            })
            .await;
        assert!(
            matches!(refused, Err(tenure::Error::NotLeader { .. })),
            "[{url}] a stale leader's write is refused: {refused:?}"
        );
        assert!(!ran.load(Ordering::SeqCst), "[{url}] its work never ran");
        // Failing work rolls back; its error comes out through `?`.
        let failed = fresh
            .fenced(successor.store(), async |tx| {
                tx.connection()
                    .execute(
                        format!("INSERT INTO {table} (term) VALUES ({})", fresh.term()).as_str(),
                    )
                    .await?;
                tx.connection()
                    .execute("SELECT * FROM no_such_table")
                    .await?;
                Ok(())
            })
            .await;
        assert!(
            matches!(failed, Err(tenure::Error::Work { .. })),
            "[{url}] {failed:?}"
        );
        let rows: Vec<i64> = sqlx::query_scalar(&format!("SELECT term FROM {table}"))
            .fetch_all(sql.pool())
            .await
            .unwrap();
        assert_eq!(
            rows,
            [stale.term() as i64],
            "[{url}] only the fenced write landed"
        );
        sql.pool()
            .execute(format!("DROP TABLE {table}").as_str())
            .await
            .unwrap();
        successor.shutdown().await.unwrap();
        drop(paused);
    }
    // A store without fenced transactions says so.
    let memory = tenure::store::connect("memory://", &StoreOptions::default())
        .await
        .unwrap();
    let e = Elector::builder(memory.clone())
        .election("m")
        .build()
        .unwrap();
    let l = e.acquired().await.unwrap();
    let r = l.fenced(&memory, async |_tx| Ok(())).await;
    assert!(matches!(r, Err(tenure::Error::Unsupported { .. })), "{r:?}");
    e.shutdown().await.unwrap();
}

/// Through PgBouncer in transaction mode, statements with parameters (which
/// sqlx prepares by name unless told otherwise) work in fenced
/// transactions one after another: no name is used on a server connection
/// that did not prepare it, nor collides with another client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_statements_with_parameters_through_a_transaction_pooler() {
    let Some(postgres) =
        servers::connect_or_skip(&servers::postgres_url(), &StoreOptions::default()).await
    else {
        return;
    };
    drop(postgres);
    let Some(bouncer) = tenure_testsupport::PgBouncer::start_or_skip(&servers::postgres_url(), 2)
    else {
        return;
    };
    let stores = [
        SqlStore::connect(&bouncer.url(), &StoreOptions::default())
            .await
            .unwrap(),
        SqlStore::connect(&bouncer.url(), &StoreOptions::default())
            .await
            .unwrap(),
    ];
    let key = ElectionKey::new(format!("fenced-{}", rand_suffix()), "pooled");
    let Acquire::Acquired(rec) = stores[0]
        .try_acquire(&claim(&key, "a#1", Duration::from_secs(30)))
        .await
        .unwrap()
    else {
        panic!("a acquires");
    };
    let tenure = Tenure {
        key: key.clone(),
        holder: "a#1".into(),
        term: rec.term,
    };
    let table = format!("fenced_pooled_{}", rand_suffix());
    stores[0]
        .fenced(&tenure, async |tx| {
            tx.connection()
                .execute(format!("CREATE TABLE {table} (n BIGINT NOT NULL)").as_str())
                .await?;
            Ok(())
        })
        .await
        .unwrap();
    // Both stores' pools take turns on the pooler's two server connections.
    for n in 0..20_i64 {
        let store = &stores[(n % 2) as usize];
        store
            .fenced(&tenure, async |tx| {
                sqlx::query(&format!("INSERT INTO {table} (n) VALUES ($1)"))
                    .bind(n)
                    .execute(tx.connection())
                    .await?;
                Ok(())
            })
            .await
            .unwrap_or_else(|e| panic!("fenced insert {n}: {e}\n{}", bouncer.log_tail()));
    }
    let count: i64 = stores[1]
        .fenced(&tenure, async |tx| {
            let row = sqlx::query(&format!("SELECT COUNT(*) FROM {table} WHERE n >= $1"))
                .bind(0_i64)
                .fetch_one(tx.connection())
                .await?;
            let count: i64 = sqlx::Row::try_get(&row, 0)?;
            tx.connection()
                .execute(format!("DROP TABLE {table}").as_str())
                .await?;
            Ok(count)
        })
        .await
        .unwrap();
    assert_eq!(count, 20);
}
