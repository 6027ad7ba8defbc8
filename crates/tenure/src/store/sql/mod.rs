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
//! | `connection.rs` | the one connection the store's own statements share: kept while leading or listening, closed when idle otherwise |
//! | `conn.rs` | that connection as statements see it: any database's, or PostgreSQL's that also listens |
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
mod conn;
mod connect;
mod connection;
mod decode;
mod dialect;
mod errors;
mod fenced;
mod heartbeats;
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

pub(crate) use errors::is_server_full;
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
    /// The one connection the store's own statements share (`connection.rs`).
    own: Arc<connection::OneConnection>,
    batcher: Arc<batch::Batcher>,
    heartbeats: Arc<crate::store::util::gather::Batched<heartbeats::Heartbeats>>,
    reaps: Arc<crate::store::util::gather::Batched<reaps::Reaps>>,
    history_retention: u64,
    after_queue: OnceLock<UnboundedSender<Queued>>,
    /// A pooler between this store and PostgreSQL, as the URL declares it.
    pooler: postgres::pooler::Pooler,
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
        // Only MySQL's DDL depends on the server; elsewhere nothing is
        // opened (nor, on SQLite, created).
        let server = match self.dialect {
            Dialect::MySql => {
                let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
                let server = schema::server_kind(lent.conn(), self.dialect).await;
                lent.keep_if_ok(server).await.map_err(|e| self.wrap(e))?
            }
            _ => dialect::ServerKind::Other,
        };
        Ok(schema::ddl(self.dialect, &self.prefix, server))
    }

    /// Creates or upgrades the tables (idempotent).
    pub async fn migrate(&self) -> Result<()> {
        self.prepare_schema(true).await
    }

    async fn prepare_schema(&self, create: bool) -> Result<()> {
        // Statements that fail on purpose (a table that does not exist
        // yet) would abort a transaction: none here.
        let mut lent = self
            .own
            .lend_for_simple_statements()
            .await
            .map_err(|e| self.wrap(e))?;
        let prepared = schema::prepare(
            lent.conn(),
            self.dialect,
            &self.prefix,
            create,
            &self.described,
        )
        .await;
        self.kept(lent, prepared).await
    }

    /// How many connections to the database this store holds open now:
    /// the one its own statements share (kept while this process leads or
    /// subscribes to pushes, otherwise open only around its statements),
    /// and those its wake-ups hold (PostgreSQL's `LISTEN` to a `push_url`
    /// while anything subscribes, elsewhere carried by the statement
    /// connection; MySQL/MariaDB's lock waits, not an observer's doorbell;
    /// a leader's doorbell sleeps on the statement connection). Fenced transactions and the application's
    /// statements on [`pool`](Self::pool) are not counted.
    ///
    /// ```no_run
    /// # async fn demo() -> tenure::Result<()> {
    /// use tenure::store::{sql::SqlStore, StoreOptions};
    /// let store = SqlStore::connect("sqlite://tenure.db", &StoreOptions::default()).await?;
    /// println!("connections: {} held", store.connections_held());
    /// # Ok(()) }
    /// ```
    pub fn connections_held(&self) -> usize {
        usize::from(self.own.is_open()) + self.wake.connections_held()
    }

    /// How many times this store opened the connection its own statements
    /// share: once while it stays kept (leading, subscribed); otherwise
    /// once per read, or series of statements less than 50 ms apart.
    pub fn connections_opened(&self) -> u64 {
        self.own.opened()
    }

    /// What this store's URL declares of a connection pooler between it
    /// and PostgreSQL (`pooler=transaction`, `push_url=`), and where
    /// `LISTEN` goes because of it; `None` without one. For `tenure status`.
    ///
    /// ```no_run
    /// # async fn demo() -> tenure::Result<()> {
    /// use tenure::store::{sql::SqlStore, StoreOptions};
    /// let url = "postgres://app@pgbouncer:6432/app?pooler=transaction";
    /// let store = SqlStore::connect(url, &StoreOptions::default()).await?;
    /// if let Some(pooler) = store.pooler() {
    ///     println!("pooler: {pooler}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn pooler(&self) -> Option<String> {
        self.pooler.describe()
    }

    /// How many connections the server counts as tenure's, where it can
    /// tell: PostgreSQL counts the connections to this database whose
    /// `application_name` is `tenure` (the name every tenure process gives
    /// unless its URL sets another), from every process. `None` elsewhere.
    pub async fn server_connections(&self) -> Result<Option<u64>> {
        if self.dialect != Dialect::Postgres {
            return Ok(None);
        }
        use self::connection::OnOwn;
        let row = sqlx::query(
            "SELECT CAST(count(*) AS BIGINT) FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
        )
        .bind(connect::APPLICATION_NAME)
        .fetch_optional_on(&self.own)
        .await
        .map_err(|e| self.wrap(e))?;
        use sqlx::Row;
        let count: i64 = match row {
            Some(row) => row.try_get(0).map_err(|e| self.wrap(e))?,
            None => 0,
        };
        Ok(Some(u64::try_from(count).unwrap_or(0)))
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

    /// `result`, keeping the lent connection if it is `Ok` (and
    /// committing, where each lend is a transaction: a failed commit is
    /// the error); otherwise the connection is closed.
    async fn kept<T>(&self, lent: connection::Lent, result: Result<T>) -> Result<T> {
        let value = result?;
        lent.keep().await.map_err(|e| self.wrap(e))?;
        Ok(value)
    }
}
