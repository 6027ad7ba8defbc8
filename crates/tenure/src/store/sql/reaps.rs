//! Batched reaping: leaders drop their elections' lapsed members every few
//! renewals, on the renewal grid, so a process leading many elections reaps
//! them all with one `DELETE` per instant instead of one each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::AnyPool;
use tokio::sync::oneshot;

use super::dialect::Dialect;
use super::errors::map_err;
use super::gather::{Gather, GATHER};
use super::statements::sent;
use crate::error::{Error, Result};
use crate::store::ElectionKey;

/// Elections per statement (2 parameters each).
const CHUNK: usize = 1000;

struct Pending {
    key: ElectionKey,
    reply: oneshot::Sender<Result<u64>>,
}

pub(super) struct Reaps {
    queue: Gather<Pending>,
    statements: AtomicU64,
    pool: AnyPool,
    dialect: Dialect,
    table: String,
    prefix: String,
    store: String,
}

impl std::fmt::Debug for Reaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reaps").field("table", &self.table).finish()
    }
}

impl Reaps {
    pub(super) fn new(pool: AnyPool, dialect: Dialect, prefix: &str, store: String) -> Arc<Self> {
        Arc::new(Self {
            queue: Gather::new(),
            statements: AtomicU64::new(0),
            pool,
            dialect,
            table: format!("{prefix}members"),
            prefix: prefix.to_string(),
            store,
        })
    }

    /// Reap statements sent so far.
    pub(super) fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// Queues a reap of `key` and waits for the statement it joins; answers
    /// how many registrations that statement removed (for every election in it).
    pub(super) async fn reap(self: &Arc<Self>, key: &ElectionKey) -> Result<u64> {
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            key: key.clone(),
            reply: tx,
        };
        if self.queue.push(0, pending) {
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                for (_, mut pending) in me.queue.take() {
                    while !pending.is_empty() {
                        let rest = pending.split_off(pending.len().min(CHUNK));
                        me.flush(std::mem::replace(&mut pending, rest)).await;
                    }
                }
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason: "reap batch was abandoned".into(),
            })
        })
    }

    async fn flush(&self, pending: Vec<Pending>) {
        let tuples = vec!["(?, ?)"; pending.len()].join(", ");
        let sql = self.dialect.delete(
            &self.table,
            &format!("(namespace, election) IN ({tuples}) AND expires_us <= {{now}}"),
        );
        let sql = sent(self.dialect, &sql);
        let mut q = sqlx::query(&sql);
        for p in &pending {
            q = q
                .bind(p.key.namespace.as_str())
                .bind(p.key.election.as_str());
        }
        self.statements.fetch_add(1, Ordering::Relaxed);
        let result = q
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(|e| map_err(&self.store, &self.prefix, e).to_string());
        for p in pending {
            let _ = p
                .reply
                .send(result.clone().map_err(|reason| Error::Unavailable {
                    source: None,
                    store: self.store.clone(),
                    reason,
                }));
        }
    }
}
