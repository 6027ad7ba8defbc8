//! Connecting: URL schemes, the pool and its options, and the probe that
//! says why a server cannot be reached (SQLite's pragmas and probe are in
//! `sqlite/connect.rs`). TLS parameters are
//! checked in `tls.rs`.

use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::ConnectOptions;

use super::dialect::Dialect;
use super::postgres::pooler::Pooler;
use super::statements::Statements;
#[cfg(feature = "tls")]
use super::tls;
use super::{batch, SqlStore};
use crate::error::{Error, Result};
use crate::names::validate_table_prefix;
use crate::store::{redact_url, StoreOptions};

fn install_drivers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An application may have installed its own set already; then connecting
        // fails with sqlx's "no driver" error for schemes it left out, which we
        // report. Installing twice is not worth a panic.
        let _ = sqlx::any::install_drivers(&[
            #[cfg(feature = "sqlite")]
            sqlx::sqlite::any::DRIVER,
            #[cfg(feature = "mysql")]
            sqlx::mysql::any::DRIVER,
            #[cfg(feature = "postgres")]
            sqlx::postgres::any::DRIVER,
        ]);
    });
}

impl SqlStore {
    /// Connects to the database at `url`, checks the schema and creates it if
    /// `options.auto_migrate` is set and the tables are missing.
    ///
    /// Schemes: `sqlite://path` (created if missing), `mysql://`, `mariadb://`,
    /// `postgres://`, `postgresql://`.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let store = Self::connect_lazy(url, options)?;
        #[cfg(feature = "sqlite")]
        if store.dialect == Dialect::Sqlite && !options.auto_migrate {
            super::sqlite::exists(url, &store.described)?;
        }
        store.probe(url, options.connect_timeout).await?;
        store.prepare_schema(options.auto_migrate).await?;
        // Which statements a follower's heartbeat and read take (MariaDB
        // ≥ 10.5: one). A failure here is asked again at the first use.
        #[cfg(feature = "mysql")]
        if store.dialect == Dialect::MySql {
            store.detect_returning().await;
        }
        Ok(store)
    }

    /// Opens one connection outside the pool: the pool would retry a refused
    /// connection until its timeout and report only "timed out", hiding the
    /// cause (refused, unknown host, bad password) that the user needs to see.
    async fn probe(&self, url: &str, timeout: Duration) -> Result<()> {
        use sqlx::Connection;
        let (_, driver_url, pooler) = parse_url(url)?;
        let dialect = self.dialect;
        let push_url = pooler.push_url;
        // The server's "full" is asked again until shortly before the
        // timeout, and then reported in its words.
        let until = tokio::time::Instant::now() + timeout.mul_f64(0.8);
        let probe = async move {
            let mut conn = connect_when_room(&driver_url, until).await?;
            if dialect == Dialect::Sqlite {
                super::sqlite::probe(&mut conn).await?;
            }
            let _ = conn.close().await;
            // LISTEN's own URL: a mistake there shows now, not as a
            // push channel that never opens.
            if let Some(push_url) = &push_url {
                connect_when_room(push_url, until).await?.close().await?;
            }
            Ok::<_, sqlx::Error>(())
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok(())) => Ok(()),
            // Another kind of server on that port answers the handshake with
            // something the driver cannot read.
            Ok(Err(e @ sqlx::Error::Protocol(_))) => Err(Error::Protocol { source: None,
                store: self.described.clone(),
                reason: format!(
                    "{e}; is this a {} server? (check the port in the URL)",
                    self.dialect.server_name()
                ),
            }),
            Ok(Err(e)) => Err(self.wrap(e)),
            // A local file does not keep us waiting: another process's lock does.
            Err(_) if dialect == Dialect::Sqlite => Err(super::errors::sqlite_locked(
                &self.described,
                &format!("{timeout:?}"),
                None,
            )),
            Err(_) => Err(Error::Unavailable { source: None,
                store: self.described.clone(),
                reason: format!(
                    "no answer within {timeout:?} (is the host reachable, and is it a {} server on that port?)",
                    self.dialect.server_name()
                ),
            }),
        }
    }

    /// Builds the store without touching the database; the first operation connects.
    /// No schema check happens; use [`SqlStore::migrate`] or [`SqlStore::connect`].
    pub fn connect_lazy(url: &str, options: &StoreOptions) -> Result<Self> {
        validate_table_prefix(&options.table_prefix)?;
        crate::store::check_url(url)?;
        let (dialect, driver_url, pooler) = parse_url(url)?;
        install_drivers();
        let described = redact_url(url);
        #[cfg(feature = "tls")]
        crate::store::util::crypto::use_ring_unless_chosen();
        #[cfg(feature = "tls")]
        if let Some(params) = tls::TlsParams::parse(url) {
            params.check(&described)?;
        }
        if let Some(push_url) = &pooler.push_url {
            crate::store::check_url(push_url)?;
            #[cfg(feature = "tls")]
            if let Some(params) = tls::TlsParams::parse(push_url) {
                params.check(&redact_url(push_url))?;
            }
        }
        let pool = pool_options(dialect, options);
        let bad_url = |e: sqlx::Error| Error::InvalidUrl {
            url: described.clone(),
            reason: e.to_string(),
        };
        // Statement logging would print every renewal and, on a slow store, warn
        // once per renewal; the elector reports what matters itself.
        let connect_options = sqlx::any::AnyConnectOptions::from_str(&driver_url)
            .map_err(bad_url)?
            .log_statements(log::LevelFilter::Off)
            .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(1));
        let pool = pool.connect_lazy_with(connect_options);
        Self::with_pool(pool, dialect, url, &driver_url, pooler, options)
    }

    /// Builds the store on the application's own sqlx pool, checks the
    /// schema and creates it if `options.auto_migrate` is set and the
    /// tables are missing. MySQL/MariaDB and PostgreSQL; the pool's
    /// drivers are the application's (`sqlx::any::install_default_drivers`).
    ///
    /// What the store takes from the pool:
    /// - for its own statements, one connection, taken from the pool and
    ///   detached from it (the pool may open another in its place, so the
    ///   server sees at most one more than the pool's maximum). It is kept
    ///   while this process leads or a push subscription is open, and
    ///   closed 50 ms after its last statement otherwise;
    /// - fenced transactions ([`SqlStore::fenced`]): one pooled connection
    ///   each, for the transaction;
    /// - PostgreSQL's `LISTEN` and MySQL/MariaDB's named-lock waits: their
    ///   own connections, opened from the pool's URL (and options) while
    ///   something in the process subscribes.
    ///
    /// When the application holds every connection of its pool, a leader
    /// is not affected: it keeps its connection for the whole tenure, so
    /// its renewals never wait for the pool and its deadline holds. A
    /// follower that needs a connection waits for the pool up to its
    /// acquire timeout; a fenced transaction waits the same way, and takes
    /// no lock before it has its connection.
    ///
    /// SQLite is refused (use [`SqlStore::connect`], which sets the
    /// pragmas the lease needs on every connection), and so is a pool
    /// through a pooler in transaction mode (`pooler=transaction` needs
    /// the statement cache off: build that store with
    /// [`SqlStore::connect`]).
    ///
    /// ```no_run
    /// # async fn demo() -> tenure::Result<()> {
    /// use tenure::store::{sql::SqlStore, StoreOptions};
    /// use tenure::store::sql::sqlx;
    /// sqlx::any::install_default_drivers();
    /// let pool = sqlx::any::AnyPoolOptions::new()
    ///     .max_connections(10)
    ///     .connect("postgres://app@db/app")
    ///     .await?;
    /// let store = SqlStore::from_pool(pool.clone(), &StoreOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool(pool: sqlx::AnyPool, options: &StoreOptions) -> Result<Self> {
        validate_table_prefix(&options.table_prefix)?;
        #[cfg(feature = "tls")]
        crate::store::util::crypto::use_ring_unless_chosen();
        let url = pool.connect_options().database_url.to_string();
        let (dialect, driver_url, pooler) = parse_url(&url)?;
        let refused = |reason: &str| Error::InvalidUrl {
            url: redact_url(&url),
            reason: reason.to_string(),
        };
        if dialect == Dialect::Sqlite {
            return Err(refused("SqlStore::from_pool serves MySQL/MariaDB and PostgreSQL; for SQLite use SqlStore::connect, which sets the pragmas the lease needs on every connection"));
        }
        if pooler.transaction_mode {
            return Err(refused("a pool through a pooler in transaction mode needs sqlx's statement cache off; build the store with SqlStore::connect(url) instead"));
        }
        let store = Self::with_pool(pool, dialect, &url, &driver_url, pooler, options)?;
        store.prepare_schema(options.auto_migrate).await?;
        #[cfg(feature = "mysql")]
        if store.dialect == Dialect::MySql {
            store.detect_returning().await;
        }
        Ok(store)
    }

    /// The store on `pool`, whose connections go to `url` (`driver_url`
    /// as the driver reads it; both as [`parse_url`] split them).
    fn with_pool(
        pool: sqlx::AnyPool,
        dialect: Dialect,
        url: &str,
        driver_url: &str,
        pooler: Pooler,
        options: &StoreOptions,
    ) -> Result<Self> {
        let described = redact_url(url);
        let statements = std::sync::Arc::new(Statements::new(dialect, &options.table_prefix));
        let mut own = super::connection::OneConnection::new(pool.clone());
        if pooler.transaction_mode {
            own = own.in_transactions();
        }
        #[cfg(feature = "postgres")]
        if dialect == Dialect::Postgres && pooler.is_direct() {
            // One connection for statements and LISTEN alike.
            let options = driver_url.parse().map_err(|e| Error::InvalidUrl {
                url: described.clone(),
                reason: format!("not a PostgreSQL URL the driver takes: {e}"),
            })?;
            own = own.listening_on(options);
        }
        let own = std::sync::Arc::new(own);
        let wake = super::wake::Wake::new(super::wake::Parts {
            dialect,
            url,
            driver_url,
            described: &described,
            pool: &pool,
            own: &own,
            statements: &statements,
            options,
            pooler: &pooler,
        })?;
        let wake = std::sync::Arc::new(wake);
        // Kept for a subscriber where a woken subscriber's read would
        // otherwise wait for a new connection. MySQL/MariaDB's wake-ups
        // block on connections of their own, and a lock waiter hands its
        // connection to the statements when a release wakes it and for
        // each timed read (`adopt`, `reclaim`), so a follower first in
        // line holds that one alone.
        if dialect != Dialect::MySql {
            let subscribed = std::sync::Arc::downgrade(&wake);
            own.keep_while(move || subscribed.upgrade().is_some_and(|w| w.has_subscribers()));
        }
        let members = super::heartbeats::MembersTable::new(
            own.clone(),
            dialect,
            &options.table_prefix,
            described.clone(),
        );
        Ok(Self {
            history_retention: options.history_retention.max(1),
            after_queue: std::sync::OnceLock::new(),
            reaps: members.batched(super::reaps::Reaps(members.clone()), "reap"),
            heartbeats: members
                .batched(super::heartbeats::Heartbeats(members.clone()), "heartbeat"),
            batcher: batch::Batcher::new(
                own.clone(),
                dialect,
                &options.table_prefix,
                described.clone(),
            ),
            wake,
            own,
            pool,
            dialect,
            statements: statements.clone(),
            prefix: options.table_prefix.clone(),
            described,
            pooler,
        })
    }
}

/// One connection to `url`. A server with no connection left to give (the
/// application's, or a fleet's replicas starting together) is asked again
/// after a pause (10 ms doubling to 320 ms, jittered) until `until`: a
/// replica that starts while the server is full waits for room instead of
/// exiting. Any other error returns at once.
async fn connect_when_room(
    url: &str,
    until: tokio::time::Instant,
) -> Result<sqlx::AnyConnection, sqlx::Error> {
    use sqlx::Connection;
    let mut pause = Duration::from_millis(10);
    loop {
        match sqlx::AnyConnection::connect(url).await {
            Err(e)
                if super::errors::is_server_full(&e)
                    && tokio::time::Instant::now() + pause < until =>
            {
                tracing::debug!("no connection left on the server, asking again: {e}");
                tokio::time::sleep(pause.mul_f64(crate::random::factor(0.5, 1.0))).await;
                pause = (pause * 2).min(Duration::from_millis(320));
            }
            other => return other,
        }
    }
}

/// The pool's options; on SQLite, every new connection's pragmas.
fn pool_options(dialect: Dialect, options: &StoreOptions) -> AnyPoolOptions {
    let mut pool = AnyPoolOptions::new()
        .max_connections(options.max_connections.max(1))
        .min_connections(0)
        .acquire_timeout(options.connect_timeout)
        // A broken connection shows up as an error on the next statement and
        // the elector retries; pinging before every statement would double
        // every round trip.
        .test_before_acquire(false)
        .idle_timeout(Some(Duration::from_secs(60)));
    if dialect == Dialect::Sqlite {
        pool = super::sqlite::with_pragmas(pool);
    }
    pool
}

/// The name a PostgreSQL server shows for tenure's connections
/// (`pg_stat_activity.application_name`) unless the URL names another, so
/// a DBA, `tenure status` and the tests can count them.
pub(super) const APPLICATION_NAME: &str = "tenure";

/// A `postgres:` driver URL for `rest` (what follows the scheme), naming
/// the application [`APPLICATION_NAME`] unless it names one itself.
fn with_application_name(rest: &str) -> String {
    if rest.contains("application_name=") {
        return format!("postgres:{rest}");
    }
    let sep = if rest.contains('?') { '&' } else { '?' };
    format!("postgres:{rest}{sep}application_name={APPLICATION_NAME}")
}

/// The dialect a URL names, the URL to give the sqlx driver, and the
/// pooler in between (PostgreSQL's `pooler` and `push_url`, taken out of
/// the driver's URL; each URL names the application).
fn parse_url(url: &str) -> Result<(Dialect, String, Pooler)> {
    let bad = |reason: &str| Error::InvalidUrl {
        url: redact_url(url),
        reason: reason.to_string(),
    };
    let (scheme, rest) = url
        .split_once(':')
        .ok_or_else(|| bad("missing scheme; expected e.g. sqlite://tenure.db"))?;
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => {
            let path = rest.trim_start_matches("//");
            if path.is_empty() || path.starts_with(":memory:") || path.contains("mode=memory") {
                return Err(bad(
                    "an in-memory SQLite database is private to one connection; use a file path (sqlite://tenure.db) or memory:// for a single process",
                ));
            }
            let file = path.split_once('?').map_or(path, |(p, _)| p);
            if file.contains('\0') || file.to_ascii_lowercase().contains("%00") {
                return Err(bad(
                    "the file path holds a NUL character (%00), which no file name can; remove it",
                ));
            }
            let sep = if rest.contains('?') { '&' } else { '?' };
            let driver_url = if rest.contains("mode=") {
                url.to_string()
            } else {
                format!("{url}{sep}mode=rwc")
            };
            Ok((Dialect::Sqlite, driver_url, Pooler::default()))
        }
        "mysql" => Ok((Dialect::MySql, url.to_string(), Pooler::default())),
        "mariadb" => Ok((Dialect::MySql, format!("mysql:{rest}"), Pooler::default())),
        "postgres" | "postgresql" => {
            let (driver, mut pooler) = super::postgres::pooler::take(url)?;
            let named = |url: &str| {
                let rest = url.split_once(':').map_or("", |(_, rest)| rest);
                with_application_name(rest)
            };
            pooler.push_url = pooler.push_url.as_deref().map(named);
            let mut driver = named(&driver);
            if pooler.transaction_mode && !driver.contains("statement-cache-capacity=") {
                // A cached statement would be used in a later transaction,
                // on a server connection that never prepared it.
                driver.push_str("&statement-cache-capacity=0");
            }
            Ok((Dialect::Postgres, driver, pooler))
        }
        _ => Err(bad(
            "not a SQL scheme (sqlite, mysql, mariadb, postgres, postgresql)",
        )),
    }
}
