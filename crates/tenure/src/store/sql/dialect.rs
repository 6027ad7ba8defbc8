//! The three SQL dialects: how each says "now", upserts, and returns rows.
//!
//! One protocol, three spellings. Time is integer microseconds since the Unix epoch
//! in UTC, read from the database server inside the statement that uses it
//! (expiry is judged by the store's clock), so no time zone, DST or client clock enters any decision.

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
    /// is used where the server has it: `mariadb.rs`).
    MySql,
    /// PostgreSQL 12 or newer.
    Postgres,
}

impl Dialect {
    /// The database kind as [`SqlStore::backend`](super::SqlStore::backend) names it.
    pub(super) fn backend(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::MySql => "mysql",
            Dialect::Postgres => "postgres",
        }
    }

    /// The server clock as integer microseconds since the epoch, UTC.
    ///
    /// - SQLite: `unixepoch('subsec')` has millisecond resolution and is constant
    ///   within one statement.
    /// - MySQL/MariaDB: `UTC_TIMESTAMP(6)` is constant within one statement and, unlike
    ///   `NOW(6)`, does not depend on the session time zone (no DST ambiguity).
    /// - PostgreSQL: `clock_timestamp()` is the real time even inside a long
    ///   transaction; it is read once per statement through a CTE (see
    ///   [`Dialect::with_now`]) because it changes between calls.
    pub(super) fn now_expr(self) -> &'static str {
        match self {
            Dialect::Sqlite => "(CAST(ROUND(unixepoch('subsec') * 1000.0) AS INTEGER) * 1000)",
            Dialect::MySql => "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
            Dialect::Postgres => "c.now_us",
        }
    }

    /// The CTE that reads the clock once, for PostgreSQL.
    pub(super) fn with_now(self) -> &'static str {
        match self {
            Dialect::Postgres => {
                "WITH c AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now_us) "
            }
            _ => "",
        }
    }

    /// Whether `UPDATE ... RETURNING` exists (MySQL and MariaDB lack it).
    pub(super) fn has_update_returning(self) -> bool {
        !matches!(self, Dialect::MySql)
    }

    /// Rewrites `?` placeholders as `$1, $2, ...` for PostgreSQL. Our statements
    /// contain no `?` inside literals, so a plain scan is exact.
    fn placeholders(self, sql: String) -> String {
        if self != Dialect::Postgres {
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

    pub(super) fn finish(self, sql: String) -> String {
        use crate::bugs::{active, Bug};
        // The whole-seconds bug's one SQL hook: every statement reads the clock
        // through this spelling of `{now}`.
        let now = if active(Bug::WholeSeconds) {
            match self {
                Dialect::MySql => format!("(({}) DIV 1000000 * 1000000)", self.now_expr()),
                _ => format!("(({}) / 1000000 * 1000000)", self.now_expr()),
            }
        } else {
            self.now_expr().to_string()
        };
        self.placeholders(sql.replace("{now}", &now))
    }

    /// `UPDATE table SET set WHERE where [RETURNING returning]`.
    pub(super) fn update(
        self,
        table: &str,
        set: &str,
        filter: &str,
        returning: Option<&str>,
    ) -> String {
        let (from, ret) = match (self, returning) {
            (Dialect::Postgres, Some(r)) => (" FROM c", format!(" RETURNING {r}")),
            (Dialect::Postgres, None) => (" FROM c", String::new()),
            (Dialect::Sqlite, Some(r)) => ("", format!(" RETURNING {r}")),
            _ => ("", String::new()),
        };
        self.finish(format!(
            "{}UPDATE {table} SET {set}{from} WHERE {filter}{ret}",
            self.with_now()
        ))
    }

    /// [`update`](Self::update) of lease rows that followers and observers
    /// must hear of at once. On PostgreSQL the statement itself sends the
    /// notification (`pg_notify` on `channel` for each changed row, in the
    /// same transaction): listeners hear of the change at its commit, one
    /// round trip sooner than from a second statement, and never of a change
    /// that did not commit. Its answer is one row per changed row, so its
    /// rows-affected count is the update's. Elsewhere it is the plain update.
    pub(super) fn update_announced(
        self,
        table: &str,
        set: &str,
        filter: &str,
        channel: &str,
    ) -> String {
        if self != Dialect::Postgres {
            return self.update(table, set, filter, None);
        }
        // `::text`: pg_notify returns void, which the `Any` driver cannot decode.
        self.finish(format!(
            "{}, done AS (UPDATE {table} SET {set} FROM c WHERE {filter} RETURNING namespace, election) \
             SELECT pg_notify('{channel}', namespace || chr(31) || election)::text FROM done",
            self.with_now().trim_end()
        ))
    }

    /// `SELECT columns FROM table WHERE filter [suffix]`, with `{now}` available.
    pub(super) fn select(self, table: &str, columns: &str, filter: &str, suffix: &str) -> String {
        let from = match self {
            Dialect::Postgres => format!("{table}, c"),
            _ => table.to_string(),
        };
        self.finish(format!(
            "{}SELECT {columns} FROM {from} WHERE {filter}{suffix}",
            self.with_now()
        ))
    }

    /// Inserts a vacant row for an election unless it exists. Not a decision: the
    /// conditional UPDATE that follows decides who acquires.
    pub(super) fn insert_vacant(self, table: &str) -> String {
        let sql = match self {
            Dialect::MySql => format!(
                "INSERT INTO {table} (namespace, election) VALUES (?, ?) ON DUPLICATE KEY UPDATE namespace = namespace"
            ),
            _ => format!(
                "INSERT INTO {table} (namespace, election) VALUES (?, ?) ON CONFLICT DO NOTHING"
            ),
        };
        self.finish(sql)
    }

    /// Inserts the schema-version row unless present.
    pub(super) fn insert_schema_version(self, table: &str, version: i64) -> String {
        match self {
            Dialect::MySql => format!(
                "INSERT INTO {table} (component, version) VALUES ('tenure', {version}) ON DUPLICATE KEY UPDATE component = component"
            ),
            _ => format!(
                "INSERT INTO {table} (component, version) VALUES ('tenure', {version}) ON CONFLICT DO NOTHING"
            ),
        }
    }

    /// Plain statement with `?` placeholders adapted.
    pub(super) fn plain(self, sql: String) -> String {
        self.finish(sql)
    }

    /// The kind of server this dialect talks to, for messages.
    pub(super) fn server_name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "SQLite",
            Dialect::MySql => "MySQL/MariaDB",
            Dialect::Postgres => "PostgreSQL",
        }
    }

    /// Starts a transaction that takes the write lock at once. SQLite's default
    /// deferred BEGIN would upgrade a read lock later and can fail with
    /// SQLITE_BUSY without waiting; IMMEDIATE waits for the busy timeout instead.
    pub(super) fn begin_write(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::MySql => "START TRANSACTION",
            Dialect::Postgres => "BEGIN",
        }
    }

    /// Row-lock suffix for a fencing read.
    pub(super) fn for_update(self) -> &'static str {
        match self {
            // BEGIN IMMEDIATE already holds the database's write lock.
            Dialect::Sqlite => "",
            _ => " FOR UPDATE",
        }
    }

    /// Column types, per dialect: (text key, free text, 64-bit integer, table options).
    fn types(self, server: ServerKind) -> (String, String, &'static str, &'static str) {
        match self {
            Dialect::Sqlite => ("TEXT".into(), "TEXT".into(), "INTEGER", ""),
            // A binary NO PAD collation: names compare byte for byte, so "Cron",
            // "cron" and "cron " are three elections, as on the other stores.
            // The PAD SPACE `utf8mb4_bin` would merge "cron" and "cron ".
            Dialect::MySql => (
                Self::mysql_varchar(255, server),
                Self::mysql_varchar(1024, server),
                "BIGINT",
                " ENGINE=InnoDB",
            ),
            Dialect::Postgres => ("TEXT".into(), "TEXT".into(), "BIGINT", ""),
        }
    }

    /// A MySQL/MariaDB text column of `chars` characters that compares byte
    /// for byte (see [`Self::types`]).
    fn mysql_varchar(chars: u32, server: ServerKind) -> String {
        let collation = match server {
            ServerKind::MariaDb => "utf8mb4_nopad_bin",
            ServerKind::Other => "utf8mb4_0900_bin",
        };
        format!("VARCHAR({chars}) CHARACTER SET utf8mb4 COLLATE {collation}")
    }

    /// The DDL of schema version 1: the schema-version table and the lease table.
    pub(super) fn schema_v1(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let (key, text, int, opts) = self.types(server);
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
}

impl Dialect {
    /// Schema version 2: members, history, and hand-over columns on the lease.
    pub(super) fn schema_v2(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let (key, text, int, opts) = self.types(server);
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

    /// Schema version 3: run records (`store/runs.rs`), one row per
    /// election and name, live until `expires_us` by the server's clock.
    pub(super) fn schema_v3(self, prefix: &str, server: ServerKind) -> Vec<String> {
        let (key, _, int, opts) = self.types(server);
        // Holds `MAX_RUN_VALUE_BYTES` (4096) bytes of any UTF-8.
        let value = match self {
            Dialect::MySql => Self::mysql_varchar(4096, server),
            _ => "TEXT".into(),
        };
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

    /// The first write of a run record (5 parameters: namespace, election,
    /// name, value, keep µs), as version 1, returning `columns`.
    ///
    /// PostgreSQL and SQLite: one upsert whose update applies only over an
    /// expired record (a live one keeps its row, and nothing is returned),
    /// judged by the statement's own now. MySQL/MariaDB: a plain `INSERT`,
    /// decided by the primary key (a duplicate-key error means someone else
    /// wrote first); the caller first deletes an expired record of the name,
    /// which decides nothing (an expired record reads as absent anyway).
    pub(super) fn insert_run(self, table: &str, columns: &str) -> String {
        let cols = "(namespace, election, name, value, version, updated_us, expires_us)";
        let replace_expired = format!(
            "ON CONFLICT (namespace, election, name) DO UPDATE SET \
             value = excluded.value, version = 1, updated_us = excluded.updated_us, \
             expires_us = excluded.expires_us WHERE {table}.expires_us <= excluded.updated_us"
        );
        let sql = match self {
            Dialect::Postgres => format!(
                "{}INSERT INTO {table} {cols} SELECT ?, ?, ?, ?, 1, c.now_us, c.now_us + ? FROM c \
                 {replace_expired} RETURNING {columns}",
                self.with_now()
            ),
            Dialect::Sqlite => format!(
                "INSERT INTO {table} {cols} VALUES (?, ?, ?, ?, 1, {{now}}, {{now}} + ?) \
                 {replace_expired} RETURNING {columns}"
            ),
            Dialect::MySql => {
                format!("INSERT INTO {table} {cols} VALUES (?, ?, ?, ?, 1, {{now}}, {{now}} + ?)")
            }
        };
        self.finish(sql)
    }

    /// Registers or heartbeats `n` members in one statement (7 parameters
    /// each: namespace, election, holder, identity, metadata, priority, ttl
    /// µs); a member already registered keeps its `joined_us`.
    pub(super) fn upsert_members(self, table: &str, n: usize) -> String {
        let cols = "(namespace, election, holder, identity, metadata, priority, joined_us, heartbeat_us, expires_us)";
        let vals = vec!["(?, ?, ?, ?, ?, ?, {now}, {now}, {now} + ?)"; n].join(", ");
        let sql = match self {
            Dialect::MySql => format!(
                "INSERT INTO {table} {cols} VALUES {vals} ON DUPLICATE KEY UPDATE \
                 metadata = VALUES(metadata), priority = VALUES(priority), \
                 heartbeat_us = VALUES(heartbeat_us), expires_us = VALUES(expires_us)"
            ),
            Dialect::Postgres => format!(
                "{}INSERT INTO {table} {cols} {} \
                 ON CONFLICT (namespace, election, holder) DO UPDATE SET \
                 metadata = excluded.metadata, priority = excluded.priority, \
                 heartbeat_us = excluded.heartbeat_us, expires_us = excluded.expires_us",
                self.with_now(),
                vec!["SELECT ?, ?, ?, ?, ?, ?, c.now_us, c.now_us, c.now_us + ? FROM c"; n]
                    .join(" UNION ALL ")
            ),
            Dialect::Sqlite => format!(
                "INSERT INTO {table} {cols} VALUES {vals} \
                 ON CONFLICT (namespace, election, holder) DO UPDATE SET \
                 metadata = excluded.metadata, priority = excluded.priority, \
                 heartbeat_us = excluded.heartbeat_us, expires_us = excluded.expires_us"
            ),
        };
        self.finish(sql)
    }

    /// `INSERT ... ` of a history row, ignoring a duplicate term.
    pub(super) fn insert_history(self, table: &str) -> String {
        let cols = "(namespace, election, term, holder, start_reason, start_us)";
        let sql = match self {
            Dialect::MySql => format!(
                "INSERT INTO {table} {cols} VALUES (?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE term = term"
            ),
            _ => format!("INSERT INTO {table} {cols} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
        };
        self.finish(sql)
    }

    /// `DELETE FROM table WHERE filter`, with `{now}` available.
    pub(super) fn delete(self, table: &str, filter: &str) -> String {
        let sql = match self {
            Dialect::Postgres => format!(
                "{}DELETE FROM {table} USING c WHERE {filter}",
                self.with_now()
            ),
            _ => format!("DELETE FROM {table} WHERE {filter}"),
        };
        self.finish(sql)
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
