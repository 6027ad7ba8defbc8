//! [`LeaseStoreExt`]: every part of a store called through the store
//! itself, doing without a part the store does not offer; and the member
//! reads built on it.

use std::time::Duration;

use async_trait::async_trait;

use super::contract::LeaseStore;
use super::record::{ElectionKey, HistoryRecord, LeaseRecord, Member, MemberRecord};
use super::util::push_health::PushHealth;
use super::wake::{AcquisitionWatch, Changes};
use crate::error::Result;

/// The parts of a store ([`Membership`](crate::store::Membership),
/// [`History`](crate::store::History), [`Wakeups`](crate::store::Wakeups))
/// called through the store itself, for every [`LeaseStore`].
///
/// Where the store does not offer the part, each method says what doing
/// without it means: no member list (heartbeats are dropped, every read
/// finds no members, so any candidate may succeed), no history (empty), no
/// wake-ups (followers wake at the times their reads set).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use tenure::store::{ElectionKey, LeaseStoreExt};
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// assert!(store.members(&ElectionKey::new("default", "nightly")).await?.is_empty());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LeaseStoreExt: LeaseStore {
    /// [`Membership::heartbeat`](crate::store::Membership::heartbeat); nothing without a member list.
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        match self.membership() {
            Some(m) => m.heartbeat(member, ttl).await,
            None => Ok(()),
        }
    }

    /// [`Membership::heartbeat_and_read`](crate::store::Membership::heartbeat_and_read);
    /// only the read without a member list.
    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        match self.membership() {
            Some(m) => m.heartbeat_and_read(member, ttl).await,
            None => self.read(&member.key).await,
        }
    }

    /// [`Membership::leave`](crate::store::Membership::leave); `false` without a member list.
    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        match self.membership() {
            Some(m) => m.leave(key, holder).await,
            None => Ok(false),
        }
    }

    /// [`Membership::members`](crate::store::Membership::members); none without a member list.
    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        match self.membership() {
            Some(m) => m.members(key).await,
            None => Ok(Vec::new()),
        }
    }

    /// [`Membership::read_with_members`](crate::store::Membership::read_with_members);
    /// the read and no members without a member list.
    async fn read_with_members(
        &self,
        key: &ElectionKey,
    ) -> Result<(Option<LeaseRecord>, Option<Vec<MemberRecord>>)> {
        match self.membership() {
            Some(m) => m.read_with_members(key).await,
            None => Ok((self.read(key).await?, Some(Vec::new()))),
        }
    }

    /// [`Membership::list_members`](crate::store::Membership::list_members); none without a member list.
    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        match self.membership() {
            Some(m) => m.list_members(namespace).await,
            None => Ok(Vec::new()),
        }
    }

    /// [`Membership::reap`](crate::store::Membership::reap); 0 without a member list.
    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        match self.membership() {
            Some(m) => m.reap(key).await,
            None => Ok(0),
        }
    }

    /// [`History::history`](crate::store::History::history); empty without a history.
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        match self.history_log() {
            Some(h) => h.history(key, limit).await,
            None => Ok(Vec::new()),
        }
    }

    /// [`History::flush`](crate::store::History::flush); nothing to wait for without a history.
    async fn flush(&self) -> Result<()> {
        match self.history_log() {
            Some(h) => h.flush().await,
            None => Ok(()),
        }
    }

    /// [`Wakeups::subscribe`](crate::store::Wakeups::subscribe); `None` without wake-ups.
    fn subscribe(&self) -> Option<Changes> {
        self.wakeups()?.subscribe()
    }

    /// [`Wakeups::watch_acquisitions`](crate::store::Wakeups::watch_acquisitions);
    /// `None` without wake-ups.
    fn watch_acquisitions(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        self.wakeups()?.watch_acquisitions(key)
    }

    /// [`Wakeups::push_activity`](crate::store::Wakeups::push_activity); `None` without wake-ups.
    fn push_activity(&self) -> Option<u64> {
        self.wakeups()?.push_activity()
    }

    /// [`Wakeups::push_health`](crate::store::Wakeups::push_health). Without
    /// wake-ups: [`PushHealth::NotOffered`], or [`PushHealth::Unreported`] if
    /// the store says it pushes
    /// ([`Capabilities::push`](crate::store::Capabilities::push)) but cannot tell how.
    fn push_health(&self) -> PushHealth {
        match self.wakeups() {
            Some(w) => w.push_health(),
            None if self.capabilities().push => PushHealth::Unreported {
                channel: "push".to_owned(),
            },
            None => PushHealth::NotOffered,
        }
    }
}

impl<S: LeaseStore + ?Sized> LeaseStoreExt for S {}

/// The members of each election of `records` (read by
/// [`LeaseStore::list`] for `namespace`): one request where the store
/// lists members at once ([`Capabilities::list_members`](crate::store::Capabilities::list_members)) and there is more
/// than one election, else a [`Membership::members`](crate::store::Membership::members) read per election.
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

/// Groups [`Membership::list_members`](crate::store::Membership::list_members)' answer by election, keeping each
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
