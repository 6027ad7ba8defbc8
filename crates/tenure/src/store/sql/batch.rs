//! Batched renewals: one process holding many leases renews them all with one
//! statement per renew period instead of one per lease.
//!
//! Electors schedule renewals on a shared grid (multiples of the renew period on
//! the boot clock), so they call `renew` at the same instants; calls arriving
//! within a couple of milliseconds are gathered here and sent together. The
//! statement is the same compare-and-set as a single renewal, per lease:
//! `(namespace, election, holder, term) IN (...) AND expires_us > now`.

use std::sync::Arc;
use std::time::Duration;

use sqlx::Row;
use tokio::sync::oneshot;

use super::connection::OneConnection;
use super::dialect::Dialect;
use super::errors::map_err;
use super::statements::{duration_us, sent, term_i64};
use crate::error::{Error, Result};
use crate::store::util::gather::{abandoned, Gather};
use crate::store::Tenure;

/// Leases per statement (4 parameters each; every dialect allows far more).
const CHUNK: usize = 2000;

struct Pending {
    tenure: Tenure,
    reply: oneshot::Sender<Result<bool>>,
}

pub(super) struct Batcher {
    /// By TTL in µs: one statement per distinct TTL.
    queue: Gather<Pending>,
    /// Renewal statements sent, batched and single
    /// (`tenure_store_statements_total`).
    statements: metrics::Counter,
    own: Arc<OneConnection>,
    dialect: Dialect,
    table: String,
    prefix: String,
    store: String,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("table", &self.table)
            .finish()
    }
}

impl Batcher {
    pub(super) fn new(
        own: Arc<OneConnection>,
        dialect: Dialect,
        prefix: &str,
        store: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            queue: Gather::new(),
            statements: crate::telemetry::store_statements(dialect.backend(), "renew"),
            own,
            dialect,
            table: format!("{prefix}leases"),
            prefix: prefix.to_string(),
            store,
        })
    }

    pub(super) fn count_statement(&self) {
        self.statements.increment(1);
    }

    /// Queues a renewal and waits for the batch it joins.
    pub(super) async fn renew(self: &Arc<Self>, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let (tx, rx) = oneshot::channel();
        let pending = Pending {
            tenure: tenure.clone(),
            reply: tx,
        };
        if self.queue.push(duration_us(ttl), pending) {
            // A task of its own: if this caller gives up (its deadline), the
            // others in the batch still get their answers.
            let me = self.clone();
            tokio::spawn(async move {
                me.queue.settled().await;
                for (ttl_us, pending) in me.queue.take() {
                    for chunk in into_chunks(pending) {
                        me.flush(ttl_us, chunk).await;
                    }
                }
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason: "renewal batch was abandoned".into(),
            })
        })
    }

    /// The renewal's condition for `n` leases: held by that holder under
    /// that term, unexpired by the store's clock, no hand-over requested (a
    /// pending hand-over request makes the renewal fail, so the leader steps
    /// down).
    fn condition(n: usize) -> String {
        let tuples = vec!["(?, ?, ?, ?)"; n].join(", ");
        format!("(namespace, election, holder, term) IN ({tuples}) AND expires_us > {{now}} AND handover_to = ''")
    }

    fn sql(&self, n: usize) -> String {
        self.dialect.update(
            &self.table,
            "version = version + 1, ttl_us = ?, renewed_us = {now}, expires_us = {now} + ?",
            &Self::condition(n),
            Some("namespace, election, holder, term"),
        )
    }

    /// Without RETURNING (MySQL): which of `n` leases the renewal just
    /// extended. The same condition, read after the update, matches exactly the
    /// leases it extended: one it did not extend was expired, had a hand-over
    /// request, or was someone else's, and none of that is undone without a new
    /// term. A hand-over requested in between makes a lease drop out, which
    /// only errs towards stepping down.
    fn renewed_sql(&self, n: usize) -> String {
        self.dialect.plain(format!(
            "SELECT namespace, election, holder, term FROM {} WHERE {}",
            self.table,
            Self::condition(n)
        ))
    }

    fn bind_tenures<'q>(
        mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
        tenures: &'q [Tenure],
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        for t in tenures {
            q = q
                .bind(t.key.namespace.as_str())
                .bind(t.key.election.as_str())
                .bind(t.holder.as_str())
                .bind(term_i64(t.term));
        }
        q
    }

    /// Whether each of `tenures` is among `rows`, the leases renewed.
    fn renewed(tenures: &[Tenure], rows: &[sqlx::any::AnyRow]) -> Vec<bool> {
        let renewed: Vec<(String, String, String, i64)> = rows
            .iter()
            .filter_map(|r| {
                Some((
                    r.try_get(0).ok()?,
                    r.try_get(1).ok()?,
                    r.try_get(2).ok()?,
                    r.try_get(3).ok()?,
                ))
            })
            .collect();
        tenures
            .iter()
            .map(|t| {
                renewed.iter().any(|(ns, el, h, term)| {
                    *ns == t.key.namespace
                        && *el == t.key.election
                        && *h == t.holder
                        && *term == term_i64(t.term)
                })
            })
            .collect()
    }

    /// Sends the batch and answers each renewal, unless every caller gave
    /// up first (see [`abandoned`]).
    async fn flush(&self, ttl_us: i64, pending: Vec<Pending>) {
        let (tenures, mut replies): (Vec<Tenure>, Vec<_>) =
            pending.into_iter().map(|p| (p.tenure, p.reply)).unzip();
        let renewed = tokio::select! {
            renewed = self.send(ttl_us, &tenures) => renewed,
            () = abandoned(&mut replies) => return,
        };
        match renewed {
            Ok(renewed) => {
                for (reply, ok) in replies.into_iter().zip(renewed) {
                    let _ = reply.send(Ok(ok));
                }
            }
            Err(e) => self.fail(replies, e),
        }
    }

    /// The renewal of `tenures` on the store's connection: which it renewed.
    async fn send(
        &self,
        ttl_us: i64,
        tenures: &[Tenure],
    ) -> std::result::Result<Vec<bool>, sqlx::Error> {
        let mut lent = self.own.lend().await?;
        let sql = self.sql(tenures.len());
        let sql = sent(self.dialect, &sql);
        let q = Self::bind_tenures(sqlx::query(&sql).bind(ttl_us).bind(ttl_us), tenures);
        self.count_statement();
        if self.dialect.has_update_returning() {
            let rows = q.fetch_all(lent.conn()).await;
            let rows = lent.keep_if_ok(rows).await?;
            return Ok(Self::renewed(tenures, &rows));
        }
        // MySQL has no RETURNING: if every lease matched we are done; else one
        // read finds out which (never one statement per lease: with many
        // elections the later ones would pass their deadlines together).
        let done = q.execute(lent.conn()).await?;
        if done.rows_affected() as usize == tenures.len() {
            lent.keep().await?;
            return Ok(vec![true; tenures.len()]);
        }
        let read = self.renewed_sql(tenures.len());
        let read = sent(self.dialect, &read);
        self.count_statement();
        let rows = Self::bind_tenures(sqlx::query(&read), tenures)
            .fetch_all(lent.conn())
            .await;
        let rows = lent.keep_if_ok(rows).await?;
        Ok(Self::renewed(tenures, &rows))
    }

    fn fail(&self, replies: Vec<oneshot::Sender<Result<bool>>>, e: sqlx::Error) {
        let err = map_err(&self.store, &self.prefix, e);
        let msg = err.to_string();
        for reply in replies {
            let _ = reply.send(Err(Error::Unavailable {
                source: None,
                store: self.store.clone(),
                reason: msg.clone(),
            }));
        }
    }
}

fn into_chunks(mut v: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut out = Vec::new();
    while v.len() > CHUNK {
        let rest = v.split_off(CHUNK);
        out.push(v);
        v = rest;
    }
    out.push(v);
    out
}
