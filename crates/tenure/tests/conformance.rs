//! Runs the conformance suite against every store: memory, SQLite, MariaDB, PostgreSQL, Redis.
//! Server stores are skipped with a printed reason on a laptop without them, and
//! fail the run in CI (`CI=true`).

use std::sync::Arc;

use tenure::store::{memory::MemoryStore, DynStore, StoreOptions};
use tenure::testing::{servers, Conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory() {
    let store: DynStore = Arc::new(MemoryStore::new());
    Conformance::new("memory", move || {
        let s = store.clone();
        async move { s }
    })
    .run_all()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("tenure.db").display());
    // Each factory call opens its own pool, like another process on the same file.
    Conformance::new("sqlite", move || {
        let url = url.clone();
        async move {
            tenure::store::connect(&url, &StoreOptions::default())
                .await
                .expect("sqlite store")
        }
    })
    .run_all()
    .await;
}

async fn server(name: &'static str, url: String) {
    server_with(name, url, StoreOptions::default()).await;
}

async fn server_with(name: &'static str, url: String, options: StoreOptions) {
    if servers::connect_or_skip(&url, &options).await.is_none() {
        return;
    }
    Conformance::new(name, move || {
        let url = url.clone();
        let options = options.clone();
        async move {
            tenure::store::connect(&url, &options)
                .await
                .expect("server store")
        }
    })
    .run_all()
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb() {
    server("mariadb", servers::mysql_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres() {
    server("postgres", servers::postgres_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis() {
    // A prefix of its own keeps `list` to this run's elections on a shared server.
    let prefix = format!("conformance{:08x}_", rand::random::<u32>());
    server_with(
        "redis",
        servers::redis_url(),
        StoreOptions::default().with_table_prefix(prefix),
    )
    .await;
}
