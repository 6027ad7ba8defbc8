//! SQLite wake-ups without queries: the replicas share one file on one host,
//! so one task per store watches the database file and its write-ahead log
//! (size and modification time, one `stat` each, every [`CHECK_EVERY`]); every
//! commit changes them. When they change, the task reads the leases once and
//! wakes the followers of the elections whose holder, term or hand-over
//! changed; a renewal changes none of those, so it wakes nobody.
//!
//! A `stat` rather than `PRAGMA data_version`: it needs no connection of its
//! own and no statement, and it sees the same commits.
//!
//! A wake-up signal only: followers still read the lease themselves, and
//! read when it would expire.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use sqlx::AnyPool;

use super::decode::decode_record;
use super::statements::{sent, Statements};
use super::Dialect;
use crate::store::wakeups::{Sender, Wakeups};
use crate::store::{Changes, ElectionKey};

/// How often the files are looked at: a graceful hand-over is seen within
/// this (plus the successor's acquisition). Two `stat` calls cost microseconds.
const CHECK_EVERY: Duration = Duration::from_millis(10);

/// The leases are read every this many checks (1 s) even when the files look
/// unchanged.
const LOOK_ANYWAY_EVERY: u32 = 100;

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
pub(super) struct FileWatch {
    path: PathBuf,
    pool: AnyPool,
    statements: Arc<Statements>,
    wakeups: Wakeups,
}

impl FileWatch {
    /// Watches the database file at `path` (the URL's path).
    pub(super) fn new(path: PathBuf, pool: AnyPool, statements: Arc<Statements>) -> Self {
        Self {
            path,
            pool,
            statements,
            wakeups: Wakeups::new(),
        }
    }

    pub(super) fn subscribe(&self) -> Option<Changes> {
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

/// Runs until the store (and with it the sender) is dropped.
async fn watch(path: PathBuf, pool: AnyPool, statements: Arc<Statements>, tx: Weak<Sender>) {
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let wal = PathBuf::from(wal);
    let mut last: Option<Stamp> = None;
    let mut seen: HashMap<ElectionKey, Seen> = HashMap::new();
    let mut polls = 0u32;
    let mut looks = 0u32;
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        let Some(tx) = tx.upgrade() else { return };
        let now = stamp(&path, &wal);
        if now[0].is_none() {
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
        looks += 1;
        if last.as_ref() == Some(&now) && looks % LOOK_ANYWAY_EVERY != 0 {
            continue;
        }
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
