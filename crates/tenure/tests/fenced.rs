//! Fenced transactions (DESIGN rule 7) on every SQL store: work commits only
//! under a live lease, and a takeover cannot commit while fenced work is open.

use std::time::{Duration, Instant};

use sqlx::Executor;
use tenure::store::sql::SqlStore;
use tenure::store::{Acquire, Claim, ElectionKey, LeaseStore, StoreOptions, Tenure};
use tenure::testing::servers;

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
    let sqlite = format!("sqlite://{}", dir.path().join("f.db").display());
    let mut urls = vec![sqlite];
    for url in [servers::mysql_url(), servers::postgres_url()] {
        if servers::connect_or_skip(&url, &StoreOptions::default())
            .await
            .is_some()
        {
            urls.push(url);
        }
    }
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
