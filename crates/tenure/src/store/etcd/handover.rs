//! Hand-over requests: a hand-over key on the holder's live lease.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::errors::is_lease_not_found;
use super::read::Snapshot;
use super::values::HandoverValue;
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, Handover, LeaseRecord};

impl Inner {
    pub(super) async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<Option<LeaseRecord>> {
        for _ in 0..3 {
            let (snap, _) = self.snapshot(key).await?;
            let Some(lease_kv) = snap.lease.clone() else {
                return Ok(None);
            };
            let v = HandoverValue {
                to: to.column().to_string(),
                reason: reason.to_string(),
                window_ms: window.as_millis() as u64,
                requested: true,
            };
            let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
            let lk = self.k("lease", key);
            let hk = self.k("handover", key);
            // Attached to the holder's lease: the request ends with its lease.
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(lk, CompareOp::Equal, lease_kv.mod_revision()),
                    Compare::mod_revision(
                        hk.clone(),
                        CompareOp::Equal,
                        Snapshot::mod_rev(&snap.handover),
                    ),
                ])
                .and_then([TxnOp::put(
                    hk,
                    v,
                    Some(PutOptions::new().with_lease(lease_kv.lease())),
                )]);
            match self.txn(txn).await {
                Ok(r) if r.succeeded() => {
                    let (snap, _) = self.snapshot(key).await?;
                    return self.record(key, &snap).await;
                }
                Ok(_) => continue,
                Err(e) if is_lease_not_found(&e) => return Ok(None),
                Err(e) => return Err(self.map_err(e)),
            }
        }
        Err(self.unavailable("the lease kept changing during a hand-over request".into()))
    }
}
