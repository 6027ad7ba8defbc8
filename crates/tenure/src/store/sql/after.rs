//! The queue of what follows a decided change: notifications and history rows,
//! written in order by one task per store, off the caller's path, and
//! [`SqlStore::flush_after`], which waits for it.

use super::dialect::Dialect;
use super::statements::{sent, term_i64, Statements};
use super::SqlStore;
use crate::store::{ElectionKey, EndReason, LeaseRecord, StartReason, Tenure};

/// How long one job's statements may take once they have the connection:
/// far beyond a healthy server's answer (milliseconds), and short enough
/// that a lost request holds the process's other statements up no longer
/// than a lost push probe is waited for.
const JOB_LIMIT: std::time::Duration = crate::store::StoreOptions::PUSH_PROBE_TIMEOUT;

impl SqlStore {
    fn after(&self) -> After {
        After {
            own: self.own.clone(),
            dialect: self.dialect,
            statements: self.statements.clone(),
            wake: self.wake.clone(),
            history_retention: self.history_retention,
        }
    }

    /// Queues the notification and history writes of a decided change. One
    /// worker per store runs them in order (a term's start is written before
    /// its end), off the caller's path: a new leader need not wait for them.
    pub(super) fn after_change(&self, job: AfterJob) {
        let tx = self.after_queue.get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Queued>();
            let after = self.after();
            tokio::spawn(async move {
                while let Some(queued) = rx.recv().await {
                    let job = match queued {
                        Queued::Job(job) => *job,
                        Queued::Flush(done) => {
                            let _ = done.send(());
                            continue;
                        }
                    };
                    // The job's statements one after the other on the
                    // store's connection (`connection.rs`); a failed history
                    // statement is bookkeeping, and a broken connection
                    // shows at the next statement, which opens another.
                    after.run(job).await;
                }
            });
            tx
        });
        let _ = tx.send(Queued::Job(Box::new(job)));
    }

    /// Waits until every change queued so far has been written.
    pub(super) async fn flush_after(&self) {
        let Some(queue) = self.after_queue.get() else {
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = queue.send(Queued::Flush(tx));
        let _ = rx.await;
    }
}

/// Work that follows a decided change; see [`SqlStore::after_change`].
pub(super) enum AfterJob {
    Start(LeaseRecord),
    Close(Tenure, EndReason),
}

/// What the worker of [`SqlStore::after_change`] takes from its queue.
pub(super) enum Queued {
    Job(Box<AfterJob>),
    /// Answered once every job queued before it is done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// What happens after a change has been decided: notifications and history,
/// done by a task of its own so that the caller does not wait for them.
#[derive(Clone)]
struct After {
    own: std::sync::Arc<super::connection::OneConnection>,
    dialect: Dialect,
    statements: std::sync::Arc<Statements>,
    /// PostgreSQL's listeners are told of a change by the queue where the
    /// statement itself did not (`wake.rs`).
    wake: std::sync::Arc<super::wake::Wake>,
    history_retention: u64,
}

impl After {
    /// One job's statements, on the store's connection. Statements that
    /// have no answer within [`JOB_LIMIT`] are dropped, and the connection
    /// with them: on a network that lost the request they would wait for
    /// ever, and every statement of the process (the leader's renewals
    /// first) waits for the connection they hold.
    async fn run(&self, job: AfterJob) {
        let mut lent = match self.own.lend().await {
            Ok(lent) => lent,
            Err(e) => {
                tracing::debug!("recording history failed: {e}");
                return;
            }
        };
        let statements = async {
            let conn = lent.conn();
            match job {
                AfterJob::Start(rec) => {
                    self.notify(conn, &rec.key).await;
                    self.record_start(conn, &rec).await;
                }
                AfterJob::Close(tenure, reason) => {
                    self.close_history_now(conn, &tenure, reason).await;
                }
            }
        };
        if tokio::time::timeout(JOB_LIMIT, statements).await.is_err() {
            tracing::debug!("recording history failed: no answer within {JOB_LIMIT:?}");
            return;
        }
        if let Err(e) = lent.keep().await {
            tracing::debug!("recording history failed: {e}");
        }
    }

    /// Records the start of a term in the history, and the end of the previous
    /// one if it expired (a release or hand-over closed it already). Best
    /// effort: the history is for people, leadership does not depend on it.
    async fn record_start(&self, conn: &mut super::conn::Conn, rec: &LeaseRecord) {
        if !self.statements.acquire_records_start {
            self.record_start_and_expiry(conn, rec).await;
        }
        // Trim now and then, not on every acquisition.
        let keep = self.history_retention;
        if rec.term % 16 == 0 && rec.term > keep {
            let _ = sqlx::query(&sent(self.dialect, &self.statements.trim_history))
                .bind(rec.key.namespace.as_str())
                .bind(rec.key.election.as_str())
                .bind(term_i64(rec.term - keep))
                .execute(&mut *conn)
                .await;
        }
    }

    /// The history rows of an acquisition, where its statement did not
    /// write them itself.
    async fn record_start_and_expiry(&self, conn: &mut super::conn::Conn, rec: &LeaseRecord) {
        let holder = rec.holder.clone().unwrap_or_default();
        let inserted = sqlx::query(&sent(self.dialect, &self.statements.insert_history))
            .bind(rec.key.namespace.as_str())
            .bind(rec.key.election.as_str())
            .bind(term_i64(rec.term))
            .bind(holder)
            .bind(
                rec.start_reason
                    .map(StartReason::as_str)
                    .unwrap_or_default(),
            )
            .bind(rec.acquired_at_us)
            .execute(&mut *conn)
            .await;
        if let Err(e) = inserted {
            tracing::debug!("recording history failed: {e}");
        }
        if rec.previous_holder.is_some() && rec.term > 1 {
            let closed = sqlx::query(&sent(self.dialect, &self.statements.close_history_at))
                .bind(rec.previous_expires_at_us)
                .bind(EndReason::Expired.as_str())
                .bind(rec.key.namespace.as_str())
                .bind(rec.key.election.as_str())
                .bind(term_i64(rec.term - 1))
                .execute(&mut *conn)
                .await;
            if let Err(e) = closed {
                tracing::debug!("recording history failed: {e}");
            }
        }
    }

    async fn close_history_now(
        &self,
        conn: &mut super::conn::Conn,
        tenure: &Tenure,
        reason: EndReason,
    ) {
        let closed = sqlx::query(&sent(self.dialect, &self.statements.close_history_now))
            .bind(reason.as_str())
            .bind(tenure.key.namespace.as_str())
            .bind(tenure.key.election.as_str())
            .bind(term_i64(tenure.term))
            .execute(&mut *conn)
            .await;
        if let Err(e) = closed {
            tracing::debug!("recording history failed: {e}");
        }
    }

    /// Tells listening followers and observers that `key` changed (PostgreSQL).
    /// Best effort: a lost notification only delays them to their next poll.
    async fn notify(&self, conn: &mut super::conn::Conn, key: &ElectionKey) {
        self.wake.notify(conn, key).await;
    }
}
