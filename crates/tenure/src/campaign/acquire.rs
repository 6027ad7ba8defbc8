//! Acquiring: a follower's attempt to take a free lease, the step from following to leading.
//!
//! The acquisition is one conditional write; the leader's local deadline
//! counts from the instant recorded before it was sent. A write that may
//! have landed is never forgotten: a shutdown lets it finish and gives back
//! whatever it took, and a lease of ours from an earlier tenure (an answer
//! that came too late, a renewal that landed after we gave up) is released
//! so that nobody waits for it to expire.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{jittered, Campaign, Next};
use crate::error::{Error, Result};
use crate::store::{Acquire, Claim, LeaseRecord, LeaseStoreExt};

impl Campaign {
    fn claim(&self) -> Claim {
        Claim {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            metadata: self.shared.metadata(),
            ttl: self.timing().ttl,
        }
    }

    /// One acquisition attempt: `Ok(wait)` to keep following and look again
    /// after `wait`, `Err` with the phase that follows (leading, or the stop
    /// after a shutdown that came meanwhile).
    pub(super) async fn try_acquire(&mut self) -> Result<Duration, Next> {
        // One slot of a semaphore at a time: the gate is reserved before
        // the write goes, and freed again unless the write made us lead.
        let seat = self.shared.seat.clone();
        if seat.as_ref().is_some_and(|s| !s.reserve()) {
            return Ok(jittered(self.timing().retry_period));
        }
        let attempt = self.acquire_once().await;
        if let Some(seat) = seat {
            seat.unreserve();
        }
        attempt
    }

    async fn acquire_once(&mut self) -> Result<Duration, Next> {
        let t0 = self.now();
        let claim = self.claim();
        let store = self.store.clone();
        // Bounded by ttl/2: an answer later than that could not make us leader
        // for long anyway, and a stale acquisition is released on the next read.
        let (attempt, stopping) = self
            .finishing_call("acquire", async move { store.try_acquire(&claim).await })
            .await;
        if let Some(reply) = stopping {
            self.give_back(attempt, reply).await;
            return Err(Next::Stop);
        }
        match attempt {
            None => Ok(Duration::ZERO),
            // The store cannot honour a setting (a TTL out of its range):
            // no retry mends that, so the campaign ends and `acquired()`
            // answers the refusal.
            Some(Err(Error::InvalidConfig { field, reason })) => {
                tracing::error!(election = %self.config.key, "the store refuses this elector's {field}: {reason}");
                *self
                    .shared
                    .refused
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some((field, reason));
                Err(Next::Stop)
            }
            Some(Err(e)) => Ok(self.follower_failed("acquiring the lease", &e)),
            Some(Ok(Acquire::Held(rec))) => {
                self.store_ok();
                self.publish_record(rec.as_ref());
                Ok(rec
                    .filter(|r| r.is_held())
                    .map(|r| self.wait_for(&r))
                    .unwrap_or_else(|| jittered(self.timing().refused_free_retry)))
            }
            Some(Ok(Acquire::Acquired(rec))) => self.acquired(t0, rec).await,
        }
    }

    /// Shut down while the acquisition was in flight. It was let finish, so
    /// whatever it took is known: give it back, or the successor would wait
    /// out a whole TTL for a leader that is gone. Then answers the shutdown.
    async fn give_back(
        &mut self,
        attempt: Option<Result<Acquire>>,
        reply: oneshot::Sender<Result<()>>,
    ) {
        match attempt {
            Some(Ok(Acquire::Acquired(rec))) => {
                let tenure = self.tenure(rec.term);
                let release = self.store.release(&tenure);
                if let Ok(Err(e)) =
                    tokio::time::timeout(self.timing().release_timeout, release).await
                {
                    self.store_failed("releasing an acquisition cut short by shutdown", &e);
                }
            }
            Some(Ok(Acquire::Held(_))) | Some(Err(_)) => {}
            // No answer within the budget: it may still land; look.
            None => self.release_if_ours().await,
        }
        let _ = reply.send(Ok(()));
    }

    /// The acquisition sent at `t0` won: lead until the local deadline it
    /// gives (`Err(Next::Lead)`), unless the answer came too late to act on.
    async fn acquired(&mut self, t0: Duration, rec: LeaseRecord) -> Result<Duration, Next> {
        self.store_ok();
        let now = self.now();
        self.note_rtt(now.saturating_sub(t0));
        let deadline = self
            .timing()
            .deadline(crate::bugs::deadline_start(t0, now), self.rtt);
        let tenure = self.tenure(rec.term);
        if now >= deadline {
            // The answer came too late to act on; give it back.
            self.release_stale(rec.term).await?;
            return Ok(jittered(self.timing().retry_period));
        }
        self.shared.lead(rec.term, deadline);
        tracing::info!(election = %self.config.key, term = rec.term, holder = %self.config.holder, "became leader");
        self.forget_previous_holder(rec);
        Err(Next::Lead { tenure, deadline })
    }

    /// Drops the registration of the holder whose expired lease we just
    /// took: it is gone or cut off, and nobody should wait for it as a
    /// successor next time (it would lapse only later).
    fn forget_previous_holder(&self, rec: LeaseRecord) {
        // Not when the expired lease was our own (cut off for a TTL,
        // now back): a leader sends no heartbeats, so leaving would
        // drop us from the member list until the next reap.
        let dead = rec
            .previous_holder
            .filter(|dead| *dead != self.config.holder);
        if let Some(dead) = dead {
            let store = self.store.clone();
            let key = self.config.key.clone();
            let timeout = self.timing().leave_timeout;
            tokio::spawn(async move {
                let _ = tokio::time::timeout(timeout, store.leave(&key, &dead)).await;
            });
        }
    }

    /// Releases the lease if it names us, whatever its term: after an
    /// acquisition whose answer never came. Bounded by the release timeout.
    async fn release_if_ours(&mut self) {
        let store = self.store.clone();
        let key = self.config.key.clone();
        let holder = self.config.holder.clone();
        let attempt = async move {
            let rec = store.read(&key).await?;
            if let Some(r) = rec.filter(|r| r.holder.as_deref() == Some(holder.as_str())) {
                let tenure = crate::store::Tenure {
                    key,
                    holder,
                    term: r.term,
                };
                store.release(&tenure).await?;
            }
            Ok::<(), Error>(())
        };
        match tokio::time::timeout(self.timing().release_timeout, attempt).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.store_failed("releasing an acquisition cut short by shutdown", &e),
            Err(_) => {
                tracing::warn!(election = %self.config.key, "no answer from the store while shutting down; an acquisition that lands late expires by itself")
            }
        }
    }

    /// Releases a lease of ours under `term` that nobody acts on. Returns
    /// whether the store took the release; `Err`: the phase a command
    /// demands meanwhile.
    pub(super) async fn release_stale(&mut self, term: u64) -> Result<bool, Next> {
        if !self.shared.holds.is_empty() {
            // Work of this process may still run: a successor must not
            // start before it is gone, so the lease is left to expire.
            return Ok(false);
        }
        let tenure = self.tenure(term);
        let store = self.store.clone();
        match self
            .follower_call("release", async move { store.release(&tenure).await })
            .await?
        {
            Ok(released) => Ok(released),
            Err(e) => {
                self.store_failed("releasing a stale lease", &e);
                Ok(false)
            }
        }
    }
}
