//! Runs the conformance suite against every store: memory, SQLite, MariaDB,
//! PostgreSQL (directly and through a private PgBouncer in transaction
//! mode), Redis, and (feature `etcd`) a private etcd, single node and a
//! 3-member cluster with a member killed. One test per check and store,
//! named `<store>::<check>`: `cargo test --test conformance <check>` runs one
//! check on every store.
//!
//! Server stores are skipped with a printed reason on a laptop without them,
//! and fail the run in CI (`CI=true`).

use std::sync::{Arc, OnceLock};

use tenure::store::{memory::MemoryStore, DynStore, StoreOptions};
use tenure::testing::Conformance;
use tenure_testsupport::servers;

fn memory_suite() -> Conformance {
    // A memory store is private to one "connection", so share one instance.
    let store: DynStore = Arc::new(MemoryStore::new());
    Conformance::new("memory", move || {
        let s = store.clone();
        async move { s }
    })
}

fn sqlite_suite() -> Conformance {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("tenure.db").display());
    // Each factory call opens its own pool, like another process on the same
    // file. The factory keeps the directory for as long as the suite lives.
    Conformance::new("sqlite", move || {
        let _dir = &dir;
        let url = url.clone();
        async move {
            tenure::store::connect(&url, &StoreOptions::default())
                .await
                .expect("sqlite store")
        }
    })
}

async fn server(name: &'static str, url: String, options: StoreOptions) -> Option<Conformance> {
    // One first connection at a time: on a fresh server the first
    // connections create the tables, and concurrent CREATE TABLE IF NOT
    // EXISTS can fail on PostgreSQL. The checks then connect concurrently.
    static FIRST: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    {
        let _one = FIRST.lock().await;
        servers::connect_or_skip(&url, &options).await?;
    }
    Some(Conformance::new(name, move || {
        let url = url.clone();
        let options = options.clone();
        async move {
            tenure::store::connect(&url, &options)
                .await
                .expect("server store")
        }
    }))
}

fn redis_options() -> StoreOptions {
    // A prefix of its own keeps `list` to this run's elections on a shared server.
    static PREFIX: OnceLock<String> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| format!("conformance{:08x}_", rand::random::<u32>()));
    StoreOptions::default().with_table_prefix(prefix.clone())
}

tenure::conformance_tests!(memory, async { memory_suite() });
tenure::conformance_tests!(sqlite, async { sqlite_suite() });
tenure::conformance_tests!(
    mariadb,
    server("mariadb", servers::mysql_url(), StoreOptions::default())
);
tenure::conformance_tests!(
    postgres,
    server("postgres", servers::postgres_url(), StoreOptions::default())
);
tenure::conformance_tests!(
    redis,
    server("redis", servers::redis_url(), redis_options())
);

#[cfg(feature = "etcd")]
async fn etcd_connect(url: String) -> DynStore {
    tenure::store::connect(&url, &StoreOptions::default())
        .await
        .expect("etcd store")
}

/// A private single-node etcd on a free loopback port, one per check.
#[cfg(feature = "etcd")]
async fn etcd_suite() -> Option<Conformance> {
    use tenure_testsupport::EtcdCluster;
    let server = EtcdCluster::start_or_skip(1, servers::required())?;
    let url = server.url();
    Some(
        Conformance::new("etcd", move || {
            let _server = &server;
            etcd_connect(url.clone())
        })
        .with_handovers(200),
    )
}

/// A private 3-member etcd cluster, one per check; one member is SIGKILLed
/// after the check's first store connected, so the check runs on the
/// remaining two with a client that knew the dead member.
#[cfg(feature = "etcd")]
async fn etcd_cluster_suite() -> Option<Conformance> {
    use tenure_testsupport::EtcdCluster;
    let mut cluster = EtcdCluster::start_or_skip(3, servers::required())?;
    let url = cluster.url();
    let first = etcd_connect(url.clone()).await;
    // Member 0 is usually the raft leader of a fresh cluster; killing it
    // also forces a leader election.
    cluster.kill(0);
    eprintln!("etcd_cluster: killed member 0 (SIGKILL)");
    let first = std::sync::Mutex::new(Some(first));
    Some(
        Conformance::new("etcd-cluster", move || {
            let _cluster = &cluster;
            let opened = first.lock().unwrap_or_else(|p| p.into_inner()).take();
            let url = url.clone();
            async move {
                match opened {
                    Some(store) => store,
                    None => etcd_connect(url).await,
                }
            }
        })
        .with_handovers(200),
    )
}

#[cfg(feature = "etcd")]
tenure::conformance_tests!(etcd, etcd_suite());
#[cfg(feature = "etcd")]
tenure::conformance_tests!(etcd_cluster, etcd_cluster_suite());

/// One private ZooKeeper per test binary (a JVM takes seconds to start):
/// the checks use elections of their own, so they can share it.
#[cfg(feature = "zookeeper")]
fn zk_shared(n: usize) -> Option<&'static tenure_testsupport::ZkEnsemble> {
    use tenure_testsupport::ZkEnsemble;
    static ONE: OnceLock<Option<ZkEnsemble>> = OnceLock::new();
    static THREE: OnceLock<Option<ZkEnsemble>> = OnceLock::new();
    let cell = if n == 1 { &ONE } else { &THREE };
    cell.get_or_init(|| {
        let mut zk = ZkEnsemble::start_or_skip(n, servers::required())?;
        if n > 1 {
            // A 3-server ensemble with one server SIGKILLed: clients that
            // list it must move on, and two servers still form a quorum.
            zk.kill(0);
            eprintln!("zookeeper_ensemble: killed server 0 (SIGKILL)");
        }
        Some(zk)
    })
    .as_ref()
}

#[cfg(feature = "zookeeper")]
async fn zk_suite(name: &'static str, n: usize) -> Option<Conformance> {
    let url = tokio::task::spawn_blocking(move || zk_shared(n).map(|z| z.url()))
        .await
        .expect("start ZooKeeper")?;
    Some(
        Conformance::new(name, move || {
            let url = url.clone();
            async move {
                tenure::store::connect(&url, &StoreOptions::default())
                    .await
                    .expect("zookeeper store")
            }
        })
        .with_handovers(200),
    )
}

#[cfg(feature = "zookeeper")]
tenure::conformance_tests!(zookeeper, zk_suite("zookeeper", 1));
#[cfg(feature = "zookeeper")]
tenure::conformance_tests!(zookeeper_ensemble, zk_suite("zookeeper-ensemble", 3));

/// One private PgBouncer in transaction mode per test binary, in front of
/// the shared PostgreSQL: the checks use elections of their own, and a
/// table prefix of their own, created through the pooler.
fn pgbouncer_url() -> Option<String> {
    use tenure_testsupport::PgBouncer;
    static ONE: OnceLock<Option<PgBouncer>> = OnceLock::new();
    ONE.get_or_init(|| PgBouncer::start_or_skip(&servers::postgres_url(), 10))
        .as_ref()
        .map(PgBouncer::url)
}

tenure::conformance_tests!(pgbouncer, async {
    let url = tokio::task::spawn_blocking(pgbouncer_url)
        .await
        .expect("start PgBouncer")?;
    server(
        "pgbouncer",
        url,
        StoreOptions::default().with_table_prefix("bouncer_"),
    )
    .await
});

// The same PgBouncer, with `LISTEN` on a direct connection (`push_url`).
tenure::conformance_tests!(pgbouncer_push, async {
    let url = tokio::task::spawn_blocking(pgbouncer_url)
        .await
        .expect("start PgBouncer")?;
    let direct: String =
        url::form_urlencoded::byte_serialize(servers::postgres_url().as_bytes()).collect();
    server(
        "pgbouncer-push",
        format!("{url}&push_url={direct}"),
        StoreOptions::default().with_table_prefix("bouncer_"),
    )
    .await
});
