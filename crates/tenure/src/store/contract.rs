//! The storage contract: the lease ([`LeaseStore`]), the parts a store may
//! offer beside it ([`Membership`], [`History`], [`Wakeups`]), each returned
//! by its [`LeaseStore`] accessor, and what a store can do ([`Capabilities`]).
//! Callers reach the parts through [`LeaseStoreExt`](crate::store::LeaseStoreExt),
//! which does without a part the store does not offer.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::reason::{Handover, HandoverReason};
use super::record::{
    Acquire, Claim, ElectionKey, HistoryRecord, LeaseRecord, Member, MemberRecord, Tenure,
};
use super::runs::RunRecords;
use super::util::push_health::PushHealth;
use super::wake::{AcquisitionWatch, Changes};
use crate::error::Result;

/// What a store can do, in the manner of opendal's `Capability`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Changes are pushed to waiting candidates (LISTEN/NOTIFY, pub/sub, watch).
    pub push: bool,
    /// Acquisitions of a free election are pushed too, so an observer need
    /// not poll elections nobody holds. MySQL/MariaDB's named locks signal
    /// only a leader letting go; there an observer asks for the acquisitions
    /// of the free elections it watches ([`Wakeups::watch_acquisitions`](crate::store::Wakeups::watch_acquisitions)).
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
    /// [`Membership::list_members`](crate::store::Membership::list_members) answers in one request (the SQL stores);
    /// otherwise it reads each election's members, and a caller that has
    /// the elections already reads them itself ([`members_of`](crate::store::members_of)).
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
    /// only when [`Wakeups::push_activity`](crate::store::Wakeups::push_activity) shows the push channel silent
    /// for a TTL. Never a safety matter: acquisitions are the same
    /// compare-and-set either way.
    pub push_expiry: bool,
    /// [`Membership::members`](crate::store::Membership::members) and [`Membership::list_members`](crate::store::Membership::list_members) count the
    /// holder of the election's unexpired lease as a live member heard from
    /// at its last renewal, whatever its own registration says (see
    /// [`MemberRecord`](crate::store::MemberRecord)): holding the lease proves it alive, so a leader
    /// sends no member heartbeats while it leads, only its renewals. Where
    /// false (etcd, ZooKeeper: their registrations live on their own leases
    /// and sessions) the leader keeps heartbeating. [`Membership::reap`](crate::store::Membership::reap)
    /// then never deletes the holder's registration. Never a safety matter:
    /// membership only orders successors.
    pub lease_vouches_for_holder: bool,
    /// A process's subscription ([`Wakeups::subscribe`](crate::store::Wakeups::subscribe))
    /// holds a database connection while anything in the process
    /// subscribes (PostgreSQL's `LISTEN` connection, MySQL/MariaDB's
    /// named-lock waits). Electors then subscribe only while they lead or
    /// are the designated successor, the ones a push must reach at once; the
    /// other followers read at the lease's expiry and hold no connection in
    /// between, so a fleet of replicas costs the database a few connections
    /// rather than one or more each.
    pub push_holds_a_connection: bool,
    /// Nothing pushes, and every read costs the server a connection
    /// (PostgreSQL through a pooler in transaction mode without a direct
    /// `push_url`): the two followers first in line read every tenth of a
    /// TTL and the others at the lease's expiry, no sooner than a TTL after
    /// their last read (spread over a quarter of a TTL after that), rather
    /// than every poll period. A release then
    /// reaches the designated successor within a tenth of a TTL instead of
    /// milliseconds, and a transfer its target at the target's next read
    /// (up to 1.25 TTLs for one not first in line).
    pub reads_at_expiry: bool,
}

/// The storage contract: the lease itself.
///
/// Every method is one round trip's worth of work and decides with one atomic
/// conditional write judged by rows matched; expiry is judged by the store's clock
/// inside that write. What else a store keeps is offered as parts, each a
/// trait of its own that the store returns when it has it: the member list
/// ([`Membership`]), the term history ([`History`]), pushed wake-ups
/// ([`Wakeups`]) and run records ([`RunRecords`]). The elector and the CLI
/// call them through [`LeaseStoreExt`], which does without a part the store
/// does not offer. Implementations must pass `tenure::testing`'s conformance
/// suite (feature `conformance`), which checks the lease and every part the
/// store offers.
///
/// [`LeaseStoreExt`]: crate::store::LeaseStoreExt
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

    /// Replaces the metadata of `tenure` while it holds the lease unexpired
    /// (etcd's `Proclaim`): one conditional write that changes nothing else
    /// (not the term, not the expiry the holder counts on). Returns whether
    /// it applied; `false` once the tenure is over. Observers see the new
    /// metadata at their next read. Every store of this crate has it; the
    /// default answers [`Error::Unsupported`](crate::Error::Unsupported).
    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        let _ = (tenure, metadata);
        Err(crate::error::Error::Unsupported {
            store: self.describe(),
            what: "changing a leader's metadata (proclaim): hand the lease over to a \
                   candidate built with the new metadata instead"
                .to_string(),
        })
    }

    /// The store's member list, where it keeps one (every store of this
    /// crate but a wrapper's choice): registrations from which successors
    /// are chosen. Without it, candidates send no heartbeats and any of
    /// them may succeed a leader.
    fn membership(&self) -> Option<&dyn Membership> {
        None
    }

    /// The store's term history, where it keeps one.
    fn history_log(&self) -> Option<&dyn History> {
        None
    }

    /// The store's pushed wake-ups, where it has them. Without them,
    /// followers and observers wake only at the times their reads set.
    fn wakeups(&self) -> Option<&dyn Wakeups> {
        None
    }

    /// The store's run records, where it keeps them (every store of this
    /// crate does): named records per election, written by compare-and-set,
    /// for jobs that must run once (`tenure run --once`). A wrapper store
    /// forwards its inner store's.
    fn run_records(&self) -> Option<&dyn RunRecords> {
        None
    }

    /// The concrete store behind a [`DynStore`], for its own API (fenced
    /// writes, statistics); see `<dyn LeaseStore>::downcast_ref`.
    /// Stores of this crate return themselves; the default is `None`.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

impl dyn LeaseStore {
    /// The concrete store behind a [`DynStore`], such as the one
    /// [`connect`](crate::store::connect) returns, if it is an `S`.
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

/// A shared, type-erased store, as returned by [`connect`](crate::store::connect).
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
    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        (**self).proclaim(tenure, metadata).await
    }
    fn membership(&self) -> Option<&dyn Membership> {
        (**self).membership()
    }
    fn history_log(&self) -> Option<&dyn History> {
        (**self).history_log()
    }
    fn wakeups(&self) -> Option<&dyn Wakeups> {
        (**self).wakeups()
    }
    fn run_records(&self) -> Option<&dyn RunRecords> {
        (**self).run_records()
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        (**self).as_any()
    }
}

/// The member list: candidates' registrations, from which successors are
/// chosen ([`LeaseStore::membership`]).
///
/// Never a safety matter: membership only orders successors. The three
/// provided methods combine the others; a store that does them in fewer
/// requests overrides them.
#[async_trait]
pub trait Membership: LeaseStore {
    /// Registers `member` or refreshes its heartbeat; the registration lapses
    /// `ttl` after this call unless refreshed.
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()>;

    /// Removes a member's registration. Returns whether there was one.
    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool>;

    /// Lists an election's members, live and lapsed, best successor first
    /// (highest priority, then longest-serving). With
    /// [`Capabilities::lease_vouches_for_holder`](crate::store::Capabilities::lease_vouches_for_holder)
    /// the holder of the unexpired lease reads as live (see [`MemberRecord`]).
    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>>;

    /// Deletes lapsed registrations, except, where
    /// [`Capabilities::lease_vouches_for_holder`](crate::store::Capabilities::lease_vouches_for_holder),
    /// the one of the unexpired lease's holder (a leader sends no heartbeats
    /// there). Returns how many; a store that writes the reaps of concurrent
    /// calls with one statement (the SQL stores) returns how many that
    /// statement removed, for every call in it.
    async fn reap(&self, key: &ElectionKey) -> Result<u64>;

    /// [`heartbeat`](Self::heartbeat) then [`read`](LeaseStore::read) of the
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

    /// [`read`](LeaseStore::read) and [`members`](Self::members) of one
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
    /// (through [`members_of`](crate::store::members_of)). The SQL stores
    /// answer in one statement
    /// ([`Capabilities::list_members`](crate::store::Capabilities::list_members)),
    /// including members of elections no one has acquired yet; the default
    /// reads [`list`](LeaseStore::list), then the members of each election
    /// listed.
    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        let mut all = Vec::new();
        for r in self.list(namespace).await? {
            all.extend(self.members(&r.key).await?);
        }
        Ok(all)
    }
}

/// The term history: who held each term, why it began and ended
/// ([`LeaseStore::history_log`]).
#[async_trait]
pub trait History: Send + Sync {
    /// The most recent terms of an election, newest first.
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>>;

    /// Waits until the bookkeeping queued by earlier calls (history, and the
    /// change notifications queued with it) has been written. Stores that
    /// write everything before returning need not override it.
    /// [`Elector::shutdown`](crate::Elector::shutdown) calls it, so that a
    /// process exiting right after shutting down does not lose the end of
    /// its last term.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// Pushed wake-ups: followers and observers wake when a lease changes
/// hands instead of at the time their last read set
/// ([`LeaseStore::wakeups`]). Never a safety matter: every wake-up is
/// followed by a read, and every decision is the lease's own compare-and-set.
pub trait Wakeups: Send + Sync {
    /// Change notifications, where the store has them
    /// ([`Capabilities::push`](crate::store::Capabilities::push)): each message
    /// names an election whose lease was acquired, released or handed over;
    /// `None` means "anything may have changed" (e.g. after the notification
    /// link reconnected).
    fn subscribe(&self) -> Option<Changes>;

    /// Asks to be woken when `key`, which a read just showed free, is
    /// acquired, on a store that does not push acquisitions to every
    /// subscriber
    /// ([`Capabilities::push_acquisitions`](crate::store::Capabilities::push_acquisitions)
    /// is false) but can for the elections it is asked about (MySQL/MariaDB:
    /// an observer's doorbell, which the acquirer rings). While the returned
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
    /// cannot tell. A follower of a store with
    /// [`Capabilities::push_expiry`](crate::store::Capabilities::push_expiry)
    /// reads the lease only when this count stood still for a TTL: a
    /// channel that delivers the leader's renewals is alive, so the lease's
    /// end will be pushed too.
    fn push_activity(&self) -> Option<u64> {
        None
    }

    /// How this process's push channel to the store stands: followers read
    /// at a slow period instead of waiting for pushes while it is
    /// [`PushHealth::Down`], and `tenure status` shows it.
    fn push_health(&self) -> PushHealth;
}
