//! SQLite wake-ups without queries: the replicas share one file on one host,
//! so one task per store watches the database file and its write-ahead log;
//! every commit changes them. The kernel tells the task of each write
//! (inotify on Linux, through the `notify` crate), and the task also looks at
//! their size and modification time (one `stat` each) every
//! [`CHECK_WATCHED`], or every [`CHECK_EVERY`] where the files cannot be
//! watched. When they change, the task reads the leases once and wakes the
//! followers of the elections whose holder, term or hand-over changed; a
//! renewal changes none of those, so it wakes nobody.
//!
//! File events rather than `PRAGMA data_version`: they need no connection of
//! their own and no statement, and they see the same commits. A 10 ms
//! `stat` poll alone would cost a request two such waits (request → the
//! leader, hand-over → the successor): up to 20 ms on every resign.
//!
//! A file event comes when a commit is written, not when it shows: with
//! `synchronous = FULL` the log is flushed to disk in between, and on a busy
//! disk that flush takes hundreds of milliseconds, with no file event at its
//! end. So the task keeps one connection of its own to ask SQLite whether
//! another connection has committed since its last read (`PRAGMA
//! data_version`, microseconds, no lock held): once the log has changed it
//! asks every [`CHECK_EVERY`] until the commit shows (for at most
//! [`COMMIT_PATIENCE`]), otherwise every [`CHECK_WATCHED`], and reads the
//! leases only when the answer moved. Where that connection cannot be had,
//! it reads twice more after each event and when the files' size or time
//! change, and every [`LOOK_ANYWAY`].
//!
//! A wake-up signal only: followers still read the lease themselves, and
//! read when it would expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use sqlx::{AnyConnection, AnyPool};

use crate::store::sql::decode::decode_record;
use crate::store::sql::statements::{sent, Statements};
use crate::store::sql::Dialect;
use crate::store::util::wakeups::{Sender, Wakeups};
use crate::store::{Changes, ElectionKey};

/// How often the files are looked at where they cannot be watched: a
/// graceful hand-over is seen within this (plus the successor's
/// acquisition). Two `stat` calls cost microseconds.
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// How often the files are looked at while they are watched: only to cover
/// an event the kernel dropped (its queue overflowed).
const CHECK_WATCHED: Duration = Duration::from_millis(200);

/// How long after a file event the leases are read: the commit that wrote
/// to the log becomes visible just after.
const EVENT_SETTLE: Duration = Duration::from_millis(1);

/// The leases are read this often even when the files look unchanged.
const LOOK_ANYWAY: Duration = Duration::from_secs(1);

/// Without the file to look at, everyone is woken every this many checks (80 ms).
const FALLBACK_EVERY: u32 = 8;

/// How long after a file event its commit is waited for: as long as a
/// writer waits for the lock (`busy_timeout`). A write that commits nothing
/// (a checkpoint copying the log into the file) ends the wait here.
const COMMIT_PATIENCE: Duration = Duration::from_secs(5);

/// SQLite's word on whether other connections committed, asked on a
/// connection of the task's own: the answer is per connection, so a pooled
/// one would not do. That connection never writes, so every commit counts;
/// an idle SQLite connection is a file handle that holds no lock, so it
/// never stands in a checkpoint's way.
struct Commits {
    conn: AnyConnection,
    /// `PRAGMA data_version` at the last read of the leases.
    read_at: Option<i64>,
}

impl Commits {
    /// `None` where no connection can be had.
    async fn open(pool: &AnyPool) -> Option<Self> {
        let conn = pool
            .acquire()
            .await
            .map_err(|e| tracing::debug!("no connection to count SQLite commits: {e}"))
            .ok()?
            // Out of the pool, which opens another in its place when it
            // needs one: this one is the task's for as long as it runs.
            .detach();
        Some(Self {
            conn,
            read_at: None,
        })
    }

    /// Whether another connection committed since the last time this said
    /// so. Asked before the leases are read: a commit in between shows in
    /// the read and moves the answer once more (one read too many, no miss).
    async fn moved(&mut self) -> Result<bool, sqlx::Error> {
        let now = sqlx::query_scalar::<_, i64>("PRAGMA data_version")
            .fetch_one(&mut self.conn)
            .await?;
        Ok(self.read_at.replace(now) != Some(now))
    }
}

/// What of a lease wakes followers when it changes.
#[derive(PartialEq, Eq)]
struct Seen {
    holder: Option<String>,
    term: u64,
    handover: Option<String>,
}

#[derive(Debug)]
pub(in crate::store::sql) struct FileWatch {
    path: PathBuf,
    pool: AnyPool,
    statements: Arc<Statements>,
    wakeups: Wakeups,
}

impl FileWatch {
    /// Watches the database file at `path` (the URL's path).
    pub(in crate::store::sql) fn new(
        path: PathBuf,
        pool: AnyPool,
        statements: Arc<Statements>,
    ) -> Self {
        Self {
            path,
            pool,
            statements,
            wakeups: Wakeups::new(),
        }
    }

    /// Whether anything in the process subscribes.
    pub(in crate::store::sql) fn has_subscribers(&self) -> bool {
        self.wakeups.has_subscribers()
    }

    pub(in crate::store::sql) fn subscribe(&self) -> Option<Changes> {
        let (path, pool) = (self.path.clone(), self.pool.clone());
        let statements = self.statements.clone();
        self.wakeups
            .subscribe(|tx| watch(path, pool, statements, tx))
    }
}

/// Size and modification time of the database file and its write-ahead log.
type Stamp = [Option<(u64, SystemTime)>; 2];

fn stamp(db: &Path, wal: &Path) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)))
    };
    [one(db), one(wal)]
}

/// Asks the kernel to say when the database file or its write-ahead log is
/// written: `signal` is notified at each such event. `None` where the
/// directory cannot be watched (no inotify, its limits reached).
fn watch_files(
    db: &Path,
    wal: &Path,
    signal: Arc<tokio::sync::Notify>,
) -> Option<notify::RecommendedWatcher> {
    use notify::{EventKind, RecursiveMode, Watcher};
    let names = [db.file_name()?.to_owned(), wal.file_name()?.to_owned()];
    let dir = match db.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        match event {
            // Only writes to our two files: the directory may be busy with others.
            Ok(e) => {
                let ours = e
                    .paths
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| names.iter().any(|m| m == n)));
                let write = !matches!(e.kind, EventKind::Access(_));
                if ours && write {
                    signal.notify_one();
                }
            }
            // An overflow or a watch lost: look.
            Err(_) => signal.notify_one(),
        }
    })
    .map_err(|e| tracing::debug!("cannot watch the SQLite file: {e}"))
    .ok()?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| tracing::debug!("cannot watch {}: {e}", dir.display()))
        .ok()?;
    Some(watcher)
}

/// Runs until the store (and with it the sender) is dropped.
async fn watch(path: PathBuf, pool: AnyPool, statements: Arc<Statements>, tx: Weak<Sender>) {
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let written = Arc::new(tokio::sync::Notify::new());
    // Kept for as long as this task runs: dropping it ends the watch.
    let watcher = watch_files(&path, &wal, written.clone());
    let mut commits = Commits::open(&pool).await;
    // Events name the files by the URL's path: where the file is not there,
    // none will come, and the fallback below needs the short period.
    let mut present = false;
    // With the commit count: since when a write's commit is waited for.
    let mut awaiting: Option<Instant> = None;
    // Without it: reads still due after a file event, whatever the files
    // look like.
    let mut forced = 0u8;
    let mut stamped: Option<Stamp> = None;
    let mut last: Option<Stamp> = None;
    let mut seen: HashMap<ElectionKey, Seen> = HashMap::new();
    let mut polls = 0u32;
    let mut looked = Instant::now();
    loop {
        let fast = watcher.is_none() || !present || forced > 0 || awaiting.is_some();
        let check = if fast { CHECK_EVERY } else { CHECK_WATCHED };
        let by_event = tokio::select! {
            _ = tokio::time::sleep(check) => false,
            _ = written.notified() => true,
        };
        if by_event {
            // A write to the log comes before its commit is visible (the
            // wal-index, memory-mapped, says nothing to inotify): look a
            // moment later, and until the commit shows.
            tokio::time::sleep(EVENT_SETTLE).await;
        }
        let Some(tx) = tx.upgrade() else { return };
        let now = stamp(&path, &wal);
        present = now[0].is_some();
        if !present {
            // The file is not where the URL's path says (an unusual URL
            // spelling): wake everyone now and then, as polling did.
            polls += 1;
            if polls % FALLBACK_EVERY == 0 {
                let _ = tx.send(None);
            }
            continue;
        }
        let before = stamped.replace(now);
        let read = match commits.as_mut() {
            Some(counter) => {
                // Commits are written to the log: the file alone changing is
                // a checkpoint copying the log into it, which commits
                // nothing. Without a log (not in WAL mode), the file.
                let written = match before {
                    Some(b) if now[1].is_some() => b[1] != now[1],
                    _ => by_event || before != Some(now),
                };
                if written {
                    awaiting.get_or_insert_with(Instant::now);
                }
                if awaiting.is_none() && looked.elapsed() < CHECK_WATCHED {
                    continue;
                }
                looked = Instant::now();
                match counter.moved().await {
                    Ok(moved) => {
                        if moved || awaiting.is_some_and(|t| t.elapsed() >= COMMIT_PATIENCE) {
                            awaiting = None;
                        }
                        moved
                    }
                    Err(e) => {
                        tracing::debug!("cannot ask SQLite for its commits: {e}");
                        (commits, awaiting) = (None, None);
                        true
                    }
                }
            }
            // Unchanged files need no read, except now and then: a commit
            // can leave size and modification time as they were (a
            // write-ahead log restarted at the same length within one tick
            // of the coarse file-time clock), and a wake-up missed that way
            // would cost a leader a renew period and a follower the old
            // lease's expiry.
            None => {
                if by_event {
                    forced = 2;
                }
                let force = forced > 0;
                forced = forced.saturating_sub(1);
                let read = force || last.as_ref() != Some(&now) || looked.elapsed() >= LOOK_ANYWAY;
                if read {
                    looked = Instant::now();
                }
                read
            }
        };
        if !read {
            continue;
        }
        let rows = sqlx::query(&sent(Dialect::Sqlite, &statements.list_all))
            .fetch_all(&pool)
            .await;
        let Ok(rows) = rows else {
            // Busy or mid-migration: look again next time, and with the
            // commit count, soon, whatever it says then.
            if let Some(counter) = commits.as_mut() {
                counter.read_at = None;
                awaiting = Some(Instant::now());
            }
            continue;
        };
        last = Some(now);
        for rec in rows.iter().filter_map(|r| decode_record(r).ok()) {
            let now_seen = Seen {
                holder: rec.holder.clone(),
                term: rec.term,
                handover: rec.handover.as_ref().map(|h| h.column().to_string()),
            };
            // The first look wakes everyone too: a change may have come
            // between a follower's read and this task's first look.
            if seen.get(&rec.key) != Some(&now_seen) {
                let _ = tx.send(Some(rec.key.clone()));
            }
            seen.insert(rec.key, now_seen);
        }
    }
}
