//! An in-process store for unit tests and simulation.
//!
//! It follows the same protocol as the SQL store (the conformance suite checks
//! that) and keeps time with any [`Clock`] so tests can move time by hand. It
//! is not shared between processes and forgets everything when dropped. To
//! make it fail or hang, wrap it in `testing::Instrumented` (feature
//! `conformance`).
//!
//! [`Clock`]: crate::clock::Clock

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::runs::{check_key, check_put, check_read, keep_us};
use super::{
    Acquire, Capabilities, Claim, ElectionKey, EndReason, Handover, HandoverReason, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, RunRecord, RunRecords, StartReason, Tenure,
};
use crate::clock::{BootClock, SharedClock};
use crate::error::Result;
use crate::store::{History, Membership};

#[derive(Clone, Debug, Default)]
struct Row {
    holder: String,
    metadata: String,
    term: u64,
    version: u64,
    ttl_us: i64,
    acquired_us: i64,
    renewed_us: i64,
    expires_us: i64,
    handover_to: String,
    handover_until_us: i64,
    handover_reason: String,
    prev_holder: String,
    prev_expires_us: i64,
    start_reason: String,
}

#[derive(Clone, Debug)]
struct MemberRow {
    metadata: String,
    priority: u32,
    joined_us: i64,
    heartbeat_us: i64,
    expires_us: i64,
}

#[derive(Clone, Debug)]
struct HistoryRow {
    holder: String,
    start_reason: String,
    start_us: i64,
    end_reason: String,
    end_us: i64,
}

/// A run record ([`RunRecords`]), live until `expires_us` by the store's clock.
#[derive(Clone, Debug)]
struct RunRow {
    value: String,
    version: u64,
    updated_us: i64,
    expires_us: i64,
    /// The order of writes: the store's clock may not advance between two.
    written: u64,
}

#[derive(Debug, Default)]
struct Tables {
    leases: BTreeMap<ElectionKey, Row>,
    members: BTreeMap<(ElectionKey, String), MemberRow>,
    history: BTreeMap<(ElectionKey, u64), HistoryRow>,
    runs: BTreeMap<(ElectionKey, String), RunRow>,
    run_writes: u64,
}

impl Tables {
    fn close_history(&mut self, key: &ElectionKey, term: u64, end_us: i64, reason: &str) {
        if let Some(h) = self.history.get_mut(&(key.clone(), term)) {
            if h.end_us == 0 {
                h.end_us = end_us;
                h.end_reason = reason.to_string();
            }
        }
    }
}

/// An in-memory [`LeaseStore`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// use tenure::store::{memory::MemoryStore, Acquire, Claim, ElectionKey, LeaseStore};
/// let store = MemoryStore::new();
/// let claim = Claim { key: ElectionKey::new("default", "cron"), holder: "a#1".into(),
///                     metadata: String::new(), ttl: Duration::from_secs(10) };
/// assert!(matches!(store.try_acquire(&claim).await?, Acquire::Acquired(r) if r.term == 1));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    rows: Arc<Mutex<Tables>>,
    clock: SharedClock,
    /// The calling client's own clock, for `MemoryStore::client_view`:
    /// read only by the deliberate `wall-clock` bug.
    client_clock: Option<SharedClock>,
    /// Store-clock microseconds at the clock's origin: makes times look like
    /// real epoch times without ever reading the wall clock.
    epoch_us: i64,
    /// Conditional writes to leases (acquire, renew, release and hand-over
    /// attempts) and writes to the member list (heartbeats, leaves, reaps)
    /// that reached the store (`tenure_store_statements_total`).
    writes: metrics::Counter,
    member_writes: metrics::Counter,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store keeping time with the boot clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(BootClock))
    }

    /// A store keeping time with `clock` (e.g. a [`ManualClock`](crate::clock::ManualClock)).
    pub fn with_clock(clock: SharedClock) -> Self {
        Self {
            rows: Arc::new(Mutex::new(Tables::default())),
            clock,
            client_clock: None,
            epoch_us: 1_700_000_000_000_000,
            writes: crate::telemetry::store_statements("memory", "lease_write"),
            member_writes: crate::telemetry::store_statements("memory", "member_write"),
        }
    }

    /// Another handle on the same tables, for one client whose own clock is
    /// `client_clock` (the simulation gives each candidate one). Unstable,
    /// with the conformance suite (feature `conformance`). Time is
    /// still judged by the store's clock; the client's is read only by the
    /// deliberate `wall-clock` bug (builds with `--cfg tenure_chaos_bugs`),
    /// which makes the client's clock decide expiry, as that bug does in the
    /// SQL store.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tenure::clock::ManualClock;
    /// use tenure::store::{memory::MemoryStore, Acquire, Claim, ElectionKey, LeaseStore};
    /// let store = MemoryStore::new();
    /// let view = store.client_view(Arc::new(ManualClock::new()));
    /// let claim = Claim { key: ElectionKey::new("default", "cron"), holder: "a#1".into(),
    ///                     metadata: String::new(), ttl: Duration::from_secs(10) };
    /// assert!(matches!(view.try_acquire(&claim).await?, Acquire::Acquired(_)));
    /// assert_eq!(store.read(&claim.key).await?.and_then(|r| r.holder), Some("a#1".into()));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "conformance")]
    #[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
    pub fn client_view(&self, client_clock: SharedClock) -> Self {
        Self {
            rows: self.rows.clone(),
            clock: self.clock.clone(),
            client_clock: Some(client_clock),
            epoch_us: self.epoch_us,
            writes: self.writes.clone(),
            member_writes: self.member_writes.clone(),
        }
    }

    fn now_us(&self) -> i64 {
        // The wall-clock bug's hook here: the client's clock decides.
        let clock = match &self.client_clock {
            Some(c) if crate::bugs::active(crate::bugs::Bug::WallClock) => c,
            _ => &self.clock,
        };
        let now = self.epoch_us + i64::try_from(clock.now().as_micros()).unwrap_or(i64::MAX / 2);
        // The whole-seconds bug's hook here, as in the SQL dialects: the
        // simulation (`tenure-chaos sim`) runs the memory store.
        if crate::bugs::active(crate::bugs::Bug::WholeSeconds) {
            now - now % 1_000_000
        } else {
            now
        }
    }

    /// The acquisition itself, under the table lock.
    fn acquire_now(&self, claim: &Claim) -> Result<Acquire> {
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        let row = t.leases.entry(claim.key.clone()).or_default();
        let identity = super::identity_of(&claim.holder);
        let handover_ok = row.handover_to.is_empty()
            || row.handover_to == "*"
            || row.handover_to == identity
            || row.handover_until_us <= now;
        if (!row.holder.is_empty() && row.expires_us > now) || !handover_ok {
            return Ok(Acquire::Held(Some(Self::record(&claim.key, row, now))));
        }
        row.start_reason = if row.term == 0 {
            "first".into()
        } else if row.holder.is_empty() && !row.handover_reason.is_empty() {
            row.handover_reason.clone()
        } else if row.holder.is_empty() {
            "release".into()
        } else {
            "expiry".into()
        };
        row.prev_holder = std::mem::take(&mut row.holder);
        row.prev_expires_us = row.expires_us;
        row.handover_to.clear();
        row.handover_until_us = 0;
        row.handover_reason.clear();
        row.holder = claim.holder.clone();
        row.metadata = claim.metadata.clone();
        // The term-not-incremented bug keeps a row's term after its first.
        if row.term == 0 || !crate::bugs::active(crate::bugs::Bug::TermNotIncremented) {
            row.term += 1;
        }
        row.version += 1;
        row.ttl_us = us(claim.ttl);
        row.acquired_us = now;
        row.renewed_us = now;
        row.expires_us = now + us(claim.ttl);
        let rec = Self::record(&claim.key, row, now);
        t.history.insert(
            (claim.key.clone(), rec.term),
            HistoryRow {
                holder: claim.holder.clone(),
                start_reason: rec
                    .start_reason
                    .map(StartReason::as_str)
                    .unwrap_or_default()
                    .to_string(),
                start_us: now,
                end_reason: String::new(),
                end_us: 0,
            },
        );
        if rec.previous_holder.is_some() {
            t.close_history(
                &claim.key,
                rec.term - 1,
                rec.previous_expires_at_us,
                "expired",
            );
        }
        Ok(Acquire::Acquired(rec))
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Tables> {
        // A panic while holding this lock cannot leave a row half-written (every
        // update is a plain field assignment), so a poisoned lock is still usable.
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(key: &ElectionKey, row: &Row, now_us: i64) -> LeaseRecord {
        let held = !row.holder.is_empty();
        LeaseRecord {
            key: key.clone(),
            holder: held.then(|| row.holder.clone()),
            metadata: row.metadata.clone(),
            term: row.term,
            version: row.version,
            ttl: Duration::from_micros(row.ttl_us.max(0) as u64),
            acquired_at_us: row.acquired_us,
            renewed_at_us: row.renewed_us,
            expires_at_us: row.expires_us,
            read_at_us: now_us,
            remaining: if held {
                super::remaining_from_us(row.expires_us, now_us)
            } else {
                Duration::ZERO
            },
            handover: Handover::from_column(&row.handover_to),
            handover_until_us: row.handover_until_us,
            start_reason: StartReason::from_column(&row.start_reason).ok().flatten(),
            previous_holder: (!row.prev_holder.is_empty()).then(|| row.prev_holder.clone()),
            previous_expires_at_us: row.prev_expires_us,
        }
    }
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2)
}

#[async_trait]
impl LeaseStore for MemoryStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn run_records(&self) -> Option<&dyn RunRecords> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            lease_vouches_for_holder: true,
            ..Capabilities::default()
        }
    }

    fn describe(&self) -> String {
        "memory://".into()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        self.acquire_now(claim)
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        if crate::bugs::reuse_keep_alive_round() {
            return Ok(true);
        }
        match t.leases.get_mut(&tenure.key) {
            Some(row)
                // The renew-unchecked bug's hook, as in the SQL statements.
                if crate::bugs::active(crate::bugs::Bug::RenewUnchecked)
                    || (row.holder == tenure.holder
                        && row.term == tenure.term
                        && row.expires_us > now
                        && row.handover_to.is_empty()) =>
            {
                row.version += 1;
                row.ttl_us = us(ttl);
                row.renewed_us = now;
                row.expires_us = now + us(ttl);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        match t.leases.get_mut(&tenure.key) {
            Some(row) if row.holder == tenure.holder && row.term == tenure.term => {
                row.prev_holder = std::mem::take(&mut row.holder);
                row.metadata.clear();
                row.version += 1;
                row.expires_us = now;
                t.close_history(&tenure.key, tenure.term, now, "released");
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        match t.leases.get_mut(&tenure.key) {
            Some(row)
                if row.holder == tenure.holder
                    && row.term == tenure.term
                    && row.expires_us > now =>
            {
                row.metadata = metadata.to_string();
                row.version += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let now = self.now_us();
        Ok(self
            .rows()
            .leases
            .get(key)
            .map(|row| Self::record(key, row, now)))
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let now = self.now_us();
        Ok(self
            .rows()
            .leases
            .iter()
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .map(|(k, row)| Self::record(k, row, now))
            .collect())
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        let reason = reason.as_str();
        let window_us = super::handover_window_us(window)?;
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        match t.leases.get_mut(&tenure.key) {
            Some(row) if row.holder == tenure.holder && row.term == tenure.term => {
                row.prev_holder = std::mem::take(&mut row.holder);
                row.metadata.clear();
                row.version += 1;
                row.expires_us = now;
                row.handover_to = to.column().to_string();
                row.handover_until_us = now.saturating_add(window_us);
                row.handover_reason = reason.to_string();
                t.close_history(&tenure.key, tenure.term, now, reason);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        let reason = reason.as_str();
        let window_us = super::handover_window_us(window)?;
        self.writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        match t.leases.get_mut(key) {
            Some(row) if !row.holder.is_empty() && row.expires_us > now => {
                row.handover_to = to.column().to_string();
                row.handover_until_us = now.saturating_add(window_us);
                row.handover_reason = reason.to_string();
                row.version += 1;
                Ok(Some(Self::record(key, row, now)))
            }
            _ => Ok(None),
        }
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }
}

#[async_trait]
impl Membership for MemoryStore {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.member_writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        let row = t
            .members
            .entry((member.key.clone(), member.holder.clone()))
            .or_insert(MemberRow {
                metadata: String::new(),
                priority: 0,
                joined_us: now,
                heartbeat_us: now,
                expires_us: now,
            });
        row.metadata = member.metadata.clone();
        row.priority = member.priority;
        row.heartbeat_us = now;
        row.expires_us = now + us(ttl);
        Ok(())
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        self.member_writes.increment(1);
        Ok(self
            .rows()
            .members
            .remove(&(key.clone(), holder.to_string()))
            .is_some())
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let now = self.now_us();
        let t = self.rows();
        let lease = t.leases.get(key);
        let mut out: Vec<MemberRecord> = t
            .members
            .iter()
            .filter(|((k, _), _)| k == key)
            .map(|((k, holder), m)| {
                let mut r = MemberRecord {
                    key: k.clone(),
                    holder: holder.clone(),
                    identity: super::identity_of(holder).to_string(),
                    metadata: m.metadata.clone(),
                    priority: m.priority,
                    joined_at_us: m.joined_us,
                    heartbeat_at_us: m.heartbeat_us,
                    expires_at_us: m.expires_us,
                    live: m.expires_us > now,
                };
                if let Some(l) = lease.filter(|l| &l.holder == holder) {
                    super::vouch_for_holder(&mut r, l.renewed_us, l.expires_us, now);
                }
                r
            })
            .collect();
        drop(t);
        super::sort_successors_first(&mut out);
        Ok(out)
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.member_writes.increment(1);
        let now = self.now_us();
        let mut t = self.rows();
        let before = t.members.len();
        // Never the holder of the unexpired lease (a leader does not heartbeat).
        let holder = t
            .leases
            .get(key)
            .filter(|l| l.expires_us > now)
            .map(|l| l.holder.clone());
        t.members
            .retain(|(k, h), m| k != key || m.expires_us > now || Some(h) == holder.as_ref());
        Ok((before - t.members.len()) as u64)
    }
}

#[async_trait]
impl History for MemoryStore {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        Ok(self
            .rows()
            .history
            .iter()
            .rev()
            .filter(|((k, _), _)| k == key)
            .take(limit)
            .filter_map(|((k, term), h)| {
                Some(HistoryRecord {
                    key: k.clone(),
                    term: *term,
                    holder: h.holder.clone(),
                    start_reason: StartReason::required(&h.start_reason).ok()?,
                    start_at_us: h.start_us,
                    end_reason: EndReason::from_column(&h.end_reason).ok()?,
                    end_at_us: (h.end_us != 0).then_some(h.end_us),
                })
            })
            .collect())
    }
}

fn run_record(key: &ElectionKey, name: &str, row: &RunRow) -> RunRecord {
    RunRecord::new(
        key.clone(),
        name,
        row.value.clone(),
        row.version,
        row.updated_us,
    )
}

/// Run records under the table lock: the compare and the write are one step,
/// and a record past its expiry is absent, as on every store.
#[async_trait]
impl RunRecords for MemoryStore {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        check_read(key, name)?;
        let now = self.now_us();
        Ok(self
            .rows()
            .runs
            .get(&(key.clone(), name.to_string()))
            .filter(|r| r.expires_us > now)
            .map(|r| run_record(key, name, r)))
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
        let now = self.now_us();
        let mut t = self.rows();
        let id = (key.clone(), name.to_string());
        let current = t
            .runs
            .get(&id)
            .filter(|r| r.expires_us > now)
            .map_or(0, |r| r.version);
        if current != expected {
            return Ok(None);
        }
        t.run_writes += 1;
        let row = RunRow {
            value: value.to_string(),
            version: expected + 1,
            updated_us: now,
            expires_us: now.saturating_add(keep_us(keep)),
            written: t.run_writes,
        };
        let rec = run_record(key, name, &row);
        t.runs.insert(id, row);
        // Forgotten records of the election go with this write.
        t.runs.retain(|(k, _), r| k != key || r.expires_us > now);
        Ok(Some(rec))
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        check_key(key)?;
        let now = self.now_us();
        let t = self.rows();
        let mut live: Vec<(&(ElectionKey, String), &RunRow)> = t
            .runs
            .iter()
            .filter(|((k, _), r)| k == key && r.expires_us > now)
            .collect();
        live.sort_by_key(|(_, r)| std::cmp::Reverse(r.written));
        Ok(live
            .into_iter()
            .take(limit)
            .map(|((k, name), r)| run_record(k, name, r))
            .collect())
    }
}
