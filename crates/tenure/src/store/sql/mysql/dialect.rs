//! How MySQL and MariaDB spell the statements: `ON DUPLICATE KEY UPDATE`,
//! no `UPDATE ... RETURNING`, and byte-for-byte collations.

use crate::store::sql::dialect::{
    ColumnTypes, ServerKind, Spelling, MEMBER_INSERT_COLUMNS, RUN_INSERT_COLUMNS,
};

/// MySQL 8 or MariaDB 10.5 or newer.
pub(in crate::store::sql) struct MySql;

/// The `ON DUPLICATE KEY` clause of a member's registration: a member already
/// registered keeps its `joined_us`.
const MEMBER_ON_DUPLICATE: &str = "ON DUPLICATE KEY UPDATE \
     metadata = VALUES(metadata), priority = VALUES(priority), \
     heartbeat_us = VALUES(heartbeat_us), expires_us = VALUES(expires_us)";

/// A text column of `chars` characters in a binary NO PAD collation: names
/// compare byte for byte, so "Cron", "cron" and "cron " are three elections,
/// as on the other stores. The PAD SPACE `utf8mb4_bin` would merge "cron"
/// and "cron ".
fn varchar(chars: u32, server: ServerKind) -> String {
    let collation = match server {
        ServerKind::MariaDb => "utf8mb4_nopad_bin",
        ServerKind::Other => "utf8mb4_0900_bin",
    };
    format!("VARCHAR({chars}) CHARACTER SET utf8mb4 COLLATE {collation}")
}

impl Spelling for MySql {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn server_name(&self) -> &'static str {
        "MySQL/MariaDB"
    }

    /// `UTC_TIMESTAMP(6)` is constant within one statement and, unlike
    /// `NOW(6)`, does not depend on the session time zone (no DST ambiguity).
    fn now_expr(&self) -> &'static str {
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
    }

    fn whole_seconds(&self, now: &str) -> String {
        format!("(({now}) DIV 1000000 * 1000000)")
    }

    /// No `RETURNING`: the batched renewal reads back what it extended
    /// (`batch.rs`).
    fn update(&self, table: &str, set: &str, filter: &str, _returning: Option<&str>) -> String {
        format!("UPDATE {table} SET {set} WHERE {filter}")
    }

    fn has_update_returning(&self) -> bool {
        false
    }

    fn on_duplicate_keep(&self, column: &str) -> String {
        format!("ON DUPLICATE KEY UPDATE {column} = {column}")
    }

    fn upsert_members(&self, table: &str, n: usize) -> String {
        let vals = vec!["(?, ?, ?, ?, ?, ?, {now}, {now}, {now} + ?)"; n].join(", ");
        format!("INSERT INTO {table} {MEMBER_INSERT_COLUMNS} VALUES {vals} {MEMBER_ON_DUPLICATE}")
    }

    /// A plain `INSERT`, decided by the primary key (a duplicate-key error
    /// means someone else wrote first); the caller first deletes an expired
    /// record of the name, which decides nothing (an expired record reads as
    /// absent anyway).
    fn insert_run(&self, table: &str, _columns: &str) -> String {
        format!(
            "INSERT INTO {table} {RUN_INSERT_COLUMNS} VALUES (?, ?, ?, ?, 1, {{now}}, {{now}} + ?)"
        )
    }

    /// MariaDB 10.5 or newer only (MySQL has no `INSERT ... RETURNING`; the
    /// caller sends this only once the server said it has it).
    ///
    /// The answer is one column, `lease`: `JSON_ARRAY(fields..., now µs)`
    /// from ONE scalar subquery on the lease row, or `NULL` when there is no
    /// lease row. One subquery reads the row once, so every value comes from
    /// the same version of it: no torn record. (That subquery is a locking
    /// read, since it runs inside an `INSERT`: it takes a shared lock on the
    /// lease row for the statement, as `INSERT ... SELECT` does.)
    ///
    /// `innodb_lock_wait_timeout = 0` for this statement: the shared lock
    /// must not wait behind a renewal or, worse, a leader's fenced
    /// transaction (which holds the row for as long as the application's
    /// work lasts), where a plain `SELECT` reads the last committed version
    /// at once. On a conflict the statement fails at once with error 1205,
    /// undoing the heartbeat too, and the caller falls back to the heartbeat
    /// and the plain read side by side. The server's now is that of the
    /// statement's start, as in every other statement; not waiting keeps it
    /// the time the record was read at.
    ///
    /// The record is information for the follower (when to look again,
    /// whom to follow); safety never rests on it: acquiring is still the
    /// conditional `UPDATE` judged by the server's clock at that moment.
    fn packed_heartbeat_and_read(
        &self,
        leases: &str,
        members: &str,
        fields: &[&str],
    ) -> Option<String> {
        let packed = fields
            .iter()
            .map(|f| format!("l.{f}"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(format!(
            "SET STATEMENT innodb_lock_wait_timeout = 0 FOR \
             INSERT INTO {members} {MEMBER_INSERT_COLUMNS} \
             VALUES (?, ?, ?, ?, ?, ?, {{now}}, {{now}}, {{now}} + ?) {MEMBER_ON_DUPLICATE} \
             RETURNING (SELECT JSON_ARRAY({packed}, {{now}}) FROM {leases} AS l \
             WHERE l.namespace = ? AND l.election = ?) AS lease"
        ))
    }

    fn begin_write(&self) -> &'static str {
        "START TRANSACTION"
    }

    /// The statement waits at most a second for a row lock (the server's
    /// default is 50; a second is MySQL's least). MariaDB: `SET STATEMENT
    /// ... FOR`. Other servers: MySQL's `SET_VAR` optimizer hint, which a
    /// server that cannot apply it ignores with a warning (and MariaDB, as
    /// a comment); the server's own `innodb_lock_wait_timeout` then holds.
    fn bounded_lock_wait(&self, update: &str) -> Option<(String, String)> {
        let rest = update.strip_prefix("UPDATE ")?;
        Some((
            format!("UPDATE /*+ SET_VAR(innodb_lock_wait_timeout = 1) */ {rest}"),
            format!("SET STATEMENT innodb_lock_wait_timeout = 1 FOR {update}"),
        ))
    }

    /// The session's idle limit (`wait_timeout`: the server closes a
    /// connection idle that long, rolling its transaction back) and lock
    /// waits, in whole seconds, rounded up.
    fn bound_transaction(&self, ms: u64) -> Option<String> {
        let s = ms.div_ceil(1000).max(1);
        Some(format!(
            "SET SESSION wait_timeout = {s}, innodb_lock_wait_timeout = {s}"
        ))
    }

    fn unbound_transaction(&self) -> Option<&'static str> {
        Some("SET SESSION wait_timeout = DEFAULT, innodb_lock_wait_timeout = DEFAULT")
    }

    fn column_types(&self, server: ServerKind) -> ColumnTypes {
        ColumnTypes {
            key: varchar(255, server),
            text: varchar(1024, server),
            int: "BIGINT",
            table_options: " ENGINE=InnoDB",
        }
    }

    fn long_text(&self, chars: u32, server: ServerKind) -> String {
        varchar(chars, server)
    }
}
