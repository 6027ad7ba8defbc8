//! Fenced transactions (DESIGN rule 7) on every SQL store: work commits only
//! under a live lease, and a takeover cannot commit while fenced work is open.

use std::time::{Duration, Instant};

use sqlx::Executor;
use tenure::store::sql::SqlStore;
use tenure::store::{Acquire, Claim, ElectionKey, History, LeaseStore, StoreOptions, Tenure};
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
        let takeover = |b: SqlStore| {
            let key = key.clone();
            tokio::spawn(async move {
                let result = b
                    .try_acquire(&claim(&key, "b#1", Duration::from_secs(30)))
                    .await;
                (result.map(|r| (r, Instant::now())), b)
            })
        };
        let committed_at;
        let b = if url.starts_with("sqlite:") {
            // One writer at a time: the takeover waits for the write lock.
            let waiting = takeover(b);
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                !waiting.is_finished(),
                "[{url}] a takeover must wait for the open fenced transaction"
            );
            committed_at = Instant::now();
            tx.commit().await.unwrap();
            let (result, b) = waiting.await.unwrap();
            let (result, done_at) = result.unwrap();
            assert!(
                matches!(result, Acquire::Acquired(ref r) if r.term == rec.term + 1),
                "[{url}] b takes over after the commit: {result:?}"
            );
            assert!(
                done_at >= committed_at,
                "[{url}] takeover finished before the fenced commit"
            );
            b
        } else {
            // The server ends the transaction once it idles past the lease
            // it began under (MySQL/MariaDB: rounded up to whole seconds):
            // the work rolls back, and the lease is free.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let refused = tx.commit().await;
            assert!(
                refused.is_err(),
                "[{url}] fenced work idle past its lease must not commit"
            );
            committed_at = Instant::now();
            b
        };
        let (result, b) = takeover(b).await.unwrap();
        let (result, done_at) = result.unwrap();
        if !url.starts_with("sqlite:") {
            assert!(
                matches!(result, Acquire::Acquired(ref r) if r.term == rec.term + 1),
                "[{url}] b takes over after the work ended: {result:?}"
            );
            assert!(done_at >= committed_at);
        }
        drop(b);
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

/// The environment variable that makes [`frozen_holder_process`] the
/// holder of [`a_holder_frozen_inside_fenced_work_does_not_block_failover`]:
/// `url|namespace|table`.
const FROZEN_HOLDER: &str = "TENURE_TEST_FROZEN_HOLDER";

/// The holder process of the frozen-holder test, run by that test as a
/// child (this test binary, filtered to this test, with [`FROZEN_HOLDER`]
/// set); without the variable it does nothing. It takes the lease (2 s),
/// opens fenced work that writes one row, says so, and waits for a line on
/// stdin (meanwhile the test stops it with SIGSTOP), then tries to commit
/// and says what came of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_holder_process() {
    let Ok(spec) = std::env::var(FROZEN_HOLDER) else {
        return;
    };
    let mut parts = spec.split('|');
    let (url, namespace, table) = (
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
        parts.next().unwrap().to_string(),
    );
    let store = SqlStore::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new(namespace, "job");
    let Acquire::Acquired(rec) = store
        .try_acquire(&claim(&key, "frozen#1", Duration::from_secs(2)))
        .await
        .unwrap()
    else {
        panic!("the frozen holder acquires a fresh election");
    };
    store.flush().await.unwrap();
    let tenure = Tenure {
        key,
        holder: "frozen#1".into(),
        term: rec.term,
    };
    let mut tx = store.begin_fenced(&tenure).await.unwrap();
    tx.connection()
        .execute(format!("INSERT INTO {table} (term) VALUES ({})", rec.term).as_str())
        .await
        .unwrap();
    println!("inside {}", rec.term);
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    match tx.commit().await {
        Ok(()) => println!("committed"),
        Err(e) => println!("refused: {e}"),
    }
}

/// A leader frozen (SIGSTOP: a paused VM, a debugger, a long GC pause)
/// while its fenced transaction holds the lease row: the server ends that
/// transaction by the lease's expiry, a successor takes over within about a
/// TTL of it, no acquisition waits for the frozen one's lock (each answers
/// within a second), every term handed out is in the history, and the
/// frozen work, resumed, commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_inside_fenced_work_does_not_block_failover() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite's write lock is the file's: a frozen holder blocks it (see
    // the SQLite store's documentation), so only the servers here.
    let mut urls: Vec<String> = servers::sql_urls(dir.path())
        .await
        .into_iter()
        .filter(|u| !u.starts_with("sqlite:"))
        .collect();
    let bouncer = urls
        .contains(&servers::postgres_url())
        .then(|| tenure_testsupport::PgBouncer::start_or_skip(&servers::postgres_url(), 4))
        .flatten();
    urls.extend(bouncer.as_ref().map(|b| b.url()));
    for url in urls {
        frozen_holder_on(&url).await;
    }
}

async fn frozen_holder_on(url: &str) {
    use std::io::{BufRead, Write};
    let ttl = Duration::from_secs(2);
    let store = SqlStore::connect(url, &StoreOptions::default())
        .await
        .unwrap();
    let namespace = format!("frozen-{}", rand_suffix());
    let key = ElectionKey::new(namespace.clone(), "job");
    let table = format!("frozen_work_{}", rand_suffix());
    store
        .pool()
        .execute(format!("CREATE TABLE {table} (term BIGINT NOT NULL)").as_str())
        .await
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "frozen_holder_process", "--nocapture"])
        .env(FROZEN_HOLDER, format!("{url}|{namespace}|{table}"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // A failed assertion must not leave the holder stopped, its
    // transaction open: SIGKILL ends a stopped process too.
    struct KillOnDrop(libc::pid_t);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            // SAFETY: kill(2) on this test's own child.
            unsafe { libc::kill(self.0, libc::SIGKILL) };
        }
    }
    let _kill = KillOnDrop(pid);
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let next_line = |what: &[&str]| loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("[{url}] the holder never said {what:?}"));
        if what.iter().any(|w| line.starts_with(w)) {
            return line;
        }
    };
    let inside = next_line(&["inside"]);
    let held_term: u64 = inside["inside ".len()..].parse().unwrap();
    // SAFETY: kill(2) on this test's own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let frozen_at = Instant::now();

    // Campaign as a follower would, at a tenth of a TTL.
    let bound = ttl * 3;
    let taken = loop {
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            store.try_acquire(&claim(&key, "live#1", ttl)),
        )
        .await;
        let waited = asked.elapsed();
        // MySQL's and MariaDB's lock waits are a second, PostgreSQL's none;
        // the server's default (50 s) would be far above the bound, which
        // leaves room for a busy machine.
        assert!(
            waited < Duration::from_secs(3),
            "[{url}] an acquisition waited {waited:?} behind the frozen holder's lock"
        );
        match answer.unwrap() {
            Ok(Acquire::Acquired(rec)) => break rec,
            Ok(Acquire::Held(_)) | Err(_) => {}
        }
        assert!(
            frozen_at.elapsed() < bound,
            "[{url}] no takeover {:?} after the holder froze (TTL {ttl:?})",
            frozen_at.elapsed()
        );
        tokio::time::sleep(ttl / 10).await;
    };
    println!(
        "[{url}] taken over {:?} after the holder froze (TTL {ttl:?})",
        frozen_at.elapsed()
    );
    assert_eq!(
        taken.term,
        held_term + 1,
        "[{url}] no term was handed out in between"
    );
    store.flush().await.unwrap();
    let history = store.history(&key, 10).await.unwrap();
    let terms: Vec<u64> = history.iter().map(|h| h.term).collect();
    assert_eq!(
        terms,
        vec![taken.term, held_term],
        "[{url}] every term is in the history: {history:?}"
    );

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    child.stdin.take().unwrap().write_all(b"commit\n").unwrap();
    let outcome = next_line(&["committed", "refused"]);
    assert!(
        outcome.starts_with("refused"),
        "[{url}] the frozen work must not commit after the takeover: {outcome}"
    );
    let _ = child.wait();
    let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(
        rows, 0,
        "[{url}] nothing of the frozen work is in the table"
    );
    store
        .pool()
        .execute(format!("DROP TABLE {table}").as_str())
        .await
        .unwrap();
}
