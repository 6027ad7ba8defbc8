//! Member registrations: heartbeats on the process lease, leaving, listing
//! in succession order, reaping lapsed ones.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::clock::{now_us, us};
use super::keys::{seg, unseg};
use super::lease::{LeaseLife, SECOND};
use super::retry::retry;
use super::sweeper::HeldMember;
use super::values::MemberValue;
use super::Inner;
use crate::error::Result;
use crate::store::{identity_of, ElectionKey, LeaseRecord, Member, MemberRecord};

impl Inner {
    /// Marks the registration as kept up by this process (for the sweeper)
    /// and returns the member lease to name in its value. Membership is about
    /// liveness, not safety, but the keep-alive is the heartbeat readers see
    /// (`members` dates the last one from the lease's remaining TTL): a
    /// round from the last thirtieth of the registration's TTL (the
    /// heartbeats of one grid instant) will do, else a new one.
    async fn member_lease(&self, member: &Member, ttl: Duration, started: Instant) -> Result<i64> {
        {
            let mut held = self.held();
            let m = held
                .members
                .entry((member.key.clone(), member.holder.clone()))
                .or_insert(HeldMember {
                    ttl,
                    sweep_after: started + ttl,
                    mod_rev: 0,
                    joined_at_us: 0,
                    lease: 0,
                });
            m.sweep_after = m.sweep_after.max(started + ttl);
            m.ttl = ttl;
        }
        self.process_lease(ttl).recent(self, ttl / 30).await
    }

    fn member_key(&self, member: &Member) -> String {
        format!("{}{}", self.member_prefix(&member.key), seg(&member.holder))
    }

    /// The registration's value as of now.
    fn member_value(
        &self,
        member: &Member,
        ttl: Duration,
        lease: i64,
        joined: i64,
        now: i64,
    ) -> Result<Vec<u8>> {
        let v = MemberValue {
            metadata: member.metadata.clone(),
            priority: member.priority,
            joined_at_us: joined,
            heartbeat_at_us: now,
            ttl_ms: ttl.as_millis() as u64,
            lease,
        };
        serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))
    }

    /// After a heartbeat that applied at `revision` naming `lease`:
    /// (re-)tracked even if swept meanwhile, the key exists again.
    fn heartbeat_applied(
        &self,
        member: &Member,
        ttl: Duration,
        started: Instant,
        (revision, joined, lease): (i64, i64, i64),
    ) {
        let mut held = self.held();
        let m = held
            .members
            .entry((member.key.clone(), member.holder.clone()))
            .or_insert(HeldMember {
                ttl,
                sweep_after: started + ttl,
                mod_rev: 0,
                joined_at_us: joined,
                lease,
            });
        m.sweep_after = m.sweep_after.max(started + ttl);
        m.mod_rev = revision;
        m.joined_at_us = joined;
        m.lease = lease;
    }

    /// What this process last wrote for the registration: its revision,
    /// join time and the lease it names, if it wrote one.
    fn last_heartbeat(&self, member: &Member) -> Option<(i64, i64, i64)> {
        let held = self.held();
        let m = held
            .members
            .get(&(member.key.clone(), member.holder.clone()))?;
        (m.mod_rev > 0).then_some((m.mod_rev, m.joined_at_us, m.lease))
    }

    pub(super) async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        let started = Instant::now();
        let lease_id = self.member_lease(member, ttl, started).await?;
        let mk = self.member_key(member);
        // The usual case: the key is as this process last wrote it, naming
        // the lease just kept alive. That keep-alive is the heartbeat: the
        // registration is live while the lease is, and readers date the last
        // heartbeat from the lease's TTL. Nobody else rewrites the key (a
        // reap deletes only keys whose lease is gone; our sweeper forgets a
        // registration it lapses, and the next heartbeat writes it again).
        if let Some((rev, joined, lease)) = self.last_heartbeat(member) {
            if lease == lease_id {
                self.heartbeat_applied(member, ttl, started, (rev, joined, lease));
                return Ok(());
            }
        }
        // The lease changed (it expired and a new one was granted): write
        // the key conditional on our last write, joining the heartbeats of
        // this instant.
        if let Some((rev, joined, _)) = self.last_heartbeat(member) {
            let v = self.member_value(member, ttl, lease_id, joined, now_us())?;
            let beat = Txn::new()
                .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(mk.clone(), v, None)]);
            let group = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
            if let (true, revision) = self.batches.heartbeats.call(group, beat).await? {
                self.heartbeat_applied(member, ttl, started, (revision, joined, lease_id));
                return Ok(());
            }
        }
        self.heartbeat_reads.increment(1);
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
        let v = self.member_value(member, ttl, lease_id, joined, now)?;
        // Conditional on what we read, so seniority (the key's create
        // revision) survives concurrent heartbeats; a lost race is harmless.
        let txn = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let r = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        if r.succeeded() {
            if let Some(h) = r.header() {
                self.heartbeat_applied(member, ttl, started, (h.revision(), joined, lease_id));
            }
        }
        Ok(())
    }

    /// A follower's regular call: the heartbeat rides in the snapshot's
    /// transaction as a nested one, conditional on the registration being as
    /// this process last wrote it (no read of it first). Without such a
    /// write (the first heartbeat, or someone else changed the key), the
    /// heartbeat goes on its own first.
    pub(super) async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        let started = Instant::now();
        let Some((rev, joined, lease)) = self.last_heartbeat(member) else {
            self.heartbeat(member, ttl).await?;
            return self.read(&member.key).await;
        };
        let lease_id = self.member_lease(member, ttl, started).await?;
        if lease == lease_id {
            // The keep-alive was the heartbeat (see `heartbeat`).
            self.heartbeat_applied(member, ttl, started, (rev, joined, lease));
            return self.read(&member.key).await;
        }
        let mk = self.member_key(member);
        let v = self.member_value(member, ttl, lease_id, joined, now_us())?;
        let beat = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let ((snap, _), beat) = self.snapshot_with(&member.key, Some(beat)).await?;
        match beat {
            Some((true, revision)) => {
                self.heartbeat_applied(member, ttl, started, (revision, joined, lease_id))
            }
            _ => self.heartbeat(member, ttl).await?,
        }
        self.record(&member.key, &snap).await
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
            rows.push((kv.create_revision(), holder, v));
        }
        let lives = self.lease_lives(rows.iter().map(|r| r.2.lease)).await?;
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
                // A heartbeat is a keep-alive of the lease the value names
                // (the key is written only when that lease changes): the last
                // one was granted − remaining ago by etcd's count. etcd rounds
                // the remaining TTL down to whole seconds, so that overstates
                // the age by up to a second: take the second off. (Only this
                // reader's clock: the value's time is the writer's.) A live
                // lease not dated (a fleet's list) counts as heard from now:
                // it was kept alive within its TTL, so a crashed member is
                // taken for fresh up to that TTL (three lease times) instead
                // of two, which only costs a failover past it the grace.
                let life = lives.get(&v.lease).copied().unwrap_or(LeaseLife::Gone);
                let (heartbeat_at_us, expires_at_us, live) = match life {
                    LeaseLife::Left { left, granted } => (
                        now - us(granted.saturating_sub(left).saturating_sub(SECOND)),
                        now + us(left),
                        true,
                    ),
                    LeaseLife::Alive => (now, now + us(Duration::from_millis(v.ttl_ms)), true),
                    LeaseLife::Gone => (v.heartbeat_at_us, v.heartbeat_at_us, false),
                };
                MemberRecord {
                    key: key.clone(),
                    identity: identity_of(&holder).to_string(),
                    holder,
                    metadata: v.metadata,
                    priority: v.priority,
                    joined_at_us: v.joined_at_us,
                    heartbeat_at_us,
                    expires_at_us,
                    live,
                }
            })
            .collect())
    }

    pub(super) async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        // The member lists of the reaps of one instant are read together.
        let kvs = self
            .batches
            .member_reads
            .call(0, self.member_prefix(key))
            .await?;
        let own = self.own_live_leases().await;
        let named: Vec<(&etcd_client::KeyValue, i64)> = kvs
            .iter()
            .map(|kv| {
                let lease = serde_json::from_slice::<MemberValue>(kv.value())
                    .map(|m| m.lease)
                    .unwrap_or(0);
                (kv, lease)
            })
            .collect();
        // Registrations on this process's own live lease (the leader's
        // own, usually) need no question to etcd.
        let asked = named.iter().map(|&(_, l)| l).filter(|l| !own.contains(l));
        let lives = self.lease_lives(asked).await?;
        let mut reaped = 0;
        for (kv, lease) in named {
            // Only a lease etcd said is gone is reaped; this process's own
            // were not asked, so they are never.
            if !matches!(lives.get(&lease), Some(LeaseLife::Gone)) {
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
