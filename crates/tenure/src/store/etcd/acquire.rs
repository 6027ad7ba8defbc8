//! Acquiring an election: one transaction creating the lease key on the
//! process lease; its revision is the term.

use std::time::Instant;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::clock::{now_us, us};
use super::errors::is_lease_not_found;
use super::read::Snapshot;
use super::sweeper::{HeldTenure, PendingAcquire};
use super::values::{HistoryValue, State};
use super::Inner;
use crate::error::Result;
use crate::store::{identity_of, Acquire, Claim, LeaseRecord, StartReason};

impl Inner {
    pub(super) async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        for _ in 0..2 {
            if let Some(a) = self.try_acquire_once(claim).await? {
                return Ok(a);
            }
            // The lease vanished between the keep-alive and the transaction:
            // grant a new one and try once more.
        }
        Err(self.unavailable(
            "the lease granted for this acquisition expired twice before its transaction".into(),
        ))
    }

    async fn try_acquire_once(&self, claim: &Claim) -> Result<Option<Acquire>> {
        // Both clocks read together, before anything is sent: the expiry
        // the record states (wall clock) and the sweeper's (monotonic,
        // `sweep_after`) then fall at the same instant, so a swept term's
        // history ends exactly at the expiry its holder was told.
        let started = Instant::now();
        let now = now_us();
        let key = &claim.key;
        let _acquiring = self.acquiring(key, &claim.holder);
        let (snap, _) = self.snapshot(key).await?;
        if snap.lease.is_some() {
            return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
        }
        let identity = identity_of(&claim.holder);
        if let Some(h) = snap.handover() {
            let open = h.requested || h.to == "*" || h.to == identity;
            if !open {
                return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
            }
        }
        let (prev, prev_term) = snap.state().map(|(s, t)| (Some(s), t)).unwrap_or((None, 0));
        let (start_reason, previous_holder, previous_expires) = match &prev {
            None => ("first".to_string(), None, 0),
            Some(s) if s.holder.is_some() && s.end_reason.is_empty() => {
                ("expiry".to_string(), s.holder.clone(), s.expires_at_us)
            }
            // Swept by its own process: an expiry too.
            Some(s) if s.end_reason == "expired" => (
                "expiry".to_string(),
                s.previous_holder.clone(),
                s.ended_at_us,
            ),
            Some(s) if s.end_reason == "released" || s.end_reason.is_empty() => {
                ("release".to_string(), None, s.ended_at_us)
            }
            Some(s) => (s.end_reason.clone(), None, s.ended_at_us),
        };
        let state = State {
            term: None,
            holder: Some(claim.holder.clone()),
            metadata: claim.metadata.clone(),
            ttl_ms: claim.ttl.as_millis() as u64,
            acquired_at_us: now,
            renewed_at_us: now,
            expires_at_us: now + us(claim.ttl),
            start_reason: start_reason.clone(),
            previous_holder: previous_holder.clone(),
            previous_expires_at_us: previous_expires,
            end_reason: String::new(),
            ended_at_us: 0,
        };
        let state_bytes = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        // The process lease of this length, kept alive (or granted) after
        // this call started: the key then lives at least `ttl` from now.
        let lease = self.process_lease(claim.ttl);
        let lease_id = lease.fresh(self, false).await?;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(sk.clone(), CompareOp::Equal, Snapshot::mod_rev(&snap.state)),
                Compare::mod_revision(
                    hk.clone(),
                    CompareOp::Equal,
                    Snapshot::mod_rev(&snap.handover),
                ),
            ])
            .and_then([
                TxnOp::put(
                    lk,
                    claim.holder.clone(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::put(sk, state_bytes, None),
                TxnOp::delete(hk, None),
            ]);
        // Until the outcome is known, the sweeper must be able to find a key
        // this may create (an error, or a caller that gives up mid-call).
        let id = (key.clone(), claim.holder.clone());
        self.held().pending.insert(
            id.clone(),
            PendingAcquire {
                lease_id,
                ttl: claim.ttl,
                sweep_after: started + claim.ttl,
            },
        );
        let (resp, retried) = match self.txn_retried(txn).await {
            Ok(r) => r,
            Err(e) if is_lease_not_found(&e) => {
                self.held().pending.remove(&id);
                return Ok(None);
            }
            Err(e) => return Err(self.map_err(e)),
        };
        let term = if resp.succeeded() {
            resp.header()
                .map(|h| h.revision() as u64)
                .ok_or_else(|| self.protocol("transaction answer without a header"))?
        } else {
            // Someone else changed the election since our read: re-read. After
            // a retry, the change may be our own first attempt: the lease key
            // then names us on the lease granted for this very call.
            let (snap, _) = self.snapshot(key).await?;
            match &snap.lease {
                Some(kv)
                    if retried
                        && kv.lease() == lease_id
                        && kv.value() == claim.holder.as_bytes() =>
                {
                    kv.create_revision() as u64
                }
                _ => {
                    self.held().pending.remove(&id);
                    return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
                }
            }
        };
        let history = HistoryValue {
            holder: claim.holder.clone(),
            start_reason: start_reason.clone(),
            start_at_us: now,
            end_reason: String::new(),
            end_at_us: None,
        };
        {
            let mut held = self.held();
            held.pending.remove(&id);
            held.tenures.insert(
                (key.clone(), term),
                HeldTenure {
                    holder: claim.holder.clone(),
                    lease,
                    lease_id,
                    ttl: claim.ttl,
                    sweep_after: started + claim.ttl,
                    state: State {
                        term: Some(term),
                        ..state
                    },
                },
            );
        }
        let prev_close = previous_holder
            .as_ref()
            .map(|_| (prev_term, previous_expires));
        self.write_history(key, term, history, prev_close).await;
        Ok(Some(Acquire::Acquired(LeaseRecord {
            key: key.clone(),
            holder: Some(claim.holder.clone()),
            metadata: claim.metadata.clone(),
            term,
            version: term,
            ttl: claim.ttl,
            acquired_at_us: now,
            renewed_at_us: now,
            expires_at_us: now + us(claim.ttl),
            read_at_us: now,
            remaining: claim.ttl,
            handover: None,
            handover_until_us: 0,
            start_reason: StartReason::from_column(&start_reason).ok().flatten(),
            previous_holder,
            previous_expires_at_us: previous_expires,
        })))
    }
}
