//! Where the shared test servers are, and whether their absence fails the run.
//!
//! Tests that need a server of their own (TLS, crashes, etcd) start a private
//! one with the workspace's dev-only crate `tenure-testsupport`.

use crate::store::{connect, DynStore, StoreOptions};

/// MariaDB/MySQL URL for tests: `TENURE_TEST_MYSQL`, default the local server.
pub fn mysql_url() -> String {
    std::env::var("TENURE_TEST_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// PostgreSQL URL for tests: `TENURE_TEST_POSTGRES`, default the local server.
pub fn postgres_url() -> String {
    std::env::var("TENURE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Redis URL for tests: `TENURE_TEST_REDIS`, default the local server's database 0.
pub fn redis_url() -> String {
    std::env::var("TENURE_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into())
}

/// True when a missing server must fail the test run: in CI (`CI=true`) or
/// when `TENURE_REQUIRE_SERVERS=1`.
pub fn required() -> bool {
    std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Connects to a test server, or returns `None` after printing why the test
/// is skipped. Panics instead when servers are [`required`].
pub async fn connect_or_skip(url: &str, options: &StoreOptions) -> Option<DynStore> {
    match connect(url, options).await {
        Ok(s) => Some(s),
        Err(e) if required() => panic!(
            "test server {} is required (CI=true or TENURE_REQUIRE_SERVERS=1) but unusable: {e}",
            crate::store::redact_url(url)
        ),
        Err(e) => {
            eprintln!(
                "SKIPPED: server {} unavailable: {e}",
                crate::store::redact_url(url)
            );
            None
        }
    }
}

/// The SQL stores to run a test on: a fresh SQLite file `sql.db` in `dir`,
/// then the MariaDB and PostgreSQL test servers where they run (a missing
/// one is skipped, or fails the run when servers are [`required`]).
pub async fn sql_urls(dir: &std::path::Path) -> Vec<String> {
    let mut urls = vec![format!("sqlite://{}", dir.join("sql.db").display())];
    for url in [mysql_url(), postgres_url()] {
        if connect_or_skip(&url, &StoreOptions::default())
            .await
            .is_some()
        {
            urls.push(url);
        }
    }
    urls
}
