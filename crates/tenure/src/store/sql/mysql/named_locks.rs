//! MySQL/MariaDB wake-ups through named locks: MySQL has no notifications, so
//! a leader holds `GET_LOCK(<election>)` on its statements' connection (kept
//! for its tenure) while it leads, and a follower that read the lease held
//! by someone else blocks in `GET_LOCK(<election>, timeout)` on a connection
//! of its own, which its statements borrow for its timed reads (the wait
//! ends just before each, and starts again after it). A release, hand-over
//! or the leader's connection dying frees the lock and wakes the follower
//! within a round trip, without a query in between.
//!
//! The lock is a wake-up signal only, never a safety decision: the
//! conditional write on the lease still decides who leads, and a follower
//! still reads when the lease it saw would expire. A missed wake-up (no lock
//! connection, too many waiters, an older leader that takes no lock) costs at
//! most that expiry, never correctness.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{AnyConnection, AnyPool, Connection, Row};

use super::bell::{bell_name, lock_name, ring_holder, Bell};
use super::watch_bell::{self, WatchBell};
use crate::store::sql::connection::{OneConnection, LINGER};
use crate::store::util::wakeups::Wakeups;
use crate::store::{AcquisitionWatch, Changes, ElectionKey, LeaseRecord};

/// At most this many elections waited on at once per store: each waiter
/// holds a connection of its own. Beyond it, followers wake at the expiry.
const MAX_WAITERS: usize = 64;

/// A lock granted this soon was not held by anyone when asked: the leader
/// let go before the waiter asked (its connection opens after the read), or
/// has not taken it yet (it does so just after acquiring), or crashed (its
/// connection closed, its lease runs on to its expiry), or takes none (an
/// older version). The followers are woken all the same (one read tells
/// which), and the waiter asks again after a pause that doubles from
/// [`FIRST_PAUSE`], so a leader without a lock costs few queries, or at once
/// when a read in this process shows the lease changed hands (see
/// [`NamedLocks::seen`]).
const GRANTED_AT_ONCE: Duration = Duration::from_millis(50);

/// The first pause after a lock granted at once.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The pause before waking followers after a waiter's connection failed.
const FAILED_WAIT_PAUSE: Duration = Duration::from_millis(100);

/// A follower's waiter gives up after this many TTLs (a follower re-arms
/// it at its next read if the lease is still held). Each wait is one
/// statement, so this sets what waiting costs an idle follower: one
/// `GET_LOCK` per 12 TTLs (at ttl 10 s, 0.008/s beside its read per TTL;
/// two TTLs cost 0.05/s). The price: a waiter outlives a follower that
/// stopped following (its elector shut down, its process stays) by at most
/// this, holding a connection and one of [`MAX_WAITERS`] slots.
const WAIT_TTLS: u32 = 12;

/// A waiter whose `GET_LOCK` has not answered this long after its server
/// timeout is on a connection that died without a word (a NAT or proxy
/// dropped it): dropped, and the followers read.
const WAIT_ANSWER_GRACE: Duration = Duration::from_secs(5);

/// At most this many waiter connections are kept between waits, and for
/// at most [`SPARE_IDLE`]: a follower re-arms its waiter at its next read,
/// and a kept connection spares the server a new connection's statements
/// (sqlx's session set-up, and the pool's statements prepared again on the
/// connection that replaces the one taken out of it).
const MAX_SPARE: usize = 4;
/// How long a spare waiter connection is kept.
const SPARE_IDLE: Duration = Duration::from_secs(60);

/// How long a new leader asks again for its lock while a follower's waiter
/// holds it for the instant between being granted and releasing it (each
/// ask is one `GET_LOCK(.., 0)`: the statements' connection is not kept
/// waiting).
const LEADER_LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// A wait on a follower's lock ends this long before the follower's timed
/// read is due (the lease's expiry it last read), so that the read finds
/// the wait's connection free and opens none: a follower first in line
/// holds one connection, not one more at each read. A release in the gap is
/// seen by that read; one after it, by the next wait's lock granted at
/// once. MariaDB honours fractions of a second in `GET_LOCK`'s timeout;
/// MySQL rounds them to whole seconds, and a read that comes before the
/// wait ends opens a connection of its own, as it would without this.
const HAND_AHEAD: Duration = Duration::from_millis(25);

/// How long a wait that ended for the follower's read leaves its
/// connection to the statements for that read, beyond [`HAND_AHEAD`],
/// before taking it back anyway (the read may not come: the follower
/// stopped, or read sooner).
const READ_GRACE: Duration = Duration::from_millis(100);

/// A wait shorter than this is not ended for the follower's read: the
/// connection stays in `GET_LOCK`.
const SHORTEST_HANDED_WAIT: Duration = Duration::from_millis(200);

/// How long the leader side's lock calls may take before the connection is
/// dropped (which frees its locks): a blackholed connection must not hold
/// up later calls, which wait for the same connection.
const LEADER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The holder and term a read showed (`None` holder: free or expired;
/// `None` as a whole: no lease row).
type Seen = Option<(Option<String>, u64)>;

fn seen_in(rec: Option<&LeaseRecord>) -> Seen {
    rec.map(|r| (r.live_holder().map(str::to_string), r.term))
}

/// One election's waiter, as reads in this process last saw its lease.
#[derive(Debug)]
struct Waiting {
    seen: Seen,
    /// Told when a read shows the lease changed (taken over, freed, handed
    /// on): a waiter pausing after a lock granted at once asks again now,
    /// since a new leader takes its lock just after acquiring. Its pause
    /// may have grown long while a crashed leader's lease ran out (nobody
    /// holds that lock), and a release by the next leader inside it went
    /// unheard, so the designated successor slept through its turn and
    /// another follower took over after the succession grace.
    changed: Arc<tokio::sync::Notify>,
    /// When the follower's next timed read is due: at the expiry of the
    /// lease the last read found (local clock).
    read_due: Option<Instant>,
    /// Told at every read of the lease in this process.
    read: Arc<tokio::sync::Notify>,
    /// The waiter's connection is the statements' for the follower's read
    /// now (counted there).
    handed: bool,
}

#[derive(Debug)]
pub(in crate::store::sql) struct NamedLocks {
    pool: AnyPool,
    /// The store's statement connection: a waiter woken by a release hands
    /// it its connection, for the read and acquisition that follow.
    own: Arc<OneConnection>,
    prefix: String,
    wakeups: Wakeups,
    /// The election locks this process holds, and the statements'
    /// connection they are held on (its generation: a replaced connection
    /// took them with it).
    held: tokio::sync::Mutex<(u64, HashSet<String>)>,
    /// Elections with a waiter, and what this process last read of each.
    waiting: Arc<Mutex<HashMap<ElectionKey, Waiting>>>,
    /// Waiter connections kept for the next wait, and since when.
    spare: Mutex<Vec<(AnyConnection, Instant)>>,
    /// Lock frees started by [`Self::spawn_ended`] and not yet awaited by
    /// [`Self::settle`].
    freeing: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The leader's doorbell: hand-over requests from other processes.
    bell: Bell,
    /// The observers' doorbell: acquisitions of the free elections they watch.
    watchers: WatchBell,
    /// The waiter tasks, aborted when the store is dropped: each holds a
    /// connection blocked in `GET_LOCK` for up to [`WAIT_TTLS`] TTLs, and an
    /// `Arc` of this, so nothing else would end them sooner.
    waiters: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl NamedLocks {
    pub(in crate::store::sql) fn new(pool: AnyPool, own: Arc<OneConnection>, prefix: &str) -> Self {
        let wakeups = Wakeups::new();
        Self {
            bell: Bell::new(own.clone(), pool.clone(), wakeups.downgrade()),
            watchers: WatchBell::new(pool.clone(), prefix, wakeups.downgrade()),
            pool,
            own,
            prefix: prefix.to_string(),
            wakeups,
            held: tokio::sync::Mutex::new((0, HashSet::new())),
            waiting: Arc::new(Mutex::new(HashMap::new())),
            spare: Mutex::new(Vec::new()),
            freeing: Mutex::new(Vec::new()),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Ends every waiter now (their connections close, which ends their
    /// `GET_LOCK`); called when the store is dropped.
    pub(in crate::store::sql) fn stop_waiters(&self) {
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|p| p.into_inner()));
        for w in waiters {
            w.abort();
        }
    }

    /// The connections held now beside the statements' (which the
    /// leader's doorbell sleeps on): the waiters' and the spare ones (an
    /// observer's doorbell is not counted).
    pub(in crate::store::sql) fn connections_held(&self) -> usize {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|w| !w.handed)
            .count();
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).len();
        waiting + spare
    }

    /// Whether anything in the process subscribes.
    pub(in crate::store::sql) fn has_subscribers(&self) -> bool {
        self.wakeups.has_subscribers()
    }

    /// Subscribers hear of elections whose lock a waiter was granted.
    pub(in crate::store::sql) fn subscribe(&self) -> Option<Changes> {
        // The waiters send; no listener task of its own.
        self.wakeups.subscribe(|_| async {})
    }

    fn name(&self, key: &ElectionKey) -> String {
        lock_name(&self.prefix, key)
    }

    /// A connection outside the pool: it holds or waits for locks for long.
    async fn own_connection(&self) -> Option<AnyConnection> {
        match self.pool.acquire().await {
            Ok(c) => Some(c.detach()),
            Err(e) => {
                tracing::debug!("no connection for named-lock wake-ups: {e}");
                None
            }
        }
    }

    /// A connection for a waiter: the statements' connection if it is open
    /// and this process neither leads nor led on it (a follower's read just
    /// used it: the follower then holds that one alone), else a spare one
    /// if one was kept, else one taken out of the pool.
    async fn waiter_connection(&self) -> Option<AnyConnection> {
        match self.own.reclaim(LINGER).await {
            Some(conn) => Some(conn),
            None => self.spare_or_new_connection().await,
        }
    }

    /// A spare waiter connection if one was kept, else one taken out of
    /// the pool.
    async fn spare_or_new_connection(&self) -> Option<AnyConnection> {
        let kept = {
            let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
            let mut kept = None;
            while let Some((conn, since)) = spare.pop() {
                if since.elapsed() < SPARE_IDLE {
                    kept = Some(conn);
                    break;
                }
                // Too old to trust (the server's or a proxy's idle timeout
                // may have closed it): dropped, which closes it.
                drop(conn);
            }
            kept
        };
        match kept {
            Some(conn) => Some(conn),
            None => self.own_connection().await,
        }
    }

    /// Keeps a waiter's healthy connection for the next wait, or closes it.
    async fn done_with(&self, conn: AnyConnection) {
        let conn = {
            let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
            spare.retain(|(_, since)| since.elapsed() < SPARE_IDLE);
            if spare.len() < MAX_SPARE {
                spare.push((conn, Instant::now()));
                return;
            }
            conn
        };
        let _ = conn.close().await;
    }

    /// Rings this process's observers when `key`, free now, is acquired,
    /// while the returned watch lives (see `watch_bell.rs`).
    pub(in crate::store::sql) fn watch(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        self.watchers.watch(key)
    }

    /// After acquiring `key`: hold its lock while leading (best effort), and
    /// ring the observers watching it while it was free.
    pub(in crate::store::sql) async fn leading(&self, key: &ElectionKey, ttl: Duration) {
        let name = self.name(key);
        self.bell.leading(bell_name(&name), key, ttl);
        // A leader waits on no lock: a waiter's connection kept for the
        // next wait would only sit there. Closed after the lock is taken.
        let spare = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|p| p.into_inner()));
        match self.take_lock(key, &name, LEADER_LOCK_PATIENCE).await {
            Some(ids) => watch_bell::kill_watchers(&self.pool, &ids).await,
            None => watch_bell::ring_watchers(&self.pool, &name).await,
        }
        for (conn, _) in spare {
            let _ = conn.close().await;
        }
    }

    /// After a renewal of `key`: if the statements' connection was
    /// replaced (the one the lock was held on failed), the lock went with
    /// it and is taken again on the new one, off the caller's path.
    pub(in crate::store::sql) fn renewed(self: &Arc<Self>, key: &ElectionKey, ttl: Duration) {
        let name = self.name(key);
        self.bell.renewed(&bell_name(&name), ttl);
        if let Ok(held) = self.held.try_lock() {
            if held.0 == self.own.generation() && held.1.contains(&name) {
                return;
            }
        } else {
            return; // being taken or freed now
        }
        let (locks, key) = (self.clone(), key.clone());
        tokio::spawn(async move {
            if let Some(ids) = locks.take_lock(&key, &name, Duration::ZERO).await {
                watch_bell::kill_watchers(&locks.pool, &ids).await;
            }
        });
    }

    /// Takes `name`, the lock of `key`, on the statements' connection
    /// unless it is held there already or this process no longer leads
    /// `key`, asking again for `patience` while someone else holds it.
    /// The connections watching the election, where the statement that
    /// took it (or found it taken) said (`None`: it did not run).
    async fn take_lock(
        &self,
        key: &ElectionKey,
        name: &str,
        patience: Duration,
    ) -> Option<Vec<i64>> {
        let mut held = self.held.lock().await;
        // The same statement asks which connections watch the election
        // (the watcher slots first): nothing more is sent where nobody
        // watches.
        let sql = format!(
            "SELECT {}, CAST(GET_LOCK(?, 0) AS SIGNED)",
            watch_bell::slot_columns()
        );
        let until = Instant::now() + patience;
        let mut pause = FIRST_PAUSE;
        let mut rang = false;
        loop {
            if held.0 == self.own.generation() && held.1.contains(name) {
                return Some(Vec::new());
            }
            if !self.own.leads(key) {
                return None;
            }
            let asked = tokio::time::timeout(LEADER_CALL_TIMEOUT, async {
                let mut lent = self.own.lend().await?;
                let generation = lent.generation();
                let row = watch_bell::bind_slots(sqlx::query(&sql), name)
                    .bind(name)
                    .fetch_one(lent.conn())
                    .await;
                let row = lent.keep_if_ok(row).await?;
                Ok::<_, sqlx::Error>((generation, row))
            })
            .await;
            let Ok(Ok((generation, row))) = asked else {
                // The connection was closed with the failed statement,
                // and every lock it held with it.
                tracing::debug!(election = %key, "named lock not taken: the connection failed");
                held.1.clear();
                return None;
            };
            if held.0 != generation {
                held.0 = generation;
                held.1.clear();
            }
            let watchers = watch_bell::watcher_ids(&row);
            if let Ok(Some(1)) = row.try_get::<Option<i64>, _>(watch_bell::SLOTS) {
                held.1.insert(name.to_string());
                return Some(watchers);
            }
            if Instant::now() + pause > until {
                tracing::debug!(election = %key, "named lock not taken; followers wake at expiry");
                return Some(watchers);
            }
            if !rang {
                // Held by the previous leader's connection: asleep in its
                // doorbell, it may be a dead client's, which the server
                // notices (and frees its locks) only when the sleep ends.
                rang = true;
                ring_holder(&self.pool, name, Duration::ZERO).await;
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }

    /// After a tenure of `key` ended here (released, handed over, lost):
    /// frees its lock, which wakes the followers waiting on it, in a task
    /// of its own: a release never waits for the statement that frees it
    /// (it may queue behind another, or be cut off). [`Self::settle`]
    /// waits for it.
    pub(in crate::store::sql) fn spawn_ended(self: &Arc<Self>, key: &ElectionKey) {
        let (locks, key) = (self.clone(), key.clone());
        let task = tokio::spawn(async move { locks.ended(&key).await });
        let mut freeing = self.freeing.lock().unwrap_or_else(|p| p.into_inner());
        freeing.retain(|t| !t.is_finished());
        freeing.push(task);
    }

    /// Waits until every lock free started so far is done, so that the
    /// followers waiting on them are woken before a process exits.
    pub(in crate::store::sql) async fn settle(&self) {
        let tasks = std::mem::take(&mut *self.freeing.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }

    async fn ended(&self, key: &ElectionKey) {
        let name = self.name(key);
        self.bell.ended(&bell_name(&name));
        let mut held = self.held.lock().await;
        if !held.1.remove(&name) {
            return;
        }
        // Gone with its connection if that was closed or replaced since.
        let generation = held.0;
        if !self.own.is_open() || self.own.generation() != generation {
            return;
        }
        let freed = tokio::time::timeout(LEADER_CALL_TIMEOUT, async {
            let mut lent = self.own.lend().await?;
            if lent.generation() != generation {
                return lent.keep().await;
            }
            let done = sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(name.as_str())
                .execute(lent.conn())
                .await;
            lent.keep_if_ok(done).await.map(|_| ())
        })
        .await;
        if !matches!(freed, Ok(Ok(()))) {
            // The connection was closed, which frees every lock it held.
            tracing::debug!(election = %key, "named lock not freed: the connection failed");
            held.1.clear();
        }
    }

    /// After a hand-over request on `key`: wakes its leader's process, if
    /// it has a doorbell, so the leader acts on the request at once.
    pub(in crate::store::sql) async fn ring(&self, key: &ElectionKey) {
        self.bell.ring(&bell_name(&self.name(key))).await;
    }

    /// After a read of `key` (`rec`: what it found): if the lease is held by
    /// someone else, or free for a transfer's target until its window ends,
    /// wait for its lock (in the background), unless this process leads it
    /// or already waits for it, or too many waiters run; if a waiter runs
    /// and the lease changed since the last read, tell it (it asks again at
    /// once if it was pausing).
    ///
    /// The transfer window: only the target may acquire, and nothing else
    /// wakes the other followers when it does. Waiting for the lock finds
    /// the target's (taken just after it acquires) and wakes them at its
    /// next release; without it, a follower slept through the window, and
    /// as the next transfer's target left the election leaderless for the
    /// rest of it (conformance: `transfers_in_a_row_reach_their_targets`).
    pub(in crate::store::sql) fn seen(
        self: &Arc<Self>,
        key: &ElectionKey,
        rec: Option<&LeaseRecord>,
    ) {
        let seen = seen_in(rec);
        let read_due = rec.map(|r| Instant::now() + r.remaining);
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = waiting.get_mut(key) {
                w.read_due = read_due;
                w.read.notify_waiters();
                if w.seen != seen {
                    w.seen = seen;
                    w.changed.notify_one();
                }
                return;
            }
        }
        // A wait holds a connection; with nobody in this process to wake
        // (electors subscribe only while they lead or are the designated
        // successor), none is started.
        if !self.wakeups.has_subscribers() {
            return;
        }
        if let Some(r) = rec.filter(|r| r.is_held() || r.transfer_target().is_some()) {
            self.follow(key, r.ttl, seen, read_due);
        }
    }

    /// Starts a waiter for `key`, held by someone else for `ttl`, unless
    /// this process leads it or already waits for it, or too many run.
    fn follow(
        self: &Arc<Self>,
        key: &ElectionKey,
        ttl: Duration,
        seen: Seen,
        read_due: Option<Instant>,
    ) {
        let name = self.name(key);
        // Busy means the leader side is taking or freeing a lock: waiting
        // on one of ours is harmless (it wakes us when we free it).
        if let Ok(held) = self.held.try_lock() {
            if held.1.contains(&name) {
                return;
            }
        }
        let changed = Arc::new(tokio::sync::Notify::new());
        let read = Arc::new(tokio::sync::Notify::new());
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
            if waiting.len() >= MAX_WAITERS || waiting.contains_key(key) {
                return;
            }
            let (changed, read) = (changed.clone(), read.clone());
            let w = Waiting {
                seen,
                changed,
                read_due,
                read,
                handed: false,
            };
            waiting.insert(key.clone(), w);
        }
        let this = self.clone();
        let key = key.clone();
        let task = tokio::spawn(async move {
            let wake = this.wait(&key, &name, ttl, &changed, &read).await;
            this.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            if wake {
                this.wakeups.send(key);
            }
        });
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.retain(|w| !w.is_finished());
        waiters.push(task.abort_handle());
    }

    /// Blocks in `GET_LOCK` until the leader frees the lock; then releases it
    /// at once. Gives up after [`WAIT_TTLS`] TTLs (a follower reads again at
    /// the lease's expiry anyway, and re-arms). Returns whether this process's
    /// subscribers must be woken: the caller does that once this key is no
    /// longer marked waiting, so the read it causes can re-arm a waiter (woken
    /// while still marked, a follower that found the lease taken again slept
    /// to its expiry through the next release).
    ///
    /// Each `GET_LOCK` ends [`HAND_AHEAD`] before the follower's timed read
    /// is due, and the connection waits in the statements' slot for that
    /// read, then waits on for the lock (see [`HAND_AHEAD`]).
    async fn wait(
        &self,
        key: &ElectionKey,
        name: &str,
        ttl: Duration,
        changed: &tokio::sync::Notify,
        read: &tokio::sync::Notify,
    ) -> bool {
        let Some(mut conn) = self.waiter_connection().await else {
            return false;
        };
        let until = Instant::now() + ttl * WAIT_TTLS;
        let mut pause = FIRST_PAUSE;
        let wake = loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            let handing = self
                .read_due(key)
                .map(|due| due.saturating_duration_since(Instant::now() + HAND_AHEAD))
                .filter(|wait| *wait >= SHORTEST_HANDED_WAIT && *wait < left);
            let timeout = match handing {
                Some(wait) => wait.as_secs_f64(),
                None => left.as_secs().clamp(1, 3600) as f64,
            };
            let asked = Instant::now();
            let got = tokio::time::timeout(
                Duration::from_secs_f64(timeout) + WAIT_ANSWER_GRACE,
                sqlx::query("SELECT GET_LOCK(?, ?)")
                    .bind(name)
                    .bind(timeout)
                    .fetch_one(&mut conn),
            )
            .await
            .map(|r| r.map(|r| r.try_get::<Option<i64>, _>(0)));
            tracing::trace!(election = %key, after = ?asked.elapsed(), result = ?got.as_ref().map(|r| r.as_ref().map(|r| r.as_ref().ok().copied())), "lock waiter answered");
            match got {
                Ok(Ok(Ok(Some(1)))) => {}
                // Ended for the follower's read: the read runs on this
                // connection, and the wait goes on after it.
                Ok(Ok(Ok(Some(0)))) if handing.is_some() => {
                    match self.hand_to_read(key, conn, read, false).await {
                        Some(c) => conn = c,
                        None => return false,
                    }
                    continue;
                }
                // GET_LOCK timed out: the follower's read at the lease's
                // expiry re-arms a waiter if the lease is still held.
                Ok(Ok(Ok(Some(0)))) => {
                    self.done_with(conn).await;
                    return false;
                }
                // The connection died while we waited (killed, server
                // restarted, or silently: no answer after the server's
                // timeout): a release in the meantime would be missed, so
                // the followers read (and re-arm) after a pause, which bounds
                // a read-wait-fail loop where GET_LOCK fails at once.
                _ => {
                    drop(conn);
                    tokio::time::sleep(FAILED_WAIT_PAUSE.min(left)).await;
                    return true;
                }
            }
            let freed = sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(name)
                .execute(&mut conn)
                .await;
            if freed.is_err() {
                // Closing the connection frees the lock if we still hold it.
                let _ = conn.close().await;
                return true;
            }
            if asked.elapsed() >= GRANTED_AT_ONCE {
                // The leader let go while we waited: the read this wakes
                // runs on this connection if the statements have none.
                if let Some(conn) = self.own.adopt(conn, None) {
                    self.done_with(conn).await;
                }
                return true;
            }
            // Granted at once: no leader holds the lock (yet, or any more).
            // Wake anyway (the read this causes runs on this connection),
            // and look again after a pause, or as soon as a read shows the
            // lease changed hands: its new leader takes the lock just after
            // acquiring, and must find us waiting before it lets go again.
            match self.hand_to_read(key, conn, read, true).await {
                Some(c) => conn = c,
                None => return false,
            }
            tokio::select! {
                _ = tokio::time::sleep(pause.min(left)) => {
                    pause = (pause * 2).min(ttl.max(FIRST_PAUSE));
                }
                _ = changed.notified() => {
                    tracing::trace!(election = %key, "lease changed: the lock waiter asks again");
                    pause = FIRST_PAUSE;
                }
            }
        };
        self.done_with(conn).await;
        wake
    }

    /// When the follower's next timed read of `key` is due, as the last
    /// read in this process found the lease.
    fn read_due(&self, key: &ElectionKey) -> Option<Instant> {
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.get(key).and_then(|w| w.read_due)
    }

    /// Leaves `conn`, whose wait ended just before the follower's read (or
    /// that wakes the followers to read, if `wake`), to the statements
    /// until that read has run (or [`READ_GRACE`] passed),
    /// then takes a connection back for the next wait: that one if the
    /// statements did not replace it. `None`: the wait is over (the read
    /// found the lease free and this process took it, or no connection can
    /// be had).
    async fn hand_to_read(
        &self,
        key: &ElectionKey,
        conn: AnyConnection,
        read: &tokio::sync::Notify,
        wake: bool,
    ) -> Option<AnyConnection> {
        let wait = HAND_AHEAD + READ_GRACE;
        let read = read.notified();
        tokio::pin!(read);
        read.as_mut().enable();
        let kept_until = tokio::time::Instant::now() + wait;
        self.set_handed(key, true);
        let adopted = self.own.adopt(conn, Some(kept_until));
        // Woken after the connection is the statements': the read finds it.
        if wake {
            self.wakeups.send(key.clone());
        }
        if let Some(conn) = adopted {
            // The statements have a connection of their own: wait on.
            self.set_handed(key, false);
            return Some(conn);
        }
        let _ = tokio::time::timeout(wait, read).await;
        let conn = match self.own.reclaim(LINGER).await {
            Some(conn) => Some(conn),
            None if self.own.leads(key) => None,
            None => self.spare_or_new_connection().await,
        };
        self.set_handed(key, false);
        conn
    }

    /// Marks `key`'s waiter's connection as the statements' (or its own).
    fn set_handed(&self, key: &ElectionKey, handed: bool) {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = waiting.get_mut(key) {
            w.handed = handed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_fit_and_differ() {
        let long = ElectionKey::new("default", "x".repeat(255));
        let a = lock_name("tenure_", &long);
        assert!(a.len() <= 64 && a.starts_with("tenure_"), "{a}");
        assert_eq!(a, lock_name("tenure_", &long));
        assert_ne!(a, lock_name("other_", &long));
        assert_ne!(a, lock_name("tenure_", &ElectionKey::new("default", "x")));
    }
}
