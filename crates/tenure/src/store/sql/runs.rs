//! Run records ([`RunRecords`]) in the `<prefix>runs` table: one row per
//! election and name, live until `expires_us` by the server's clock.
//!
//! Every write is one conditional statement judged by the server:
//!
//! | write | decided by |
//! |---|---|
//! | first (`expected` 0), PostgreSQL and SQLite | an upsert whose update applies only over an expired row |
//! | first, MySQL/MariaDB | a plain `INSERT`: the primary key refuses a second one |
//! | later (`expected` n) | `UPDATE ... WHERE version = n AND expires_us > now` |
//!
//! PostgreSQL and SQLite return the written row (`RETURNING`). MySQL has no
//! `RETURNING`: its write and the read of the row it wrote run in one
//! transaction, where the write's row lock keeps every other writer out
//! until the read is done. Rows past their expiry read as absent everywhere
//! and are deleted after each successful write to their election.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::connection::OnOwn;
#[cfg(feature = "mysql")]
use super::dialect::Dialect;
use super::statements::sent;
use super::SqlStore;
use crate::error::Result;
use crate::store::runs::{check_key, check_put, check_read, keep_us};
use crate::store::{ElectionKey, RunRecord, RunRecords};

fn decode_run(row: &AnyRow) -> Result<RunRecord, sqlx::Error> {
    Ok(RunRecord::new(
        ElectionKey::new(
            row.try_get::<String, _>("namespace")?,
            row.try_get::<String, _>("election")?,
        ),
        row.try_get::<String, _>("name")?,
        row.try_get::<String, _>("value")?,
        row.try_get::<i64, _>("version")?.max(0) as u64,
        row.try_get::<i64, _>("updated_us")?,
    ))
}

/// What a write sends: the record's identity, its value and how long to keep it.
struct Put<'a> {
    key: &'a ElectionKey,
    name: &'a str,
    value: &'a str,
    keep_us: i64,
}

impl SqlStore {
    fn runs_decoded(&self, row: Option<AnyRow>) -> Result<Option<RunRecord>> {
        row.as_ref()
            .map(decode_run)
            .transpose()
            .map_err(|e| self.wrap(e))
    }

    /// PostgreSQL and SQLite: the conditional statement returns the row it wrote.
    async fn put_returning(&self, put: &Put<'_>, expected: i64) -> Result<Option<RunRecord>> {
        let s = &self.statements.runs;
        let row = if expected == 0 {
            let sql = sent(self.dialect, &s.insert);
            sqlx::query(&sql)
                .bind(put.key.namespace.as_str())
                .bind(put.key.election.as_str())
                .bind(put.name)
                .bind(put.value)
                .bind(put.keep_us)
                .fetch_optional_on(&self.own)
                .await
        } else {
            let sql = sent(self.dialect, &s.update);
            sqlx::query(&sql)
                .bind(put.value)
                .bind(put.keep_us)
                .bind(put.key.namespace.as_str())
                .bind(put.key.election.as_str())
                .bind(put.name)
                .bind(expected)
                .fetch_optional_on(&self.own)
                .await
        };
        self.runs_decoded(row.map_err(|e| self.wrap(e))?)
    }

    /// MySQL/MariaDB: the conditional statement, judged by rows matched
    /// (or the primary key), then the read of the row it wrote, in one
    /// transaction. A loss rolls back, which undoes nothing but ends it.
    #[cfg(feature = "mysql")]
    async fn put_in_transaction(
        &self,
        put: &Put<'_>,
        expected: i64,
    ) -> Result<Option<RunRecord>, sqlx::Error> {
        use sqlx::Executor;
        let s = &self.statements.runs;
        if expected == 0 {
            // Outside the transaction: inside, deleting an absent row would
            // take a gap lock, and two first writes holding one each would
            // deadlock on their inserts.
            sqlx::query(&sent(self.dialect, &s.forget_expired_name))
                .bind(put.key.namespace.as_str())
                .bind(put.key.election.as_str())
                .bind(put.name)
                .execute_on(&self.own)
                .await?;
        }
        // Dropped unfinished (an error, a cancelled call), the lent
        // connection closes and the server rolls the transaction back.
        let mut lent = self.own.lend().await?;
        let conn = lent.conn();
        let written = async {
            Executor::execute(&mut *conn, self.dialect.begin_write()).await?;
            let wrote = if expected == 0 {
                let inserted = sqlx::query(&sent(self.dialect, &s.insert))
                    .bind(put.key.namespace.as_str())
                    .bind(put.key.election.as_str())
                    .bind(put.name)
                    .bind(put.value)
                    .bind(put.keep_us)
                    .execute(&mut *conn)
                    .await;
                match inserted {
                    Ok(_) => true,
                    Err(e) if super::errors::is_duplicate_key(&e) => false,
                    Err(e) => return Err(e),
                }
            } else {
                let updated = sqlx::query(&sent(self.dialect, &s.update))
                    .bind(put.value)
                    .bind(put.keep_us)
                    .bind(put.key.namespace.as_str())
                    .bind(put.key.election.as_str())
                    .bind(put.name)
                    .bind(expected)
                    .execute(&mut *conn)
                    .await?;
                updated.rows_affected() == 1
            };
            if !wrote {
                Executor::execute(&mut *conn, "ROLLBACK").await?;
                return Ok(None);
            }
            let row = sqlx::query(&sent(self.dialect, &s.read_written))
                .bind(put.key.namespace.as_str())
                .bind(put.key.election.as_str())
                .bind(put.name)
                .fetch_optional(&mut *conn)
                .await?;
            Executor::execute(&mut *conn, "COMMIT").await?;
            row.as_ref().map(decode_run).transpose()
        }
        .await;
        lent.keep_if_ok(written).await
    }

    /// Deletes the election's expired records. Best effort: the write that
    /// precedes it stands either way, and expired rows read as absent.
    async fn forget_expired_runs(&self, key: &ElectionKey) {
        let deleted = sqlx::query(&sent(self.dialect, &self.statements.runs.forget_expired))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .execute_on(&self.own)
            .await;
        match deleted {
            Ok(done) if done.rows_affected() > 0 => {
                tracing::debug!(election = %key, deleted = done.rows_affected(), "forgot expired run records");
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(election = %key, "could not delete expired run records: {e}"),
        }
    }
}

#[async_trait]
impl RunRecords for SqlStore {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        check_read(key, name)?;
        let row = sqlx::query(&sent(self.dialect, &self.statements.runs.get))
            .bind(key.namespace.as_str())
            .bind(key.election.as_str())
            .bind(name)
            .fetch_optional_on(&self.own)
            .await
            .map_err(|e| self.wrap(e))?;
        self.runs_decoded(row)
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
        // No stored version is that large: nothing to compare with.
        let Ok(expected) = i64::try_from(expected) else {
            return Ok(None);
        };
        let put = Put {
            key,
            name,
            value,
            keep_us: keep_us(keep),
        };
        let written = match self.dialect {
            #[cfg(feature = "mysql")]
            Dialect::MySql => self
                .put_in_transaction(&put, expected)
                .await
                .map_err(|e| self.wrap(e))?,
            _ => self.put_returning(&put, expected).await?,
        };
        if written.is_some() {
            self.forget_expired_runs(key).await;
        }
        Ok(written)
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        check_key(key)?;
        self.newest_of_election(&self.statements.runs.list, key, limit, decode_run)
            .await
    }
}
