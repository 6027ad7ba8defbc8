//! The one connection a store's own statements share.
//!
//! A service's database has few connections to give, and a replica that
//! only follows must not sit on one. Every statement a
//! [`SqlStore`](super::SqlStore) sends for itself (lease, member, history,
//! run-record and schema statements, push probes) goes through this one
//! connection, one statement at a time (batched renewals and heartbeats
//! keep that to a few statements per renew period for any number of
//! elections; the price: a statement that waits, such as an acquisition
//! queued on the row lock of a fenced transaction, holds up the process's
//! other statements until it ends):
//! - while this process holds a lease, the connection stays open for the
//!   whole tenure: a leader never gives it back to a server that may then
//!   refuse it a new one, so a full server cannot depose a healthy leader;
//! - so it does, on PostgreSQL and SQLite, while anything in the process
//!   subscribes to pushes (a designated successor, an observer): a woken
//!   successor's read and acquisition must not wait for a new connection.
//!   On MySQL/MariaDB the wake-up itself blocks a connection of its own (a
//!   named-lock wait), which the statements adopt when it wakes or just
//!   before the follower's timed read ([`OneConnection::adopt`]), and the
//!   wait takes back after the read ([`OneConnection::reclaim`]): a
//!   successor holds that one alone;
//! - otherwise it is closed once it has gone [`LINGER`] unused: a follower
//!   that reads once per TTL holds none between its reads, and the reads
//!   of one wake-up (lease, members, acquire) still share one;
//! - a statement that fails or is cancelled closes it (it may be broken or
//!   mid-statement); the next statement opens another. Statements sent by
//!   a task of their own are cancelled too, so that a request a broken
//!   network lost never holds the connection for good: a batch once all
//!   its callers have given up (`util/gather.rs`, `batch.rs`), a history
//!   job after its limit (`after.rs`), the push listener's `LISTEN` after
//!   a probe's wait.
//!
//! On PostgreSQL, unless a pooler stands in between, the same connection
//! also carries `LISTEN` ([`OneConnection::listening_on`]): between
//! statements the push listener waits on it for notifications, and gives
//! it up the moment a statement wants it (notifications that arrive
//! meanwhile wait in its buffer). A leader or a designated successor then
//! holds one connection in all.
//!
//! On MySQL/MariaDB, while this process leads, the leader's doorbell sleeps
//! on it between statements ([`OneConnection::lend_to_sleep`],
//! `mysql/bell.rs`), and a statement that wants it interrupts the sleep
//! (`KILL QUERY`, from another connection: MySQL has no other way in):
//! a leader holds one connection there too.
//!
//! The connection is opened through the pool (its options and timeout) and
//! then detached from it: the pool's maximum, and closing the pool, are
//! the application's. Fenced transactions and the application's own
//! statements ([`SqlStore::pool`](super::SqlStore::pool)) use the pool.
//! The other wake-ups that block on a connection (MySQL's followers' named
//! locks and observers' doorbells, PostgreSQL's `LISTEN` through a
//! `push_url`) hold their own: see `wake.rs`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::any::{AnyQueryResult, AnyRow};
use sqlx::AnyPool;
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

use super::conn::Conn;
use crate::store::ElectionKey;

/// How long the connection stays open after its last statement while it
/// is not kept: longer than the gap between the statements of one wake-up
/// (a read, then the member list or the acquisition: microseconds to a few
/// milliseconds), far shorter than a follower's wait between reads (its
/// lease's expiry). Every follower of a fleet holds it this long per read.
pub(super) const LINGER: Duration = Duration::from_millis(50);

/// How long closing a connection that is being replaced may take.
const REPLACED_CLOSE: Duration = Duration::from_secs(1);

/// How often a kept connection's closer looks whether it is still kept.
const KEPT_CHECK: Duration = Duration::from_secs(1);

/// Whether something in the process subscribes to pushes.
type Subscribed = Box<dyn Fn() -> bool + Send + Sync>;

/// The store's own connection: opened when a statement needs it, kept
/// while this process leads or anything in it subscribes to pushes, closed
/// when idle otherwise.
#[derive(Debug)]
pub(super) struct OneConnection {
    pool: AnyPool,
    /// Whether each lend runs in a transaction of its own (see
    /// [`OneConnection::in_transactions`]).
    in_transactions: bool,
    /// PostgreSQL: connections are opened as listeners with these options
    /// ([`OneConnection::listening_on`]).
    #[cfg(feature = "postgres")]
    listening: Option<sqlx::postgres::PgConnectOptions>,
    slot: Arc<tokio::sync::Mutex<Slot>>,
    shared: Arc<Shared>,
    /// Statements waiting for the connection while the push listener waits
    /// on it: it lets go when told.
    wanted: Arc<Wanted>,
}

/// How many statements wait for the connection, and the bell the push
/// listener hears them by.
#[derive(Debug, Default)]
struct Wanted {
    waiting: std::sync::atomic::AtomicUsize,
    bell: Notify,
}

/// A statement's wait for the connection, counted in [`Wanted`] until it
/// has the connection.
struct Waiting<'a>(&'a Wanted);

impl<'a> Waiting<'a> {
    fn new(wanted: &'a Wanted) -> Self {
        wanted.waiting.fetch_add(1, Ordering::AcqRel);
        wanted.bell.notify_one();
        Self(wanted)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Shared {
    /// The elections this process holds a lease of: the connection is
    /// kept while any is.
    leading: Mutex<HashSet<ElectionKey>>,
    /// Whether the connection is open now (for `tenure status`).
    open: AtomicBool,
    /// Connections opened so far.
    opened: AtomicU64,
    /// Which connection is in the slot: one more each time one is put
    /// there (0: none yet). What a session holds on the server (MySQL's
    /// named locks) went with the connection it was taken on.
    generation: AtomicU64,
    /// Whether a task will close the connection once it is idle.
    closer: AtomicBool,
    /// Set once by the store: whether anything subscribes to its pushes.
    subscribed: std::sync::OnceLock<Subscribed>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("open", &self.open)
            .field("kept", &self.kept())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Slot {
    conn: Option<Conn>,
    last_used: Option<Instant>,
    /// MySQL/MariaDB: a connection handed over by a follower's lock wait
    /// for the read due soon stays open until then, if it is not used
    /// before ([`OneConnection::adopt`]).
    kept_until: Option<Instant>,
    /// The connection was lent while this process led: its session may
    /// hold a leader's named locks, so a follower's wait never takes it
    /// ([`OneConnection::reclaim`]); it closes instead, which frees them.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    led_on: bool,
}

/// The connection, lent to one statement (or one short series of them) at
/// a time. [`Lent::keep`] after success keeps it for the next statement;
/// dropped instead (after an error or a cancellation), it is closed.
pub(super) struct Lent {
    slot: OwnedMutexGuard<Slot>,
    /// A transaction is open on the connection, to be committed by
    /// [`Lent::keep`].
    in_transaction: bool,
    shared: Arc<Shared>,
    weak_slot: Weak<tokio::sync::Mutex<Slot>>,
    kept: bool,
    /// Lent to the doorbell's sleep, which is no statement: the
    /// connection's last use stays the statement's before it.
    sleeping: bool,
    /// Keep the connection open until then, unused (see [`Slot::kept_until`]).
    kept_until: Option<Instant>,
}

impl OneConnection {
    pub(super) fn new(pool: AnyPool) -> Self {
        Self {
            pool,
            in_transactions: false,
            #[cfg(feature = "postgres")]
            listening: None,
            slot: Arc::default(),
            shared: Arc::default(),
            wanted: Arc::default(),
        }
    }

    /// PostgreSQL without a pooler: the connection is opened with
    /// `options` as one that can also listen, so that the push listener
    /// needs no connection of its own ([`OneConnection::lend_to_listen`]).
    #[cfg(feature = "postgres")]
    pub(super) fn listening_on(mut self, options: sqlx::postgres::PgConnectOptions) -> Self {
        self.listening = Some(options);
        self
    }

    /// Each lend runs in a transaction of its own, committed by
    /// [`Lent::keep`], which drops every prepared statement on the server
    /// connection at its start and before its commit. For a pooler that
    /// hands a server connection to a client for one transaction only
    /// (PgBouncer's transaction mode): sqlx prepares a statement and
    /// executes it in two protocol exchanges, which outside a transaction
    /// may reach two different server connections, and a prepared
    /// statement left on a server connection would collide with the names
    /// the next client gives its own. (The driver URL turns sqlx's
    /// statement cache off there, so no statement is used past its
    /// transaction: `postgres/pooler.rs`.)
    pub(super) fn in_transactions(mut self) -> Self {
        self.in_transactions = true;
        self
    }

    /// The connection, once the statements before have finished with it;
    /// opened from the pool if it is closed. When the pool gives up on a
    /// server that refuses connections (full: PostgreSQL's "too many
    /// clients", MySQL's "Too many connections"), the error is the
    /// server's own words rather than the pool's "timed out".
    pub(super) async fn lend(&self) -> Result<Lent, sqlx::Error> {
        self.lend_in(true).await
    }

    /// The connection for statements without parameters, which sqlx sends
    /// whole in one exchange (the simple protocol): a pooler in
    /// transaction mode keeps each on one server connection, so they run
    /// without a transaction around them, where a statement that fails on
    /// purpose (a probe for a table that may not exist) cannot abort the
    /// ones after it.
    pub(super) async fn lend_for_simple_statements(&self) -> Result<Lent, sqlx::Error> {
        self.lend_in(false).await
    }

    async fn lend_in(&self, transaction: bool) -> Result<Lent, sqlx::Error> {
        let slot = {
            // Counted until the lock is ours: the push listener, if it
            // waits on the connection, lets go of it.
            let _waiting = Waiting::new(&self.wanted);
            self.slot.clone().lock_owned().await
        };
        let mut lent = self.lent(slot, false).await?;
        if self.in_transactions && transaction {
            // Dropped on an error: the connection closes with it.
            // What another client left prepared on the server connection
            // this transaction got could collide with the names sqlx gives.
            simple(lent.conn(), "BEGIN; DEALLOCATE ALL").await?;
            lent.in_transaction = true;
        }
        Ok(lent)
    }

    /// The connection for the push listener to wait on, with `LISTEN
    /// channel` sent; opened if it is closed. Whether `LISTEN` was sent
    /// now (a new connection: what was notified before it went unheard).
    /// Only where the connection listens ([`OneConnection::listens`]).
    #[cfg(feature = "postgres")]
    pub(super) async fn lend_to_listen(&self, channel: &str) -> Result<(Lent, bool), sqlx::Error> {
        let slot = self.slot.clone().lock_owned().await;
        let mut lent = self.lent(slot, true).await?;
        let fresh = match lent.conn().listening() {
            // Bounded: the listener holds the connection meanwhile, and a
            // `LISTEN` a broken network swallowed is never answered.
            Some(listening) => {
                let limit = crate::store::StoreOptions::PUSH_PROBE_TIMEOUT;
                match tokio::time::timeout(limit, listening.listen(channel)).await {
                    Ok(sent) => sent?,
                    Err(_) => {
                        return Err(sqlx::Error::Io(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("LISTEN was not answered within {limit:?}"),
                        )))
                    }
                }
            }
            None => unreachable!("a listening store opens listening connections"),
        };
        Ok((lent, fresh))
    }

    /// Until a statement wants the connection the push listener (or, on
    /// MySQL/MariaDB, the doorbell) waits on.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) async fn wanted(&self) {
        loop {
            if self.wanted.waiting.load(Ordering::Acquire) > 0 {
                return;
            }
            self.wanted.bell.notified().await;
        }
    }

    /// Whether the connection also carries the push listener's `LISTEN`.
    #[cfg(feature = "postgres")]
    pub(super) fn listens(&self) -> bool {
        self.listening.is_some()
    }

    /// Whether a statement waits for the connection now.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) fn is_wanted(&self) -> bool {
        self.wanted.waiting.load(Ordering::Acquire) > 0
    }

    /// MySQL/MariaDB: the open connection, for the leader's doorbell to
    /// sleep on, once no statement has used it for `quiet` (statements come
    /// in short series: the doorbell would only be interrupted again at
    /// once). `Err(Some(wait))`: used too recently, try after `wait`;
    /// `Err(None)`: not open (the doorbell never opens one: the next
    /// statement does). Lent this way, the connection's last use stays the
    /// last statement's.
    #[cfg(feature = "mysql")]
    pub(super) async fn lend_to_sleep(&self, quiet: Duration) -> Result<Lent, Option<Duration>> {
        let slot = self.slot.clone().lock_owned().await;
        if slot.conn.is_none() {
            return Err(None);
        }
        if let Some(since) = slot.last_used.map(|t| t.elapsed()) {
            if since < quiet {
                return Err(Some(quiet - since));
            }
        }
        Ok(self.lent_as(slot, false, true))
    }

    /// `slot`'s connection, opened if it is closed, lent; for the push
    /// listener (`to_listen`), one that can listen. A connection that
    /// cannot is replaced by one that can: while this process leads, the
    /// new one is opened before the old one is closed (a leader whose
    /// first connection predates the first subscription keeps it if the
    /// server has no other to give); otherwise the old one is closed
    /// first, so a follower never holds two.
    async fn lent(
        &self,
        mut slot: OwnedMutexGuard<Slot>,
        to_listen: bool,
    ) -> Result<Lent, sqlx::Error> {
        let replace = match &slot.conn {
            None => true,
            Some(conn) => to_listen && !conn.can_listen(),
        };
        if replace && !self.shared.leads() {
            if let Some(replaced) = slot.conn.take() {
                self.shared.open.store(false, Ordering::Relaxed);
                // Bounded: a goodbye to a server that stopped answering
                // must not hold up the connection that replaces it.
                let _ = tokio::time::timeout(REPLACED_CLOSE, replaced.close()).await;
            }
        }
        if replace {
            // One that can listen while anything subscribes: a follower
            // not in line reads on a plain one (a listener's close costs
            // an `UNLISTEN` round trip).
            let listening = to_listen || self.shared.subscribes();
            let conn = match self.open(listening).await {
                Ok(conn) => conn,
                Err(e @ sqlx::Error::PoolTimedOut) => {
                    return Err(refusal(&self.pool).await.unwrap_or(e))
                }
                Err(e) => return Err(e),
            };
            if let Some(replaced) = slot.conn.replace(conn) {
                replaced.close().await;
            }
            slot.led_on = false;
            self.shared.generation.fetch_add(1, Ordering::AcqRel);
            self.shared.open.store(true, Ordering::Relaxed);
            self.shared.opened.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.lent_as(slot, false, false))
    }

    /// `slot` as a lend: `kept` already, or lent to the doorbell's sleep.
    fn lent_as(&self, mut slot: OwnedMutexGuard<Slot>, kept: bool, sleeping: bool) -> Lent {
        if self.shared.leads() {
            slot.led_on = true;
        }
        Lent {
            slot,
            in_transaction: false,
            shared: self.shared.clone(),
            weak_slot: Arc::downgrade(&self.slot),
            kept,
            sleeping,
            kept_until: None,
        }
    }

    /// A new connection, from the pool's options and within its timeout;
    /// on PostgreSQL without a pooler, one that can also listen if
    /// `listening`.
    async fn open(&self, listening: bool) -> Result<Conn, sqlx::Error> {
        #[cfg(feature = "postgres")]
        if let Some(options) = self.listening.as_ref().filter(|_| listening) {
            let timeout = self.pool.options().get_acquire_timeout();
            let listening = super::postgres::Listening::open(options.clone(), timeout).await?;
            return Ok(Conn::Listening(Box::new(listening)));
        }
        let _ = listening;
        Ok(Conn::Any(self.pool.acquire().await?.detach()))
    }

    /// Takes `conn`, a healthy connection of this store's that finished
    /// another job (MySQL/MariaDB: a follower's lock wait, just woken by
    /// the leader letting go, or ended just before the follower's timed
    /// read), as the statements' connection if none is open and no
    /// statement holds the slot: the read and acquisition that follow then
    /// open none. Kept unused until `kept_until` if given (the read due
    /// then), else for [`LINGER`] like any other. Gives it back otherwise.
    #[cfg(feature = "mysql")]
    pub(super) fn adopt(
        &self,
        conn: sqlx::AnyConnection,
        kept_until: Option<Instant>,
    ) -> Option<sqlx::AnyConnection> {
        let Ok(mut slot) = self.slot.clone().try_lock_owned() else {
            return Some(conn);
        };
        if slot.conn.is_some() {
            return Some(conn);
        }
        slot.conn = Some(Conn::Any(conn));
        slot.led_on = false;
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        self.shared.open.store(true, Ordering::Relaxed);
        // Lent and kept at once: it closes when idle like any other.
        let mut lent = self.lent_as(slot, true, false);
        lent.kept_until = kept_until;
        drop(lent);
        None
    }

    /// MySQL/MariaDB: takes the open connection out, for a follower's lock
    /// wait, once no statement has used it for `quiet` (the statements of
    /// one wake-up come in a short series), unless this process leads (a
    /// leader keeps it for its tenure) or led on it (its session may still
    /// hold the leader's named locks). `None` if none is open or it is not
    /// to be taken: the wait opens a connection of its own then.
    #[cfg(feature = "mysql")]
    pub(super) async fn reclaim(&self, quiet: Duration) -> Option<sqlx::AnyConnection> {
        loop {
            let mut slot = self.slot.clone().lock_owned().await;
            if self.shared.leads() || slot.led_on {
                return None;
            }
            let since = slot.last_used.map(|t| t.elapsed());
            if let Some(since) = since.filter(|since| *since < quiet) {
                drop(slot);
                tokio::time::sleep(quiet - since).await;
                continue;
            }
            return match slot.conn.take() {
                Some(Conn::Any(conn)) => {
                    slot.kept_until = None;
                    self.shared.open.store(false, Ordering::Relaxed);
                    Some(conn)
                }
                other => {
                    slot.conn = other;
                    None
                }
            };
        }
    }

    /// This process now holds a lease of `key`: keep the connection open.
    pub(super) fn leading(&self, key: &ElectionKey) {
        self.shared
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
    }

    /// This process's tenure of `key` ended: once it leads nothing (and
    /// nothing subscribes), the connection closes when idle.
    pub(super) fn ended(&self, key: &ElectionKey) {
        self.shared
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Keeps the connection open while `subscribed()` says something in
    /// the process subscribes to pushes; set once, by the store.
    pub(super) fn keep_while(&self, subscribed: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.shared.subscribed.set(Box::new(subscribed));
    }

    /// Whether the connection is open now.
    pub(super) fn is_open(&self) -> bool {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// How many times the connection was opened.
    pub(super) fn opened(&self) -> u64 {
        self.shared.opened.load(Ordering::Relaxed)
    }

    /// Which connection is open now, or was last (see [`Lent::generation`]).
    #[cfg(feature = "mysql")]
    pub(super) fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Whether this process holds a lease of `key`.
    #[cfg(feature = "mysql")]
    pub(super) fn leads(&self, key: &ElectionKey) -> bool {
        self.shared
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }
}

impl Shared {
    /// Whether the connection stays open when idle: this process leads, or
    /// something in it subscribes.
    fn kept(&self) -> bool {
        self.leads() || self.subscribes()
    }

    fn subscribes(&self) -> bool {
        self.subscribed.get().is_some_and(|subscribed| subscribed())
    }

    fn leads(&self) -> bool {
        !self
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

impl Lent {
    /// Which connection this is: a later lend with the same generation has
    /// the same connection (and what its session holds on the server).
    #[cfg(feature = "mysql")]
    pub(super) fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    pub(super) fn conn(&mut self) -> &mut Conn {
        // `lend` opened it, and only `Drop` takes it out.
        match self.slot.conn.as_mut() {
            Some(conn) => conn,
            None => unreachable!("a lent connection is open"),
        }
    }

    /// The statements went through: commits them where each lend is a
    /// transaction, and keeps the connection for the next one. An error
    /// means they may not have taken effect (and the connection is closed).
    pub(super) async fn keep(mut self) -> Result<(), sqlx::Error> {
        if self.in_transaction {
            // What this transaction prepared would stay on a server
            // connection the pooler may give another client next.
            simple(self.conn(), "DEALLOCATE ALL; COMMIT").await?;
            self.in_transaction = false;
        }
        self.kept = true;
        Ok(())
    }

    /// After a statement the server refused (the connection itself is
    /// fine): keeps the connection, unless the lend is a transaction,
    /// which the refusal aborted and which can no longer drop what it
    /// prepared: that connection is closed.
    pub(super) async fn keep_after_refusal(self) -> Result<(), sqlx::Error> {
        if self.in_transaction {
            return Ok(());
        }
        self.keep().await
    }

    /// `result`, keeping the connection if it is `Ok` (and committing, see
    /// [`Lent::keep`]: a failed commit is the error); otherwise it is closed.
    pub(super) async fn keep_if_ok<T>(
        self,
        result: Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let value = match result {
            Ok(value) => value,
            // MySQL/MariaDB: another process's ring (`KILL QUERY`, meant
            // for the doorbell's sleep) landed on this statement instead.
            // The connection is fine, and it holds the leader's named
            // locks: kept. The statement did not take effect.
            #[cfg(feature = "mysql")]
            Err(e) if super::mysql::interrupted(&e) => {
                let _ = self.keep_after_refusal().await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.keep().await?;
        Ok(value)
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
        if !self.sleeping {
            self.slot.last_used = Some(Instant::now());
            self.slot.kept_until = self.kept_until;
        }
        // Under the slot's lock, as the closer's decision to stop: one
        // runs whenever the connection is open.
        if !self.shared.closer.swap(true, Ordering::AcqRel) {
            let (shared, slot) = (self.shared.clone(), self.weak_slot.clone());
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(close_when_idle(shared, slot))),
                Err(_) => self.shared.closer.store(false, Ordering::Release),
            }
        }
    }
}

/// Closes the connection once it has gone [`LINGER`] unused while it is
/// not kept (see [`Shared::kept`]); runs while the connection is open.
async fn close_when_idle(shared: Arc<Shared>, slot: Weak<tokio::sync::Mutex<Slot>>) {
    loop {
        let Some(slot) = slot.upgrade() else { return };
        if shared.kept() {
            // Not asking for the lock: the push listener holds it while
            // it waits on the connection.
            drop(slot);
            tokio::time::sleep(KEPT_CHECK).await;
            continue;
        }
        // After the statement that holds it now, if one does.
        let mut held = slot.lock().await;
        // An adopted connection waiting for its read counts as used then.
        let idle_since = match (&held.conn, held.last_used) {
            (Some(_), Some(last_used)) => last_used.max(held.kept_until.unwrap_or(last_used)),
            _ => {
                shared.closer.store(false, Ordering::Release);
                return;
            }
        };
        let wait = if shared.kept() {
            KEPT_CHECK
        } else {
            let due = idle_since + LINGER;
            let now = Instant::now();
            if due <= now {
                let conn = held.conn.take();
                shared.open.store(false, Ordering::Relaxed);
                shared.closer.store(false, Ordering::Release);
                drop(held);
                if let Some(conn) = conn {
                    conn.close().await;
                }
                return;
            }
            due - now
        };
        drop(held);
        drop(slot);
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
            let _ = sqlx::Connection::close(conn).await;
            None
        }
        _ => None,
    }
}

/// Sends `sql` by the simple protocol (no parameters, one exchange).
async fn simple(conn: &mut Conn, sql: &'static str) -> Result<(), sqlx::Error> {
    use sqlx::Executor as _;
    conn.execute(sql).await.map(drop)
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
        lent.keep_if_ok(rows).await
    }

    async fn fetch_optional_on(self, own: &OneConnection) -> Result<Option<AnyRow>, sqlx::Error> {
        let mut lent = own.lend().await?;
        let row = self.fetch_optional(lent.conn()).await;
        lent.keep_if_ok(row).await
    }

    async fn execute_on(self, own: &OneConnection) -> Result<AnyQueryResult, sqlx::Error> {
        let mut lent = own.lend().await?;
        let done = self.execute(lent.conn()).await;
        lent.keep_if_ok(done).await
    }
}
