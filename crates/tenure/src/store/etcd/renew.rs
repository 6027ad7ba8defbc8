//! Renewing a tenure: a keep-alive round of the process lease, concurrent
//! with a transaction checking the tenure's own key.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::clock::{now_us, us};
use super::lease::{lease_secs, Kept};
use super::read::first_range;
use super::values::State;
use super::Inner;
use crate::error::Result;
use crate::store::Tenure;

impl Inner {
    pub(super) async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let started = Instant::now();
        // Only a tenure we hold (not yet swept), on a lease of at least `ttl`.
        // Pushing its sweep time to a TTL past this call's start, before
        // anything is sent, keeps the sweeper off it while this call may succeed.
        let (lease, lease_id) = {
            let mut held = self.held();
            match held.tenures.get_mut(&(tenure.key.clone(), tenure.term)) {
                Some(t) if t.holder == tenure.holder && t.lease.secs >= lease_secs(ttl) => {
                    t.sweep_after = t.sweep_after.max(started + ttl);
                    t.ttl = ttl;
                    (t.lease.clone(), t.lease_id)
                }
                _ => return Ok(false),
            }
        };
        let key = &tenure.key;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let now = now_us();
        // The transaction reads the state as it was and rewrites its times.
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk.clone(), CompareOp::Equal, tenure.holder.clone()),
                Compare::lease(lk, CompareOp::Equal, lease_id),
                Compare::create_revision(hk, CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::get(sk.clone(), None)]);
        // The keep-alive is shared with every renewal of this instant (one
        // round for all, sent after each of them started). A failed renewal
        // keeps its tracking entry: its key, if any is left, is the sweeper's.
        let (kept, checked) = tokio::join!(lease.keep_alive(&self.client, true), self.txn(txn));
        let checked = checked.map_err(|e| self.map_err(e))?;
        match kept {
            Ok(Kept::Alive(id)) if id == lease_id => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(self.unavailable(format!("lease keep-alive failed: {e}"))),
        }
        if !checked.succeeded() {
            return Ok(false);
        }
        // Informational times: a best-effort update, conditional on the state
        // not having changed, so it can never overwrite a later term's state.
        if let Some(kv) = checked.op_responses().first().and_then(first_range) {
            if let Ok(mut st) = serde_json::from_slice::<State>(kv.value()) {
                st.term = Some(tenure.term);
                st.renewed_at_us = now;
                st.expires_at_us = now + us(ttl);
                st.ttl_ms = ttl.as_millis() as u64;
                if let Ok(v) = serde_json::to_vec(&st) {
                    let txn = Txn::new()
                        .when([Compare::mod_revision(
                            sk.clone(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        )])
                        .and_then([TxnOp::put(sk, v, None)]);
                    if let Err(e) = self.txn(txn).await {
                        tracing::debug!(election = %key, "renewal time not recorded: {e}");
                    }
                }
            }
        }
        Ok(true)
    }
}
