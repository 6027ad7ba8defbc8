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
/// registrations, not one each, and then, all leading, none for two TTLs
/// (a leader does not heartbeat: the lease vouches for it, and it reaps
/// only every 30 TTLs); each still reads as a live member.
///
/// The TTL is 3 s, not 1 s: a leader whose renewals stall past its deadline
/// (SQLite's commits behind another test's `initdb` on a busy CI disk) is a
/// follower again, and a follower's heartbeat rides alone on its read; the
/// failure message lists such losses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_of_one_process_share_a_statement() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        let (recorder, store) = counted(&url).await;
        let ttl = Duration::from_secs(3);
        let before = recorder.statements("heartbeat");
        let reaps_before = recorder.statements("reap");
        let stopped = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let electors: Vec<tenure::Elector> = (0..N)
            .map(|i| {
                let stopped = stopped.clone();
                tenure::Elector::builder(store.clone())
                    .on_event(move |event| {
                        if let tenure::Event::StoppedLeading { .. } = event {
                            let mut stopped = stopped.lock().unwrap_or_else(|p| p.into_inner());
                            stopped.push(format!("e{i}: {event:?}"));
                        }
                    })
                    .namespace("heartbeats")
                    .election(format!("e{i}-{run}"))
                    .ttl(ttl)
                    .build()
                    .unwrap()
            })
            .collect();
        tokio::time::sleep(ttl * 2).await;
        let sent = recorder.statements("heartbeat") - before;
        let reaps = recorder.statements("reap") - reaps_before;
        let stopped = stopped.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(
            reaps, 0,
            "{url}: {reaps} reap statements for {N} leaders in their first two TTLs"
        );
        // One grid instant for the first registrations, and a straggler or
        // two that missed its batch: far below 40.
        assert!(
            (1..=4).contains(&sent),
            "{url}: {sent} heartbeat statements for {N} electors in two TTLs; \
             leaderships lost meanwhile: {stopped:?}"
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
/// one connection out of the pool for that (`store/sql/connection.rs`).
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
        // A designated successor listens, which keeps its connection open
        // (on PostgreSQL, once the listener is up, the connection it
        // listens on).
        let _changes = successor.subscribe();
        if url.starts_with("postgres") {
            eventually(&format!("{url}: the successor listens"), async || {
                matches!(
                    tenure::store::Wakeups::push_health(&successor),
                    tenure::store::PushHealth::Up { .. }
                )
            })
            .await;
        }
        let (a, b) = tokio::join!(successor.read(&key), successor.read(&key));
        a.unwrap();
        b.unwrap();
        let before = successor.connections_opened();
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
            let opened = successor.connections_opened() - before;
            assert_eq!(
                opened, 0,
                "{url}: round {round}: the hand-over opened {opened} connection(s)"
            );
            // The history the acquisition queued, then the release's.
            successor.flush().await.unwrap();
            assert!(successor.release(&tenure_of(&took)).await.unwrap());
            successor.flush().await.unwrap();
        }
    }
}

/// A pool of one connection still elects: the store's own connection is
/// taken out of the pool, and fenced transactions and the application
/// still have the pool.
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

/// Waits (at most 10 s) until `cond` holds; `what` names it in the failure.
async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The backends (pids) PostgreSQL serves for `application_name`.
async fn backends(observer: &SqlStore, application_name: &str) -> Vec<i64> {
    server_ids(
        observer,
        "SELECT CAST(pid AS BIGINT) FROM pg_stat_activity WHERE application_name = $1",
        application_name,
    )
    .await
}

/// The connections MariaDB serves for `database` (its processlist's `DB`):
/// their ids.
async fn mysql_connections(observer: &SqlStore, database: &str) -> Vec<i64> {
    server_ids(
        observer,
        "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE DB = ? ORDER BY ID",
        database,
    )
    .await
}

/// A store on `url` that looks at the server's own view of connections; on
/// MySQL/MariaDB it creates `database` first (see [`role_url`]).
async fn observer_of(url: &str, database: &str) -> SqlStore {
    let observer = SqlStore::connect(url, &StoreOptions::default())
        .await
        .unwrap();
    if url.starts_with("mysql") {
        use tenure::store::sql::sqlx;
        sqlx::raw_sql(&format!("CREATE DATABASE IF NOT EXISTS {database}"))
            .execute(observer.pool())
            .await
            .unwrap();
    }
    observer
}

/// `url` for a store whose connections the server's own view tells apart:
/// on PostgreSQL by `application_name` (`name`), on MySQL/MariaDB by the
/// database they use (`database`, which the caller creates). Returns the
/// URL and `name`.
fn role_url(url: &str, database: &str, name: &str) -> (String, String) {
    let url = if url.starts_with("postgres") {
        format!("{url}?application_name={name}")
    } else if url.starts_with("mysql") {
        let (server, _) = url.rsplit_once('/').expect("a database in the URL");
        format!("{server}/{database}")
    } else {
        url.to_string()
    };
    (url, name.to_string())
}

/// The ids `sql`, given `value`, answers on the server's own view.
async fn server_ids(observer: &SqlStore, sql: &str, value: &str) -> Vec<i64> {
    use sqlx::Row;
    use tenure::store::sql::sqlx;
    sqlx::query(sql)
        .bind(value)
        .fetch_all(observer.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<i64, _>(0))
        .collect()
}

/// What each role holds, as the store counts it on every SQL database, as
/// PostgreSQL's `pg_stat_activity` counts it by application name and as
/// MariaDB's processlist counts it by database (leader and follower use a
/// database of their own): a leader keeps one connection for its tenure
/// (the same backend across renewals, long after a follower's has closed;
/// on MariaDB its statements, its named lock and its doorbell share it), a
/// follower holds none between its reads, and the leader's closes once it
/// releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_keeps_one_connection_and_a_follower_none_between_reads() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        let on_mysql = url.starts_with("mysql");
        let database = format!("tenure_roles_{run}");
        let observer = observer_of(&url, &database).await;
        let named = |role: &str| role_url(&url, &database, &format!("tenure-{role}-{run}"));
        let ((leader_url, leader_name), (follower_url, follower_name)) =
            (named("leader"), named("follower"));
        let leader = SqlStore::connect(&leader_url, &StoreOptions::default())
            .await
            .unwrap();
        let follower = SqlStore::connect(&follower_url, &StoreOptions::default())
            .await
            .unwrap();
        let on_postgres = url.starts_with("postgres");
        let key = ElectionKey::new("connections", format!("roles-{run}"));
        let claim = Claim {
            key: key.clone(),
            holder: format!("leader#{run}"),
            metadata: String::new(),
            ttl: Duration::from_secs(30),
        };
        let held = match leader.try_acquire(&claim).await {
            Ok(Acquire::Acquired(held)) => held,
            other => panic!("{url}: the leader's acquisition: {other:?}"),
        };
        let tenure = tenure_of(&held);
        let rec = follower.read(&key).await.unwrap();
        assert!(rec.is_some_and(|r| r.is_held()), "{url}");
        // Nothing in the follower's process subscribes, so it waits on no
        // named lock (MySQL/MariaDB) and listens to nothing (PostgreSQL).
        eventually(
            &format!("{url}: the follower's connection closes after its read"),
            async || follower.connections_held() == 0,
        )
        .await;
        if on_postgres {
            eventually(
                &format!("{url}: the server sees the follower's connection closed"),
                async || backends(&observer, &follower_name).await.is_empty(),
            )
            .await;
        }
        // The follower's closed soon after its read; the leader's is still
        // the one it acquired on, which holds its named lock and its
        // doorbell on MySQL/MariaDB.
        eventually(
            &format!("{url}: the leader holds one connection"),
            async || leader.connections_held() == 1,
        )
        .await;
        let before = leader.connections_opened();
        let server_view = async || {
            if on_postgres {
                backends(&observer, &leader_name).await
            } else if on_mysql {
                mysql_connections(&observer, &database).await
            } else {
                Vec::new()
            }
        };
        if on_mysql {
            // The doorbell settles in on the statements' connection.
            eventually(
                &format!("{url}: the server sees the follower's connection closed"),
                async || server_view().await.len() == 1,
            )
            .await;
        }
        let pids = server_view().await;
        if on_postgres || on_mysql {
            assert_eq!(pids.len(), 1, "{url}: the leader's connections: {pids:?}");
        }
        for _ in 0..3 {
            assert!(leader.renew(&tenure, claim.ttl).await.unwrap(), "{url}");
            assert_eq!(
                server_view().await,
                pids,
                "{url}: the leader's connections changed"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert_eq!(
            leader.connections_opened(),
            before,
            "{url}: renewals opened a connection"
        );
        assert!(leader.release(&tenure).await.unwrap());
        leader.flush().await.unwrap();
        eventually(
            &format!("{url}: the leader's connection closes after it released"),
            async || leader.connections_held() == 0,
        )
        .await;
        if on_postgres || on_mysql {
            eventually(
                &format!("{url}: the server sees the leader's connection closed"),
                async || server_view().await.is_empty(),
            )
            .await;
        }
        if on_mysql {
            use tenure::store::sql::sqlx;
            drop((leader, follower));
            sqlx::raw_sql(&format!("DROP DATABASE {database}"))
                .execute(observer.pool())
                .await
                .unwrap();
        }
    }
}

/// A process leading a thousand elections holds one connection, as the
/// store counts it and as the server sees it: their acquisitions, their
/// renewals (all at once, batched) and on MySQL/MariaDB their thousand named
/// locks share it, and none of it opens another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_elections_in_one_process_share_one_connection() {
    const ELECTIONS: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        let (on_postgres, on_mysql) = (url.starts_with("postgres"), url.starts_with("mysql"));
        if !on_postgres && !on_mysql {
            continue;
        }
        let database = format!("tenure_thousand_{run}");
        let observer = observer_of(&url, &database).await;
        let (leader_url, name) = role_url(&url, &database, &format!("tenure-thousand-{run}"));
        let leader = SqlStore::connect(&leader_url, &StoreOptions::default())
            .await
            .unwrap();
        let server_view = async || {
            if on_postgres {
                backends(&observer, &name).await
            } else {
                mysql_connections(&observer, &database).await
            }
        };
        let ttl = Duration::from_secs(60);
        let mut tenures = Vec::with_capacity(ELECTIONS);
        for i in 0..ELECTIONS {
            let key = ElectionKey::new("thousand", format!("e{i}-{run}"));
            tenures.push(leader_of(&leader, &key, ttl).await);
        }
        assert_eq!(leader.connections_held(), 1, "{url}");
        let opened = leader.connections_opened();
        eventually(
            &format!("{url}: the server sees one connection of the leader"),
            async || server_view().await.len() == 1,
        )
        .await;
        let ids = server_view().await;
        let renewed =
            futures_util::future::join_all(tenures.iter().map(|t| leader.renew(t, ttl))).await;
        assert!(
            renewed.iter().all(|r| matches!(r, Ok(true))),
            "{url}: a renewal failed"
        );
        assert_eq!(
            server_view().await,
            ids,
            "{url}: the leader's connections changed"
        );
        assert_eq!(leader.connections_held(), 1, "{url}");
        assert_eq!(
            leader.connections_opened(),
            opened,
            "{url}: renewals opened a connection"
        );
        for t in &tenures {
            assert!(leader.release(t).await.unwrap(), "{url}");
        }
        leader.flush().await.unwrap();
        eventually(
            &format!("{url}: the leader's connection closes once it leads nothing"),
            async || leader.connections_held() == 0,
        )
        .await;
        if on_mysql {
            use tenure::store::sql::sqlx;
            drop(leader);
            sqlx::raw_sql(&format!("DROP DATABASE {database}"))
                .execute(observer.pool())
                .await
                .unwrap();
        }
    }
}

/// A full server (another client took every connection it had left) does
/// not depose a healthy leader: it renews on the connection it kept for its
/// tenure; a follower whose connection had closed between its reads cannot
/// open another, and its error quotes the server ("too many clients", "Too
/// many connections"). Private servers, started with room for six
/// connections. On MariaDB the leader's doorbell sleeps on that connection
/// and no connection is left to interrupt it from: the renewals must still
/// come in time (the sleep ends before each renewal, and lasts a third of a
/// TTL at most, the first renewal's wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_does_not_depose_a_leader() {
    use tenure_testsupport::servers::Kind;
    full_server_keeps_its_leader(
        Kind::Postgres,
        &["-c", "max_connections=6"],
        "too many clients",
    )
    .await;
    full_server_keeps_its_leader(
        Kind::MariaDb,
        &["--max-connections=6"],
        "Too many connections",
    )
    .await;
}

async fn full_server_keeps_its_leader(
    kind: tenure_testsupport::servers::Kind,
    args: &[&str],
    refusal: &str,
) {
    use tenure::store::sql::sqlx::{self, Connection};
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    let options = ServerOptions::default().with_args(args);
    let Some(server) = Server::start_or_skip(kind, options, servers::required()) else {
        return;
    };
    let url = match kind {
        // MariaDB gives an account with SUPER (root) connections past the
        // limit: everyone here logs in as an ordinary user.
        Kind::MariaDb => {
            let mut root = sqlx::AnyConnection::connect(&server.url()).await.unwrap();
            sqlx::raw_sql(
                "CREATE USER 'app'@'%' IDENTIFIED BY 'pw-app'; \
                 GRANT ALL ON test.* TO 'app'@'%'",
            )
            .execute(&mut root)
            .await
            .unwrap();
            root.close().await.unwrap();
            format!("mysql://app:pw-app@127.0.0.1:{}/test", server.port)
        }
        _ => server.url(),
    };
    let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    let leader = SqlStore::connect(&url, &options).await.unwrap();
    let follower = SqlStore::connect(&url, &options).await.unwrap();
    let key = ElectionKey::new("connections", "full");
    let ttl = Duration::from_secs(2);
    let tenure = leader_of(&leader, &key, ttl).await;
    leader.flush().await.unwrap();
    assert!(follower.read(&key).await.unwrap().is_some());
    eventually(
        "the follower's connection closes after its read",
        async || follower.connections_held() == 0,
    )
    .await;
    // Take every connection left.
    let mut taken = Vec::new();
    let refused = loop {
        match sqlx::AnyConnection::connect(&url).await {
            Ok(conn) => taken.push(conn),
            Err(e) => break e.to_string(),
        }
        assert!(
            taken.len() < 10,
            "{kind:?}: the server took {} connections",
            taken.len()
        );
    };
    assert!(
        refused.contains(refusal),
        "{kind:?}: the filler was refused: {refused}"
    );
    // Three TTLs of renewals at a third of the TTL, all on the kept
    // connection, each well within the TTL, while the follower tries to
    // read.
    let renewals = async {
        for round in 0..9 {
            let sent = std::time::Instant::now();
            assert!(
                leader.renew(&tenure, ttl).await.unwrap(),
                "{kind:?}: renewal {round} on a full server"
            );
            let took = sent.elapsed();
            assert!(
                took < ttl / 2,
                "{kind:?}: renewal {round} took {took:?} on a full server"
            );
            tokio::time::sleep((ttl / 3).saturating_sub(took)).await;
        }
    };
    let (_, read) = tokio::join!(renewals, follower.read(&key));
    let e = read.expect_err("no connection is left to read on");
    assert!(
        e.to_string().contains(refusal),
        "{kind:?}: the follower's error quotes the server: {e}"
    );
    for conn in taken {
        conn.close().await.unwrap();
    }
    let rec = follower.read(&key).await.unwrap();
    assert!(rec.is_some_and(|r| r.is_held() && r.term == tenure.term));
    assert!(leader.release(&tenure).await.unwrap());
}

/// A PostgreSQL follower that becomes first in line replaces the plain
/// connection it read on with one that can also listen, and closes the
/// old one before it opens the new one: it never holds two. Checked where
/// holding two is refused: the follower connects as a role limited to one
/// connection (a private server), and its push channel still comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_follower_moving_into_line_never_holds_two_connections() {
    use tenure::store::sql::sqlx::{self, Connection};
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    let Some(server) = Server::start_or_skip(
        Kind::Postgres,
        ServerOptions::default(),
        servers::required(),
    ) else {
        return;
    };
    let url = server.url();
    let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    // Creates the tables the limited role is then allowed to use (a
    // superuser's connections are not limited).
    let leader_store = tenure::store::connect(&url, &options).await.unwrap();
    let mut admin = sqlx::postgres::PgConnection::connect(&url).await.unwrap();
    for grant in [
        "CREATE ROLE single LOGIN CONNECTION LIMIT 1",
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO single",
    ] {
        sqlx::query(grant).execute(&mut admin).await.unwrap();
    }
    admin.close().await.unwrap();
    let single = url.replacen("postgres://postgres@", "postgres://single@", 1);
    assert_ne!(single, url, "the role's URL");
    let ttl = Duration::from_secs(2);
    let leader = tenure::Elector::builder(leader_store)
        .election("single")
        .identity("leader")
        .ttl(ttl)
        .build()
        .unwrap();
    leader.acquired().await.unwrap();
    let store = tenure::store::connect(&single, &options).await.unwrap();
    let follower = tenure::Elector::builder(store.clone())
        .election("single")
        .identity("follower")
        .ttl(ttl)
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let health = store.push_health();
        if matches!(health, tenure::store::PushHealth::Up { .. }) {
            break;
        }
        assert!(
            start.elapsed() < ttl * 5,
            "the first in line listens on its one connection: {health}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = std::time::Instant::now();
    leader.shutdown().await.unwrap();
    tokio::time::timeout(ttl, follower.acquired())
        .await
        .expect("the follower leads within a TTL of the release")
        .unwrap();
    eprintln!("hand-over after the release: {:?}", released.elapsed());
    follower.shutdown().await.unwrap();
}

/// A MariaDB follower first in line holds one connection across its
/// timed reads: its named-lock wait ends just before each read is due and
/// the read runs on that connection, which then waits again. Checked where
/// a second connection is refused: the follower logs in as a user limited
/// to one (a private server); its reads must go through without opening
/// another, and a release must still wake it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_successor_reads_on_its_one_connection() {
    use tenure::store::sql::sqlx::{self, Connection};
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    let Some(server) =
        Server::start_or_skip(Kind::MariaDb, ServerOptions::default(), servers::required())
    else {
        return;
    };
    let url = server.url();
    let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
    // Root creates the tables; its connections are not limited.
    let leader = std::sync::Arc::new(SqlStore::connect(&url, &options).await.unwrap());
    let mut root = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE USER 'single'@'%' IDENTIFIED BY 'pw-single' WITH MAX_USER_CONNECTIONS 1; \
         GRANT ALL ON test.* TO 'single'@'%'",
    )
    .execute(&mut root)
    .await
    .unwrap();
    let single = format!("mysql://single:pw-single@127.0.0.1:{}/test", server.port);
    let successor = SqlStore::connect(&single, &options).await.unwrap();
    eventually(
        "the successor's connection closes after connecting",
        async || successor.connections_held() == 0,
    )
    .await;
    let key = ElectionKey::new("connections", "single");
    let ttl = Duration::from_secs(3);
    let tenure = leader_of(&leader, &key, ttl).await;
    let renewing = {
        let (leader, tenure) = (leader.clone(), tenure.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                assert!(leader.renew(&tenure, ttl).await.unwrap(), "renewal");
            }
        })
    };
    // Subscribed: this process's followers are first in line, and a read
    // of a held lease starts a wait on its leader's named lock.
    let mut changes = successor.subscribe().expect("MariaDB wakes followers");
    let first = successor.read(&key).await.unwrap().expect("a lease");
    let opened = successor.connections_opened();
    let mut connection_ids = async || {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE USER = 'single'",
        )
        .fetch_all(&mut root)
        .await
        .unwrap()
    };
    eventually("the wait takes the read's connection", async || {
        successor.connections_held() == 1
    })
    .await;
    let ids = connection_ids().await;
    assert_eq!(ids.len(), 1, "the successor's connections: {ids:?}");
    // Timed reads, as a follower first in line makes them: at the expiry
    // the last read found.
    let mut due = first.remaining;
    for round in 0..4 {
        tokio::time::sleep(due + Duration::from_millis(2)).await;
        let rec = successor
            .read(&key)
            .await
            .unwrap_or_else(|e| panic!("read {round} on the one connection: {e}"))
            .expect("a lease");
        assert!(rec.is_held(), "read {round}");
        due = rec.remaining;
        assert_eq!(
            successor.connections_opened(),
            opened,
            "read {round} opened a connection"
        );
        assert_eq!(
            connection_ids().await,
            ids,
            "read {round}: the connection changed"
        );
    }
    renewing.abort();
    // A release still wakes the successor at once, through its wait.
    while changes.try_recv().is_ok() {}
    assert!(leader.release(&tenure).await.unwrap());
    let released = std::time::Instant::now();
    tokio::time::timeout(ttl / 4, changes.recv())
        .await
        .expect("the release wakes the successor well before the expiry")
        .unwrap();
    eprintln!("woken after the release: {:?}", released.elapsed());
    let rec = successor.read(&key).await.unwrap().expect("a lease");
    assert!(!rec.is_held());
    root.close().await.unwrap();
}

/// `store` takes `key` for `ttl` as `leader#1`; its tenure.
async fn leader_of(store: &SqlStore, key: &ElectionKey, ttl: Duration) -> Tenure {
    let claim = Claim {
        key: key.clone(),
        holder: "leader#1".into(),
        metadata: String::new(),
        ttl,
    };
    match store.try_acquire(&claim).await {
        Ok(Acquire::Acquired(held)) => tenure_of(&held),
        other => panic!("{}: the leader's acquisition: {other:?}", store.describe()),
    }
}

fn tenure_of(rec: &tenure::store::LeaseRecord) -> Tenure {
    Tenure {
        key: rec.key.clone(),
        holder: rec.holder.clone().unwrap_or_default(),
        term: rec.term,
    }
}

/// A store built on the application's pool takes one connection from it
/// for its own statements; with every connection the pool can give held by
/// the application, the leader still renews within its deadline (it keeps
/// its connection for the tenure) and releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_on_the_applications_pool_keeps_leading_when_the_pool_is_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let run = format!("{:x}", std::process::id());
    for url in servers::sql_urls(dir.path()).await {
        // sqlx's drivers, which an application installs once (here tenure
        // does, as the other tests of this binary may have already).
        SqlStore::connect_lazy(&url, &StoreOptions::default()).unwrap();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_millis(500))
            .connect_lazy(&url)
            .unwrap();
        if url.starts_with("sqlite") {
            let refused = SqlStore::from_pool(pool, &StoreOptions::default()).await;
            let e = refused.expect_err("SQLite pools are refused").to_string();
            assert!(e.contains("SqlStore::connect"), "{e}");
            continue;
        }
        let store = SqlStore::from_pool(pool.clone(), &StoreOptions::default())
            .await
            .unwrap();
        let key = ElectionKey::new("from-pool", format!("exhausted-{run}"));
        let claim = Claim {
            key: key.clone(),
            holder: format!("app#{run}"),
            metadata: String::new(),
            ttl: Duration::from_secs(2),
        };
        let held = match store.try_acquire(&claim).await {
            Ok(Acquire::Acquired(held)) => held,
            other => panic!("{url}: acquisition on the application's pool: {other:?}"),
        };
        // The application takes every connection its pool can give.
        let mut taken = Vec::new();
        while let Ok(conn) = pool.acquire().await {
            taken.push(conn);
        }
        assert_eq!(taken.len(), 2, "{url}: the pool's two connections");
        let tenure = tenure_of(&held);
        for round in 0..3 {
            let renewed =
                tokio::time::timeout(Duration::from_secs(1), store.renew(&tenure, claim.ttl))
                    .await
                    .unwrap_or_else(|_| panic!("{url}: renewal {round} waited for the pool"));
            assert!(
                matches!(renewed, Ok(true)),
                "{url}: renewal {round} with the pool exhausted: {renewed:?}"
            );
        }
        assert!(store.release(&tenure).await.unwrap(), "{url}: release");
        drop(taken);
        pool.close().await;
    }
}

/// A network that swallows every byte (a blackhole: whatever is sent
/// meanwhile is lost, so a statement in flight never gets its answer) while
/// a leader's renewal and a member's heartbeat are sent, then heals. Their
/// callers gave up; the batches that carried them must not hold the
/// store's one connection waiting for an answer that will never come: the
/// next statement after the heal goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_lost_in_a_blackhole_does_not_hold_the_store_up() {
    use tenure::store::Member;
    use tenure_testsupport::proxy::Proxy;
    for url in [servers::postgres_url(), servers::mysql_url()] {
        let options = StoreOptions::default().with_connect_timeout(Duration::from_secs(2));
        if servers::connect_or_skip(&url, &options).await.is_none() {
            continue;
        }
        let (scheme, rest) = url.split_once("://").unwrap();
        let (auth, rest) = rest.split_once('@').unwrap();
        let (upstream, path) = rest.split_once('/').unwrap();
        let proxy = Proxy::start(upstream).await.unwrap();
        let via = format!("{scheme}://{auth}@127.0.0.1:{}/{path}", proxy.port);
        let store = SqlStore::connect(&via, &options).await.unwrap();
        let key = ElectionKey::new("blackhole", format!("{:x}", rand::random::<u32>()));
        let ttl = Duration::from_secs(30);
        let claim = Claim {
            key: key.clone(),
            holder: "leader#1".into(),
            metadata: String::new(),
            ttl,
        };
        let held = match store.try_acquire(&claim).await {
            Ok(Acquire::Acquired(held)) => held,
            other => panic!("{url}: the acquisition: {other:?}"),
        };
        let tenure = tenure_of(&held);
        let member = Member {
            key: key.clone(),
            holder: "follower#1".into(),
            metadata: String::new(),
            priority: 0,
        };
        proxy.set_blackhole(true);
        let gave_up = Duration::from_millis(300);
        let renewal = tokio::time::timeout(gave_up, store.renew(&tenure, ttl)).await;
        assert!(
            renewal.is_err(),
            "{url}: no answer in the blackhole: {renewal:?}"
        );
        let heartbeat = tokio::time::timeout(gave_up, store.heartbeat(&member, ttl)).await;
        assert!(
            heartbeat.is_err(),
            "{url}: no answer in the blackhole: {heartbeat:?}"
        );
        proxy.pass();
        let read = tokio::time::timeout(Duration::from_secs(5), store.read(&key))
            .await
            .unwrap_or_else(|_| panic!("{url}: no read 5 s after the network healed"))
            .unwrap();
        assert!(read.is_some_and(|r| r.term == tenure.term), "{url}");
        assert!(
            store.renew(&tenure, ttl).await.unwrap(),
            "{url}: renews again"
        );
        assert!(store.release(&tenure).await.unwrap(), "{url}");
    }
}
