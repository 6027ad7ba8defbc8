//! Renewals, member heartbeats and reaps of many elections in one script call
//! each: a process leading a thousand elections makes one request per renew
//! instant, not a thousand. The calls are gathered as the SQL stores gather
//! theirs ([`Batched`]); each script loops over its keys doing what the
//! single-election script did, so the decision per lease is unchanged.

use std::sync::Arc;

use redis::aio::ConnectionManager;

use super::scripts::Scripts;
use crate::store::util::gather::{Batched, Statement};
use crate::store::{ElectionKey, Member, Tenure};
use crate::telemetry::store_statements;

/// What every batched script call needs: the connection, the scripts and how
/// keys are spelled.
#[derive(Clone)]
pub(super) struct Caller {
    pub(super) conn: ConnectionManager,
    pub(super) scripts: Arc<Scripts>,
    pub(super) prefix: String,
    pub(super) described: String,
}

impl Caller {
    async fn call<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, String> {
        invocation
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| super::errors::classify(&self.described, e).to_string())
    }

    fn key(&self, kind: &str, key: &ElectionKey) -> String {
        super::RedisStore::key_for(&self.prefix, kind, key)
    }
}

/// Renewals due at one instant, one group per TTL (µs).
pub(super) struct Renewals(pub(super) Caller);
/// Member heartbeats due at one instant, one group per registration TTL (µs).
pub(super) struct Heartbeats(pub(super) Caller);
/// Reaps of lapsed members.
pub(super) struct Reaps(pub(super) Caller);

/// Keys per script call: each is a few commands inside the script, and a
/// call blocks every other client of the server while it runs: ~20 µs a key
/// (`SLOWLOG`, Redis 7.0 here: 1,000 renewals or heartbeats 16-24 ms, 500
/// about half). 500 keeps a stall near 10 ms, at the price of two calls per
/// instant for a process with 1,000 elections (one would do, but a shared
/// Redis's other clients matter more).
const CHUNK: usize = 500;

impl Statement for Renewals {
    type Item = Tenure;
    type Answer = bool;
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "renewal";

    async fn send(&self, ttl_us: i64, tenures: Vec<&Tenure>) -> Result<Vec<bool>, String> {
        let mut call = self.0.scripts.renew.prepare_invoke();
        call.arg(ttl_us);
        for t in &tenures {
            call.key(self.0.key("lease", &t.key))
                .arg(t.holder.as_str())
                .arg(t.term);
        }
        let done: Vec<i64> = self.0.call(&call).await?;
        Ok(done.into_iter().map(|d| d == 1).collect())
    }
}

impl Statement for Heartbeats {
    type Item = Member;
    type Answer = ();
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "heartbeat";

    async fn send(&self, ttl_us: i64, members: Vec<&Member>) -> Result<Vec<()>, String> {
        let mut call = self.0.scripts.heartbeat.prepare_invoke();
        call.arg(ttl_us);
        for m in &members {
            call.key(self.0.key("members", &m.key))
                .arg(m.holder.as_str())
                .arg(m.metadata.as_str())
                .arg(m.priority);
        }
        let _: i64 = self.0.call(&call).await?;
        Ok(vec![(); members.len()])
    }
}

impl Statement for Reaps {
    type Item = ElectionKey;
    type Answer = u64;
    const CHUNK: usize = CHUNK;
    const WHAT: &'static str = "reap";

    async fn send(&self, _group: i64, keys: Vec<&ElectionKey>) -> Result<Vec<u64>, String> {
        let mut call = self.0.scripts.reap.prepare_invoke();
        for k in &keys {
            call.key(self.0.key("members", k));
            call.key(self.0.key("lease", k));
        }
        let n: Vec<i64> = self.0.call(&call).await?;
        Ok(n.into_iter().map(|n| n.max(0) as u64).collect())
    }
}

/// The three gatherers of one store.
pub(super) struct Batches {
    pub(super) renewals: Arc<Batched<Renewals>>,
    pub(super) heartbeats: Arc<Batched<Heartbeats>>,
    pub(super) reaps: Arc<Batched<Reaps>>,
}

impl Batches {
    pub(super) fn new(caller: Caller) -> Self {
        let described = caller.described.clone();
        Self {
            renewals: Batched::new(
                Renewals(caller.clone()),
                described.clone(),
                store_statements("redis", "renew"),
            ),
            heartbeats: Batched::new(
                Heartbeats(caller.clone()),
                described.clone(),
                store_statements("redis", "heartbeat"),
            ),
            reaps: Batched::new(Reaps(caller), described, store_statements("redis", "reap")),
        }
    }
}
