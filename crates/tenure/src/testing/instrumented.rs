//! A wrapper around any store that counts the calls reaching it and can be
//! told to fail or hang, so tests can drive the elector's error paths and
//! count what it asks of a store without the store itself knowing about tests.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::store::{
    Acquire, Capabilities, Changes, Claim, DynStore, ElectionKey, Handover, HandoverReason,
    HistoryRecord, LeaseRecord, LeaseStore, Member, MemberRecord, RunRecord, RunRecords, Tenure,
};
use crate::store::{History, LeaseStoreExt, Membership, Wakeups};

/// The store operations [`Instrumented`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`LeaseStore::try_acquire`].
    Acquire,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::read`].
    Read,
    /// [`LeaseStore::list`].
    List,
    /// [`Membership::heartbeat`](crate::store::Membership::heartbeat).
    Heartbeat,
    /// [`Membership::heartbeat_and_read`](crate::store::Membership::heartbeat_and_read).
    HeartbeatAndRead,
    /// [`Membership::leave`](crate::store::Membership::leave).
    Leave,
    /// [`Membership::members`](crate::store::Membership::members).
    Members,
    /// [`Membership::reap`](crate::store::Membership::reap).
    Reap,
    /// [`LeaseStore::hand_over`].
    HandOver,
    /// [`LeaseStore::request_handover`].
    RequestHandover,
    /// [`History::history`](crate::store::History::history).
    History,
    /// [`History::flush`](crate::store::History::flush).
    Flush,
    /// [`Membership::list_members`](crate::store::Membership::list_members).
    ListMembers,
    /// [`RunRecords::get`].
    RunGet,
    /// [`RunRecords::put`].
    RunPut,
    /// [`RunRecords::list`].
    RunList,
    /// [`LeaseStore::proclaim`].
    Proclaim,
}

const OPS: usize = 19;

/// Wraps a store: delegates every call, counts calls per [`Op`], and has
/// fault switches.
///
/// Calls are counted when they reach the wrapper, before any fault applies.
/// Its [run records](LeaseStore::run_records) are the inner store's, counted
/// and faulted the same way.
///
/// The faults apply to every call that talks to the store (not to
/// [`LeaseStore::capabilities`], [`LeaseStore::describe`],
/// [`Wakeups::subscribe`](crate::store::Wakeups::subscribe) or [`History::flush`](crate::store::History::flush)): a call first hangs
/// if [`Self::set_hang`] is on, else fails if [`Self::set_unavailable`] is on,
/// and only then reaches the inner store.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tenure::store::{memory::MemoryStore, Claim, ElectionKey, LeaseStore};
/// use tenure::testing::Instrumented;
/// let store = Instrumented::new(Arc::new(MemoryStore::new()));
/// let claim = Claim { key: ElectionKey::new("default", "cron"), holder: "a#1".into(),
///                     metadata: String::new(), ttl: Duration::from_secs(10) };
/// store.set_unavailable(true);
/// assert!(store.try_acquire(&claim).await.is_err());
/// store.set_unavailable(false);
/// assert!(store.try_acquire(&claim).await.is_ok());
/// assert_eq!(store.acquires(), 2);
/// # }
/// ```
#[derive(Debug)]
pub struct Instrumented {
    inner: DynStore,
    calls: [AtomicU64; OPS],
    unavailable: AtomicBool,
    hang: AtomicBool,
    hang_members: AtomicBool,
    acquire_reply_delay_ms: AtomicU64,
    /// Calls of each op still to fail ([`Self::fail_next`]).
    failing: [AtomicU64; OPS],
}

impl Instrumented {
    /// Wraps `inner`, with no fault switched on.
    pub fn new(inner: DynStore) -> Self {
        Self {
            inner,
            calls: Default::default(),
            unavailable: AtomicBool::new(false),
            hang: AtomicBool::new(false),
            hang_members: AtomicBool::new(false),
            acquire_reply_delay_ms: AtomicU64::new(0),
            failing: Default::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &DynStore {
        &self.inner
    }

    /// How many calls of `op` reached the wrapper so far.
    pub fn calls(&self, op: Op) -> u64 {
        self.calls[op as usize].load(Ordering::SeqCst)
    }

    /// Calls of every kind so far: the requests this store was asked to make.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::SeqCst)).sum()
    }

    /// Acquisition attempts so far (`calls(Op::Acquire)`).
    pub fn acquires(&self) -> u64 {
        self.calls(Op::Acquire)
    }

    /// While set, every call fails with [`Error::Unavailable`].
    pub fn set_unavailable(&self, on: bool) {
        self.unavailable.store(on, Ordering::SeqCst);
    }

    /// While set, every call that starts never completes (a blackholed network).
    pub fn set_hang(&self, on: bool) {
        self.hang.store(on, Ordering::SeqCst);
    }

    /// While set, member listing and reaping never complete (the lease calls
    /// still work): a slow bookkeeping query.
    pub fn set_hang_members(&self, on: bool) {
        self.hang_members.store(on, Ordering::SeqCst);
    }

    /// Acquisitions commit at once but answer only after `delay` (real time):
    /// a slow reply on the way back. Zero turns it off.
    pub fn set_acquire_reply_delay(&self, delay: Duration) {
        self.acquire_reply_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Makes the next `n` calls of `op` fail as [`Self::set_unavailable`]
    /// does, without reaching the store (a connection the server just
    /// closed, found broken by the statement sent on it).
    pub fn fail_next(&self, op: Op, n: u64) {
        self.failing[op as usize].store(n, Ordering::SeqCst);
    }

    /// Counts a call of `op`, then applies the hang and unavailable faults.
    async fn enter(&self, op: Op) -> Result<()> {
        self.calls[op as usize].fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let failing = self.failing[op as usize]
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing || self.unavailable.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                source: None,
                store: self.inner.describe(),
                reason: "fault injected".into(),
            });
        }
        Ok(())
    }

    /// [`Self::enter`], then the member-listing hang.
    async fn enter_members(&self, op: Op) -> Result<()> {
        self.enter(op).await?;
        if self.hang_members.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for Instrumented {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }

    fn run_records(&self) -> Option<&dyn RunRecords> {
        // Offered where the inner store offers them, through this wrapper.
        self.inner.run_records().map(|_| self as &dyn RunRecords)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        self.enter(Op::Acquire).await?;
        let result = self.inner.try_acquire(claim).await;
        let delay = self.acquire_reply_delay_ms.load(Ordering::SeqCst);
        if delay > 0 && matches!(result, Ok(Acquire::Acquired(_))) {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        result
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.enter(Op::Renew).await?;
        self.inner.renew(tenure, ttl).await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.enter(Op::Release).await?;
        self.inner.release(tenure).await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        self.enter(Op::Read).await?;
        self.inner.read(key).await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        self.enter(Op::List).await?;
        self.inner.list(namespace).await
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        self.enter(Op::HandOver).await?;
        self.inner.hand_over(tenure, to, window, reason).await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        self.enter(Op::RequestHandover).await?;
        self.inner.request_handover(key, to, window, reason).await
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        self.enter(Op::Proclaim).await?;
        self.inner.proclaim(tenure, metadata).await
    }

    fn membership(&self) -> Option<&dyn Membership> {
        // Offered where the inner store offers it, through this wrapper.
        self.inner.membership().map(|_| self as &dyn Membership)
    }

    fn history_log(&self) -> Option<&dyn History> {
        // Offered where the inner store offers it, through this wrapper.
        self.inner.history_log().map(|_| self as &dyn History)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        // Offered where the inner store offers it, through this wrapper.
        self.inner.wakeups().map(|_| self as &dyn Wakeups)
    }
}

#[async_trait]
impl Membership for Instrumented {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.enter(Op::Heartbeat).await?;
        self.inner.heartbeat(member, ttl).await
    }

    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        self.enter(Op::HeartbeatAndRead).await?;
        self.inner.heartbeat_and_read(member, ttl).await
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        self.enter(Op::Leave).await?;
        self.inner.leave(key, holder).await
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        self.enter_members(Op::Members).await?;
        self.inner.members(key).await
    }

    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        self.enter_members(Op::ListMembers).await?;
        self.inner.list_members(namespace).await
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.enter_members(Op::Reap).await?;
        self.inner.reap(key).await
    }
}

#[async_trait]
impl History for Instrumented {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.enter(Op::History).await?;
        self.inner.history(key, limit).await
    }

    async fn flush(&self) -> Result<()> {
        self.calls[Op::Flush as usize].fetch_add(1, Ordering::SeqCst);
        self.inner.flush().await
    }
}

impl Wakeups for Instrumented {
    fn subscribe(&self) -> Option<Changes> {
        self.inner.subscribe()
    }

    fn watch_acquisitions(
        &self,
        key: &crate::store::ElectionKey,
    ) -> Option<crate::store::AcquisitionWatch> {
        self.inner.watch_acquisitions(key)
    }

    fn push_activity(&self) -> Option<u64> {
        self.inner.push_activity()
    }

    fn push_health(&self) -> crate::store::PushHealth {
        self.inner.push_health()
    }
}

impl Instrumented {
    /// The inner store's run records; [`Self::run_records`] offers them only
    /// where there are some.
    fn inner_runs(&self) -> Result<&dyn RunRecords> {
        self.inner.run_records().ok_or_else(|| Error::Unsupported {
            store: self.inner.describe(),
            what: "run records".into(),
        })
    }
}

#[async_trait]
impl RunRecords for Instrumented {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        self.enter(Op::RunGet).await?;
        self.inner_runs()?.get(key, name).await
    }

    async fn put(
        &self,
        key: &ElectionKey,
        name: &str,
        value: &str,
        expected: u64,
        keep: Duration,
    ) -> Result<Option<RunRecord>> {
        self.enter(Op::RunPut).await?;
        self.inner_runs()?
            .put(key, name, value, expected, keep)
            .await
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        self.enter(Op::RunList).await?;
        self.inner_runs()?.list(key, limit).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::memory::MemoryStore;

    /// A wrapped store offers its run records, counted and faulted like
    /// every other call.
    #[tokio::test]
    async fn run_records_are_counted_and_faulted() {
        let store = Instrumented::new(Arc::new(MemoryStore::new()));
        let runs = store
            .run_records()
            .expect("the memory store keeps run records");
        let key = ElectionKey::new("default", "cron");
        let keep = Duration::from_secs(60);
        assert!(runs.put(&key, "x", "v", 0, keep).await.unwrap().is_some());
        store.set_unavailable(true);
        assert!(runs.get(&key, "x").await.unwrap_err().is_retryable());
        store.set_unavailable(false);
        assert_eq!(runs.list(&key, 10).await.unwrap().len(), 1);
        let calls = [Op::RunPut, Op::RunGet, Op::RunList].map(|op| store.calls(op));
        assert_eq!(calls, [1, 1, 1]);
    }
}
