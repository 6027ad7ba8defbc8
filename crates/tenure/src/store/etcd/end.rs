//! Ending a tenure (release, hand-over, sweep): one transaction deleting the
//! lease key and recording the end in the state.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::clock::now_us;
use super::lease::lease_secs;
use super::retry::retry;
use super::values::{HandoverValue, State};
use super::Inner;
use crate::error::Result;
use crate::store::{Handover, Tenure};

/// How a tenure ends.
#[derive(Clone, Copy)]
pub(super) enum End<'a> {
    Released,
    HandedOver(&'a Handover, Duration, &'a str),
    /// Swept: its elector stopped renewing without releasing.
    Expired,
}

impl Inner {
    pub(super) async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.end_tenure(tenure, End::Released).await
    }

    pub(super) async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<bool> {
        self.end_tenure(tenure, End::HandedOver(to, window, reason))
            .await
    }

    /// Ends `tenure` in one transaction: deletes the lease key, records the
    /// end in the state, and for a hand-over writes the hand-over key.
    pub(super) async fn end_tenure(&self, tenure: &Tenure, end: End<'_>) -> Result<bool> {
        let handover = match end {
            End::HandedOver(to, window, reason) => Some((to, window, reason)),
            End::Released | End::Expired => None,
        };
        let key = &tenure.key;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let now = now_us();
        // Carry over what the state says about the term (informational only;
        // the transaction below decides on the lease key alone).
        let old: Option<State> = self
            .get(sk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice(kv.value()).ok());
        let old = old.unwrap_or_default();
        // A swept tenure's history ends, like an expired lease's, at its
        // estimated expiry. The state says "now": followers measure the
        // succession grace from when the key went away.
        let ended = match end {
            End::Expired
                if old.holder.as_deref() == Some(tenure.holder.as_str())
                    && old.end_reason.is_empty()
                    && old.expires_at_us > 0 =>
            {
                old.expires_at_us.min(now)
            }
            _ => now,
        };
        let reason = match end {
            End::Released => "released".to_string(),
            End::Expired => "expired".to_string(),
            End::HandedOver(_, _, r) => r.to_string(),
        };
        let state = State {
            term: Some(tenure.term),
            holder: None,
            metadata: String::new(),
            ttl_ms: old.ttl_ms,
            acquired_at_us: old.acquired_at_us,
            renewed_at_us: old.renewed_at_us,
            expires_at_us: now,
            start_reason: old.start_reason,
            previous_holder: Some(tenure.holder.clone()),
            previous_expires_at_us: now,
            end_reason: reason.clone(),
            ended_at_us: now,
        };
        let state_bytes = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        let mut ops = vec![
            TxnOp::delete(lk.clone(), None),
            TxnOp::put(sk, state_bytes, None),
        ];
        match handover {
            None => ops.push(TxnOp::delete(hk, None)),
            Some((to, window, reason)) => {
                let secs = lease_secs(window);
                let grant = retry(&self.client, |mut c| async move {
                    c.lease_grant(secs, None).await
                })
                .await
                .map_err(|e| self.map_err(e))?;
                let v = HandoverValue {
                    to: to.column().to_string(),
                    reason: reason.to_string(),
                    window_ms: window.as_millis() as u64,
                    requested: false,
                };
                let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
                ops.push(TxnOp::put(
                    hk,
                    v,
                    Some(PutOptions::new().with_lease(grant.id())),
                ));
            }
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk, CompareOp::Equal, tenure.holder.clone()),
            ])
            .and_then(ops);
        let (resp, retried) = self.txn_retried(txn).await.map_err(|e| self.map_err(e))?;
        let mut done = resp.succeeded();
        if !done && retried {
            // Our first attempt may have been applied: the state then records
            // exactly this tenure's end.
            let st: Option<State> = self
                .get(self.k("state", key), None)
                .await
                .map_err(|e| self.map_err(e))?
                .kvs()
                .first()
                .and_then(|kv| serde_json::from_slice(kv.value()).ok());
            done = st.is_some_and(|st| {
                st.term == Some(tenure.term)
                    && st.holder.is_none()
                    && st.previous_holder.as_deref() == Some(tenure.holder.as_str())
                    && st.end_reason == reason
                    && st.ended_at_us == now
            });
        }
        // Ended now or earlier (or never ours): either way nothing of ours
        // to keep alive or sweep. The process lease itself stays: it is shared.
        self.held().tenures.remove(&(key.clone(), tenure.term));
        if done {
            self.close_history(key, tenure.term, &reason, ended).await;
        }
        Ok(done)
    }
}
