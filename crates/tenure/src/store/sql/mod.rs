//! One SQL implementation of [`LeaseStore`] for SQLite, MySQL/MariaDB and PostgreSQL.
//!
//! The protocol is the same on all three; [`Dialect`] holds the spellings. Queries
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

mod batch;
mod dialect;
mod errors;
mod fenced;
#[cfg(feature = "postgres")]
mod push;
mod schema;
#[cfg(feature = "tls")]
mod tls;

use std::str::FromStr;

use sqlx::ConnectOptions;
use std::sync::Once;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

pub use dialect::Dialect;
pub use fenced::FencedTransaction;
pub use schema::SCHEMA_VERSION;

use self::errors::map_err;
use super::{
    remaining_from_us, Acquire, Capabilities, Claim, ElectionKey, Handover, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, Tenure,
};
use crate::error::{Error, Result};
use crate::names::validate_table_prefix;
use crate::store::{redact_url, StoreOptions};

/// The columns every lease read returns, in the order [`decode_record`] expects.
const RECORD_COLUMNS: &str = "namespace, election, holder, metadata, term, version, ttl_us, \
     acquired_us, renewed_us, expires_us, handover_to, handover_until_us, start_reason, \
     prev_holder, prev_expires_us, {now} AS now_us";

/// Member columns, in the order [`decode_member`] expects.
const MEMBER_COLUMNS: &str =
    "namespace, election, holder, identity, metadata, priority, joined_us, \
     heartbeat_us, expires_us, {now} AS now_us";

/// Prepared statement texts for one table prefix and dialect.
#[derive(Debug)]
struct Statements {
    acquire: String,
    renew: String,
    release: String,
    read: String,
    list_all: String,
    list_namespace: String,
    insert_vacant: String,
    fence: String,
    hand_over: String,
    request_handover: String,
    upsert_member: String,
    leave: String,
    members: String,
    reap: String,
    insert_history: String,
    close_history_at: String,
    close_history_now: String,
    history: String,
    trim_history: String,
}

impl Statements {
    fn new(dialect: Dialect, prefix: &str) -> Self {
        let t = format!("{prefix}leases");
        let m = format!("{prefix}members");
        let h = format!("{prefix}history");
        let returning = Some(RECORD_COLUMNS);
        let key = "namespace = ? AND election = ?";
        Self {
            // MySQL evaluates SET left to right on updated values, so everything
            // that reads the old row comes first.
            acquire: dialect.update(
                &t,
                "start_reason = CASE WHEN term = 0 THEN 'first' \
                   WHEN holder = '' AND handover_reason <> '' THEN handover_reason \
                   WHEN holder = '' THEN 'release' ELSE 'expiry' END, \
                 prev_holder = holder, prev_expires_us = expires_us, \
                 handover_to = '', handover_until_us = 0, handover_reason = '', \
                 holder = ?, metadata = ?, term = term + 1, version = version + 1, ttl_us = ?, \
                 acquired_us = {now}, renewed_us = {now}, expires_us = {now} + ?",
                &format!(
                    "{key} AND (holder = '' OR expires_us <= {{now}}) \
                     AND (handover_to = '' OR handover_to = '*' OR handover_to = ? OR handover_until_us <= {{now}})"
                ),
                returning,
            ),
            renew: dialect.update(
                &t,
                "version = version + 1, ttl_us = ?, renewed_us = {now}, expires_us = {now} + ?",
                &if crate::bugs::active(crate::bugs::Bug::RenewUnchecked) {
                    format!("{key} AND ? <> '' AND ? > 0")
                } else {
                    // A pending hand-over request makes the renewal fail, so the
                    // leader steps down.
                    format!("{key} AND holder = ? AND term = ? AND expires_us > {{now}} AND handover_to = ''")
                },
                None,
            ),
            release: dialect.update(
                &t,
                // prev_holder names who just left, so followers do not wait
                // for it as the designated successor.
                "prev_holder = holder, holder = '', metadata = '', version = version + 1, expires_us = {now}",
                &format!("{key} AND holder = ? AND term = ?"),
                None,
            ),
            read: dialect.select(&t, RECORD_COLUMNS, key, ""),
            list_all: dialect.select(&t, RECORD_COLUMNS, "1 = 1", " ORDER BY namespace, election"),
            list_namespace: dialect.select(
                &t,
                RECORD_COLUMNS,
                "namespace = ?",
                " ORDER BY namespace, election",
            ),
            insert_vacant: dialect.insert_vacant(&t),
            hand_over: dialect.update(
                &t,
                "prev_holder = holder, holder = '', metadata = '', version = version + 1, expires_us = {now}, \
                 handover_to = ?, handover_until_us = {now} + ?, handover_reason = ?",
                &format!("{key} AND holder = ? AND term = ?"),
                None,
            ),
            request_handover: dialect.update(
                &t,
                "handover_to = ?, handover_until_us = {now} + ?, handover_reason = ?, version = version + 1",
                &format!("{key} AND holder <> '' AND expires_us > {{now}}"),
                None,
            ),
            upsert_member: dialect.upsert_member(&m),
            leave: dialect.delete(&m, &format!("{key} AND holder = ?")),
            members: dialect.select(&m, MEMBER_COLUMNS, key, " ORDER BY priority DESC, joined_us ASC, holder ASC"),
            reap: dialect.delete(&m, &format!("{key} AND expires_us <= {{now}}")),
            insert_history: dialect.insert_history(&h),
            close_history_at: dialect.update(
                &h,
                "end_us = ?, end_reason = ?",
                &format!("{key} AND term = ? AND end_us = 0"),
                None,
            ),
            close_history_now: dialect.update(
                &h,
                "end_us = {now}, end_reason = ?",
                &format!("{key} AND term = ? AND end_us = 0"),
                None,
            ),
            history: dialect.select(
                &h,
                "namespace, election, term, holder, start_reason, start_us, end_reason, end_us",
                key,
                " ORDER BY term DESC LIMIT ?",
            ),
            trim_history: dialect.delete(&h, &format!("{key} AND term <= ?")),
            fence: dialect.select(
                &t,
                "term",
                &format!("{key} AND holder = ? AND term = ? AND expires_us > {{now}}"),
                dialect.for_update(),
            ),
        }
    }
}

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
    statements: std::sync::Arc<Statements>,
    described: String,
    #[cfg(feature = "postgres")]
    push: Option<std::sync::Arc<push::PushHub>>,
    batcher: std::sync::Arc<batch::Batcher>,
    history_retention: u64,
    after_queue: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<AfterJob>>,
}

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
        store.probe(url, options.connect_timeout).await?;
        store.prepare_schema(options.auto_migrate).await?;
        Ok(store)
    }

    /// Opens one connection outside the pool: the pool would retry a refused
    /// connection until its timeout and report only "timed out", hiding the
    /// cause (refused, unknown host, bad password) that the user needs to see.
    async fn probe(&self, url: &str, timeout: Duration) -> Result<()> {
        use sqlx::Connection;
        let (_, driver_url) = Self::parse_url(url)?;
        let dialect = self.dialect;
        let probe = async move {
            let mut conn = sqlx::AnyConnection::connect(&driver_url).await?;
            if dialect == Dialect::Sqlite {
                // SQLite opens any file lazily; reading the catalogue is what
                // finds out that it is not a database, once, here, instead of
                // failing every pooled connection until the pool times out.
                // Another process may be creating the tables right now: wait
                // for its lock as the pool's connections do.
                sqlx::query("PRAGMA busy_timeout = 5000")
                    .execute(&mut conn)
                    .await?;
                sqlx::query("SELECT count(*) FROM sqlite_master")
                    .fetch_one(&mut conn)
                    .await?;
            }
            Ok::<_, sqlx::Error>(conn)
        };
        match tokio::time::timeout(timeout, probe).await {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
                Ok(())
            }
            // Another kind of server on that port answers the handshake with
            // something the driver cannot read.
            Ok(Err(e @ sqlx::Error::Protocol(_))) => Err(Error::Protocol {
                store: self.described.clone(),
                reason: format!(
                    "{e}; is this a {} server? (check the port in the URL)",
                    self.dialect.server_name()
                ),
            }),
            Ok(Err(e)) => Err(self.wrap(e)),
            Err(_) => Err(Error::Unavailable {
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
        let (dialect, driver_url) = Self::parse_url(url)?;
        install_drivers();
        let described = redact_url(url);
        #[cfg(feature = "tls")]
        if let Some(params) = tls::TlsParams::parse(url) {
            params.check(&described)?;
        }
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
            pool = pool.after_connect(|conn, _meta| {
                Box::pin(async move {
                    use sqlx::Executor;
                    // WAL lets readers run beside the one writer; synchronous=FULL
                    // because a lost commit could hand out a term twice after a
                    // power cut; busy_timeout makes writers of other processes wait
                    // instead of failing.
                    conn.execute("PRAGMA busy_timeout = 5000").await?;
                    // Fails on a read-only file; reading still works there, and
                    // any write reports the read-only error itself.
                    if let Err(e) = conn.execute("PRAGMA journal_mode = WAL").await {
                        tracing::debug!("cannot switch SQLite to WAL: {e}");
                    }
                    conn.execute("PRAGMA synchronous = FULL").await?;
                    Ok(())
                })
            });
        }
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
        Ok(Self {
            history_retention: options.history_retention.max(1),
            after_queue: std::sync::OnceLock::new(),
            batcher: batch::Batcher::new(
                pool.clone(),
                dialect,
                &options.table_prefix,
                described.clone(),
            ),
            pool,
            dialect,
            statements: std::sync::Arc::new(Statements::new(dialect, &options.table_prefix)),
            prefix: options.table_prefix.clone(),
            #[cfg(feature = "postgres")]
            push: (dialect == Dialect::Postgres).then(|| {
                std::sync::Arc::new(push::PushHub::new(
                    driver_url.clone(),
                    &options.table_prefix,
                ))
            }),
            described,
        })
    }

    fn parse_url(url: &str) -> Result<(Dialect, String)> {
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
                let sep = if rest.contains('?') { '&' } else { '?' };
                let driver_url = if rest.contains("mode=") {
                    url.to_string()
                } else {
                    format!("{url}{sep}mode=rwc")
                };
                Ok((Dialect::Sqlite, driver_url))
            }
            "mysql" => Ok((Dialect::MySql, url.to_string())),
            "mariadb" => Ok((Dialect::MySql, format!("mysql:{rest}"))),
            "postgres" | "postgresql" => Ok((Dialect::Postgres, format!("postgres:{rest}"))),
            _ => Err(bad(
                "not a SQL scheme (sqlite, mysql, mariadb, postgres, postgresql)",
            )),
        }
    }

    /// Renewal statements this store has sent (batched renewals count once).
    pub fn renew_statements(&self) -> u64 {
        self.batcher.statements()
    }

    /// The dialect in use.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

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
        schema::prepare(
            &self.pool,
            self.dialect,
            &self.prefix,
            create,
            &self.described,
        )
        .await
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

    async fn acquire_once(&self, claim: &Claim) -> Result<Option<LeaseRecord>> {
        let ttl_us = duration_us(claim.ttl);
        let mut conn = self.pool.acquire().await.map_err(|e| self.wrap(e))?;
        let sql = crate::bugs::with_client_now(&self.statements.acquire);
        let q = sqlx::query(&sql)
            .bind(claim.holder.as_str())
            .bind(claim.metadata.as_str())
            .bind(ttl_us)
            .bind(ttl_us)
            .bind(claim.key.namespace.as_str())
            .bind(claim.key.election.as_str())
            .bind(super::identity_of(&claim.holder));
        if self.dialect.has_update_returning() {
            let row = q
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.wrap(e))?;
            return row
                .map(|r| decode_record(&r))
                .transpose()
                .map_err(|e| self.wrap(e));
        }
        let done = q.execute(&mut *conn).await.map_err(|e| self.wrap(e))?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        // No RETURNING on MySQL: read our row back. Only this process writes this
        // holder id, so if the row names us, its term is the one we just took; if
        // it already names someone else, our lease expired in between and we
        // report that we do not hold it.
        let rec = self.read_with(&mut conn, &claim.key).await?;
        Ok(rec.filter(|r| r.holder.as_deref() == Some(claim.holder.as_str())))
    }

    async fn read_with(
        &self,
        conn: &mut sqlx::AnyConnection,
        key: &ElectionKey,
    ) -> Result<Option<LeaseRecord>> {
        let row = sqlx::query(&crate::bugs::with_client_now(&self.statements.read))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .fetch_optional(conn)
            .await
            .map_err(|e| self.wrap(e))?;
        row.map(|r| decode_record(&r))
            .transpose()
            .map_err(|e| self.wrap(e))
    }
}

impl SqlStore {
    async fn try_acquire_inner(&self, claim: &Claim) -> Result<Acquire> {
        if let Some(rec) = self.acquire_once(claim).await? {
            return Ok(Acquire::Acquired(rec));
        }
        if let Some(rec) = self.read(&claim.key).await? {
            return Ok(Acquire::Held(Some(rec)));
        }
        // First campaign for this election: create the vacant row, then decide
        // with the same conditional UPDATE as always.
        sqlx::query(&crate::bugs::with_client_now(
            &self.statements.insert_vacant,
        ))
        .bind(claim.key.namespace.as_str())
        .bind(claim.key.election.as_str())
        .execute(&self.pool)
        .await
        .map_err(|e| self.wrap(e))?;
        match self.acquire_once(claim).await? {
            Some(rec) => Ok(Acquire::Acquired(rec)),
            None => Ok(Acquire::Held(self.read(&claim.key).await?)),
        }
    }

    async fn renew_inner(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let ttl_us = duration_us(ttl);
        let done = sqlx::query(&crate::bugs::with_client_now(&self.statements.renew))
            .bind(ttl_us)
            .bind(ttl_us)
            .bind(tenure.key.namespace.as_str())
            .bind(tenure.key.election.as_str())
            .bind(tenure.holder.as_str())
            .bind(term_i64(tenure.term))
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_inner(&self, tenure: &Tenure) -> Result<bool> {
        let done = sqlx::query(&crate::bugs::with_client_now(&self.statements.release))
            .bind(tenure.key.namespace.as_str())
            .bind(tenure.key.election.as_str())
            .bind(tenure.holder.as_str())
            .bind(term_i64(tenure.term))
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() == 1)
    }

    fn after(&self) -> After {
        After {
            pool: self.pool.clone(),
            statements: self.statements.clone(),
            #[cfg(feature = "postgres")]
            push: self.push.clone(),
            history_retention: self.history_retention,
        }
    }

    async fn notify(&self, key: &ElectionKey) {
        self.after().notify(key).await
    }

    /// Queues the notification and history writes of a decided change. One
    /// worker per store runs them in order (a term's start is written before
    /// its end), off the caller's path: a new leader need not wait for them.
    fn after_change(&self, job: AfterJob) {
        let tx = self.after_queue.get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<AfterJob>();
            let after = self.after();
            tokio::spawn(async move {
                while let Some(job) = rx.recv().await {
                    match job {
                        AfterJob::Start(rec) => {
                            after.notify(&rec.key).await;
                            after.record_start(&rec).await;
                        }
                        AfterJob::Close(tenure, reason) => {
                            after.close_history_now(&tenure, &reason).await;
                        }
                        AfterJob::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
            tx
        });
        let _ = tx.send(job);
    }
}

/// Work that follows a decided change; see [`SqlStore::after_change`].
enum AfterJob {
    Start(LeaseRecord),
    Close(Tenure, String),
    /// Answered once every job queued before it is done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// What happens after a change has been decided: notifications and history,
/// done by a task of its own so that the caller does not wait for them.
#[derive(Clone)]
struct After {
    pool: AnyPool,
    statements: std::sync::Arc<Statements>,
    #[cfg(feature = "postgres")]
    push: Option<std::sync::Arc<push::PushHub>>,
    history_retention: u64,
}

impl After {
    /// Records the start of a term in the history, and the end of the previous
    /// one if it expired (a release or hand-over closed it already). Best
    /// effort: the history is for people, leadership does not depend on it.
    async fn record_start(&self, rec: &LeaseRecord) {
        let holder = rec.holder.clone().unwrap_or_default();
        let inserted = sqlx::query(&self.statements.insert_history)
            .bind(rec.key.namespace.as_str())
            .bind(rec.key.election.as_str())
            .bind(term_i64(rec.term))
            .bind(holder)
            .bind(rec.start_reason.as_str())
            .bind(rec.acquired_at_us)
            .execute(&self.pool)
            .await;
        if let Err(e) = inserted {
            tracing::debug!("recording history failed: {e}");
        }
        if rec.previous_holder.is_some() && rec.term > 1 {
            let closed = sqlx::query(&self.statements.close_history_at)
                .bind(rec.previous_expires_at_us)
                .bind("expired")
                .bind(rec.key.namespace.as_str())
                .bind(rec.key.election.as_str())
                .bind(term_i64(rec.term - 1))
                .execute(&self.pool)
                .await;
            if let Err(e) = closed {
                tracing::debug!("recording history failed: {e}");
            }
        }
        // Trim now and then, not on every acquisition.
        let keep = self.history_retention;
        if rec.term % 16 == 0 && rec.term > keep {
            let _ = sqlx::query(&self.statements.trim_history)
                .bind(rec.key.namespace.as_str())
                .bind(rec.key.election.as_str())
                .bind(term_i64(rec.term - keep))
                .execute(&self.pool)
                .await;
        }
    }

    async fn close_history_now(&self, tenure: &Tenure, reason: &str) {
        let closed = sqlx::query(&self.statements.close_history_now)
            .bind(reason)
            .bind(tenure.key.namespace.as_str())
            .bind(tenure.key.election.as_str())
            .bind(term_i64(tenure.term))
            .execute(&self.pool)
            .await;
        if let Err(e) = closed {
            tracing::debug!("recording history failed: {e}");
        }
    }

    /// Tells listening followers and observers that `key` changed (PostgreSQL).
    /// Best effort: a lost notification only delays them to their next poll.
    async fn notify(&self, key: &ElectionKey) {
        #[cfg(feature = "postgres")]
        if let Some(hub) = &self.push {
            hub.notify(&self.pool, key).await;
        }
        #[cfg(not(feature = "postgres"))]
        let _ = key;
    }
}

fn duration_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn decode_record(row: &AnyRow) -> Result<LeaseRecord, sqlx::Error> {
    let holder: String = row.try_get("holder")?;
    let expires_at_us: i64 = row.try_get("expires_us")?;
    let now_us: i64 = row.try_get("now_us")?;
    Ok(LeaseRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        remaining: if holder.is_empty() {
            Duration::ZERO
        } else {
            remaining_from_us(expires_at_us, now_us)
        },
        holder: (!holder.is_empty()).then_some(holder),
        metadata: row.try_get("metadata")?,
        term: row.try_get::<i64, _>("term")?.max(0) as u64,
        version: row.try_get::<i64, _>("version")?.max(0) as u64,
        ttl: Duration::from_micros(row.try_get::<i64, _>("ttl_us")?.max(0) as u64),
        acquired_at_us: row.try_get("acquired_us")?,
        renewed_at_us: row.try_get("renewed_us")?,
        expires_at_us,
        read_at_us: now_us,
        handover_to: Some(row.try_get::<String, _>("handover_to")?).filter(|h| !h.is_empty()),
        handover_until_us: row.try_get("handover_until_us")?,
        start_reason: row.try_get("start_reason")?,
        previous_holder: Some(row.try_get::<String, _>("prev_holder")?).filter(|h| !h.is_empty()),
        previous_expires_at_us: row.try_get("prev_expires_us")?,
    })
}

fn decode_member(row: &AnyRow) -> Result<MemberRecord, sqlx::Error> {
    let holder: String = row.try_get("holder")?;
    let expires_at_us: i64 = row.try_get("expires_us")?;
    let now_us: i64 = row.try_get("now_us")?;
    Ok(MemberRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        identity: row.try_get("identity")?,
        holder,
        metadata: row.try_get("metadata")?,
        priority: row.try_get::<i64, _>("priority")?.clamp(0, u32::MAX as i64) as u32,
        joined_at_us: row.try_get("joined_us")?,
        heartbeat_at_us: row.try_get("heartbeat_us")?,
        expires_at_us,
        live: expires_at_us > now_us,
    })
}

fn decode_history(row: &AnyRow) -> Result<HistoryRecord, sqlx::Error> {
    let end_us: i64 = row.try_get("end_us")?;
    Ok(HistoryRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        term: row.try_get::<i64, _>("term")?.max(0) as u64,
        holder: row.try_get("holder")?,
        start_reason: row.try_get("start_reason")?,
        start_at_us: row.try_get("start_us")?,
        end_reason: row.try_get("end_reason")?,
        end_at_us: (end_us != 0).then_some(end_us),
    })
}

#[async_trait]
impl LeaseStore for SqlStore {
    fn subscribe(&self) -> Option<super::Changes> {
        #[cfg(feature = "postgres")]
        if let Some(hub) = &self.push {
            return hub.subscribe();
        }
        None
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: self.dialect == Dialect::Postgres,
            fenced_transactions: true,
            batch_renew: true,
            durable: true,
            ..Capabilities::default()
        }
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        let result = self.try_acquire_inner(claim).await;
        if let Ok(Acquire::Acquired(rec)) = &result {
            // Tell the others first, then write the history, off the caller's
            // path: the new leader need not wait for bookkeeping.
            self.after_change(AfterJob::Start(rec.clone()));
        }
        result
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        if crate::bugs::active(crate::bugs::Bug::RenewUnchecked)
            || crate::bugs::active(crate::bugs::Bug::WallClock)
            || crate::bugs::active(crate::bugs::Bug::WholeSeconds)
        {
            // The broken builds keep their single-statement renewal.
            self.batcher.count_statement();
            return self.renew_inner(tenure, ttl).await;
        }
        self.batcher.renew(tenure, ttl).await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        let released = self.release_inner(tenure).await?;
        if released {
            // Notify before returning, not from the queue: a process that
            // releases on its way out may exit before the queue runs, and its
            // successor would then wait for its next poll.
            self.notify(&tenure.key).await;
            self.after_change(AfterJob::Close(tenure.clone(), "released".into()));
        }
        Ok(released)
    }

    async fn flush(&self) -> Result<()> {
        if self.after_queue.get().is_none() {
            return Ok(());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.after_change(AfterJob::Flush(tx));
        let _ = rx.await;
        Ok(())
    }

    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        sqlx::query(&self.statements.upsert_member)
            .bind(member.key.namespace.as_str())
            .bind(member.key.election.as_str())
            .bind(member.holder.as_str())
            .bind(super::identity_of(&member.holder))
            .bind(member.metadata.as_str())
            .bind(i64::from(member.priority))
            .bind(duration_us(ttl))
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(())
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let done = sqlx::query(&self.statements.leave)
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let rows = sqlx::query(&self.statements.members)
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        rows.iter()
            .map(decode_member)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        let done = sqlx::query(&self.statements.reap)
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected())
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<bool> {
        let window_us = super::handover_window_us(window)?;
        let done = sqlx::query(&self.statements.hand_over)
            .bind(to.column())
            .bind(window_us)
            .bind(reason)
            .bind(tenure.key.namespace.as_str())
            .bind(tenure.key.election.as_str())
            .bind(tenure.holder.as_str())
            .bind(term_i64(tenure.term))
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        let done = done.rows_affected() == 1;
        if done {
            // As in `release`: the notification must not wait in the queue.
            self.notify(&tenure.key).await;
            self.after_change(AfterJob::Close(tenure.clone(), reason.to_string()));
        }
        Ok(done)
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<Option<LeaseRecord>> {
        let window_us = super::handover_window_us(window)?;
        let done = sqlx::query(&self.statements.request_handover)
            .bind(to.column())
            .bind(window_us)
            .bind(reason)
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .execute(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.notify(key).await;
        self.read(key).await
    }

    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        let rows = sqlx::query(&self.statements.history)
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.wrap(e))?;
        rows.iter()
            .map(decode_history)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let mut conn = self.pool.acquire().await.map_err(|e| self.wrap(e))?;
        self.read_with(&mut conn, key).await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let rows = match namespace {
            Some(ns) => {
                sqlx::query(&crate::bugs::with_client_now(
                    &self.statements.list_namespace,
                ))
                .bind(ns)
                .fetch_all(&self.pool)
                .await
            }
            None => {
                sqlx::query(&crate::bugs::with_client_now(&self.statements.list_all))
                    .fetch_all(&self.pool)
                    .await
            }
        }
        .map_err(|e| self.wrap(e))?;
        rows.iter()
            .map(decode_record)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }
}

fn term_i64(term: u64) -> i64 {
    i64::try_from(term).unwrap_or(i64::MAX)
}
