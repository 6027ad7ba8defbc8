//! The etcd v3 store (`etcd://host:port[,host:port...]`, feature `etcd`).
//!
//! etcd has no clock usable inside a transaction; what it has is *leases*,
//! whose expiry the etcd leader judges. So expiry here is etcd lease expiry
//! (the store's clock), and every decision is one transaction.
//!
//! Keys, under `<prefix>` (`StoreOptions::table_prefix`, default `tenure_`;
//! namespace and election are escaped so `/` in a name is unambiguous):
//!
//! | key | lease | value |
//! |---|---|---|
//! | `<p>/lease/<ns>/<election>` | the tenure's own lease | the holder id; its `create_revision` is the term |
//! | `<p>/state/<ns>/<election>` | none | JSON: last term, holder, metadata, reasons, informational times |
//! | `<p>/handover/<ns>/<election>` | the holder's lease (a request) or a fresh lease of the window (after a hand-over) | JSON: target, reason |
//! | `<p>/member/<ns>/<election>/<holder>` | none (its liveness is a lease named in the value) | JSON: metadata, priority, times |
//! | `<p>/history/<ns>/<election>/<term:020>` | none | JSON: one term |
//! | `<p>/run/<ns>/<election>/<name>` | one of its own per write, TTL `keep` (whole seconds) | JSON: a run record's value and write time (`runs.rs`); its etcd version is the record's |
//!
//! * **One lease per process** (per store instance and lease length, whole
//!   seconds): every tenure and member registration of that length is on it,
//!   and one keep-alive round serves every renewal of a renew instant (the
//!   electors renew on a shared grid; a round waits 10 ms to gather them).
//!   A key whose elector stopped renewing without releasing (shutdown without
//!   release, a stuck task) would live as long as any other election of the
//!   process renews, so the store tracks, per tenure, the start of its last
//!   acquire/renew (monotonic clock) and a **sweeper** (every quarter of the
//!   shortest TTL held) deletes, by the release transaction (recording the end
//!   as `expired`), any tenure not renewed for longer than its TTL; its
//!   elector's deadline (`t0 + ttl·(1−drift)`) passed before that. Member
//!   registrations not heartbeated within their TTL are marked lapsed the
//!   same way. If the process dies, the lease expires and takes every key.
//! * **Acquire**: the process lease is kept alive (or granted) after the
//!   call started, so the key lives at least `ttl` from the caller's `t0`; then one
//!   transaction: the lease key must not exist (`create_revision == 0`) and
//!   the state and hand-over keys must be as read (the hand-over key admitting
//!   us); it creates the lease key on that lease. The **term is the revision
//!   of that transaction**, so terms increase strictly across the whole
//!   cluster but are not dense.
//! * **Renew**: a nested transaction comparing the lease key's
//!   `create_revision` with the term, its value with the holder and lease and
//!   the hand-over key's absence (and then rewriting the state's informational
//!   times), concurrently with a keep-alive sent after the call started; both
//!   must succeed. The key then lives at least `ttl` past the call's start.
//!   The nested transactions of one renew instant travel in one transaction
//!   (up to 100 each), judged one by one.
//! * **Times** other than expiry (`acquired_at_us`, `renewed_at_us`,
//!   `expires_at_us`, member heartbeats, history times) come from the client's
//!   clock and are informational only; no decision compares them.
//!   `remaining` comes from the lease's TTL in etcd (whole seconds, rounded
//!   down, capped at the holder's TTL).
//!
//! # URLs
//!
//! `etcd://[user:password@]host:port[,host:port...]`; `etcds://...` for TLS.
//! With TLS the server's certificate and host name are always verified:
//! `?cacert=/path/ca.pem` trusts that CA instead of the system's roots, and
//! `&cert=/path/client.pem&key=/path/client.key` presents a client
//! certificate (etcdctl's `--cacert`, `--cert` and `--key`). A user and
//! password log in with etcd's authentication (over TLS, the password is
//! encrypted on the wire); they never appear in errors or logs.

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
    push: Arc<crate::store::push_health::PushMonitor>,
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
    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        self.inner.read(key).await
    }
    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        self.inner.list(namespace).await
    }
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
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.inner.history(key, limit).await
    }
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
