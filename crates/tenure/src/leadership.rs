//! What a leader holds: the term, a local deadline, and the signal that it ended.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{watch, Notify};

use crate::clock::SharedClock;
use crate::error::Error;
use crate::events::{Event, Events, StopReason};
use crate::semaphore::Seat;
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
use crate::store::sql::{FencedTransaction, SqlStore};
#[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
use crate::store::LeaseStore;
use crate::store::{DynStore, ElectionKey, Tenure};

/// Where an elector stands, as published by [`Elector::leadership`](crate::Elector::leadership).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum State {
    /// Nobody holds the lease (or this candidate cannot tell who does).
    NoLeader,
    /// Another candidate leads.
    Following {
        /// The leader's holder id (`identity#session`), as
        /// [`Elector::holder_id`](crate::Elector::holder_id) names it.
        leader: String,
        /// The leader's term.
        term: u64,
    },
    /// This candidate leads.
    Leading {
        /// The fencing token of this tenure.
        term: u64,
    },
}

/// The current tenure as the campaign task last established it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    pub term: u64,
    /// Local deadline on the elector's clock.
    pub deadline: Duration,
    /// A hand-over of this tenure was asked for (resign, transfer,
    /// preemption, shutdown): the work is to stop, and the lease goes once
    /// every [`HandoverHold`] is dropped.
    pub stepping_down: bool,
}

/// The live [`HandoverHold`]s of one elector.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    count: AtomicUsize,
    released: Notify,
}

impl Holds {
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// Resolves once no hold is left.
    pub(crate) async fn released(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the count is read: a hold dropped in
            // between still wakes this wait.
            released.as_mut().enable();
            if self.is_empty() {
                return;
            }
            released.await;
        }
    }
}

/// State shared between the campaign task and every handle.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Local deadline in clock nanoseconds; 0 when not leading. Read without a
    /// lock by `is_leader()`.
    pub deadline_ns: AtomicU64,
    pub term: AtomicU64,
    pub current: watch::Sender<Option<Current>>,
    pub state: watch::Sender<State>,
    pub closed: AtomicBool,
    /// The store's refusal of this elector's settings (a TTL it cannot
    /// honour), which ended the campaign: `(setting, reason)`.
    pub refused: std::sync::Mutex<Option<(&'static str, String)>>,
    /// Until when (clock nanoseconds) this candidate stays out of the member list.
    pub membership_paused_until: AtomicU64,
    /// Told when membership is paused: the membership task, asleep until
    /// its next tick, wakes to rejoin when the pause ends instead.
    pub membership_pause_set: tokio::sync::Notify,
    /// When (clock nanoseconds) the last successful heartbeat was sent, by
    /// the membership task or carried by a follower's read; 0: none since
    /// the registration was last removed.
    pub heartbeat_sent_ns: AtomicU64,
    pub clock: SharedClock,
    pub key: ElectionKey,
    pub holder: String,
    pub events: Events,
    /// Work that must stop before the lease is handed over or released.
    pub holds: Arc<Holds>,
    /// The store the campaign runs on, for [`Leadership::proclaim`].
    pub store: DynStore,
    /// The metadata this candidate claims and heartbeats with; changed by
    /// [`Leadership::proclaim`].
    pub metadata: Arc<std::sync::Mutex<String>>,
    /// This elector's slot, when it is one of a [`Semaphore`](crate::Semaphore)'s.
    pub seat: Option<Seat>,
}

impl Shared {
    pub(crate) fn new(
        clock: SharedClock,
        key: ElectionKey,
        holder: String,
        events: Events,
        store: DynStore,
        metadata: String,
    ) -> Self {
        Self {
            deadline_ns: AtomicU64::new(0),
            term: AtomicU64::new(0),
            current: watch::Sender::new(None),
            state: watch::Sender::new(State::NoLeader),
            closed: AtomicBool::new(false),
            refused: std::sync::Mutex::new(None),
            membership_paused_until: AtomicU64::new(0),
            membership_pause_set: tokio::sync::Notify::new(),
            heartbeat_sent_ns: AtomicU64::new(0),
            clock,
            key,
            holder,
            events,
            holds: Arc::new(Holds::default()),
            store,
            metadata: Arc::new(std::sync::Mutex::new(metadata)),
            seat: None,
        }
    }

    /// Why the campaign is over: the store's refusal of a setting, which
    /// no retry mends, or a shutdown.
    pub(crate) fn closed_error(&self) -> Error {
        match &*self.refused.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((field, reason)) => Error::InvalidConfig {
                field,
                reason: reason.clone(),
            },
            None => Error::Shutdown,
        }
    }

    /// The same, as the elector of one slot of a [`Semaphore`](crate::Semaphore).
    pub(crate) fn with_seat(mut self, seat: Option<Seat>) -> Self {
        self.seat = seat;
        self
    }

    /// Whether another slot of this elector's semaphore is being acquired
    /// or held: this elector then stands aside (no acquisition, out of the
    /// member list).
    pub(crate) fn stands_aside(&self) -> bool {
        self.seat.as_ref().is_some_and(Seat::taken_elsewhere)
    }

    /// The metadata to claim and heartbeat with now.
    pub(crate) fn metadata(&self) -> String {
        lock(&self.metadata).clone()
    }

    pub(crate) fn is_leader(&self) -> bool {
        let deadline = self.deadline_ns.load(Ordering::Acquire);
        deadline != 0 && (self.clock.now().as_nanos() as u64) < deadline
    }

    /// Records a (re)newed tenure. The atomics come first so `is_leader()` is
    /// never true for a term the watchers have not been told about yet... and
    /// never true after `end` cleared them. The metrics come before both
    /// watch channels: whoever wakes on `acquired()` or on the new state
    /// reads gauges that already say so.
    pub(crate) fn lead(&self, term: u64, deadline: Duration) {
        if let Some(seat) = &self.seat {
            seat.leading();
        }
        self.term.store(term, Ordering::Release);
        self.deadline_ns
            .store((deadline.as_nanos() as u64).max(1), Ordering::Release);
        let leading = State::Leading { term };
        // Only the campaign task changes the state, so it cannot change
        // between this look and the send below.
        let starts = *self.state.borrow() != leading;
        if starts {
            crate::telemetry::new_leader(&self.key, term);
        }
        crate::telemetry::leading(&self.key, true, deadline.saturating_sub(self.clock.now()));
        self.current.send_replace(Some(Current {
            term,
            deadline,
            stepping_down: false,
        }));
        if self
            .state
            .send_if_modified(|s| replace_if_changed(s, leading))
        {
            self.events.leader_seen(&self.holder, term);
            self.events.emit(Event::StartedLeading { term });
        }
    }

    /// Ends the tenure locally because the store no longer has it (or for an
    /// unknown reason); see [`Self::end_as`].
    pub(crate) fn end(&self) {
        self.end_as(StopReason::Lost)
    }

    /// Ends the tenure locally: first the cheap flag, then the watchers, then
    /// the event saying why.
    pub(crate) fn end_as(&self, reason: StopReason) {
        self.deadline_ns.store(0, Ordering::Release);
        if matches!(*self.state.borrow(), State::Leading { .. }) {
            crate::telemetry::leading(&self.key, false, Duration::ZERO);
        }
        self.current.send_replace(None);
        let mut ended = None;
        self.state.send_if_modified(|s| match s {
            State::Leading { term } => {
                ended = Some(*term);
                *s = State::NoLeader;
                true
            }
            _ => false,
        });
        if let Some(term) = ended {
            self.events.emit(Event::StoppedLeading { term, reason });
        }
        if let Some(seat) = &self.seat {
            seat.ended();
        }
    }

    /// Tells the work of the current tenure that it is to stop
    /// ([`Leadership::stepping_down`]); the tenure itself goes on until the
    /// campaign ends it.
    pub(crate) fn ask_to_step_down(&self) {
        self.current.send_if_modified(|c| match c {
            Some(c) if !c.stepping_down => {
                c.stepping_down = true;
                true
            }
            _ => false,
        });
    }

    /// Keeps this candidate out of the member list until `until`; its
    /// registration is being removed, so the next heartbeat is due at once.
    pub(crate) fn pause_membership(&self, until: Duration) {
        self.membership_paused_until
            .store(until.as_nanos() as u64, Ordering::Release);
        self.heartbeat_sent_ns.store(0, Ordering::Release);
        self.membership_pause_set.notify_one();
    }

    /// Ends a pause of the membership at once: the heartbeat task rejoins.
    pub(crate) fn resume_membership(&self) {
        self.membership_paused_until.store(0, Ordering::Release);
        self.membership_pause_set.notify_one();
    }

    /// Records a successful heartbeat sent at `sent`.
    pub(crate) fn heartbeat_sent(&self, sent: Duration) {
        self.heartbeat_sent_ns
            .fetch_max((sent.as_nanos() as u64).max(1), Ordering::AcqRel);
    }

    /// How old the registration is; `Duration::MAX` when there is none.
    pub(crate) fn heartbeat_age(&self) -> Duration {
        match self.heartbeat_sent_ns.load(Ordering::Acquire) {
            0 => Duration::MAX,
            sent => self.clock.now().saturating_sub(Duration::from_nanos(sent)),
        }
    }

    pub(crate) fn membership_paused(&self) -> bool {
        (self.clock.now().as_nanos() as u64) < self.membership_paused_until.load(Ordering::Acquire)
    }

    pub(crate) fn publish(&self, state: State) {
        let seen = match &state {
            State::Following { leader, term } => Some((leader.clone(), *term)),
            _ => None,
        };
        let changes = *self.state.borrow() != state;
        if let (true, Some((_, term))) = (changes, &seen) {
            crate::telemetry::leading(&self.key, false, Duration::ZERO);
            crate::telemetry::new_leader(&self.key, *term);
        }
        let changed = self
            .state
            .send_if_modified(|s| replace_if_changed(s, state));
        if let (true, Some((leader, term))) = (changed, seen) {
            self.events.leader_seen(&leader, term);
        }
    }

    /// The current tenure; `None` once it is stepping down, so that
    /// [`Elector::acquired`](crate::Elector::acquired) waits for the next.
    pub(crate) fn leadership(&self) -> Option<Leadership> {
        let current = (*self.current.borrow())?;
        if current.stepping_down || self.clock.now() >= current.deadline {
            return None;
        }
        Some(Leadership {
            term: current.term,
            key: self.key.clone(),
            holder: self.holder.clone(),
            current: self.current.subscribe(),
            clock: self.clock.clone(),
            holds: self.holds.clone(),
            store: self.store.clone(),
            metadata: self.metadata.clone(),
        })
    }
}

/// The metadata behind its lock; a panic elsewhere leaves a whole string.
fn lock(m: &std::sync::Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn replace_if_changed(slot: &mut State, new: State) -> bool {
    if *slot == new {
        false
    } else {
        *slot = new;
        true
    }
}

/// One tenure of leadership: its term and the signal that it is over.
///
/// Valid until the local deadline (an instant taken before the last successful
/// renew, plus the TTL, less the drift bound and a safety margin), or until the
/// elector learns of a loss, whichever is first. [`lost`](Self::lost) resolves at
/// the deadline at the latest, even if the store never answers again.
///
/// ```no_run
/// # async fn demo(elector: &tenure::Elector) -> tenure::Result<()> {
/// let leadership = elector.acquired().await?;
/// println!("leading under term {}", leadership.term());
/// tokio::select! {
///     _ = leadership.lost() => println!("lost it"),
///     _ = do_leader_work(leadership.term()) => {}
/// }
/// # Ok(()) }
/// # async fn do_leader_work(_term: u64) {}
/// ```
#[derive(Clone, Debug)]
pub struct Leadership {
    term: u64,
    key: ElectionKey,
    holder: String,
    current: watch::Receiver<Option<Current>>,
    clock: SharedClock,
    holds: Arc<Holds>,
    store: DynStore,
    metadata: Arc<std::sync::Mutex<String>>,
}

/// Holds back the hand-over of a tenure until the work is done with it.
///
/// While a hold lives, the elector neither hands the lease over (resign,
/// transfer, preemption) nor releases it (shutdown, a tenure that ran out):
/// it asks the work to stop ([`Leadership::stepping_down`] resolves) and
/// writes the hand-over once every hold is dropped. Dropping the hold is the
/// acknowledgement that the work has stopped. The lease still ends at the
/// local deadline if the work takes longer: a hold can delay a graceful
/// hand-over until then, never keep leadership past it.
///
/// `tenure run` holds each tenure while its job runs, so a successor's job
/// never starts before the old one is gone; [`Elector::run`](crate::Elector::run)
/// holds it while the work future lives.
///
/// ```no_run
/// # async fn demo(elector: &tenure::Elector) -> tenure::Result<()> {
/// let leadership = elector.acquired().await?;
/// let hold = leadership.hold();
/// tokio::select! {
///     _ = leadership.stepping_down() => {
///         // Asked to hand over (or the tenure is ending): finish up quickly.
///     }
///     _ = do_leader_work(leadership.term()) => {}
/// }
/// drop(hold); // the successor may start now
/// # Ok(()) }
/// # async fn do_leader_work(_term: u64) {}
/// ```
#[derive(Debug)]
#[must_use = "the hold acknowledges the step-down when dropped"]
pub struct HandoverHold {
    holds: Arc<Holds>,
}

impl Drop for HandoverHold {
    fn drop(&mut self) {
        if self.holds.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.holds.released.notify_waiters();
        }
    }
}

impl Leadership {
    /// The term: the fencing token to attach to everything the leader writes.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The election this tenure is of.
    pub fn election(&self) -> &ElectionKey {
        &self.key
    }

    /// This candidate's holder id (`identity#session`), as
    /// [`Elector::holder_id`](crate::Elector::holder_id) names it.
    pub fn holder_id(&self) -> &str {
        &self.holder
    }

    /// The tenure as the store knows it, for fenced transactions.
    pub fn tenure(&self) -> Tenure {
        Tenure {
            key: self.key.clone(),
            holder: self.holder.clone(),
            term: self.term,
        }
    }

    /// The local deadline on the elector's clock, if this tenure is still current.
    pub fn deadline(&self) -> Option<Duration> {
        match *self.current.borrow() {
            Some(c) if c.term == self.term => Some(c.deadline),
            _ => None,
        }
    }

    /// Waits until a renewal moves the local deadline and returns the new one;
    /// `None` once this tenure is over.
    ///
    /// A supervisor forwards each deadline to whatever enforces it outside the
    /// process (`tenure run` sends it to the guard process that kills the job
    /// when it passes). Cancel-safe: a deadline that moved while nobody was
    /// waiting is returned by the next call.
    ///
    /// ```no_run
    /// # async fn demo(elector: &tenure::Elector) -> tenure::Result<()> {
    /// let mut leadership = elector.acquired().await?;
    /// while let Some(deadline) = leadership.renewed().await {
    ///     println!("valid until {deadline:?} on the elector's clock");
    /// }
    /// println!("tenure over");
    /// # Ok(()) }
    /// ```
    pub async fn renewed(&mut self) -> Option<Duration> {
        if self.current.changed().await.is_err() {
            return None;
        }
        match *self.current.borrow_and_update() {
            Some(c) if c.term == self.term => Some(c.deadline),
            _ => None,
        }
    }

    /// How long this tenure is certainly valid, from now; zero once it is over.
    pub fn remaining(&self) -> Duration {
        self.deadline()
            .map(|d| d.saturating_sub(self.clock.now()))
            .unwrap_or(Duration::ZERO)
    }

    /// True while this tenure is current and before its deadline.
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// Replaces the metadata of this tenure (etcd's `Proclaim`), for a
    /// leader whose address or port changed while it leads: one
    /// conditional write that applies only while this tenure holds the
    /// lease, and changes neither the term nor the deadline. Observers,
    /// `tenure status` and the HTTP API read the new metadata; followers
    /// see it at their next read (at once where the store pushes changes).
    ///
    /// The elector keeps the new metadata for its heartbeats and later
    /// tenures, whatever the store answers. Returns `Ok(false)` when this
    /// tenure is over (nothing was written); the write is bounded by the
    /// tenure's deadline ([`Error::Timeout`](crate::Error::Timeout) past
    /// it). Metadata longer than 1024 bytes or with control characters is
    /// refused with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    ///
    /// ```no_run
    /// # async fn demo(elector: tenure::Elector) -> tenure::Result<()> {
    /// let leadership = elector.acquired().await?;
    /// // The service moved to another port while leading:
    /// if !leadership.proclaim("http://10.0.0.7:9090").await? {
    ///     println!("no longer leading: nothing changed");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&self, metadata: impl Into<String>) -> crate::Result<bool> {
        let metadata = metadata.into();
        crate::names::validate_metadata(&metadata)?;
        *lock(&self.metadata) = metadata.clone();
        let left = self.remaining();
        if left.is_zero() {
            return Ok(false);
        }
        let tenure = self.tenure();
        match tokio::time::timeout(left, self.store.proclaim(&tenure, &metadata)).await {
            Ok(answer) => answer,
            Err(_) => Err(crate::Error::Timeout {
                what: "proclaim",
                after: left,
            }),
        }
    }

    /// Runs `work` in a database transaction fenced by this tenure's lease and
    /// commits it: the safe way to write from a leader whose data lives in
    /// the same SQL database as the lease. A paused leader that wakes after a
    /// successor took over gets [`Error::NotLeader`](crate::Error::NotLeader)
    /// and writes nothing; a takeover cannot commit while the work runs.
    ///
    /// `store` is the store the elector was built on, as
    /// [`store::connect`](crate::store::connect) returned it or a
    /// [`SqlStore`]; other stores give
    /// [`Error::Unsupported`](crate::Error::Unsupported) (Redis and etcd have
    /// fenced writes of their own: `RedisStore::fenced`, `EtcdStore::fenced_txn`).
    /// See [`SqlStore::fenced`] for the transaction and errors.
    ///
    /// ```no_run
    /// # async fn demo(store: tenure::store::DynStore, elector: tenure::Elector) -> tenure::Result<()> {
    /// let leadership = elector.acquired().await?;
    /// let term = leadership.term() as i64;
    /// leadership
    ///     .fenced(&store, async |tx| {
    ///         // `$1` on PostgreSQL and SQLite; MySQL/MariaDB want `?` instead.
    ///         sqlx::query("INSERT INTO ledger (term, entry) VALUES ($1, 'nightly')")
    ///             .bind(term)
    ///             .execute(tx.connection())
    ///             .await?; // a sqlx::Error becomes tenure::Error::Work
    ///         Ok(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres")))
    )]
    pub async fn fenced<S, T, F>(&self, store: &S, work: F) -> crate::Result<T>
    where
        S: LeaseStore + ?Sized,
        F: AsyncFnOnce(&mut FencedTransaction) -> crate::Result<T>,
    {
        if !self.is_valid() {
            return Err(Error::NotLeader {
                election: self.key.to_string(),
            });
        }
        let Some(sql) = store.as_any().and_then(|a| a.downcast_ref::<SqlStore>()) else {
            return Err(Error::Unsupported {
                store: store.describe(),
                what: "fenced transactions (SQL stores only; on Redis use RedisStore::fenced, on etcd EtcdStore::fenced_txn)".into(),
            });
        };
        sql.fenced(&self.tenure(), work).await
    }

    /// Holds the hand-over of this tenure back until the returned hold is
    /// dropped (or the local deadline passes); see [`HandoverHold`].
    pub fn hold(&self) -> HandoverHold {
        self.holds.count.fetch_add(1, Ordering::AcqRel);
        HandoverHold {
            holds: self.holds.clone(),
        }
    }

    /// True once a hand-over of this tenure was asked for, or the tenure ended.
    pub fn is_stepping_down(&self) -> bool {
        match *self.current.borrow() {
            Some(c) if c.term == self.term => c.stepping_down || self.clock.now() >= c.deadline,
            _ => true,
        }
    }

    /// Resolves when this tenure is asked to end early (a resign or transfer,
    /// from this process or another; a preemption; a shutdown), or ends.
    ///
    /// The lease is still held when it resolves: where the work holds a
    /// [`HandoverHold`], the elector waits for it (until the local deadline
    /// at most) before handing the lease over, so the work can stop cleanly
    /// and a successor never starts while it still runs.
    pub async fn stepping_down(&self) {
        let mut rx = self.current.clone();
        loop {
            let deadline = match *rx.borrow_and_update() {
                Some(c) if c.term == self.term && !c.stepping_down => c.deadline,
                _ => return,
            };
            if self.clock.now() >= deadline {
                return;
            }
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                _ = self.clock.sleep_until(deadline) => return,
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Resolves when this tenure ends: at the local deadline at the latest.
    pub async fn lost(&self) {
        self.expiring(Duration::ZERO).await
    }

    /// Resolves once the deadline is less than `lead` away (and not extended by
    /// a renewal in the meantime), or the tenure ended. A supervisor uses it to
    /// start stopping work early enough to be done before the deadline.
    pub async fn expiring(&self, lead: Duration) {
        let mut rx = self.current.clone();
        loop {
            let deadline = match *rx.borrow_and_update() {
                Some(c) if c.term == self.term => c.deadline,
                _ => return,
            };
            let wake = deadline.saturating_sub(lead);
            if self.clock.now() >= wake {
                return;
            }
            tokio::select! {
                // Listed order when several are ready (not tokio\'s random pick),
                // so a simulation seed replays exactly; either order is handled.
                biased;
                _ = self.clock.sleep_until(wake) => {}
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use metrics::{Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder};
    use metrics::{SharedString, Unit};

    use super::*;
    use crate::clock::ManualClock;
    use crate::events::Hooks;

    /// Notes, each time a gauge is set, whether a watcher of the state or
    /// of the current tenure (`acquired()`) could already see this
    /// candidate leading.
    struct SeesState {
        state: watch::Receiver<State>,
        current: watch::Receiver<Option<Current>>,
        seen: Arc<Mutex<Vec<(String, bool)>>>,
        name: String,
    }

    impl GaugeFn for SeesState {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, _: f64) {
            let leading = matches!(*self.state.borrow(), State::Leading { .. })
                || self.current.borrow().is_some();
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.push((self.name.clone(), leading));
        }
    }

    struct Spy {
        state: watch::Receiver<State>,
        current: watch::Receiver<Option<Current>>,
        seen: Arc<Mutex<Vec<(String, bool)>>>,
    }

    impl Recorder for Spy {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(SeesState {
                state: self.state.clone(),
                current: self.current.clone(),
                seen: Arc::clone(&self.seen),
                name: key.name().to_owned(),
            }))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    fn shared() -> Shared {
        let key = ElectionKey {
            namespace: "default".into(),
            election: "e".into(),
        };
        Shared::new(
            Arc::new(ManualClock::new()),
            key,
            "a#1".into(),
            Events::new(Hooks(Vec::new())),
            Arc::new(crate::store::memory::MemoryStore::new()),
            String::new(),
        )
    }

    /// Whoever wakes on `acquired()` or `leadership()` and reads the
    /// metrics sees them already set: a leader's gauges are recorded
    /// before the state is published, and a follower's after the leader
    /// stepped down (so "leading" is never seen without its gauges).
    #[test]
    fn gauges_are_set_before_watchers_see_the_new_state() {
        let shared = shared();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let spy = Spy {
            state: shared.state.subscribe(),
            current: shared.current.subscribe(),
            seen: Arc::clone(&seen),
        };
        metrics::with_local_recorder(&spy, || {
            shared.lead(1, Duration::from_secs(5));
        });
        let started = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
        assert!(
            !started.is_empty() && started.iter().all(|(_, leading)| !leading),
            "gauges set after the state said leading: {started:?}"
        );
        metrics::with_local_recorder(&spy, || shared.end());
        let ended = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert!(
            !ended.is_empty() && ended.iter().all(|(_, leading)| *leading),
            "gauges set after the state said no longer leading: {ended:?}"
        );
    }
}
