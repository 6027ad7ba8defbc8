//! MySQL/MariaDB: observers' doorbells, so that a watcher of an election
//! nobody holds (`tenure watch`, a dashboard watching a service scaled to
//! zero) hears of its acquisition in milliseconds without polling. The named
//! locks of `named_locks.rs` wake only on a leader letting go; a free
//! election has no leader whose lock could be waited on.
//!
//! So the observing process keeps one connection of its own asleep in
//! `SELECT SLEEP(..)`, holding, for every free election it watches, one of
//! [`SLOTS`] *watcher* locks of that election (named locks are exclusive:
//! each slot is one watching process). A new leader, just after its
//! conditional write succeeded and off its caller's path, asks in the very
//! statement that takes its election lock which connections hold the
//! election's watcher slots (`IS_USED_LOCK`), and `KILL QUERY`s them: the
//! interrupted sleep wakes that process's observers, which read. With nobody
//! watching this costs the acquirer nothing but a few columns of a statement
//! it sends anyway.
//!
//! A wake-up only, like the other named locks: the read decides what is
//! reported. A ring that does not come (an acquirer of an older version, an
//! account not allowed to kill another's statements, every slot taken, a
//! ring that falls between two statements of the watcher connection) leaves
//! the observer's slow fallback poll to notice.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::{AnyConnection, AnyPool, Connection, Row};

use super::bell::{call, lock_name, open, outcome, until_changed, Outcome, CALL_TIMEOUT};
use crate::store::util::wakeups::Sender;
use crate::store::{AcquisitionWatch, ElectionKey};
use tokio::sync::futures::OwnedNotified;

/// Watcher slots per election: at most this many processes are rung for
/// one election; more watchers poll slowly.
pub(in crate::store::sql) const SLOTS: usize = 16;
/// How long one sleep lasts: a statement per this period while watching.
const SLEEP_SECS: i64 = 600;
/// The pause after the watcher connection failed, before opening another.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
/// How long after a sleep was sent the observers of the elections armed
/// just before it read once more. A ring that reaches the server before the
/// `SLEEP` starts interrupts nothing (`KILL QUERY` of an idle connection),
/// and the read made as the slot was taken may have come before the
/// acquisition: without this read it waited for the 10 s fallback poll
/// (`quiet.rs::mariadb_watcher_of_a_free_election_is_quiet` failed so in
/// CI, two runs in about ten).
const ARMED_RECHECK: Duration = Duration::from_millis(100);
/// How long the slot of an election no longer watched is kept before the
/// sleep is interrupted to give it back. An observer stops watching an
/// election when it sees a leader and watches it again at the release, often
/// moments later; interrupting the sleep each time cost statements, and an
/// interruption that raced an acquirer's ring delayed the ring (see
/// `bell.rs`'s `KILL_SETTLE`). A slot kept for an election nobody watches
/// costs at most a spurious ring: one read by each observer.
const LINGER: Duration = Duration::from_secs(10);
/// A wake-up of more elections than this is sent as one "anything may
/// have changed".
const MAX_NAMED_WAKES: usize = 4;

/// The name of watcher slot `slot` of the election whose lock is
/// `lock_name` (at most 64 characters, as named locks must be).
pub(in crate::store::sql) fn slot_name(lock_name: &str, slot: usize) -> String {
    format!("{lock_name}_w{slot}")
}

/// The elections this process watches, with how many watches each, shared
/// with the doorbell task.
#[derive(Debug, Default)]
struct Watched {
    keys: Mutex<HashMap<ElectionKey, usize>>,
    /// Told (`notify_waiters`, which leaves no permit) when `keys` changes.
    /// The task registers before it reads `keys`, so it misses no change;
    /// a permit left by a change it had already read ended its next sleep
    /// at once, by its own `KILL QUERY`, and an acquirer's ring landing in
    /// that kill was taken for it and lost: the acquisition was left to the
    /// observer's 10 s fallback poll.
    changed: Arc<tokio::sync::Notify>,
}

/// One watch: ends when dropped.
struct Guard {
    watched: Weak<Watched>,
    key: ElectionKey,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(w) = self.watched.upgrade() else {
            return;
        };
        let mut keys = w.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = keys.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&self.key);
                drop(keys);
                w.changed.notify_waiters();
            }
        }
    }
}

/// The observers' doorbell of one store; its task runs while the store
/// lives and something is watched.
#[derive(Debug)]
pub(in crate::store::sql) struct WatchBell {
    watched: Arc<Watched>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pool: AnyPool,
    prefix: String,
    wake: Weak<Sender>,
}

impl Drop for WatchBell {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }
}

impl WatchBell {
    pub(in crate::store::sql) fn new(pool: AnyPool, prefix: &str, wake: Weak<Sender>) -> Self {
        Self {
            watched: Arc::default(),
            task: Mutex::new(None),
            pool,
            prefix: prefix.to_string(),
            wake,
        }
    }

    /// Rings this process's observers when `key` is acquired, while the
    /// returned watch lives. `None` outside a tokio runtime.
    pub(in crate::store::sql) fn watch(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        {
            let mut task = self.task.lock().unwrap_or_else(|p| p.into_inner());
            if task.as_ref().is_none_or(|t| t.is_finished()) {
                *task = Some(rt.spawn(watch_loop(
                    Arc::downgrade(&self.watched),
                    self.pool.clone(),
                    self.prefix.clone(),
                    self.wake.clone(),
                )));
            }
        }
        let first = {
            let mut keys = self.watched.keys.lock().unwrap_or_else(|p| p.into_inner());
            let n = keys.entry(key.clone()).or_insert(0);
            *n += 1;
            *n == 1
        };
        if first {
            self.watched.changed.notify_waiters();
        }
        Some(AcquisitionWatch::new(Guard {
            watched: Arc::downgrade(&self.watched),
            key: key.clone(),
        }))
    }
}

/// The columns that find the connections ringing for `lock_name`'s
/// election: `CAST(IS_USED_LOCK(?) AS SIGNED)` per slot, bound by
/// [`bind_slots`].
pub(in crate::store::sql) fn slot_columns() -> String {
    vec!["CAST(IS_USED_LOCK(?) AS SIGNED)"; SLOTS].join(", ")
}

/// Binds the slot names of [`slot_columns`].
pub(in crate::store::sql) fn bind_slots<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    lock_name: &str,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for slot in 0..SLOTS {
        q = q.bind(slot_name(lock_name, slot));
    }
    q
}

/// The connection ids in the first [`SLOTS`] columns of `row`.
pub(in crate::store::sql) fn watcher_ids(row: &sqlx::any::AnyRow) -> Vec<i64> {
    (0..SLOTS)
        .filter_map(|i| row.try_get::<Option<i64>, _>(i).ok().flatten())
        .collect()
}

/// Rings the watchers of `lock_name`'s election in a statement of its own
/// (when the acquirer's lock statement could not carry the question).
pub(in crate::store::sql) async fn ring_watchers(pool: &AnyPool, lock_name: &str) {
    let sql = format!("SELECT {}", slot_columns());
    match bind_slots(sqlx::query(&sql), lock_name)
        .fetch_one(pool)
        .await
    {
        Ok(row) => kill_watchers(pool, &watcher_ids(&row)).await,
        Err(e) => tracing::debug!("watchers of an acquired election not found: {e}"),
    }
}

/// Interrupts the sleep of the watcher connections `ids` (best effort).
pub(in crate::store::sql) async fn kill_watchers(pool: &AnyPool, ids: &[i64]) {
    for id in ids {
        tracing::trace!(connection = id, "ringing a watcher's doorbell");
        // KILL takes no placeholders; the id is an integer from the server.
        if let Err(e) = sqlx::raw_sql(&format!("KILL QUERY {id}"))
            .execute(pool)
            .await
        {
            tracing::debug!("watcher's doorbell not rung ({e}); it reads at its slow poll");
        }
    }
}

/// Takes a free watcher slot of `lock_name`'s election on `c`, trying them
/// from a random one: `Ok(Some(slot name))`, `Ok(None)` if every slot is
/// taken.
async fn take_slot(c: &mut AnyConnection, lock_name: &str) -> Result<Option<String>, Outcome> {
    let start = rand::random::<u32>() as usize % SLOTS;
    for i in 0..SLOTS {
        let name = slot_name(lock_name, (start + i) % SLOTS);
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
                    return Ok(Some(name));
                }
            }
            Ok(Err(e)) => return Err(outcome(Err(e))),
            Err(_) => return Err(Outcome::Broken),
        }
    }
    Ok(None)
}

/// Holds a watcher slot of every watched election and sleeps; a ring wakes
/// every observer of this process's watched elections (one read each).
async fn watch_loop(watched: Weak<Watched>, pool: AnyPool, prefix: String, wake: Weak<Sender>) {
    let mut conn: Option<(AnyConnection, i64)> = None;
    // Election → the slot lock held for it.
    let mut held: HashMap<ElectionKey, String> = HashMap::new();
    // Elections whose slots were all taken at the last try.
    let mut full: HashSet<ElectionKey> = HashSet::new();
    // Rung at the end of the last round: its observers read once more
    // shortly after the next sleep began, since a second acquisition's ring
    // that reaches the server as that sleep starts can take seconds to land.
    let mut rung_before = false;
    loop {
        let Some(shared) = watched.upgrade() else {
            return;
        };
        let changed = shared.changed.clone().notified_owned();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let want: HashSet<ElectionKey> = shared
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        if want.is_empty() {
            // Nothing watched: close the connection (frees every slot).
            if let Some((c, _)) = conn.take() {
                let _ = c.close().await;
            }
            held.clear();
            full.clear();
            // (The store's drop aborts this task, also while it waits here.)
            drop(shared);
            changed.await;
            continue;
        }
        if conn.is_none() {
            conn = open(&pool).await;
            if conn.is_none() {
                drop(shared);
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        }
        let Some((c, id)) = conn.as_mut() else {
            continue;
        };
        let mut rung = false;
        let mut broken = false;
        // Elections armed in this round: an acquisition between the
        // observer's read and the arming rang nobody, so they read as soon
        // as their slots are held (not after the sleep, which could last
        // until the observer's slow fallback poll), and once more below.
        let mut armed: Vec<ElectionKey> = Vec::new();
        full.retain(|k| want.contains(k));
        let stale: Vec<ElectionKey> = held
            .keys()
            .filter(|k| !want.contains(*k))
            .cloned()
            .collect();
        for key in stale {
            let Some(name) = held.get(&key).cloned() else {
                continue;
            };
            let r = call(c, sqlx::query("SELECT RELEASE_LOCK(?)").bind(name)).await;
            match outcome(r) {
                Outcome::Done => {
                    held.remove(&key);
                }
                Outcome::Rung => rung = true,
                Outcome::Broken => broken = true,
            }
            if broken {
                break;
            }
        }
        let missing: Vec<ElectionKey> = want
            .iter()
            .filter(|k| !held.contains_key(*k) && !full.contains(*k))
            .cloned()
            .collect();
        for key in missing {
            if broken || rung {
                break;
            }
            match take_slot(c, &lock_name(&prefix, &key)).await {
                Ok(Some(name)) => {
                    held.insert(key.clone(), name);
                    armed.push(key);
                }
                Ok(None) => {
                    tracing::debug!(election = %key, "every watcher slot is taken: this watcher polls slowly");
                    full.insert(key);
                }
                Err(Outcome::Rung) => rung = true,
                Err(_) => broken = true,
            }
        }
        if !broken && !rung {
            // Armed: read now (an acquisition before the slot was held),
            // and once more when the sleep has surely begun.
            send_wakes(&wake, &armed, false);
            let recheck = if std::mem::take(&mut rung_before) {
                armed.clear();
                want.iter().cloned().collect()
            } else {
                std::mem::take(&mut armed)
            };
            // Sleep until a ring, or until the watched elections change
            // (then interrupt our own sleep from another connection).
            let sleep = sqlx::query("SELECT CAST(SLEEP(?) AS SIGNED)")
                .bind(SLEEP_SECS)
                .fetch_one(&mut *c);
            let held_now: HashSet<ElectionKey> = held.keys().cloned().collect();
            let must_wake = must_wake(&shared, changed.as_mut(), &held_now, &full);
            let until = until_changed(&pool, *id, sleep, must_wake);
            tokio::pin!(until);
            let (answer, own_kill) = if recheck.is_empty() {
                until.await
            } else {
                tokio::select! {
                    biased;
                    r = &mut until => r,
                    _ = tokio::time::sleep(ARMED_RECHECK) => {
                        send_wakes(&wake, &recheck, false);
                        until.await
                    }
                }
            };
            match answer {
                None => broken = true,
                // SLEEP answers 1 when interrupted, 0 when slept out.
                Some(Ok(row)) => {
                    if let Ok(Some(1)) = row.try_get::<Option<i64>, _>(0) {
                        rung = !own_kill;
                    }
                }
                // (`outcome` logs a failure.)
                Some(Err(e)) => match outcome(Err(e)) {
                    Outcome::Rung => rung = !own_kill,
                    _ => broken = true,
                },
            }
        }
        drop(shared);
        rung_before = rung;
        if rung {
            send_wakes(&wake, want.iter(), true);
        } else {
            // Armed but not slept on: the connection broke right after.
            send_wakes(&wake, &armed, false);
        }
        if broken {
            // Closing frees every slot; the next round takes them afresh on
            // a new connection, and the observers read once then.
            if let Some((c, _)) = conn.take() {
                let _ = c.close().await;
            }
            held.clear();
            full.clear();
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

/// Resolves when the sleep must be interrupted because the watched
/// elections changed: one to arm (not `held`, and not `full` at the last
/// try), or, [`LINGER`] after one stopped being watched, slots to give back.
/// `changed` was registered before the watched set was last read.
async fn must_wake(
    watched: &Watched,
    mut changed: std::pin::Pin<&mut OwnedNotified>,
    held: &HashSet<ElectionKey>,
    full: &HashSet<ElectionKey>,
) {
    let mut give_back: Option<tokio::time::Instant> = None;
    loop {
        match give_back {
            None => changed.as_mut().await,
            Some(at) => tokio::select! {
                _ = changed.as_mut() => {}
                _ = tokio::time::sleep_until(at) => return,
            },
        }
        changed.set(watched.changed.clone().notified_owned());
        changed.as_mut().enable();
        let keys = watched.keys.lock().unwrap_or_else(|p| p.into_inner());
        if keys.keys().any(|k| !held.contains(k) && !full.contains(k)) {
            return;
        }
        if held.iter().any(|k| !keys.contains_key(k)) {
            give_back.get_or_insert_with(|| tokio::time::Instant::now() + LINGER);
        } else {
            give_back = None;
        }
    }
}

/// Wakes the observers of `keys` (`rung`: by an acquirer's ring, rather
/// than because their slots were just taken).
fn send_wakes<'k>(
    wake: &Weak<Sender>,
    keys: impl IntoIterator<Item = &'k ElectionKey, IntoIter: ExactSizeIterator>,
    rung: bool,
) {
    let Some(tx) = wake.upgrade() else {
        return;
    };
    let keys = keys.into_iter();
    if keys.len() == 0 {
        return;
    }
    if keys.len() > MAX_NAMED_WAKES {
        // One message, not one per election: an observer of many
        // (`Selection::All`) would read once per message.
        tracing::trace!(
            elections = keys.len(),
            rung,
            "watcher's doorbell: everyone reads"
        );
        let _ = tx.send(None);
    } else {
        for key in keys {
            tracing::trace!(election = %key, rung, "watcher's doorbell: its observers read");
            let _ = tx.send(Some(key.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_fit() {
        let long = ElectionKey::new("default", "x".repeat(255));
        let name = slot_name(&lock_name("a_rather_long_table_prefix_", &long), SLOTS - 1);
        assert!(name.len() <= 64, "{name}");
    }
}
