//! How SQLite spells the statements.

use crate::store::sql::dialect::{
    run_on_conflict, ColumnTypes, ServerKind, Spelling, MEMBER_INSERT_COLUMNS, MEMBER_ON_CONFLICT,
    RUN_INSERT_COLUMNS,
};

/// SQLite 3.42 or newer (bundled with sqlx).
pub(in crate::store::sql) struct Sqlite;

impl Spelling for Sqlite {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn server_name(&self) -> &'static str {
        "SQLite"
    }

    /// `unixepoch('subsec')` has millisecond resolution and is constant
    /// within one statement.
    fn now_expr(&self) -> &'static str {
        "(CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER) * 1000)"
    }

    fn upsert_members(&self, table: &str, n: usize) -> String {
        let vals = vec!["(?, ?, ?, ?, ?, ?, {now}, {now}, {now} + ?)"; n].join(", ");
        format!("INSERT INTO {table} {MEMBER_INSERT_COLUMNS} VALUES {vals} {MEMBER_ON_CONFLICT}")
    }

    /// One upsert whose update applies only over an expired record (a live
    /// one keeps its row, and nothing is returned).
    fn insert_run(&self, table: &str, columns: &str) -> String {
        format!(
            "INSERT INTO {table} {RUN_INSERT_COLUMNS} VALUES (?, ?, ?, ?, 1, {{now}}, {{now}} + ?) \
             {} RETURNING {columns}",
            run_on_conflict(table)
        )
    }

    /// The default deferred `BEGIN` would upgrade a read lock later and can
    /// fail with `SQLITE_BUSY` without waiting; `IMMEDIATE` waits for the
    /// busy timeout instead.
    fn begin_write(&self) -> &'static str {
        "BEGIN IMMEDIATE"
    }

    /// `BEGIN IMMEDIATE` already holds the database's write lock.
    fn for_update(&self) -> &'static str {
        ""
    }

    fn column_types(&self, _server: ServerKind) -> ColumnTypes {
        ColumnTypes {
            key: "TEXT".into(),
            text: "TEXT".into(),
            int: "INTEGER",
            table_options: "",
        }
    }
}
