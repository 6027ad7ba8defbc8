//! Writes fenced by the lease: the application's operations in the same
//! etcd transaction that compares the tenure's lease key.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnResponse};

use super::EtcdStore;
use crate::error::{Error, Result};
use crate::store::Tenure;

impl EtcdStore {
    /// Runs `ops` (puts, deletes, gets on the application's own keys) in one
    /// etcd transaction that also compares `tenure`'s lease key: it must
    /// still exist (its etcd lease has not expired), be the one created for
    /// this term, and name this holder. Otherwise nothing is written and the
    /// result is [`Error::NotLeader`], so a paused leader that wakes after a
    /// successor took over cannot write.
    ///
    /// Not retried: an error may leave it unknown whether the transaction
    /// applied (read back if that matters).
    ///
    /// ```no_run
    /// # async fn demo(store: &tenure::store::etcd::EtcdStore, leadership: &tenure::Leadership) -> tenure::Result<()> {
    /// use etcd_client::TxnOp;
    /// store
    ///     .fenced_txn(
    ///         &leadership.tenure(),
    ///         [TxnOp::put("/app/config/leader-term", leadership.term().to_string(), None)],
    ///     )
    ///     .await?; // Err(NotLeader) if a successor took over: nothing was written
    /// # Ok(()) }
    /// ```
    pub async fn fenced_txn(
        &self,
        tenure: &Tenure,
        ops: impl IntoIterator<Item = TxnOp>,
    ) -> Result<TxnResponse> {
        let inner = &self.inner;
        let lk = inner.k("lease", &tenure.key);
        let term = i64::try_from(tenure.term).map_err(|_| Error::NotLeader {
            election: tenure.key.to_string(),
        })?;
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, term),
                Compare::value(lk, CompareOp::Equal, tenure.holder.clone()),
            ])
            .and_then(ops.into_iter().collect::<Vec<_>>());
        let resp = inner
            .client
            .clone()
            .txn(txn)
            .await
            .map_err(|e| inner.map_err(e))?;
        if resp.succeeded() {
            Ok(resp)
        } else {
            Err(Error::NotLeader {
                election: tenure.key.to_string(),
            })
        }
    }
}
