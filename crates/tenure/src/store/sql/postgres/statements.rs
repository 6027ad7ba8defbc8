//! PostgreSQL's own statement: a follower's heartbeat and read in one
//! data-modifying CTE.

use crate::store::sql::dialect::Dialect;

impl Dialect {
    /// PostgreSQL only: one member's heartbeat (7 parameters, as
    /// `Dialect::upsert_members`) and a read of its election's lease (2
    /// parameters) in one statement, a data-modifying CTE: an idle follower's
    /// one request per lease lifetime. `None` for the other dialects
    /// (MariaDB ≥ 10.5 has `Dialect::mariadb_heartbeat_and_read`; MySQL has
    /// no such statement; SQLite has no server to spare).
    pub(in crate::store::sql) fn heartbeat_and_read(
        self,
        leases: &str,
        members: &str,
        columns: &str,
    ) -> Option<String> {
        (self == Dialect::Postgres).then(|| {
            self.finish(format!(
                "{}, hb AS (INSERT INTO {members} \
                 (namespace, election, holder, identity, metadata, priority, joined_us, heartbeat_us, expires_us) \
                 SELECT ?, ?, ?, ?, ?, ?, c.now_us, c.now_us, c.now_us + ? FROM c \
                 ON CONFLICT (namespace, election, holder) DO UPDATE SET \
                 metadata = excluded.metadata, priority = excluded.priority, \
                 heartbeat_us = excluded.heartbeat_us, expires_us = excluded.expires_us) \
                 SELECT {columns} FROM {leases}, c WHERE namespace = ? AND election = ?",
                self.with_now().trim_end()
            ))
        })
    }
}
