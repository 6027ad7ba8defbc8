//! Batched member heartbeats: a process in many elections registers all its
//! members with one statement per heartbeat instant instead of one each.
//!
//! Electors heartbeat on a shared grid (multiples of the TTL on the boot
//! clock), so their calls arrive together; calls within [`GATHER`] share one
//! multi-row upsert. Heartbeats are bookkeeping (who may succeed), never a
//! safety decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::AnyPool;
use tokio::sync::oneshot;

use super::dialect::Dialect;
use super::errors::map_err;
use super::gather::{Gather, GATHER};
use super::statements::{duration_us, sent};
use crate::error::{Error, Result};
use crate::store::{identity_of, Member};

/// Members per statement (7 parameters each; far below every dialect's limit).
const CHUNK: usize = 500;

struct Pending {
    member: Member,
    reply: oneshot::Sender<Result<()>>,
}

pub(super) struct Heartbeats {
    /// By TTL in µs: one statement per distinct TTL.
    queue: Gather<Pending>,
    statements: AtomicU64,
    pool: AnyPool,
    dialect: Dialect,
    table: String,
    prefix: String,
    store: String,
}

impl std::fmt::Debug for Heartbeats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeats")
            .field("table", &self.table)
            .finish()
    }
}

impl Heartbeats {
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

    /// Heartbeat statements sent so far.
    pub(super) fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// Queues a heartbeat and waits for the statement it joins.
    pub(super) async fn heartbeat(self: &Arc<Self>, member: &Member, ttl: Duration) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            member: member.clone(),
            reply: tx,
        };
        if self.queue.push(duration_us(ttl), pending) {
            // A task of its own, so a caller that gives up does not strand the others.
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(GATHER).await;
                for (ttl_us, mut pending) in me.queue.take() {
                    // One row per member: PostgreSQL refuses to update a row
                    // twice in one statement.
                    pending.sort_by(|a, b| {
                        (&a.member.key, &a.member.holder).cmp(&(&b.member.key, &b.member.holder))
                    });
                    while !pending.is_empty() {
                        let rest = pending.split_off(pending.len().min(CHUNK));
                        me.flush(ttl_us, std::mem::replace(&mut pending, rest))
                            .await;
                    }
                }
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason: "heartbeat batch was abandoned".into(),
            })
        })
    }

    async fn flush(&self, ttl_us: i64, mut pending: Vec<Pending>) {
        // A member queued twice (a retry) is written once; both get the answer.
        let mut rows: Vec<&Member> = Vec::with_capacity(pending.len());
        for p in &pending {
            if rows
                .last()
                .is_none_or(|m| m.key != p.member.key || m.holder != p.member.holder)
            {
                rows.push(&p.member);
            }
        }
        let sql = self.dialect.upsert_members(&self.table, rows.len());
        let sql = sent(self.dialect, &sql);
        let mut q = sqlx::query(&sql);
        for m in &rows {
            q = q
                .bind(m.key.namespace.as_str())
                .bind(m.key.election.as_str())
                .bind(m.holder.as_str())
                .bind(identity_of(&m.holder))
                .bind(m.metadata.as_str())
                .bind(i64::from(m.priority))
                .bind(ttl_us);
        }
        self.statements.fetch_add(1, Ordering::Relaxed);
        let result = q.execute(&self.pool).await;
        let result = result.map(|_| ()).map_err(|e| {
            let err = map_err(&self.store, &self.prefix, e);
            err.to_string()
        });
        for p in pending.drain(..) {
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
