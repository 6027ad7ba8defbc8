//! Run records ([`RunRecords`]) on etcd: one key per record,
//! `<p>/run/<ns>/<election>/<name>`, whose etcd `version` (1 at creation,
//! +1 per write, gone with the key) is the record's version.
//!
//! A write is one transaction comparing the key's version with the
//! expected one (0: no key). `keep` is an etcd lease of its own per write,
//! with a TTL of `keep` rounded up to whole seconds (at least etcd's
//! minimum TTL): etcd deletes the key when the lease expires, judged by
//! etcd's clock, so a forgotten record is truly absent and the next first
//! write's compare (version 0) succeeds, as on the other stores. A stored
//! expiry checked on read could only be checked with a client clock (etcd
//! has none to compare with in a transaction), and the compare of a write
//! would still see the expired key. A write revokes the lease of the write
//! it replaced (no other key is on it), so leases do not pile up for the
//! length of `keep`. Times (`updated_at_us`) are the writer's clock:
//! informational only.

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use super::clock::now_us;
use super::keys::{seg, unseg};
use super::lease::lease_secs;
use super::read::first_range;
use super::retry::retry;
use super::values::RunValue;
use super::{EtcdStore, Inner};
use crate::error::Result;
use crate::store::runs::{check_key, check_put, check_read};
use crate::store::{ElectionKey, RunRecord, RunRecords};

impl Inner {
    /// The prefix of an election's run record keys.
    fn run_prefix(&self, key: &ElectionKey) -> String {
        format!("{}/", self.k("run", key))
    }

    fn run_key(&self, key: &ElectionKey, name: &str) -> String {
        format!("{}{}", self.run_prefix(key), seg(name))
    }

    /// The record a run key holds; `None` for a key under the prefix that
    /// tenure did not write.
    fn run_record(&self, key: &ElectionKey, kv: &KeyValue) -> Result<Option<RunRecord>> {
        let prefix = self.run_prefix(key);
        let Some(name) = std::str::from_utf8(kv.key())
            .ok()
            .and_then(|k| k.strip_prefix(prefix.as_str()))
            .filter(|n| !n.contains('/'))
        else {
            return Ok(None);
        };
        let v: RunValue = serde_json::from_slice(kv.value()).map_err(|e| {
            self.protocol(format!(
                "the run record {:?} of {key} is not tenure's JSON: {e}",
                unseg(name)
            ))
        })?;
        Ok(Some(RunRecord::new(
            key.clone(),
            unseg(name),
            v.value,
            u64::try_from(kv.version()).unwrap_or(0),
            v.updated_at_us,
        )))
    }

    /// Revokes a run record's lease that holds no key any more, off the
    /// caller's path. Best effort: unrevoked, it expires by itself.
    fn revoke_later(&self, lease: i64) {
        let mut client = self.client.clone();
        tokio::spawn(async move {
            if let Err(e) = client.lease_revoke(lease).await {
                tracing::debug!(lease, "could not revoke a run record's spent lease: {e}");
            }
        });
    }

    async fn run_get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        let resp = self
            .get(self.run_key(key, name), None)
            .await
            .map_err(|e| self.map_err(e))?;
        match resp.kvs().first() {
            Some(kv) => self.run_record(key, kv),
            None => Ok(None),
        }
    }

    async fn run_put(
        &self,
        key: &ElectionKey,
        name: &str,
        value: &str,
        expected: u64,
        keep: Duration,
    ) -> Result<Option<RunRecord>> {
        // No key's version is that large: nothing to compare with.
        let Ok(expected_version) = i64::try_from(expected) else {
            return Ok(None);
        };
        let rk = self.run_key(key, name);
        let secs = lease_secs(keep);
        let lease = retry(&self.client, |mut c| async move {
            c.lease_grant(secs, None).await
        })
        .await
        .map_err(|e| self.map_err(e))?
        .id();
        let now = now_us();
        let v = RunValue {
            value: value.to_string(),
            updated_at_us: now,
        };
        let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::version(
                rk.clone(),
                CompareOp::Equal,
                expected_version,
            )])
            // The read before the put sees the replaced write (its lease).
            .and_then([
                TxnOp::get(rk.clone(), None),
                TxnOp::put(rk.clone(), v, Some(PutOptions::new().with_lease(lease))),
            ])
            .or_else([TxnOp::get(rk.clone(), None)]);
        // On an error the lease is left to expire: the write may have been
        // applied, and revoking would delete it.
        let (resp, retried) = self.txn_retried(txn).await.map_err(|e| self.map_err(e))?;
        let written = RunRecord::new(key.clone(), name, value, expected + 1, now);
        let found = resp.op_responses().first().and_then(first_range);
        if resp.succeeded() {
            if let Some(replaced) = found.filter(|kv| kv.lease() != 0 && kv.lease() != lease) {
                self.revoke_later(replaced.lease());
            }
            return Ok(Some(written));
        }
        // An earlier attempt of a retried transaction may have been applied:
        // the key then names our lease, which no other write uses.
        if retried && found.as_ref().is_some_and(|kv| kv.lease() == lease) {
            return Ok(Some(written));
        }
        self.revoke_later(lease);
        Ok(None)
    }

    async fn run_list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        // etcd reads a limit of 0 as no limit.
        if limit == 0 {
            return Ok(Vec::new());
        }
        let options = GetOptions::new()
            .with_prefix()
            // The last write's revision: etcd's own order of writes.
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        let resp = self
            .get(self.run_prefix(key), Some(options))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut out = Vec::with_capacity(resp.kvs().len());
        for kv in resp.kvs() {
            out.extend(self.run_record(key, kv)?);
        }
        Ok(out)
    }
}

#[async_trait]
impl RunRecords for EtcdStore {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        check_read(key, name)?;
        self.inner.run_get(key, name).await
    }

    async fn put(
        &self,
        key: &ElectionKey,
        name: &str,
        value: &str,
        expected: u64,
        keep: Duration,
    ) -> Result<Option<RunRecord>> {
        check_put(key, name, value, keep)?;
        self.inner.run_put(key, name, value, expected, keep).await
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        check_key(key)?;
        self.inner.run_list(key, limit).await
    }
}
