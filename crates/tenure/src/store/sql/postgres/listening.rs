//! A PostgreSQL connection that runs the store's statements and listens
//! for its notifications: the one connection a leader or a designated
//! successor holds (`connection.rs`).
//!
//! sqlx delivers notifications only to a [`PgListener`], and its `Any`
//! driver, in which the store's statements are written, cannot listen. So
//! this runs the `Any` statements on a listener's connection: their
//! arguments converted to PostgreSQL's, their rows and results converted
//! back, as sqlx's own `Any` driver does for a plain PostgreSQL
//! connection. Notifications that arrive while a statement runs wait in
//! the listener's buffer for the next [`Listening::try_recv`].

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt as _, StreamExt as _};
use sqlx::any::{AnyArguments, AnyQueryResult, AnyRow};
use sqlx::postgres::{
    PgArguments, PgConnectOptions, PgListener, PgNotification, PgPoolOptions, PgQueryResult, PgRow,
};
use sqlx::{Either, Executor as _};
use std::time::Duration;

/// A listener's connection, lent to statements between waits.
pub(in crate::store::sql) struct Listening {
    /// Taken only by `Drop`.
    listener: Option<PgListener>,
    /// Whether `LISTEN` was sent on this connection.
    listens: bool,
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("listens", &self.listens)
            .finish_non_exhaustive()
    }
}

impl Listening {
    /// Opens one connection with `options`, waiting up to `timeout` for
    /// the server to take it. `Err(PoolTimedOut)` when it would not (the
    /// caller asks the server why).
    pub(in crate::store::sql) async fn open(
        options: PgConnectOptions,
        timeout: Duration,
    ) -> Result<Self, sqlx::Error> {
        // A pool of one that only ever opens this connection: sqlx builds a
        // listener only from a pool. Dropped with the listener, it closes
        // the connection; nothing reconnects behind the store's back.
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(timeout)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with(options);
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.ignore_pool_close_event(true);
        // A lost connection is reported, not silently replaced: the store
        // closes it and opens another, and subscribers are woken.
        listener.eager_reconnect(false);
        Ok(Self {
            listener: Some(listener),
            listens: false,
        })
    }

    /// Sends `LISTEN channel` unless it was sent on this connection.
    /// Whether it was sent now (notifications before it were not heard).
    pub(in crate::store::sql) async fn listen(
        &mut self,
        channel: &str,
    ) -> Result<bool, sqlx::Error> {
        if self.listens {
            return Ok(false);
        }
        self.listener().listen(channel).await?;
        self.listens = true;
        Ok(true)
    }

    /// The next notification; `Ok(None)` when the connection was lost.
    /// Cancel-safe: a notification half read stays buffered for the next
    /// call.
    pub(in crate::store::sql) async fn try_recv(
        &mut self,
    ) -> Result<Option<PgNotification>, sqlx::Error> {
        self.listener().try_recv().await
    }

    fn listener(&mut self) -> &mut PgListener {
        match self.listener.as_mut() {
            Some(listener) => listener,
            None => unreachable!("only dropping takes the listener"),
        }
    }

    /// An `Any` statement's rows and results, run on this connection.
    pub(in crate::store::sql) fn fetch_many<'c, 'q: 'c>(
        &'c mut self,
        sql: &'q str,
        arguments: Option<AnyArguments<'q>>,
    ) -> BoxStream<'c, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>> {
        let arguments = match converted(arguments) {
            Ok(arguments) => arguments,
            Err(e) => return futures_util::stream::once(async { Err(e) }).boxed(),
        };
        self.listener()
            .fetch_many((sql, arguments))
            .map(|step| match step? {
                Either::Left(done) => Ok(Either::Left(result(done))),
                Either::Right(row) => Ok(Either::Right(row_of(&row)?)),
            })
            .boxed()
    }

    /// An `Any` statement's first row, run on this connection.
    pub(in crate::store::sql) fn fetch_optional<'c, 'q: 'c>(
        &'c mut self,
        sql: &'q str,
        arguments: Option<AnyArguments<'q>>,
    ) -> BoxFuture<'c, Result<Option<AnyRow>, sqlx::Error>> {
        async move {
            let arguments = converted(arguments)?;
            let row = self.listener().fetch_optional((sql, arguments)).await?;
            row.as_ref().map(row_of).transpose()
        }
        .boxed()
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        // sqlx's listener spawns a task when dropped (to send UNLISTEN and
        // hand its connection back), which panics outside a runtime: a
        // store dropped after its runtime shut down leaves the socket to
        // the process's exit instead.
        let listener = self.listener.take();
        if tokio::runtime::Handle::try_current().is_err() {
            std::mem::forget(listener);
        }
    }
}

/// `Any` arguments as PostgreSQL's, as sqlx's `Any` driver converts them.
fn converted(arguments: Option<AnyArguments<'_>>) -> Result<Option<PgArguments>, sqlx::Error> {
    arguments
        .as_ref()
        .map(AnyArguments::convert_to::<PgArguments>)
        .transpose()
        .map_err(sqlx::Error::Encode)
}

fn row_of(row: &PgRow) -> Result<AnyRow, sqlx::Error> {
    AnyRow::try_from(row)
}

/// What sqlx's `Any` driver makes of a PostgreSQL result (its fields are
/// public for drivers, if undocumented).
fn result(done: PgQueryResult) -> AnyQueryResult {
    AnyQueryResult {
        rows_affected: done.rows_affected(),
        last_insert_id: None,
    }
}
