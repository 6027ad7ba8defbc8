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
//! A wake-up signal only: followers still read the lease themselves, and
//! read when it would expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use sqlx::AnyPool;

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
    // Events name the files by the URL's path: where the file is not there,
    // none will come, and the fallback below needs the short period.
    let mut present = false;
    // Reads still due after a file event, whatever the files look like.
    let mut forced = 0u8;
    let mut last: Option<Stamp> = None;
    let mut seen: HashMap<ElectionKey, Seen> = HashMap::new();
    let mut polls = 0u32;
    let mut looked = Instant::now();
    loop {
        let check = if watcher.is_some() && present && forced == 0 {
            CHECK_WATCHED
        } else {
            CHECK_EVERY
        };
        let by_event = tokio::select! {
            _ = tokio::time::sleep(check) => false,
            _ = written.notified() => true,
        };
        if by_event {
            // A write to the log comes before its commit is visible (the
            // wal-index, memory-mapped, says nothing to inotify): read a
            // moment later, and once more a tick after, whatever the files
            // look like by then.
            tokio::time::sleep(EVENT_SETTLE).await;
            forced = 2;
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
        // Unchanged files need no read, except now and then: a commit can
        // leave size and modification time as they were (a write-ahead log
        // restarted at the same length within one tick of the coarse
        // file-time clock), and a wake-up missed that way would cost a leader
        // a renew period and a follower the old lease's expiry.
        let force = forced > 0;
        forced = forced.saturating_sub(1);
        if !force && last.as_ref() == Some(&now) && looked.elapsed() < LOOK_ANYWAY {
            continue;
        }
        looked = Instant::now();
        let rows = sqlx::query(&sent(Dialect::Sqlite, &statements.list_all))
            .fetch_all(&pool)
            .await;
        let Ok(rows) = rows else {
            // Busy or mid-migration: look again next time.
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
