//! MySQL/MariaDB: a leader's doorbell, so that a resign or transfer asked by
//! another process reaches the leader in milliseconds rather than at its next
//! renewal. MySQL has no notifications, and a named lock can only be freed
//! by the connection holding it, so the leader keeps one connection of its own
//! asleep in `SELECT SLEEP(..)` holding one *bell* lock per election it leads.
//! A process that has just marked a hand-over request finds that connection
//! with `IS_USED_LOCK(bell)` and interrupts its sleep with `KILL QUERY`, which
//! wakes the leaders of that process: they read the lease and act on the
//! request. (MySQL lets an account kill its own statements without any
//! privilege; a requester logged in as another account without
//! `CONNECTION_ADMIN`/`SUPER` cannot, and the leader then hears of the
//! request at its next renewal, as before.)
//!
//! Like the election locks, the bell is a wake-up signal only: the hand-over
//! itself is the conditional write, and a missed ring costs a renew period.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AnyPool, Connection, Row};

use crate::store::util::wakeups::Sender;
use crate::store::ElectionKey;

/// How long one sleep lasts: a statement per this period while leading.
const SLEEP_SECS: i64 = 600;
/// How long one wait for a bell held by another connection lasts (then it
/// is asked for again, and its holder rung again).
const RETRY_SECS: i64 = 1;
/// The pause after the bell connection failed, before opening another.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// How long to wait for our own sleep to end before killing it again.
const KILL_REPEAT: Duration = Duration::from_millis(100);
/// How long a statement on a bell connection runs before we interrupt it
/// ourselves. A `KILL QUERY` that reached MariaDB 10.11 within a few
/// milliseconds of the statement it interrupts was seen to take two seconds
/// to land (the server keeps trying to wake the thread for up to two
/// seconds), and every other `KILL` of that connection waited behind it: an
/// acquirer's ring was heard two seconds late.
const KILL_SETTLE: Duration = Duration::from_millis(50);
/// How long a call on the bell connection may take once interrupted.
pub(in crate::store::sql) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The lock's name: a hash, because names are limited to 64 characters and
/// elections are not; stable across processes and versions.
pub(in crate::store::sql) fn lock_name(prefix: &str, key: &ElectionKey) -> String {
    let mut h = Sha256::new();
    h.update(prefix.as_bytes());
    h.update([0x1f]);
    h.update(key.namespace.as_bytes());
    h.update([0x1f]);
    h.update(key.election.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("tenure_{hex}")
}

/// A bell lock's name: the election lock's name and a suffix (at most 64
/// characters, as named locks must be).
pub(in crate::store::sql) fn bell_name(lock_name: &str) -> String {
    format!("{lock_name}_bell")
}

/// The elections this process leads, shared with the bell task.
#[derive(Debug, Default)]
struct Led {
    /// Bell name → election.
    keys: Mutex<HashMap<String, ElectionKey>>,
    /// Told (`notify_waiters`, which leaves no permit) when `keys` changes;
    /// the task registers before it reads `keys` (see `watch_bell.rs`).
    changed: Arc<tokio::sync::Notify>,
}

/// The doorbell of one store; the task runs while the store lives and
/// something is led.
#[derive(Debug)]
pub(in crate::store::sql) struct Bell {
    led: Arc<Led>,
    /// Whether the bell's connection is open (for `connections_held`).
    open: Arc<AtomicBool>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pool: AnyPool,
    wake: Weak<Sender>,
}

impl Drop for Bell {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

impl Bell {
    pub(in crate::store::sql) fn new(pool: AnyPool, wake: Weak<Sender>) -> Self {
        Self {
            led: Arc::default(),
            open: Arc::default(),
            task: Mutex::new(None),
            pool,
            wake,
        }
    }

    /// This process leads `key`: hold its bell.
    pub(in crate::store::sql) fn leading(&self, name: String, key: &ElectionKey) {
        {
            let mut keys = self.led.keys.lock().unwrap_or_else(|p| p.into_inner());
            if keys.insert(name, key.clone()).is_some() {
                return;
            }
        }
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_none_or(|t| t.is_finished()) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (led, pool, wake, open) = (
                    Arc::downgrade(&self.led),
                    self.pool.clone(),
                    self.wake.clone(),
                    self.open.clone(),
                );
                *task = Some(rt.spawn(ring_loop(led, pool, wake, open)));
            }
        }
        self.led.changed.notify_waiters();
    }

    /// Whether the doorbell holds a connection now.
    pub(in crate::store::sql) fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed)
    }

    /// This process no longer leads `key`.
    pub(in crate::store::sql) fn ended(&self, name: &str) {
        let removed = self
            .led
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name)
            .is_some();
        if removed {
            self.led.changed.notify_waiters();
        }
    }

    /// After a hand-over request on `name`'s election: interrupts the sleep
    /// of whichever connection holds that bell (best effort).
    pub(in crate::store::sql) async fn ring(&self, name: &str) {
        ring_holder(&self.pool, name).await;
    }
}

/// Interrupts the statement of whichever connection holds the bell `name`
/// (best effort): a leader's sleep, to wake it; or, from a new leader whose
/// bell is still held, the previous holder's, so that it lets go (see
/// [`ring_loop`]).
async fn ring_holder(pool: &AnyPool, name: &str) {
    let holder = sqlx::query("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
        .bind(name)
        .fetch_one(pool)
        .await
        .and_then(|r| r.try_get::<Option<i64>, _>(0));
    let id = match holder {
        Ok(Some(id)) => id,
        Ok(None) => {
            tracing::trace!(bell = name, "no doorbell to ring");
            return; // no bell: an older leader, or none
        }
        Err(e) => {
            tracing::debug!("doorbell not found: {e}");
            return;
        }
    };
    tracing::trace!(bell = name, connection = id, "ringing the doorbell");
    // KILL takes no placeholders; the id is an integer from the server.
    if let Err(e) = sqlx::raw_sql(&format!("KILL QUERY {id}"))
        .execute(pool)
        .await
    {
        tracing::debug!(
            "doorbell not rung ({e}); the leader hears of the request at its next renewal"
        );
    }
}

/// Whether an error is the interruption of a statement by `KILL QUERY`
/// (`ER_QUERY_INTERRUPTED`, SQLSTATE 70100).
pub(in crate::store::sql) fn interrupted(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.code().as_deref() == Some("70100") || d.message().contains("interrupted")
        }
        _ => false,
    }
}

/// The outcome of one statement on a bell (or watcher) connection.
pub(in crate::store::sql) enum Outcome {
    Done,
    /// Interrupted by a ring.
    Rung,
    /// The connection failed.
    Broken,
}

pub(in crate::store::sql) fn outcome(r: std::result::Result<(), sqlx::Error>) -> Outcome {
    match r {
        Ok(()) => Outcome::Done,
        Err(e) if interrupted(&e) => Outcome::Rung,
        Err(e) => {
            tracing::debug!("doorbell connection failed: {e}");
            Outcome::Broken
        }
    }
}

/// Holds the bells of the led elections and sleeps; a ring wakes every
/// leader of this process (one read each; renewals are not affected).
async fn ring_loop(led: Weak<Led>, pool: AnyPool, wake: Weak<Sender>, open: Arc<AtomicBool>) {
    let mut conn: Option<(AnyConnection, i64)> = None;
    // Cleared however the loop ends (the store dropped, the task aborted).
    let _open = OpenFlag(open.clone());
    let mut held: HashSet<String> = HashSet::new();
    // Bells wanted and found held by another connection: the previous
    // leader's, still asleep holding it (it lets go a few milliseconds after
    // stepping down; a process that exited or crashed holds it until the
    // server notices the dead client, seconds later, or the sleep is
    // interrupted). A request in the meantime rings that connection, not
    // ours, so once such a bell is ours its leader reads once.
    let mut late: HashSet<String> = HashSet::new();
    loop {
        let Some(shared) = led.upgrade() else { return };
        let changed = shared.changed.clone().notified_owned();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let want: HashMap<String, ElectionKey> = shared
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if want.is_empty() {
            // Nothing led: close the connection (frees every bell) and wait.
            if let Some((c, _)) = conn.take() {
                open.store(false, Ordering::Relaxed);
                let _ = c.close().await;
            }
            held.clear();
            late.clear();
            changed.await;
            continue;
        }
        if conn.is_none() {
            conn = self::open(&pool).await;
            open.store(conn.is_some(), Ordering::Relaxed);
            if conn.is_none() {
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        }
        let Some((c, id)) = conn.as_mut() else {
            continue;
        };
        let mut rung = false;
        let mut broken = false;
        // Elections whose bell was just taken late (see `late`).
        let mut taken_late: Vec<ElectionKey> = Vec::new();
        late.retain(|n| want.contains_key(n));
        let stale: Vec<String> = held
            .iter()
            .filter(|n| !want.contains_key(*n))
            .cloned()
            .collect();
        for name in stale {
            let r = call(c, sqlx::query("SELECT RELEASE_LOCK(?)").bind(name.clone())).await;
            match outcome(r) {
                Outcome::Done => {
                    held.remove(&name);
                }
                Outcome::Rung => rung = true,
                Outcome::Broken => broken = true,
            }
        }
        let missing: Vec<&String> = want.keys().filter(|n| !held.contains(*n)).collect();
        for name in missing {
            if broken {
                break;
            }
            let got = tokio::time::timeout(
                CALL_TIMEOUT,
                sqlx::query("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
                    .bind(name.as_str())
                    .fetch_one(&mut *c),
            )
            .await;
            match got {
                Ok(Ok(row)) => {
                    if let Ok(Some(1)) = row.try_get::<Option<i64>, _>(0) {
                        held.insert(name.clone());
                        if late.remove(name) {
                            taken_late.extend(want.get(name).cloned());
                        }
                    } else {
                        tracing::trace!(
                            bell = name.as_str(),
                            "doorbell held by another connection"
                        );
                        late.insert(name.clone());
                        // Interrupt the holder's sleep: a previous leader
                        // that is stepping down lets go at once, and a dead
                        // client's connection is closed by the server when
                        // its statement ends (it kept the bell for seconds).
                        ring_holder(&pool, name).await;
                    }
                }
                Ok(Err(e)) if interrupted(&e) => rung = true,
                _ => broken = true,
            }
        }
        if !broken && !rung {
            // Sleep until a ring, or until the led elections change (then
            // interrupt our own sleep from another connection). While a bell
            // is held elsewhere, wait for it instead (a second at a time):
            // taken the moment its holder lets go. A ring on one of the
            // bells we hold interrupts that wait as it does the sleep.
            let waited = want.keys().find(|n| !held.contains(*n)).cloned();
            let statement = match &waited {
                Some(name) => sqlx::query("SELECT CAST(GET_LOCK(?, ?) AS SIGNED)")
                    .bind(name.clone())
                    .bind(RETRY_SECS),
                None => sqlx::query("SELECT CAST(SLEEP(?) AS SIGNED)").bind(SLEEP_SECS),
            };
            let (answer, own_kill) =
                until_changed(&pool, *id, statement.fetch_one(&mut *c), changed.as_mut()).await;
            let value = match answer {
                None => {
                    broken = true;
                    None
                }
                Some(Ok(row)) => row.try_get::<Option<i64>, _>(0).ok().flatten(),
                Some(Err(e)) if interrupted(&e) => {
                    rung = !own_kill;
                    None
                }
                Some(Err(_)) => {
                    broken = true;
                    None
                }
            };
            match (&waited, value) {
                // The bell we waited for is ours. Recorded even when our
                // own KILL came too late to stop the wait: a lock taken
                // twice on one connection needs two releases.
                (Some(name), Some(1)) => {
                    held.insert(name.clone());
                    late.remove(name);
                    taken_late.extend(want.get(name).cloned());
                }
                // GET_LOCK answers NULL when interrupted (MariaDB; MySQL
                // fails it, as above): a ring on a bell we hold.
                (Some(_), None) if !broken => rung = rung || !own_kill,
                // SLEEP answers 1 when interrupted.
                (None, Some(1)) => rung = !own_kill,
                // Slept or waited it out.
                _ => {}
            }
        }
        drop(shared);
        if let Some(tx) = wake.upgrade() {
            if rung {
                for key in want.into_values() {
                    let _ = tx.send(Some(key));
                }
            } else {
                for key in taken_late {
                    tracing::trace!(election = %key, "doorbell taken late: its leader reads once");
                    let _ = tx.send(Some(key));
                }
            }
        }
        if broken {
            // Closing frees every bell; the next round opens another.
            if let Some((c, _)) = conn.take() {
                open.store(false, Ordering::Relaxed);
                let _ = c.close().await;
            }
            // Bells still wanted are asked for afresh on the new connection;
            // a request meanwhile rings nobody, so they count as late.
            late.extend(held.drain());
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// Clears the doorbell's "open" flag when its task ends.
struct OpenFlag(Arc<AtomicBool>);

impl Drop for OpenFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Waits for `statement`, running on the connection `id`, to answer, or for
/// `changed`: then interrupts it from another connection (`KILL QUERY`,
/// repeated, since one that reaches the server before the statement does
/// interrupts nothing) and waits for it to end. Returns the statement's
/// answer (`None`: none within [`CALL_TIMEOUT`] of the first kill) and
/// whether we interrupted it ourselves.
pub(in crate::store::sql) async fn until_changed<F>(
    pool: &AnyPool,
    id: i64,
    statement: F,
    changed: impl std::future::Future<Output = ()>,
) -> (Option<std::result::Result<AnyRow, sqlx::Error>>, bool)
where
    F: std::future::Future<Output = std::result::Result<AnyRow, sqlx::Error>>,
{
    let started = tokio::time::Instant::now();
    tokio::pin!(changed, statement);
    tokio::select! {
        // The statement first, so that it is on its way before a pending
        // change interrupts it.
        biased;
        r = &mut statement => (Some(r), false),
        _ = &mut changed => {
            // Let the statement settle into its wait first (see KILL_SETTLE);
            // if it ends meanwhile, something else ended it.
            tokio::select! {
                biased;
                r = &mut statement => return (Some(r), false),
                _ = tokio::time::sleep_until(started + KILL_SETTLE) => {}
            }
            let until = tokio::time::Instant::now() + CALL_TIMEOUT;
            let mut answer = None;
            loop {
                let _ = sqlx::raw_sql(&format!("KILL QUERY {id}")).execute(pool).await;
                match tokio::time::timeout(KILL_REPEAT, &mut statement).await {
                    Ok(r) => {
                        answer = Some(r);
                        break;
                    }
                    Err(_) if tokio::time::Instant::now() >= until => break,
                    Err(_) => {}
                }
            }
            (answer, true)
        }
    }
}

/// A connection of its own (outside the pool: it sleeps for long) and its id.
pub(in crate::store::sql) async fn open(pool: &AnyPool) -> Option<(AnyConnection, i64)> {
    let mut c = match pool.acquire().await {
        Ok(c) => c.detach(),
        Err(e) => {
            tracing::debug!("no connection for the doorbell: {e}");
            return None;
        }
    };
    let id = sqlx::query("SELECT CAST(CONNECTION_ID() AS SIGNED)")
        .fetch_one(&mut c)
        .await
        .and_then(|r| r.try_get::<i64, _>(0));
    match id {
        Ok(id) => Some((c, id)),
        Err(e) => {
            tracing::debug!("doorbell connection id not read: {e}");
            None
        }
    }
}

/// One statement on a bell (or watcher) connection, bounded.
pub(in crate::store::sql) async fn call<'q>(
    c: &mut AnyConnection,
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
) -> std::result::Result<(), sqlx::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, q.execute(&mut *c)).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}
