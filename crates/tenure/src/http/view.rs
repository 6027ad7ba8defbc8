//! The JSON shape of one election: what `tenure status --json` prints and
//! `GET /v1/elections` answers (one type, so the two cannot drift apart).

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::store::{HistoryRecord, LeaseRecord, MemberRecord, StartReason};

/// One election with its members and recent terms.
///
/// Field names are stable: scripts and dashboards read them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ElectionView {
    /// The namespace.
    pub namespace: String,
    /// The election name.
    pub election: String,
    /// The live leader's holder id (`identity#session`), or null.
    pub leader: Option<String>,
    /// The latest term handed out (0: never acquired).
    pub term: u64,
    /// When the current term began (RFC 3339, store clock), if ever acquired.
    pub since: Option<String>,
    /// Lease time left by the store's clock at the read, in milliseconds.
    pub lease_left_ms: f64,
    /// The TTL the holder asked for, in milliseconds.
    pub ttl_ms: f64,
    /// What the holder attached to its lease.
    pub metadata: String,
    /// Bumped by every write to the lease.
    pub version: u64,
    /// Why the current term began.
    pub start_reason: Option<StartReason>,
    /// Registered candidates, best successor first.
    pub members: Vec<MemberRecord>,
    /// Recent terms, newest first (omitted when not asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryRecord>,
    /// Present (true) only when the store could not be read and this is the
    /// last known state.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
}

impl ElectionView {
    /// The view of one lease record with its members and history.
    pub fn new(r: &LeaseRecord, members: Vec<MemberRecord>, history: Vec<HistoryRecord>) -> Self {
        ElectionView {
            namespace: r.key.namespace.clone(),
            election: r.key.election.clone(),
            leader: r.live_holder().map(str::to_string),
            term: r.term,
            since: (r.term > 0).then(|| timestamp(r.acquired_at_us)),
            lease_left_ms: r.remaining.as_secs_f64() * 1000.0,
            ttl_ms: r.ttl.as_secs_f64() * 1000.0,
            metadata: r.metadata.clone(),
            version: r.version,
            start_reason: r.start_reason,
            members,
            history,
            stale: false,
        }
    }
}

/// Store-clock microseconds since the epoch as RFC 3339 UTC with milliseconds.
///
/// ```
/// assert_eq!(tenure::http::timestamp(1_500_000), "1970-01-01T00:00:01.500Z");
/// ```
pub fn timestamp(us: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_micros(us.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
