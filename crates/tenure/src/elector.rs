//! The [`Elector`]: one candidate in one election.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::campaign::{Campaign, Command};
use crate::clock::{BootClock, SharedClock};
use crate::config::{Config, Request};
use crate::error::{Error, Result};
use crate::events::{Event, Events, Hooks};
use crate::leadership::{Leadership, Shared, State};
use crate::semaphore::Seat;
use crate::store::{DynStore, ElectionKey, LeaseStore, LeaseStoreExt};

/// How long `shutdown()` waits for the store's queued bookkeeping.
const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Builds an [`Elector`]; see [`Elector::builder`].
#[derive(Clone, Debug)]
#[must_use = "call .build() to start campaigning"]
pub struct ElectorBuilder {
    pub(crate) store: DynStore,
    clock: SharedClock,
    pub(crate) request: Request,
    hooks: Hooks,
    /// The slot this elector campaigns for, in a [`Semaphore`](crate::Semaphore).
    pub(crate) seat: Option<Seat>,
}

impl ElectorBuilder {
    /// Succession priority, 0–1000 (default 0). When the lease becomes free,
    /// the live member with the highest priority (then the longest-serving)
    /// tries first; the others wait a short grace.
    pub fn priority(mut self, priority: u32) -> Self {
        self.request.priority = priority;
        self
    }

    /// At most how long only the target may acquire after a transfer or a
    /// preemption. By default, and never longer than, the time a live
    /// target needs to take over (see
    /// [`handover::transfer`](crate::handover::transfer)): a member that
    /// reads only at the lease's expiry (PostgreSQL and MySQL followers
    /// out of line) may need more than a TTL.
    pub fn handover_window(mut self, window: Duration) -> Self {
        self.request.handover_window = Some(window);
        self
    }

    /// Preemption: once this candidate has led for `stable`, it hands over to
    /// a live member of higher priority (default: never).
    pub fn preempt_after(mut self, stable: Duration) -> Self {
        self.request.preempt_after = Some(stable);
        self
    }

    /// The namespace (default `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.request.namespace = namespace.into();
        self
    }

    /// The election name (required): 1–255 bytes of UTF-8, no control characters.
    pub fn election(mut self, election: impl Into<String>) -> Self {
        self.request.election = Some(election.into());
        self
    }

    /// This candidate's identity (default `hostname-pid`). A random session id is
    /// appended to form the holder id, so two processes with one identity never
    /// share a lease.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.request.identity = Some(identity.into());
        self
    }

    /// Free text stored with the lease while this candidate leads (e.g. its address).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.request.metadata = metadata.into();
        self
    }

    /// Lease time to live (default 10 s, at least 100 ms): a crashed leader is
    /// replaced about this long after its last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.request.ttl = ttl;
        self
    }

    /// How often the leader renews (default ttl/3; must be below ttl/2 so a
    /// failed renewal can be retried before the lease runs out).
    pub fn renew_period(mut self, period: Duration) -> Self {
        self.request.renew_period = Some(period);
        self
    }

    /// How soon a failed store call is retried (default ttl/10 or the renew period, whichever is shorter; jittered).
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.request.retry_period = Some(period);
        self
    }

    /// How often a follower re-reads a held lease to notice a graceful release
    /// (default 80 ms, jittered, never longer than the lease's remaining time).
    pub fn poll_period(mut self, period: Duration) -> Self {
        self.request.poll_period = Some(period);
        self
    }

    /// Bound on the rate difference between this host's clock and the store's
    /// (default 0.01 = 1%). The leader's belief is shortened by this fraction.
    pub fn drift(mut self, drift: f64) -> Self {
        self.request.drift = drift;
        self
    }

    /// How long [`Elector::run`] lets its work future go on after a
    /// hand-over was asked for (resign, transfer, preemption), so the work
    /// can finish what it is doing: it sees
    /// [`Leadership::stepping_down`] resolve and should return soon.
    /// Default zero: the future is dropped at once. Either way the lease is
    /// handed over only after the future is gone, and never later than the
    /// local deadline.
    pub fn step_down_grace(mut self, grace: Duration) -> Self {
        self.request.step_down_grace = grace;
        self
    }

    /// Release the lease on [`Elector::shutdown`] (default true).
    pub fn release_on_shutdown(mut self, on: bool) -> Self {
        self.request.release_on_shutdown = on;
        self
    }

    /// Calls `hook` with every [`Event`]: started leading, stopped leading
    /// (with the [reason](crate::StopReason)), a new leader seen. Hooks run
    /// in the elector's task, in order, right after the change: keep them
    /// short and non-blocking (send to a channel or spawn a task for
    /// anything slow). For a stream instead, see [`Elector::events`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::{Elector, Event};
    /// let store = tenure::store::connect("memory://", &Default::default()).await?;
    /// let elector = Elector::builder(store)
    ///     .election("billing")
    ///     .on_event(|event| match event {
    ///         Event::StartedLeading { term } => println!("leading under term {term}"),
    ///         Event::StoppedLeading { term, reason } => println!("term {term} over: {reason}"),
    ///         Event::NewLeader { leader, .. } => println!("{leader} leads"),
    ///         _ => {}
    ///     })
    ///     .build()?;
    /// # elector.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn on_event(mut self, hook: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.hooks.0.push(Arc::new(hook));
        self
    }

    /// The local clock for deadlines (default: [`BootClock`]). Tests pass a
    /// [`ManualClock`](crate::clock::ManualClock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    fn validate(&self) -> Result<Config> {
        Config::new(
            &self.request,
            &self.store.capabilities(),
            &self.store.describe(),
        )
    }

    /// Validates the settings and starts campaigning on the current tokio runtime.
    ///
    /// Errors name the setting and the accepted range; calling outside a tokio
    /// runtime is an error too.
    pub fn build(self) -> Result<Elector> {
        let config = Arc::new(self.validate()?);
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::config(
                "runtime",
                "Elector::build() must be called inside a tokio runtime",
            )
        })?;
        let shared = Arc::new(
            Shared::new(
                self.clock.clone(),
                config.key.clone(),
                config.holder.clone(),
                Events::new(self.hooks),
                self.store.clone(),
                config.metadata.clone(),
            )
            .with_seat(self.seat),
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let campaign = Campaign::new(config.clone(), self.store.clone(), shared.clone(), rx);
        let task = runtime.spawn(campaign.run());
        Ok(Elector {
            inner: Arc::new(Inner {
                shared,
                config,
                store: self.store,
                commands: tx,
                task: Mutex::new(Some(task)),
            }),
        })
    }
}

/// One candidate in one election.
///
/// Built by [`Elector::builder`]; campaigns in a background task from `build()`
/// until [`shutdown`](Elector::shutdown), or until its last clone is dropped
/// (which also releases, without waiting). An `Elector` is a handle: clone it
/// into the task that runs the work and the one that waits for a signal; every
/// clone speaks for the same candidate.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let elector = tenure::Elector::builder(store)
///     .election("billing-cron")
///     .ttl(Duration::from_secs(2))
///     .build()?;
/// let handle = elector.clone(); // e.g. for a signal handler
/// let term = elector
///     .run(|leadership| async move {
///         // Leader-only work; cancelled if leadership is lost.
///         leadership.term()
///     })
///     .await?;
/// assert_eq!(term, 1);
/// handle.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Elector {
    inner: Arc<Inner>,
}

/// What every clone of an [`Elector`] shares; dropping the last one stops
/// the campaign.
#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    config: Arc<Config>,
    store: DynStore,
    commands: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Elector {
    /// The state shared with the campaign task.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// Starts building an elector on `store`.
    pub fn builder(store: impl Into<DynStoreArg>) -> ElectorBuilder {
        ElectorBuilder {
            store: store.into().0,
            clock: Arc::new(BootClock),
            request: Request::default(),
            hooks: Hooks::default(),
            seat: None,
        }
    }

    /// True while this candidate leads and its local deadline has not passed.
    /// Costs one atomic load and one clock read; call it as often as you like.
    pub fn is_leader(&self) -> bool {
        self.inner.shared.is_leader()
    }

    /// The current term if leading.
    pub fn term(&self) -> Option<u64> {
        self.is_leader()
            .then(|| self.inner.shared.term.load(Ordering::Acquire))
    }

    /// This candidate's holder id, `identity#session`.
    pub fn holder_id(&self) -> &str {
        &self.inner.config.holder
    }

    /// The identity part of the holder id.
    pub fn identity(&self) -> &str {
        &self.inner.config.identity
    }

    /// The election this elector campaigns in.
    pub fn election(&self) -> &ElectionKey {
        &self.inner.config.key
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.inner.config.timing.ttl
    }

    /// The store this elector uses.
    pub fn store(&self) -> &DynStore {
        &self.inner.store
    }

    /// A receiver of this elector's [`State`], updated on every change.
    pub fn leadership(&self) -> watch::Receiver<State> {
        self.inner.shared.state.subscribe()
    }

    /// A stream of this elector's [`Event`]s from now on: started leading,
    /// stopped leading (with the [reason](crate::StopReason)), a new leader
    /// seen. A receiver that falls more than 256 events behind gets
    /// `RecvError::Lagged` and then the newest ones; for every event without
    /// fail, use [`ElectorBuilder::on_event`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// use tenure::{Event, StopReason};
    /// let store = tenure::store::connect("memory://", &Default::default()).await?;
    /// let elector = tenure::Elector::builder(store).election("billing").build()?;
    /// let mut events = elector.events();
    /// let term = elector.acquired().await?.term();
    /// elector.shutdown().await?;
    /// let mut seen = Vec::new();
    /// while let Ok(event) = events.try_recv() {
    ///     seen.push(event);
    /// }
    /// assert_eq!(seen.last(), Some(&Event::StoppedLeading { term, reason: StopReason::Released }));
    /// # Ok(()) }
    /// ```
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.shared.events.subscribe()
    }

    /// The current tenure, if leading and not stepping down (see
    /// [`Leadership::stepping_down`]).
    pub fn current(&self) -> Option<Leadership> {
        self.inner.shared.leadership()
    }

    /// Waits until this candidate leads. Errors with [`Error::Shutdown`] once the
    /// elector has shut down, and with [`Error::InvalidConfig`] once the store
    /// refused one of its settings (a TTL the store cannot honour, such as
    /// one too short for a ZooKeeper ensemble's tick), which ends the campaign.
    pub async fn acquired(&self) -> Result<Leadership> {
        let mut rx = self.inner.shared.current.subscribe();
        loop {
            // Mark the current value seen before deciding from it, so a change
            // published in between wakes the wait below.
            rx.borrow_and_update();
            if self.inner.shared.closed.load(Ordering::Acquire) {
                return Err(self.inner.shared.closed_error());
            }
            if let Some(l) = self.inner.shared.leadership() {
                return Ok(l);
            }
            if rx.changed().await.is_err() {
                return Err(self.inner.shared.closed_error());
            }
        }
    }

    /// Runs `work` each time this candidate becomes leader, cancelling it (by
    /// dropping its future) as soon as leadership is lost, and returns the
    /// output of the first run that finishes while still leading.
    ///
    /// A resign, transfer or preemption stops the work **before** the lease
    /// is handed over: the future is dropped (after the
    /// [step-down grace](ElectorBuilder::step_down_grace), if set), and only
    /// then may a successor start. At the local deadline the future is
    /// dropped whatever it is doing.
    ///
    /// When `work` finishes, this candidate **resigns**: a leader whose work
    /// is over (done, or failed with an `Err` output) must not sit on the
    /// lease, so it is released and another candidate takes over at once.
    /// The elector keeps campaigning as a follower until
    /// [`shutdown`](Self::shutdown); a work future that panics resigns the
    /// same way. To keep leading, do not return from `work`. To stop at a
    /// signal, see [`run_until`](Self::run_until).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let store = tenure::store::connect("memory://", &Default::default()).await?;
    /// let elector = tenure::Elector::builder(store).election("import").build()?;
    /// let imported: Result<u64, String> = elector
    ///     .run(|leadership| async move {
    ///         // Leader-only work under `leadership.term()`; an `Err` resigns too.
    ///         Ok(leadership.term())
    ///     })
    ///     .await?;
    /// assert_eq!(imported, Ok(1));
    /// assert!(!elector.is_leader()); // resigned: a successor may take over
    /// elector.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T>(&self, mut work: F) -> Result<T>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            let leadership = self.acquired().await?;
            // The lease is not handed over while the work future lives.
            let hold = leadership.hold();
            let _resign_on_panic = ResignOnPanic(self);
            // The future is dropped at the end of this block, before the hold.
            let out = {
                let fut = work(leadership.clone());
                tokio::pin!(fut);
                tokio::select! {
                    biased;
                    _ = leadership.lost() => None,
                    _ = leadership.stepping_down() => {
                        self.let_work_finish(&leadership, fut.as_mut()).await;
                        None
                    }
                    out = &mut fut => Some(out),
                }
            };
            drop(hold);
            match out {
                Some(out) => {
                    self.resign_term(leadership.term()).await;
                    return Ok(out);
                }
                None => {
                    tracing::info!(target: "tenure::elector", election = %self.inner.config.key, term = leadership.term(), "leadership ending; work stopped");
                }
            }
        }
    }

    /// After a hand-over was asked for: polls the work for up to the
    /// step-down grace (and never past the tenure's end), its output unused.
    async fn let_work_finish<Fut: Future>(
        &self,
        leadership: &Leadership,
        fut: std::pin::Pin<&mut Fut>,
    ) {
        let grace = self.inner.config.step_down_grace;
        if grace.is_zero() {
            return;
        }
        tokio::select! {
            biased;
            _ = leadership.lost() => {}
            _ = tokio::time::sleep(grace) => {}
            _ = fut => {}
        }
    }

    /// Like [`run`](Self::run), and stops when `stop` resolves (a signal, a
    /// cancellation token): the work is cancelled. Either way, when the work
    /// finished or `stop` fired, the elector is [shut down](Self::shutdown)
    /// (the lease released, the history written) before this returns.
    /// Returns the work's output, or `None` if `stop` came first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
    /// let store = tenure::store::connect("memory://", &Default::default()).await?;
    /// let elector = tenure::Elector::builder(store).election("billing").build()?;
    /// // In a service: `tokio::signal::ctrl_c()` instead of a timer.
    /// let stop = tokio::time::sleep(std::time::Duration::from_millis(50));
    /// let out = elector
    ///     .run_until(stop, |_leadership| std::future::pending::<()>())
    ///     .await?;
    /// assert_eq!(out, None); // stopped, released, shut down
    /// # Ok(()) }
    /// ```
    pub async fn run_until<S, F, Fut, T>(&self, stop: S, work: F) -> Result<Option<T>>
    where
        S: Future,
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        let out = tokio::select! {
            biased;
            _ = stop => None,
            out = self.run(work) => Some(out),
        };
        let shut = self.shutdown().await;
        match out {
            Some(Err(e)) => Err(e),
            Some(Ok(out)) => shut.map(|()| Some(out)),
            None => shut.map(|()| None),
        }
    }

    /// Resigns if still leading under `term` (not a later tenure of ours).
    async fn resign_term(&self, term: u64) {
        if self.term() != Some(term) {
            return;
        }
        match self.resign().await {
            Ok(()) | Err(Error::NotLeader { .. }) | Err(Error::Shutdown) => {}
            Err(e) => {
                tracing::warn!(target: "tenure::elector", election = %self.inner.config.key, term, "resigning after the work finished: {e}")
            }
        }
    }

    /// Steps down (releasing the lease so another candidate takes over at once)
    /// and keeps campaigning after a short hold-off. Errors with
    /// [`Error::NotLeader`] if not leading.
    pub async fn resign(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Resign(tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    /// The members of this election, best successor first.
    pub async fn members(&self) -> Result<Vec<crate::store::MemberRecord>> {
        let members = self.inner.store.members(&self.inner.config.key).await?;
        crate::telemetry::members(&self.inner.config.key, &members);
        Ok(members)
    }

    /// Hands leadership to the live member with `identity`: steps down, then
    /// only that member may acquire during the hand-over window. Errors with
    /// [`Error::NotLeader`] if not leading and [`Error::InvalidConfig`] if no
    /// live member has that identity.
    pub async fn transfer(&self, identity: &str) -> Result<()> {
        crate::handover::check_target(&self.inner.store, &self.inner.config.key, identity).await?;
        let (tx, rx) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Transfer(identity.to_string(), tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    /// Stops campaigning; if leading, steps down and (unless turned off) releases
    /// the lease so a successor can take over at once.
    pub async fn shutdown(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let result = match self.inner.commands.send(Command::Shutdown(tx)) {
            Ok(()) => rx.await.unwrap_or(Ok(())),
            Err(_) => Ok(()),
        };
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        // What the release queued (its history entry, a notification) must
        // be written before a process that exits next loses it. Bounded: the
        // history is for people, not for safety.
        let flush = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, self.inner.store.flush()).await;
        if !matches!(flush, Ok(Ok(()))) {
            tracing::warn!(election = %self.inner.config.key, "the store's history/notification queue was not flushed in time at shutdown");
        }
        result
    }
}

/// Resigns (without waiting) if the work future of [`Elector::run`] unwinds.
struct ResignOnPanic<'a>(&'a Elector);

impl Drop for ResignOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let (tx, _rx) = oneshot::channel();
            let _ = self.0.inner.commands.send(Command::Resign(tx));
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Best effort: the campaign task releases the lease on its own.
        let (tx, _rx) = oneshot::channel();
        let _ = self.commands.send(Command::Shutdown(tx));
    }
}

/// Anything [`Elector::builder`] accepts as a store: what
/// [`store::connect`](crate::store::connect) returns (a [`DynStore`]), a
/// concrete store such as [`SqlStore`](crate::store::sql::SqlStore), or an
/// `Arc` of one.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::sync::Arc;
/// use tenure::{store::memory::MemoryStore, Elector};
/// let by_url = tenure::store::connect("memory://", &Default::default()).await?;
/// let a = Elector::builder(by_url.clone()).election("a").build()?;
/// let b = Elector::builder(MemoryStore::new()).election("b").build()?;
/// let c = Elector::builder(Arc::new(MemoryStore::new())).election("c").build()?;
/// # for e in [a, b, c] { e.shutdown().await?; }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DynStoreArg(DynStore);

impl<S: LeaseStore> From<S> for DynStoreArg {
    fn from(store: S) -> Self {
        // A `DynStore` is used as it is, not wrapped in another `Arc`.
        let mut slot = Some(store);
        if let Some(dynamic) =
            (&mut slot as &mut dyn std::any::Any).downcast_mut::<Option<DynStore>>()
        {
            if let Some(store) = dynamic.take() {
                return Self(store);
            }
        }
        match slot {
            Some(store) => Self(Arc::new(store)),
            None => unreachable!("taken only when it was a DynStore"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    #[test]
    fn build_outside_runtime_is_an_error_not_a_panic() {
        let e = Elector::builder(Arc::new(MemoryStore::new()))
            .election("e")
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("inside a tokio runtime"), "{e}");
    }
}
