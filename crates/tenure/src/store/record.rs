//! The records a store reads and writes: elections, leases, members,
//! history, and the claims and tenures that name them.

use std::time::Duration;

use serde::Serialize;

use super::reason::{EndReason, Handover, StartReason};
use crate::error::{Error, Result};

/// Names one election: a namespace (e.g. a data center or a tenant) and an election name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ElectionKey {
    /// The namespace, `default` unless configured.
    pub namespace: String,
    /// The election name.
    pub election: String,
}

impl ElectionKey {
    /// Builds a key without validating it; the elector validates names it is given.
    pub fn new(namespace: impl Into<String>, election: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            election: election.into(),
        }
    }
}

/// `namespace/election`. A part that contains `/` (or starts with `"`) is
/// quoted, so that `a/b` + `c` (`"a/b"/c`) and `a` + `b/c` (`a/"b/c"`) never
/// print alike.
///
/// ```
/// use tenure::store::ElectionKey;
/// assert_eq!(ElectionKey::new("default", "nightly").to_string(), "default/nightly");
/// assert_eq!(ElectionKey::new("a/b", "c").to_string(), r#""a/b"/c"#);
/// assert_eq!(ElectionKey::new("a", "b/c").to_string(), r#"a/"b/c""#);
/// ```
impl std::fmt::Display for ElectionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn part(f: &mut std::fmt::Formatter<'_>, name: &str) -> std::fmt::Result {
            if name.contains('/') || name.starts_with('"') {
                write!(f, "{name:?}")
            } else {
                f.write_str(name)
            }
        }
        part(f, &self.namespace)?;
        f.write_str("/")?;
        part(f, &self.election)
    }
}

/// A store's view of one election's lease, read in the store's own clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseRecord {
    /// Which election.
    pub key: ElectionKey,
    /// The holder id (`identity#session`), or `None` if the lease was released or
    /// never taken. A holder whose lease has expired is still named here; check
    /// [`remaining`](Self::remaining).
    pub holder: Option<String>,
    /// Free text the holder attached (an address, a version).
    pub metadata: String,
    /// The term of the latest acquisition: the fencing token.
    pub term: u64,
    /// Bumped by every write to the record.
    pub version: u64,
    /// The TTL the holder asked for.
    #[serde(with = "duration_ms")]
    pub ttl: Duration,
    /// When the current term was acquired, in microseconds since the Unix epoch, by the store's clock.
    pub acquired_at_us: i64,
    /// When the lease was last renewed (store clock, µs since the epoch).
    pub renewed_at_us: i64,
    /// When the lease expires or expired (store clock, µs since the epoch).
    pub expires_at_us: i64,
    /// The store's clock when this record was read (µs since the epoch).
    pub read_at_us: i64,
    /// How long the lease has left by the store's clock at the moment of the read;
    /// zero if expired or vacant. Followers sleep this long, not a fixed period.
    #[serde(with = "duration_ms")]
    pub remaining: Duration,
    /// A pending or running hand-over: [`Handover::Anyone`] after a
    /// resignation, [`Handover::To`] for a transfer to that identity.
    pub handover: Option<Handover>,
    /// Until when (store clock, µs) only the transfer target may acquire.
    pub handover_until_us: i64,
    /// Why the current term began; `None` if the lease was never acquired.
    pub start_reason: Option<StartReason>,
    /// The holder before the current term, if its lease ended by expiry
    /// (empty after a release or hand-over).
    pub previous_holder: Option<String>,
    /// When the previous lease expired (store clock, µs), for the history.
    pub previous_expires_at_us: i64,
}

impl LeaseRecord {
    /// True if someone holds an unexpired lease.
    pub fn is_held(&self) -> bool {
        self.holder.is_some() && !self.remaining.is_zero()
    }

    /// The holder, if the lease is held and unexpired.
    pub fn live_holder(&self) -> Option<&str> {
        if self.is_held() {
            self.holder.as_deref()
        } else {
            None
        }
    }

    /// The target of a transfer whose window was still open when this was
    /// read: until it ends, only that identity may acquire.
    pub(crate) fn transfer_target(&self) -> Option<&str> {
        self.handover
            .as_ref()
            .and_then(Handover::target)
            .filter(|_| self.handover_until_us > self.read_at_us)
    }
}

/// A candidate's registration in an election: the member list from which
/// successors are chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Which election.
    pub key: ElectionKey,
    /// The candidate's holder id (`identity#session`).
    pub holder: String,
    /// Free text (an address, a version).
    pub metadata: String,
    /// Higher priorities are preferred as successors (0–1000).
    pub priority: u32,
}

/// A member as the store lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberRecord {
    /// Which election.
    pub key: ElectionKey,
    /// The member's holder id.
    pub holder: String,
    /// The identity part of the holder id.
    pub identity: String,
    /// Free text the member registered.
    pub metadata: String,
    /// Its priority.
    pub priority: u32,
    /// When it joined (store clock, µs since the epoch).
    pub joined_at_us: i64,
    /// Its last heartbeat (store clock, µs). For the holder of the
    /// election's unexpired lease, on a store with
    /// [`Capabilities::lease_vouches_for_holder`](crate::store::Capabilities::lease_vouches_for_holder), its last renewal if that
    /// is later: a leader does not heartbeat while it leads.
    pub heartbeat_at_us: i64,
    /// When its registration lapses without another heartbeat (store clock,
    /// µs); for the holder of the unexpired lease (as above) the lease's
    /// expiry if that is later.
    pub expires_at_us: i64,
    /// Whether the registration is current by the store's clock; the
    /// holder of the unexpired lease is live (as above).
    pub live: bool,
}

impl MemberRecord {
    /// Whether this member can be handed leadership: registered (`live`) and
    /// heard from within two TTLs of `now_us`. A crashed member stays
    /// registered for three TTLs; succession, preemption and transfer all use
    /// this one rule so none of them hands the lease to it for long. Two TTLs,
    /// because a live member heartbeats every half to one TTL and a heartbeat
    /// may itself take up to a TTL (a slow store): a tighter bound made live
    /// members look dead, so the wrong follower went first.
    pub fn is_fresh(&self, now_us: i64, ttl: Duration) -> bool {
        let fresh_us = i64::try_from(ttl.as_micros())
            .unwrap_or(i64::MAX)
            .saturating_mul(2);
        self.live && now_us.saturating_sub(self.heartbeat_at_us) < fresh_us
    }
}

/// The rule of [`Capabilities::lease_vouches_for_holder`](crate::store::Capabilities::lease_vouches_for_holder), for a member
/// whose holder id is the lease's holder: while that lease is unexpired
/// (`lease_expires_us > now_us`, store clock) the member is live, last heard
/// from at the lease's renewal, and lapses no sooner than the lease does. A
/// leader's own registration is refreshed only rarely (before its reaps), so
/// without this its row would read as lapsed while it leads.
pub(crate) fn vouch_for_holder(
    m: &mut MemberRecord,
    lease_renewed_us: i64,
    lease_expires_us: i64,
    now_us: i64,
) {
    if lease_expires_us > now_us {
        m.heartbeat_at_us = m.heartbeat_at_us.max(lease_renewed_us);
        m.expires_at_us = m.expires_at_us.max(lease_expires_us);
        m.live = true;
    }
}

/// The longest hand-over window a store accepts: the longest transfer window
/// plus the longest TTL (a transfer's window starts once the leader noticed).
pub const MAX_HANDOVER_WINDOW: Duration = Duration::from_secs(3600 + 24 * 3600);

/// A hand-over window in microseconds, refused beyond [`MAX_HANDOVER_WINDOW`]
/// so that no store can overflow `now + window` (SQLite would turn the sum
/// into a REAL that no read can decode).
pub(crate) fn handover_window_us(window: Duration) -> Result<i64> {
    if window > MAX_HANDOVER_WINDOW {
        return Err(Error::config(
            "hand-over window",
            format!("{window:?} is too long; at most {MAX_HANDOVER_WINDOW:?}"),
        ));
    }
    // In range by the check above: 25 h in µs is far below i64::MAX.
    Ok(window.as_micros() as i64)
}

/// One term in an election's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRecord {
    /// Which election.
    pub key: ElectionKey,
    /// The term.
    pub term: u64,
    /// Who held it.
    pub holder: String,
    /// Why it began.
    pub start_reason: StartReason,
    /// When it began (store clock, µs).
    pub start_at_us: i64,
    /// Why it ended; `None` while it lasts.
    pub end_reason: Option<EndReason>,
    /// When it ended (store clock, µs), if it has.
    pub end_at_us: Option<i64>,
}

/// Orders members as [`Membership::members`](crate::store::Membership::members) promises: best successor first
/// (highest priority, then longest-serving, then by holder id for a stable order).
pub(crate) fn sort_successors_first(members: &mut [MemberRecord]) {
    members.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.joined_at_us.cmp(&b.joined_at_us))
            .then(a.holder.cmp(&b.holder))
    });
}

/// The identity part of a holder id (`identity#session`).
pub fn identity_of(holder: &str) -> &str {
    holder.rsplit_once('#').map(|(i, _)| i).unwrap_or(holder)
}

/// Serialises durations as float milliseconds, which is what status readers want.
mod duration_ms {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }
}

/// A request to acquire a lease.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Which election.
    pub key: ElectionKey,
    /// The claimant's holder id (`identity#session`).
    pub holder: String,
    /// Free text stored with the lease.
    pub metadata: String,
    /// How long the lease lasts without renewal, by the store's clock.
    pub ttl: Duration,
}

/// One tenure: a holder's lease under one term. Renew and release name it exactly,
/// so they can never touch a later tenure, not even one of the same holder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tenure {
    /// Which election.
    pub key: ElectionKey,
    /// The holder id.
    pub holder: String,
    /// The term it was acquired under.
    pub term: u64,
}

/// The result of [`LeaseStore::try_acquire`](crate::store::LeaseStore::try_acquire).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The claim won: the record shows the new term.
    Acquired(LeaseRecord),
    /// Someone else holds an unexpired lease (or won the race); the record, if
    /// the store could read it, says who and for how long.
    Held(Option<LeaseRecord>),
}

/// Clamps a store-clock difference in microseconds to a non-negative duration.
pub(crate) fn remaining_from_us(expires_at_us: i64, now_us: i64) -> Duration {
    Duration::from_micros(expires_at_us.saturating_sub(now_us).max(0) as u64)
}
