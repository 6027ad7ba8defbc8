//! Whether the server keeps what it acknowledged. A term is a counter in the
//! lease's hash: a Redis that restarts without the acquisitions it
//! acknowledged (no AOF, RDB snapshots only, or AOF with `appendfsync
//! everysec` or `no`, which lose up to a second or more of writes in a
//! crash) hands the same terms out again, and a fencing token compared with
//! one stored before the restart goes backwards. Nothing fails when that
//! happens, so the store says so when it connects: once per process and
//! server, unless the URL accepts it (`?durability=volatile`).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use redis::aio::ConnectionManager;

/// The URL parameter that accepts a server that may lose acknowledged
/// writes, and its one value.
pub(super) const PARAM: &str = "durability";
const VOLATILE: &str = "volatile";

/// What the URL says of the server's durability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Accepted {
    /// Nothing: the store checks, and warns.
    #[default]
    Checked,
    /// `durability=volatile`: losing acknowledged writes is accepted.
    Volatile,
}

impl Accepted {
    /// The value of the URL's `durability` parameter; an error naming the
    /// one value there is.
    pub(super) fn parse(value: &str) -> Result<Self, String> {
        if value == VOLATILE {
            return Ok(Accepted::Volatile);
        }
        Err(format!(
            "durability={value:?} is not known; the one value is `{PARAM}={VOLATILE}`, which \
             accepts a Redis that may lose acknowledged writes (and repeat terms) after a restart"
        ))
    }
}

/// Servers already warned about in this process, by their redacted URL.
fn warned() -> &'static Mutex<HashSet<String>> {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    WARNED.get_or_init(Mutex::default)
}

/// Reads the server's persistence settings and warns, once per process
/// and server, when they may lose acknowledged writes. Best effort: a
/// server that does not answer `INFO persistence` is not judged, and one
/// that refuses `CONFIG GET` (a managed Redis, an ACL) is judged by `INFO`
/// alone.
pub(super) async fn check(conn: &ConnectionManager, described: &str, accepted: Accepted) {
    if accepted == Accepted::Volatile {
        return;
    }
    let info: String = match redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut conn.clone())
        .await
    {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(store = %described, "INFO persistence not answered: {e}");
            return;
        }
    };
    let appendfsync: Option<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async::<Vec<String>>(&mut conn.clone())
        .await
        .ok()
        .and_then(|pair| pair.into_iter().nth(1));
    let Some(why) = loses_writes(&info, appendfsync.as_deref()) else {
        return;
    };
    let first = warned()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(described.to_string());
    if first {
        tracing::warn!(
            store = %described,
            "this Redis may lose acknowledged writes ({why}): after a restart it can hand out \
             terms it handed out before, and a fencing token compared with one stored earlier \
             can go backwards. Fix: on the server `CONFIG SET appendonly yes` and `CONFIG SET \
             appendfsync always` (and the same in redis.conf); or, to accept this, add \
             `?{PARAM}={VOLATILE}` to the store URL"
        );
    }
}

/// Why a server with this `INFO persistence` (and `appendfsync`, where it
/// could be read) may lose acknowledged writes; `None` if it keeps them.
fn loses_writes(info: &str, appendfsync: Option<&str>) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if field("aof_enabled") != Some("1") {
        return Some(
            "AOF is off (appendonly no): at most RDB snapshots, which lose what came after \
             the last one"
                .to_string(),
        );
    }
    match appendfsync {
        Some("always") | None => None,
        Some(other) => Some(format!(
            "appendfsync {other}: a crash loses the writes of up to the last second or more"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOLATILE_INFO: &str = "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:3\r\n\
        rdb_last_bgsave_time_sec:-1\r\naof_enabled:0\r\n";
    const AOF_INFO: &str = "# Persistence\r\nrdb_changes_since_last_save:0\r\naof_enabled:1\r\n";

    #[test]
    fn no_aof_loses_writes() {
        let why = loses_writes(VOLATILE_INFO, Some("always")).expect("volatile");
        assert!(why.contains("appendonly no"), "{why}");
    }

    #[test]
    fn aof_keeps_writes_only_when_each_is_synced() {
        assert_eq!(loses_writes(AOF_INFO, Some("always")), None);
        let why = loses_writes(AOF_INFO, Some("everysec")).expect("everysec");
        assert!(why.contains("appendfsync everysec"), "{why}");
        // CONFIG refused: judged by INFO alone.
        assert_eq!(loses_writes(AOF_INFO, None), None);
    }

    #[test]
    fn the_url_accepts_only_volatile() {
        assert_eq!(Accepted::parse("volatile"), Ok(Accepted::Volatile));
        let e = Accepted::parse("none").expect_err("unknown value");
        assert!(e.contains("durability=volatile"), "{e}");
    }
}
