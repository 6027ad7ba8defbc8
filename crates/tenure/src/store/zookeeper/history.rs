//! Term history: `history/<term:020>`, created by the acquisition's
//! multi-op, closed at the term's end, pruned to the retention.

use zookeeper_client::{Error as ZkError, MultiReadResult};

use super::values::HistoryValue;
use super::Inner;
use crate::error::Result;
use crate::store::{ElectionKey, EndReason, HistoryRecord, StartReason};

impl Inner {
    /// Records a term's end (best effort: the lease decisions never read it).
    pub(super) async fn close_history(
        &self,
        key: &ElectionKey,
        term: u64,
        reason: &str,
        at_us: i64,
    ) {
        let Ok(c) = self.main().await else { return };
        let path = self.history_path(key, term);
        let Ok((data, stat)) = c.get_data(&path).await else {
            return;
        };
        let Ok(mut h) = serde_json::from_slice::<HistoryValue>(&data) else {
            return;
        };
        if h.end_at_us.is_some() {
            return;
        }
        h.end_reason = reason.to_string();
        h.end_at_us = Some(at_us);
        let Ok(b) = serde_json::to_vec(&h) else {
            return;
        };
        if let Err(e) = c.set_data(&path, &b, Some(stat.version)).await {
            tracing::debug!(election = %key, term, "history not updated: {e}");
        }
    }

    /// Deletes entries beyond the retention (best effort).
    pub(super) async fn prune_history(&self, key: &ElectionKey, term: u64) {
        if term <= self.history_retention {
            return;
        }
        let Ok(c) = self.main().await else { return };
        let dir = format!("{}/history", self.dir(key));
        let Ok(names) = c.list_children(&dir).await else {
            return;
        };
        let oldest_kept = term - self.history_retention + 1;
        for n in names {
            if n.parse::<u64>().is_ok_and(|t| t < oldest_kept) {
                let _ = c.delete(&format!("{dir}/{n}"), None).await;
            }
        }
    }

    pub(super) async fn history(
        &self,
        key: &ElectionKey,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>> {
        let c = self.main().await?;
        let dir = format!("{}/history", self.dir(key));
        let mut terms: Vec<u64> = match c.list_children(&dir).await {
            Ok(n) => n.iter().filter_map(|n| n.parse().ok()).collect(),
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(self.map(&dir, e)),
        };
        terms.sort_unstable_by(|a, b| b.cmp(a));
        terms.truncate(limit);
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let mut r = c.new_multi_reader();
        for t in &terms {
            r.add_get_data(&self.history_path(key, *t))
                .map_err(|e| self.map(&dir, e))?;
        }
        let res = r.commit().await.map_err(|e| self.map(&dir, e))?;
        let mut out = Vec::with_capacity(terms.len());
        for (term, r) in terms.into_iter().zip(res) {
            let MultiReadResult::Data { data, .. } = r else {
                continue;
            };
            let h: HistoryValue = serde_json::from_slice(&data)
                .map_err(|e| self.protocol(format!("history of {key} term {term}: {e}")))?;
            let bad = |e: String| self.protocol(format!("history of {key} term {term}: {e}"));
            out.push(HistoryRecord {
                key: key.clone(),
                term,
                holder: h.holder,
                start_reason: StartReason::required(&h.start_reason).map_err(bad)?,
                start_at_us: h.start_at_us,
                end_reason: EndReason::from_column(&h.end_reason).map_err(bad)?,
                end_at_us: h.end_at_us,
            });
        }
        Ok(out)
    }
}
