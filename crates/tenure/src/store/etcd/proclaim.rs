//! A holder's new metadata: rewritten in the state key, only while the
//! lease key is still this tenure's.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use super::values::State;
use super::Inner;
use crate::error::Result;
use crate::store::Tenure;

impl Inner {
    pub(super) async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        // Only a tenure this process holds has a lease to compare with.
        // Renewals rewrite the state from this copy, so it changes first:
        // a renewal that started before may still write the old metadata,
        // and the next one writes the new again.
        let lease_id = {
            let mut held = self.held();
            match held.tenures.get_mut(&(tenure.key.clone(), tenure.term)) {
                Some(t) if t.holder == tenure.holder => {
                    t.state.metadata = metadata.to_string();
                    t.lease_id
                }
                _ => return Ok(false),
            }
        };
        let lk = self.k("lease", &tenure.key);
        let sk = self.k("state", &tenure.key);
        // The state is rewritten as it stands (its times are the last
        // renewal's), compared by revision against a renewal in between.
        for _ in 0..3 {
            let current = self
                .get(sk.clone(), None)
                .await
                .map_err(|e| self.map_err(e))?;
            let kv = current.kvs().first();
            let mut state: State = kv
                .and_then(|kv| serde_json::from_slice(kv.value()).ok())
                .unwrap_or_default();
            state.metadata = metadata.to_string();
            // As a renewal writes it: the term named, no longer implied by
            // this key's revision (which this write moves).
            state.term = Some(tenure.term);
            let bytes = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
            let state_rev = kv.map(|kv| kv.mod_revision()).unwrap_or(0);
            let tenure_holds = [
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk.clone(), CompareOp::Equal, tenure.holder.clone()),
                Compare::lease(lk.clone(), CompareOp::Equal, lease_id),
            ];
            let txn = Txn::new()
                .when(
                    tenure_holds
                        .iter()
                        .cloned()
                        .chain([Compare::mod_revision(
                            sk.clone(),
                            CompareOp::Equal,
                            state_rev,
                        )])
                        .collect::<Vec<_>>(),
                )
                .and_then([TxnOp::put(sk.clone(), bytes, None)])
                .or_else([TxnOp::txn(Txn::new().when(tenure_holds))]);
            let answer = self.txn(txn).await.map_err(|e| self.map_err(e))?;
            if answer.succeeded() {
                return Ok(true);
            }
            // Lost to a renewal's rewrite: again, unless the tenure is over.
            let still_held = answer
                .op_responses()
                .first()
                .is_some_and(|r| matches!(r, etcd_client::TxnOpResponse::Txn(t) if t.succeeded()));
            if !still_held {
                return Ok(false);
            }
        }
        Err(self.unavailable("the state kept changing while the metadata was rewritten".into()))
    }
}
