//! Run records: a few named records per election, written by compare-and-set
//! on their version, so that the replicas of a job agree on what ran.
//!
//! `tenure run --once KEY` keeps one record per KEY: a replica claims the
//! run by writing the record it read (version `n`) as version `n + 1`, and
//! only one replica's write can succeed. Every store of this crate keeps them
//! ([`LeaseStore::run_records`](super::LeaseStore::run_records)); each write
//! is one conditional write judged by the store itself, as leases are.
//!
//! A record lives at least `keep` after its last write, then is forgotten:
//! it reads as absent, and the next write expects version 0 and starts again
//! at version 1. Whether the store deletes it at once (Redis and etcd expire
//! the key) or later (SQL, ZooKeeper and memory delete expired records of
//! the election on later writes) is never visible: every read and every
//! compare treats an expired record as absent, by the store's clock. A
//! version therefore names one write only while its record lives.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use super::ElectionKey;
use crate::error::{Error, Result};

/// The longest [`RunRecord::value`], in bytes.
pub const MAX_RUN_VALUE_BYTES: usize = 4096;

/// The longest `keep` a run record accepts: 100 years, which every store
/// can count in its own units (etcd lease seconds, Redis milliseconds, SQL
/// microseconds) without overflow.
pub const MAX_RUN_KEEP: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One named record of an election (the CLI's `--once KEY` keeps one per KEY).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// Which election.
    pub key: ElectionKey,
    /// The record's name: 1–255 bytes of UTF-8, no control characters
    /// (checked like election names, see [`validate_name`](crate::validate_name)).
    pub name: String,
    /// Opaque text the caller wrote (the CLI writes JSON), at most
    /// [`MAX_RUN_VALUE_BYTES`].
    pub value: String,
    /// 1 after the first write, +1 for each later write.
    pub version: u64,
    /// When it was last written, µs since the epoch: the store's clock where
    /// the store has one (SQL `NOW`/`clock_timestamp()`/`unixepoch`, Redis
    /// `TIME`, ZooKeeper `mtime`), the writer's wall clock on etcd (which has
    /// none). Informational: no decision compares it.
    pub updated_at_us: i64,
}

impl RunRecord {
    /// A record as a store read or wrote it (for store implementations
    /// outside this crate: the struct is `#[non_exhaustive]`).
    pub fn new(
        key: ElectionKey,
        name: impl Into<String>,
        value: impl Into<String>,
        version: u64,
        updated_at_us: i64,
    ) -> Self {
        Self {
            key,
            name: name.into(),
            value: value.into(),
            version,
            updated_at_us,
        }
    }
}

/// Named records per election, written by compare-and-set on their version.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::store::ElectionKey;
///
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let runs = store.run_records().expect("every store of tenure keeps run records");
/// let key = ElectionKey::new("default", "nightly");
/// let keep = Duration::from_secs(24 * 3600);
///
/// // The first write expects no record (version 0); a second such write loses.
/// let first = runs.put(&key, "2024-05-01", r#"{"state":"running"}"#, 0, keep).await?;
/// assert_eq!(first.map(|r| r.version), Some(1));
/// assert!(runs.put(&key, "2024-05-01", r#"{"state":"running"}"#, 0, keep).await?.is_none());
///
/// // The winner writes on from the version it holds.
/// let done = runs.put(&key, "2024-05-01", r#"{"state":"succeeded"}"#, 1, keep).await?;
/// assert_eq!(done.map(|r| r.version), Some(2));
/// assert_eq!(runs.get(&key, "2024-05-01").await?.map(|r| r.value),
///            Some(r#"{"state":"succeeded"}"#.to_string()));
/// assert_eq!(runs.list(&key, 10).await?.len(), 1);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait RunRecords: Send + Sync {
    /// The record, if written and not yet forgotten.
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>>;

    /// Writes `value` if the record's current version is `expected` (0: the
    /// record must not exist). One atomic conditional write. Returns the
    /// record as written, or `None` if the version differed (someone else
    /// wrote first). The record is kept at least `keep` after this write;
    /// older records of the election may be deleted lazily by later writes
    /// (or by a store TTL).
    ///
    /// Refuses (with [`Error::InvalidConfig`], before any request) a name
    /// that is not 1–255 bytes of UTF-8 without control characters, a value
    /// longer than [`MAX_RUN_VALUE_BYTES`] or containing NUL, and a `keep`
    /// of zero or above [`MAX_RUN_KEEP`].
    async fn put(
        &self,
        key: &ElectionKey,
        name: &str,
        value: &str,
        expected: u64,
        keep: Duration,
    ) -> Result<Option<RunRecord>>;

    /// The election's records, most recently written first, at most `limit`.
    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>>;
}

/// Checks the election and record names of a read: what ends up in keys,
/// paths and statements is checked once, at the edge.
pub(crate) fn check_read(key: &ElectionKey, name: &str) -> Result<()> {
    check_key(key)?;
    crate::names::validate_name("run record name", name)
}

/// Checks an election of a listing.
pub(crate) fn check_key(key: &ElectionKey) -> Result<()> {
    crate::names::validate_name("namespace", &key.namespace)?;
    crate::names::validate_name("election", &key.election)
}

/// Checks everything a write sends, before it is sent.
pub(crate) fn check_put(key: &ElectionKey, name: &str, value: &str, keep: Duration) -> Result<()> {
    check_read(key, name)?;
    if value.len() > MAX_RUN_VALUE_BYTES {
        return Err(Error::config(
            "run record value",
            format!(
                "is {} bytes long; the limit is {MAX_RUN_VALUE_BYTES} bytes",
                value.len()
            ),
        ));
    }
    // PostgreSQL's text cannot hold NUL; refused everywhere, so that a value
    // one store keeps is kept by all.
    if value.contains('\0') {
        return Err(Error::config(
            "run record value",
            "contains a NUL character, which not every store can keep",
        ));
    }
    if keep.is_zero() {
        return Err(Error::config(
            "run record keep",
            "must be longer than zero (a record is kept at least this long after each write)",
        ));
    }
    if keep > MAX_RUN_KEEP {
        return Err(Error::config(
            "run record keep",
            format!("{keep:?} is too long; at most {MAX_RUN_KEEP:?} (100 years)"),
        ));
    }
    Ok(())
}

/// `keep` in microseconds; in range once [`check_put`] passed.
// Unused in builds without a store that counts in microseconds.
#[allow(dead_code)]
pub(crate) fn keep_us(keep: Duration) -> i64 {
    i64::try_from(keep.as_micros()).unwrap_or(i64::MAX / 4)
}

/// `keep` in whole milliseconds, rounded up: a record is kept at least `keep`.
#[allow(dead_code)]
pub(crate) fn keep_ms(keep: Duration) -> u64 {
    u64::try_from(keep.as_micros().div_ceil(1000)).unwrap_or(u64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_checked_before_they_are_sent() {
        let key = ElectionKey::new("default", "cron");
        let day = Duration::from_secs(86_400);
        assert!(check_put(&key, "2024-05-01", "{}", day).is_ok());
        let long = "é".repeat(MAX_RUN_VALUE_BYTES / 2);
        assert!(check_put(&key, "x", &long, day).is_ok());
        for (name, value, keep, says) in [
            ("", "", day, "empty"),
            ("a\nb", "", day, "control character"),
            ("x", "\0", day, "NUL"),
            ("x", "", Duration::ZERO, "longer than zero"),
            ("x", "", MAX_RUN_KEEP + Duration::from_secs(1), "too long"),
        ] {
            let e = check_put(&key, name, value, keep).unwrap_err();
            assert!(e.is_usage() && e.to_string().contains(says), "{e}");
        }
        let e = check_put(&key, "x", &format!("{long}x"), day).unwrap_err();
        assert!(e.to_string().contains("4097 bytes"), "{e}");
        let e = check_read(&ElectionKey::new("default", "a\tb"), "x").unwrap_err();
        assert!(e.to_string().contains("election"), "{e}");
    }

    #[test]
    fn keep_rounds_up() {
        assert_eq!(keep_ms(Duration::from_micros(1)), 1);
        assert_eq!(keep_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(keep_us(MAX_RUN_KEEP), 3_153_600_000_000_000);
    }
}
