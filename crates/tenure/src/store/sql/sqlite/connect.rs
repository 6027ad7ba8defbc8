//! SQLite's connections: the pragmas every one of them sets, the probe that
//! finds a file that is not a database, and the file a URL names.

use sqlx::any::AnyPoolOptions;
use sqlx::AnyConnection;

/// `pool` with SQLite's pragmas set on every new connection.
///
/// WAL lets readers run beside the one writer; `synchronous = FULL` because a
/// lost commit could hand out a term twice after a power cut; `busy_timeout`
/// makes writers of other processes wait instead of failing.
pub(in crate::store::sql) fn with_pragmas(pool: AnyPoolOptions) -> AnyPoolOptions {
    pool.after_connect(|conn, _meta| {
        Box::pin(async move {
            use sqlx::Executor;
            conn.execute("PRAGMA busy_timeout = 5000").await?;
            // Fails on a read-only file; reading still works there, and
            // any write reports the read-only error itself.
            if let Err(e) = conn.execute("PRAGMA journal_mode = WAL").await {
                tracing::debug!("cannot switch SQLite to WAL: {e}");
            }
            conn.execute("PRAGMA synchronous = FULL").await?;
            Ok(())
        })
    })
}

/// Checks that the file `conn` opened is a database.
///
/// SQLite opens any file lazily; reading the catalogue is what finds out
/// that it is not a database, once, at connect, instead of failing every
/// pooled connection until the pool times out. Another process may be
/// creating the tables right now: this waits for its lock as the pool's
/// connections do.
pub(in crate::store::sql) async fn probe(conn: &mut AnyConnection) -> Result<(), sqlx::Error> {
    sqlx::query("PRAGMA busy_timeout = 5000")
        .execute(&mut *conn)
        .await?;
    sqlx::query("SELECT count(*) FROM sqlite_master")
        .fetch_one(&mut *conn)
        .await?;
    Ok(())
}

/// The database file a `sqlite://` URL names (without its query).
#[cfg(feature = "sqlite")]
pub(in crate::store::sql) fn path_of(url: &str) -> std::path::PathBuf {
    let rest = url.split_once(':').map(|(_, r)| r).unwrap_or(url);
    let path = rest.trim_start_matches("//");
    let path = path.split_once('?').map(|(p, _)| p).unwrap_or(path);
    std::path::PathBuf::from(path)
}

/// Refuses a database file that does not exist, for a store that creates
/// no tables (`tenure status`, `tenure watch`): opening it would leave an
/// empty file (and its `-wal`, `-shm`) behind a mistyped path. A URL
/// that sets `mode` itself (`mode=rwc` creates) is left to it.
#[cfg(feature = "sqlite")]
pub(in crate::store::sql) fn exists(url: &str, store: &str) -> crate::Result<()> {
    let file = path_of(url);
    let query = url.split_once('?').map_or("", |(_, q)| q);
    if file.exists() || query.split('&').any(|p| p.starts_with("mode=")) {
        return Ok(());
    }
    Err(crate::Error::Schema {
        source: None,
        store: store.to_string(),
        reason: format!(
            "there is no database file {}, and this command creates none: check the path \
             (relative paths start in the working directory), or create it with \
             `tenure migrate --store URL` (or the first `tenure run` creates it)",
            file.display()
        ),
    })
}
