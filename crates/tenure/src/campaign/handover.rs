//! Stepping down: resign, transfer, preemption, release on shutdown, and the loss at the deadline.
//!
//! A leader steps down when asked (a command from its own elector, or a
//! hand-over request another process wrote into the lease), when a member
//! of higher priority should lead, on shutdown, and at its local deadline.
//! The order is always the same: the work stops first (every
//! [`HandoverHold`] dropped), then the local step-down (no one acts as
//! leader after it), then one conditional write hands the lease over or
//! releases it, so a successor never starts while the work still runs. A
//! tenure that runs out instead leaves its lease to expire, or frees it once
//! the work is gone.
//!
//! [`HandoverHold`]: crate::HandoverHold

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::race::{Commands, Raced};
use super::{Campaign, Command, Next};
use crate::error::{Error, Result};
use crate::events::StopReason;
use crate::store::{Handover, HandoverReason, LeaseRecord, LeaseStoreExt, Tenure};

/// What a hand-over's target gets, beyond its wake-up, to read the lease
/// and acquire it before the window ends (see
/// `Campaign::target_takeover_bound`): a few round trips on a loaded store.
const TAKEOVER_ROUND_TRIPS: Duration = Duration::from_millis(500);

/// Where stepping down stands, from a leader's step-down to the end of the campaign.
#[derive(Default)]
pub(super) struct SteppingDown {
    /// This candidate's leaving of the member list.
    leave: Leave,
    /// A shutdown (or the elector dropped) that arrived while the work was
    /// stopping before a hand-over: answered, and acted on, once the lease
    /// has been handed over.
    pub(super) shutdown_pending: Option<oneshot::Sender<Result<()>>>,
}

/// How far this candidate got with leaving the member list while stepping down.
#[derive(Default)]
enum Leave {
    /// It has not left: the campaign's end leaves.
    #[default]
    No,
    /// Leaving, started while the work stops before a hand-over, so that no
    /// follower takes this candidate for the designated successor of the
    /// lease it is about to free; the hand-over waits for it.
    Started(JoinHandle<Result<bool>>),
    /// It left after freeing the lease.
    Done,
}

impl SteppingDown {
    /// Whether this candidate already left the member list after freeing its lease.
    pub(super) fn left(&self) -> bool {
        matches!(self.leave, Leave::Done)
    }
}

impl Campaign {
    /// Acts on a command that arrived while leading: resign and transfer hand
    /// the lease over, shutdown (or the elector dropped) releases it; each
    /// once the work has stopped.
    pub(super) async fn command_while_leading(
        &mut self,
        cmd: Option<Command>,
        tenure: &Tenure,
    ) -> Next {
        match cmd {
            Some(Command::Resign(reply)) => {
                let window = self.timing().handover_window;
                let (next, result) = self
                    .step_down_handover(tenure, Handover::Anyone, window, HandoverReason::Resign)
                    .await;
                let _ = reply.send(result);
                next
            }
            Some(Command::Transfer(identity, reply)) => {
                let window = self.timing().handover_window;
                let to = Handover::To(identity);
                let (next, result) = self
                    .step_down_handover(tenure, to, window, HandoverReason::Transfer)
                    .await;
                let _ = reply.send(result);
                next
            }
            Some(Command::Shutdown(reply)) => {
                let result = if self.config.release_on_shutdown {
                    self.step_down_and_release(tenure, "shutting down").await
                } else {
                    self.shared.end_as(StopReason::Abandoned);
                    Ok(())
                };
                let _ = reply.send(result);
                Next::Stop
            }
            None => {
                let _ = self.step_down_and_release(tenure, "elector dropped").await;
                Next::Stop
            }
        }
    }

    /// If someone asked (through the store) for our lease to be handed over,
    /// step down and hand it over as asked.
    pub(super) async fn act_on_handover_request(
        &mut self,
        tenure: &Tenure,
        rec: Option<LeaseRecord>,
    ) -> Option<Next> {
        let rec = rec?;
        if rec.holder.as_deref() != Some(tenure.holder.as_str()) || rec.term != tenure.term {
            return None;
        }
        let to = rec.handover.clone()?;
        let window = crate::store::remaining_from_us(rec.handover_until_us, rec.read_at_us);
        let reason = match to {
            Handover::Anyone => HandoverReason::Resign,
            Handover::To(_) => HandoverReason::Transfer,
        };
        tracing::info!(election = %self.config.key, term = tenure.term, "hand-over requested ({reason})");
        Some(self.step_down_handover(tenure, to, window, reason).await.0)
    }

    /// Preemption, once this tenure has lasted `preempt_after`: hands the
    /// lease to a live member of higher priority with a fresh heartbeat, if
    /// there is one. The check reads the store, so it races commands and the
    /// deadline like a renewal. `Some`: what the preemption, or a command,
    /// led to.
    pub(super) async fn preempt_if_due(
        &mut self,
        tenure: &Tenure,
        led_since: Duration,
        deadline: Duration,
    ) -> Option<Next> {
        let check = self.preemption_check(led_since)?;
        let target = match self.race(check, deadline, Commands::BeforeDeadline).await {
            Raced::Done(target) => target,
            Raced::Deadline => None,
            Raced::Command(cmd) => return Some(self.command_while_leading(cmd, tenure).await),
        };
        let identity = target?;
        tracing::info!(election = %self.config.key, term = tenure.term, to = %identity, "preempted by a member of higher priority");
        let window = self.timing().handover_window;
        let to = Handover::To(identity);
        let (next, _) = self
            .step_down_handover(tenure, to, window, HandoverReason::Preempt)
            .await;
        Some(next)
    }

    /// The preemption check (to run, raced against commands) for a live
    /// member of higher priority with a fresh heartbeat; `None` when
    /// preemption is off or not due yet.
    fn preemption_check(
        &self,
        led_since: Duration,
    ) -> Option<impl std::future::Future<Output = Option<String>> + use<>> {
        let stable = self.timing().preempt_after?;
        if self.now().saturating_sub(led_since) < stable {
            return None;
        }
        let store = self.store.clone();
        let key = self.config.key.clone();
        let ttl = self.timing().ttl;
        let read_timeout = self.timing().leader_read_timeout;
        let priority = self.config.priority;
        let me = self.config.holder.clone();
        Some(async move {
            // The lease read gives the store's clock for the freshness rule
            // that succession uses: a crashed member must not be handed the lease.
            let (now_us, members) = tokio::time::timeout(read_timeout, async {
                let now_us = store.read(&key).await?.map(|r| r.read_at_us);
                Ok::<_, Error>((now_us, store.members(&key).await?))
            })
            .await
            .ok()?
            .ok()?;
            crate::telemetry::members(&key, &members);
            let now_us = now_us?;
            members
                .iter()
                .find(|m| m.is_fresh(now_us, ttl) && m.priority > priority && m.holder != me)
                .map(|m| m.identity.clone())
        })
    }

    /// The work stops first, then the local step-down, then the lease is
    /// handed over in one conditional write. Returns what follows and the
    /// outcome of the hand-over.
    async fn step_down_handover(
        &mut self,
        tenure: &Tenure,
        to: Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> (Next, Result<()>) {
        if !self.work_stopped(tenure).await {
            return self.work_outlived_the_deadline(tenure).await;
        }
        let window = window.min(self.target_takeover_bound());
        let result = self.hand_over_now(tenure, to, window, reason).await;
        let next = self.hold_off().await;
        (self.after_step_down(next), result)
    }

    /// The longest a hand-over window lasts, whatever was asked: the time a
    /// live target needs to hear that the lease is free for it and take
    /// it. A target that died after it was last heard from (the request
    /// checks only that) then holds the election leaderless this long, not
    /// for the whole window asked for; after it, succession goes on as
    /// after a release. A live target's wake-up: where a follower reads at
    /// the lease's expiry unless it is first in line (frugal followers), a
    /// quarter of a TTL after a TTL since its last read (`wait_for`);
    /// elsewhere the push, answered at once or after its push graces if
    /// it is not first in line (`push_answer_delay`), or, while the push
    /// channel is down, its next read within `push_down_poll`. Plus
    /// [`TAKEOVER_ROUND_TRIPS`] for the read and the acquisition.
    fn target_takeover_bound(&self) -> Duration {
        let timing = self.timing();
        let wake = if self.frugal {
            timing.ttl + timing.ttl / 4
        } else {
            timing.push_down_poll + timing.push_succession_grace * 2
        };
        wake + TAKEOVER_ROUND_TRIPS
    }

    /// The work stops first, then the local step-down (no one acts as
    /// leader after this), then the release.
    async fn step_down_and_release(&mut self, tenure: &Tenure, why: &str) -> Result<()> {
        if !self.work_stopped(tenure).await {
            return self.work_outlived_the_deadline(tenure).await.1;
        }
        self.shared.end_as(StopReason::Released);
        tracing::info!(election = %self.config.key, term = tenure.term, "stepping down: {why}");
        let timeout = self.timing().release_timeout;
        let store = self.store.clone();
        let released = twice_within(timeout, || store.release(tenure)).await;
        self.leave_after_handing_over().await;
        self.lease_freed(released, "releasing the lease", "release", timeout)
    }

    /// Asks the work of this tenure to stop ([`Leadership::stepping_down`])
    /// and waits until it has (every [`HandoverHold`] dropped), so the lease
    /// is never handed over or released while the work still runs. Raced
    /// against the local deadline: `false` if it passed first, and the
    /// tenure then runs out. Commands meanwhile join the step-down.
    ///
    /// [`Leadership::stepping_down`]: crate::Leadership::stepping_down
    /// [`HandoverHold`]: crate::HandoverHold
    async fn work_stopped(&mut self, tenure: &Tenure) -> bool {
        self.shared.ask_to_step_down();
        let holds = self.shared.holds.clone();
        if holds.is_empty() {
            return true;
        }
        tracing::info!(election = %self.config.key, term = tenure.term, "waiting for the work to stop before handing over");
        // Meanwhile, out of the member list (see `leave_after_handing_over`).
        self.shared
            .pause_membership(self.now() + self.timing().hold_off);
        let (store, key, holder) = (
            self.store.clone(),
            self.config.key.clone(),
            self.config.holder.clone(),
        );
        self.stepping_down.leave =
            Leave::Started(tokio::spawn(
                async move { store.leave(&key, &holder).await },
            ));
        let deadline = self.current_deadline();
        let released = holds.released();
        tokio::pin!(released);
        loop {
            let commands = if self.stepping_down.shutdown_pending.is_none() {
                Commands::AfterDeadline
            } else {
                Commands::Wait
            };
            match self.race(released.as_mut(), deadline, commands).await {
                Raced::Done(()) => return true,
                Raced::Deadline => return false,
                Raced::Command(cmd) => self.command_while_stepping_down(cmd),
            }
        }
    }

    /// Answers a command that arrived while the work stops before a
    /// hand-over: a resign is already under way, a transfer can no longer
    /// pick the successor, and a shutdown waits until the lease is handed over.
    fn command_while_stepping_down(&mut self, cmd: Option<Command>) {
        match cmd {
            Some(Command::Resign(reply)) => {
                let _ = reply.send(Ok(()));
            }
            Some(Command::Transfer(_, reply)) => {
                let _ = reply.send(Err(Error::NotLeader {
                    election: self.config.key.to_string(),
                }));
            }
            Some(Command::Shutdown(reply)) => self.stepping_down.shutdown_pending = Some(reply),
            None => self.stepping_down.shutdown_pending = Some(oneshot::channel().0),
        }
    }

    /// The current tenure's local deadline; now if there is none.
    fn current_deadline(&self) -> Duration {
        self.shared
            .current
            .borrow()
            .map(|c| c.deadline)
            .unwrap_or_else(|| self.now())
    }

    /// The work did not stop before the deadline: the tenure runs out, and
    /// the lease is freed only once the work has stopped (see [`Self::lost`]).
    async fn work_outlived_the_deadline(&mut self, tenure: &Tenure) -> (Next, Result<()>) {
        let next = self
            .lost(tenure, "the work did not stop before the deadline")
            .await;
        let result = Err(Error::Timeout {
            what: "stopping the work before handing over",
            after: self.timing().ttl,
        });
        (self.after_step_down(next), result)
    }

    /// Local step-down, then the hand-over write.
    async fn hand_over_now(
        &mut self,
        tenure: &Tenure,
        to: Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<()> {
        self.shared.end_as(match reason {
            HandoverReason::Preempt => StopReason::Preempted,
            _ => StopReason::Released,
        });
        tracing::info!(election = %self.config.key, term = tenure.term, "stepping down: {reason}");
        let timeout = self.timing().handover_timeout;
        let store = self.store.clone();
        let handed = twice_within(timeout, || store.hand_over(tenure, &to, window, reason)).await;
        self.leave_after_handing_over().await;
        self.lease_freed(handed, "handing the lease over", "hand-over", timeout)
    }

    /// The outcome of the write that freed the lease (a release or a
    /// hand-over, `what`), bounded by `timeout`: a store error is logged as
    /// `doing` failed and returned, no answer is a timeout.
    fn lease_freed<T>(
        &mut self,
        written: std::result::Result<Result<T>, tokio::time::error::Elapsed>,
        doing: &str,
        what: &'static str,
        timeout: Duration,
    ) -> Result<()> {
        match written {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.store_failed(doing, &e);
                Err(e)
            }
            Err(_) => Err(Error::Timeout {
                what,
                after: timeout,
            }),
        }
    }

    /// Leaves the member list after the lease was freed (followers already skip
    /// the previous holder as successor). Membership stays paused for a moment
    /// (see `hold_off`), or for good on shutdown.
    async fn leave_after_handing_over(&mut self) {
        self.shared
            .pause_membership(self.now() + self.timing().hold_off);
        let started = match std::mem::take(&mut self.stepping_down.leave) {
            Leave::Started(task) => Some(task),
            Leave::No | Leave::Done => None,
        };
        let (store, key, holder) = (
            self.store.clone(),
            self.config.key.clone(),
            self.config.holder.clone(),
        );
        let leave = async move {
            match started {
                // Started while the work stopped: wait for that one.
                Some(task) => task.await.unwrap_or(Ok(false)),
                None => store.leave(&key, &holder).await,
            }
        };
        // Best effort: a member row left behind only lists this process
        // until its hold-off ends or the row expires, and its hold-off
        // keeps it out of the race meanwhile.
        match tokio::time::timeout(self.timing().leave_timeout, leave).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(
                election = %self.config.key,
                "leaving the member list after stepping down failed: {e}"
            ),
            Err(_) => tracing::debug!(
                election = %self.config.key,
                "leaving the member list after stepping down timed out"
            ),
        }
        self.stepping_down.leave = Leave::Done;
    }

    /// After resigning or handing over: stay out of the race (and out of the
    /// member list, so nobody waits for us as the designated successor) for a
    /// moment, so another candidate takes over.
    async fn hold_off(&mut self) -> Next {
        let hold_off = self.now() + self.timing().hold_off;
        // Stepping down already left the member list; the heartbeat task
        // rejoins when the hold-off ends.
        self.shared.pause_membership(hold_off);
        self.stepping_down.leave = Leave::No;
        Next::Follow {
            hold_off: Some(hold_off),
        }
    }

    /// What follows a step-down: a shutdown that came meanwhile ends the
    /// campaign, otherwise `next`.
    fn after_step_down(&mut self, next: Next) -> Next {
        match self.stepping_down.shutdown_pending.take() {
            Some(reply) => {
                let _ = reply.send(Ok(()));
                Next::Stop
            }
            None => next,
        }
    }

    /// Steps down after the deadline passed and frees the old lease if we can.
    pub(super) async fn lost(&mut self, tenure: &Tenure, why: &str) -> Next {
        self.shared.end_as(StopReason::Expired);
        tracing::warn!(election = %self.config.key, term = tenure.term, "leadership lost: {why}");
        // The release names our term, so it can never touch a successor's lease.
        let store = self.store.clone();
        let tenure = tenure.clone();
        let timeout = self.timing().lost_release_timeout;
        let holds = self.shared.holds.clone();
        // Work that has not confirmed its stop (a job whose guard is slow)
        // may still run: the lease is then left to expire by itself, and
        // freed early only once the work is gone. After a TTL it has
        // expired anyway.
        let work_gone =
            tokio::time::timeout(self.timing().ttl, async move { holds.released().await });
        tokio::spawn(async move {
            if work_gone.await.is_ok() {
                let _ = tokio::time::timeout(timeout, store.release(&tenure)).await;
            }
        });
        Next::Follow { hold_off: None }
    }
}

/// `write` (a release or a hand-over), sent once more at once if the store
/// failed, all within `timeout`. The first failure is often a connection
/// the server closed a moment ago (a restart, an administrator): the next
/// statement opens another. Both writes are conditional on the tenure, so
/// a second landing changes nothing; without it the successor would wait
/// for the lease's expiry.
async fn twice_within<T, F, Fut>(
    timeout: Duration,
    write: F,
) -> std::result::Result<Result<T>, tokio::time::error::Elapsed>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    tokio::time::timeout(timeout, async {
        match write().await {
            Err(e) => {
                tracing::debug!("freeing the lease failed, trying once more: {e}");
                write().await
            }
            written => written,
        }
    })
    .await
}
