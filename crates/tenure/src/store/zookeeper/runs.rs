//! Run records ([`RunRecords`]) on ZooKeeper: one persistent znode per
//! record under the election's `runs` znode. Its `mtime` (the ZooKeeper
//! leader's clock) is when it was written, and its data version + 1 is the
//! record's version. A record is live until `mtime + keep`, judged against
//! the ZooKeeper leader's clock read by a write of the clock znode (as
//! acquisitions judge a lease's expiry), never against this host's.
//!
//! * A **later write** (`expected` n) is `setData` conditional on data
//!   version n − 1, after checking the record is live by the clock read just
//!   before (ZooKeeper cannot compare times inside a write: a record that
//!   expires in the milliseconds between that read and the write is written
//!   as if it had not).
//! * A **first write** (`expected` 0) creates the znode, replacing an
//!   expired one. Creations and deletions of records are multi-ops that
//!   also set the `runs` znode conditional on its version as read: a
//!   deletion judged on an old read could otherwise hit a record recreated
//!   since with the same data version (0), and two first writes could both
//!   succeed. With the `runs` znode's version in every such multi-op, one of
//!   two first writes fails and reads again, then finds the winner's record.
//! * After a successful write, expired records of the election are deleted
//!   the same way (best effort).
//!
//! Reads follow a write of the clock znode on the same session, so they see
//! every write that committed before they started.

use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, CreateMode, Error as ZkError, MultiReadResult, Stat};

use super::lease::lost_race;
use super::paths::unseg;
use super::values::RunValue;
use super::{Inner, ZkStore};
use crate::error::{Error, Result};
use crate::store::runs::{check_key, check_put, check_read, keep_ms};
use crate::store::{ElectionKey, RunRecord, RunRecords};

/// How many times a first write reads again after a creation or deletion
/// of another record of the election got in between.
const FIRST_WRITE_ATTEMPTS: usize = 8;

/// One record's znode as read.
struct RunNode {
    name: String,
    value: RunValue,
    stat: Stat,
}

impl RunNode {
    fn expires_us(&self) -> i64 {
        let keep_us = i64::try_from(self.value.keep_ms)
            .unwrap_or(i64::MAX / 2)
            .saturating_mul(1000);
        self.stat.mtime.saturating_mul(1000).saturating_add(keep_us)
    }

    fn live(&self, now_us: i64) -> bool {
        self.expires_us() > now_us
    }

    fn record(self, key: &ElectionKey) -> RunRecord {
        RunRecord::new(
            key.clone(),
            self.name,
            self.value.value,
            u64::try_from(self.stat.version).unwrap_or(0) + 1,
            self.stat.mtime.saturating_mul(1000),
        )
    }
}

/// The `runs` znode's data version as read, and the record, if any.
type FirstWriteView = (i32, Option<RunNode>);

impl Inner {
    fn run_node(&self, name: String, data: &[u8], stat: Stat) -> Result<RunNode> {
        let value = serde_json::from_slice(data).map_err(|e| {
            self.protocol(format!(
                "the run record znode {name:?} does not hold tenure's JSON: {e}"
            ))
        })?;
        Ok(RunNode { name, value, stat })
    }

    async fn run_get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        let now = self.server_now_us().await?;
        let c = self.main().await?;
        let path = self.run_path(key, name);
        match c.get_data(&path).await {
            Ok((data, stat)) => {
                let node = self.run_node(name.to_string(), &data, stat)?;
                Ok(node.live(now).then(|| node.record(key)))
            }
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(self.map(&path, e)),
        }
    }

    /// The `runs` znode's version and the record's znode, read together.
    async fn first_write_view(&self, key: &ElectionKey, name: &str) -> Result<FirstWriteView> {
        let c = self.main().await?;
        let dir = self.runs_dir(key);
        let mut r = c.new_multi_reader();
        r.add_get_data(&dir).map_err(|e| self.map(&dir, e))?;
        r.add_get_data(&self.run_path(key, name))
            .map_err(|e| self.map(&dir, e))?;
        let mut res = r.commit().await.map_err(|e| self.map(&dir, e))?.into_iter();
        let dir_version = match res.next() {
            Some(MultiReadResult::Data { stat, .. }) => stat.version,
            Some(MultiReadResult::Error { err }) => return Err(self.map(&dir, err)),
            _ => return Err(self.protocol(format!("an odd multi-read answer for {dir}"))),
        };
        let node = match res.next() {
            Some(MultiReadResult::Data { data, stat }) => {
                Some(self.run_node(name.to_string(), &data, stat)?)
            }
            Some(MultiReadResult::Error {
                err: ZkError::NoNode,
            }) => None,
            Some(MultiReadResult::Error { err }) => return Err(self.map(&dir, err)),
            _ => return Err(self.protocol(format!("an odd multi-read answer for {dir}"))),
        };
        Ok((dir_version, node))
    }

    /// A first write: creates the record's znode (replacing an expired one)
    /// in a multi-op guarded by the `runs` znode's version.
    async fn run_create(
        &self,
        key: &ElectionKey,
        name: &str,
        data: &[u8],
    ) -> Result<Option<RunRecord>> {
        let c = self.main().await?;
        let dir = self.runs_dir(key);
        let path = self.run_path(key, name);
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for _ in 0..FIRST_WRITE_ATTEMPTS {
            let now = self.server_now_us().await?;
            let (dir_version, node) = self.first_write_view(key, name).await?;
            if node.as_ref().is_some_and(|n| n.live(now)) {
                return Ok(None);
            }
            let mut w = c.new_multi_writer();
            let add = |r: std::result::Result<(), ZkError>| r.map_err(|e| self.map(&path, e));
            add(w.add_set_data(&dir, b"", Some(dir_version)))?;
            if let Some(expired) = &node {
                add(w.add_delete(&path, Some(expired.stat.version)))?;
            }
            add(w.add_create(&path, data, &persistent))?;
            match w.commit().await {
                Ok(results) => {
                    // Every op of a multi-op shares one transaction time;
                    // the `runs` znode's stat is always valid (a created
                    // znode's may not be, ZOOKEEPER-4026).
                    let at = results.iter().find_map(|r| match r {
                        zookeeper_client::MultiWriteResult::SetData { stat } => Some(stat.mtime),
                        _ => None,
                    });
                    let updated_at_us = at.map_or(now, |t| t.saturating_mul(1000));
                    let value = serde_json::from_slice::<RunValue>(data)
                        .map_err(|e| self.protocol(e.to_string()))?
                        .value;
                    return Ok(Some(RunRecord::new(
                        key.clone(),
                        name,
                        value,
                        1,
                        updated_at_us,
                    )));
                }
                // Another record was created or deleted, or this one was
                // written: read again.
                Err(e) if lost_race(&e) => continue,
                Err(e) => return Err(self.map(&path, e.into())),
            }
        }
        Err(Error::Unavailable {
            store: self.described.clone(),
            reason: format!(
                "the run records of {key} kept changing while writing {name:?} \
                 ({FIRST_WRITE_ATTEMPTS} attempts); try again"
            ),
            source: None,
        })
    }

    /// A later write: `setData` on the expected data version, if the record
    /// is live by the clock read just before.
    async fn run_update(
        &self,
        key: &ElectionKey,
        name: &str,
        data: &[u8],
        expected: u64,
    ) -> Result<Option<RunRecord>> {
        let Some(data_version) = expected.checked_sub(1).and_then(|v| i32::try_from(v).ok()) else {
            return Ok(None);
        };
        let now = self.server_now_us().await?;
        let c = self.main().await?;
        let path = self.run_path(key, name);
        let node = match c.get_data(&path).await {
            Ok((d, stat)) => self.run_node(name.to_string(), &d, stat)?,
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(self.map(&path, e)),
        };
        if !node.live(now) || node.stat.version != data_version {
            return Ok(None);
        }
        match c.set_data(&path, data, Some(data_version)).await {
            Ok(stat) => {
                let value = serde_json::from_slice::<RunValue>(data)
                    .map_err(|e| self.protocol(e.to_string()))?;
                Ok(Some(
                    RunNode {
                        name: name.to_string(),
                        value,
                        stat,
                    }
                    .record(key),
                ))
            }
            Err(ZkError::BadVersion | ZkError::NoNode) => Ok(None),
            Err(e) => Err(self.map(&path, e)),
        }
    }

    /// The `runs` znode's version and every record's znode, read together.
    async fn run_nodes(&self, key: &ElectionKey) -> Result<(i32, Vec<RunNode>)> {
        let c = self.main().await?;
        let dir = self.runs_dir(key);
        let names = match c.list_children(&dir).await {
            Ok(n) => n,
            Err(ZkError::NoNode) => return Ok((0, Vec::new())),
            Err(e) => return Err(self.map(&dir, e)),
        };
        let mut r = c.new_multi_reader();
        r.add_get_data(&dir).map_err(|e| self.map(&dir, e))?;
        for n in &names {
            r.add_get_data(&format!("{dir}/{n}"))
                .map_err(|e| self.map(&dir, e))?;
        }
        let mut res = r.commit().await.map_err(|e| self.map(&dir, e))?.into_iter();
        let dir_version = match res.next() {
            Some(MultiReadResult::Data { stat, .. }) => stat.version,
            Some(MultiReadResult::Error {
                err: ZkError::NoNode,
            }) => return Ok((0, Vec::new())),
            Some(MultiReadResult::Error { err }) => return Err(self.map(&dir, err)),
            _ => return Err(self.protocol(format!("an odd multi-read answer for {dir}"))),
        };
        let mut nodes = Vec::with_capacity(names.len());
        for (n, r) in names.iter().zip(res) {
            // Deleted between the listing and the read: not there.
            let MultiReadResult::Data { data, stat } = r else {
                continue;
            };
            nodes.push(self.run_node(unseg(n), &data, stat)?);
        }
        Ok((dir_version, nodes))
    }

    async fn run_list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        let now = self.server_now_us().await?;
        let (_, mut nodes) = self.run_nodes(key).await?;
        nodes.retain(|n| n.live(now));
        // The zxid of the last write: ZooKeeper's own order of writes.
        nodes.sort_by_key(|n| std::cmp::Reverse(n.stat.mzxid));
        Ok(nodes
            .into_iter()
            .take(limit)
            .map(|n| n.record(key))
            .collect())
    }

    /// Deletes the election's expired records in one multi-op guarded by
    /// the `runs` znode's version. Best effort: a write or deletion in
    /// between leaves them to a later write, and expired records read as
    /// absent anyway.
    async fn forget_expired_runs(&self, key: &ElectionKey) {
        let forgotten = async {
            let now = self.server_now_us().await?;
            let (dir_version, nodes) = self.run_nodes(key).await?;
            let expired: Vec<&RunNode> = nodes.iter().filter(|n| !n.live(now)).collect();
            if expired.is_empty() {
                return Ok(0);
            }
            let c = self.main().await?;
            let dir = self.runs_dir(key);
            let mut w = c.new_multi_writer();
            let add = |r: std::result::Result<(), ZkError>| r.map_err(|e| self.map(&dir, e));
            add(w.add_set_data(&dir, b"", Some(dir_version)))?;
            for n in &expired {
                add(w.add_delete(&self.run_path(key, &n.name), Some(n.stat.version)))?;
            }
            match w.commit().await {
                Ok(_) => Ok(expired.len()),
                Err(e) if lost_race(&e) => Ok(0),
                Err(e) => Err(self.map(&dir, e.into())),
            }
        };
        match forgotten.await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(election = %key, deleted = n, "forgot expired run records"),
            Err(e) => tracing::debug!(election = %key, "could not delete expired run records: {e}"),
        }
    }
}

#[async_trait]
impl RunRecords for ZkStore {
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
        let inner = &self.inner;
        inner.ensure_dir(key).await?;
        let data = RunValue {
            value: value.to_string(),
            keep_ms: keep_ms(keep),
        };
        let data = serde_json::to_vec(&data).map_err(|e| inner.protocol(e.to_string()))?;
        let written = if expected == 0 {
            inner.run_create(key, name, &data).await?
        } else {
            inner.run_update(key, name, &data, expected).await?
        };
        if written.is_some() {
            inner.forget_expired_runs(key).await;
        }
        Ok(written)
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        check_key(key)?;
        self.inner.run_list(key, limit).await
    }
}
