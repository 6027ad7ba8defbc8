//! The text of every lease, member and history statement (and, through
//! `runs.rs`, every run record statement), built once per store
//! from the [`Dialect`] and the table prefix, and [`sent`], which each of them
//! (and each batched renewal) passes through on its way to the server.

use std::borrow::Cow;
use std::time::Duration;

use super::dialect::Dialect;
use crate::store::{Member, Tenure};

/// The lease table's columns that make a lease record, in the order of
/// [`RECORD_COLUMNS`] (which adds the server's now as `now_us`), and of
/// MariaDB's packed record (`mysql/dialect.rs`).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(super) const RECORD_FIELDS: [&str; 15] = [
    "namespace",
    "election",
    "holder",
    "metadata",
    "term",
    "version",
    "ttl_us",
    "acquired_us",
    "renewed_us",
    "expires_us",
    "handover_to",
    "handover_until_us",
    "start_reason",
    "prev_holder",
    "prev_expires_us",
];

/// The columns every lease read returns, in the order [`decode_record`](super::decode::decode_record) expects.
const RECORD_COLUMNS: &str = "namespace, election, holder, metadata, term, version, ttl_us, \
     acquired_us, renewed_us, expires_us, handover_to, handover_until_us, start_reason, \
     prev_holder, prev_expires_us, {now} AS now_us";

/// Member columns, in the order [`decode_member`](super::decode::decode_member)
/// expects: the member row `m`, and the renewal and expiry of the lease `l`
/// where the member holds it (0 where not), by which a leader reads as live
/// without heartbeating (`Capabilities::lease_vouches_for_holder`).
const MEMBER_COLUMNS: &str =
    "m.namespace AS namespace, m.election AS election, m.holder AS holder, \
     m.identity AS identity, m.metadata AS metadata, m.priority AS priority, \
     m.joined_us AS joined_us, m.heartbeat_us AS heartbeat_us, m.expires_us AS expires_us, \
     COALESCE(l.renewed_us, 0) AS lease_renewed_us, COALESCE(l.expires_us, 0) AS lease_expires_us, \
     {now} AS now_us";

/// Prepared statement texts for one table prefix and dialect.
#[derive(Debug)]
pub(super) struct Statements {
    pub(super) acquire: String,
    /// Whether [`acquire`](Self::acquire) writes the history of the term
    /// it hands out itself (`Spelling::update_recording_start`).
    pub(super) acquire_records_start: bool,
    /// [`acquire`](Self::acquire) as sent to MariaDB, where its lock wait
    /// is bounded differently (`Spelling::bounded_lock_wait`).
    pub(super) acquire_mariadb: Option<String>,
    /// The one-lease renewal, which only the `renew-unchecked` build sends:
    /// every other build renews through the batcher (`batch.rs`).
    pub(super) renew_unchecked: Option<String>,
    pub(super) release: String,
    pub(super) read: String,
    /// A member's heartbeat and its election's read in one statement, where
    /// the dialect has one (PostgreSQL).
    pub(super) heartbeat_and_read: Option<String>,
    /// The same for MariaDB ≥ 10.5, whose answer is one packed column
    /// (`mysql/dialect.rs`); sent only once the server
    /// is known to be one (`mariadb.rs`).
    #[cfg(feature = "mysql")]
    pub(super) mariadb_heartbeat_and_read: Option<String>,
    pub(super) list_all: String,
    pub(super) list_namespace: String,
    pub(super) insert_vacant: String,
    pub(super) fence: String,
    pub(super) hand_over: String,
    pub(super) request_handover: String,
    /// A holder's new metadata, only while its tenure holds unexpired.
    pub(super) proclaim: String,
    pub(super) leave: String,
    pub(super) members: String,
    /// Every election's members, in `members`' order within each.
    pub(super) members_all: String,
    /// The same in one namespace.
    pub(super) members_namespace: String,
    pub(super) insert_history: String,
    pub(super) close_history_at: String,
    pub(super) close_history_now: String,
    pub(super) history: String,
    pub(super) trim_history: String,
    /// Run records' statements (`runs.rs`).
    pub(super) runs: super::run_statements::RunStatements,
}

impl Statements {
    pub(super) fn new(dialect: Dialect, prefix: &str) -> Self {
        let t = format!("{prefix}leases");
        let m = format!("{prefix}members");
        let h = format!("{prefix}history");
        let returning = Some(RECORD_COLUMNS);
        let key = "namespace = ? AND election = ?";
        // Member reads join the lease row (by its primary key) to see whether
        // the member holds it: a plain read, it takes no locks.
        let members_with_lease = format!(
            "{m} m LEFT JOIN {t} l ON l.namespace = m.namespace \
             AND l.election = m.election AND l.holder = m.holder"
        );
        let changes = changes_channel(prefix);
        // A row whose term or version no version of tenure writes (see
        // `store::check_lease`) is never acquired: its read reports it.
        let max = crate::store::MAX_TERM;
        // MySQL evaluates SET left to right on updated values, so everything
        // that reads the old row comes first.
        let acquire_set = "start_reason = CASE WHEN term = 0 THEN 'first' \
                   WHEN holder = '' AND handover_reason <> '' THEN handover_reason \
                   WHEN holder = '' THEN 'release' ELSE 'expiry' END, \
                 prev_holder = holder, prev_expires_us = expires_us, \
                 handover_to = '', handover_until_us = 0, handover_reason = '', \
                 holder = ?, metadata = ?, term = term + 1, version = version + 1, ttl_us = ?, \
                 acquired_us = {now}, renewed_us = {now}, expires_us = {now} + ?";
        let mut acquire_filter = format!(
            "{key} AND (holder = '' OR expires_us <= {{now}}) \
             AND term >= 0 AND term < {max} AND version >= 0 AND version < {max} \
             AND (handover_to = '' OR handover_to = '*' OR handover_to = ? OR handover_until_us <= {{now}})"
        );
        if let Some(nowait) = dialect.lock_row_nowait(&t) {
            acquire_filter = format!("{acquire_filter} AND {nowait}");
        }
        let recorded =
            dialect.update_recording_start(&t, acquire_set, &acquire_filter, RECORD_COLUMNS, &h);
        let acquire_records_start = recorded.is_some();
        let acquire =
            recorded.unwrap_or_else(|| dialect.update(&t, acquire_set, &acquire_filter, returning));
        let (acquire, acquire_mariadb) = match dialect.bounded_lock_wait(&acquire) {
            Some((other, mariadb)) => (other, Some(mariadb)),
            None => (acquire, None),
        };
        Self {
            acquire,
            acquire_mariadb,
            acquire_records_start,
            // The renew-unchecked bug's one SQL hook: a renewal without the
            // holder/term/expiry check.
            renew_unchecked: crate::bugs::active(crate::bugs::Bug::RenewUnchecked).then(|| {
                dialect.update(
                    &t,
                    "version = version + 1, ttl_us = ?, renewed_us = {now}, expires_us = {now} + ?",
                    &format!("{key} AND ? <> '' AND ? > 0"),
                    None,
                )
            }),
            release: dialect.update_announced(
                &t,
                // prev_holder names who just left, so followers do not wait
                // for it as the designated successor.
                "prev_holder = holder, holder = '', metadata = '', version = version + 1, expires_us = {now}",
                &format!("{key} AND holder = ? AND term = ?"),
                &changes,
            ),
            read: dialect.select(&t, RECORD_COLUMNS, key, ""),
            heartbeat_and_read: dialect.heartbeat_and_read(&t, &m, RECORD_COLUMNS),
            #[cfg(feature = "mysql")]
            mariadb_heartbeat_and_read: dialect.packed_heartbeat_and_read(&t, &m, &RECORD_FIELDS),
            list_all: dialect.select(&t, RECORD_COLUMNS, "1 = 1", " ORDER BY namespace, election"),
            list_namespace: dialect.select(
                &t,
                RECORD_COLUMNS,
                "namespace = ?",
                " ORDER BY namespace, election",
            ),
            insert_vacant: dialect.insert_vacant(&t),
            hand_over: dialect.update_announced(
                &t,
                "prev_holder = holder, holder = '', metadata = '', version = version + 1, expires_us = {now}, \
                 handover_to = ?, handover_until_us = {now} + ?, handover_reason = ?",
                &format!("{key} AND holder = ? AND term = ?"),
                &changes,
            ),
            request_handover: dialect.update_announced(
                &t,
                "handover_to = ?, handover_until_us = {now} + ?, handover_reason = ?, version = version + 1",
                &format!("{key} AND holder <> '' AND expires_us > {{now}}"),
                &changes,
            ),
            proclaim: dialect.update_announced(
                &t,
                "metadata = ?, version = version + 1",
                &format!("{key} AND holder = ? AND term = ? AND expires_us > {{now}}"),
                &changes,
            ),
            leave: dialect.delete(&m, &format!("{key} AND holder = ?")),
            members: dialect.select(
                &members_with_lease,
                MEMBER_COLUMNS,
                "m.namespace = ? AND m.election = ?",
                " ORDER BY m.priority DESC, m.joined_us ASC, m.holder ASC",
            ),
            members_all: dialect.select(
                &members_with_lease,
                MEMBER_COLUMNS,
                "1 = 1",
                " ORDER BY m.namespace, m.election, m.priority DESC, m.joined_us ASC, m.holder ASC",
            ),
            members_namespace: dialect.select(
                &members_with_lease,
                MEMBER_COLUMNS,
                "m.namespace = ?",
                " ORDER BY m.namespace, m.election, m.priority DESC, m.joined_us ASC, m.holder ASC",
            ),
            insert_history: dialect.insert_history(&h),
            close_history_at: dialect.update(
                &h,
                "end_us = ?, end_reason = ?",
                &format!("{key} AND term = ? AND end_us = 0"),
                None,
            ),
            close_history_now: dialect.update(
                &h,
                "end_us = {now}, end_reason = ?",
                &format!("{key} AND term = ? AND end_us = 0"),
                None,
            ),
            history: dialect.select(
                &h,
                "namespace, election, term, holder, start_reason, start_us, end_reason, end_us",
                key,
                " ORDER BY term DESC LIMIT ?",
            ),
            trim_history: dialect.delete(&h, &format!("{key} AND term <= ?")),
            fence: dialect.select(
                &t,
                "term, expires_us - {now} AS left_us",
                &format!("{key} AND holder = ? AND term = ? AND expires_us > {{now}}"),
                dialect.for_update(),
            ),
            runs: super::run_statements::RunStatements::new(dialect, prefix),
        }
    }
}

/// The PostgreSQL notification channel of the tables with this prefix, which
/// release and hand-over statements notify (`Dialect::update_announced`) and
/// every store of the same tables listens on.
pub(super) fn changes_channel(prefix: &str) -> String {
    format!("{prefix}changes")
}

/// The text of `sql` as sent to the server. Every statement that can read the
/// store's clock passes through here (the schema's, the probes' and
/// `pg_notify` read none), which makes this the one SQL hook of the `wall-clock`
/// bug: the server's clock replaced by this host's. Unless that bug is active
/// it returns `sql` itself.
pub(super) fn sent(dialect: Dialect, sql: &str) -> Cow<'_, str> {
    crate::bugs::with_client_now(sql, dialect.now_expr())
}

/// A duration as the microseconds the statements bind.
pub(super) fn duration_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// A term as the signed integer the statements bind.
pub(super) fn term_i64(term: u64) -> i64 {
    i64::try_from(term).unwrap_or(i64::MAX)
}

/// A statement with its arguments bound so far.
pub(super) type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

/// Binds one member's registration (namespace, election, holder, identity,
/// metadata, priority, registration TTL in µs), in the order
/// `Dialect::upsert_members` lists them.
pub(super) fn bind_member<'q>(query: Query<'q>, member: &'q Member, ttl_us: i64) -> Query<'q> {
    query
        .bind(member.key.namespace.as_str())
        .bind(member.key.election.as_str())
        .bind(member.holder.as_str())
        .bind(crate::store::identity_of(&member.holder))
        .bind(member.metadata.as_str())
        .bind(i64::from(member.priority))
        .bind(ttl_us)
}

/// Binds the four values that name one tenure (namespace, election, holder,
/// term), in the order every statement that checks a tenure lists them.
pub(super) fn bind_tenure<'q>(query: Query<'q>, tenure: &'q Tenure) -> Query<'q> {
    query
        .bind(tenure.key.namespace.as_str())
        .bind(tenure.key.election.as_str())
        .bind(tenure.holder.as_str())
        .bind(term_i64(tenure.term))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_columns_are_the_record_fields_and_now() {
        assert_eq!(
            RECORD_COLUMNS
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            format!("{}, {{now}} AS now_us", RECORD_FIELDS.join(", "))
        );
    }
}
