//! What this store holds on its process leases, and the sweeper that deletes
//! what its electors stopped renewing.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::end::End;
use super::keys::seg;
use super::lease::{ProcessLease, SECOND};
use super::values::MemberValue;
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, Tenure};

/// Everything this store keeps on its process leases. A key on a shared lease
/// lives as long as *any* election of the process renews, so each one is
/// tracked here and deleted by the sweeper once its own renewals stop.
#[derive(Default)]
pub(super) struct Held {
    /// Tenures we acquired, by (election, term).
    pub(super) tenures: HashMap<(ElectionKey, u64), HeldTenure>,
    /// Acquisitions whose transaction was (or may have been) sent but whose
    /// outcome we do not know (an error, or a caller that gave up).
    pub(super) pending: HashMap<(ElectionKey, String), PendingAcquire>,
    /// Acquisitions in progress, by (election, holder).
    acquiring: HashMap<(ElectionKey, String), usize>,
    /// Member registrations, by (election, holder).
    pub(super) members: HashMap<(ElectionKey, String), HeldMember>,
}

pub(super) struct HeldTenure {
    pub(super) holder: String,
    pub(super) lease: Arc<ProcessLease>,
    /// The lease the key was created on.
    pub(super) lease_id: i64,
    pub(super) ttl: Duration,
    /// Start of the last acquire/renew call plus its TTL (monotonic clock):
    /// the elector's own deadline is before this, so past it nobody believes
    /// in this tenure and the sweeper may delete its key.
    pub(super) sweep_after: Instant,
    /// The state the acquisition wrote: renewals rewrite it with their times.
    pub(super) state: super::values::State,
}

pub(super) struct PendingAcquire {
    pub(super) lease_id: i64,
    pub(super) ttl: Duration,
    pub(super) sweep_after: Instant,
}

pub(super) struct HeldMember {
    pub(super) ttl: Duration,
    pub(super) sweep_after: Instant,
    /// The member key's revision as our last heartbeat wrote it (0: none yet).
    pub(super) mod_rev: i64,
    /// When the registration was first written (kept across heartbeats).
    pub(super) joined_at_us: i64,
    /// The process lease the registration names (0: none written yet). While
    /// it is the lease heartbeats keep alive, a heartbeat is that keep-alive
    /// alone: the key needs no rewrite.
    pub(super) lease: i64,
}

/// Counts an acquisition in progress for the sweeper, until dropped.
pub(super) struct Acquiring<'a> {
    inner: &'a Inner,
    id: (ElectionKey, String),
}

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        let mut held = self.inner.held();
        if let Some(n) = held.acquiring.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                held.acquiring.remove(&self.id);
            }
        }
    }
}

/// Deletes the keys of tenures and member registrations whose renewals or
/// heartbeats stopped without a release (the process lease would keep them
/// alive as long as any other election of this process renews). Runs every
/// quarter of the shortest TTL held; ends when the store is dropped.
pub(super) async fn sweep_loop(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            Some(i) => i.sweep_period(),
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(i) = inner.upgrade() else { return };
        i.sweep().await;
    }
}

impl Inner {
    pub(super) fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A quarter of the shortest TTL held (250 ms when nothing is held).
    fn sweep_period(&self) -> Duration {
        let held = self.held();
        let ttls = held
            .tenures
            .values()
            .map(|t| t.ttl)
            .chain(held.pending.values().map(|p| p.ttl))
            .chain(held.members.values().map(|m| m.ttl));
        (ttls.min().unwrap_or(SECOND) / 4).clamp(Duration::from_millis(100), SECOND)
    }

    /// One sweep: ends every tracked tenure, unknown acquisition and member
    /// registration whose last renewal/heartbeat started more than its TTL ago.
    async fn sweep(&self) {
        let now = Instant::now();
        let (tenures, pending, members) = {
            let mut held = self.held();
            let tenures: Vec<_> = held
                .tenures
                .iter()
                .filter(|(_, t)| now > t.sweep_after)
                .map(|(id, _)| id.clone())
                .collect();
            let tenures: Vec<_> = tenures
                .into_iter()
                .filter_map(|id| held.tenures.remove_entry(&id))
                .collect();
            let pending: Vec<_> = held
                .pending
                .iter()
                .filter(|(id, p)| now > p.sweep_after && !held.acquiring.contains_key(*id))
                .map(|(id, _)| id.clone())
                .collect();
            let pending: Vec<_> = pending
                .into_iter()
                .filter_map(|id| held.pending.remove_entry(&id))
                .collect();
            let members: Vec<_> = held
                .members
                .iter()
                .filter(|(_, m)| now > m.sweep_after)
                .map(|(id, _)| id.clone())
                .collect();
            let members: Vec<_> = members
                .into_iter()
                .filter_map(|id| held.members.remove_entry(&id))
                .collect();
            (tenures, pending, members)
        };
        for ((key, term), t) in tenures {
            let tenure = Tenure {
                key: key.clone(),
                holder: t.holder.clone(),
                term,
            };
            match self.end_tenure(&tenure, End::Expired).await {
                Ok(true) => {
                    tracing::info!(store = %self.described, election = %key, term, holder = %t.holder, "deleted a tenure not renewed within its TTL")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(election = %key, term, "sweep failed, retrying: {e}");
                    // Still ours to sweep (or to revive, by a renewal that
                    // starts now: then the key lives a TTL past its start).
                    self.held().tenures.entry((key, term)).or_insert(t);
                }
            }
        }
        for ((key, holder), p) in pending {
            if let Err(e) = self.sweep_pending(&key, &holder, p.lease_id).await {
                tracing::debug!(election = %key, "sweep of an unknown acquisition failed: {e}");
            }
        }
        for ((key, holder), m) in members {
            if m.mod_rev == 0 {
                continue;
            }
            match self.lapse_member(&key, &holder, m.mod_rev).await {
                Ok(true) => {
                    tracing::info!(store = %self.described, election = %key, holder = %holder, "a member registration not heartbeated within its TTL lapsed")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(election = %key, "member sweep failed, retrying: {e}");
                    self.held().members.entry((key, holder)).or_insert(m);
                }
            }
        }
    }

    /// Marks a member registration lapsed, as its own lease's expiry would:
    /// the value names no lease any more (so it reads as not live, and
    /// [`Membership::reap`](crate::store::Membership::reap) removes it). Only if it is still as our last
    /// heartbeat wrote it.
    ///
    /// [`Membership::reap`](crate::store::Membership::reap): crate::store::Membership::reap
    async fn lapse_member(&self, key: &ElectionKey, holder: &str, mod_rev: i64) -> Result<bool> {
        let mk = format!("{}{}", self.member_prefix(key), seg(holder));
        let resp = self
            .get(mk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let Some(kv) = resp.kvs().first().filter(|kv| kv.mod_revision() == mod_rev) else {
            return Ok(false);
        };
        let Ok(mut v) = serde_json::from_slice::<MemberValue>(kv.value()) else {
            return Ok(false);
        };
        v.lease = 0;
        let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, mod_rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let r = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        Ok(r.succeeded())
    }

    /// An acquisition whose outcome we never learned: if its key exists (ours,
    /// on the lease granted for it) and nobody of ours holds that term or is
    /// acquiring it, end it. The checks are made after the read, so a key
    /// created by a newer acquisition (tracked, or still in progress) is left
    /// alone; the transaction pins the exact key read (its create revision).
    async fn sweep_pending(&self, key: &ElectionKey, holder: &str, lease_id: i64) -> Result<()> {
        let resp = self
            .get(self.k("lease", key), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(());
        };
        if kv.value() != holder.as_bytes() || kv.lease() != lease_id {
            return Ok(());
        }
        let term = kv.create_revision() as u64;
        {
            let held = self.held();
            let id = (key.clone(), holder.to_string());
            if held.acquiring.contains_key(&id) || held.tenures.contains_key(&(key.clone(), term)) {
                return Ok(());
            }
        }
        let tenure = Tenure {
            key: key.clone(),
            holder: holder.to_string(),
            term,
        };
        if self.end_tenure(&tenure, End::Expired).await? {
            tracing::info!(store = %self.described, election = %key, term, "deleted the key of an acquisition whose answer was lost");
        }
        Ok(())
    }

    /// Marks an acquisition of `key` by `holder` in progress until dropped.
    pub(super) fn acquiring(&self, key: &ElectionKey, holder: &str) -> Acquiring<'_> {
        let id = (key.clone(), holder.to_string());
        *self.held().acquiring.entry(id.clone()).or_default() += 1;
        Acquiring { inner: self, id }
    }
}
