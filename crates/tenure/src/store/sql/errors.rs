//! Turns sqlx errors into tenure errors that say what to do.

use crate::error::Error;
use crate::store::{CorruptLease, ElectionKey};

/// Classifies a database error by its code, number or message.
fn db_code(e: &sqlx::Error) -> Option<(String, Option<u16>, String)> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    #[allow(unused_mut)]
    let mut number = None;
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        number = Some(my.number());
    }
    Some((
        db.code().map(|c| c.into_owned()).unwrap_or_default(),
        number,
        db.message().to_string(),
    ))
}

/// The MySQL/MariaDB error number of a database error, if it is one.
#[cfg(feature = "mysql")]
pub(crate) fn mysql_number(e: &sqlx::Error) -> Option<u16> {
    db_code(e).and_then(|(_, number, _)| number)
}

/// Whether `e` says a row lock was not had: PostgreSQL's `NOWAIT`
/// (`55P03`), MySQL's and MariaDB's lock wait timeout (1205) or `NOWAIT`
/// (3572).
pub(crate) fn is_lock_not_had(e: &sqlx::Error) -> bool {
    match db_code(e) {
        Some((code, number, _)) => code == "55P03" || matches!(number, Some(1205 | 3572)),
        None => false,
    }
}

pub(crate) fn is_missing_table(e: &sqlx::Error) -> bool {
    match db_code(e) {
        Some((code, number, msg)) => {
            code == "42P01" || number == Some(1146) || msg.contains("no such table")
        }
        None => false,
    }
}

pub(crate) fn is_duplicate_column(e: &sqlx::Error) -> bool {
    match db_code(e) {
        Some((code, number, msg)) => {
            code == "42701" || number == Some(1060) || msg.contains("duplicate column")
        }
        None => false,
    }
}

/// A write that would duplicate a primary key: someone else inserted the
/// row first (MySQL/MariaDB's run record inserts are decided so).
#[cfg(feature = "mysql")]
pub(crate) fn is_duplicate_key(e: &sqlx::Error) -> bool {
    matches!(db_code(e), Some((code, number, msg))
        if code == "23505" || number == Some(1062) || msg.contains("UNIQUE constraint failed"))
}

/// PostgreSQL: another process created the same table or index at the same
/// moment. `CREATE ... IF NOT EXISTS` is not atomic there: the loser of the
/// race gets a unique violation on the catalog (`pg_type`, `pg_class`) or a
/// duplicate table or object.
pub(crate) fn is_concurrent_create(e: &sqlx::Error) -> bool {
    match db_code(e) {
        Some((code, _, msg)) => {
            matches!(code.as_str(), "42P07" | "42710")
                || (code == "23505"
                    && (msg.contains("pg_type_typname_nsp_index")
                        || msg.contains("pg_class_relname_nsp_index")))
        }
        None => false,
    }
}

fn is_permission(code: &str, number: Option<u16>, msg: &str) -> bool {
    matches!(code, "42501" | "28P01" | "28000")
        || matches!(number, Some(1044 | 1045 | 1142 | 1227 | 1370))
        || msg.contains("readonly database")
        || msg.contains("permission denied")
}

fn is_transient(code: &str, number: Option<u16>, msg: &str) -> bool {
    matches!(code, "40001" | "40P01" | "55P03" | "57P01" | "57P03")
        || matches!(number, Some(1205 | 1213 | 1053))
        || is_locked(msg)
}

/// SQLite: another connection (of this or another process) holds a lock
/// on the file for longer than the busy timeout.
fn is_locked(msg: &str) -> bool {
    msg.contains("database is locked") || msg.contains("database is busy")
}

/// The server refuses another connection: all its connection slots are
/// taken, or the user's or role's own limit is reached. PostgreSQL 53300
/// ("sorry, too many clients already", "too many connections for role");
/// MySQL/MariaDB 1040 ("Too many connections"), 1203 and 1226 (a user's
/// `MAX_USER_CONNECTIONS` or the server's `max_user_connections`).
fn is_too_many_connections(code: &str, number: Option<u16>) -> bool {
    code == "53300" || matches!(number, Some(1040 | 1203 | 1226))
}

/// The database file of a `sqlite:` store description, if it is one.
/// Whether the server refused a connection because it has none left
/// (see [`is_too_many_connections`]).
pub(crate) fn is_server_full(e: &sqlx::Error) -> bool {
    db_code(e).is_some_and(|(code, number, _)| is_too_many_connections(&code, number))
}

fn sqlite_file(store: &str) -> Option<&str> {
    let rest = store.strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    Some(path.split_once('?').map_or(path, |(p, _)| p))
}

/// SQLite: the file is locked by another process for longer than tenure
/// waits (`waited`, e.g. "5s"); `msg` is SQLite's own word for it, if any.
pub(crate) fn sqlite_locked(store: &str, waited: &str, msg: Option<&str>) -> Error {
    let file = sqlite_file(store).unwrap_or(store);
    let said = msg.map(|m| format!(" (SQLite: {m})")).unwrap_or_default();
    Error::Unavailable {
        source: None,
        store: store.to_string(),
        reason: format!(
            "the database file {file} is locked by another process{said}: it held the lock \
             for more than {waited} (a long transaction, or `BEGIN EXCLUSIVE`); end that \
             transaction or stop that process"
        ),
    }
}

/// SQLite: a write was refused because the file, or the directory where
/// SQLite keeps its journal beside it, is not writable by this user.
fn sqlite_not_writable(store: &str, msg: &str) -> Option<Error> {
    let file = sqlite_file(store)?;
    if store.contains("mode=ro") {
        // The URL asks for a read-only connection: not a matter of permissions.
        return None;
    }
    Some(Error::PermissionDenied {
        source: None,
        store: store.to_string(),
        reason: format!(
            "cannot write the database file {file} (SQLite: {msg}); the file and its \
             directory (where SQLite keeps its journal, {file}-wal and {file}-shm) must be \
             writable by this user, or point --store at a file this user may write"
        ),
    })
}

/// A column tenure's statements name is missing: the table is someone else's.
fn is_missing_column(code: &str, number: Option<u16>, msg: &str) -> bool {
    code == "42703" || number == Some(1054) || msg.contains("no such column")
}

/// SQLITE_NOTADB: the file exists but is not an SQLite database.
fn is_not_a_database(code: &str, msg: &str) -> bool {
    code == "26" || msg.contains("file is not a database")
}

fn is_unknown_database(code: &str, number: Option<u16>) -> bool {
    code == "3D000" || number == Some(1049)
}

#[cfg(feature = "tls")]
use super::tls::access_denied_hint;
#[cfg(not(feature = "tls"))]
fn access_denied_hint(_store: &str) -> String {
    String::new()
}

/// A table of tenure's name (`<prefix>table`, when known) lacks a column
/// tenure's statements name: it is someone else's.
fn foreign_table(store: String, prefix: &str, table: Option<&str>, msg: &str) -> Error {
    let which = table
        .map(|t| format!(" ({prefix}{t}: another program's, or made by hand)"))
        .unwrap_or_else(|| " (another program's, or made by hand)".into());
    Error::Schema {
        source: None,
        store,
        reason: format!(
            "{msg}: a {prefix}* table exists here but is not tenure's{which}; give tenure \
             tables of its own with --table-prefix (for example --table-prefix app_{prefix}), \
             or remove the foreign table"
        ),
    }
}

/// Maps the error of a statement that reads `<prefix>table`, naming that
/// table if it turns out to be someone else's.
pub(crate) fn map_table_err(store: &str, prefix: &str, table: &str, e: sqlx::Error) -> Error {
    match db_code(&e) {
        Some((code, number, msg)) if is_missing_column(&code, number, &msg) => {
            foreign_table(store.to_string(), prefix, Some(table), &msg).with_source(e)
        }
        _ => map_err(store, prefix, e),
    }
}

/// Maps a sqlx error for the store described by `store` (already redacted),
/// keeping it as the error's source.
pub(crate) fn map_err(store: &str, prefix: &str, e: sqlx::Error) -> Error {
    explain(store, prefix, &e).with_source(e)
}

/// The error that names the problem and its fix, for a sqlx error.
fn explain(store: &str, prefix: &str, e: &sqlx::Error) -> Error {
    if let sqlx::Error::Decode(inner) = e {
        if let Some(c) = inner.downcast_ref::<CorruptLease>() {
            return Error::Corrupt {
                election: c.key.to_string(),
                store: store.to_string(),
                reason: c.reason.clone(),
                repair: format!("run `{}`", repair_sql(prefix, &c.key)),
            };
        }
    }
    #[cfg(feature = "tls")]
    if let Some(tls) = super::tls::classify(store, e) {
        return tls;
    }
    let store = store.to_string();
    if let Some((code, number, msg)) = db_code(e) {
        if is_missing_table(e) {
            return Error::Schema { source: None,
                store,
                reason: format!(
                    "{msg}; create the tables with `tenure migrate --store URL{}` or apply the SQL printed by `tenure migrate --print-sql`",
                    prefix_hint(prefix)
                ),
            };
        }
        if is_missing_column(&code, number, &msg) {
            return foreign_table(store, prefix, None, &msg);
        }
        if is_not_a_database(&code, &msg) {
            return Error::InvalidUrl {
                url: store,
                reason: format!(
                    "the file is not an SQLite database (SQLite: {msg}); point the URL at \
                     tenure's database file, or at a new path to create one"
                ),
            };
        }
        if is_permission(&code, number, &msg) {
            if let Some(e) = sqlite_not_writable(&store, &msg) {
                return e;
            }
            if let Some(file) = sqlite_file(&store).filter(|_| store.contains("mode=ro")) {
                return Error::PermissionDenied {
                    source: None,
                    reason: format!(
                        "{msg}: the URL opens {file} read-only (mode=ro), and this command \
                         writes to it; remove mode=ro from the URL"
                    ),
                    store,
                };
            }
            let hint = access_denied_hint(&store);
            return Error::PermissionDenied { source: None,
                store,
                reason: format!(
                    "{msg}; check the user name and password in the URL and that the user may read and write the {prefix}* tables{hint}"
                ),
            };
        }
        if is_unknown_database(&code, number) {
            return Error::Schema {
                source: None,
                store,
                reason: format!("{msg}; create the database or fix its name in the URL"),
            };
        }
        if code == "14" && msg.contains("unable to open") {
            return Error::Unavailable {
                source: None,
                store,
                reason: format!(
                    "{msg}; check that the directory exists and this user may write to it"
                ),
            };
        }
        if is_too_many_connections(&code, number) {
            return Error::Unavailable {
                source: None,
                store,
                reason: format!(
                    "the server refuses another connection: {msg}; close idle connections \
                     or raise the limit (PostgreSQL: max_connections, or the role's CONNECTION \
                     LIMIT; MySQL/MariaDB: max_connections, or the user's MAX_USER_CONNECTIONS)"
                ),
            };
        }
        if is_locked(&msg) && sqlite_file(&store).is_some() {
            return sqlite_locked(&store, "5s", Some(&msg));
        }
        if is_transient(&code, number, &msg) {
            return Error::Unavailable {
                source: None,
                store,
                reason: msg,
            };
        }
        return Error::Protocol {
            source: None,
            store,
            reason: format!("database error {code}: {msg}"),
        };
    }
    match e {
        sqlx::Error::Configuration(c) => Error::InvalidUrl {
            url: store,
            reason: c.to_string(),
        },
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::RowNotFound => Error::Protocol {
            source: None,
            store,
            reason: format!("{e}; is the {prefix}leases table from another program?"),
        },
        other => Error::Unavailable {
            source: None,
            store,
            reason: unavailable_reason(other),
        },
    }
}

fn unavailable_reason(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::PoolTimedOut => {
            "no connection could be opened in time (is the server running and reachable?)".into()
        }
        sqlx::Error::Io(io) => format!("{io} (is the server running and reachable?)"),
        other => other.to_string(),
    }
}

/// Permission problem while creating tables: say who can fix it and how.
pub(crate) fn create_denied(store: &str, prefix: &str, e: &sqlx::Error) -> Error {
    let msg = match e {
        sqlx::Error::Database(db) => db.message().to_string(),
        other => other.to_string(),
    };
    if let Some(e) = sqlite_not_writable(store, &msg) {
        return e;
    }
    Error::PermissionDenied { source: None,
        store: store.to_string(),
        reason: format!(
            "cannot create the {prefix}leases and {prefix}schema tables: {msg}. Grant this user CREATE on the database, or have a DBA run the SQL printed by `tenure migrate --print-sql --store URL{}`",
            prefix_hint(prefix)
        ),
    }
}

pub(crate) fn is_permission_error(e: &sqlx::Error) -> bool {
    db_code(e)
        .map(|(code, number, msg)| is_permission(&code, number, &msg))
        .unwrap_or(false)
}

/// ` --table-prefix P` for a prefix other than the default, for commands in hints.
pub(crate) fn prefix_hint(prefix: &str) -> String {
    if prefix == crate::store::StoreOptions::DEFAULT_TABLE_PREFIX {
        String::new()
    } else {
        format!(" --table-prefix {prefix}")
    }
}

/// The statement that repairs a corrupt lease row of `key` (one that
/// [`check_lease`](crate::store::check_lease) refuses): the lease is made
/// vacant, and a term out of range is replaced by the highest sane term of
/// the election's history, so the next acquisition's term is above every
/// term handed out. Valid on SQLite, MySQL/MariaDB and PostgreSQL.
pub(super) fn repair_sql(prefix: &str, key: &ElectionKey) -> String {
    let max = crate::store::MAX_TERM;
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let (ns, election) = (quote(&key.namespace), quote(&key.election));
    let at = format!("namespace = {ns} AND election = {election}");
    let at_h = format!("h.namespace = {ns} AND h.election = {election}");
    format!(
        "UPDATE {prefix}leases SET holder = '', metadata = '', ttl_us = 0, expires_us = 0, \
         handover_to = '', handover_until_us = 0, handover_reason = '', \
         version = CASE WHEN version >= 0 AND version < {max} THEN version + 1 ELSE 1 END, \
         term = CASE WHEN term >= 0 AND term < {max} THEN term ELSE \
         (SELECT COALESCE(MAX(h.term), 0) FROM {prefix}history h WHERE {at_h} \
         AND h.term >= 0 AND h.term < {max}) END WHERE {at}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_file_of_a_store_description() {
        assert_eq!(sqlite_file("sqlite:///var/lib/t.db"), Some("/var/lib/t.db"));
        assert_eq!(sqlite_file("sqlite://t.db?mode=rwc"), Some("t.db"));
        assert_eq!(sqlite_file("sqlite:t.db"), Some("t.db"));
        assert_eq!(sqlite_file("postgres://db/app"), None);
    }

    #[test]
    fn sqlite_messages_name_the_file_and_the_fix() {
        let locked = sqlite_locked("sqlite:///d/t.db", "5s", Some("database is locked"));
        let text = locked.to_string();
        assert!(locked.is_retryable(), "{text}");
        assert!(
            text.contains("the database file /d/t.db is locked by another process")
                && text.contains("(SQLite: database is locked)")
                && text.contains("more than 5s"),
            "{text}"
        );
        let denied =
            sqlite_not_writable("sqlite:///d/t.db", "attempt to write a readonly database")
                .expect("a SQLite store");
        let text = denied.to_string();
        assert!(matches!(denied, Error::PermissionDenied { .. }), "{text}");
        assert!(
            text.contains("cannot write the database file /d/t.db")
                && text.contains("writable by this user")
                && !text.contains("password"),
            "{text}"
        );
        assert!(sqlite_not_writable("sqlite:///d/t.db?mode=ro", "x").is_none());
        assert!(sqlite_not_writable("mysql://u@h/db", "x").is_none());
    }

    #[test]
    fn refused_connections_are_told_apart() {
        for (code, number) in [
            ("53300", None),
            ("08004", Some(1040)),
            ("42000", Some(1203)),
            ("42000", Some(1226)),
        ] {
            assert!(is_too_many_connections(code, number), "{code} {number:?}");
        }
        assert!(!is_too_many_connections("42000", Some(1064)));
        assert!(!is_transient(
            "53300",
            None,
            "sorry, too many clients already"
        ));
    }
}
