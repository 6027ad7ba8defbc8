//! Run records ([`RunRecords`]) on Redis: one hash per record, with a Redis
//! TTL of `keep` (`PEXPIRE`), and one sorted set per election naming its
//! records by when they were last written, for `list`.
//!
//! A write is one script (`lua/run_put.lua`): it compares the hash's
//! version with the expected one and writes, judged and timed by the
//! server (`TIME`). A record Redis expired is gone, so its version is 0:
//! the next first write succeeds, as on every store.

use std::time::Duration;

use async_trait::async_trait;

use super::RedisStore;
use crate::error::Result;
use crate::store::runs::{check_key, check_put, check_read, keep_ms};
use crate::store::{ElectionKey, RunRecord, RunRecords};

impl RedisStore {
    /// The key prefix of an election's run records: the record's key is this
    /// and its name. Both the namespace and the election are length-prefixed
    /// (unlike the index member of the other keys), so a name may contain
    /// `:` and still names one record of one election.
    fn run_key_prefix(&self, key: &ElectionKey) -> String {
        format!(
            "{}run:{}:{}:{}:{}:",
            self.prefix,
            key.namespace.len(),
            key.namespace,
            key.election.len(),
            key.election
        )
    }

    fn run_number(&self, field: &str) -> Result<i64> {
        field
            .parse()
            .map_err(|_| self.protocol(format!("a run record field {field:?}")))
    }
}

#[async_trait]
impl RunRecords for RedisStore {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        check_read(key, name)?;
        let (value, version, updated): (Option<String>, Option<String>, Option<String>) =
            redis::cmd("HMGET")
                .arg(format!("{}{name}", self.run_key_prefix(key)))
                .arg("value")
                .arg("version")
                .arg("updated_us")
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| self.error(e))?;
        let Some(version) = version else {
            return Ok(None);
        };
        Ok(Some(RunRecord::new(
            key.clone(),
            name,
            value.unwrap_or_default(),
            self.run_number(&version)?.max(0) as u64,
            self.run_number(updated.as_deref().unwrap_or("0"))?,
        )))
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
        let prefix = self.run_key_prefix(key);
        let written: Vec<String> = self
            .run(
                self.scripts
                    .run_put
                    .key(format!("{prefix}{name}"))
                    .key(self.key("runs", key))
                    .arg(name)
                    .arg(value)
                    .arg(expected)
                    .arg(keep_ms(keep))
                    .arg(&prefix),
            )
            .await?;
        match written.as_slice() {
            [] => Ok(None),
            [version, updated] => Ok(Some(RunRecord::new(
                key.clone(),
                name,
                value,
                self.run_number(version)?.max(0) as u64,
                self.run_number(updated)?,
            ))),
            other => Err(self.protocol(format!(
                "a run record write answered with {} fields",
                other.len()
            ))),
        }
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        check_key(key)?;
        let flat: Vec<String> = self
            .run(
                self.scripts
                    .run_list
                    .key(self.key("runs", key))
                    .arg(self.run_key_prefix(key))
                    .arg(limit),
            )
            .await?;
        let mut out = Vec::with_capacity(flat.len() / 4);
        for r in flat.chunks(4) {
            let [name, value, version, updated] = r else {
                return Err(self.protocol("a run record list of uneven length".into()));
            };
            out.push(RunRecord::new(
                key.clone(),
                name.as_str(),
                value.as_str(),
                self.run_number(version)?.max(0) as u64,
                self.run_number(updated)?,
            ));
        }
        Ok(out)
    }
}
