//! [`LeaseStore`] for [`SqlStore`]: each operation runs its statements (see
//! `statements.rs`) and decodes the rows (`decode.rs`); what follows a decided
//! change is queued (`after.rs`).

use std::time::Duration;

use async_trait::async_trait;

use super::after::AfterJob;
use super::connection::OnOwn;
use super::decode::{decode_history, decode_member, decode_record};
use super::errors::is_lock_not_had;
use super::statements::{bind_member, bind_tenure, duration_us, sent};
use super::SqlStore;
use crate::error::Result;
use crate::store::{
    handover_window_us, identity_of, Acquire, Capabilities, Changes, Claim, ElectionKey, EndReason,
    Handover, HandoverReason, HistoryRecord, LeaseRecord, LeaseStore, Member, MemberRecord, Tenure,
};
use crate::store::{History, Membership, Wakeups};

impl SqlStore {
    /// The rows of a listing: `all` without a namespace, `in_namespace`
    /// (one `?`) with one.
    async fn fetch_listed(
        &self,
        all: &str,
        in_namespace: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<sqlx::any::AnyRow>> {
        let fetched = match namespace {
            Some(ns) => {
                sqlx::query(&sent(self.dialect, in_namespace))
                    .bind(ns)
                    .fetch_all_on(&self.own)
                    .await
            }
            None => {
                sqlx::query(&sent(self.dialect, all))
                    .fetch_all_on(&self.own)
                    .await
            }
        };
        fetched.map_err(|e| self.wrap(e))
    }
}

impl SqlStore {
    /// Runs `statement` (bound to the election and a row limit: history,
    /// run records) and decodes its rows.
    pub(super) async fn newest_of_election<T>(
        &self,
        statement: &str,
        key: &ElectionKey,
        limit: usize,
        decode: fn(&sqlx::any::AnyRow) -> std::result::Result<T, sqlx::Error>,
    ) -> Result<Vec<T>> {
        let rows = sqlx::query(&sent(self.dialect, statement))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all_on(&self.own)
            .await
            .map_err(|e| self.wrap(e))?;
        rows.iter()
            .map(decode)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }

    async fn acquire_once(&self, claim: &Claim) -> Result<Option<LeaseRecord>> {
        let ttl_us = duration_us(claim.ttl);
        let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
        let acquire = match &self.statements.acquire_mariadb {
            #[cfg(feature = "mysql")]
            Some(mariadb) if self.is_mariadb() => mariadb,
            _ => &self.statements.acquire,
        };
        let sql = sent(self.dialect, acquire);
        let q = sqlx::query(&sql)
            .bind(claim.holder.as_str())
            .bind(claim.metadata.as_str())
            .bind(ttl_us)
            .bind(ttl_us)
            .bind(claim.key.namespace.as_str())
            .bind(claim.key.election.as_str())
            .bind(identity_of(&claim.holder));
        // Another transaction holds the row (a leader's fenced work): not
        // acquired, and the caller reads who holds it.
        if self.dialect.has_update_returning() {
            return match q.fetch_optional(lent.conn()).await {
                Err(e) if is_lock_not_had(&e) => {
                    lent.keep_after_refusal().await.map_err(|e| self.wrap(e))?;
                    Ok(None)
                }
                row => self.kept(lent, self.record(row)).await,
            };
        }
        let done = match q.execute(lent.conn()).await {
            Err(e) if is_lock_not_had(&e) => {
                lent.keep_after_refusal().await.map_err(|e| self.wrap(e))?;
                return Ok(None);
            }
            done => done.map_err(|e| self.wrap(e))?,
        };
        if done.rows_affected() == 0 {
            self.kept(lent, Ok(())).await?;
            return Ok(None);
        }
        // No RETURNING on MySQL: read our row back. Only this process writes this
        // holder id, so if the row names us, its term is the one we just took; if
        // it already names someone else, our lease expired in between and we
        // report that we do not hold it.
        let rec = self.read_with(lent.conn(), &claim.key).await;
        let rec = self.kept(lent, rec).await?;
        Ok(rec.filter(|r| r.holder.as_deref() == Some(claim.holder.as_str())))
    }

    async fn members_with(
        &self,
        conn: &mut super::conn::Conn,
        key: &ElectionKey,
    ) -> Result<Vec<MemberRecord>> {
        let rows = sqlx::query(&sent(self.dialect, &self.statements.members))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .fetch_all(conn)
            .await
            .map_err(|e| self.wrap(e))?;
        rows.iter()
            .map(decode_member)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }

    async fn read_with(
        &self,
        conn: &mut super::conn::Conn,
        key: &ElectionKey,
    ) -> Result<Option<LeaseRecord>> {
        let row = sqlx::query(&sent(self.dialect, &self.statements.read))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .fetch_optional(conn)
            .await;
        self.record(row)
    }

    /// The lease record in a statement's answer, if any.
    /// This process acquired `key`: its connection stays open for the
    /// tenure, and the wake-up mechanism does what a new leader's does.
    fn leading(&self, key: &ElectionKey, ttl: Duration) {
        self.own.leading(key);
        self.wake.acquired(key, ttl);
    }

    /// This process's tenure of `key` ended (released, handed over, lost).
    fn tenure_ended(&self, key: &ElectionKey) {
        self.own.ended(key);
        self.wake.ended(key);
    }

    fn record(
        &self,
        row: std::result::Result<Option<sqlx::any::AnyRow>, sqlx::Error>,
    ) -> Result<Option<LeaseRecord>> {
        row.map_err(|e| self.wrap(e))?
            .map(|r| decode_record(&r))
            .transpose()
            .map_err(|e| self.wrap(e))
    }

    async fn try_acquire_inner(&self, claim: &Claim) -> Result<Acquire> {
        if let Some(rec) = self.acquire_once(claim).await? {
            return Ok(Acquire::Acquired(rec));
        }
        if let Some(rec) = self.read(&claim.key).await? {
            return Ok(Acquire::Held(Some(rec)));
        }
        // First campaign for this election: create the vacant row, then decide
        // with the same conditional UPDATE as always.
        sqlx::query(&sent(self.dialect, &self.statements.insert_vacant))
            .bind(claim.key.namespace.as_str())
            .bind(claim.key.election.as_str())
            .execute_on(&self.own)
            .await
            .map_err(|e| self.wrap(e))?;
        match self.acquire_once(claim).await? {
            Some(rec) => Ok(Acquire::Acquired(rec)),
            None => Ok(Acquire::Held(self.read(&claim.key).await?)),
        }
    }

    /// One lease renewed by `sql`, the renew-unchecked build's statement.
    async fn renew_one(&self, sql: &str, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let ttl_us = duration_us(ttl);
        let done = bind_tenure(
            sqlx::query(&sent(self.dialect, sql))
                .bind(ttl_us)
                .bind(ttl_us),
            tenure,
        )
        .execute_on(&self.own)
        .await
        .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn release_inner(&self, tenure: &Tenure) -> Result<bool> {
        let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
        let done = bind_tenure(
            sqlx::query(&sent(self.dialect, &self.statements.release)),
            tenure,
        )
        .execute(lent.conn())
        .await
        .map_err(|e| self.wrap(e))?;
        self.kept(lent, Ok(())).await?;
        Ok(done.rows_affected() == 1)
    }
}

#[async_trait]
impl LeaseStore for SqlStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn run_records(&self) -> Option<&dyn crate::store::RunRecords> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: self.wake.pushes(),
            push_acquisitions: self.wake.pushes_acquisitions(),
            fenced_transactions: true,
            batch_renew: true,
            list_members: true,
            durable: true,
            // Member reads join the lease row (`statements.rs`).
            lease_vouches_for_holder: true,
            // SQLite's file watch holds none.
            push_holds_a_connection: self.wake.holds_a_connection(),
            reads_at_expiry: !self.wake.pushes(),
            ..Capabilities::default()
        }
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        let result = self.try_acquire_inner(claim).await;
        match &result {
            Ok(Acquire::Acquired(rec)) => self.leading(&rec.key, claim.ttl),
            Ok(Acquire::Held(rec)) => self.wake.seen(&claim.key, rec.as_ref()),
            _ => {}
        }
        if let Ok(Acquire::Acquired(rec)) = &result {
            // Tell the others first, then write the history, off the caller's
            // path: the new leader need not wait for bookkeeping.
            self.after_change(AfterJob::Start(rec.clone()));
        }
        result
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        if let Some(sql) = &self.statements.renew_unchecked {
            self.batcher.count_statement();
            return self.renew_one(sql, tenure, ttl).await;
        }
        let renewed = self.batcher.renew(tenure, ttl).await;
        match &renewed {
            Ok(false) => self.tenure_ended(&tenure.key),
            Ok(true) => self.wake.renewed(&tenure.key, ttl),
            Err(_) => {}
        }
        renewed
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        let released = self.release_inner(tenure).await;
        // Whatever the answer, this process no longer leads with this tenure.
        self.tenure_ended(&tenure.key);
        let released = released?;
        if released {
            // PostgreSQL listeners heard of it from the statement itself
            // (`Dialect::update_announced`), not from the queue: a process
            // that releases on its way out may exit before the queue runs.
            self.after_change(AfterJob::Close(tenure.clone(), EndReason::Released));
        }
        Ok(released)
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        let done = bind_tenure(
            sqlx::query(&sent(self.dialect, &self.statements.proclaim)).bind(metadata),
            tenure,
        )
        .execute_on(&self.own)
        .await
        .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() == 1)
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        let window_us = handover_window_us(window)?;
        let done = async {
            let mut lent = self.own.lend().await?;
            let done = bind_tenure(
                sqlx::query(&sent(self.dialect, &self.statements.hand_over))
                    .bind(to.column())
                    .bind(window_us)
                    .bind(reason.as_str()),
                tenure,
            )
            .execute(lent.conn())
            .await?;
            lent.keep().await?;
            Ok::<_, sqlx::Error>(done)
        }
        .await
        .map_err(|e| self.wrap(e));
        self.tenure_ended(&tenure.key);
        let done = done?.rows_affected() == 1;
        if done {
            // As in `release`, the statement notified PostgreSQL listeners.
            self.after_change(AfterJob::Close(tenure.clone(), reason.into()));
        }
        Ok(done)
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        let window_us = handover_window_us(window)?;
        let done = sqlx::query(&sent(self.dialect, &self.statements.request_handover))
            .bind(to.column())
            .bind(window_us)
            .bind(reason.as_str())
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .execute_on(&self.own)
            .await
            .map_err(|e| self.wrap(e))?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        self.wake.handover_requested(key).await;
        self.read(key).await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
        let rec = self.read_with(lent.conn(), key).await?;
        self.kept(lent, Ok(())).await?;
        self.wake.seen(key, rec.as_ref());
        Ok(rec)
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let statements = &self.statements;
        let rows = self
            .fetch_listed(&statements.list_all, &statements.list_namespace, namespace)
            .await?;
        let records = rows
            .iter()
            .map(decode_record)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))?;
        // Observers list; they are woken like followers.
        for r in &records {
            self.wake.seen(&r.key, Some(r));
        }
        Ok(records)
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        Some(self)
    }
}

#[async_trait]
impl Membership for SqlStore {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.heartbeats.call(duration_us(ttl), member.clone()).await
    }

    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        if let Some(sql) = &self.statements.heartbeat_and_read {
            let sql = sent(self.dialect, sql);
            let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
            let row = bind_member(sqlx::query(&sql), member, duration_us(ttl))
                .bind(member.key.namespace.as_str())
                .bind(member.key.election.as_str())
                .fetch_optional(lent.conn())
                .await;
            return self.kept(lent, self.record(row)).await;
        }
        #[cfg(feature = "mysql")]
        match self.mariadb_heartbeat_and_read(member, ttl).await {
            super::mysql::Tried::Read(rec) => {
                self.wake.seen(&member.key, rec.as_ref());
                return Ok(rec);
            }
            super::mysql::Tried::Failed(e) => return Err(self.wrap(e)),
            super::mysql::Tried::FallBack => {}
        }
        // Elsewhere (MySQL, MariaDB before 10.5, SQLite) two statements
        // side by side on two pooled connections:
        // the read must not wait for the heartbeat batch (up to `GATHER`
        // away), since a follower reads a crashed leader's lease at its
        // expiry and every millisecond there is failover time.
        let (heartbeat, rec) = tokio::join!(
            self.heartbeats.send_now(duration_us(ttl), member),
            self.read(&member.key)
        );
        heartbeat?;
        rec
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let done = sqlx::query(&sent(self.dialect, &self.statements.leave))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .bind(holder)
            .execute_on(&self.own)
            .await
            .map_err(|e| self.wrap(e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
        let members = self.members_with(lent.conn(), key).await;
        self.kept(lent, members).await
    }

    async fn read_with_members(
        &self,
        key: &ElectionKey,
    ) -> Result<(Option<LeaseRecord>, Option<Vec<MemberRecord>>)> {
        // One connection, one statement after the other: side by side, the
        // second would take a pooled connection, and the pool may have to
        // open one (`kept.rs`).
        let mut lent = self.own.lend().await.map_err(|e| self.wrap(e))?;
        let rec = self.read_with(lent.conn(), key).await?;
        self.wake.seen(key, rec.as_ref());
        let members = self.members_with(lent.conn(), key).await;
        let members = self.kept(lent, members).await.ok();
        Ok((rec, members))
    }

    async fn list_members(&self, namespace: Option<&str>) -> Result<Vec<MemberRecord>> {
        let statements = &self.statements;
        let rows = self
            .fetch_listed(
                &statements.members_all,
                &statements.members_namespace,
                namespace,
            )
            .await?;
        rows.iter()
            .map(decode_member)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.wrap(e))
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.reaps.call(0, key.clone()).await
    }
}

#[async_trait]
impl History for SqlStore {
    async fn flush(&self) -> Result<()> {
        self.flush_after().await;
        // The wake-up of MySQL/MariaDB followers: the freed named lock.
        self.wake.settle().await;
        Ok(())
    }

    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.newest_of_election(&self.statements.history, key, limit, decode_history)
            .await
    }
}

impl Wakeups for SqlStore {
    fn subscribe(&self) -> Option<Changes> {
        self.wake.subscribe()
    }

    fn watch_acquisitions(&self, key: &ElectionKey) -> Option<crate::store::AcquisitionWatch> {
        self.wake.watch_acquisitions(key)
    }

    fn push_health(&self) -> crate::store::PushHealth {
        self.wake.health()
    }
}
