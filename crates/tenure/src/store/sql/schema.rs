//! Schema versions and migration.
//!
//! A `<prefix>schema` table records the schema version. A newer tenure adds
//! migration steps here; an older tenure that finds a version it does not know
//! refuses to touch the tables rather than guess.

use sqlx::{Executor, Row};

use super::dialect::Dialect;
use super::dialect::ServerKind;
use super::errors::{
    create_denied, is_concurrent_create, is_duplicate_column, is_missing_table,
    is_permission_error, map_err, map_table_err, prefix_hint,
};
use crate::error::{Error, Result};

/// The schema version this build creates and understands.
pub const SCHEMA_VERSION: i64 = 3;

/// The statements that bring the schema from `version - 1` to `version`.
fn step(dialect: Dialect, prefix: &str, server: ServerKind, version: i64) -> Vec<String> {
    match version {
        1 => dialect.schema_v1(prefix, server),
        2 => dialect.schema_v2(prefix, server),
        3 => dialect.schema_v3(prefix, server),
        _ => Vec::new(),
    }
}

/// The full DDL for the current version, including the version row.
pub(crate) fn ddl(dialect: Dialect, prefix: &str, server: ServerKind) -> Vec<String> {
    let mut out: Vec<String> = (1..=SCHEMA_VERSION)
        .flat_map(|v| step(dialect, prefix, server, v))
        .collect();
    out.push(dialect.insert_schema_version(&format!("{prefix}schema"), SCHEMA_VERSION));
    out
}

/// Runs `stmts`; a column that already exists (a concurrent migration got
/// there first) is not an error, so every step can be re-run.
async fn apply(
    conn: &mut super::conn::Conn,
    stmts: &[String],
    prefix: &str,
    store: &str,
) -> Result<()> {
    for stmt in stmts {
        if let Err(e) = conn.execute(stmt.as_str()).await {
            // Each step is idempotent: a column or table someone else just
            // added is as good as ours.
            if is_duplicate_column(&e) || is_concurrent_create(&e) {
                continue;
            }
            if is_permission_error(&e) {
                return Err(create_denied(store, prefix, &e));
            }
            return Err(map_err(store, prefix, e));
        }
    }
    Ok(())
}

async fn read_version(
    conn: &mut super::conn::Conn,
    dialect: Dialect,
    prefix: &str,
) -> Result<Option<i64>, sqlx::Error> {
    let sql = dialect.plain(format!(
        "SELECT version FROM {prefix}schema WHERE component = 'tenure'"
    ));
    let row = conn.fetch_optional(sql.as_str()).await?;
    row.map(|r| r.try_get::<i64, _>(0)).transpose()
}

/// Checks the schema version and, if `create`, creates missing tables.
pub(crate) async fn prepare(
    conn: &mut super::conn::Conn,
    dialect: Dialect,
    prefix: &str,
    create: bool,
    store: &str,
) -> Result<()> {
    let found = match read_version(conn, dialect, prefix).await {
        Ok(v) => v,
        Err(e) if is_missing_table(&e) => None,
        Err(e) => return Err(map_err(store, prefix, e)),
    };
    match found {
        Some(v) if v == SCHEMA_VERSION => {
            check_tables(conn, dialect, prefix, store).await?;
            if create {
                check_writable(conn, dialect, prefix, store).await?;
            }
            Ok(())
        }
        Some(v) if v > SCHEMA_VERSION => Err(Error::Schema { source: None,
            store: store.to_string(),
            reason: format!(
                "the {prefix}* tables have schema version {v}, but this tenure understands only up to {SCHEMA_VERSION}; upgrade tenure, or use another table prefix"
            ),
        }),
        Some(v) if v >= 1 && create => {
            let server = server_kind(conn, dialect)
                .await
                .map_err(|e| map_err(store, prefix, e))?;
            for to in (v + 1)..=SCHEMA_VERSION {
                apply(conn, &step(dialect, prefix, server, to), prefix, store).await?;
            }
            let bump = dialect.plain(format!(
                "UPDATE {prefix}schema SET version = {SCHEMA_VERSION} WHERE component = 'tenure' AND version < {SCHEMA_VERSION}"
            ));
            conn.execute(bump.as_str())
                .await
                .map_err(|e| map_err(store, prefix, e))?;
            tracing::info!("migrated the {prefix}* tables from schema version {v} to {SCHEMA_VERSION}");
            check_tables(conn, dialect, prefix, store).await
        }
        Some(v) if v >= 1 => Err(Error::Schema { source: None,
            store: store.to_string(),
            reason: format!(
                "the {prefix}* tables have schema version {v}, older than this tenure's {SCHEMA_VERSION}, and creating is turned off; run `tenure migrate --store URL` or apply the SQL printed by `tenure migrate --print-sql`"
            ),
        }),
        Some(v) => Err(Error::Schema { source: None,
            store: store.to_string(),
            reason: format!("unknown schema version {v} in {prefix}schema"),
        }),
        None => {
            // A table of tenure's names without tenure's schema table may be
            // another program's: find out before creating anything beside it
            // (or, not creating, before saying the tables do not exist).
            // Of the leases table only the columns of every schema version
            // count: another tenure may be creating the tables right now,
            // between two migration steps. The other tables are created
            // whole, each by one statement.
            let mut probes = vec![(
                "leases",
                format!("SELECT namespace, election, holder, term FROM {prefix}leases WHERE 1 = 0"),
            )];
            probes.extend(table_probes(prefix).into_iter().skip(1));
            for (table, probe) in probes {
                if let Err(e) = conn.fetch_optional(dialect.plain(probe).as_str()).await
                {
                    if !is_missing_table(&e) {
                        return Err(map_table_err(store, prefix, table, e));
                    }
                }
            }
            if !create {
                return Err(Error::Schema { source: None,
                    store: store.to_string(),
                    reason: format!(
                        "the {prefix}leases table does not exist here, and this command creates no tables: check the table prefix (--table-prefix), or create the tables with `tenure migrate --store URL{hint}` (or the first `tenure run` creates them), or apply the SQL printed by `tenure migrate --print-sql{hint}`",
                        hint = prefix_hint(prefix)
                    ),
                });
            }
            let server = server_kind(conn, dialect)
                .await
                .map_err(|e| map_err(store, prefix, e))?;
            apply(conn, &ddl(dialect, prefix, server), prefix, store).await?;
            // Someone may have raced us with another version; check again.
            match read_version(conn, dialect, prefix).await {
                Ok(Some(v)) if v == SCHEMA_VERSION => check_tables(conn, dialect, prefix, store).await,
                Ok(other) => Err(Error::Schema { source: None,
                    store: store.to_string(),
                    reason: format!("after creating the tables, {prefix}schema says version {other:?}, expected {SCHEMA_VERSION}"),
                }),
                Err(e) => Err(map_err(store, prefix, e)),
            }
        }
    }
}

/// Selects every column of tenure's leases table, reading no row.
fn leases_probe(prefix: &str) -> String {
    format!("SELECT namespace, election, holder, metadata, term, version, ttl_us, acquired_us, renewed_us, expires_us, handover_to, handover_until_us, handover_reason, prev_holder, prev_expires_us, start_reason FROM {prefix}leases WHERE 1 = 0")
}

/// Statements that select every column of each table (leases, members,
/// history, runs), reading no row.
fn table_probes(prefix: &str) -> [(&'static str, String); 4] {
    [
        ("leases", leases_probe(prefix)),
        ("members", format!("SELECT namespace, election, holder, identity, metadata, priority, joined_us, heartbeat_us, expires_us FROM {prefix}members WHERE 1 = 0")),
        ("history", format!("SELECT namespace, election, term, holder, start_reason, start_us, end_reason, end_us FROM {prefix}history WHERE 1 = 0")),
        ("runs", format!("SELECT namespace, election, name, value, version, updated_us, expires_us FROM {prefix}runs WHERE 1 = 0")),
    ]
}

/// Selects every column of every table, reading no row: a missing table or
/// column (another program's table of that name) shows up here, at connect.
async fn check_tables(
    conn: &mut super::conn::Conn,
    dialect: Dialect,
    prefix: &str,
    store: &str,
) -> Result<()> {
    for (table, probe) in table_probes(prefix) {
        conn.fetch_optional(dialect.plain(probe).as_str())
            .await
            .map_err(|e| map_table_err(store, prefix, table, e))?;
    }
    Ok(())
}

/// SQLite: a file this user may read but not write (or whose directory,
/// where the journal goes, it may not write) opens and reads as usual, and
/// only refuses writes. A command that will write finds out here, at
/// connect, with a change it rolls back, rather than failing every write
/// while it runs.
async fn check_writable(
    conn: &mut super::conn::Conn,
    dialect: Dialect,
    prefix: &str,
    store: &str,
) -> Result<()> {
    if dialect != Dialect::Sqlite {
        return Ok(());
    }
    let touch =
        format!("UPDATE {prefix}schema SET version = version + 1 WHERE component = 'tenure'");
    let tried = async {
        conn.execute(dialect.begin_write()).await?;
        sqlx::query(&dialect.plain(touch))
            .execute(&mut *conn)
            .await?;
        conn.execute("ROLLBACK").await.map(drop)
    }
    .await;
    tried.map_err(|e| map_err(store, prefix, e))
}

/// Asks a `mysql://` server whether it is MariaDB.
pub(crate) async fn server_kind(
    conn: &mut super::conn::Conn,
    dialect: Dialect,
) -> Result<ServerKind, sqlx::Error> {
    if dialect != Dialect::MySql {
        return Ok(ServerKind::Other);
    }
    let row = sqlx::query("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    let version: String = row.try_get(0)?;
    Ok(if version.contains("MariaDB") {
        ServerKind::MariaDb
    } else {
        ServerKind::Other
    })
}
