//! Following: the phase of a candidate that does not lead.
//!
//! A follower sleeps until the lease's remaining time (as the store measured
//! it) runs out, or a short poll period to notice a release, whichever is
//! sooner; a pushed change ends the wait early. Its timed reads carry its
//! member heartbeat, so an idle follower makes one request per lease
//! lifetime. It writes only when the lease is free, and then in turn: during
//! a transfer window only the target tries, otherwise the designated
//! successor first and the others after a short grace, so one write wins a
//! failover instead of N racing. The attempt itself is in [`super::acquire`].

use std::time::Duration;

use tokio::sync::oneshot;

use super::{jittered, Campaign, Command, Next};
use crate::clock::Sleep;
use crate::error::{Error, Result};
use crate::leadership::State;
use crate::store::{changed, LeaseRecord, LeaseStoreExt, MemberRecord, Woken};

/// What a follower carries from one wait to the next read.
#[derive(Default)]
pub(super) struct FollowerState {
    /// The push that ended the last wait, if one did. The read that follows
    /// is then on a hand-over's path, so it carries no heartbeat (a
    /// heartbeat can be slower than a read: etcd's are three requests); and
    /// a push that named this election ([`Woken::Notified`], not a wake-up
    /// of everyone after the channel opened or failed, where most likely
    /// nothing changed) and that this follower answers at once reads the
    /// member list beside the lease.
    pushed: Option<Woken>,
    /// The term of the last lease seen free, and when (local clock) this
    /// follower first saw it free: the succession grace counts from then.
    free_since: Option<(u64, Duration)>,
    /// Where the store pushes: this follower's last ranking.
    ranked: Option<Rank>,
    /// Whether this follower is among the first in line to succeed: where
    /// followers are frugal it listens where the store pushes, and where
    /// nothing pushes it reads more often than the others; where the push
    /// channel is shared it answers pushes at once.
    pub(super) in_line: bool,
}

/// Where the store pushes, a follower reads the member list again (at its
/// next read) after this many TTLs to learn whether it became the
/// designated successor (one that crashed stops being fresh after two
/// TTLs); sooner when the lease changed hands. Two followers listen, so
/// one of them dying leaves the other; only when both die does a release
/// wait for this re-ranking (or the lease's expiry). Each re-ranking is a
/// statement per follower: at 12 TTLs, 1/120 per second at a 10 s TTL,
/// which keeps an idle follower under a tenth of a statement per second.
const RANK_REFRESH_TTLS: u32 = 12;

/// How soon a follower that could not rank itself, as it is not listed
/// (registering is one request, just after it starts or its hold-off
/// ends), reads again.
const UNREGISTERED_RETRY: Duration = Duration::from_millis(100);

/// Where a subscription holds a connection, this many followers listen:
/// the designated successor, and the next in line, which becomes the
/// successor the moment the successor takes over (or is the successor
/// while the first is gone but not yet stale), long before its next read.
const LISTENING_FOLLOWERS: usize = 2;

/// A follower's place among the live members, as it last read them.
#[derive(Clone, Copy)]
struct Rank {
    /// The term of the lease it ranked itself against, or since counted
    /// in `place` (see [`Rank::after`]).
    term: u64,
    /// When it read the member list (local clock).
    at: Duration,
    /// Its place among the possible successors (0: the designated
    /// successor); `None` when it was not among them.
    place: Option<usize>,
}

impl Rank {
    /// Whether a follower ranked as `self` must read the member list again
    /// to know its place under a lease of `term`; if not, the rank to keep.
    ///
    /// An acquisition moves every follower behind the new leader up by one
    /// place at most, and nothing but an acquisition or a member's leaving
    /// or dying moves one up at all (joiners queue behind or push back).
    /// So a follower far down the list need not read the whole list after
    /// each hand-over to learn that it is still not in line: it counts the
    /// acquisitions, and reads once it may have reached the first
    /// [`LISTENING_FOLLOWERS`]. A fleet of N followers thus reads a few
    /// member lists per hand-over, not N lists of N members (at 500
    /// replicas on one etcd, 250,000 records in the seconds after each
    /// release). Departures and deaths are what the periodic re-ranking
    /// ([`RANK_REFRESH_TTLS`]) is for. Where terms skip numbers (etcd), a
    /// change counts as one acquisition: every acquisition is pushed and
    /// answered, so few go uncounted, and one that does leaves the follower
    /// out of line (answering pushes a grace late) until that re-ranking.
    fn after(self, term: u64, sparse_terms: bool) -> Option<Rank> {
        if term == self.term {
            return Some(self);
        }
        let acquisitions = term.checked_sub(self.term)?;
        let moved = match sparse_terms {
            true => 1,
            false => usize::try_from(acquisitions).ok()?,
        };
        let place = self.place?.checked_sub(moved)?;
        (place >= LISTENING_FOLLOWERS).then_some(Rank {
            term,
            place: Some(place),
            ..self
        })
    }
}

/// What ranking a follower among the live members, under the lease it
/// read, found ([`Campaign::rank`]).
enum Ranked {
    /// Nothing that needs a read now.
    Same,
    /// It became the designated successor and subscribed.
    Listening,
    /// It is not listed (not registered yet, or out of the list for a
    /// moment after a step-down), so it cannot be ranked.
    Unregistered,
}

/// One read of the lease by a follower.
struct LeaseRead {
    lease: Result<Option<LeaseRecord>>,
    /// The member list, when it was read beside the lease.
    members: Option<Vec<MemberRecord>>,
    /// The push channel's activity count before the read, where the store
    /// pushes the end of a lease (see [`Campaign::push_activity`]).
    activity: Option<u64>,
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
    /// Follows until the lease is acquired (or the campaign stops). No
    /// acquisition before `hold_off` (local clock), after a step-down.
    pub(super) async fn follow(&mut self, hold_off: Option<Duration>) -> Next {
        // A rank from before this process led says nothing of its place now.
        self.follower.ranked = None;
        loop {
            let read = match self.read_lease().await {
                Ok(read) => read,
                Err(next) => return next,
            };
            let wait = match read.lease {
                Err(e) => self.follower_failed("reading the lease", &e),
                Ok(rec) => {
                    self.store_ok();
                    self.publish_record(rec.as_ref());
                    match self
                        .after_read(rec, read.members, read.activity, hold_off)
                        .await
                    {
                        Ok(Some(wait)) => wait,
                        Ok(None) => continue,
                        Err(next) => return next,
                    }
                }
            };
            let until = self.now() + wait;
            if let Some(next) = self.idle_until(until).await {
                return next;
            }
        }
    }

    /// Reads the lease, with this follower's heartbeat when one is due, or
    /// with the member list after a push naming this election that it
    /// answers at once. `Err`: the phase a command demands meanwhile.
    async fn read_lease(&mut self) -> Result<LeaseRead, Next> {
        // A timed read carries this follower's heartbeat: an idle
        // follower reads once per lease lifetime and makes no other request.
        let store = self.store.clone();
        let key = self.config.key.clone();
        // Not before the membership task registered us: a heartbeat can be
        // slow (etcd's: a process-lease round, a read and a transaction),
        // and electors starting together must not wait for theirs to read
        // and acquire.
        // And not more than twice a TTL: a follower whose push is down
        // reads every TTL/10, and each read would be a heartbeat write too.
        let age = self.shared.heartbeat_age();
        let push = self.follower.pushed.take();
        let pushed = push.is_some();
        // Only for a follower that answers pushes at once: the member list
        // matters to the first in line, and N followers reading it after
        // every release read N lists of N members.
        let for_us = push == Some(Woken::Notified) && self.push_answer_delay().is_none();
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
        let read = self
            .follower_call("read", async move {
                match (member, for_us) {
                    (Some(m), _) => Ok((store.heartbeat_and_read(&m, member_ttl).await?, None)),
                    (None, true) => store.read_with_members(&key).await,
                    (None, false) => Ok((store.read(&key).await?, None)),
                }
            })
            .await?;
        let (lease, members) = match read {
            Ok((read, members)) => {
                if fused {
                    self.shared.heartbeat_sent(sent);
                }
                (Ok(read), members)
            }
            Err(e) => (Err(e), None),
        };
        Ok(LeaseRead {
            lease,
            members,
            activity,
        })
    }

    /// What to do about a lease just read: wait this long before the next
    /// read (`Ok(Some)`), read again at once (`Ok(None)`: a pushed change, or
    /// a silent push channel), or move on to the phase in `Err`.
    async fn after_read(
        &mut self,
        rec: Option<LeaseRecord>,
        members: Option<Vec<MemberRecord>>,
        activity: Option<u64>,
        hold_off: Option<Duration>,
    ) -> Result<Option<Duration>, Next> {
        // Where a subscription holds a connection: listen if first in line;
        // where the push channel is shared, answer pushes at once if first
        // in line (`push_answer_delay`). Not ranked yet (not registered
        // yet): read again soon while the lease is held or in a transfer
        // window (when it is free this follower reads the member list to
        // succeed anyway).
        let mut unranked = false;
        if let Some(r) = rec
            .as_ref()
            .filter(|_| self.frugal || self.changes.is_some())
        {
            let waits = r.is_held() || r.transfer_target().is_some();
            match self.rank(r, members.as_deref()).await? {
                // Read again now: the store arms a wake-up for what a read
                // shows only while something subscribes (MySQL's wait on
                // the leader's lock).
                Ranked::Listening if waits => return Ok(None),
                Ranked::Unregistered if waits => unranked = true,
                _ => {}
            }
        }
        let wait = match rec {
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
                match self.release_stale(r.term).await? {
                    true => Duration::ZERO,
                    false => jittered(self.timing().retry_period),
                }
            }
            Some(r) if r.is_held() => match activity {
                // The store ends the lease itself and pushes
                // that: wait for the push, not for the expiry (once ranked:
                // until then, read again soon).
                Some(seen) if !unranked => match self.await_push(seen).await {
                    Some(next) => return Err(next),
                    None => return Ok(None),
                },
                _ => self.wait_for(&r),
            },
            rec => match hold_off
                .map(|h| h.saturating_sub(self.now()))
                .filter(|w| !w.is_zero())
            {
                Some(w) => w,
                // Another slot of this process's semaphore is held: no
                // acquisition (the wait ends early when the gate frees).
                None if self.shared.stands_aside() => jittered(self.timing().retry_period),
                None => match self.succession_wait(rec.as_ref(), members).await? {
                    Some(wait) => wait,
                    None => self.try_acquire().await?,
                },
            },
        };
        Ok(Some(match unranked {
            true => wait.min(jittered(UNREGISTERED_RETRY)),
            false => wait,
        }))
    }

    /// How long to wait after a failed follower call: a corrupt lease
    /// ([`Error::Corrupt`]) stays corrupt until someone repairs it, so it is
    /// logged once (again only when the error changes) and retried slowly;
    /// anything else is retried at the retry period.
    pub(super) fn follower_failed(&mut self, what: &str, e: &Error) -> Duration {
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

    /// Sleeps until `until`, unless a command arrives first. Returns the
    /// transition a command demands, if any.
    async fn idle_until(&mut self, until: Duration) -> Option<Next> {
        let sleep = self.shared.clock.sleep_until(until);
        tokio::pin!(sleep);
        let key = self.config.key.clone();
        // Standing aside for another slot: look again once the gate frees.
        let seat = self.shared.seat.clone().filter(|s| s.taken_elsewhere());
        // A push answered later (see `push_answer_delay`): further pushes
        // meanwhile are the same wake-up.
        let mut answer: Sleep = Box::pin(std::future::pending());
        let mut answering = false;
        loop {
            tokio::select! {
                biased;
                _ = &mut sleep => return None,
                _ = &mut answer => return None,
                _ = gate_freed(seat.as_ref()) => return None,
                // A pushed change (e.g. a release) ends the wait early.
                woken = changed(&mut self.changes, Some(&key)), if !answering => {
                    tracing::trace!(election = %key, "woken by a push");
                    self.follower.pushed = Some(woken);
                    // No delay: read now (`None`).
                    let delay = self.push_answer_delay()?;
                    answering = true;
                    answer = self.shared.clock.sleep_until(self.now() + delay);
                }
                cmd = self.commands.recv() => if let Some(reply) = self.follower_command(cmd) {
                    let _ = reply.send(Ok(()));
                    return Some(Next::Stop);
                },
            }
        }
    }

    /// How long a follower that is not first in line lets a push wait
    /// before it reads (`None`: at once). Every follower of a store with a
    /// shared push channel (etcd, Redis, ZooKeeper) hears every release;
    /// if all read at once, a fleet of a hundred processes starves the
    /// designated successor of CPU and round trips, and a hand-over takes
    /// seconds. The first in line ([`LISTENING_FOLLOWERS`]) answer at once;
    /// the others after one to two push succession graces, by when the
    /// successor has most often taken over, so they read once and see the
    /// new leader. If it has not, they still try after their grace: the
    /// delay costs a failover whose first two in line are both gone at most
    /// two graces. Where a subscription holds a connection only the first
    /// in line subscribe, so nothing waits here.
    fn push_answer_delay(&self) -> Option<Duration> {
        if self.frugal || self.follower.in_line || self.follower.ranked.is_none() {
            return None;
        }
        let grace = self.timing().push_succession_grace;
        Some(grace + grace.mul_f64(crate::random::factor(0.0, 1.0)))
    }

    /// Answers a command that arrived while following: resign and transfer
    /// fail at once (we do not lead). A shutdown, or the elector dropped, is
    /// handed back for the caller to acknowledge once it has stopped.
    pub(super) fn follower_command(
        &self,
        cmd: Option<Command>,
    ) -> Option<oneshot::Sender<Result<()>>> {
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

    /// Runs a follower's store call, bounded by the retry budget, while still
    /// answering commands: a hung store must not make shutdown hang too.
    pub(super) async fn follower_call<T>(
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

    /// Runs a follower's store call, bounded by the retry budget, answering
    /// resign and transfer requests meanwhile. Unlike [`Self::follower_call`], a
    /// shutdown does not drop the call (it may be a write that commits
    /// anyway): it is let finish, and the shutdown's reply is handed back.
    /// `None`: no answer within the budget.
    pub(super) async fn finishing_call<T>(
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

    /// Where the store pushes: whether this follower is
    /// the designated successor of the held lease `r` (the first fresh
    /// member other than its holder, as [`Self::succession_wait`] finds it
    /// when the lease is free) or next in line ([`LISTENING_FOLLOWERS`]),
    /// and so listens ([`Campaign::listen`]). The
    /// member list (`members`, if it was read beside the lease) is read
    /// when the lease changed hands since the last ranking, and every
    /// [`RANK_REFRESH_TTLS`] TTLs. A failed read changes nothing: the next
    /// read ranks again.
    async fn rank(
        &mut self,
        r: &LeaseRecord,
        members: Option<&[MemberRecord]>,
    ) -> Result<Ranked, Next> {
        // Standing aside for another slot: out of line, not listening.
        if self.shared.stands_aside() {
            self.listen(false);
            return Ok(Ranked::Same);
        }
        let now = self.now();
        let sparse_terms = self.store.capabilities().sparse_terms;
        let kept = self
            .follower
            .ranked
            .filter(|k| now.saturating_sub(k.at) < self.timing().ttl * RANK_REFRESH_TTLS)
            .and_then(|k| k.after(r.term, sparse_terms));
        let due = kept.is_none();
        if let Some(kept) = kept {
            self.follower.ranked = Some(kept);
        }
        let read;
        let members = match members {
            Some(m) => m,
            None if !due => return Ok(Ranked::Same),
            None => {
                let store = self.store.clone();
                let key = self.config.key.clone();
                match self
                    .follower_call("members", async move { store.members(&key).await })
                    .await?
                {
                    Ok(m) => {
                        read = m;
                        &read[..]
                    }
                    Err(_) => return Ok(Ranked::Same),
                }
            }
        };
        if !members.iter().any(|m| m.holder == self.config.holder) {
            // Not listed (yet, or for now: the hold-off after a step-down):
            // no place to rank. It may be the next transfer's target the
            // moment it is listed, so it stays unranked, answering pushes
            // at once (a delayed answer would hold up that transfer), and
            // reads again soon to rank itself once listed.
            self.follower.ranked = None;
            self.listen(false);
            return Ok(Ranked::Unregistered);
        }
        let ttl = self.timing().ttl;
        let place = members
            .iter()
            .filter(|m| {
                // As `succession_wait` finds the successor: not the holder,
                // nor (the lease being free) the one who just let go. In a
                // transfer window, ranked as if the target held the lease
                // (it will in a moment): counting the target would put the
                // one after it out of line, and a follower out of line
                // answers pushes late, the target's acquisition among them,
                // so a transfer to it next would wait for that answer.
                m.is_fresh(r.read_at_us, ttl)
                    && Some(m.holder.as_str()) != r.holder.as_deref()
                    && (r.is_held() || Some(m.holder.as_str()) != r.previous_holder.as_deref())
                    && Some(m.identity.as_str()) != r.transfer_target()
            })
            .position(|m| m.holder == self.config.holder);
        self.follower.ranked = Some(Rank {
            term: r.term,
            at: now,
            place,
        });
        Ok(
            match self.listen(place.is_some_and(|p| p < LISTENING_FOLLOWERS)) {
                true => Ranked::Listening,
                false => Ranked::Same,
            },
        )
    }

    /// How long to wait before looking again at a lease held by someone else:
    /// until it would expire by the store's clock. Where the store pushes
    /// changes, nothing sooner: a release or hand-over wakes us, so an idle
    /// follower reads once per lease lifetime instead of every poll period
    /// (12 reads a second). Without push, a poll period, to see a release.
    pub(super) fn wait_for(&self, rec: &LeaseRecord) -> Duration {
        let mut until_expiry = rec.remaining + self.timing().settle;
        if self.frugal && self.changes.is_none() && !self.follower.in_line {
            let ttl = self.timing().ttl;
            // Not the designated successor, which reads at the expiry. A
            // leader on schedule renews before half its lease is gone, so
            // reading at the expiry each time would follow its renewals
            // (a read, and a connection, every 2/3 to 1 TTL): at the
            // soonest a TTL after this read instead. That is at most half
            // a TTL after the expiry, and only matters when the first in
            // line are gone too.
            if rec.remaining > ttl / 2 {
                until_expiry = until_expiry.max(ttl);
            }
            // A quarter of a TTL spread, so the followers of a fleet
            // (whose reads the leader's renewals line up) do not all open
            // a connection in the same instant.
            until_expiry += ttl.mul_f64(crate::random::factor(0.0, 0.25));
        }
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
        if self.changes.is_none() && self.frugal {
            // Where nothing pushes, the first in line look every tenth of
            // a TTL, so a release or transfer reaches the successor within
            // that; the others, and every follower where the first in line
            // listen, read at the expiry.
            let caps = self.store.capabilities();
            (self.follower.in_line && !caps.push).then(|| jittered(self.timing().push_down_poll))
        } else if self.changes.is_none() {
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
    ///
    /// [`Timing::push_check_period`]: crate::config::Timing::push_check_period
    async fn await_push(&mut self, mut seen: u64) -> Option<Next> {
        loop {
            let until = self.now() + self.timing().push_check_period;
            if let Some(next) = self.idle_until(until).await {
                return Some(next);
            }
            // Pushed, or the channel is down (its outage wakes followers
            // too): read, and poll while it stays down.
            if self.follower.pushed.is_some() || self.store.push_health().is_down() {
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

    /// Publishes who leads, as a lease just read says.
    pub(super) fn publish_record(&self, rec: Option<&LeaseRecord>) {
        let state = match rec {
            Some(r) if r.is_held() => State::Following {
                leader: r.holder.clone().unwrap_or_default(),
                term: r.term,
            },
            _ => State::NoLeader,
        };
        self.shared.publish(state);
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
        if let Some(to) = r.transfer_target() {
            return Ok(self.transfer_wait(r, to));
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
            // were the successor: the one whose read worked goes first.
            // (Trying at once would make every follower try whenever reads
            // fail, as on an etcd cluster with a dead member.) Safety never
            // depends on succession, only the number of writes does; the
            // grace is short.
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

    /// During a transfer window to `to`: `None` (try now) for the target,
    /// for anyone else how long to wait before looking again.
    fn transfer_wait(&self, r: &LeaseRecord, to: &str) -> Option<Duration> {
        if to == self.config.identity.as_str() {
            return None;
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
        // follower that slept through the window would miss the new
        // leader's release and, as the next transfer's target, leave
        // the election leaderless for the rest of its old window
        // (conformance: transfers_in_a_row_reach_their_targets).
        let left = if self.store.capabilities().push_acquisitions {
            left
        } else {
            left.min(jittered(self.timing().push_down_poll))
        };
        Some(left + self.timing().settle)
    }

    /// How long a follower that is not the designated successor still waits
    /// before it tries, for a lease that `r` shows free; `None`: try now.
    ///
    /// The grace counts from when this follower first saw the lease free, not
    /// from the expiry the record states: etcd deletes an expired key up to
    /// ~0.5 s after the estimated expiry, so by the stated time every
    /// follower's grace would have passed when the key went, and all would
    /// try at once.
    fn succession_grace_left(&mut self, r: &LeaseRecord) -> Option<Duration> {
        let now = self.now();
        let since = match self.follower.free_since {
            Some((term, since)) if term == r.term => since,
            _ => {
                self.follower.free_since = Some((r.term, now));
                now
            }
        };
        let free_for = now.saturating_sub(since);
        // With push the successor hears of the change in milliseconds;
        // without it, within a poll period.
        let grace = if self.changes.is_some() || self.frugal {
            self.timing().push_succession_grace
        } else {
            self.timing().succession_grace
        };
        (free_for < grace).then(|| {
            (grace - free_for).min(jittered(self.timing().poll_period)) + self.timing().settle
        })
    }
}

/// Resolves once the semaphore's gate frees; never without a seat.
async fn gate_freed(seat: Option<&crate::semaphore::Seat>) {
    match seat {
        Some(seat) => seat.free().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(term: u64, place: Option<usize>) -> Rank {
        Rank {
            term,
            at: Duration::ZERO,
            place,
        }
    }

    fn place_after(r: Rank, term: u64, sparse: bool) -> Option<Option<usize>> {
        r.after(term, sparse).map(|k| k.place)
    }

    /// A follower re-ranks once the acquisitions since its ranking may have
    /// brought it into the first two places, and not before.
    #[test]
    fn a_rank_is_kept_until_the_follower_may_be_in_line() {
        // Same term: nothing moved.
        assert_eq!(place_after(rank(7, Some(0)), 7, false), Some(Some(0)));
        assert_eq!(place_after(rank(7, None), 7, false), Some(None));
        // Dense terms count the acquisitions.
        assert_eq!(place_after(rank(7, Some(5)), 8, false), Some(Some(4)));
        assert_eq!(place_after(rank(7, Some(5)), 10, false), Some(Some(2)));
        assert_eq!(place_after(rank(7, Some(5)), 11, false), None);
        assert_eq!(place_after(rank(7, Some(2)), 8, false), None);
        assert_eq!(place_after(rank(7, Some(1)), 8, false), None);
        // Sparse terms: a change is one acquisition.
        assert_eq!(place_after(rank(7, Some(5)), 90, true), Some(Some(4)));
        assert_eq!(place_after(rank(7, Some(2)), 90, true), None);
        // Not among the successors, or a term that went back: read.
        assert_eq!(place_after(rank(7, None), 8, false), None);
        assert_eq!(place_after(rank(7, Some(5)), 6, false), None);
        assert_eq!(place_after(rank(7, Some(5)), 6, true), None);
    }
}
