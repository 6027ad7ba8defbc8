//! Batched member heartbeats: a process in many elections registers all its
//! members with one statement per heartbeat instant instead of one each.
//!
//! Electors heartbeat on a shared grid (multiples of the TTL on the boot
//! clock), so their calls arrive together and share one multi-row upsert
//! ([`Batched`]). Heartbeats are bookkeeping (who may succeed), never a
//! safety decision.

use std::collections::HashSet;
use std::sync::Arc;

use super::connection::OneConnection;
use super::dialect::Dialect;
use super::errors::map_err;
use super::statements::{bind_member, sent, Query};
use crate::store::util::gather::{Batched, Statement};
use crate::store::Member;

/// The members table as the batched heartbeats and reaps write it.
#[derive(Clone)]
pub(super) struct MembersTable {
    own: Arc<OneConnection>,
    pub(super) dialect: Dialect,
    pub(super) table: String,
    prefix: String,
    store: String,
}

impl MembersTable {
    pub(super) fn new(
        own: Arc<OneConnection>,
        dialect: Dialect,
        prefix: &str,
        store: String,
    ) -> Self {
        Self {
            own,
            dialect,
            table: format!("{prefix}members"),
            prefix: prefix.to_string(),
            store,
        }
    }

    /// The lease table of the same prefix.
    pub(super) fn leases_table(&self) -> String {
        format!("{}leases", self.prefix)
    }

    /// Runs one statement; rows affected, or the error explained.
    pub(super) async fn execute(&self, query: Query<'_>) -> Result<u64, String> {
        let explain = |e| map_err(&self.store, &self.prefix, e).to_string();
        let mut lent = self.own.lend().await.map_err(explain)?;
        let done = query.execute(lent.conn()).await;
        lent.keep_if_ok(done)
            .await
            .map(|done| done.rows_affected())
            .map_err(explain)
    }

    /// A gatherer of `statement` calls, described as this store in errors
    /// and counted as `what` statements of this store's kind.
    pub(super) fn batched<S: Statement>(
        &self,
        statement: S,
        what: &'static str,
    ) -> Arc<Batched<S>> {
        let sent = crate::telemetry::store_statements(self.dialect.backend(), what);
        Batched::new(statement, self.store.clone(), sent)
    }
}

/// The multi-row upsert of members' heartbeats; the group is the TTL in µs.
pub(super) struct Heartbeats(pub(super) MembersTable);

impl Statement for Heartbeats {
    type Item = Member;
    type Answer = ();
    /// 7 parameters each, 7,000 a statement: below every dialect's limit
    /// (SQLite 32,766; MySQL and PostgreSQL 65,535). A process with 1,000
    /// elections heartbeats them in one statement.
    const CHUNK: usize = 1000;
    const WHAT: &'static str = "heartbeat";

    async fn send(&self, ttl_us: i64, members: Vec<&Member>) -> Result<Vec<()>, String> {
        let n = members.len();
        // One row per member (a retry may queue one twice): PostgreSQL
        // refuses to update a row twice in one statement.
        let mut seen = HashSet::new();
        let rows: Vec<&Member> = members
            .into_iter()
            .filter(|m| seen.insert((&m.key, &m.holder)))
            .collect();
        let t = &self.0;
        let sql = t.dialect.upsert_members(&t.table, rows.len());
        let sql = sent(t.dialect, &sql);
        let mut q = sqlx::query(&sql);
        for m in &rows {
            q = bind_member(q, m, ttl_us);
        }
        t.execute(q).await.map(|_| vec![(); n])
    }
}
