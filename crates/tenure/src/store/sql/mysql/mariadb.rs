//! MariaDB 10.5 or newer: a follower's member heartbeat and its read of the
//! lease in ONE statement, `INSERT ... ON DUPLICATE KEY UPDATE ... RETURNING`
//! with the lease record packed by a scalar subquery
//! (`Spelling::packed_heartbeat_and_read` in `mysql/dialect.rs`). MySQL has no `INSERT ...
//! RETURNING`, nor has MariaDB before 10.5: those servers get the two
//! statements side by side (heartbeat upsert and plain read), as before.
//!
//! Which server answers is asked once (`SELECT VERSION()`): when
//! [`SqlStore::connect`] connects, or at the first heartbeat-and-read of a
//! store built by [`SqlStore::connect_lazy`]. A server that refuses the
//! statement as not understood is not asked again: that store keeps the two
//! statements.

use std::sync::atomic::{AtomicU8, Ordering};

use sqlx::Row;

use crate::store::sql::connection::OnOwn;
use crate::store::sql::decode::decode_packed_record;
use crate::store::sql::errors::mysql_number;
use crate::store::sql::statements::{bind_member, duration_us, sent};
use crate::store::sql::SqlStore;
use crate::store::{LeaseRecord, Member};

/// Not asked yet (or the question failed).
const UNKNOWN: u8 = 0;
/// MariaDB 10.5 or newer: one statement.
const ONE_STATEMENT: u8 = 1;
/// MySQL, an older MariaDB, or a server that refused the statement.
const TWO_STATEMENTS: u8 = 2;

/// What this store knows of its server's `INSERT ... RETURNING`, and
/// whether it is MariaDB (`SET STATEMENT`, see `Spelling::bounded_lock_wait`).
#[derive(Debug, Default)]
pub(in crate::store::sql) struct Returning(AtomicU8, std::sync::atomic::AtomicBool);

/// Whether the server whose `SELECT VERSION()` says `version` has `INSERT ...
/// RETURNING`: MariaDB 10.5 or newer (`10.11.6-MariaDB-0+deb12u1`,
/// `11.4.2-MariaDB`; MariaDB's replication-compatible `5.5.5-10.11.6-MariaDB`
/// form too). MySQL (`8.0.36`) never.
pub(in crate::store::sql) fn has_insert_returning(version: &str) -> bool {
    if !version.contains("MariaDB") {
        return false;
    }
    let version = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mut numbers = version
        .split(['.', '-'])
        .map(|part| part.parse::<u32>().ok());
    match (numbers.next().flatten(), numbers.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (10, 5),
        _ => false,
    }
}

/// What became of one try of the single statement.
// Returned once per call and matched at once, never stored: the size of
// the record variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(in crate::store::sql) enum Tried {
    /// The lease record (`None`: no lease row); the heartbeat is written.
    Read(Option<LeaseRecord>),
    /// Not sent, or undone: send the two statements instead.
    FallBack,
    /// The store failed.
    Failed(sqlx::Error),
}

impl SqlStore {
    /// Asks the server once whether it has `INSERT ... RETURNING`; a failed
    /// question is asked again next time.
    pub(in crate::store::sql) async fn detect_returning(&self) -> bool {
        // Only a MySQL/MariaDB store keeps the answer.
        let Some(returning) = self.wake.returning() else {
            return false;
        };
        match returning.0.load(Ordering::Relaxed) {
            ONE_STATEMENT => return true,
            TWO_STATEMENTS => return false,
            _ => {}
        }
        let version = match sqlx::query("SELECT VERSION()")
            .fetch_optional_on(&self.own)
            .await
        {
            Ok(Some(row)) => row.try_get::<String, _>(0),
            Ok(None) => Err(sqlx::Error::RowNotFound),
            Err(e) => Err(e),
        };
        match version {
            Ok(version) => {
                returning
                    .1
                    .store(version.contains("MariaDB"), Ordering::Relaxed);
                let one = has_insert_returning(&version);
                tracing::debug!(
                    store = %self.described,
                    server = %version,
                    "a follower's heartbeat and read: {}",
                    if one { "one statement (INSERT ... RETURNING)" } else { "two statements" }
                );
                let state = if one { ONE_STATEMENT } else { TWO_STATEMENTS };
                let _ = returning.0.compare_exchange(
                    UNKNOWN,
                    state,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                one
            }
            Err(e) => {
                tracing::debug!(store = %self.described, "cannot ask the server's version: {e}");
                false
            }
        }
    }

    /// Whether the server is known to be MariaDB (asked at connect, with
    /// [`detect_returning`](Self::detect_returning)).
    pub(in crate::store::sql) fn is_mariadb(&self) -> bool {
        self.wake
            .returning()
            .is_some_and(|r| r.1.load(Ordering::Relaxed))
    }

    /// The heartbeat and the read in one statement, where the server has it.
    pub(in crate::store::sql) async fn mariadb_heartbeat_and_read(
        &self,
        member: &Member,
        ttl: std::time::Duration,
    ) -> Tried {
        let Some(sql) = &self.statements.mariadb_heartbeat_and_read else {
            return Tried::FallBack;
        };
        if !self.detect_returning().await {
            return Tried::FallBack;
        }
        let sql = sent(self.dialect, sql);
        // On the store's connection, as every statement: this read is a
        // successor's last step before it acquires (see `connection.rs`).
        let mut lent = match self.own.lend().await {
            Ok(lent) => lent,
            Err(e) => return Tried::Failed(e),
        };
        let row = bind_member(sqlx::query(&sql), member, duration_us(ttl))
            .bind(member.key.namespace.as_str())
            .bind(member.key.election.as_str())
            .fetch_one(lent.conn())
            .await;
        let packed = row.and_then(|row| row.try_get::<Option<String>, _>(0));
        // The server's answer, or an error it answered with, leaves the
        // connection sound and idle: kept for the fallback's read, which
        // comes next. (A failed call may have left it mid-statement.)
        if packed
            .as_ref()
            .map_or_else(|e| locked(e) || refused(e), |_| true)
        {
            // MySQL runs no lend in a transaction: nothing to commit.
            let _ = lent.keep().await;
        }
        match packed {
            Ok(packed) => match decode_packed_record(packed.as_deref()) {
                Ok(rec) => Tried::Read(rec),
                Err(e) => Tried::Failed(e),
            },
            // The lease row (or our member row) is locked: by a renewal
            // for an instant, or by the leader's fenced transaction for as
            // long as its work lasts. The statement did not wait and was
            // undone as a whole; the plain read does not wait for locks.
            Err(e) if locked(&e) => {
                tracing::debug!(
                    election = %member.key,
                    "the lease row is locked; heartbeat and read as two statements"
                );
                Tried::FallBack
            }
            // Not understood (a server that is not what it said, or one
            // swapped behind the URL): keep to the two statements.
            Err(e) if refused(&e) => {
                tracing::warn!(
                    store = %self.described,
                    "the server refused INSERT ... RETURNING ({e}); followers send their heartbeat and read as two statements"
                );
                if let Some(returning) = self.wake.returning() {
                    returning.0.store(TWO_STATEMENTS, Ordering::Relaxed);
                }
                Tried::FallBack
            }
            Err(e) => Tried::Failed(e),
        }
    }
}

/// The statement found a row locked and, not waiting, was undone (lock
/// wait timeout, deadlock).
fn locked(e: &sqlx::Error) -> bool {
    matches!(mysql_number(e), Some(1205 | 1213))
}

/// The server did not understand `INSERT ... RETURNING` or `SET STATEMENT`
/// (a parse error, an unknown variable, "not supported").
fn refused(e: &sqlx::Error) -> bool {
    matches!(mysql_number(e), Some(1064 | 1193 | 1235 | 1971))
}

#[cfg(test)]
mod tests {
    use super::has_insert_returning;

    #[test]
    fn mariadb_from_10_5_has_insert_returning() {
        for yes in [
            "10.5.0-MariaDB",
            "10.11.6-MariaDB-0+deb12u1",
            "5.5.5-10.11.6-MariaDB-log",
            "11.4.2-MariaDB",
            "10.6.16-MariaDB-1:10.6.16+maria~ubu2004",
        ] {
            assert!(has_insert_returning(yes), "{yes}");
        }
        for no in [
            "10.4.32-MariaDB",
            "5.5.5-10.3.39-MariaDB",
            "8.0.36",
            "8.4.0-commercial",
            "5.7.44-log",
            "MariaDB",
            "",
        ] {
            assert!(!has_insert_returning(no), "{no}");
        }
    }
}
