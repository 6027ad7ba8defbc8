//! One SQL implementation of [`LeaseStore`](crate::store::LeaseStore) for SQLite, MySQL/MariaDB and PostgreSQL.
//!
//! The protocol is the same on all three; each database's folder holds its
//! spelling of the statements and its wake-up mechanism. Queries
//! are built at runtime (no compile-time database needed) and run through sqlx's
//! `Any` driver, so one code path serves every database.
//!
//! Every decision is one conditional `UPDATE` judged by rows matched, with expiry
//! judged by the server clock inside it:
//!
//! | operation | condition |
//! |---|---|
//! | acquire | `holder = '' OR expires_us <= now` (then `term = term + 1`) |
//! | renew   | `holder = me AND term = my_term AND expires_us > now` |
//! | release | `holder = me AND term = my_term` |
//!
//! | file | job |
//! |---|---|
//! | `connect.rs` | URL schemes, pool options, the connection probe |
//! | `dialect.rs` | the statements' shapes, and the `Spelling` each database gives them |
//! | `wake.rs` | which wake-up mechanism a store has, and what the store tells it |
//! | `statements.rs` | every statement's text, built once per store; the one function every statement passes through |
//! | `store.rs` | the [`LeaseStore`](crate::store::LeaseStore) operations |
//! | `decode.rs` | rows as lease, member and history records |
//! | `after.rs` | the queue of notifications and history rows that follow a change |
//! | `kept.rs` | the connection the lease statements keep out of the pool |
//! | `batch.rs`, `heartbeats.rs`, `reaps.rs` | many renewals, heartbeats or reaps in one statement |
//! | `fenced.rs` | transactions fenced by the lease |
//! | `runs.rs`, `run_statements.rs` | run records (`<prefix>runs`), written by compare-and-set |
//! | `schema.rs` | tables, schema versions and upgrades |
//! | `errors.rs` | database errors as [`crate::Error`]s that name the fix |
//! | `tls.rs` | TLS parameters of MySQL/MariaDB and PostgreSQL URLs |
//! | `postgres/` | PostgreSQL: its spelling (clock CTE, `$n` placeholders, `pg_notify`, a follower's heartbeat and read in one statement), LISTEN wake-ups |
//! | `mysql/` | MySQL/MariaDB: its spelling (`ON DUPLICATE KEY`, collations, MariaDB's one-statement heartbeat), named-lock wake-ups, doorbells |
//! | `sqlite/` | SQLite: its spelling, pragmas and probe, wake-ups from file events |

mod after;
mod batch;
mod connect;
mod decode;
mod dialect;
mod errors;
mod fenced;
mod heartbeats;
mod kept;
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql;
#[cfg(not(feature = "mysql"))]
mod mysql;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(not(feature = "postgres"))]
mod postgres;
mod reaps;
mod run_statements;
mod runs;
mod schema;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;
#[cfg(not(feature = "sqlite"))]
mod sqlite;
mod statements;
mod store;
#[cfg(feature = "tls")]
mod tls;
mod wake;

use std::sync::{Arc, OnceLock};

use sqlx::AnyPool;
use tokio::sync::mpsc::UnboundedSender;

pub use fenced::FencedTransaction;
pub use schema::SCHEMA_VERSION;
/// The sqlx crate, for the statements of [`SqlStore::fenced`] and
/// [`SqlStore::pool`] (`Any` driver).
pub use sqlx;

use self::after::Queued;
use self::dialect::Dialect;
use self::errors::map_err;
use self::statements::Statements;
use crate::error::{Error, Result};
use crate::store::Tenure;

/// A lease store in a SQL database.
///
/// ```no_run
/// # async fn demo() -> tenure::Result<()> {
/// use tenure::store::{sql::SqlStore, StoreOptions};
/// let store = SqlStore::connect("sqlite://tenure.db", &StoreOptions::default()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SqlStore {
    pool: AnyPool,
    dialect: Dialect,
    prefix: String,
    statements: Arc<Statements>,
    described: String,
    /// How followers of this database are woken: the one part that
    /// differs by database beyond the statements' spelling (`wake.rs`).
    wake: Arc<wake::Wake>,
    /// The connection that lease statements hand back to, not to the pool.
    kept: Arc<kept::Kept>,
    batcher: Arc<batch::Batcher>,
    heartbeats: Arc<crate::store::util::gather::Batched<heartbeats::Heartbeats>>,
    reaps: Arc<crate::store::util::gather::Batched<reaps::Reaps>>,
    history_retention: u64,
    after_queue: OnceLock<UnboundedSender<Queued>>,
}

impl Drop for SqlStore {
    fn drop(&mut self) {
        self.wake.stop();
    }
}

impl SqlStore {
    /// The DDL that creates this store's tables, for a DBA to apply by hand.
    /// For `mysql://` it asks the server whether it is MariaDB or MySQL (their
    /// collation names differ), so it needs a connection.
    pub async fn schema_sql(&self) -> Result<Vec<String>> {
        let server = schema::server_kind(&self.pool, self.dialect)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(schema::ddl(self.dialect, &self.prefix, server))
    }

    /// Creates or upgrades the tables (idempotent).
    pub async fn migrate(&self) -> Result<()> {
        self.prepare_schema(true).await
    }

    async fn prepare_schema(&self, create: bool) -> Result<()> {
        let prepared = schema::prepare(
            &self.pool,
            self.dialect,
            &self.prefix,
            create,
            &self.described,
        )
        .await;
        match prepared {
            Err(e) => Err(self.why_no_connection(e).await),
            ok => ok,
        }
    }

    /// The pool retries a connection the server refuses as busy (PostgreSQL
    /// "too many clients", a role's connection limit) until its timeout and
    /// then reports only that it timed out. For such an error `e`, opens one
    /// connection outside the pool to learn the server's own words, and
    /// returns the error that quotes them; otherwise `e`.
    async fn why_no_connection(&self, e: Error) -> Error {
        use sqlx::ConnectOptions;
        let timed_out = std::error::Error::source(&e)
            .and_then(|s| s.downcast_ref::<sqlx::Error>())
            .is_some_and(|s| matches!(s, sqlx::Error::PoolTimedOut));
        if !timed_out {
            return e;
        }
        let options = self.pool.connect_options();
        let wait = self.pool.options().get_acquire_timeout();
        match tokio::time::timeout(wait, options.connect()).await {
            Ok(Err(refused @ sqlx::Error::Database(_))) => self.wrap(refused),
            Ok(Ok(conn)) => {
                use sqlx::Connection;
                let _ = conn.close().await;
                e
            }
            _ => e,
        }
    }

    /// The connection pool, for the application's own statements on the same
    /// database (unfenced; for fenced ones see [`fenced`](Self::fenced)).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The database kind: `"sqlite"`, `"mysql"` or `"postgres"`, for
    /// application SQL that differs between them.
    pub fn backend(&self) -> &'static str {
        self.dialect.backend()
    }

    /// Begins a transaction that commits only while `tenure` holds the lease.
    ///
    /// The transaction locks the lease row (SQLite: the database) after checking
    /// `holder/term/not expired` by the server's clock, so no takeover can commit
    /// until this transaction ends: work committed through it is fenced. Returns
    /// [`Error::NotLeader`] if the lease is no longer held.
    pub async fn begin_fenced(&self, tenure: &Tenure) -> Result<FencedTransaction> {
        fenced::begin(self, tenure).await
    }

    fn wrap(&self, e: sqlx::Error) -> Error {
        map_err(&self.described, &self.prefix, e)
    }
}
