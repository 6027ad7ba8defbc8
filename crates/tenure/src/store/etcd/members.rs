//! Member registrations: heartbeats on the process lease, leaving, listing
//! in succession order, reaping lapsed ones.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::clock::{now_us, us};
use super::keys::{seg, unseg};
use super::retry::retry;
use super::sweeper::HeldMember;
use super::values::MemberValue;
use super::Inner;
use crate::error::Result;
use crate::store::{identity_of, ElectionKey, Member, MemberRecord};

impl Inner {
    pub(super) async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        let started = Instant::now();
        let id = (member.key.clone(), member.holder.clone());
        {
            let mut held = self.held();
            let m = held.members.entry(id.clone()).or_insert(HeldMember {
                ttl,
                sweep_after: started + ttl,
                mod_rev: 0,
            });
            m.sweep_after = m.sweep_after.max(started + ttl);
            m.ttl = ttl;
        }
        // Membership is about liveness, not safety: a round of the process
        // lease from the last third of the TTL will do.
        let lease = self.process_lease(ttl);
        let lease_id = lease.recent(self, ttl / 3).await?;
        let mk = format!("{}{}", self.member_prefix(&member.key), seg(&member.holder));

        let old = self
            .get(mk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let now = now_us();
        let (joined, rev) = match old.kvs().first() {
            Some(kv) => (
                serde_json::from_slice::<MemberValue>(kv.value())
                    .map(|m| m.joined_at_us)
                    .unwrap_or(now),
                kv.mod_revision(),
            ),
            None => (now, 0),
        };
        let v = MemberValue {
            metadata: member.metadata.clone(),
            priority: member.priority,
            joined_at_us: joined,
            heartbeat_at_us: now,
            ttl_ms: ttl.as_millis() as u64,
            lease: lease_id,
        };
        let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        // Conditional on what we read, so seniority (the key's create
        // revision) survives concurrent heartbeats; a lost race is harmless.
        let txn = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let r = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        if r.succeeded() {
            if let Some(h) = r.header() {
                // (Re-)tracked even if swept meanwhile: the key exists again.
                let mut held = self.held();
                let m = held.members.entry(id).or_insert(HeldMember {
                    ttl,
                    sweep_after: started + ttl,
                    mod_rev: 0,
                });
                m.sweep_after = m.sweep_after.max(started + ttl);
                m.mod_rev = h.revision();
            }
        }
        Ok(())
    }

    pub(super) async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let mk = format!("{}{}", self.member_prefix(key), seg(holder));
        let c = self.client.clone();
        let r = retry(&c, |mut c| {
            let mk = mk.clone();
            async move { c.delete(mk, None).await }
        })
        .await
        .map_err(|e| self.map_err(e))?;
        self.held()
            .members
            .remove(&(key.clone(), holder.to_string()));
        Ok(r.deleted() > 0)
    }

    pub(super) async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let prefix = self.member_prefix(key);

        let resp = self
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut rows = Vec::new();
        let mut ttls: HashMap<i64, Option<Duration>> = HashMap::new();
        for kv in resp.kvs() {
            let Ok(v) = serde_json::from_slice::<MemberValue>(kv.value()) else {
                continue;
            };
            let Some(holder) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(&prefix))
                .map(unseg)
            else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(e) = ttls.entry(v.lease) {
                e.insert(self.lease_ttl(v.lease).await?);
            }
            rows.push((kv.create_revision(), holder, v));
        }
        let now = now_us();
        rows.sort_by(|a, b| {
            b.2.priority
                .cmp(&a.2.priority)
                .then(a.0.cmp(&b.0))
                .then(a.1.cmp(&b.1))
        });
        Ok(rows
            .into_iter()
            .map(|(_, holder, v)| {
                let left = ttls.get(&v.lease).copied().flatten();
                MemberRecord {
                    key: key.clone(),
                    identity: identity_of(&holder).to_string(),
                    holder,
                    metadata: v.metadata,
                    priority: v.priority,
                    joined_at_us: v.joined_at_us,
                    heartbeat_at_us: v.heartbeat_at_us,
                    expires_at_us: left.map(|l| now + us(l)).unwrap_or(v.heartbeat_at_us),
                    live: left.is_some(),
                }
            })
            .collect())
    }

    pub(super) async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        let prefix = self.member_prefix(key);

        let resp = self
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut reaped = 0;
        for kv in resp.kvs() {
            let lease = serde_json::from_slice::<MemberValue>(kv.value())
                .map(|m| m.lease)
                .unwrap_or(0);
            if self.lease_ttl(lease).await?.is_some() {
                continue;
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    kv.key().to_vec(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
            if self
                .txn(txn)
                .await
                .map_err(|e| self.map_err(e))?
                .succeeded()
            {
                reaped += 1;
            }
        }
        Ok(reaped)
    }
}
