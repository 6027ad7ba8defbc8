#![doc = include_str!("docs.md")]

mod acquire;
mod batch;
mod clock;
mod connect;
mod end;
mod endpoints;
mod errors;
mod fenced;

/// The etcd client crate, for the operations of [`EtcdStore::fenced_txn`].
pub use etcd_client;
mod handover;
mod history;
mod keys;
mod lease;
mod members;
mod proclaim;
mod read;
mod renew;
mod retry;
mod runs;
mod sweeper;
mod tls;
mod url;
mod values;
mod watch;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::Client;
use tokio::sync::broadcast;

use self::lease::{ProcessLease, SECOND};
use self::sweeper::Held;
use super::{
    Acquire, Capabilities, Changes, Claim, ElectionKey, Handover, HandoverReason, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, Tenure,
};
use crate::error::Result;
use crate::store::{History, Membership, Wakeups};

/// The etcd store; see the [module documentation](self).
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    prefix: String,
    described: String,
    history_retention: u64,
    /// The process leases, one per lease length (whole seconds).
    leases: Mutex<HashMap<i64, Arc<ProcessLease>>>,
    /// What this store holds on those leases, for the sweeper.
    held: Mutex<Held>,
    changes: broadcast::Sender<Option<ElectionKey>>,
    /// Watch events received so far, including those that wake nobody (the
    /// state key every renewal rewrites): the watch's sign of life.
    activity: Arc<std::sync::atomic::AtomicU64>,
    /// How the watch stands.
    push: Arc<crate::store::util::push_health::PushMonitor>,
    watcher: tokio::task::JoinHandle<()>,
    endpoints: Option<tokio::task::JoinHandle<()>>,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// When this process first saw an expired lease (lease key gone, state
    /// still naming the holder), per election and term: followers measure the
    /// succession grace from there, since etcd does not say when a lease expired.
    freed_seen: Mutex<HashMap<(ElectionKey, u64), i64>>,
    /// Renewals, heartbeats and reaps' reads of one instant, gathered.
    batches: batch::Batches,
    /// Heartbeats that read the member key first
    /// (`tenure_store_statements_total`).
    heartbeat_reads: metrics::Counter,
    /// Keep-alive rounds and lease grants of all the process leases
    /// (`tenure_store_statements_total`).
    keep_alives: metrics::Counter,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("store", &self.inner.described)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("store", &self.described)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watcher.abort();
        if let Some(t) = &self.endpoints {
            t.abort();
        }
        if let Some(t) = self
            .sweeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
    }
}

impl EtcdStore {}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn run_records(&self) -> Option<&dyn super::RunRecords> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: true,
            push_acquisitions: true,
            fenced_transactions: false,
            // One keep-alive of the process lease serves every renewal of a
            // renew instant, and one transaction carries the checks of up to
            // 100 of them (each judged in a nested transaction of its own).
            batch_renew: true,
            list_members: false,
            durable: true,
            min_ttl: SECOND,
            sparse_terms: true,
            // etcd deletes the lease key when the process lease expires, and
            // the sweeper deletes a tenure its live process stopped renewing:
            // the watch sees both, as it sees a release.
            push_expiry: true,
            // Watches ride the one session (or gRPC channel) every
            // process holds anyway.
            push_holds_a_connection: false,
            reads_at_expiry: false,
            // A member's heartbeat is a keep-alive of the member lease its
            // registration names, and `members` dates it from that lease:
            // the leader keeps heartbeating (one keep-alive per 1.5 TTLs).
            lease_vouches_for_holder: false,
        }
    }

    fn describe(&self) -> String {
        self.inner.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        self.inner.try_acquire(claim).await
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.inner.renew(tenure, ttl).await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.inner.release(tenure).await
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        self.inner.proclaim(tenure, metadata).await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        self.inner.read(key).await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        self.inner.list(namespace).await
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        crate::store::handover_window_us(window)?;
        self.inner
            .hand_over(tenure, to, window, reason.as_str())
            .await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        crate::store::handover_window_us(window)?;
        self.inner
            .request_handover(key, to, window, reason.as_str())
            .await
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        Some(self)
    }
}

#[async_trait]
impl Membership for EtcdStore {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.inner.heartbeat(member, ttl).await
    }

    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        self.inner.heartbeat_and_read(member, ttl).await
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        self.inner.leave(key, holder).await
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        self.inner.members(key).await
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.inner.reap(key).await
    }
}

#[async_trait]
impl History for EtcdStore {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.inner.history(key, limit).await
    }
}

impl Wakeups for EtcdStore {
    fn subscribe(&self) -> Option<Changes> {
        Some(self.inner.changes.subscribe())
    }

    fn push_activity(&self) -> Option<u64> {
        Some(self.inner.activity.load(Ordering::Relaxed))
    }

    fn push_health(&self) -> crate::store::PushHealth {
        self.inner.push.health()
    }
}
