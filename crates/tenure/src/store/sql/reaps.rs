//! Batched reaping: leaders drop their elections' lapsed members every few
//! renewals, on the renewal grid, so a process leading many elections reaps
//! them all with one `DELETE` per instant ([`Batched`]) instead of one each.

use super::heartbeats::MembersTable;
use super::statements::sent;
use crate::store::util::gather::Statement;
use crate::store::ElectionKey;

/// The `DELETE` of lapsed members of many elections; every call is answered
/// how many registrations the statement removed.
pub(super) struct Reaps(pub(super) MembersTable);

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
        let t = &self.0;
        let (m, l) = (&t.table, t.leases_table());
        // Never the holder of the unexpired lease: a leader sends no
        // heartbeats (its lease vouches for it), so its row lapses while it
        // leads, and a reap must not drop it from the member list.
        let sql = t.dialect.delete(
            m,
            &format!(
                "(namespace, election) IN ({tuples}) AND expires_us <= {{now}} \
                 AND NOT EXISTS (SELECT 1 FROM {l} l WHERE l.namespace = {m}.namespace \
                 AND l.election = {m}.election AND l.holder = {m}.holder \
                 AND l.expires_us > {{now}})"
            ),
        );
        let sql = sent(t.dialect, &sql);
        let mut q = sqlx::query(&sql);
        for key in keys {
            q = q.bind(key.namespace.as_str()).bind(key.election.as_str());
        }
        t.execute(q).await.map(|removed| vec![removed; n])
    }
}
