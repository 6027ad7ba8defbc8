//! The one connection a store's own statements share.
//!
//! A service's database has few connections to give, and a replica that
//! only follows must not sit on one. Every statement a
//! [`SqlStore`](super::SqlStore) sends for itself (lease, member, history,
//! run-record and schema statements, push probes, doorbells) goes through
//! this one connection, one statement at a time:
//! - while this process holds a lease, the connection stays open for the
//!   whole tenure: a leader never gives it back to a server that may then
//!   refuse it a new one, so a full server cannot depose a healthy leader;
//! - otherwise it is closed once it has gone [`LINGER`] unused: a follower
//!   that reads once per TTL holds none between its reads, and the reads
//!   of one hand-over (lease, members, acquire) still share one;
//! - a statement that fails or is cancelled closes it (it may be broken or
//!   mid-statement); the next statement opens another.
//!
//! The connection is opened through the pool (its options and timeout) and
//! then detached from it: the pool's maximum, and closing the pool, are
//! the application's. Fenced transactions and the application's own
//! statements ([`SqlStore::pool`](super::SqlStore::pool)) use the pool.
//! Wake-ups that block on a connection (PostgreSQL's LISTEN, MySQL's named
//! locks and doorbells) hold their own: see `wake.rs`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::any::{AnyQueryResult, AnyRow};
use sqlx::{AnyConnection, AnyPool, Connection as _};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::store::ElectionKey;

/// How long the connection stays open after its last statement when this
/// process leads nothing: far longer than the statements of one hand-over
/// take (milliseconds), far shorter than a follower's wait between reads
/// (its lease's expiry).
pub(super) const LINGER: Duration = Duration::from_secs(1);

/// The store's own connection: opened when a statement needs it, kept
/// while this process leads, closed when idle otherwise.
#[derive(Debug)]
pub(super) struct OneConnection {
    pool: AnyPool,
    slot: Arc<tokio::sync::Mutex<Slot>>,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// The elections this process holds a lease of: the connection is
    /// kept while any is.
    leading: Mutex<HashSet<ElectionKey>>,
    /// Whether the connection is open now (for `tenure status`).
    open: AtomicBool,
    /// Connections opened so far.
    opened: AtomicU64,
    /// Whether a task will close the connection once it is idle.
    closer: AtomicBool,
}

#[derive(Debug, Default)]
struct Slot {
    conn: Option<AnyConnection>,
    last_used: Option<Instant>,
}

/// The connection, lent to one statement (or one short series of them) at
/// a time. [`Lent::keep`] after success keeps it for the next statement;
/// dropped instead (after an error or a cancellation), it is closed.
pub(super) struct Lent {
    slot: OwnedMutexGuard<Slot>,
    shared: Arc<Shared>,
    weak_slot: Weak<tokio::sync::Mutex<Slot>>,
    kept: bool,
}

impl OneConnection {
    pub(super) fn new(pool: AnyPool) -> Self {
        Self {
            pool,
            slot: Arc::default(),
            shared: Arc::default(),
        }
    }

    /// The connection, once the statements before have finished with it;
    /// opened from the pool if it is closed. When the pool gives up on a
    /// server that refuses connections (full: PostgreSQL's "too many
    /// clients", MySQL's "Too many connections"), the error is the
    /// server's own words rather than the pool's "timed out".
    pub(super) async fn lend(&self) -> Result<Lent, sqlx::Error> {
        let mut slot = self.slot.clone().lock_owned().await;
        if slot.conn.is_none() {
            let conn = match self.pool.acquire().await {
                Ok(conn) => conn.detach(),
                Err(e @ sqlx::Error::PoolTimedOut) => {
                    return Err(refusal(&self.pool).await.unwrap_or(e))
                }
                Err(e) => return Err(e),
            };
            slot.conn = Some(conn);
            self.shared.open.store(true, Ordering::Relaxed);
            self.shared.opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Lent {
            slot,
            shared: self.shared.clone(),
            weak_slot: Arc::downgrade(&self.slot),
            kept: false,
        })
    }

    /// This process now holds a lease of `key`: keep the connection open.
    pub(super) fn leading(&self, key: &ElectionKey) {
        self.shared
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
    }

    /// This process's tenure of `key` ended: once it leads nothing, the
    /// connection closes when idle.
    pub(super) fn ended(&self, key: &ElectionKey) {
        let none_left = {
            let mut leading = self
                .shared
                .leading
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            leading.remove(key);
            leading.is_empty()
        };
        if none_left {
            spawn_closer(&self.shared, Arc::downgrade(&self.slot));
        }
    }

    /// Whether the connection is open now.
    pub(super) fn is_open(&self) -> bool {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// How many times the connection was opened.
    pub(super) fn opened(&self) -> u64 {
        self.shared.opened.load(Ordering::Relaxed)
    }
}

impl Shared {
    fn leads(&self) -> bool {
        !self
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

impl Lent {
    pub(super) fn conn(&mut self) -> &mut AnyConnection {
        // `lend` opened it, and only `Drop` takes it out.
        match self.slot.conn.as_mut() {
            Some(conn) => conn,
            None => unreachable!("a lent connection is open"),
        }
    }

    /// The statements went through: keep the connection for the next one.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }

    /// `result`, keeping the connection if it is `Ok`; otherwise it is
    /// closed.
    pub(super) fn keep_if_ok<T, E>(self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.keep();
        }
        result
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if !self.kept {
            // Broken, or cut off mid-statement: not worth a round trip to
            // find out; dropped, its socket closes.
            drop(self.slot.conn.take());
            self.shared.open.store(false, Ordering::Relaxed);
            return;
        }
        self.slot.last_used = Some(Instant::now());
        if !self.shared.leads() {
            spawn_closer(&self.shared, self.weak_slot.clone());
        }
    }
}

/// Starts the task that closes the connection once it has gone [`LINGER`]
/// unused while this process leads nothing, unless one runs already.
fn spawn_closer(shared: &Arc<Shared>, slot: Weak<tokio::sync::Mutex<Slot>>) {
    if shared.closer.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        shared.closer.store(false, Ordering::Release);
        return;
    };
    let shared = shared.clone();
    runtime.spawn(async move {
        close_when_idle(&shared, slot).await;
        shared.closer.store(false, Ordering::Release);
    });
}

async fn close_when_idle(shared: &Shared, slot: Weak<tokio::sync::Mutex<Slot>>) {
    loop {
        let wait = {
            let Some(slot) = slot.upgrade() else { return };
            if shared.leads() {
                return;
            }
            // After the statement that holds it now, if one does.
            let mut held = slot.lock().await;
            let Some(last_used) = held.last_used else {
                return;
            };
            if held.conn.is_none() {
                return;
            }
            let due = last_used + LINGER;
            if due <= Instant::now() {
                let conn = held.conn.take();
                shared.open.store(false, Ordering::Relaxed);
                drop(held);
                if let Some(conn) = conn {
                    let _ = conn.close().await;
                }
                return;
            }
            due - Instant::now()
        };
        tokio::time::sleep(wait).await;
    }
}

/// Why the pool could not open a connection, in the server's words: the
/// pool retries a connection the server refuses as busy (PostgreSQL's "too
/// many clients", a role's connection limit) until its timeout and then
/// reports only that it timed out. Opens one connection outside the pool
/// to find out; `None` if that one opens (the pool itself was busy) or
/// says nothing more.
pub(super) async fn refusal(pool: &AnyPool) -> Option<sqlx::Error> {
    use sqlx::ConnectOptions;
    let options = pool.connect_options();
    let wait = pool.options().get_acquire_timeout();
    match tokio::time::timeout(wait, options.connect()).await {
        Ok(Err(refused @ sqlx::Error::Database(_))) => Some(refused),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            None
        }
        _ => None,
    }
}

/// A statement run on the store's connection ([`OneConnection`]), kept
/// for the next statement if it went through.
pub(super) trait OnOwn<'q> {
    /// Every row of the answer.
    async fn fetch_all_on(self, own: &OneConnection) -> Result<Vec<AnyRow>, sqlx::Error>;
    /// The first row of the answer, if any.
    async fn fetch_optional_on(self, own: &OneConnection) -> Result<Option<AnyRow>, sqlx::Error>;
    /// Rows affected.
    async fn execute_on(self, own: &OneConnection) -> Result<AnyQueryResult, sqlx::Error>;
}

impl<'q> OnOwn<'q> for super::statements::Query<'q> {
    async fn fetch_all_on(self, own: &OneConnection) -> Result<Vec<AnyRow>, sqlx::Error> {
        let mut lent = own.lend().await?;
        let rows = self.fetch_all(lent.conn()).await;
        lent.keep_if_ok(rows)
    }

    async fn fetch_optional_on(self, own: &OneConnection) -> Result<Option<AnyRow>, sqlx::Error> {
        let mut lent = own.lend().await?;
        let row = self.fetch_optional(lent.conn()).await;
        lent.keep_if_ok(row)
    }

    async fn execute_on(self, own: &OneConnection) -> Result<AnyQueryResult, sqlx::Error> {
        let mut lent = own.lend().await?;
        let done = self.execute(lent.conn()).await;
        lent.keep_if_ok(done)
    }
}
