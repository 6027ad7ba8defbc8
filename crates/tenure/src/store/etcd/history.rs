//! Term history: one entry per term, written after the acquisition, closed
//! at its end, pruned to the retention.

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use super::retry::retry;
use super::values::HistoryValue;
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, EndReason, HistoryRecord, StartReason};

impl Inner {
    /// Records a term's end in its history entry (best effort).
    pub(super) async fn close_history(
        &self,
        key: &ElectionKey,
        term: u64,
        reason: &str,
        at_us: i64,
    ) {
        let hk = self.history_key(key, term);

        let Ok(resp) = self.get(hk.clone(), None).await else {
            return;
        };
        let Some(kv) = resp.kvs().first() else { return };
        let Ok(mut h) = serde_json::from_slice::<HistoryValue>(kv.value()) else {
            return;
        };
        if h.end_at_us.is_some() {
            return;
        }
        h.end_reason = reason.to_string();
        h.end_at_us = Some(at_us);
        let Ok(v) = serde_json::to_vec(&h) else {
            return;
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(
                hk.clone(),
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::put(hk, v, None)]);
        if let Err(e) = self.txn(txn).await {
            tracing::debug!(election = %key, term, "history not updated: {e}");
        }
    }

    /// Starts a term's history entry, closes the expired previous one and
    /// prunes old entries (best effort, after the acquisition).
    pub(super) async fn write_history(
        &self,
        key: &ElectionKey,
        term: u64,
        h: HistoryValue,
        prev: Option<(u64, i64)>,
    ) {
        if let Ok(v) = serde_json::to_vec(&h) {
            let hk = self.history_key(key, term);
            let put = retry(&self.client, |mut c| {
                let (hk, v) = (hk.clone(), v.clone());
                async move { c.put(hk, v, None).await }
            });
            if let Err(e) = put.await {
                tracing::debug!(election = %key, term, "history not written: {e}");
                return;
            }
        }
        if let Some((prev_term, expired_at)) = prev {
            self.close_history(key, prev_term, "expired", expired_at)
                .await;
        }
        let prefix = self.history_prefix(key);
        let mut c = self.client.clone();
        let Ok(count) = self
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
        else {
            return;
        };
        let excess = (count.count() as u64).saturating_sub(self.history_retention);
        if excess == 0 {
            return;
        }
        let Ok(old) = self
            .get(
                prefix.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_sort(SortTarget::Key, SortOrder::Ascend)
                        .with_limit(excess as i64),
                ),
            )
            .await
        else {
            return;
        };
        if let Some(last) = old.kvs().last() {
            let mut end = last.key().to_vec();
            end.push(0);
            let _ = c
                .delete(prefix, Some(DeleteOptions::new().with_range(end)))
                .await;
        }
    }

    pub(super) async fn history(
        &self,
        key: &ElectionKey,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>> {
        let resp = self
            .get(
                self.history_prefix(key),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Key, SortOrder::Descend)
                        .with_limit(limit as i64),
                ),
            )
            .await
            .map_err(|e| self.map_err(e))?;
        let prefix = self.history_prefix(key);
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let term = std::str::from_utf8(kv.key())
                    .ok()?
                    .strip_prefix(&prefix)?
                    .parse::<u64>()
                    .ok()?;
                let h: HistoryValue = serde_json::from_slice(kv.value()).ok()?;
                Some(HistoryRecord {
                    key: key.clone(),
                    term,
                    holder: h.holder,
                    start_reason: StartReason::required(&h.start_reason).ok()?,
                    start_at_us: h.start_at_us,
                    end_reason: EndReason::from_column(&h.end_reason).ok()?,
                    end_at_us: h.end_at_us,
                })
            })
            .collect())
    }
}
