//! Calls of one instant in one request: each renewal's check of its own keys
//! (and the rewrite of its informational times) and each member heartbeat is
//! a nested transaction with its own compares, so each is still judged on its
//! own; the member reads of reaps share one transaction of range reads. A
//! process leading a thousand elections sends a handful of transactions per
//! renew instant instead of thousands.

use etcd_client::{Client, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::errors::map_client_error;
use super::retry::retry;
use crate::store::util::gather::{Batched, Statement};
use crate::telemetry::store_statements;

/// Operations per transaction. etcd refuses a transaction with more than
/// `--max-txn-ops` (128 by default) operations, and a nested one may use only
/// what its parent left: 100 nested transactions of up to 4 compares and 1 put
/// each fit.
const CHUNK: usize = 100;

/// What every batched call needs.
#[derive(Clone)]
pub(super) struct Caller {
    pub(super) client: Client,
    pub(super) described: String,
}

impl Caller {
    /// One transaction of `ops` (no compares), retried through transient
    /// failures: every nested transaction is a compare-and-set and every read
    /// a read, so a repeat of one that was in fact applied changes nothing
    /// but informational times.
    /// Also answers the transaction's revision: every write in it, nested
    /// or not, is at that revision (nested responses carry no header).
    async fn send(&self, ops: Vec<TxnOp>) -> Result<(Vec<TxnOpResponse>, i64), String> {
        let outer = Txn::new().and_then(ops);
        let resp = retry(&self.client, |mut c| {
            let outer = outer.clone();
            async move { c.txn(outer).await }
        })
        .await
        .map_err(|e| map_client_error(&self.described, e).to_string())?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((resp.op_responses(), revision))
    }
}

/// Nested transactions gathered into one (renewal checks, heartbeats).
pub(super) struct Nested(Caller);

impl Statement for Nested {
    /// One call's transaction: compares on its own keys, then its writes.
    type Item = Txn;
    /// Whether its compares held, and the revision of the transaction.
    type Answer = (bool, i64);
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "etcd transaction";

    async fn send(&self, _group: i64, txns: Vec<&Txn>) -> Result<Vec<(bool, i64)>, String> {
        let ops = txns.iter().map(|t| TxnOp::txn((*t).clone())).collect();
        let (responses, revision) = self.0.send(ops).await?;
        responses
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Txn(nested) => Ok((nested.succeeded(), revision)),
                other => Err(format!("a batched transaction answered {other:?}")),
            })
            .collect()
    }
}

/// Range reads of key prefixes gathered into one transaction (the member
/// lists that reaps read).
pub(super) struct PrefixReads(Caller);

impl Statement for PrefixReads {
    type Item = String;
    type Answer = Vec<KeyValue>;
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "etcd read";

    async fn send(
        &self,
        _group: i64,
        prefixes: Vec<&String>,
    ) -> Result<Vec<Vec<KeyValue>>, String> {
        let ops = prefixes
            .iter()
            .map(|p| TxnOp::get(p.as_str(), Some(GetOptions::new().with_prefix())))
            .collect();
        let (responses, _) = self.0.send(ops).await?;
        responses
            .into_iter()
            .map(|r| match r {
                TxnOpResponse::Get(g) => Ok(g.kvs().to_vec()),
                other => Err(format!("a batched read answered {other:?}")),
            })
            .collect()
    }
}

/// The gatherers of one store.
pub(super) struct Batches {
    pub(super) renewals: std::sync::Arc<Batched<Nested>>,
    pub(super) heartbeats: std::sync::Arc<Batched<Nested>>,
    pub(super) member_reads: std::sync::Arc<Batched<PrefixReads>>,
}

impl Batches {
    pub(super) fn new(caller: Caller) -> Self {
        let d = caller.described.clone();
        Self {
            renewals: Batched::new(
                Nested(caller.clone()),
                d.clone(),
                store_statements("etcd", "renew"),
            ),
            heartbeats: Batched::new(
                Nested(caller.clone()),
                d.clone(),
                store_statements("etcd", "heartbeat"),
            ),
            member_reads: Batched::new(
                PrefixReads(caller),
                d,
                store_statements("etcd", "member_read"),
            ),
        }
    }
}
