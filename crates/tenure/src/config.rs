//! An elector's settings: what the builder was asked for ([`Request`]), the
//! checks that turn it into validated settings ([`Config`]), and [`Timing`],
//! every duration the campaign uses, derived from the TTL and periods in one
//! place so the safety timing can be read (and tested) on one screen.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::names::{validate_identity, validate_metadata, validate_name};
use crate::store::{Capabilities, ElectionKey};

/// Smallest TTL accepted. Below this, one slow round trip is the whole lease.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Largest TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default TTL: a crashed leader is replaced within about this long.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default follower poll period, for stores without push. A graceful release is
/// noticed within about this long; see docs/timing.md for the trade-off.
pub const DEFAULT_POLL: Duration = Duration::from_millis(80);
/// Highest priority accepted.
pub const MAX_PRIORITY: u32 = 1000;

/// The drift bound used unless the builder says otherwise.
pub(crate) const DEFAULT_DRIFT: f64 = 0.01;
/// The smallest safety margin subtracted from every local deadline.
const MIN_MARGIN: Duration = Duration::from_millis(50);
/// What a supervisor allows for one renewal's round trip when it checks that
/// its stop lead fits (the measured round trip is far below this on a LAN).
const ROUND_TRIP_ALLOWANCE: Duration = Duration::from_millis(50);
/// The poll period's floor: below it followers would hammer the store.
const MIN_POLL: Duration = Duration::from_millis(5);
/// The renew period's floor: a leader renewing more often only loads the
/// store (the shortest TTL's default, ttl/3, is 33 ms).
pub const MIN_RENEW_PERIOD: Duration = Duration::from_millis(10);

/// What the builder was asked for, before any check.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub namespace: String,
    pub election: Option<String>,
    pub identity: Option<String>,
    pub metadata: String,
    pub ttl: Duration,
    pub renew_period: Option<Duration>,
    pub retry_period: Option<Duration>,
    pub poll_period: Option<Duration>,
    pub drift: f64,
    pub release_on_shutdown: bool,
    pub priority: u32,
    pub handover_window: Option<Duration>,
    pub preempt_after: Option<Duration>,
    pub step_down_grace: Duration,
    /// The session part of the holder id; random when unset. The slots of
    /// one [`Semaphore`](crate::Semaphore) share one, so the process has
    /// one holder id in all of them.
    pub session: Option<String>,
}

impl Default for Request {
    fn default() -> Self {
        Self {
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
            priority: 0,
            handover_window: None,
            preempt_after: None,
            step_down_grace: Duration::ZERO,
            session: None,
        }
    }
}

/// Validated settings of one elector.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub key: ElectionKey,
    pub identity: String,
    /// `identity#session`: unique per elector, so two processes with one
    /// identity never share a lease.
    pub holder: String,
    pub metadata: String,
    pub priority: u32,
    pub release_on_shutdown: bool,
    /// How long `Elector::run` lets its work go on after a step-down request.
    pub step_down_grace: Duration,
    pub timing: Timing,
}

impl Config {
    /// Checks `request` in the order a user reads the settings (names first,
    /// then the TTL, then what derives from it) against a store with `caps`.
    pub(crate) fn new(request: &Request, caps: &Capabilities, store: &str) -> Result<Self> {
        let election = request
            .election
            .clone()
            .ok_or_else(|| Error::config("election", "is required; call .election(\"name\")"))?;
        validate_name("election", &election)?;
        validate_name("namespace", &request.namespace)?;
        let identity = request.identity.clone().unwrap_or_else(default_identity);
        validate_identity(&identity)?;
        validate_metadata(&request.metadata)?;
        let ttl = request.ttl;
        check_ttl(ttl)?;
        if ttl < caps.min_ttl {
            return Err(Error::config(
                "ttl",
                format!(
                    "{ttl:?} is too small for {store}: its leases are whole seconds, so the ttl must be at least {:?}",
                    caps.min_ttl
                ),
            ));
        }
        let renew_period = check_renew_period(ttl, request.renew_period)?;
        // The default never exceeds the renew period: a renew period shorter
        // than ttl/10 must not make the default invalid.
        let retry_period = request.retry_period.unwrap_or((ttl / 10).min(renew_period));
        if retry_period.is_zero() || retry_period > renew_period {
            return Err(Error::config(
                "retry period",
                format!("{retry_period:?} must be above zero and at most the renew period {renew_period:?} (default ttl/10, or the renew period if shorter)"),
            ));
        }
        let poll_period = request.poll_period.unwrap_or(DEFAULT_POLL);
        if poll_period < MIN_POLL {
            return Err(Error::config(
                "poll period",
                format!("{poll_period:?} is too small; use at least {MIN_POLL:?}"),
            ));
        }
        if !(0.0..0.1).contains(&request.drift) {
            return Err(Error::config(
                "drift",
                format!("{} must be in [0, 0.1) (default 0.01)", request.drift),
            ));
        }
        if request.priority > MAX_PRIORITY {
            return Err(Error::config(
                "priority",
                format!(
                    "{} is too large; use 0 to {MAX_PRIORITY} (higher wins succession)",
                    request.priority
                ),
            ));
        }
        let handover_window = request.handover_window.unwrap_or(MAX_TTL);
        if handover_window.is_zero() || handover_window > MAX_TTL {
            return Err(Error::config(
                "handover window",
                format!("{handover_window:?} must be above zero and at most {MAX_TTL:?}"),
            ));
        }
        Ok(Config {
            key: ElectionKey::new(request.namespace.clone(), election),
            holder: format!(
                "{identity}#{}",
                request.session.clone().unwrap_or_else(random_session)
            ),
            identity,
            metadata: request.metadata.clone(),
            priority: request.priority,
            release_on_shutdown: request.release_on_shutdown,
            step_down_grace: request.step_down_grace,
            timing: Timing {
                handover_window,
                preempt_after: request.preempt_after,
                ..Timing::new(ttl, renew_period, retry_period, poll_period, request.drift)
            },
        })
    }
}

/// Every duration the campaign uses, derived from the validated TTL and
/// periods. The campaign reads durations only from here.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Timing {
    /// The lease's time to live, as written to the store.
    pub ttl: Duration,
    /// How often the leader renews (below ttl/2).
    pub renew_period: Duration,
    /// How soon a failed store call is retried (jittered).
    pub retry_period: Duration,
    /// How often a follower without push re-reads a held lease (jittered).
    pub poll_period: Duration,
    /// How often a follower re-reads while the store's push channel is down
    /// (`Wakeups::push_health`): a tenth of a TTL, at least the poll
    /// period, so a release is still noticed well before the lease would
    /// expire without polling every few milliseconds.
    pub push_down_poll: Duration,
    /// Bound on the rate difference between this host's clock and the store's.
    pub drift: f64,
    /// The smallest margin subtracted from a local deadline.
    pub min_margin: Duration,
    /// At most how long only the target may acquire after this leader's own
    /// transfer or preemption: the builder's setting, else [`MAX_TTL`], so
    /// that the leader's own bound (a live target's wake-up,
    /// `Campaign::target_takeover_bound`) decides.
    pub handover_window: Duration,
    /// How long a tenure lasts before the leader hands over to a live member
    /// of higher priority; `None`: never.
    pub preempt_after: Option<Duration>,
    /// How long a follower's store call may take before it counts as failed:
    /// an answer later than ttl/2 could not make us leader for long anyway.
    pub call_budget: Duration,
    /// How long the leader waits for a read (a pushed change, a preemption
    /// check) before going on without it.
    pub leader_read_timeout: Duration,
    /// How long a hand-over write may take before the step-down reports a timeout.
    pub handover_timeout: Duration,
    /// How long a release may take on shutdown or resign (the lease then
    /// simply expires): short, so shutdown never hangs on a slow store.
    pub release_timeout: Duration,
    /// How long a release after a lost tenure may take; it runs in the
    /// background, so it may take a whole TTL.
    pub lost_release_timeout: Duration,
    /// Leaving the member list is a courtesy (registrations lapse by themselves).
    pub leave_timeout: Duration,
    /// How long the leader's reaping of dead members may run, in the background.
    pub reap_timeout: Duration,
    /// Extra wait after a lease's remaining time, so the store's clock has
    /// surely passed the expiry when we try.
    pub settle: Duration,
    /// How long followers other than the designated successor wait after the
    /// lease became free, for a store without push: the successor notices
    /// within a poll period.
    pub succession_grace: Duration,
    /// The same where the store pushes changes (everyone hears of a free lease
    /// at once): long enough for the successor's acquisition to land on a busy
    /// etcd (one took over 100 ms in a CI run, and all 20 others then tried),
    /// short against any TTL. It only delays a takeover when the designated
    /// successor itself is gone.
    pub push_succession_grace: Duration,
    /// Where the store pushes the lease's end (`Capabilities::push_expiry`),
    /// how often a follower looks whether the push channel has delivered
    /// anything (a leader's renewals show on it) instead of reading at the
    /// lease's expiry; it reads only when nothing came: one TTL, in which a
    /// healthy leader renews three times.
    pub push_check_period: Duration,
    /// After resigning or handing over, how long this candidate stays out of
    /// the race and out of the member list, so another takes over.
    pub hold_off: Duration,
    /// How soon a follower tries again when its acquisition was refused but
    /// the answer shows no holder to wait for (the record could not be read,
    /// or a hand-over window admits only its target): a quarter of the poll
    /// period (jittered), so the winner is noticed without hammering.
    pub refused_free_retry: Duration,
    /// How soon a leader renews after a pushed change it could not read: the
    /// push may have been a hand-over request, and that renewal's failure
    /// acts on it.
    pub pushed_read_retry: Duration,
    /// The wait before the second retry of a failed renewal: the first failure
    /// is often a pooled connection that died with a server restart, and the
    /// next one is likely fine.
    pub first_renew_retry: Duration,
    /// A registration is refreshed when its last heartbeat is this old at a
    /// tick. A follower's timed reads carry its heartbeat: those first in
    /// line read at each lease expiry (2/3 to 1 TTL apart), the others no
    /// sooner than a TTL after their last read and up to a quarter of a TTL
    /// later, so at 1.3 TTLs a separate one is rarely due; a leader sends
    /// none where the lease vouches for it
    /// (`Capabilities::lease_vouches_for_holder`), elsewhere (etcd,
    /// ZooKeeper) its own is due every 1.5 TTLs (the first tick past this
    /// age).
    pub heartbeat_period: Duration,
    /// How often the membership task checks whether a heartbeat is due, on a
    /// grid shared by the process, so due heartbeats of many elections land
    /// at one instant and the store batches them.
    pub heartbeat_tick: Duration,
    /// How long a heartbeat may take.
    pub heartbeat_timeout: Duration,
    /// How long a registration lasts without a heartbeat: three missed ones.
    pub member_ttl: Duration,
    /// How often the leader deletes lapsed registrations: 30 TTLs. Readers
    /// already ignore lapsed ones (`MemberRecord::live`): reaping is
    /// garbage collection, so it is rare (a crashed member's row lingers
    /// up to 33 TTLs, harmlessly). A leader sends no member heartbeats
    /// (`Capabilities::lease_vouches_for_holder`), so a shorter period would
    /// make the reap, and the heartbeat that goes before it, an idle
    /// leader's main cost beyond its renewals.
    pub reap_period: Duration,
}

impl Timing {
    /// Derives every duration from the validated settings.
    pub(crate) fn new(
        ttl: Duration,
        renew_period: Duration,
        retry_period: Duration,
        poll_period: Duration,
        drift: f64,
    ) -> Self {
        Self {
            ttl,
            renew_period,
            retry_period,
            poll_period,
            push_down_poll: (ttl / 10).max(poll_period),
            drift,
            min_margin: MIN_MARGIN,
            handover_window: MAX_TTL,
            preempt_after: None,
            call_budget: (ttl / 2).max(Duration::from_millis(50)),
            leader_read_timeout: ttl / 4,
            handover_timeout: ttl / 2,
            release_timeout: (ttl / 2).min(Duration::from_secs(2)),
            lost_release_timeout: ttl,
            leave_timeout: (ttl / 4).min(Duration::from_secs(1)),
            reap_timeout: ttl / 2,
            settle: Duration::from_millis(2),
            succession_grace: poll_period + Duration::from_millis(100),
            push_succession_grace: Duration::from_millis(250),
            push_check_period: ttl,
            hold_off: (poll_period * 3).max(Duration::from_millis(250)),
            refused_free_retry: poll_period / 4,
            pushed_read_retry: Duration::from_millis(100),
            first_renew_retry: Duration::from_millis(5),
            heartbeat_period: ttl + ttl * 3 / 10,
            heartbeat_tick: ttl / 2,
            heartbeat_timeout: ttl,
            member_ttl: ttl * 3,
            reap_period: ttl * 30,
        }
    }

    /// The local deadline for a write sent at `t0` (a conservative local belief):
    /// `t0 + ttl * (1 - drift) - margin`, where the margin is twice the
    /// observed round trip `rtt`, at least `min_margin`, at most ttl/4.
    pub(crate) fn deadline(&self, t0: Duration, rtt: Duration) -> Duration {
        if crate::bugs::active(crate::bugs::Bug::NoMargin) {
            return t0 + self.ttl;
        }
        let margin = (rtt * 2).max(self.min_margin).min(self.ttl / 4);
        crate::bugs::stretch_deadline(t0 + self.ttl.mul_f64(1.0 - self.drift) - margin)
    }

    /// The next renewal after one sent at `t0`: on a grid of renew periods,
    /// so every elector of this process with the same period renews at the
    /// same instants and the store can batch them. It is never later than
    /// `t0 + renew_period` (sometimes earlier, which is always safe).
    pub(crate) fn next_renewal(&self, t0: Duration) -> Duration {
        next_on_grid(t0, self.renew_period)
    }

    /// The next check for a due member heartbeat after `now`: on a grid of
    /// heartbeat ticks, so the members of every election of this process
    /// heartbeat together and the store writes them in one statement.
    pub(crate) fn next_heartbeat(&self, now: Duration) -> Duration {
        next_on_grid(now, self.heartbeat_tick)
    }

    /// Whether a registration last refreshed `age` ago needs a heartbeat at
    /// this tick. Checked every tick, it is never older than the period plus
    /// a tick (1.8 TTLs): fresh by `MemberRecord::is_fresh` (two TTLs) and
    /// far from lapsing (`member_ttl`, three).
    pub(crate) fn heartbeat_due(&self, age: Duration) -> bool {
        age >= self.heartbeat_period
    }

    /// How long a supervisor may take to stop its work before the deadline,
    /// at most: from the latest moment a healthy renewal lands (one renew
    /// period plus a round trip after the previous one was sent) to the
    /// deadline that previous renewal set. A longer stop lead would make a
    /// healthy leader stop its work every period.
    pub(crate) fn stop_budget(&self) -> Duration {
        self.deadline(Duration::ZERO, Duration::ZERO)
            .saturating_sub(self.renew_period + self.round_trip_allowance())
    }

    fn round_trip_allowance(&self) -> Duration {
        ROUND_TRIP_ALLOWANCE.min(self.ttl / 10)
    }
}

/// The first multiple of `period` after `t` (at most `period` later).
fn next_on_grid(t: Duration, period: Duration) -> Duration {
    let p = period.as_nanos().max(1);
    let slot = (t + period).as_nanos() / p * p;
    let next = Duration::from_nanos(u64::try_from(slot).unwrap_or(u64::MAX));
    if next <= t {
        t + period
    } else {
        next
    }
}

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
    if renew_period < MIN_RENEW_PERIOD {
        return Err(Error::config(
            "renew period",
            format!("{renew_period:?} is too short: renewing more often than every {MIN_RENEW_PERIOD:?} only loads the store; use at least {MIN_RENEW_PERIOD:?} (default ttl/3)"),
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
    let timing = Timing::new(
        ttl,
        renew_period,
        (ttl / 10).min(renew_period),
        DEFAULT_POLL,
        DEFAULT_DRIFT,
    );
    let room = timing.stop_budget();
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
                renew_period + timing.round_trip_allowance(),
                timing.deadline(Duration::ZERO, Duration::ZERO),
                room.saturating_sub(Duration::from_millis(1)),
                Duration::from_millis(fitting_ttl.as_millis() as u64 + 1),
            ),
        ));
    }
    Ok(())
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

pub(crate) fn random_session() -> String {
    format!("{:016x}", crate::random::u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn request() -> Request {
        Request {
            election: Some("e".into()),
            ..Request::default()
        }
    }

    fn config(request: &Request) -> Result<Config> {
        Config::new(request, &Capabilities::default(), "memory://")
    }

    #[test]
    fn defaults_fit_the_supervision_budget_at_every_ttl() {
        for ms in [100, 150, 250, 500, 1_000, 2_000, 10_000, 60_000, 86_400_000] {
            let ttl = MS(ms);
            // `tenure run`'s default kill grace: ttl/4, at most 5 s.
            let grace = (ttl / 4).min(Duration::from_secs(5));
            check_supervised_timing(ttl, None, grace)
                .unwrap_or_else(|e| panic!("defaults at ttl {ttl:?}: {e}"));
        }
        let err = check_supervised_timing(MS(1_000), Some(MS(490)), MS(490)).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
        // The suggested setting works.
        check_supervised_timing(MS(1_000), Some(MS(490)), MS(399)).unwrap();
        assert!(check_supervised_timing(MS(0), None, MS(1))
            .unwrap_err()
            .to_string()
            .starts_with("invalid ttl"));
        assert!(check_supervised_timing(MS(1_000), Some(MS(600)), MS(1))
            .unwrap_err()
            .to_string()
            .starts_with("invalid renew period"));
    }

    #[test]
    fn settings_are_validated_with_reasons() {
        let check = |r: Request, want: &str| {
            let e = config(&r).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
            assert!(e.is_usage());
        };
        check(
            Request {
                ttl: MS(50),
                ..request()
            },
            "invalid ttl: 50ms is too small; the minimum is 100ms",
        );
        check(
            Request {
                ttl: MS(1000),
                renew_period: Some(MS(600)),
                ..request()
            },
            "renew period: 600ms must be above zero and below ttl/2 = 500ms",
        );
        check(
            Request {
                ttl: MS(1000),
                renew_period: Some(Duration::from_nanos(1)),
                ..request()
            },
            "renew period: 1ns is too short: renewing more often than every 10ms only loads the store; use at least 10ms",
        );
        assert!(config(&Request {
            ttl: MS(1000),
            renew_period: Some(MIN_RENEW_PERIOD),
            ..request()
        })
        .is_ok());
        check(Request::default(), "election: is required");
        check(
            Request {
                election: Some(String::new()),
                ..request()
            },
            "must not be empty",
        );
        check(
            Request {
                namespace: "a\tb".into(),
                ..request()
            },
            "invalid namespace",
        );
        check(
            Request {
                retry_period: Some(Duration::from_secs(9)),
                ..request()
            },
            "retry period",
        );
        check(
            Request {
                drift: 0.5,
                ..request()
            },
            "drift",
        );
        let caps = Capabilities {
            min_ttl: Duration::from_secs(1),
            ..Capabilities::default()
        };
        let e = Config::new(
            &Request {
                ttl: MS(500),
                ..request()
            },
            &caps,
            "etcd://x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("too small for etcd://x"), "{e}");
    }

    #[test]
    fn the_default_retry_period_never_exceeds_a_short_renew_period() {
        let c = config(&Request {
            ttl: Duration::from_secs(2),
            renew_period: Some(MS(100)),
            ..request()
        })
        .unwrap();
        assert_eq!(c.timing.retry_period, MS(100));
        let c = config(&request()).unwrap();
        assert_eq!(c.timing.retry_period, Duration::from_secs(1));
    }

    #[test]
    fn holder_ids_differ_per_elector_with_same_identity() {
        let r = Request {
            identity: Some("svc".into()),
            ..request()
        };
        let a = config(&r).unwrap();
        let b = config(&r).unwrap();
        assert_ne!(a.holder, b.holder);
        assert!(a.holder.starts_with("svc#"));
    }

    #[test]
    fn deadline_is_conservative() {
        let t = config(&request()).unwrap().timing;
        let t0 = Duration::from_secs(100);
        assert_eq!(t.deadline(t0, MS(1)), t0 + MS(9900 - 50));
        assert_eq!(t.deadline(t0, MS(400)), t0 + MS(9900 - 800));
        // The margin never exceeds a quarter of the TTL.
        assert_eq!(
            t.deadline(t0, Duration::from_secs(100)),
            t0 + MS(9900 - 2500)
        );
    }

    #[test]
    fn derived_durations_at_the_default_ttl() {
        let t = config(&request()).unwrap().timing;
        let want = Timing {
            ttl: MS(10_000),
            renew_period: MS(3_333),
            retry_period: MS(1_000),
            poll_period: MS(80),
            push_down_poll: MS(1_000),
            drift: 0.01,
            min_margin: MS(50),
            handover_window: MAX_TTL,
            preempt_after: None,
            call_budget: MS(5_000),
            leader_read_timeout: MS(2_500),
            handover_timeout: MS(5_000),
            release_timeout: MS(2_000),
            lost_release_timeout: MS(10_000),
            leave_timeout: MS(1_000),
            reap_timeout: MS(5_000),
            settle: MS(2),
            succession_grace: MS(180),
            push_succession_grace: MS(250),
            push_check_period: MS(10_000),
            hold_off: MS(250),
            refused_free_retry: MS(20),
            pushed_read_retry: MS(100),
            first_renew_retry: MS(5),
            heartbeat_period: MS(13_000),
            heartbeat_tick: MS(5_000),
            heartbeat_timeout: MS(10_000),
            member_ttl: MS(30_000),
            reap_period: MS(300_000),
        };
        assert_eq!(
            Timing {
                renew_period: MS(3_333),
                ..t
            },
            want
        );
    }

    #[test]
    fn derived_durations_at_the_minimum_ttl() {
        let t = config(&Request {
            ttl: MIN_TTL,
            poll_period: Some(MS(5)),
            ..request()
        })
        .unwrap()
        .timing;
        // Budgets keep a floor where a fraction of 100 ms would be useless.
        assert_eq!(t.call_budget, MS(50));
        assert_eq!(t.release_timeout, MS(50));
        assert_eq!(t.leave_timeout, MS(25));
        assert_eq!(t.hold_off, MS(250));
        // The margin is a quarter of the TTL at most: 25 ms, not 50.
        assert_eq!(t.deadline(Duration::ZERO, Duration::ZERO), MS(99) - MS(25));
        // A renewal every 33.3 ms landing within 10 ms leaves 30.7 ms to stop work.
        assert_eq!(t.renew_period, Duration::from_nanos(33_333_333));
        assert_eq!(t.stop_budget(), MS(74) - t.renew_period - MS(10));
    }

    #[test]
    fn renewals_fall_on_a_shared_grid_never_later_than_a_period() {
        let t = config(&Request {
            ttl: MS(3_000),
            ..request()
        })
        .unwrap()
        .timing;
        assert_eq!(t.renew_period, MS(1_000));
        assert_eq!(t.next_renewal(MS(2_500)), MS(3_000));
        assert_eq!(t.next_renewal(MS(3_000)), MS(4_000));
        assert_eq!(t.next_renewal(MS(3_999)), MS(4_000));
        assert_eq!(t.heartbeat_tick, MS(1_500));
        assert_eq!(t.next_heartbeat(MS(2_500)), MS(3_000));
        assert_eq!(t.next_heartbeat(MS(3_000)), MS(4_500));
    }

    #[test]
    fn registrations_stay_fresh_between_ticks() {
        let t = config(&Request {
            ttl: MS(3_000),
            ..request()
        })
        .unwrap()
        .timing;
        // A follower whose last read (carrying a heartbeat) was one TTL ago,
        // as reads at each lease expiry are, is left alone, and so is one
        // not first in line, whose reads are 1 to 1.25 TTLs apart.
        assert!(!t.heartbeat_due(MS(3_000) + t.settle));
        assert!(!t.heartbeat_due(MS(3_750) + t.settle));
        assert!(t.heartbeat_due(MS(3_900)));
        // The worst case: just short of due at a tick, refreshed at the next.
        let age = t.heartbeat_period - MS(1) + t.heartbeat_tick;
        assert!(t.heartbeat_due(age));
        assert!(age < 2 * t.ttl, "fresh: younger than two TTLs");
        assert!(age < t.member_ttl);
    }
}
