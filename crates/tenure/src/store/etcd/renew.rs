//! Renewing a tenure: a keep-alive round of the process lease, concurrent
//! with a nested transaction checking the tenure's own keys and rewriting its
//! informational times; the nested transactions of one renew instant travel
//! together in one transaction (`batch.rs`).

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::clock::{now_us, us};
use super::lease::{lease_secs, Kept};
use super::Inner;
use crate::error::Result;
use crate::store::Tenure;

impl Inner {
    pub(super) async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let started = Instant::now();
        // Only a tenure we hold (not yet swept), on a lease of at least `ttl`.
        // Pushing its sweep time to a TTL past this call's start, before
        // anything is sent, keeps the sweeper off it while this call may succeed.
        let (lease, lease_id, mut state) = {
            let mut held = self.held();
            match held.tenures.get_mut(&(tenure.key.clone(), tenure.term)) {
                Some(t) if t.holder == tenure.holder && t.lease.secs >= lease_secs(ttl) => {
                    t.sweep_after = t.sweep_after.max(started + ttl);
                    t.ttl = ttl;
                    (t.lease.clone(), t.lease_id, t.state.clone())
                }
                _ => return Ok(false),
            }
        };
        let key = &tenure.key;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        // Informational times, written only while the lease key is this
        // tenure's: a later term's state is never overwritten.
        let now = now_us();
        state.term = Some(tenure.term);
        state.renewed_at_us = now;
        state.expires_at_us = now + us(ttl);
        state.ttl_ms = ttl.as_millis() as u64;
        let state = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        let check = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk.clone(), CompareOp::Equal, tenure.holder.clone()),
                Compare::lease(lk, CompareOp::Equal, lease_id),
                Compare::create_revision(hk, CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(sk, state, None)]);
        // The keep-alive is shared with every renewal of this instant (one
        // round for all, sent after each of them started), and so is the
        // transaction carrying the checks. A failed renewal keeps its
        // tracking entry: its key, if any is left, is the sweeper's.
        let (kept, checked) = tokio::join!(
            lease.keep_alive(&self.client, true),
            self.batches.renewals.call(0, check)
        );
        let (checked, _) = checked?;
        match kept {
            Ok(Kept::Alive(id)) if id == lease_id => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(self.unavailable(format!("lease keep-alive failed: {e}"))),
        }
        Ok(checked)
    }
}
