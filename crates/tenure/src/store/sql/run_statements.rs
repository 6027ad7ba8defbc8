//! The text of the run record statements (`<prefix>runs`), built once per
//! store; `runs.rs` sends them.

use super::dialect::Dialect;

/// The columns every run record statement returns, in `decode_run`'s names.
const RUN_COLUMNS: &str = "namespace, election, name, value, version, updated_us";

/// The run record statements of one table prefix and dialect.
#[derive(Debug)]
pub(super) struct RunStatements {
    pub(super) get: String,
    /// Newest first; the name orders writes of one clock tick (SQLite's
    /// clock has millisecond resolution).
    pub(super) list: String,
    /// The first write (`Dialect::insert_run`).
    pub(super) insert: String,
    /// A later write, on the version it expects.
    pub(super) update: String,
    /// The election's expired rows, after a write.
    pub(super) forget_expired: String,
    /// MySQL/MariaDB: one expired row, before its first write's `INSERT`.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(super) forget_expired_name: String,
    /// MySQL/MariaDB: the row just written, inside the writing transaction.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(super) read_written: String,
}

impl RunStatements {
    pub(super) fn new(dialect: Dialect, prefix: &str) -> Self {
        let t = format!("{prefix}runs");
        let election = "namespace = ? AND election = ?";
        let name = "namespace = ? AND election = ? AND name = ?";
        Self {
            get: dialect.select(
                &t,
                RUN_COLUMNS,
                &format!("{name} AND expires_us > {{now}}"),
                "",
            ),
            list: dialect.select(
                &t,
                RUN_COLUMNS,
                &format!("{election} AND expires_us > {{now}}"),
                " ORDER BY updated_us DESC, name ASC LIMIT ?",
            ),
            insert: dialect.insert_run(&t, RUN_COLUMNS),
            update: dialect.update(
                &t,
                "value = ?, version = version + 1, updated_us = {now}, expires_us = {now} + ?",
                &format!("{name} AND version = ? AND expires_us > {{now}}"),
                Some(RUN_COLUMNS),
            ),
            forget_expired: dialect.delete(&t, &format!("{election} AND expires_us <= {{now}}")),
            forget_expired_name: dialect.delete(&t, &format!("{name} AND expires_us <= {{now}}")),
            read_written: dialect.select(&t, RUN_COLUMNS, name, ""),
        }
    }
}
