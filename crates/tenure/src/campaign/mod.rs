//! The campaign task: follows until the lease is free, acquires, renews, steps down.
//!
//! One task per elector. Followers sleep until the lease's remaining time (as the
//! store measured it) runs out, or a short poll period to notice a release,
//! whichever is sooner; they write only when the lease is free. The leader renews
//! every renew period and steps down at its local deadline at the latest, whether
//! or not the store ever answers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, Timing};
use crate::error::{Error, Result};
use crate::events::StopReason;
use crate::leadership::{Shared, State};
use crate::store::{
    changed, Acquire, Changes, Claim, DynStore, Handover, HandoverReason, LeaseRecord, Member,
    MemberRecord, Tenure, Woken,
};

/// Requests from the [`Elector`](crate::Elector) handle.
#[derive(Debug)]
pub(crate) enum Command {
    Resign(oneshot::Sender<Result<()>>),
    Transfer(String, oneshot::Sender<Result<()>>),
    Shutdown(oneshot::Sender<Result<()>>),
}

enum Next {
    Follow { hold_off: Option<Duration> },
    Lead { tenure: Tenure, deadline: Duration },
    Stop,
}

pub(crate) struct Campaign {
    config: Arc<Config>,
    store: DynStore,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Smoothed round-trip time of successful writes, for the safety margin.
    rtt: Duration,
    /// Consecutive store failures, to log the first of a streak loudly and the rest quietly.
    failures: u32,
    /// The corrupt-lease error last logged ([`Error::Corrupt`]), to log each
    /// new one once rather than every retry.
    corrupt: Option<String>,
    /// Pushed change notifications, where the store has them.
    changes: Option<Changes>,
    /// Whether we already left the member list while stepping down.
    left: bool,
    /// The term of the last lease seen free, and when (local clock) this
    /// follower first saw it free: the succession grace counts from then.
    free_since: Option<(u64, Duration)>,
    /// When (local clock) this candidate last reaped lapsed members as leader
    /// (or first led).
    reaped_at: Option<Duration>,
    /// Whether the last wait ended with a pushed change: the read that
    /// follows is on a hand-over's path, so it carries no heartbeat (a
    /// heartbeat can be slower than a read: etcd's are three requests).
    woken_by_push: bool,
    /// Whether that push named this election (not a wake-up of everyone
    /// after the channel opened or failed, where most likely nothing changed).
    pushed_for_us: bool,
    /// A shutdown (or the elector dropped) that arrived while the work was
    /// stopping before a hand-over: answered, and acted on, once the lease
    /// has been handed over.
    shutdown_pending: Option<oneshot::Sender<Result<()>>>,
    /// Leaving the member list, started while the work stops before a
    /// hand-over, so that no follower takes this candidate for the
    /// designated successor of the lease it is about to free.
    leaving: Option<tokio::task::JoinHandle<Result<bool>>>,
}

fn jittered(period: Duration) -> Duration {
    // Uniform in [period/2, period]: spreads candidates apart without making
    // anyone slower than the configured period.
    period.mul_f64(crate::random::factor(0.5, 1.0))
}

/// How often a follower looks again at a corrupt lease: a TTL, but at least
/// [`CORRUPT_RETRY_MIN`] and at most [`CORRUPT_RETRY_MAX`]. Someone must
/// repair the record first; a repair written by tenure or noticed by a push
/// is seen sooner.
fn corrupt_retry(ttl: Duration) -> Duration {
    ttl.clamp(CORRUPT_RETRY_MIN, CORRUPT_RETRY_MAX)
}

/// The shortest wait between reads of a corrupt lease.
const CORRUPT_RETRY_MIN: Duration = Duration::from_secs(10);
/// The longest wait between reads of a corrupt lease.
const CORRUPT_RETRY_MAX: Duration = Duration::from_secs(60);

impl Campaign {
    pub(crate) fn new(
        config: Arc<Config>,
        store: DynStore,
        shared: Arc<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let changes = store.subscribe();
        Self {
            config,
            store,
            shared,
            commands,
            rtt: Duration::ZERO,
            failures: 0,
            corrupt: None,
            changes,
            left: false,
            free_since: None,
            reaped_at: None,
            woken_by_push: false,
            pushed_for_us: false,
            shutdown_pending: None,
            leaving: None,
        }
    }

    pub(crate) async fn run(self) {
        // If the campaign ever panicked, handles must not believe we lead or
        // wait forever: the guard ends leadership and marks the elector closed.
        let guard = Closed(self.shared.clone());
        self.campaign().await;
        drop(guard);
    }

    async fn campaign(mut self) {
        let membership = tokio::spawn(membership(
            self.store.clone(),
            self.shared.clone(),
            self.member(),
            self.config.timing.clone(),
        ));
        let mut next = Next::Follow { hold_off: None };
        loop {
            next = match next {
                Next::Follow { hold_off } => self.follow(hold_off).await,
                Next::Lead { tenure, deadline } => self.lead(tenure, deadline).await,
                Next::Stop => break,
            };
        }
        membership.abort();
        if let Some(reply) = self.shutdown_pending.take() {
            let _ = reply.send(Ok(()));
        }
        if !self.left {
            let leave = self.store.leave(&self.config.key, &self.config.holder);
            let _ = tokio::time::timeout(self.timing().leave_timeout, leave).await;
        }
        self.shared.end();
        self.shared
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        // Wake anyone waiting in `acquired()`.
        self.shared.current.send_replace(None);
        self.shared.publish(State::NoLeader);
    }

    fn member(&self) -> Member {
        Member {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            metadata: self.config.metadata.clone(),
            priority: self.config.priority,
        }
    }

    fn now(&self) -> Duration {
        self.shared.clock.now()
    }

    fn timing(&self) -> &Timing {
        &self.config.timing
    }

    fn store_failed(&mut self, what: &str, e: &Error) {
        crate::telemetry::store_error(what);
        self.failures += 1;
        if self.failures == 1 || self.failures % 50 == 0 {
            tracing::warn!(election = %self.config.key, failures = self.failures, "{what} failed: {e}");
        } else {
            tracing::debug!(election = %self.config.key, failures = self.failures, "{what} failed: {e}");
        }
    }

    /// How long to wait after a failed follower call: a corrupt lease
    /// ([`Error::Corrupt`]) stays corrupt until someone repairs it, so it is
    /// logged once (again only when the error changes) and retried slowly;
    /// anything else is retried at the retry period.
    fn follower_failed(&mut self, what: &str, e: &Error) -> Duration {
        if !matches!(e, Error::Corrupt { .. }) {
            self.store_failed(what, e);
            return jittered(self.timing().retry_period);
        }
        crate::telemetry::store_error(what);
        let message = e.to_string();
        if self.corrupt.as_deref() != Some(message.as_str()) {
            tracing::error!(election = %self.config.key, "{what} refused: {message}");
            self.corrupt = Some(message);
        } else {
            tracing::debug!(election = %self.config.key, "{what} refused: {message}");
        }
        jittered(corrupt_retry(self.timing().ttl))
    }

    fn store_ok(&mut self) {
        if self.corrupt.take().is_some() {
            tracing::info!(election = %self.config.key, "the lease reads as valid again");
        }
        if self.failures > 0 {
            tracing::info!(election = %self.config.key, after = self.failures, "store reachable again");
        }
        self.failures = 0;
    }

    fn note_rtt(&mut self, sample: Duration) {
        self.rtt = if self.rtt.is_zero() {
            sample
        } else {
            // EWMA with weight 1/4, but jump up at once: a margin that lags a
            // slowing store is the unsafe direction.
            (self.rtt.mul_f64(0.75) + sample.mul_f64(0.25)).max(sample.min(self.rtt * 2))
        };
    }

    /// Sleeps until `until`, unless a command arrives first. Returns the
    /// transition a command demands, if any.
    async fn idle_until(&mut self, until: Duration) -> Option<Next> {
        let sleep = self.shared.clock.sleep_until(until);
        tokio::pin!(sleep);
        let key = self.config.key.clone();
        loop {
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                _ = &mut sleep => return None,
                // A pushed change (e.g. a release) ends the wait early.
                woken = changed(&mut self.changes, Some(&key)) => {
                    tracing::trace!(election = %key, "woken by a push");
                    self.woken_by_push = true;
                    self.pushed_for_us = woken == Woken::Notified;
                    return None;
                }
                cmd = self.commands.recv() => if let Some(reply) = self.follower_command(cmd) {
                    let _ = reply.send(Ok(()));
                    return Some(Next::Stop);
                },
            }
        }
    }

    /// Answers a command that arrived while following: resign and transfer
    /// fail at once (we do not lead). A shutdown, or the elector dropped, is
    /// handed back for the caller to acknowledge once it has stopped.
    fn follower_command(&self, cmd: Option<Command>) -> Option<oneshot::Sender<Result<()>>> {
        match cmd {
            Some(Command::Resign(reply)) | Some(Command::Transfer(_, reply)) => {
                let _ = reply.send(Err(Error::NotLeader {
                    election: self.config.key.to_string(),
                }));
                None
            }
            Some(Command::Shutdown(reply)) => Some(reply),
            None => Some(oneshot::channel().0),
        }
    }

    /// Acts on a command that arrived while leading: resign and transfer hand
    /// the lease over, shutdown (or the elector dropped) releases it; each
    /// once the work has stopped.
    async fn command_while_leading(&mut self, cmd: Option<Command>, tenure: &Tenure) -> Next {
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
        self.leaving = Some(tokio::spawn(
            async move { store.leave(&key, &holder).await },
        ));
        let deadline = self.current_deadline();
        let released = holds.released();
        tokio::pin!(released);
        loop {
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                _ = &mut released => return true,
                _ = self.shared.clock.sleep_until(deadline) => return false,
                cmd = self.commands.recv(), if self.shutdown_pending.is_none() => match cmd {
                    // Already stepping down: a resign is under way, a
                    // transfer can no longer pick the successor.
                    Some(Command::Resign(reply)) => { let _ = reply.send(Ok(())); }
                    Some(Command::Transfer(_, reply)) => {
                        let _ = reply.send(Err(Error::NotLeader { election: self.config.key.to_string() }));
                    }
                    Some(Command::Shutdown(reply)) => self.shutdown_pending = Some(reply),
                    None => self.shutdown_pending = Some(oneshot::channel().0),
                },
            }
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

    /// What follows a step-down: a shutdown that came meanwhile ends the
    /// campaign, otherwise `next`.
    fn after_step_down(&mut self, next: Next) -> Next {
        match self.shutdown_pending.take() {
            Some(reply) => {
                let _ = reply.send(Ok(()));
                Next::Stop
            }
            None => next,
        }
    }

    /// Runs a follower's store call, bounded by the retry budget, while still
    /// answering commands: a hung store must not make shutdown hang too.
    async fn follower_call<T>(
        &mut self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<Result<T>, Next> {
        let budget = self.timing().call_budget;
        let until = self.now() + budget;
        let sleep = self.shared.clock.sleep_until(until);
        tokio::pin!(call);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                r = &mut call => return Ok(r),
                _ = &mut sleep => return Ok(Err(Error::Timeout { what, after: budget })),
                cmd = self.commands.recv() => if let Some(reply) = self.follower_command(cmd) {
                    let _ = reply.send(Ok(()));
                    return Err(Next::Stop);
                },
            }
        }
    }

    fn claim(&self) -> Claim {
        Claim {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            metadata: self.config.metadata.clone(),
            ttl: self.timing().ttl,
        }
    }

    /// How long to wait before looking again at a lease held by someone else:
    /// until it would expire by the store's clock. Where the store pushes
    /// changes, nothing sooner: a release or hand-over wakes us, so an idle
    /// follower reads once per lease lifetime instead of every poll period
    /// (12 reads a second). Without push, a poll period, to see a release.
    fn wait_for(&self, rec: &LeaseRecord) -> Duration {
        let until_expiry = rec.remaining + self.timing().settle;
        match self.own_poll() {
            None => until_expiry,
            Some(poll) => poll.min(until_expiry),
        }
    }

    /// How soon a follower must look for itself, as the store's push stands:
    /// never while pushes arrive (`None`); a tenth of a TTL while the push
    /// channel is down, so a release is still seen long before the expiry;
    /// the poll period where the store cannot push.
    fn own_poll(&self) -> Option<Duration> {
        if self.changes.is_none() {
            Some(jittered(self.timing().poll_period))
        } else if self.store.push_health().is_down() {
            Some(jittered(self.timing().push_down_poll))
        } else {
            None
        }
    }

    /// The push channel's activity count, if the store ends expired leases
    /// itself and pushes that ([`Capabilities::push_expiry`]), can count
    /// what its channel delivers, and the channel is not known to be down;
    /// `None`: read at the lease's expiry (or every `push_down_poll` while
    /// the channel is down, see [`Self::wait_for`]).
    ///
    /// [`Capabilities::push_expiry`]: crate::store::Capabilities::push_expiry
    fn push_activity(&self) -> Option<u64> {
        if self.changes.is_none()
            || !self.store.capabilities().push_expiry
            || self.store.push_health().is_down()
        {
            return None;
        }
        self.store.push_activity()
    }

    /// A follower's wait on a held lease where the store pushes its end
    /// (etcd: the lease key is deleted at expiry, and the watch sees it):
    /// no read at the expiry. Every [`Timing::push_check_period`] (a TTL)
    /// it looks at the push channel's activity count: if anything arrived
    /// since `seen` (a healthy leader's renewals do, three times a TTL), the
    /// channel is alive and it waits on; if nothing did, the channel may
    /// have broken silently, and it reads. Returns `None` to read now
    /// (pushed, or silent), or the transition a command demands.
    async fn await_push(&mut self, mut seen: u64) -> Option<Next> {
        loop {
            let until = self.now() + self.timing().push_check_period;
            if let Some(next) = self.idle_until(until).await {
                return Some(next);
            }
            // Pushed, or the channel is down (its outage wakes followers
            // too): read, and poll while it stays down.
            if self.woken_by_push || self.store.push_health().is_down() {
                return None;
            }
            match self.store.push_activity() {
                Some(now) if now != seen => seen = now,
                _ => {
                    tracing::debug!(election = %self.config.key, "no push for a TTL: reading the lease");
                    return None;
                }
            }
        }
    }

    fn publish_record(&self, rec: Option<&LeaseRecord>) {
        let state = match rec {
            Some(r) if r.is_held() => State::Following {
                leader: r.holder.clone().unwrap_or_default(),
                term: r.term,
            },
            _ => State::NoLeader,
        };
        self.shared.publish(state);
    }

    async fn follow(&mut self, hold_off: Option<Duration>) -> Next {
        loop {
            // A timed read carries this follower's heartbeat: an idle
            // follower reads once per lease lifetime and makes no other request.
            let store = self.store.clone();
            let key = self.config.key.clone();
            // Not before the membership task registered us: a heartbeat can be
            // slow (etcd's: a process-lease round, a read and a transaction),
            // and electors starting together must not wait for theirs to read
            // and acquire.
            // And not more than twice a TTL: a follower whose push is down
            // reads every TTL/10, and each read was a heartbeat write too.
            let age = self.shared.heartbeat_age();
            let pushed = std::mem::take(&mut self.woken_by_push);
            let for_us = std::mem::take(&mut self.pushed_for_us);
            let fused = !pushed
                && !self.shared.membership_paused()
                && age != Duration::MAX
                && age >= self.timing().ttl / 2;
            let member = fused.then(|| self.member());
            let member_ttl = self.timing().member_ttl;
            // Counted before the read: anything the push channel delivers
            // after this shows it alive.
            let activity = self.push_activity();
            let sent = self.now();
            // A push naming this election is most often a release: the member
            // list (who succeeds) is read with the lease, so the designated
            // successor's acquisition goes one round trip sooner. An idle
            // follower gets no such pushes, so this costs a read per change,
            // not per TTL.
            let (read, members) = match self
                .follower_call("read", async move {
                    match (member, for_us) {
                        (Some(m), _) => Ok((store.heartbeat_and_read(&m, member_ttl).await?, None)),
                        (None, true) => store.read_with_members(&key).await,
                        (None, false) => Ok((store.read(&key).await?, None)),
                    }
                })
                .await
            {
                Ok(Ok((read, members))) => {
                    if fused {
                        self.shared.heartbeat_sent(sent);
                    }
                    (Ok(read), members)
                }
                Ok(Err(e)) => (Err(e), None),
                Err(next) => return next,
            };
            let wait = match read {
                Err(e) => self.follower_failed("reading the lease", &e),
                Ok(rec) => {
                    self.store_ok();
                    self.publish_record(rec.as_ref());
                    match rec {
                        // Not while work of an earlier tenure still holds it
                        // (see `HandoverHold`): the lease then expires.
                        Some(r)
                            if r.is_held()
                                && r.holder.as_deref() == Some(self.config.holder.as_str())
                                && self.shared.holds.is_empty() =>
                        {
                            // A live lease of ours from an earlier tenure (a renewal
                            // that landed after we gave up, or an acquire whose
                            // answer we lost). Nobody acts on it; free it for
                            // everyone, and back off if the store refuses.
                            match self.release_stale(r.term).await {
                                Err(next) => return next,
                                Ok(true) => Duration::ZERO,
                                Ok(false) => jittered(self.timing().retry_period),
                            }
                        }
                        Some(r) if r.is_held() => match activity {
                            // The store ends the lease itself and pushes
                            // that: wait for the push, not for the expiry.
                            Some(seen) => match self.await_push(seen).await {
                                Some(next) => return next,
                                None => continue,
                            },
                            None => self.wait_for(&r),
                        },
                        rec => match hold_off
                            .map(|h| h.saturating_sub(self.now()))
                            .filter(|w| !w.is_zero())
                        {
                            Some(w) => w,
                            None => match self.succession_wait(rec.as_ref(), members).await {
                                Err(next) => return next,
                                Ok(Some(wait)) => wait,
                                Ok(None) => match self.try_acquire().await {
                                    Ok(next) => return next,
                                    Err(wait) => wait,
                                },
                            },
                        },
                    }
                }
            };
            let until = self.now() + wait;
            if let Some(next) = self.idle_until(until).await {
                return next;
            }
        }
    }

    /// Whether to try for a free lease now (`None`) or wait (`Some`): during a
    /// transfer window only the target tries; otherwise the designated
    /// successor (highest priority, then longest-serving live member) tries at
    /// once and the others only after a short grace, so one write wins a
    /// failover instead of N racing.
    /// `members`: the member list if it was read beside the lease.
    async fn succession_wait(
        &mut self,
        rec: Option<&LeaseRecord>,
        members: Option<Vec<MemberRecord>>,
    ) -> Result<Option<Duration>, Next> {
        let Some(r) = rec else { return Ok(None) };
        let me = self.config.identity.as_str();
        if let Some(to) = r.transfer_target() {
            if to == me {
                return Ok(None);
            }
            // Only the target may acquire until the window ends; its
            // acquisition is pushed where the store pushes changes.
            let left = crate::store::remaining_from_us(r.handover_until_us, r.read_at_us);
            let left = match self.own_poll() {
                None => left,
                Some(poll) => left.min(poll),
            };
            // Where acquisitions are not pushed (MySQL: the named locks
            // ring only when a leader lets go), look again soon: a
            // follower that slept through the window missed the new
            // leader's release and, as the next transfer's target, left
            // the election leaderless for the rest of its old window
            // (conformance: transfers_in_a_row_reach_their_targets).
            let left = if self.store.capabilities().push_acquisitions {
                left
            } else {
                left.min(jittered(self.timing().push_down_poll))
            };
            return Ok(Some(left + self.timing().settle));
        }
        let store = self.store.clone();
        let key = self.config.key.clone();
        let read = match members {
            Some(m) => Ok(m),
            None => {
                self.follower_call("members", async move { store.members(&key).await })
                    .await?
            }
        };
        let members = match read {
            Ok(m) => {
                crate::telemetry::members(&self.config.key, &m);
                m
            }
            // Without the member list, wait the grace as if another member
            // were the successor: the one whose read worked goes first. (Trying
            // at once made every follower try when reads failed, on an etcd
            // cluster with a dead member.) Safety never depends on succession,
            // only the number of writes does; the grace is short.
            Err(_) => return Ok(self.succession_grace_left(r)),
        };
        // Skip the holder whose lease just expired or who just stepped down,
        // and members not heard from lately (`MemberRecord::is_fresh`): a
        // crashed member stays registered for a while, but must not hold
        // everyone back for the grace.
        let successor = members.iter().find(|m| {
            m.is_fresh(r.read_at_us, self.timing().ttl)
                && Some(m.holder.as_str()) != r.holder.as_deref()
                && Some(m.holder.as_str()) != r.previous_holder.as_deref()
        });
        tracing::debug!(election = %self.config.key, term = r.term, successor = successor.map(|s| s.holder.as_str()), "lease free");
        match successor {
            None => Ok(None),
            Some(s) if s.holder == self.config.holder => Ok(None),
            Some(_) => Ok(self.succession_grace_left(r)),
        }
    }

    /// How long a follower that is not the designated successor still waits
    /// before it tries, for a lease that `r` shows free; `None`: try now.
    ///
    /// The grace counts from when this follower first saw the lease free, not
    /// from the expiry the record states: etcd deletes an expired key up to
    /// ~0.5 s after the estimated expiry, so by the stated time every
    /// follower's grace had passed when the key went, and all tried at once.
    fn succession_grace_left(&mut self, r: &LeaseRecord) -> Option<Duration> {
        let now = self.now();
        let since = match self.free_since {
            Some((term, since)) if term == r.term => since,
            _ => {
                self.free_since = Some((r.term, now));
                now
            }
        };
        let free_for = now.saturating_sub(since);
        // With push the successor hears of the change in milliseconds;
        // without it, within a poll period.
        let grace = if self.changes.is_some() {
            self.timing().push_succession_grace
        } else {
            self.timing().succession_grace
        };
        (free_for < grace).then(|| {
            (grace - free_for).min(jittered(self.timing().poll_period)) + self.timing().settle
        })
    }

    /// One acquisition attempt: `Ok` to lead, `Err(wait)` to keep following.
    async fn try_acquire(&mut self) -> Result<Next, Duration> {
        let t0 = self.now();
        let claim = self.claim();
        let store = self.store.clone();
        // Bounded by ttl/2: an answer later than that could not make us leader
        // for long anyway, and a stale acquisition is released on the next read.
        let (attempt, stopping) = self
            .finishing_call("acquire", async move { store.try_acquire(&claim).await })
            .await;
        if let Some(reply) = stopping {
            // Shut down while the acquisition was in flight. It was let finish,
            // so whatever it took is known: give it back, or the successor
            // would wait out a whole TTL for a leader that is gone.
            match attempt {
                Some(Ok(Acquire::Acquired(rec))) => {
                    let tenure = Tenure {
                        key: self.config.key.clone(),
                        holder: self.config.holder.clone(),
                        term: rec.term,
                    };
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
            return Ok(Next::Stop);
        }
        match attempt {
            None => Err(Duration::ZERO),
            Some(Err(e)) => Err(self.follower_failed("acquiring the lease", &e)),
            Some(Ok(Acquire::Held(rec))) => {
                self.store_ok();
                self.publish_record(rec.as_ref());
                Err(rec
                    .filter(|r| r.is_held())
                    .map(|r| self.wait_for(&r))
                    .unwrap_or_else(|| jittered(self.timing().refused_free_retry)))
            }
            Some(Ok(Acquire::Acquired(rec))) => {
                self.store_ok();
                let now = self.now();
                self.note_rtt(now.saturating_sub(t0));
                let deadline = self.timing().deadline(t0, self.rtt);
                let tenure = Tenure {
                    key: self.config.key.clone(),
                    holder: self.config.holder.clone(),
                    term: rec.term,
                };
                if now >= deadline {
                    // The answer came too late to act on; give it back.
                    return match self.release_stale(rec.term).await {
                        Err(next) => Ok(next),
                        Ok(_) => Err(jittered(self.timing().retry_period)),
                    };
                }
                self.shared.lead(rec.term, deadline);
                tracing::info!(election = %self.config.key, term = rec.term, holder = %self.config.holder, "became leader");
                // Not when the expired lease was our own (cut off for a TTL,
                // now back): a leader sends no heartbeats, so leaving would
                // drop us from the member list until the next reap.
                let dead = rec
                    .previous_holder
                    .clone()
                    .filter(|dead| *dead != self.config.holder);
                if let Some(dead) = dead {
                    // Its lease expired: it is gone or cut off. Drop its
                    // registration now rather than when it lapses, so nobody
                    // waits for it as a successor next time.
                    let store = self.store.clone();
                    let key = self.config.key.clone();
                    let timeout = self.timing().leave_timeout;
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(timeout, store.leave(&key, &dead)).await;
                    });
                }
                Ok(Next::Lead { tenure, deadline })
            }
        }
    }

    /// Runs a follower's store call, bounded by the retry budget, answering
    /// resign and transfer requests meanwhile. Unlike [`Self::follower_call`], a
    /// shutdown does not drop the call (it may be a write that commits
    /// anyway): it is let finish, and the shutdown's reply is handed back.
    /// `None`: no answer within the budget.
    async fn finishing_call<T>(
        &mut self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> (Option<Result<T>>, Option<oneshot::Sender<Result<()>>>) {
        let budget = self.timing().call_budget;
        let sleep = self.shared.clock.sleep_until(self.now() + budget);
        tokio::pin!(call);
        tokio::pin!(sleep);
        let mut stopping = None;
        loop {
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                r = &mut call => return (Some(r), stopping),
                _ = &mut sleep => {
                    let timeout = Error::Timeout { what, after: budget };
                    return (stopping.is_none().then_some(Err(timeout)), stopping);
                }
                cmd = self.commands.recv(), if stopping.is_none() => {
                    stopping = self.follower_command(cmd);
                }
            }
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
                let tenure = Tenure {
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

    /// Returns whether the store took the release.
    async fn release_stale(&mut self, term: u64) -> Result<bool, Next> {
        if !self.shared.holds.is_empty() {
            // Work of this process may still run: a successor must not
            // start before it is gone, so the lease is left to expire.
            return Ok(false);
        }
        let tenure = Tenure {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            term,
        };
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

    /// After resigning or handing over: stay out of the race (and out of the
    /// member list, so nobody waits for us as the designated successor) for a
    /// moment, so another candidate takes over.
    async fn hold_off(&mut self) -> Next {
        let hold_off = self.now() + self.timing().hold_off;
        // Stepping down already left the member list; the heartbeat task
        // rejoins when the hold-off ends.
        self.shared.pause_membership(hold_off);
        self.left = false;
        Next::Follow {
            hold_off: Some(hold_off),
        }
    }

    async fn lead(&mut self, tenure: Tenure, mut deadline: Duration) -> Next {
        let led_since = self.now();
        let mut next_renew = self.timing().next_renewal(self.now());
        let mut renew_failures = 0u32;
        loop {
            // A hand-over request makes the next renewal fail, so the leader
            // always notices it within a renew period; where the store pushes
            // changes, the request wakes it at once. No polling reads: a
            // process may lead a thousand elections.
            let wake = next_renew.min(deadline);
            let key = self.config.key.clone();
            let mut pushed = false;
            let command = {
                let sleep = self.shared.clock.sleep_until(wake);
                tokio::select! {
                    // Listed order when several are ready (not tokio\'s random pick),
                    // so a simulation seed replays exactly; either order is handled.
                    biased;
                    _ = sleep => None,
                    // A lagged receiver is not a reason to read: in a process
                    // leading a thousand elections, a burst of notifications
                    // made every leader lag and read at once, the reads took
                    // the pool from the renewals, and leaders missed their
                    // deadlines. A request lost that way fails the next
                    // renewal, as without push.
                    woken = changed(&mut self.changes, Some(&key)) => { pushed = woken != Woken::Lagged; None },
                    cmd = self.commands.recv() => Some(cmd),
                }
            };
            if let Some(cmd) = command {
                return self.command_while_leading(cmd, &tenure).await;
            }
            if self.now() >= deadline {
                return self
                    .lost(&tenure, "deadline passed without a successful renewal")
                    .await;
            }
            if self.now() < next_renew {
                if !pushed {
                    continue;
                }
                // The read races the deadline and commands: a hung store must
                // delay neither stepping down nor shutdown.
                let key = tenure.key.clone();
                let store = self.store.clone();
                let rec = tokio::select! {
                    // Listed order when several are ready (not tokio\'s random pick),
                    // so a simulation seed replays exactly; either order is handled.
                    biased;
                    r = tokio::time::timeout(self.timing().leader_read_timeout, store.read(&key)) => r.ok().and_then(|r| r.ok()).flatten(),
                    _ = self.shared.clock.sleep_until(deadline) => None,
                    cmd = self.commands.recv() => return self.command_while_leading(cmd, &tenure).await,
                };
                if rec.is_none() {
                    // The read failed or timed out: the push may have been a
                    // hand-over request, and it is spent. Renew soon instead
                    // of at the next grid instant: a pending request makes
                    // that renewal fail, and the failure path acts on it.
                    next_renew = next_renew.min(self.now() + self.timing().pushed_read_retry);
                }
                if let Some(next) = self.act_on_handover_request(&tenure, rec).await {
                    return next;
                }
                continue;
            }
            let t0 = self.now();
            let renewed = tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                r = self.store.renew(&tenure, self.timing().ttl) => Some(r),
                _ = self.shared.clock.sleep_until(deadline) => None,
                // A command while the store is slow: act on it now, dropping
                // the renewal, instead of waiting up to the deadline.
                cmd = self.commands.recv() => return self.command_while_leading(cmd, &tenure).await,
            };
            match renewed {
                None => {
                    // A renewal that never answered is a store error too.
                    crate::telemetry::store_error("renewing the lease");
                    return self
                        .lost(&tenure, "the store did not answer before the deadline")
                        .await;
                }
                Some(Ok(true)) if self.now() >= deadline => {
                    // The answer came at the deadline: our belief has ended
                    // (lost() may already have fired), and a tenure never
                    // resumes once given up. Step down and free the lease.
                    return self
                        .lost(&tenure, "the renewal answered only at the deadline")
                        .await;
                }
                Some(Ok(true)) => {
                    self.store_ok();
                    renew_failures = 0;
                    self.note_rtt(self.now().saturating_sub(t0));
                    crate::telemetry::renewed(&self.config.key, self.now().saturating_sub(t0));
                    deadline = self.timing().deadline(t0, self.rtt);
                    self.shared.lead(tenure.term, deadline);
                    next_renew = self.timing().next_renewal(t0);
                    // Counted from the first time this candidate led: a
                    // thousand electors that just acquired do not all reap at
                    // their first renewal.
                    let reaped_at = *self.reaped_at.get_or_insert(led_since);
                    if t0.saturating_sub(reaped_at) >= self.timing().reap_period {
                        // Dead members are reaped by the leader, rarely (readers
                        // skip lapsed ones anyway): bookkeeping, so off the
                        // leader's path (a slow reap must not delay a shutdown
                        // or a resign).
                        self.reaped_at = Some(t0);
                        tokio::spawn(reap(
                            self.store.clone(),
                            self.shared.clone(),
                            self.member(),
                            self.config.timing.clone(),
                        ));
                    }
                    if let Some(check) = self.preemption_check(led_since) {
                        // The check reads the store: it races commands and the
                        // deadline like the renewal does.
                        let target = tokio::select! {
                            // Listed order when several are ready (not tokio\'s random pick),
                            // so a simulation seed replays exactly; either order is handled.
                            biased;
                            t = check => t,
                            cmd = self.commands.recv() => return self.command_while_leading(cmd, &tenure).await,
                            _ = self.shared.clock.sleep_until(deadline) => None,
                        };
                        if let Some(identity) = target {
                            return self.preempt(&tenure, identity).await;
                        }
                    }
                }
                Some(Ok(false)) => {
                    self.store_ok();
                    // Most often a hand-over request from another process
                    // (`tenure resign`): the lease is still ours, and the
                    // work stops before it is handed over. The read races
                    // the deadline, which still ends the tenure.
                    let read = tokio::time::timeout(
                        self.timing().leader_read_timeout,
                        self.store.read(&tenure.key),
                    );
                    let rec = tokio::select! {
                        // Listed order when several are ready (not tokio\'s random pick),
                        // so a simulation seed replays exactly; either order is handled.
                        biased;
                        r = read => r.ok().and_then(|r| r.ok()).flatten(),
                        _ = self.shared.clock.sleep_until(deadline) => None,
                    };
                    if let Some(next) = self.act_on_handover_request(&tenure, rec).await {
                        return next;
                    }
                    self.shared.end();
                    tracing::warn!(election = %self.config.key, term = tenure.term, "leadership lost: the store no longer has our lease (expired or taken over)");
                    return Next::Follow { hold_off: None };
                }
                Some(Err(e)) => {
                    self.store_failed("renewing the lease", &e);
                    renew_failures += 1;
                    // The first failure is often a pooled connection that died
                    // with a server restart: the next one is likely fine, so
                    // retry at once; after that, back off.
                    let wait = if renew_failures == 1 {
                        self.timing().first_renew_retry
                    } else {
                        jittered(self.timing().retry_period)
                    };
                    next_renew = self.now() + wait;
                }
            }
        }
    }

    /// If someone asked (through the store) for our lease to be handed over,
    /// step down and hand it over as asked.
    async fn act_on_handover_request(
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

    /// Preemption: once this tenure has lasted `preempt_after`, a check (to
    /// run, raced against commands) for a live member of higher priority with
    /// a fresh heartbeat; `None` when preemption is off or not due yet.
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

    /// Hands the lease to `identity`, a member of higher priority.
    async fn preempt(&mut self, tenure: &Tenure, identity: String) -> Next {
        tracing::info!(election = %self.config.key, term = tenure.term, to = %identity, "preempted by a member of higher priority");
        let window = self.timing().handover_window;
        let to = Handover::To(identity);
        self.step_down_handover(tenure, to, window, HandoverReason::Preempt)
            .await
            .0
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
        let result = self.hand_over_now(tenure, to, window, reason).await;
        let next = self.hold_off().await;
        (self.after_step_down(next), result)
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
        let handed =
            tokio::time::timeout(timeout, self.store.hand_over(tenure, &to, window, reason)).await;
        self.leave_after_handing_over().await;
        match handed {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.store_failed("handing the lease over", &e);
                Err(e)
            }
            Err(_) => Err(Error::Timeout {
                what: "hand-over",
                after: timeout,
            }),
        }
    }

    /// Steps down after the deadline passed and frees the old lease if we can.
    async fn lost(&mut self, tenure: &Tenure, why: &str) -> Next {
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

    /// Leaves the member list after the lease was freed (followers already skip
    /// the previous holder as successor). Membership stays paused for a moment
    /// (see `hold_off`), or for good on shutdown.
    async fn leave_after_handing_over(&mut self) {
        self.shared
            .pause_membership(self.now() + self.timing().hold_off);
        let leaving = self.leaving.take();
        let (store, key, holder) = (
            self.store.clone(),
            self.config.key.clone(),
            self.config.holder.clone(),
        );
        let leave = async move {
            match leaving {
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
        self.left = true;
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
        let released = tokio::time::timeout(timeout, self.store.release(tenure)).await;
        self.leave_after_handing_over().await;
        match released {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.store_failed("releasing the lease", &e);
                Err(e)
            }
            Err(_) => Err(Error::Timeout {
                what: "release",
                after: timeout,
            }),
        }
    }
}

/// Ends leadership and closes the elector when the campaign task ends, however.
struct Closed(Arc<Shared>);

impl Drop for Closed {
    fn drop(&mut self) {
        self.0.end();
        self.0
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.current.send_replace(None);
        self.0.publish(State::NoLeader);
    }
}

/// The leader's garbage collection of lapsed registrations (see
/// `Timing::reap_period`). Where the lease vouches for its holder
/// (`Capabilities::lease_vouches_for_holder`), the leader's own registration
/// is not refreshed while it leads and has lapsed by now: it is refreshed
/// first, so the reap does not delete it, and if that fails nothing is
/// reaped (the garbage waits for the next reap).
async fn reap(store: DynStore, shared: Arc<Shared>, member: Member, timing: Timing) {
    if store.capabilities().lease_vouches_for_holder {
        if shared.membership_paused() {
            return;
        }
        let sent = shared.clock.now();
        let heartbeat = store.heartbeat(&member, timing.member_ttl);
        match tokio::time::timeout(timing.heartbeat_timeout, heartbeat).await {
            Ok(Ok(())) => shared.heartbeat_sent(sent),
            _ => return,
        }
    }
    let _ = tokio::time::timeout(timing.reap_timeout, store.reap(&member.key)).await;
}

/// Keeps this candidate registered when nothing else does: a follower's
/// reads carry its heartbeat, so this task mostly registers a new candidate
/// and refreshes the leader's registration on stores whose lease does not
/// vouch for its holder (etcd, ZooKeeper: every 1.5 TTLs). Elsewhere a
/// leader sends no heartbeat while it leads: holding the lease proves it
/// alive, and member readers count it live from its renewals
/// (`Capabilities::lease_vouches_for_holder`), so an idle leader costs its
/// renewals alone. None while membership is paused after a resignation.
async fn membership(store: DynStore, shared: Arc<Shared>, member: Member, timing: Timing) {
    let vouched = store.capabilities().lease_vouches_for_holder;
    loop {
        // The first registration goes at once; later ones when due. A
        // leader that registered skips them (see above); once it stops
        // leading (`is_leader` is false from its local deadline on) its
        // registration is long due, and the next tick refreshes it.
        let age = shared.heartbeat_age();
        let leading = vouched && age != Duration::MAX && shared.is_leader();
        if !shared.membership_paused() && !leading && timing.heartbeat_due(age) {
            let sent = shared.clock.now();
            let heartbeat = store.heartbeat(&member, timing.member_ttl);
            match tokio::time::timeout(timing.heartbeat_timeout, heartbeat).await {
                Ok(Ok(())) => shared.heartbeat_sent(sent),
                Ok(Err(e)) => tracing::debug!(election = %member.key, "heartbeat failed: {e}"),
                Err(_) => tracing::debug!(election = %member.key, "heartbeat timed out"),
            }
        }
        // On a grid: the due heartbeats of all this process's elections go
        // at the same instants, and the store batches them.
        let next = timing.next_heartbeat(shared.clock.now());
        let paused_until = Duration::from_nanos(
            shared
                .membership_paused_until
                .load(std::sync::atomic::Ordering::Acquire),
        );
        // Wake when the pause ends, to rejoin at once; and when a pause is
        // set while asleep, to learn when it ends (a resigned member rejoined
        // at the next tick, up to TTL/2 after its 250 ms hold-off:
        // `tests/succession.rs::a_resigned_member_rejoins_when_its_hold_off_ends`).
        let wake = if paused_until > shared.clock.now() {
            paused_until.min(next)
        } else {
            next
        };
        tokio::select! {
            // Listed order, so a simulation seed replays exactly.
            biased;
            _ = shared.clock.sleep_until(wake) => {}
            _ = shared.membership_pause_set.notified() => {}
        }
    }
}
