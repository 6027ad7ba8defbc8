//! The SQL statements' shapes, and the [`Spelling`] each database gives them.
//!
//! One protocol, three spellings: each database's folder (`sqlite/`, `mysql/`,
//! `postgres/`) implements [`Spelling`] in its `dialect.rs`, and [`Dialect`]
//! builds every statement from those pieces. Time is integer microseconds
//! since the Unix epoch in UTC, read from the database server inside the
//! statement that uses it (expiry is judged by the store's clock), so no time
//! zone, DST or client clock enters any decision.

/// Which server answers a `mysql://` URL; they spell binary NO PAD collations differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ServerKind {
    /// MariaDB.
    MariaDb,
    /// MySQL, or any server that is not MariaDB.
    Other,
}

/// Which SQL database a store talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    /// SQLite 3.42 or newer (bundled with sqlx).
    Sqlite,
    /// MySQL 8 or MariaDB 10.5 or newer (MariaDB's `INSERT ... RETURNING`
    /// is used where the server has it: `mysql/mariadb.rs`).
    MySql,
    /// PostgreSQL 12 or newer.
    Postgres,
}

/// The column types of one database's tables.
pub(super) struct ColumnTypes {
    /// An election, holder or reason: compared byte for byte.
    pub(super) key: String,
    /// Metadata.
    pub(super) text: String,
    /// A term, version or time in µs.
    pub(super) int: &'static str,
    /// What follows `CREATE TABLE (...)`.
    pub(super) table_options: &'static str,
}

/// How one database spells what the statements need. The pieces return SQL
/// with `?` placeholders and `{now}` for the server's clock;
/// [`Dialect::finish`] turns them into the text sent.
pub(super) trait Spelling: Sync {
    /// The database kind as [`SqlStore::backend`](super::SqlStore::backend) names it.
    fn backend(&self) -> &'static str;

    /// The kind of server, for messages.
    fn server_name(&self) -> &'static str;

    /// The server clock as integer microseconds since the epoch, UTC,
    /// constant within one statement.
    fn now_expr(&self) -> &'static str;

    /// `now` truncated to whole seconds, for the `whole-seconds` chaos bug.
    fn whole_seconds(&self, now: &str) -> String {
        format!("(({now}) / 1000000 * 1000000)")
    }

    /// Whether placeholders are numbered (`$1, $2, ...`) instead of `?`.
    fn numbered_placeholders(&self) -> bool {
        false
    }

    /// `UPDATE table SET set WHERE filter`, returning `returning` where the
    /// database can ([`has_update_returning`](Self::has_update_returning)).
    fn update(&self, table: &str, set: &str, filter: &str, returning: Option<&str>) -> String {
        let ret = returning.map_or(String::new(), |r| format!(" RETURNING {r}"));
        format!("UPDATE {table} SET {set} WHERE {filter}{ret}")
    }

    /// Whether `UPDATE ... RETURNING` exists.
    fn has_update_returning(&self) -> bool {
        true
    }

    /// An update of lease rows that also tells listeners of each changed row
    /// on `channel`, in the same transaction, answering one row per changed
    /// row; `None` where the database has no notifications.
    fn update_announced(
        &self,
        _table: &str,
        _set: &str,
        _filter: &str,
        _channel: &str,
    ) -> Option<String> {
        None
    }

    /// `SELECT columns FROM table WHERE filter suffix`, with `{now}` available.
    fn select(&self, table: &str, columns: &str, filter: &str, suffix: &str) -> String {
        format!("SELECT {columns} FROM {table} WHERE {filter}{suffix}")
    }

    /// `DELETE FROM table WHERE filter`, with `{now}` available.
    fn delete(&self, table: &str, filter: &str) -> String {
        format!("DELETE FROM {table} WHERE {filter}")
    }

    /// What follows an `INSERT` so that a row whose key exists is left as it
    /// is, without an error; `column` is any column of the key.
    fn on_duplicate_keep(&self, _column: &str) -> String {
        "ON CONFLICT DO NOTHING".to_string()
    }

    /// Registers or heartbeats `n` members in one statement (7 parameters
    /// each: namespace, election, holder, identity, metadata, priority, ttl
    /// µs); a member already registered keeps its `joined_us`.
    fn upsert_members(&self, table: &str, n: usize) -> String;

    /// The first write of a run record (5 parameters: namespace, election,
    /// name, value, keep µs), as version 1, returning `columns` where the
    /// database decides it in one statement (see `runs.rs`).
    fn insert_run(&self, table: &str, columns: &str) -> String;

    /// One member's heartbeat (7 parameters, as
    /// [`upsert_members`](Self::upsert_members)) and a read of its election's
    /// lease (2 parameters: namespace, election) as one statement answering
    /// `columns`, where the database has one; an idle follower's one request
    /// per lease lifetime.
    fn heartbeat_and_read(&self, _leases: &str, _members: &str, _columns: &str) -> Option<String> {
        None
    }

    /// The same as one statement answering one packed column, for a database
    /// that can only return the inserted row's expressions (MariaDB 10.5 or
    /// newer, see `mysql/mariadb.rs`).
    fn packed_heartbeat_and_read(
        &self,
        _leases: &str,
        _members: &str,
        _fields: &[&str],
    ) -> Option<String> {
        None
    }

    /// Starts a transaction that takes the write lock at once.
    fn begin_write(&self) -> &'static str {
        "BEGIN"
    }

    /// Row-lock suffix for a fencing read.
    fn for_update(&self) -> &'static str {
        " FOR UPDATE"
    }

    /// A condition of the acquiring `UPDATE` of `table` that takes the
    /// lease row's lock without waiting for it, failing the statement at
    /// once if another transaction holds it; `None` where the database
    /// bounds the wait otherwise ([`bounded_lock_wait`](Self::bounded_lock_wait))
    /// or has one writer at a time (SQLite). An acquisition must not queue
    /// behind a lock a frozen leader's fenced transaction holds: its
    /// client gives up while the statement still waits, and the statement
    /// would later take a term nobody hears of.
    fn lock_row_nowait(&self, _table: &str) -> Option<String> {
        None
    }

    /// `update` (an `UPDATE` statement) with its lock waits bounded, for
    /// the servers of this dialect that are not MariaDB and for MariaDB;
    /// `None` where [`lock_row_nowait`](Self::lock_row_nowait) does it.
    fn bounded_lock_wait(&self, _update: &str) -> Option<(String, String)> {
        None
    }

    /// The acquiring `UPDATE` (as [`update`](Self::update) builds it,
    /// `returning` the record) writing the start of the term it hands
    /// out, and the end of the expired term before it, into `history` in
    /// the same statement, where the database can: a term is then taken
    /// only with its history row. `None`: the history follows in
    /// statements of its own (`after.rs`).
    fn update_recording_start(
        &self,
        _table: &str,
        _set: &str,
        _filter: &str,
        _returning: &str,
        _history: &str,
    ) -> Option<String> {
        None
    }

    /// Bounds the open transaction on the server side to `ms`
    /// milliseconds (the lease time left, by the server's clock), so that
    /// the server ends it even if its client never returns (frozen by a
    /// debugger, a VM pause, SIGSTOP); `None` where the database cannot.
    fn bound_transaction(&self, _ms: u64) -> Option<String> {
        None
    }

    /// Undoes [`bound_transaction`](Self::bound_transaction) after the
    /// transaction ends, where its settings outlive it.
    fn unbound_transaction(&self) -> Option<&'static str> {
        None
    }

    /// The column types of the tables.
    fn column_types(&self, server: ServerKind) -> ColumnTypes;

    /// A text column of up to `chars` characters that compares byte for byte.
    fn long_text(&self, _chars: u32, _server: ServerKind) -> String {
        "TEXT".to_string()
    }
}

/// The columns a member's registration inserts, in the order
/// [`Spelling::upsert_members`] binds them (the times come from `{now}`).
pub(super) const MEMBER_INSERT_COLUMNS: &str =
    "(namespace, election, holder, identity, metadata, priority, joined_us, heartbeat_us, expires_us)";

/// The `ON CONFLICT` clause of a member's registration where the database has
/// `excluded` (SQLite, PostgreSQL): a member already registered keeps its
/// `joined_us`.
pub(super) const MEMBER_ON_CONFLICT: &str =
    "ON CONFLICT (namespace, election, holder) DO UPDATE SET \
     metadata = excluded.metadata, priority = excluded.priority, \
     heartbeat_us = excluded.heartbeat_us, expires_us = excluded.expires_us";

/// The columns of a run record's first write, in the order
/// [`Spelling::insert_run`] binds them.
pub(super) const RUN_INSERT_COLUMNS: &str =
    "(namespace, election, name, value, version, updated_us, expires_us)";

/// The `ON CONFLICT` clause of a run record's first write where the database
/// has `excluded` (SQLite, PostgreSQL): the update applies only over an
/// expired record, judged by the statement's own now.
pub(super) fn run_on_conflict(table: &str) -> String {
    format!(
        "ON CONFLICT (namespace, election, name) DO UPDATE SET \
         value = excluded.value, version = 1, updated_us = excluded.updated_us, \
         expires_us = excluded.expires_us WHERE {table}.expires_us <= excluded.updated_us"
    )
}

impl Dialect {
    /// This database's spelling, from its folder.
    fn spelling(self) -> &'static dyn Spelling {
        match self {
            Dialect::Sqlite => &super::sqlite::Sqlite,
            Dialect::MySql => &super::mysql::MySql,
            Dialect::Postgres => &super::postgres::Postgres,
        }
    }

    /// The database kind as [`SqlStore::backend`](super::SqlStore::backend) names it.
    pub(super) fn backend(self) -> &'static str {
        self.spelling().backend()
    }

    /// The kind of server this dialect talks to, for messages.
    pub(super) fn server_name(self) -> &'static str {
        self.spelling().server_name()
    }

    /// The server clock as integer microseconds since the epoch, UTC.
    pub(super) fn now_expr(self) -> &'static str {
        self.spelling().now_expr()
    }

    /// Whether `UPDATE ... RETURNING` exists (MySQL and MariaDB lack it).
    pub(super) fn has_update_returning(self) -> bool {
        self.spelling().has_update_returning()
    }

    /// Starts a transaction that takes the write lock at once.
    pub(super) fn begin_write(self) -> &'static str {
        self.spelling().begin_write()
    }

    /// Row-lock suffix for a fencing read.
    pub(super) fn for_update(self) -> &'static str {
        self.spelling().for_update()
    }

    /// See [`Spelling::lock_row_nowait`].
    pub(super) fn lock_row_nowait(self, table: &str) -> Option<String> {
        self.spelling().lock_row_nowait(table)
    }

    /// See [`Spelling::update_recording_start`].
    pub(super) fn update_recording_start(
        self,
        table: &str,
        set: &str,
        filter: &str,
        returning: &str,
        history: &str,
    ) -> Option<String> {
        self.spelling()
            .update_recording_start(table, set, filter, returning, history)
            .map(|sql| self.finish(sql))
    }

    /// See [`Spelling::bounded_lock_wait`].
    pub(super) fn bounded_lock_wait(self, update: &str) -> Option<(String, String)> {
        self.spelling().bounded_lock_wait(update)
    }

    /// See [`Spelling::bound_transaction`].
    pub(super) fn bound_transaction(self, ms: u64) -> Option<String> {
        self.spelling().bound_transaction(ms)
    }

    /// See [`Spelling::unbound_transaction`].
    pub(super) fn unbound_transaction(self) -> Option<&'static str> {
        self.spelling().unbound_transaction()
    }

    /// Rewrites `?` placeholders as `$1, $2, ...` where the database numbers
    /// them. The statements contain no `?` inside literals, so a plain scan
    /// is exact.
    fn placeholders(self, sql: String) -> String {
        if !self.spelling().numbered_placeholders() {
            return sql;
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for ch in sql.chars() {
            if ch == '?' {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            } else {
                out.push(ch);
            }
        }
        out
    }

    /// The text sent: `{now}` spelt as the server's clock, placeholders as
    /// the database numbers them.
    pub(super) fn finish(self, sql: String) -> String {
        use crate::bugs::{active, Bug};
        // The whole-seconds bug's one SQL hook: every statement reads the clock
        // through this spelling of `{now}`.
        let now = if active(Bug::WholeSeconds) {
            self.spelling().whole_seconds(self.now_expr())
        } else {
            self.now_expr().to_string()
        };
        self.placeholders(sql.replace("{now}", &now))
    }

    /// Plain statement with `?` placeholders adapted.
    pub(super) fn plain(self, sql: String) -> String {
        self.finish(sql)
    }

    /// `UPDATE table SET set WHERE where [RETURNING returning]`.
    pub(super) fn update(
        self,
        table: &str,
        set: &str,
        filter: &str,
        returning: Option<&str>,
    ) -> String {
        self.finish(self.spelling().update(table, set, filter, returning))
    }

    /// [`update`](Self::update) of lease rows that followers and observers
    /// must hear of at once. On PostgreSQL the statement itself sends the
    /// notification (`pg_notify` for each changed row, in the same
    /// transaction): listeners hear of the change at its commit, one round
    /// trip sooner than from a second statement, and never of a change that
    /// did not commit. Its answer is one row per changed row, so its
    /// rows-affected count is the update's. Elsewhere it is the plain update.
    pub(super) fn update_announced(
        self,
        table: &str,
        set: &str,
        filter: &str,
        channel: &str,
    ) -> String {
        match self
            .spelling()
            .update_announced(table, set, filter, channel)
        {
            Some(sql) => self.finish(sql),
            None => self.update(table, set, filter, None),
        }
    }

    /// `SELECT columns FROM table WHERE filter [suffix]`, with `{now}` available.
    pub(super) fn select(self, table: &str, columns: &str, filter: &str, suffix: &str) -> String {
        self.finish(self.spelling().select(table, columns, filter, suffix))
    }

    /// `DELETE FROM table WHERE filter`, with `{now}` available.
    pub(super) fn delete(self, table: &str, filter: &str) -> String {
        self.finish(self.spelling().delete(table, filter))
    }

    /// Inserts a vacant row for an election unless it exists. Not a decision: the
    /// conditional UPDATE that follows decides who acquires.
    pub(super) fn insert_vacant(self, table: &str) -> String {
        let keep = self.spelling().on_duplicate_keep("namespace");
        self.finish(format!(
            "INSERT INTO {table} (namespace, election) VALUES (?, ?) {keep}"
        ))
    }

    /// Inserts the schema-version row unless present.
    pub(super) fn insert_schema_version(self, table: &str, version: i64) -> String {
        let keep = self.spelling().on_duplicate_keep("component");
        format!("INSERT INTO {table} (component, version) VALUES ('tenure', {version}) {keep}")
    }

    /// `INSERT ... ` of a history row, ignoring a duplicate term.
    pub(super) fn insert_history(self, table: &str) -> String {
        let cols = "(namespace, election, term, holder, start_reason, start_us)";
        let keep = self.spelling().on_duplicate_keep("term");
        self.finish(format!(
            "INSERT INTO {table} {cols} VALUES (?, ?, ?, ?, ?, ?) {keep}"
        ))
    }

    /// See [`Spelling::upsert_members`].
    pub(super) fn upsert_members(self, table: &str, n: usize) -> String {
        self.finish(self.spelling().upsert_members(table, n))
    }

    /// See [`Spelling::insert_run`].
    pub(super) fn insert_run(self, table: &str, columns: &str) -> String {
        self.finish(self.spelling().insert_run(table, columns))
    }

    /// See [`Spelling::heartbeat_and_read`].
    pub(super) fn heartbeat_and_read(
        self,
        leases: &str,
        members: &str,
        columns: &str,
    ) -> Option<String> {
        let sql = self
            .spelling()
            .heartbeat_and_read(leases, members, columns)?;
        Some(self.finish(sql))
    }

    /// See [`Spelling::packed_heartbeat_and_read`].
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(super) fn packed_heartbeat_and_read(
        self,
        leases: &str,
        members: &str,
        fields: &[&str],
    ) -> Option<String> {
        let sql = self
            .spelling()
            .packed_heartbeat_and_read(leases, members, fields)?;
        Some(self.finish(sql))
    }

    /// The DDL of schema version 1: the schema-version table and the lease table.
    pub(super) fn schema_v1(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let ColumnTypes {
            key,
            text,
            int,
            table_options: opts,
        } = self.spelling().column_types(server);
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {prefix}schema (\n  \
                 component {key} NOT NULL PRIMARY KEY,\n  \
                 version {int} NOT NULL\n){opts}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {prefix}leases (\n  \
                 namespace {key} NOT NULL,\n  \
                 election {key} NOT NULL,\n  \
                 holder {key} NOT NULL DEFAULT '',\n  \
                 metadata {text} NOT NULL DEFAULT '',\n  \
                 term {int} NOT NULL DEFAULT 0,\n  \
                 version {int} NOT NULL DEFAULT 0,\n  \
                 ttl_us {int} NOT NULL DEFAULT 0,\n  \
                 acquired_us {int} NOT NULL DEFAULT 0,\n  \
                 renewed_us {int} NOT NULL DEFAULT 0,\n  \
                 expires_us {int} NOT NULL DEFAULT 0,\n  \
                 PRIMARY KEY (namespace, election)\n){opts}"
            ),
        ]
    }

    /// Schema version 2: members, history, and hand-over columns on the lease.
    pub(super) fn schema_v2(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let ColumnTypes {
            key,
            text,
            int,
            table_options: opts,
        } = self.spelling().column_types(server);
        let add = |col: &str, ty: &str, default: &str| {
            format!("ALTER TABLE {prefix}leases ADD COLUMN {col} {ty} NOT NULL DEFAULT {default}")
        };
        vec![
            // Who may take the lease during a hand-over window ('' nobody
            // special, '*' anyone after a resignation, else an identity).
            add("handover_to", &key, "''"),
            add("handover_until_us", int, "0"),
            add("handover_reason", &key, "''"),
            // What the previous tenure looked like, captured by the acquiring
            // UPDATE itself, and why the current one began.
            add("prev_holder", &key, "''"),
            add("prev_expires_us", int, "0"),
            add("start_reason", &key, "''"),
            format!(
                "CREATE TABLE IF NOT EXISTS {prefix}members (\n  \
                 namespace {key} NOT NULL,\n  \
                 election {key} NOT NULL,\n  \
                 holder {key} NOT NULL,\n  \
                 identity {key} NOT NULL,\n  \
                 metadata {text} NOT NULL DEFAULT '',\n  \
                 priority {int} NOT NULL DEFAULT 0,\n  \
                 joined_us {int} NOT NULL,\n  \
                 heartbeat_us {int} NOT NULL,\n  \
                 expires_us {int} NOT NULL,\n  \
                 PRIMARY KEY (namespace, election, holder)\n){opts}"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {prefix}history (\n  \
                 namespace {key} NOT NULL,\n  \
                 election {key} NOT NULL,\n  \
                 term {int} NOT NULL,\n  \
                 holder {key} NOT NULL,\n  \
                 start_reason {key} NOT NULL DEFAULT '',\n  \
                 start_us {int} NOT NULL,\n  \
                 end_reason {key} NOT NULL DEFAULT '',\n  \
                 end_us {int} NOT NULL DEFAULT 0,\n  \
                 PRIMARY KEY (namespace, election, term)\n){opts}"
            ),
        ]
    }

    /// Schema version 3: run records (`runs.rs`), one row per election and
    /// name, live until `expires_us` by the server's clock.
    pub(super) fn schema_v3(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let spelling = self.spelling();
        let ColumnTypes {
            key,
            int,
            table_options: opts,
            ..
        } = spelling.column_types(server);
        // Holds `MAX_RUN_VALUE_BYTES` (4096) bytes of any UTF-8.
        let value = spelling.long_text(4096, server);
        vec![format!(
            "CREATE TABLE IF NOT EXISTS {prefix}runs (\n  \
             namespace {key} NOT NULL,\n  \
             election {key} NOT NULL,\n  \
             name {key} NOT NULL,\n  \
             value {value} NOT NULL,\n  \
             version {int} NOT NULL,\n  \
             updated_us {int} NOT NULL,\n  \
             expires_us {int} NOT NULL,\n  \
             PRIMARY KEY (namespace, election, name)\n){opts}"
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered_and_now_comes_from_cte() {
        let sql = Dialect::Postgres.update("t", "a = ?, b = {now}", "c = ?", Some("a"));
        assert!(sql.starts_with("WITH c AS"), "{sql}");
        assert!(
            sql.contains("a = $1, b = c.now_us FROM c WHERE c = $2 RETURNING a"),
            "{sql}"
        );
    }

    #[test]
    fn mysql_has_no_returning() {
        let sql = Dialect::MySql.update("t", "a = ?", "b = ?", Some("a"));
        assert_eq!(sql, "UPDATE t SET a = ? WHERE b = ?");
    }
}
