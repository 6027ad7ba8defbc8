//! The renewals of one instant in one transaction: each renewal's check of
//! its own keys (and the rewrite of its informational times) is a nested
//! transaction with its own compares, so each lease is still judged on its
//! own, and a process leading a thousand elections sends a handful of
//! transactions per renew instant instead of two thousand.

use etcd_client::{Client, Txn, TxnOp, TxnOpResponse};

use super::errors::map_client_error;
use super::retry::retry;
use crate::store::gather::{Batched, Statement};

/// Renewal checks due at one instant (one group: the nested transactions do
/// not depend on the TTL).
pub(super) struct RenewalChecks {
    pub(super) client: Client,
    pub(super) described: String,
}

/// Nested transactions per transaction. etcd refuses a transaction with more
/// than `--max-txn-ops` (128 by default) operations, and a nested one may use
/// only what its parent left: 100 renewals of 4 compares and 1 put each fit.
const CHUNK: usize = 100;

impl Statement for RenewalChecks {
    /// One renewal's nested transaction: compares on its own keys, then the
    /// rewrite of its state.
    type Item = Txn;
    /// Whether that renewal's compares held.
    type Answer = bool;
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "renewal";

    async fn send(&self, _group: i64, checks: Vec<&Txn>) -> Result<Vec<bool>, String> {
        let outer = Txn::new().and_then(
            checks
                .iter()
                .map(|t| TxnOp::txn((*t).clone()))
                .collect::<Vec<_>>(),
        );
        // A repeat after a failure that was in fact applied only rewrites the
        // same informational times: the compares decide nothing by the put.
        let resp = retry(&self.client, |mut c| {
            let outer = outer.clone();
            async move { c.txn(outer).await }
        })
        .await
        .map_err(|e| map_client_error(&self.described, e).to_string())?;
        resp.op_responses()
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Txn(nested) => Ok(nested.succeeded()),
                other => Err(format!(
                    "renewal transaction answered {other:?} for a nested transaction"
                )),
            })
            .collect()
    }
}

/// The renewal gatherer of one store.
pub(super) fn renewals(
    client: Client,
    described: String,
) -> std::sync::Arc<Batched<RenewalChecks>> {
    Batched::new(
        RenewalChecks {
            client,
            described: described.clone(),
        },
        described,
    )
}
