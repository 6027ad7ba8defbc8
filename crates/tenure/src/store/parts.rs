//! The parts a store may offer beside the lease, each returned by its
//! [`LeaseStore`] accessor: the member list, the term history and pushed
//! wake-ups. Callers reach them through [`LeaseStoreExt`](crate::store::LeaseStoreExt),
//! which does without a part the store does not offer.

use std::time::Duration;

use async_trait::async_trait;

use super::contract::LeaseStore;
use super::record::{ElectionKey, HistoryRecord, LeaseRecord, Member, MemberRecord};
use super::util::push_health::PushHealth;
use super::wake::{AcquisitionWatch, Changes};
use crate::error::Result;

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
