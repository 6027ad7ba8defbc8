//! The storage contract every backend implements, and the backends themselves.
//!
//! A [`LeaseStore`] keeps one lease record per election and changes it only by
//! compare-and-set writes whose conditions, including expiry, are judged by the
//! store's own clock. It is deliberately small, in the
//! way `object_store::ObjectStore` is: timing, retries and state live in the
//! [`Elector`](crate::Elector), not here.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::error::{Error, Result};

#[cfg(any(feature = "tls", feature = "redis", feature = "etcd"))]
mod ca_file;
#[cfg(any(feature = "redis", feature = "etcd"))]
mod client_tls;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub mod etcd;
#[cfg(any(
    feature = "sqlite",
    feature = "mysql",
    feature = "postgres",
    feature = "redis",
    feature = "etcd"
))]
mod gather;
mod integrity;
pub mod memory;
mod params;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod percent;
mod push_health;
#[cfg(any(feature = "postgres", feature = "redis", feature = "etcd"))]
mod push_outage;
mod reason;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod registry;
mod runs;
#[cfg(any(feature = "tls", feature = "redis", feature = "etcd"))]
mod rustls_cause;
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres")))
)]
pub mod sql;
#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "mysql",
    feature = "redis"
))]
mod wakeups;
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub mod zookeeper;

pub(crate) use integrity::{check_lease, check_record, CorruptLease, StoredLease};
pub use integrity::{EXPIRY_SLACK, MAX_TERM};
pub use push_health::PushHealth;
pub use reason::{EndReason, Handover, HandoverReason, StartReason, HANDOVER_ANYONE};
pub use registry::{connect, redact_url, supported_schemes, StoreOptions};
pub use runs::{RunRecord, RunRecords, MAX_RUN_KEEP, MAX_RUN_VALUE_BYTES};

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
    /// [`Capabilities::lease_vouches_for_holder`], its last renewal if that
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

/// The rule of [`Capabilities::lease_vouches_for_holder`], for a member
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

/// Orders members as [`LeaseStore::members`] promises: best successor first
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

/// The members of each election of `records` (read by
/// [`LeaseStore::list`] for `namespace`): one request where the store
/// lists members at once ([`Capabilities::list_members`]) and there is more
/// than one election, else a [`LeaseStore::members`] read per election.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let records = store.list(None).await?;
/// let members = tenure::store::members_of(&*store, &records, None).await?;
/// assert!(members.is_empty());
/// # Ok(()) }
/// ```
pub async fn members_of(
    store: &dyn LeaseStore,
    records: &[LeaseRecord],
    namespace: Option<&str>,
) -> Result<std::collections::HashMap<ElectionKey, Vec<MemberRecord>>> {
    // One election: its own read, not the whole namespace's members.
    if store.capabilities().list_members && records.len() > 1 {
        let mut all = members_by_election(store.list_members(namespace).await?);
        all.retain(|k, _| records.iter().any(|r| &r.key == k));
        return Ok(all);
    }
    let mut by = std::collections::HashMap::new();
    for r in records {
        by.insert(r.key.clone(), store.members(&r.key).await?);
    }
    Ok(by)
}

/// Groups [`LeaseStore::list_members`]' answer by election, keeping each
/// election's order.
///
/// ```
/// use tenure::store::{members_by_election, ElectionKey};
///
/// assert!(members_by_election(Vec::new()).get(&ElectionKey::new("default", "e")).is_none());
/// ```
pub fn members_by_election(
    all: Vec<MemberRecord>,
) -> std::collections::HashMap<ElectionKey, Vec<MemberRecord>> {
    let mut by = std::collections::HashMap::<ElectionKey, Vec<MemberRecord>>::new();
    for m in all {
        by.entry(m.key.clone()).or_default().push(m);
    }
    by
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

/// The result of [`LeaseStore::try_acquire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The claim won: the record shows the new term.
    Acquired(LeaseRecord),
    /// Someone else holds an unexpired lease (or won the race); the record, if
    /// the store could read it, says who and for how long.
    Held(Option<LeaseRecord>),
}

/// What a store can do, in the manner of opendal's `Capability`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Changes are pushed to waiting candidates (LISTEN/NOTIFY, pub/sub, watch).
    pub push: bool,
    /// Acquisitions of a free election are pushed too, so an observer need
    /// not poll elections nobody holds. MySQL/MariaDB's named locks signal
    /// only a leader letting go; there an observer asks for the acquisitions
    /// of the free elections it watches ([`LeaseStore::watch_acquisitions`]).
    pub push_acquisitions: bool,
    /// Work can be committed in a transaction fenced by the lease (SQL stores).
    pub fenced_transactions: bool,
    /// Several elections can be renewed by one statement.
    pub batch_renew: bool,
    /// Leases survive a restart of the store.
    pub durable: bool,
    /// The shortest TTL the store can honour (zero: any TTL the elector
    /// accepts). etcd leases are whole seconds, at least 1 s; the elector
    /// refuses shorter TTLs for such a store and rounds others up to its
    /// lease granularity (which only makes failover slower, never unsafe).
    pub min_ttl: Duration,
    /// [`LeaseStore::list_members`] answers in one request (the SQL stores);
    /// otherwise it reads each election's members, and a caller that has
    /// the elections already reads them itself ([`members_of`]).
    pub list_members: bool,
    /// Terms increase strictly but may skip numbers (etcd: they are cluster
    /// revisions). When false, each acquisition's term is exactly the
    /// previous term + 1.
    pub sparse_terms: bool,
    /// The store itself ends an expired lease and pushes that end like a
    /// release (etcd: the lease key is attached to an etcd lease, which etcd
    /// deletes at expiry, and a tenure abandoned by a live process is deleted
    /// by that process's sweeper; the watch sees both). A follower then
    /// needs no read at the lease's expiry: it waits for the push, and reads
    /// only when [`LeaseStore::push_activity`] shows the push channel silent
    /// for a TTL. Never a safety matter: acquisitions are the same
    /// compare-and-set either way.
    pub push_expiry: bool,
    /// [`LeaseStore::members`] and [`LeaseStore::list_members`] count the
    /// holder of the election's unexpired lease as a live member heard from
    /// at its last renewal, whatever its own registration says (see
    /// [`MemberRecord`]): holding the lease proves it alive, so a leader
    /// sends no member heartbeats while it leads, only its renewals. Where
    /// false (etcd, ZooKeeper: their registrations live on their own leases
    /// and sessions) the leader keeps heartbeating. [`LeaseStore::reap`]
    /// then never deletes the holder's registration. Never a safety matter:
    /// membership only orders successors.
    pub lease_vouches_for_holder: bool,
}

/// The storage contract.
///
/// Every method is one round trip's worth of work and decides with one atomic
/// conditional write judged by rows matched; expiry is judged by the store's clock
/// inside that write. Implementations must pass `tenure::testing`'s conformance
/// suite (feature `conformance`).
#[async_trait]
pub trait LeaseStore: Send + Sync + Debug + 'static {
    /// What this store supports.
    fn capabilities(&self) -> Capabilities;

    /// A description for logs and errors, without secrets (e.g. a redacted URL).
    fn describe(&self) -> String;

    /// Takes the lease if it is vacant or expired, under a term one higher than
    /// any before. Never steals an unexpired lease, not even from the same holder.
    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire>;

    /// Extends the lease by `ttl` from the store's now, only if `tenure` still
    /// holds it and it has not expired. Returns whether it did.
    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool>;

    /// Clears the holder if `tenure` is still the current one, so a successor can
    /// acquire at once. Returns whether it did. The term is kept.
    async fn release(&self, tenure: &Tenure) -> Result<bool>;

    /// Reads one election's lease; `None` if it was never acquired.
    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>>;

    /// Reads every election, or those of one namespace, ordered by key.
    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>>;

    /// Registers `member` or refreshes its heartbeat; the registration lapses
    /// `ttl` after this call unless refreshed.
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()>;

    /// [`heartbeat`](Self::heartbeat) then [`read`](Self::read) of the
    /// member's election: an idle follower's one regular call, so a waiting
    /// replica costs one request per lease lifetime. Stores that can do both
    /// in one request override this (Redis: one script; PostgreSQL and
    /// MariaDB 10.5 or newer: one statement); MySQL, older MariaDB and SQLite
    /// send the two statements side by side; etcd (and this default) one
    /// after the other. Either way, once it returns `Ok` the registration is
    /// written.
    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        self.heartbeat(member, ttl).await?;
        self.read(&member.key).await
    }

    /// Removes a member's registration. Returns whether there was one.
    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool>;

    /// Lists an election's members, live and lapsed, best successor first
    /// (highest priority, then longest-serving). With
    /// [`Capabilities::lease_vouches_for_holder`] the holder of the
    /// unexpired lease reads as live (see [`MemberRecord`]).
    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>>;

    /// [`read`](Self::read) and [`members`](Self::members) of one
    /// election, as a follower reads them when a push names its election:
    /// most often a release, after which the designated successor acquires
    /// at once. The members are `None` if their read failed (the lease's
    /// did not). The default reads both side by side; the SQL stores read
    /// them one after the other on one connection, which then takes the
    /// acquisition too, so the hand-over never waits for a new connection.
    async fn read_with_members(
        &self,
        key: &ElectionKey,
    ) -> Result<(Option<LeaseRecord>, Option<Vec<MemberRecord>>)> {
        let (rec, members) = tokio::join!(self.read(key), self.members(key));
        Ok((rec?, members.ok()))
    }

    /// The registrations of every election (in `namespace`, or in the
    /// whole store), each election's members in [`Self::members`]' order:
    /// what `tenure status` and the HTTP API read for a list of elections
    /// (through [`members_of`]). The SQL stores answer in one statement
    /// ([`Capabilities::list_members`]), including members of elections no
    /// one has acquired yet; the default reads [`Self::list`], then the
    /// members of each election listed.
    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        let mut all = Vec::new();
        for r in self.list(namespace).await? {
            all.extend(self.members(&r.key).await?);
        }
        Ok(all)
    }

    /// Deletes lapsed registrations, except, where
    /// [`Capabilities::lease_vouches_for_holder`], the one of the unexpired
    /// lease's holder (a leader sends no heartbeats there). Returns how many; a store that writes
    /// the reaps of concurrent calls with one statement (the SQL stores)
    /// returns how many that statement removed, for every call in it.
    async fn reap(&self, key: &ElectionKey) -> Result<u64>;

    /// The leader steps down in favour of `to`: clears the holder like a
    /// release, and for `window` lets only a transfer target acquire. One
    /// conditional write on `tenure`; returns whether it applied.
    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool>;

    /// Asks whoever leads `key` to hand over (used by `tenure resign`/`transfer`
    /// from any process): marks the live lease so its holder's next renewal
    /// fails and it steps down. Returns the marked lease, or `None` if nobody leads.
    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>>;

    /// The most recent terms of an election, newest first.
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>>;

    /// Waits until the bookkeeping queued by earlier calls (history, change
    /// notifications) has been written. Stores that write everything before
    /// returning need not override it. [`Elector::shutdown`](crate::Elector::shutdown)
    /// calls it, so that a process exiting right after shutting down does not
    /// lose the end of its last term.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Pushed change notifications, for stores that have them
    /// ([`Capabilities::push`]): each message names an election whose lease was
    /// acquired, released or handed over; `None` means "anything may have
    /// changed" (e.g. after the notification link reconnected). Followers and
    /// observers wake on them instead of waiting for their next poll.
    fn subscribe(&self) -> Option<Changes> {
        None
    }

    /// Asks to be woken when `key`, which a read just showed free, is
    /// acquired, on a store that does not push acquisitions to every
    /// subscriber ([`Capabilities::push_acquisitions`] is false) but can
    /// for the elections it is asked about (MySQL/MariaDB: an observer's
    /// doorbell, which the acquirer rings). While the returned
    /// [`AcquisitionWatch`] lives, an acquisition of `key` wakes this
    /// store's [`subscribe`](Self::subscribe)rs, as a pushed change does;
    /// best effort: a wake-up that does not come (an older acquirer, an
    /// account not allowed to ring, every doorbell slot taken) leaves the
    /// caller's slow poll to notice. `None` (the default): not offered.
    fn watch_acquisitions(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        let _ = key;
        None
    }

    /// A count of everything the push channel has delivered so far,
    /// including changes that wake nobody (etcd: every renewal rewrites its
    /// election's state key, and the watch sees it), or `None` if the store
    /// cannot tell. A follower of a store with [`Capabilities::push_expiry`]
    /// reads the lease only when this count stood still for a TTL: a
    /// channel that delivers the leader's renewals is alive, so the lease's
    /// end will be pushed too.
    fn push_activity(&self) -> Option<u64> {
        None
    }

    /// How this process's push channel to the store stands: followers read
    /// at a slow period instead of waiting for pushes while it is
    /// [`PushHealth::Down`], and `tenure status` shows it. The default is
    /// [`PushHealth::NotOffered`] for a store without
    /// [`Capabilities::push`] and [`PushHealth::Unreported`] otherwise.
    fn push_health(&self) -> PushHealth {
        if self.capabilities().push {
            PushHealth::Unreported {
                channel: "push".to_owned(),
            }
        } else {
            PushHealth::NotOffered
        }
    }

    /// The concrete store behind a [`DynStore`], for its own API (fenced
    /// writes, statistics); see `<dyn LeaseStore>::downcast_ref`.
    /// Stores of this crate return themselves; the default is `None`.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The store's run records, where it keeps them (every store of this
    /// crate does): named records per election, written by compare-and-set,
    /// for jobs that must run once (`tenure run --once`). A wrapper store
    /// forwards its inner store's.
    fn run_records(&self) -> Option<&dyn RunRecords> {
        None
    }
}

impl dyn LeaseStore {
    /// The concrete store behind a [`DynStore`], such as the one
    /// [`connect`] returns, if it is an `S`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::store::{self, memory::MemoryStore};
    /// let store = store::connect("memory://", &Default::default()).await?;
    /// assert!(store.downcast_ref::<MemoryStore>().is_some());
    /// # Ok(()) }
    /// ```
    pub fn downcast_ref<S: LeaseStore>(&self) -> Option<&S> {
        self.as_any()?.downcast_ref()
    }
}

/// A receiver of change notifications; see [`LeaseStore::subscribe`].
pub type Changes = tokio::sync::broadcast::Receiver<Option<ElectionKey>>;

/// Why a wait for a change ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A notification for a wanted election.
    Notified,
    /// One for every election: the push channel (re)opened or failed, and
    /// anything may have changed.
    Everyone,
    /// This receiver fell behind and notifications were dropped: one for a
    /// wanted election may have been among them.
    Lagged,
}

/// Waits for a notification that concerns `key` (or all keys); never resolves
/// without a subscription.
pub(crate) async fn changed(changes: &mut Option<Changes>, key: Option<&ElectionKey>) -> Woken {
    changed_matching(changes, |k| key.is_none_or(|key| key == k)).await
}

/// [`changed`] for the elections `wanted` accepts (a wake-all always counts).
pub(crate) async fn changed_matching(
    changes: &mut Option<Changes>,
    wanted: impl Fn(&ElectionKey) -> bool,
) -> Woken {
    let Some(rx) = changes.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(Some(k)) if !wanted(&k) => continue,
            Ok(Some(_)) => return Woken::Notified,
            Ok(None) => return Woken::Everyone,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return Woken::Lagged,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                *changes = None;
                return std::future::pending().await;
            }
        }
    }
}

/// A watch on the acquisitions of one free election, from
/// [`LeaseStore::watch_acquisitions`]: dropping it ends the watch.
pub struct AcquisitionWatch {
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl AcquisitionWatch {
    /// A watch that lasts while `guard` lives (for store implementations).
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        Self {
            _guard: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for AcquisitionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcquisitionWatch")
    }
}

/// A shared, type-erased store, as returned by [`connect`].
pub type DynStore = Arc<dyn LeaseStore>;

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        (**self).try_acquire(claim).await
    }
    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        (**self).renew(tenure, ttl).await
    }
    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        (**self).release(tenure).await
    }
    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        (**self).read(key).await
    }
    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        (**self).list(namespace).await
    }
    fn subscribe(&self) -> Option<Changes> {
        (**self).subscribe()
    }
    fn watch_acquisitions(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        (**self).watch_acquisitions(key)
    }
    fn push_activity(&self) -> Option<u64> {
        (**self).push_activity()
    }
    fn push_health(&self) -> PushHealth {
        (**self).push_health()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        (**self).as_any()
    }
    fn run_records(&self) -> Option<&dyn RunRecords> {
        (**self).run_records()
    }
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        (**self).heartbeat(member, ttl).await
    }
    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        (**self).heartbeat_and_read(member, ttl).await
    }
    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        (**self).leave(key, holder).await
    }
    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        (**self).members(key).await
    }
    async fn read_with_members(
        &self,
        key: &ElectionKey,
    ) -> Result<(Option<LeaseRecord>, Option<Vec<MemberRecord>>)> {
        (**self).read_with_members(key).await
    }
    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        (**self).list_members(namespace).await
    }
    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        (**self).reap(key).await
    }
    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        (**self).hand_over(tenure, to, window, reason).await
    }
    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        (**self).request_handover(key, to, window, reason).await
    }
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        (**self).history(key, limit).await
    }
    async fn flush(&self) -> Result<()> {
        (**self).flush().await
    }
}

/// Clamps a store-clock difference in microseconds to a non-negative duration.
pub(crate) fn remaining_from_us(expires_at_us: i64, now_us: i64) -> Duration {
    Duration::from_micros(expires_at_us.saturating_sub(now_us).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver that fell behind says so instead of passing for a
    /// notification: a leader must not read on it (see the leader's loop).
    #[tokio::test]
    async fn a_lagged_receiver_is_not_a_notification() {
        let (tx, rx) = tokio::sync::broadcast::channel(4);
        let mine = ElectionKey::new("default", "mine");
        let other = ElectionKey::new("default", "other");
        let mut changes = Some(rx);
        for _ in 0..10 {
            tx.send(Some(other.clone())).ok();
        }
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Lagged);
        let mut changes = Some(tx.subscribe());
        tx.send(Some(other.clone())).ok();
        tx.send(Some(mine.clone())).ok();
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Notified);
        tx.send(None).ok();
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Everyone);
    }
}
