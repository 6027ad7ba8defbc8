//! How PostgreSQL spells the statements: the clock read once per statement
//! through a CTE, numbered placeholders, and notifications sent by the
//! statement that changes a lease.

use crate::store::sql::dialect::{
    run_on_conflict, ColumnTypes, ServerKind, Spelling, MEMBER_INSERT_COLUMNS, MEMBER_ON_CONFLICT,
    RUN_INSERT_COLUMNS,
};

/// PostgreSQL 12 or newer.
pub(in crate::store::sql) struct Postgres;

/// Reads the clock once per statement: `clock_timestamp()` is the real time
/// even inside a long transaction, but changes between calls.
const WITH_NOW: &str =
    "WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us) ";

impl Spelling for Postgres {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn server_name(&self) -> &'static str {
        "PostgreSQL"
    }

    /// The clock as read once per statement by [`WITH_NOW`], which every
    /// statement here starts with.
    fn now_expr(&self) -> &'static str {
        "c.now_us"
    }

    fn numbered_placeholders(&self) -> bool {
        true
    }

    fn update(&self, table: &str, set: &str, filter: &str, returning: Option<&str>) -> String {
        let ret = returning.map_or(String::new(), |r| format!(" RETURNING {r}"));
        format!("{WITH_NOW}UPDATE {table} SET {set} FROM c WHERE {filter}{ret}")
    }

    // `::text`: pg_notify returns void, which the `Any` driver cannot decode.
    fn update_announced(
        &self,
        table: &str,
        set: &str,
        filter: &str,
        channel: &str,
    ) -> Option<String> {
        Some(format!(
            "{}, done AS (UPDATE {table} SET {set} FROM c WHERE {filter} RETURNING namespace, election) \
             SELECT pg_notify('{channel}', namespace || chr(31) || election)::text FROM done",
            WITH_NOW.trim_end()
        ))
    }

    fn lock_row_nowait(&self, table: &str) -> Option<String> {
        Some(format!(
            "EXISTS (SELECT 1 FROM {table} AS locked WHERE locked.namespace = {table}.namespace \
             AND locked.election = {table}.election FOR UPDATE NOWAIT)"
        ))
    }

    /// Data-modifying CTEs beside the `UPDATE`: they see what it returns,
    /// and commit or roll back with it.
    fn update_recording_start(
        &self,
        table: &str,
        set: &str,
        filter: &str,
        returning: &str,
        history: &str,
    ) -> Option<String> {
        Some(format!(
            "{}, won AS (UPDATE {table} SET {set} FROM c WHERE {filter} RETURNING {returning}), \
             started AS (INSERT INTO {history} (namespace, election, term, holder, start_reason, start_us) \
               SELECT namespace, election, term, holder, start_reason, acquired_us FROM won \
               ON CONFLICT DO NOTHING), \
             expired AS (UPDATE {history} AS h SET end_us = won.prev_expires_us, end_reason = '{expired}' \
               FROM won WHERE h.namespace = won.namespace AND h.election = won.election \
               AND h.term = won.term - 1 AND h.end_us = 0 AND won.prev_holder <> '') \
             SELECT * FROM won",
            WITH_NOW.trim_end(),
            expired = crate::store::EndReason::Expired.as_str(),
        ))
    }

    /// `SET LOCAL` of every timeout the server has that ends a
    /// transaction whose client went quiet: a statement running longer,
    /// the client idle inside the transaction, and (PostgreSQL 17) the
    /// transaction as a whole. `set_config` rather than `SET LOCAL`, so
    /// that a server without `transaction_timeout` sets the others.
    fn bound_transaction(&self, ms: u64) -> Option<String> {
        Some(format!(
            "SELECT set_config(name, '{ms}', true) FROM pg_settings WHERE name IN \
             ('statement_timeout', 'idle_in_transaction_session_timeout', 'transaction_timeout')"
        ))
    }

    fn select(&self, table: &str, columns: &str, filter: &str, suffix: &str) -> String {
        format!("{WITH_NOW}SELECT {columns} FROM {table}, c WHERE {filter}{suffix}")
    }

    fn delete(&self, table: &str, filter: &str) -> String {
        format!("{WITH_NOW}DELETE FROM {table} USING c WHERE {filter}")
    }

    fn upsert_members(&self, table: &str, n: usize) -> String {
        let rows = vec!["SELECT ?, ?, ?, ?, ?, ?, c.now_us, c.now_us, c.now_us + ? FROM c"; n]
            .join(" UNION ALL ");
        format!("{WITH_NOW}INSERT INTO {table} {MEMBER_INSERT_COLUMNS} {rows} {MEMBER_ON_CONFLICT}")
    }

    /// One upsert whose update applies only over an expired record (a live
    /// one keeps its row, and nothing is returned).
    fn insert_run(&self, table: &str, columns: &str) -> String {
        format!(
            "{WITH_NOW}INSERT INTO {table} {RUN_INSERT_COLUMNS} SELECT ?, ?, ?, ?, 1, c.now_us, c.now_us + ? FROM c \
             {} RETURNING {columns}",
            run_on_conflict(table)
        )
    }

    /// A data-modifying CTE: the heartbeat's upsert beside the lease's read.
    fn heartbeat_and_read(&self, leases: &str, members: &str, columns: &str) -> Option<String> {
        Some(format!(
            "{}, hb AS (INSERT INTO {members} {MEMBER_INSERT_COLUMNS} \
             SELECT ?, ?, ?, ?, ?, ?, c.now_us, c.now_us, c.now_us + ? FROM c \
             {MEMBER_ON_CONFLICT}) \
             SELECT {columns} FROM {leases}, c WHERE namespace = ? AND election = ?",
            WITH_NOW.trim_end()
        ))
    }

    fn column_types(&self, _server: ServerKind) -> ColumnTypes {
        ColumnTypes {
            key: "TEXT".into(),
            text: "TEXT".into(),
            int: "BIGINT",
            table_options: "",
        }
    }
}
