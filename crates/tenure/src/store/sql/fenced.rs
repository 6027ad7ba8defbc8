//! Transactions fenced by the lease.
//!
//! A paused leader (GC, SIGSTOP, VM freeze) can wake after its lease expired and
//! still believe it leads; only the store can refuse its writes. When the work
//! lives in the same database as the lease, a fenced transaction re-checks the
//! lease by the server's clock and locks its row before any work, so a takeover
//! (which must update that row) cannot commit until the work has committed or
//! rolled back.
//!
//! A leader frozen inside that transaction (a debugger, a VM pause, SIGSTOP)
//! would keep the row locked, and every takeover waiting, until it woke. The
//! transaction is therefore bounded on the server side by the lease time
//! left when it began (`Spelling::bound_transaction`): PostgreSQL ends a
//! statement running longer, or the session idle inside the transaction
//! longer; MySQL and MariaDB close a connection idle longer (whole seconds).
//! The renewals of the lease wait for the row too, so the lease cannot
//! outlast that bound while the work is open.

use sqlx::any::Any;
use sqlx::pool::PoolConnection;
use sqlx::{AnyConnection, Executor, Row};

use super::statements::{bind_tenure, sent};
use super::SqlStore;
use crate::error::{Error, Result};
use crate::store::Tenure;

/// A database transaction that commits only under a still-valid lease.
///
/// [`SqlStore::fenced`] (or [`Leadership::fenced`](crate::Leadership::fenced))
/// begins, runs and commits one for you. By hand: run your statements on
/// [`connection`](Self::connection), then [`commit`](Self::commit). Do not
/// issue `BEGIN`/`COMMIT` yourself. Dropping it without committing rolls the
/// work back (the connection is closed, not reused).
///
/// Finish within the lease time left when it began: the lease's renewals
/// wait for its row while the transaction holds it, and the server ends a
/// transaction that outlasts that time. On PostgreSQL a statement running
/// longer is cancelled and a transaction idle longer ends with its session;
/// on MySQL/MariaDB a connection idle longer (whole seconds, rounded up) is
/// closed. Either way the work rolls back and the commit fails. So a leader
/// frozen inside the transaction (a debugger, a VM pause) holds failover
/// back by that time at most. SQLite cannot bound it: see its store's docs.
///
/// Statements go through sqlx's `Any` driver: write SQL every database you
/// deploy on accepts (or branch on [`SqlStore::backend`]), with `?` or `$1`
/// placeholders as the database wants them. Through a pooler in
/// transaction mode (`pooler=transaction`), sqlx's statement cache is off
/// and the transaction drops the statements prepared on its server
/// connection, so statements work as sqlx sends them by default.
///
/// ```no_run
/// # async fn demo(store: &tenure::store::sql::SqlStore, tenure: &tenure::store::Tenure) -> tenure::Result<()> {
/// let mut tx = store.begin_fenced(tenure).await?; // Err(NotLeader) if the lease is gone
/// sqlx::query("UPDATE jobs SET done = 1 WHERE id = 7")
///     .execute(tx.connection())
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FencedTransaction {
    conn: PoolConnection<Any>,
    finished: bool,
    store: String,
    /// Through a pooler in transaction mode, every prepared statement on
    /// the server connection is dropped when the transaction begins and
    /// before it commits: the server connection serves another client
    /// next.
    forget_prepared: bool,
    /// Run after the transaction ends, where the server-side bound set at
    /// its start outlives it (MySQL's session variables).
    unbound: Option<&'static str>,
}

pub(super) async fn begin(store: &SqlStore, tenure: &Tenure) -> Result<FencedTransaction> {
    let conn = store.pool.acquire().await.map_err(|e| store.wrap(e))?;
    // The guard exists before BEGIN is sent: if this future is dropped while
    // BEGIN waits (SQLite's IMMEDIATE can wait seconds), the connection is
    // closed rather than returned to the pool inside an open transaction, where
    // the elector's renewals would silently never commit.
    let mut tx = FencedTransaction {
        conn,
        finished: false,
        store: store.described.clone(),
        forget_prepared: store.pooler.transaction_mode,
        unbound: None,
    };
    // Through a transaction pooler, what another client left prepared on
    // this server connection could collide with the names sqlx gives: it
    // goes in the same round trip as BEGIN (simple protocol).
    // (Only PostgreSQL goes through one: its BEGIN.)
    let begin = match tx.forget_prepared {
        true => "BEGIN; DEALLOCATE ALL",
        false => store.dialect.begin_write(),
    };
    tx.conn.execute(begin).await.map_err(|e| store.wrap(e))?;
    let held = bind_tenure(
        sqlx::query(&sent(store.dialect, &store.statements.fence)),
        tenure,
    )
    .fetch_optional(tx.connection())
    .await
    .map_err(|e| store.wrap(e))?;
    let Some(held) = held else {
        tx.rollback().await?;
        return Err(Error::NotLeader {
            election: tenure.key.to_string(),
        });
    };
    let left_us: i64 = held.try_get(1).map_err(|e| store.wrap(e))?;
    let left_ms = u64::try_from(left_us).unwrap_or(0).div_ceil(1000).max(1);
    if let Some(bound) = store.dialect.bound_transaction(left_ms) {
        tx.conn
            .execute(bound.as_str())
            .await
            .map_err(|e| store.wrap(e))?;
    }
    tx.unbound = store.dialect.unbound_transaction();
    Ok(tx)
}

impl SqlStore {
    /// Runs `work` in a transaction fenced by `tenure`'s lease and commits
    /// it: begins, re-checks the lease by the server's clock (locking it, so
    /// no takeover commits in between), runs `work`, commits. If the lease is
    /// gone, `work` does not run and the result is [`Error::NotLeader`]; if
    /// `work` returns an error, the transaction is rolled back and that error
    /// is returned. `?` on a `sqlx::Error` inside `work` gives
    /// [`Error::Work`]; wrap other errors of yours in it the same way.
    ///
    /// Usually reached through [`Leadership::fenced`](crate::Leadership::fenced).
    ///
    /// ```no_run
    /// # async fn demo(store: &tenure::store::sql::SqlStore, tenure: &tenure::store::Tenure) -> tenure::Result<()> {
    /// let done = store
    ///     .fenced(tenure, async |tx| {
    ///         sqlx::query("UPDATE jobs SET done = 1 WHERE id = 7")
    ///             .execute(tx.connection())
    ///             .await?;
    ///         Ok(7)
    ///     })
    ///     .await?; // Err(NotLeader) if a successor took over: nothing was written
    /// # let _: u32 = done; Ok(()) }
    /// ```
    pub async fn fenced<T, F>(&self, tenure: &Tenure, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&mut FencedTransaction) -> Result<T>,
    {
        let mut tx = self.begin_fenced(tenure).await?;
        match work(&mut tx).await {
            Ok(out) => {
                tx.commit().await?;
                Ok(out)
            }
            Err(e) => {
                // Dropping it would roll back too (closing the connection);
                // an explicit rollback keeps the connection for the pool.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }
}

impl FencedTransaction {
    /// The connection to run the fenced work on.
    pub fn connection(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }

    /// Commits the work.
    pub async fn commit(mut self) -> Result<()> {
        self.finish("COMMIT").await
    }

    /// Rolls the work back.
    pub async fn rollback(mut self) -> Result<()> {
        self.finish("ROLLBACK").await
    }

    async fn finish(&mut self, stmt: &str) -> Result<()> {
        let result = if self.forget_prepared && stmt == "COMMIT" {
            self.conn.execute("DEALLOCATE ALL; COMMIT").await
        } else {
            self.conn.execute(stmt).await
        };
        // The pooled connection must not keep the bound: the application's
        // statements on the pool would inherit it.
        let result = match (result, self.unbound) {
            (Ok(_), Some(unbound)) => self.conn.execute(unbound).await.map(|_| ()),
            (result, _) => result.map(|_| ()),
        };
        // On failure the transaction state (or the session's) is unknown:
        // Drop closes the connection.
        self.finished = result.is_ok();
        result.map_err(|e| Error::Unavailable {
            source: None,
            store: self.store.clone(),
            reason: format!("{stmt} failed: {e}"),
        })
    }
}

impl Drop for FencedTransaction {
    fn drop(&mut self) {
        if !self.finished {
            // Closing the connection makes the server roll the transaction back;
            // returning it to the pool would leak an open transaction.
            self.conn.close_on_drop();
        }
    }
}
