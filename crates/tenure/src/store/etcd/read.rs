//! Reading elections: one consistent snapshot of an election's keys, and the
//! record built from it.

use std::time::Duration;

use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::clock::{now_us, us};
use super::keys::{parse_election_key, seg};
use super::lease::SECOND;
use super::values::{HandoverValue, State};
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, Handover, LeaseRecord, StartReason};

/// One consistent read of an election's keys.
pub(super) struct Snapshot {
    pub(super) lease: Option<KeyValue>,
    pub(super) state: Option<KeyValue>,
    pub(super) handover: Option<KeyValue>,
}

impl Snapshot {
    pub(super) fn state(&self) -> Option<(State, u64)> {
        let kv = self.state.as_ref()?;
        let st: State = serde_json::from_slice(kv.value()).ok()?;
        let term = st.term.unwrap_or(kv.mod_revision() as u64);
        Some((st, term))
    }
    pub(super) fn handover(&self) -> Option<HandoverValue> {
        serde_json::from_slice(self.handover.as_ref()?.value()).ok()
    }
    fn holder(&self) -> Option<String> {
        self.lease
            .as_ref()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
    }
    pub(super) fn mod_rev(kv: &Option<KeyValue>) -> i64 {
        kv.as_ref().map(|k| k.mod_revision()).unwrap_or(0)
    }
}

pub(super) fn first_range(resp: &TxnOpResponse) -> Option<KeyValue> {
    match resp {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    }
}

impl Inner {
    pub(super) async fn snapshot(&self, key: &ElectionKey) -> Result<(Snapshot, i64)> {
        let (snap, _) = self.snapshot_with(key, None).await?;
        Ok(snap)
    }

    /// A snapshot, with `also` (a write of this process's own, such as a
    /// member heartbeat) as a nested transaction in the same request; its
    /// outcome comes back as (compares held, revision).
    pub(super) async fn snapshot_with(
        &self,
        key: &ElectionKey,
        also: Option<Txn>,
    ) -> Result<((Snapshot, i64), Option<(bool, i64)>)> {
        let mut ops = vec![
            TxnOp::get(self.k("lease", key), None),
            TxnOp::get(self.k("state", key), None),
            TxnOp::get(self.k("handover", key), None),
        ];
        let nested = also.is_some();
        ops.extend(also.map(TxnOp::txn));
        let resp = self
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| self.map_err(e))?;
        let ops = resp.op_responses();
        if ops.len() != 3 + usize::from(nested) {
            return Err(self.protocol("a snapshot read returned the wrong number of results"));
        }
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        let also = match ops.get(3) {
            Some(TxnOpResponse::Txn(t)) => Some((t.succeeded(), rev)),
            _ => None,
        };
        Ok((
            (
                Snapshot {
                    lease: first_range(&ops[0]),
                    state: first_range(&ops[1]),
                    handover: first_range(&ops[2]),
                },
                rev,
            ),
            also,
        ))
    }

    /// Builds the record for a snapshot, asking etcd for the leases' TTLs.
    pub(super) async fn record(
        &self,
        key: &ElectionKey,
        snap: &Snapshot,
    ) -> Result<Option<LeaseRecord>> {
        let state = snap.state();
        if snap.lease.is_none() && state.is_none() {
            return Ok(None);
        }
        let (lease_ttl, handover_ttl) = tokio::join!(
            async {
                match &snap.lease {
                    Some(kv) => self.lease_ttl(kv.lease()).await,
                    None => Ok(None),
                }
            },
            async {
                match &snap.handover {
                    Some(kv) if !snap.handover().is_some_and(|h| h.requested) => {
                        self.lease_ttl(kv.lease()).await
                    }
                    _ => Ok(None),
                }
            }
        );
        let (lease_ttl, handover_ttl) = (lease_ttl?, handover_ttl?);
        let read_at = now_us();
        let (st, state_term) = state.unwrap_or_default();
        let version = Snapshot::mod_rev(&snap.lease)
            .max(Snapshot::mod_rev(&snap.state))
            .max(Snapshot::mod_rev(&snap.handover)) as u64;
        let mut rec = LeaseRecord {
            key: key.clone(),
            holder: None,
            metadata: String::new(),
            term: state_term,
            version,
            ttl: Duration::from_millis(st.ttl_ms),
            acquired_at_us: st.acquired_at_us,
            renewed_at_us: st.renewed_at_us,
            expires_at_us: st.expires_at_us,
            read_at_us: read_at,
            remaining: Duration::ZERO,
            handover: None,
            handover_until_us: 0,
            start_reason: StartReason::from_column(&st.start_reason)
                .map_err(|e| self.protocol(format!("the state of {key} holds {e}")))?,
            previous_holder: st.previous_holder.clone(),
            previous_expires_at_us: st.previous_expires_at_us,
        };
        match &snap.lease {
            Some(kv) => {
                let term = kv.create_revision() as u64;
                rec.holder = snap.holder();
                rec.term = term;
                if state_term == term {
                    rec.metadata = st.metadata.clone();
                } else {
                    // The state is from an older term (it is written in the
                    // same transaction, so this means foreign data).
                    rec.ttl = Duration::ZERO;
                    rec.start_reason = None;
                    rec.previous_holder = None;
                }
                if let Some(left) = lease_ttl {
                    // etcd rounds the remaining TTL down to whole seconds: round
                    // it up instead (the watch wakes followers at the actual
                    // expiry anyway), but never report more than the holder's TTL.
                    let left = left + SECOND;
                    rec.remaining = if rec.ttl.is_zero() {
                        left
                    } else {
                        left.min(rec.ttl)
                    };
                    rec.expires_at_us = read_at + us(rec.remaining);
                }
            }
            None if st.holder.is_some() && st.end_reason.is_empty() => {
                // The lease expired in etcd: name the holder, with no time left.
                rec.holder = st.holder.clone();
                let mut seen = self.freed_seen.lock().unwrap_or_else(|p| p.into_inner());
                let first = *seen.entry((key.clone(), state_term)).or_insert(read_at);
                if seen.len() > 10_000 {
                    seen.clear();
                }
                // When this reader first saw it gone, by this reader's clock:
                // the state's expiry is the holder's clock, which may run
                // hours apart (a dead holder whose clock ran ahead would
                // otherwise hold the election up until that hour).
                rec.expires_at_us = first;
            }
            None => {
                rec.expires_at_us = st.ended_at_us;
            }
        }
        if let Some(h) = snap.handover() {
            rec.handover = Handover::from_column(&h.to);
            rec.handover_until_us = if h.requested {
                read_at.saturating_add(i64::try_from(h.window_ms).unwrap_or(0).saturating_mul(1000))
            } else {
                read_at + handover_ttl.map(us).unwrap_or(0)
            };
            if !h.requested && handover_ttl.is_none() {
                rec.handover = None;
                rec.handover_until_us = 0;
            }
        }
        crate::store::check_record(&rec, rec.read_at_us)
            .map_err(|reason| self.corrupt(key, reason))?;
        Ok(Some(rec))
    }

    pub(super) async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let (snap, _) = self.snapshot(key).await?;
        self.record(key, &snap).await
    }

    pub(super) async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let base = match namespace {
            Some(ns) => format!("{}/state/{}/", self.prefix, seg(ns)),
            None => format!("{}/state/", self.prefix),
        };

        let resp = self
            .get(base, Some(GetOptions::new().with_prefix().with_keys_only()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut keys: Vec<ElectionKey> = resp
            .kvs()
            .iter()
            .filter_map(|kv| parse_election_key(&self.prefix, kv.key()))
            .collect();
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
