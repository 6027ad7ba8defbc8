//! Reading elections: one multi-read of an election's znodes, and the
//! record built from it.

use std::time::Duration;

use zookeeper_client::{Error as ZkError, MultiReadResult, Stat};

use super::paths::unseg;
use super::values::{HandoverValue, LeaderValue, State};
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, Handover, LeaseRecord, StartReason};

/// One znode as read: its data and stat.
pub(super) type Node = Option<(Vec<u8>, Stat)>;

/// One consistent read of an election's znodes.
pub(super) struct Snapshot {
    pub(super) leader: Node,
    pub(super) state: Node,
    pub(super) handover: Node,
    pub(super) term: Node,
}

impl Snapshot {
    pub(super) fn leader(&self) -> Option<(LeaderValue, &Stat)> {
        let (d, s) = self.leader.as_ref()?;
        Some((serde_json::from_slice(d).ok()?, s))
    }
    pub(super) fn state(&self) -> Option<State> {
        serde_json::from_slice(&self.state.as_ref()?.0).ok()
    }
    pub(super) fn handover(&self) -> Option<(HandoverValue, &Stat)> {
        let (d, s) = self.handover.as_ref()?;
        Some((serde_json::from_slice(d).ok()?, s))
    }
}

pub(super) fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2)
}

pub(super) fn client_now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(us)
        .unwrap_or(0)
}

impl Inner {
    /// Brings the server of the read session up to date with the ZooKeeper
    /// leader. Reads are served by whichever server a session is connected
    /// to, and a write of another session (this process's TTL session, or
    /// another process) may not have reached it yet: decisions that act on
    /// a read (release, hand-over, a request, a retried acquisition) sync
    /// first, so they never act on a view older than their own writes.
    pub(super) async fn sync(&self, key: &ElectionKey) -> Result<()> {
        let c = self.main().await?;
        let dir = self.dir(key);
        match c.sync(&dir).await {
            Ok(()) | Err(ZkError::NoNode) => Ok(()),
            Err(e) => Err(self.map(&dir, e)),
        }
    }

    pub(super) async fn snapshot(&self, key: &ElectionKey) -> Result<Snapshot> {
        let c = self.main().await?;
        let names = ["leader", "state", "handover", "term"];
        let mut r = c.new_multi_reader();
        for n in names {
            r.add_get_data(&self.node(key, n))
                .map_err(|e| self.map(&self.dir(key), e))?;
        }
        let res = r.commit().await.map_err(|e| self.map(&self.dir(key), e))?;
        if res.len() != names.len() {
            return Err(self.protocol("a multi-read returned the wrong number of results"));
        }
        let mut nodes = Vec::with_capacity(4);
        for (r, n) in res.into_iter().zip(names) {
            nodes.push(match r {
                MultiReadResult::Data { data, stat } => Some((data, stat)),
                MultiReadResult::Error {
                    err: ZkError::NoNode,
                } => None,
                MultiReadResult::Error { err } => return Err(self.map(&self.node(key, n), err)),
                _ => return Err(self.protocol("a data read returned something else")),
            });
        }
        let term = nodes.pop().flatten();
        let handover = nodes.pop().flatten();
        let state = nodes.pop().flatten();
        let leader = nodes.pop().flatten();
        Ok(Snapshot {
            leader,
            state,
            handover,
            term,
        })
    }

    /// The record a snapshot shows at `now_us` (the server's clock when the
    /// caller has it, else the client's).
    pub(super) fn record(
        &self,
        key: &ElectionKey,
        snap: &Snapshot,
        now_us: i64,
    ) -> Result<Option<LeaseRecord>> {
        let st = snap.state();
        if snap.leader.is_none() && st.is_none() {
            return Ok(None);
        }
        let st = st.unwrap_or_default();
        let version = [&snap.leader, &snap.state, &snap.handover]
            .iter()
            .filter_map(|n| n.as_ref().map(|(_, s)| s.mzxid))
            .max()
            .unwrap_or(0);
        let mut rec = LeaseRecord {
            key: key.clone(),
            holder: None,
            metadata: String::new(),
            term: st.term,
            version: u64::try_from(version).unwrap_or(0),
            ttl: Duration::from_millis(st.ttl_ms),
            acquired_at_us: 0,
            renewed_at_us: 0,
            expires_at_us: st.ended_at_us,
            read_at_us: now_us,
            remaining: Duration::ZERO,
            handover: None,
            handover_until_us: 0,
            start_reason: StartReason::from_column(&st.start_reason)
                .map_err(|e| self.protocol(format!("the state of {key} holds {e}")))?,
            previous_holder: st.previous_holder.clone(),
            previous_expires_at_us: st.previous_expires_at_us,
        };
        match snap.leader() {
            Some((lv, stat)) => {
                rec.holder = Some(lv.holder.clone());
                rec.term = lv.term;
                rec.metadata = lv.metadata.clone();
                rec.ttl = Duration::from_millis(lv.ttl_ms);
                rec.acquired_at_us = stat.ctime.saturating_mul(1000);
                rec.renewed_at_us = stat.mtime.saturating_mul(1000);
                rec.expires_at_us = rec.renewed_at_us.saturating_add(us(rec.ttl));
                rec.remaining = crate::store::remaining_from_us(rec.expires_at_us, now_us);
                if st.term != lv.term {
                    rec.start_reason = None;
                    rec.previous_holder = None;
                }
                if let Some(h) = &lv.handover {
                    rec.handover = Handover::from_column(&h.to);
                    rec.handover_until_us = now_us.saturating_add(
                        i64::try_from(h.window_ms).unwrap_or(0).saturating_mul(1000),
                    );
                }
            }
            None if st.holder.is_some() && st.end_reason.is_empty() => {
                // The session expired: the holder is named, with no time left.
                rec.holder = st.holder.clone();
                rec.expires_at_us = snap
                    .term
                    .as_ref()
                    .map(|(_, s)| s.mtime.saturating_mul(1000))
                    .unwrap_or(0)
                    .max(0);
            }
            None => {}
        }
        if rec.handover.is_none() {
            if let Some((h, stat)) = snap.handover() {
                let until = stat
                    .ctime
                    .saturating_mul(1000)
                    .saturating_add(i64::try_from(h.window_ms).unwrap_or(0).saturating_mul(1000));
                if until > now_us {
                    rec.handover = Handover::from_column(&h.to);
                    rec.handover_until_us = until;
                }
            }
        }
        // Expiries are the servers' stamps (`mtime`s) plus a TTL; `now_us`
        // may be this client's clock, hours apart from theirs. Judged from
        // the latest stamp of the read when that is later, a record that
        // ZooKeeper stamped is never found to expire too far ahead (it
        // cannot: no expiry lies more than a TTL past its own stamp), and
        // what a hand edit can change (the TTL, a window) is still judged.
        let latest_stamp_us = [&snap.leader, &snap.state, &snap.handover, &snap.term]
            .iter()
            .filter_map(|n| n.as_ref().map(|(_, s)| s.mtime.saturating_mul(1000)))
            .max()
            .unwrap_or(0);
        crate::store::check_record(&rec, now_us.max(latest_stamp_us))
            .map_err(|reason| self.corrupt(key, reason))?;
        Ok(Some(rec))
    }

    pub(super) async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let snap = self.snapshot(key).await?;
        self.record(key, &snap, client_now_us())
    }

    pub(super) async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let c = self.main().await?;
        let root = self.elections_root();
        let namespaces = match namespace {
            Some(ns) => vec![super::paths::seg(ns)],
            None => c
                .list_children(&root)
                .await
                .map_err(|e| self.map(&root, e))?,
        };
        let mut keys = Vec::new();
        for ns in namespaces {
            let p = format!("{root}/{ns}");
            let elections = match c.list_children(&p).await {
                Ok(e) => e,
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(self.map(&p, e)),
            };
            keys.extend(
                elections
                    .into_iter()
                    .map(|e| ElectionKey::new(unseg(&ns), unseg(&e))),
            );
        }
        keys.sort();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(r) = self.read(&key).await? {
                out.push(r);
            }
        }
        Ok(out)
    }
}
