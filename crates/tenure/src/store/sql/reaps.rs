//! Batched reaping: leaders drop their elections' lapsed members every few
//! renewals, on the renewal grid, so a process leading many elections reaps
//! them all with one `DELETE` per instant ([`Batched`]) instead of one each.

use std::sync::Arc;

use sqlx::AnyPool;

use super::dialect::Dialect;
use super::errors::map_err;
use super::statements::sent;
use crate::store::gather::{Batched, Statement};
use crate::store::ElectionKey;

/// The `DELETE` of lapsed members of many elections; every call is answered
/// how many registrations the statement removed.
pub(super) struct Reaps {
    pool: AnyPool,
    dialect: Dialect,
    table: String,
    prefix: String,
    store: String,
}

impl Reaps {
    pub(super) fn batched(
        pool: AnyPool,
        dialect: Dialect,
        prefix: &str,
        store: String,
    ) -> Arc<Batched<Self>> {
        let statement = Self {
            pool,
            dialect,
            table: format!("{prefix}members"),
            prefix: prefix.to_string(),
            store: store.clone(),
        };
        Batched::new(statement, store)
    }
}

impl Statement for Reaps {
    type Item = ElectionKey;
    type Answer = u64;
    /// 2 parameters each.
    const CHUNK: usize = 1000;
    const WHAT: &'static str = "reap";

    /// Every call is answered with the statement's count.
    async fn send(&self, _group: i64, keys: Vec<&ElectionKey>) -> Result<Vec<u64>, String> {
        let n = keys.len();
        let tuples = vec!["(?, ?)"; keys.len()].join(", ");
        let sql = self.dialect.delete(
            &self.table,
            &format!("(namespace, election) IN ({tuples}) AND expires_us <= {{now}}"),
        );
        let sql = sent(self.dialect, &sql);
        let mut q = sqlx::query(&sql);
        for key in keys {
            q = q.bind(key.namespace.as_str()).bind(key.election.as_str());
        }
        q.execute(&self.pool)
            .await
            .map(|done| vec![done.rows_affected(); n])
            .map_err(|e| map_err(&self.store, &self.prefix, e).to_string())
    }
}
