//! SQL store behaviour beyond the conformance suite, on SQLite, MariaDB and
//! PostgreSQL: batched renewals with an unmatched lease, batched member
//! heartbeats, and the history written before `shutdown()` returns.

use std::time::Duration;

use tenure::store::sql::SqlStore;
use tenure::store::{Acquire, Claim, ElectionKey, Handover, LeaseStore, StoreOptions, Tenure};
use tenure::testing::servers;

const N: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unmatched_lease_costs_at_most_one_more_statement() {
    let dir = tempfile::tempdir().unwrap();
    let urls = servers::sql_urls(dir.path()).await;
    let run = format!("{:x}", std::process::id());
    for url in urls {
        let store = std::sync::Arc::new(
            SqlStore::connect(&url, &StoreOptions::default())
                .await
                .unwrap(),
        );
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
        let before = store.renew_statements();
        let results =
            futures_util::future::join_all(tenures.iter().map(|t| store.renew(t, ttl))).await;
        let statements = store.renew_statements() - before;
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
        let store = std::sync::Arc::new(
            SqlStore::connect(&url, &StoreOptions::default())
                .await
                .unwrap(),
        );
        let ttl = Duration::from_secs(1);
        let before = store.heartbeat_statements();
        let reaps_before = store.reap_statements();
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
        let sent = store.heartbeat_statements() - before;
        let reaps = store.reap_statements() - reaps_before;
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
                    for t in ["leases", "members", "history", "schema"] {
                        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{t}"))
                            .execute(&pool)
                            .await;
                    }
                }
            }
        }
    }
}
