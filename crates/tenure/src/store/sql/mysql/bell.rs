//! MySQL/MariaDB: a leader's doorbell, so that a resign or transfer asked by
//! another process reaches the leader in milliseconds rather than at its next
//! renewal. MySQL has no notifications, so between its statements the
//! leader's process keeps the connection its statements share (kept for its
//! tenure, holding its election locks) asleep in `SELECT SLEEP(..)`, and
//! holds on it one *bell* lock per election it leads. A process that has
//! just marked a hand-over request finds that connection with
//! `IS_USED_LOCK(bell)` and, once the processlist shows it asleep,
//! interrupts the sleep with `KILL QUERY`, which wakes the leaders of that
//! process: they read the lease and act on the request. (MySQL lets an
//! account kill its own statements without any privilege; a requester
//! logged in as another account without `CONNECTION_ADMIN`/`SUPER` cannot,
//! and the leader then hears of the request at its next renewal, as
//! before.)
//!
//! The sleep yields to the process's own statements: it ends by itself just
//! before the leader's next renewal is due (the period is learnt from the
//! renewals before), and anything else that wants the connection (a
//! release, a run record, another election's statement) interrupts it with
//! `KILL QUERY` from a short connection of its own. So a leader holds one
//! connection, not one for its statements and one for its doorbell.
//!
//! Like the election locks, the bell is a wake-up signal only: the hand-over
//! itself is the conditional write, and a missed ring costs a renew period.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AnyPool, Connection, Row};
use tokio::time::Instant;

use crate::store::sql::connection::OneConnection;
use crate::store::util::wakeups::Sender;
use crate::store::ElectionKey;

/// How long one wait for a bell held by another connection lasts (then it
/// is asked for again, and its holder rung again).
const RETRY_SECS: i64 = 1;
/// How long the statements' connection must have gone unused before the
/// doorbell sleeps on it: the statements of one wake-up or one renewal
/// come in a short series, each of which would otherwise interrupt it.
const QUIET: Duration = Duration::from_millis(100);
/// A sleep shorter than this is not worth its statement: the doorbell
/// waits for the renewal instead (at most this long, then looks again).
const SHORTEST_SLEEP: Duration = Duration::from_millis(200);
/// How long before a renewal is due the sleep ends, at least; also a
/// twentieth of the renew period (the renewal's own round trip, and the
/// timers' slack).
const RENEWAL_MARGIN: Duration = Duration::from_millis(25);
/// The pause after the connection was found closed or failed.
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
/// How long a ring waits for the leader's connection to be asleep: it is
/// awake for its statements, [`QUIET`] after them and just before each
/// renewal.
const RING_PATIENCE: Duration = Duration::from_secs(2);
/// How often a ring looks again whether the leader's connection sleeps.
const RING_RETRY: Duration = Duration::from_millis(20);
/// What marks the doorbell's statements in the server's processlist.
const MARK: &str = "/* tenure doorbell */";

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
    /// Bell name → when its election was last renewed (or acquired), the
    /// period between its last two renewals, and its TTL.
    renewals: Mutex<HashMap<String, Renewals>>,
    /// Told after every renewal.
    renewed: tokio::sync::Notify,
}

#[derive(Clone, Copy, Debug)]
struct Renewals {
    last: Instant,
    period: Option<Duration>,
    ttl: Duration,
}

impl Led {
    /// How long the doorbell may sleep from `now` on behalf of the
    /// elections `want`: until just before the first renewal due (a
    /// leader renews at a fixed period), and never longer than a third of
    /// a TTL: a statement that cannot interrupt the sleep (the server has
    /// no connection left for its `KILL`) waits for its end, and a leader
    /// must renew well within its TTL. A renewal overdue by several margins
    /// no longer counts (the leader stopped renewing, or renews at another
    /// pace). `Err(until)`: no sleep worth its statement now; look again
    /// at `until`, or after the next renewal.
    fn sleep(&self, want: &HashMap<String, ElectionKey>, now: Instant) -> Result<f64, Instant> {
        let renewals = self.renewals.lock().unwrap_or_else(|p| p.into_inner());
        let mut end: Option<Instant> = None;
        for name in want.keys() {
            let Some(r) = renewals.get(name) else {
                continue;
            };
            let mut until = now + r.ttl / 3;
            if let Some(period) = r.period {
                let margin = RENEWAL_MARGIN.max(period / 20);
                let due = r.last + period;
                if due + margin * 4 > now {
                    until = until.min(due.checked_sub(margin).unwrap_or(now));
                }
            }
            end = Some(end.map_or(until, |e| e.min(until)));
        }
        match end {
            Some(end) if end >= now + SHORTEST_SLEEP => Ok((end - now).as_secs_f64()),
            _ => Err(now + SHORTEST_SLEEP),
        }
    }
}

/// The doorbell of one store; the task runs while the store lives and
/// something is led.
#[derive(Debug)]
pub(in crate::store::sql) struct Bell {
    led: Arc<Led>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    own: Arc<OneConnection>,
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
    pub(in crate::store::sql) fn new(
        own: Arc<OneConnection>,
        pool: AnyPool,
        wake: Weak<Sender>,
    ) -> Self {
        Self {
            led: Arc::default(),
            task: Mutex::new(None),
            own,
            pool,
            wake,
        }
    }

    /// This process leads `key` with leases of `ttl`: hold its bell.
    pub(in crate::store::sql) fn leading(&self, name: String, key: &ElectionKey, ttl: Duration) {
        {
            let mut keys = self.led.keys.lock().unwrap_or_else(|p| p.into_inner());
            if keys.insert(name.clone(), key.clone()).is_some() {
                return;
            }
            self.led
                .renewals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    name,
                    Renewals {
                        last: Instant::now(),
                        period: None,
                        ttl,
                    },
                );
        }
        let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
        if task.as_ref().is_none_or(|t| t.is_finished()) {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (led, own, pool, wake) = (
                    Arc::downgrade(&self.led),
                    self.own.clone(),
                    self.pool.clone(),
                    self.wake.clone(),
                );
                *task = Some(rt.spawn(ring_loop(led, own, pool, wake)));
            }
        }
        self.led.changed.notify_waiters();
    }

    /// The election of bell `name` was renewed for `ttl`: its next renewal
    /// is due a period later, and the doorbell's sleep ends just before it.
    pub(in crate::store::sql) fn renewed(&self, name: &str, ttl: Duration) {
        let now = Instant::now();
        if let Some(r) = self
            .led
            .renewals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(name)
        {
            r.period = Some(now - r.last);
            r.last = now;
            r.ttl = ttl;
        }
        self.led.renewed.notify_waiters();
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
        self.led
            .renewals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if removed {
            self.led.changed.notify_waiters();
        }
    }

    /// After a hand-over request on `name`'s election: interrupts the sleep
    /// of whichever connection holds that bell (best effort), waiting up
    /// to [`RING_PATIENCE`] for it to be asleep.
    pub(in crate::store::sql) async fn ring(&self, name: &str) {
        ring_holder(&self.pool, name, RING_PATIENCE).await;
    }
}

/// Interrupts the sleep of whichever connection holds the lock `name`
/// (best effort): a leader's bell, to wake it; or, from a new leader whose
/// bell or election lock is still held, the previous holder's, so that it
/// lets go (a dead client's connection asleep in `SLEEP` keeps its locks
/// until the server looks at it again, up to seconds later, or its sleep
/// is interrupted). A leader's connection also runs its statements: it is
/// rung only while the processlist shows it asleep (looked at again every
/// [`RING_RETRY`] for `patience`), so that the ring does not cut off a
/// statement instead.
pub(in crate::store::sql) async fn ring_holder(pool: &AnyPool, name: &str, patience: Duration) {
    let until = Instant::now() + patience;
    let mut killer = Killer::default();
    loop {
        let Some(conn) = killer.conn(pool).await else {
            return;
        };
        // Asleep: in the doorbell's statement, or (an older leader's bell
        // connection, which only sleeps) in any `SLEEP`.
        let holder = sqlx::query(
            "SELECT CAST(p.ID AS SIGNED), \
             CAST(COALESCE(p.INFO LIKE ? OR p.INFO LIKE '%SLEEP(%', 0) AS SIGNED) \
             FROM information_schema.PROCESSLIST p WHERE p.ID = IS_USED_LOCK(?)",
        )
        .bind(format!("%{MARK}%"))
        .bind(name)
        .fetch_optional(&mut *conn)
        .await
        .and_then(|r| {
            r.map(|r| Ok((r.try_get::<i64, _>(0)?, r.try_get::<i64, _>(1)? == 1)))
                .transpose()
        });
        match holder {
            Ok(Some((id, true))) => {
                tracing::trace!(lock = name, connection = id, "ringing the doorbell");
                if !killer.kill(pool, id).await {
                    tracing::debug!(
                        "doorbell not rung; the leader hears of the request at its next renewal"
                    );
                }
                break;
            }
            Ok(Some((id, _))) if Instant::now() + RING_RETRY > until => {
                tracing::trace!(lock = name, connection = id, "doorbell not asleep");
                break;
            }
            Ok(Some(_)) => tokio::time::sleep(RING_RETRY).await,
            Ok(None) => {
                tracing::trace!(lock = name, "no doorbell to ring");
                break; // no bell: an older leader, or none
            }
            Err(e) => {
                tracing::debug!("doorbell not found: {e}");
                break;
            }
        }
    }
    killer.done().await;
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

/// Holds the bells of the led elections on the statements' connection and
/// sleeps on it between statements; a ring wakes every leader of this
/// process (one read each; renewals are not affected).
async fn ring_loop(led: Weak<Led>, own: Arc<OneConnection>, pool: AnyPool, wake: Weak<Sender>) {
    // The connection the bells are held on (its generation) and its id.
    let mut on: Option<(u64, i64)> = None;
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
        if want.is_empty() && held.is_empty() {
            late.clear();
            // (The store's drop aborts this task, also while it waits here.)
            drop(shared);
            changed.await;
            continue;
        }
        // Leading nothing, with bells still held: no sleep, straight to
        // the lend that gives them back (or finds them gone with a closed
        // connection).
        let secs = match shared.sleep(&want, Instant::now()) {
            _ if want.is_empty() => 0.0,
            Ok(secs) => secs,
            Err(until) => {
                // A renewal is due: it has the connection first.
                let renewed = shared.renewed.notified();
                tokio::select! {
                    _ = &mut changed => {}
                    _ = renewed => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
        };
        drop(shared);
        let mut lent = match own.lend_to_sleep(QUIET).await {
            Ok(lent) => lent,
            Err(wait) => {
                if wait.is_none() {
                    // Closed: the bells went with it; the next statement
                    // opens another connection.
                    late.extend(held.drain());
                    on = None;
                }
                tokio::select! {
                    _ = &mut changed => {}
                    _ = tokio::time::sleep(wait.unwrap_or(RECONNECT_PAUSE)) => {}
                }
                continue;
            }
        };
        if own.is_wanted() {
            // A statement queued meanwhile: it goes first.
            let _ = lent.keep().await;
            tokio::task::yield_now().await;
            continue;
        }
        let generation = lent.generation();
        let id = match on {
            Some((g, id)) if g == generation => id,
            _ => {
                // Another connection: what the last one held went with it.
                late.extend(held.drain());
                let id = tokio::time::timeout(
                    CALL_TIMEOUT,
                    sqlx::query("SELECT CAST(CONNECTION_ID() AS SIGNED)").fetch_one(lent.conn()),
                )
                .await;
                match id {
                    Ok(Ok(row)) if row.try_get::<i64, _>(0).is_ok() => {
                        let id = row.try_get::<i64, _>(0).unwrap_or_default();
                        on = Some((generation, id));
                        id
                    }
                    _ => {
                        tracing::debug!("doorbell: the connection's id was not read");
                        // Closed with the lend: it may be broken.
                        drop(lent);
                        on = None;
                        tokio::time::sleep(RECONNECT_PAUSE).await;
                        continue;
                    }
                }
            }
        };
        let Some(c) = lent.conn().statements_only() else {
            return; // MySQL/MariaDB connections are plain ones
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
                        ring_holder(&pool, name, Duration::ZERO).await;
                    }
                }
                Ok(Err(e)) if interrupted(&e) => rung = true,
                _ => broken = true,
            }
        }
        if !broken && !rung && !want.is_empty() {
            // Sleep until a ring, a statement of this process wanting the
            // connection, or a change of the led elections (then interrupt
            // our own sleep from another connection). While a bell is held
            // elsewhere, wait for it instead (a second at a time): taken
            // the moment its holder lets go. A ring on one of the bells we
            // hold interrupts that wait as it does the sleep.
            let waited = want.keys().find(|n| !held.contains(*n)).cloned();
            let (sleep_sql, wait_sql) = (
                format!("SELECT {MARK} CAST(SLEEP(?) AS SIGNED)"),
                format!("SELECT {MARK} CAST(GET_LOCK(?, ?) AS SIGNED)"),
            );
            let statement = match &waited {
                Some(name) => sqlx::query(&wait_sql).bind(name.clone()).bind(RETRY_SECS),
                None => sqlx::query(&sleep_sql).bind(secs),
            };
            let interrupt = async {
                tokio::select! {
                    _ = changed.as_mut() => {}
                    _ = own.wanted() => {}
                }
            };
            let (answer, own_kill) =
                until_changed(&pool, id, statement.fetch_one(&mut *c), interrupt).await;
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
        if broken {
            // Closed with the lend, which frees every lock it held; the
            // next statement opens another. Bells still wanted are asked
            // for afresh on it; a request meanwhile rings nobody, so they
            // count as late.
            drop(lent);
            on = None;
            late.extend(held.drain());
        } else {
            let _ = lent.keep().await;
        }
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
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
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
            let mut killer = Killer::default();
            loop {
                killer.kill(pool, id).await;
                match tokio::time::timeout(KILL_REPEAT, &mut statement).await {
                    Ok(r) => {
                        answer = Some(r);
                        break;
                    }
                    Err(_) if tokio::time::Instant::now() >= until => break,
                    Err(_) => {}
                }
            }
            killer.done().await;
            (answer, true)
        }
    }
}

/// The connection a process interrupts its own sleeping connection from:
/// an idle one of the pool if it has one (it stays there), else one opened
/// for the purpose from the pool's options and closed after, so that
/// interrupting adds nothing to what the process holds (the pool would keep
/// one it opened for its idle timeout) and does not wait for a pool the
/// application has exhausted.
#[derive(Default)]
struct Killer {
    conn: Option<KillerConn>,
}

enum KillerConn {
    Pooled(sqlx::pool::PoolConnection<sqlx::Any>),
    Opened(AnyConnection),
}

impl Killer {
    /// The connection, opened (or taken from the pool's idle ones) the
    /// first time.
    async fn conn(&mut self, pool: &AnyPool) -> Option<&mut AnyConnection> {
        if self.conn.is_none() {
            let idle = match pool.try_acquire() {
                Some(c) => Some(KillerConn::Pooled(c)),
                None => {
                    use sqlx::ConnectOptions;
                    let wait = pool.options().get_acquire_timeout();
                    match tokio::time::timeout(wait, pool.connect_options().connect()).await {
                        Ok(Ok(c)) => Some(KillerConn::Opened(c)),
                        Ok(Err(e)) => {
                            tracing::debug!("no connection to ring a doorbell from: {e}");
                            None
                        }
                        Err(_) => None,
                    }
                }
            };
            self.conn = idle;
        }
        match self.conn.as_mut()? {
            KillerConn::Pooled(c) => Some(&mut **c),
            KillerConn::Opened(c) => Some(c),
        }
    }

    /// `KILL QUERY id`; whether it was sent. Boxed: sqlx's executor
    /// lifetimes otherwise defeat the compiler's proof that the spawned
    /// doorbell tasks are `Send`.
    fn kill<'a>(
        &'a mut self,
        pool: &'a AnyPool,
        id: i64,
    ) -> futures_util::future::BoxFuture<'a, bool> {
        Box::pin(async move {
            let Some(conn) = self.conn(pool).await else {
                return false;
            };
            // KILL takes no placeholders; the id is an integer from the
            // server. Sent unprepared (text protocol).
            let kill = format!("KILL QUERY {id}");
            match sqlx::Executor::execute(conn, kill.as_str()).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!("KILL QUERY failed: {e}");
                    self.conn = None;
                    false
                }
            }
        })
    }

    async fn done(self) {
        if let Some(KillerConn::Opened(c)) = self.conn {
            let _ = c.close().await;
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
