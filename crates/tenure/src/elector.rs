//! The [`Elector`]: one candidate in one election.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::campaign::{Campaign, Command};
use crate::clock::{BootClock, SharedClock};
use crate::error::{Error, Result};
use crate::leadership::{Leadership, Shared, State};
use crate::names::{validate_identity, validate_metadata, validate_name};
use crate::store::{DynStore, ElectionKey, LeaseStore};

/// Smallest TTL accepted. Below this, one slow round trip is the whole lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Largest TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default TTL: a crashed leader is replaced within about this long.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default follower poll period, for stores without push. A graceful release is
/// noticed within about this long; see docs/timing.md for the trade-off.
pub const DEFAULT_POLL: Duration = Duration::from_millis(80);

/// Validated settings of one elector.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub key: ElectionKey,
    pub identity: String,
    pub holder: String,
    pub metadata: String,
    pub ttl: Duration,
    pub renew_period: Duration,
    pub retry_period: Duration,
    pub poll_period: Duration,
    pub drift: f64,
    pub min_margin: Duration,
    pub release_on_shutdown: bool,
    pub priority: u32,
    pub handover_window: Duration,
    pub preempt_after: Option<Duration>,
    /// How long followers other than the designated successor wait after the
    /// lease became free before they try (no herd).
    pub succession_grace: Duration,
}

/// How long `shutdown()` waits for the store's queued bookkeeping.
const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Highest priority accepted.
pub const MAX_PRIORITY: u32 = 1000;

impl Config {
    /// The local deadline for a write sent at `t0` (DESIGN rule 3):
    /// `t0 + ttl * (1 - drift) - margin`, where the margin grows with the
    /// observed round trip but never past a quarter of the TTL.
    pub fn deadline(&self, t0: Duration, rtt: Duration) -> Duration {
        let margin = (rtt * 2).max(self.min_margin).min(self.ttl / 4);
        crate::bugs::stretch_deadline(t0 + self.ttl.mul_f64(1.0 - self.drift) - margin)
    }
}

/// The drift bound used unless [`ElectorBuilder::drift`] says otherwise.
const DEFAULT_DRIFT: f64 = 0.01;
/// The smallest safety margin subtracted from every local deadline.
const MIN_MARGIN: Duration = Duration::from_millis(50);

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL {
        return Err(Error::config(
            "ttl",
            format!("{ttl:?} is too small; the minimum is {MIN_TTL:?} (one slow round trip would use up the whole lease)"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::config(
            "ttl",
            format!("{ttl:?} is too large; the maximum is {MAX_TTL:?}"),
        ));
    }
    Ok(())
}

fn check_renew_period(ttl: Duration, renew_period: Option<Duration>) -> Result<Duration> {
    let renew_period = renew_period.unwrap_or(ttl / 3);
    if renew_period >= ttl / 2 || renew_period.is_zero() {
        return Err(Error::config(
            "renew period",
            format!("{renew_period:?} must be above zero and below ttl/2 = {:?}, so a failed renewal can be retried before the lease expires (default ttl/3)", ttl / 2),
        ));
    }
    Ok(renew_period)
}

/// Checks, in the order a user reads them, that a TTL, a renew period (`None`:
/// the default ttl/3) and the time a supervisor needs to stop its work before
/// the local deadline (`stop_lead`, for `tenure run` its kill grace) fit
/// together: a renewal sent one renew period after the last, plus a round
/// trip, must land before the supervisor starts stopping the work at
/// `deadline - stop_lead`. Otherwise a healthy leader would stop its work and
/// lose its lease every period.
///
/// The deadline is `ttl * (1 - drift) - margin` after a renewal was sent
/// (default drift 1 %; margin at least 50 ms, at most ttl/4); the round trip
/// allowance is 50 ms or ttl/10, whichever is smaller.
///
/// ```
/// use std::time::Duration;
/// let ms = Duration::from_millis;
/// assert!(tenure::check_supervised_timing(ms(10_000), None, ms(2_500)).is_ok());
/// // 490 ms renew period + 490 ms kill grace do not fit in a 1 s lease.
/// let err = tenure::check_supervised_timing(ms(1_000), Some(ms(490)), ms(490)).unwrap_err();
/// assert!(err.to_string().contains("at most"));
/// // The TTL is checked first.
/// let err = tenure::check_supervised_timing(ms(0), None, ms(490)).unwrap_err();
/// assert!(err.to_string().starts_with("invalid ttl"));
/// ```
pub fn check_supervised_timing(
    ttl: Duration,
    renew_period: Option<Duration>,
    stop_lead: Duration,
) -> Result<()> {
    check_ttl(ttl)?;
    let renew_period = check_renew_period(ttl, renew_period)?;
    let margin = MIN_MARGIN.min(ttl / 4);
    let round_trip = Duration::from_millis(50).min(ttl / 10);
    let room = ttl
        .mul_f64(1.0 - DEFAULT_DRIFT)
        .saturating_sub(margin + round_trip + renew_period);
    if stop_lead >= room {
        let fitting_ttl = (renew_period + stop_lead + Duration::from_millis(100))
            .mul_f64(1.0 / (1.0 - DEFAULT_DRIFT))
            .max(MIN_TTL);
        return Err(Error::config(
            "kill grace",
            format!(
                "{stop_lead:?} does not fit: with ttl {ttl:?} and renew period {renew_period:?}, \
                 the next renewal may land as late as {:?} after the last, and the local deadline \
                 ({:?} after it) minus the kill grace must come later; use a kill grace of at most \
                 {:?}, a shorter renew period, or a ttl of at least {:?}",
                renew_period + round_trip,
                ttl.mul_f64(1.0 - DEFAULT_DRIFT).saturating_sub(margin),
                room.saturating_sub(Duration::from_millis(1)),
                Duration::from_millis(fitting_ttl.as_millis() as u64 + 1),
            ),
        ));
    }
    Ok(())
}

/// Builds an [`Elector`]; see [`Elector::builder`].
#[derive(Debug)]
#[must_use = "call .build() to start campaigning"]
pub struct ElectorBuilder {
    store: DynStore,
    namespace: String,
    election: Option<String>,
    identity: Option<String>,
    metadata: String,
    ttl: Duration,
    renew_period: Option<Duration>,
    retry_period: Option<Duration>,
    poll_period: Option<Duration>,
    drift: f64,
    release_on_shutdown: bool,
    clock: SharedClock,
    priority: u32,
    handover_window: Option<Duration>,
    preempt_after: Option<Duration>,
}

impl ElectorBuilder {
    /// Succession priority, 0–1000 (default 0). When the lease becomes free,
    /// the live member with the highest priority (then the longest-serving)
    /// tries first; the others wait a short grace.
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = priority;
        self
    }

    /// How long only the target may acquire after a transfer (default: the TTL).
    pub fn handover_window(mut self, window: Duration) -> Self {
        self.handover_window = Some(window);
        self
    }

    /// Preemption: once this candidate has led for `stable`, it hands over to
    /// a live member of higher priority (default: never).
    pub fn preempt_after(mut self, stable: Duration) -> Self {
        self.preempt_after = Some(stable);
        self
    }

    /// The namespace (default `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The election name (required): 1–255 bytes of UTF-8, no control characters.
    pub fn election(mut self, election: impl Into<String>) -> Self {
        self.election = Some(election.into());
        self
    }

    /// This candidate's identity (default `hostname-pid`). A random session id is
    /// appended to form the holder id, so two processes with one identity never
    /// share a lease.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Free text stored with the lease while this candidate leads (e.g. its address).
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = metadata.into();
        self
    }

    /// Lease time to live (default 10 s, at least 100 ms): a crashed leader is
    /// replaced about this long after its last renewal.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the leader renews (default ttl/3; must be below ttl/2 so a
    /// failed renewal can be retried before the lease runs out).
    pub fn renew_period(mut self, period: Duration) -> Self {
        self.renew_period = Some(period);
        self
    }

    /// How soon a failed store call is retried (default ttl/10 or the renew period, whichever is shorter; jittered).
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.retry_period = Some(period);
        self
    }

    /// How often a follower re-reads a held lease to notice a graceful release
    /// (default 80 ms, jittered, never longer than the lease's remaining time).
    pub fn poll_period(mut self, period: Duration) -> Self {
        self.poll_period = Some(period);
        self
    }

    /// Bound on the rate difference between this host's clock and the store's
    /// (default 0.01 = 1%). The leader's belief is shortened by this fraction.
    pub fn drift(mut self, drift: f64) -> Self {
        self.drift = drift;
        self
    }

    /// Release the lease on [`Elector::shutdown`] (default true).
    pub fn release_on_shutdown(mut self, on: bool) -> Self {
        self.release_on_shutdown = on;
        self
    }

    /// The local clock for deadlines (default: [`BootClock`]). Tests pass a
    /// [`ManualClock`](crate::clock::ManualClock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    fn validate(&self) -> Result<Config> {
        let election = self
            .election
            .clone()
            .ok_or_else(|| Error::config("election", "is required; call .election(\"name\")"))?;
        validate_name("election", &election)?;
        validate_name("namespace", &self.namespace)?;
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        validate_identity(&identity)?;
        validate_metadata(&self.metadata)?;
        let ttl = self.ttl;
        check_ttl(ttl)?;
        let min_ttl = self.store.capabilities().min_ttl;
        if ttl < min_ttl {
            return Err(Error::config(
                "ttl",
                format!(
                    "{ttl:?} is too small for {}: its leases are whole seconds, so the ttl must be at least {min_ttl:?}",
                    self.store.describe()
                ),
            ));
        }
        let renew_period = check_renew_period(ttl, self.renew_period)?;
        // The default never exceeds the renew period: a renew period shorter
        // than ttl/10 must not make the default invalid.
        let retry_period = self.retry_period.unwrap_or((ttl / 10).min(renew_period));
        if retry_period.is_zero() || retry_period > renew_period {
            return Err(Error::config(
                "retry period",
                format!("{retry_period:?} must be above zero and at most the renew period {renew_period:?} (default ttl/10, or the renew period if shorter)"),
            ));
        }
        let poll_period = self.poll_period.unwrap_or(DEFAULT_POLL);
        if poll_period < Duration::from_millis(5) {
            return Err(Error::config(
                "poll period",
                format!("{poll_period:?} is too small; use at least 5ms"),
            ));
        }
        if !(0.0..0.1).contains(&self.drift) {
            return Err(Error::config(
                "drift",
                format!("{} must be in [0, 0.1) (default 0.01)", self.drift),
            ));
        }
        if self.priority > MAX_PRIORITY {
            return Err(Error::config(
                "priority",
                format!(
                    "{} is too large; use 0 to {MAX_PRIORITY} (higher wins succession)",
                    self.priority
                ),
            ));
        }
        let handover_window = self.handover_window.unwrap_or(ttl);
        if handover_window.is_zero() || handover_window > MAX_TTL {
            return Err(Error::config(
                "handover window",
                format!("{handover_window:?} must be above zero and at most {MAX_TTL:?}"),
            ));
        }
        let session = random_session();
        Ok(Config {
            key: ElectionKey::new(self.namespace.clone(), election),
            holder: format!("{identity}#{session}"),
            identity,
            metadata: self.metadata.clone(),
            ttl,
            renew_period,
            retry_period,
            poll_period,
            drift: self.drift,
            min_margin: MIN_MARGIN,
            release_on_shutdown: self.release_on_shutdown,
            priority: self.priority,
            handover_window,
            preempt_after: self.preempt_after,
            succession_grace: poll_period + Duration::from_millis(100),
        })
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
        let shared = Arc::new(Shared::new(
            self.clock.clone(),
            config.key.clone(),
            config.holder.clone(),
        ));
        let (tx, rx) = mpsc::unbounded_channel();
        let campaign = Campaign::new(config.clone(), self.store.clone(), shared.clone(), rx);
        let task = runtime.spawn(campaign.run());
        Ok(Elector {
            shared,
            config,
            store: self.store,
            commands: tx,
            task: Mutex::new(Some(task)),
        })
    }
}

fn default_identity() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() {
        "unknown-host".to_string()
    } else {
        host
    };
    let host: String = host.chars().filter(|c| !c.is_control()).take(180).collect();
    format!("{host}-{}", std::process::id())
}

fn random_session() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// One candidate in one election.
///
/// Built by [`Elector::builder`]; campaigns in a background task from `build()`
/// until [`shutdown`](Elector::shutdown) (or drop, which also releases, without
/// waiting).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use std::time::Duration;
/// let store = tenure::store::connect("memory://", &Default::default()).await?;
/// let elector = tenure::Elector::builder(store)
///     .election("billing-cron")
///     .ttl(Duration::from_secs(2))
///     .build()?;
/// let term = elector
///     .run(|leadership| async move {
///         // Leader-only work; cancelled if leadership is lost.
///         leadership.term()
///     })
///     .await?;
/// assert_eq!(term, 1);
/// elector.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Elector {
    shared: Arc<Shared>,
    config: Arc<Config>,
    store: DynStore,
    commands: mpsc::UnboundedSender<Command>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Elector {
    /// Starts building an elector on `store`.
    pub fn builder(store: impl Into<DynStoreArg>) -> ElectorBuilder {
        ElectorBuilder {
            store: store.into().0,
            namespace: "default".into(),
            election: None,
            identity: None,
            metadata: String::new(),
            ttl: DEFAULT_TTL,
            renew_period: None,
            retry_period: None,
            poll_period: None,
            drift: DEFAULT_DRIFT,
            release_on_shutdown: true,
            clock: Arc::new(BootClock),
            priority: 0,
            handover_window: None,
            preempt_after: None,
        }
    }

    /// True while this candidate leads and its local deadline has not passed.
    /// Costs one atomic load and one clock read; call it as often as you like.
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// The current term if leading.
    pub fn term(&self) -> Option<u64> {
        self.is_leader()
            .then(|| self.shared.term.load(Ordering::Acquire))
    }

    /// This candidate's holder id, `identity#session`.
    pub fn holder_id(&self) -> &str {
        &self.config.holder
    }

    /// The identity part of the holder id.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The election this elector campaigns in.
    pub fn election(&self) -> &ElectionKey {
        &self.config.key
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.config.ttl
    }

    /// The store this elector uses.
    pub fn store(&self) -> &DynStore {
        &self.store
    }

    /// A receiver of this elector's [`State`], updated on every change.
    pub fn leadership(&self) -> watch::Receiver<State> {
        self.shared.state.subscribe()
    }

    /// The current tenure, if leading.
    pub fn current(&self) -> Option<Leadership> {
        self.shared.leadership()
    }

    /// Waits until this candidate leads. Errors with [`Error::Shutdown`] once the
    /// elector has shut down.
    pub async fn acquired(&self) -> Result<Leadership> {
        let mut rx = self.shared.current.subscribe();
        loop {
            // Mark the current value seen before deciding from it, so a change
            // published in between wakes the wait below.
            rx.borrow_and_update();
            if self.shared.closed.load(Ordering::Acquire) {
                return Err(Error::Shutdown);
            }
            if let Some(l) = self.shared.leadership() {
                return Ok(l);
            }
            if rx.changed().await.is_err() {
                return Err(Error::Shutdown);
            }
        }
    }

    /// Runs `work` each time this candidate becomes leader, cancelling it (by
    /// dropping its future) as soon as leadership is lost, and returns the first
    /// output of a run that finishes while still leading.
    ///
    /// Leadership continues after `work` returns; call [`shutdown`](Self::shutdown)
    /// or [`resign`](Self::resign) to give it up.
    pub async fn run<F, Fut, T>(&self, mut work: F) -> Result<T>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            let leadership = self.acquired().await?;
            let fut = work(leadership.clone());
            tokio::select! {
                biased;
                _ = leadership.lost() => {
                    tracing::info!(election = %self.config.key, term = leadership.term(), "leadership lost; work cancelled");
                }
                out = fut => return Ok(out),
            }
        }
    }

    /// Steps down (releasing the lease so another candidate takes over at once)
    /// and keeps campaigning after a short hold-off. Errors with
    /// [`Error::NotLeader`] if not leading.
    pub async fn resign(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Resign(tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    /// The members of this election, best successor first.
    pub async fn members(&self) -> Result<Vec<crate::store::MemberRecord>> {
        self.store.members(&self.config.key).await
    }

    /// Hands leadership to the live member with `identity`: steps down, then
    /// only that member may acquire during the hand-over window. Errors with
    /// [`Error::NotLeader`] if not leading and [`Error::InvalidConfig`] if no
    /// live member has that identity.
    pub async fn transfer(&self, identity: &str) -> Result<()> {
        crate::handover::check_target(&self.store, &self.config.key, identity).await?;
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Transfer(identity.to_string(), tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)?
    }

    /// Stops campaigning; if leading, steps down and (unless turned off) releases
    /// the lease so a successor can take over at once.
    pub async fn shutdown(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let result = match self.commands.send(Command::Shutdown(tx)) {
            Ok(()) => rx.await.unwrap_or(Ok(())),
            Err(_) => Ok(()),
        };
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
        // What the release queued (its history entry, a notification) must
        // be written before a process that exits next loses it. Bounded: the
        // history is for people, not for safety.
        let flush = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, self.store.flush()).await;
        if !matches!(flush, Ok(Ok(()))) {
            tracing::warn!(election = %self.config.key, "the store's history/notification queue was not flushed in time at shutdown");
        }
        result
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        // Best effort: the campaign task releases the lease on its own.
        let (tx, _rx) = oneshot::channel();
        let _ = self.commands.send(Command::Shutdown(tx));
    }
}

/// Anything [`Elector::builder`] accepts as a store: an `Arc<dyn LeaseStore>` or
/// any concrete store.
#[derive(Debug)]
pub struct DynStoreArg(DynStore);

impl From<DynStore> for DynStoreArg {
    fn from(s: DynStore) -> Self {
        Self(s)
    }
}

impl<S: LeaseStore> From<Arc<S>> for DynStoreArg {
    fn from(s: Arc<S>) -> Self {
        Self(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fit_the_supervision_budget_at_every_ttl() {
        for ms in [100, 150, 250, 500, 1_000, 2_000, 10_000, 60_000, 86_400_000] {
            let ttl = Duration::from_millis(ms);
            // `tenure run`'s default kill grace: ttl/4, at most 5 s.
            let grace = (ttl / 4).min(Duration::from_secs(5));
            check_supervised_timing(ttl, None, grace)
                .unwrap_or_else(|e| panic!("defaults at ttl {ttl:?}: {e}"));
        }
        let ms = Duration::from_millis;
        let err = check_supervised_timing(ms(1_000), Some(ms(490)), ms(490)).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
        // The suggested setting works.
        check_supervised_timing(ms(1_000), Some(ms(490)), ms(399)).unwrap();
        assert!(check_supervised_timing(ms(0), None, ms(1))
            .unwrap_err()
            .to_string()
            .starts_with("invalid ttl"));
        assert!(check_supervised_timing(ms(1_000), Some(ms(600)), ms(1))
            .unwrap_err()
            .to_string()
            .starts_with("invalid renew period"));
    }
    use crate::store::memory::MemoryStore;

    fn builder() -> ElectorBuilder {
        Elector::builder(Arc::new(MemoryStore::new())).election("e")
    }

    #[test]
    fn settings_are_validated_with_reasons() {
        let e = builder()
            .ttl(Duration::from_millis(50))
            .validate()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("invalid ttl: 50ms is too small; the minimum is 100ms"),
            "{e}"
        );
        let e = builder()
            .ttl(Duration::from_secs(1))
            .renew_period(Duration::from_millis(600))
            .validate()
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("renew period: 600ms must be above zero and below ttl/2 = 500ms"),
            "{e}"
        );
        let e = Elector::builder(Arc::new(MemoryStore::new()))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("election: is required"), "{e}");
        let e = builder().election("").validate().unwrap_err();
        assert!(e.to_string().contains("must not be empty"), "{e}");
        let e = builder().namespace("a\tb").validate().unwrap_err();
        assert!(e.to_string().contains("invalid namespace"), "{e}");
        let e = builder()
            .retry_period(Duration::from_secs(9))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("retry period"), "{e}");
        let e = builder().drift(0.5).validate().unwrap_err();
        assert!(e.to_string().contains("drift"), "{e}");
        assert!(e.is_usage());
    }

    #[test]
    fn build_outside_runtime_is_an_error_not_a_panic() {
        let e = builder().build().unwrap_err();
        assert!(e.to_string().contains("inside a tokio runtime"), "{e}");
    }

    #[test]
    fn holder_ids_differ_per_elector_with_same_identity() {
        let a = builder().identity("svc").validate().unwrap();
        let b = builder().identity("svc").validate().unwrap();
        assert_ne!(a.holder, b.holder);
        assert!(a.holder.starts_with("svc#"));
    }

    #[test]
    fn deadline_is_conservative() {
        let c = builder().ttl(Duration::from_secs(10)).validate().unwrap();
        let t0 = Duration::from_secs(100);
        let d = c.deadline(t0, Duration::from_millis(1));
        assert_eq!(d, t0 + Duration::from_millis(9900 - 50));
        let d = c.deadline(t0, Duration::from_millis(400));
        assert_eq!(d, t0 + Duration::from_millis(9900 - 800));
        let d = c.deadline(t0, Duration::from_secs(100));
        assert_eq!(d, t0 + Duration::from_millis(9900 - 2500));
    }
}
