//! `tenure run`: campaign, run the command while leader, stop it before the lease can lapse.

use std::time::Duration;

use tenure::{Elector, HandoverHold, Leadership, State};

use crate::candidacy::{Candidacy, Held};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::RunArgs;
use crate::failure::Failure;
use crate::job::{self, exit_code, Exit, Guard, Job, Launch};
use crate::once::{Attempt, Begin, Once};

/// Exit code of `--exit-on-loss` when leadership was lost.
const EXIT_LOST: u8 = 3;
/// Exit code of `--no-wait` and `--timeout` when this replica did not lead
/// (EX_TEMPFAIL of sysexits.h: try again later).
pub const EXIT_NOT_LEADER: u8 = 75;

/// The signals that stop `tenure run` gracefully: the job is stopped (with
/// its kill grace), the lease released, and tenure exits with 128 + the
/// signal's number. SIGHUP, SIGUSR1, SIGUSR2 and SIGALRM would otherwise end
/// tenure by their default action, leaving the lease to expire.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    alrm: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        let on = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|e| Failure::Runtime(format!("cannot install a handler for {name}: {e}")))
        };
        Ok(Self {
            int: on(SignalKind::interrupt(), "SIGINT")?,
            term: on(SignalKind::terminate(), "SIGTERM")?,
            hup: on(SignalKind::hangup(), "SIGHUP")?,
            usr1: on(SignalKind::user_defined1(), "SIGUSR1")?,
            usr2: on(SignalKind::user_defined2(), "SIGUSR2")?,
            alrm: on(SignalKind::alarm(), "SIGALRM")?,
        })
    }

    /// Waits for one of the stop signals and returns the exit code that reports it.
    async fn next(&mut self) -> u8 {
        let (number, name) = tokio::select! {
            _ = self.int.recv() => (libc::SIGINT, "SIGINT"),
            _ = self.term.recv() => (libc::SIGTERM, "SIGTERM"),
            _ = self.hup.recv() => (libc::SIGHUP, "SIGHUP"),
            _ = self.usr1.recv() => (libc::SIGUSR1, "SIGUSR1"),
            _ = self.usr2.recv() => (libc::SIGUSR2, "SIGUSR2"),
            _ = self.alrm.recv() => (libc::SIGALRM, "SIGALRM"),
        };
        tracing::info!("{name} received: stopping");
        128 + number as u8
    }
}

enum After {
    Campaign,
    Exit(u8),
}

pub async fn run(a: RunArgs) -> Result<u8, Failure> {
    let grace = a
        .kill_grace
        .unwrap_or_else(|| (a.ttl / 4).min(Duration::from_secs(5)));
    // --ttl, then --renew-period, then --kill-grace, each alone and together.
    tenure::check_supervised_timing(a.ttl, a.renew_period, grace).map_err(|e| {
        let flag = match &e {
            tenure::Error::InvalidConfig { field: "ttl", .. } => "--ttl",
            tenure::Error::InvalidConfig {
                field: "renew period",
                ..
            } => "--renew-period",
            _ => "--kill-grace",
        };
        Failure::Usage(format!("{flag}: {e}"))
    })?;
    let program = &a.command[0];
    if job::resolve(program).is_none() {
        return Err(Failure::Usage(format!(
            "command not found or not executable: {program:?}"
        )));
    }
    let token = crate::serve::read_token(a.token_file.as_deref())?;
    let limits = crate::serve::limits(&a.http_limits)?;
    let listener = match &a.http {
        Some(addr) => {
            let listener = crate::serve::bind(addr).await?;
            crate::serve::install_metrics();
            Some(listener)
        }
        None => None,
    };
    // The candidate's own settings are judged before the store is asked for.
    tenure::validate_name("election", &a.election)?;
    tenure::validate_name("namespace", &a.namespace)?;
    if let Some(id) = &a.identity {
        tenure::validate_identity(id)?;
    }
    tenure::validate_metadata(&a.metadata)?;
    let priority = u32::try_from(a.priority)
        .ok()
        .filter(|p| *p <= tenure::MAX_PRIORITY)
        .ok_or_else(|| {
            Failure::Usage(format!(
                "invalid priority: {} is out of range; use 0 to {} (higher takes over first)",
                a.priority,
                tenure::MAX_PRIORITY
            ))
        })?;
    a.store.require_named("tenure run")?;
    let mut signals = Signals::new()?;
    // A full server is waited for like any follower's refused read, within
    // `--timeout` if given; `--no-wait` fails at once.
    let store = if a.no_wait {
        a.store.connect().await?
    } else {
        let limit = a.timeout.unwrap_or(Duration::MAX);
        tokio::select! {
            s = a.store.connect_waiting(a.wait) => s?,
            code = signals.next() => return Ok(code),
            () = tokio::time::sleep(limit) => {
                tracing::warn!(after = ?limit, "no store connection within --timeout; not running the command (exit {EXIT_NOT_LEADER})");
                return Ok(EXIT_NOT_LEADER);
            }
        }
    };
    tracing::info!("store: {}", store.describe());
    // `--once`: a KEY already settled needs no campaign at all.
    let once = match &a.once {
        Some(name) => {
            let key = tenure::store::ElectionKey::new(a.namespace.clone(), a.election.clone());
            let once = Once::new(store.clone(), key, name.clone(), a.attempts, a.keep)?;
            if let Some(code) = once.settled().await? {
                return Ok(code);
            }
            Some(once)
        }
        None => None,
    };
    let mut builder = Elector::builder(store.clone())
        .priority(priority)
        .namespace(a.namespace.clone())
        .election(a.election.clone())
        .ttl(a.ttl)
        .metadata(a.metadata.clone());
    if let Some(id) = &a.identity {
        builder = builder.identity(id.clone());
    }
    if let Some(p) = a.renew_period {
        builder = builder.renew_period(p);
    }
    if let Some(p) = a.preempt_after {
        builder = builder.preempt_after(p);
    }
    let candidacy = match a.slots {
        1 => Candidacy::One(builder.build()?),
        n => Candidacy::Slots(builder.build_semaphore(n as usize)?),
    };
    // The HTTP API for the supervised election (ends with the process).
    let _http = listener.map(|l| {
        crate::serve::announce(&l);
        crate::serve::spawn(l, store, candidacy.single(), token, None, limits)
    });
    // The guard starts now, once: starting a job later costs what it did
    // without a guard (one fork and exec).
    let env = [
        ("TENURE_ELECTION", a.election.clone()),
        ("TENURE_NAMESPACE", a.namespace.clone()),
        ("TENURE_HOLDER", candidacy.holder_id().to_string()),
    ];
    let mut guard = match Guard::start(&a.command, &env) {
        Ok(g) => g,
        Err(e) => {
            let _ = candidacy.shutdown().await;
            return Err(Failure::Runtime(format!(
                "cannot start the job's guard: {e}"
            )));
        }
    };
    tracing::info!(election = %a.election, slots = a.slots, holder = candidacy.holder_id(), "campaigning");
    for e in candidacy.electors() {
        tokio::spawn(log_leaders(e.election().election.clone(), e.leadership()));
    }
    // `--once` and `--no-wait` take one election (the arguments forbid
    // them with `--slots`).
    let first_elector = &candidacy.electors()[0];

    let mut first = Some(FirstWait::from_args(&a));
    loop {
        let held = tokio::select! {
            l = acquire(&candidacy, first.take()) => match l? {
                Some(l) => l,
                None => {
                    let _ = candidacy.shutdown().await;
                    return Ok(EXIT_NOT_LEADER);
                }
            },
            code = signals.next() => {
                let _ = candidacy.shutdown().await;
                return Ok(code);
            }
            settled = settled_elsewhere(once.as_ref(), first_elector.leadership()) => {
                let _ = candidacy.shutdown().await;
                return settled;
            }
        };
        let leadership = &held.leadership;
        let attempt = match &once {
            Some(once) => match once.begin(leadership).await {
                Ok(Begin::Run(attempt)) => Some((once, attempt)),
                Ok(Begin::Settled(code)) => {
                    release_lease(&candidacy).await;
                    return Ok(code);
                }
                Err(e) => {
                    // The record could not be read or written (a store
                    // blip): the job does not run without it. Hand over
                    // and try again as a follower.
                    tracing::warn!("--once: {e}; handing over and trying again");
                    let _ = held.elector.resign().await;
                    continue;
                }
            },
            None => None,
        };
        match lead(
            &a,
            &candidacy,
            &mut guard,
            &held,
            &mut signals,
            grace,
            attempt,
        )
        .await?
        {
            After::Campaign => continue,
            After::Exit(code) => return Ok(code),
        }
    }
}

/// With `--once`, resolves with the code to exit with once KEY is settled
/// by another replica: the record is read whenever leadership moves (the
/// runner writes the outcome before it lets the lease go). Never without.
async fn settled_elsewhere(
    once: Option<&Once>,
    mut state: tokio::sync::watch::Receiver<State>,
) -> Result<u8, Failure> {
    let Some(once) = once else {
        return std::future::pending().await;
    };
    loop {
        if state.changed().await.is_err() {
            return std::future::pending().await;
        }
        // This replica's own acquisition reads the record itself.
        if matches!(*state.borrow_and_update(), State::Leading { .. }) {
            continue;
        }
        match once.settled().await {
            Ok(Some(code)) => return Ok(code),
            Ok(None) => {}
            Err(e) => tracing::warn!("--once: {e}"),
        }
    }
}

/// How long the first acquisition may take (`--no-wait`, `--timeout`).
#[derive(Clone, Copy, Debug)]
enum FirstWait {
    /// As long as it takes.
    Forever,
    /// Give up as soon as another replica is seen leading.
    NoWait { ttl: Duration },
    /// Give up after this long.
    Within(Duration),
}

impl FirstWait {
    fn from_args(a: &RunArgs) -> Self {
        match (a.no_wait, a.timeout) {
            (true, _) => FirstWait::NoWait { ttl: a.ttl },
            (false, Some(d)) => FirstWait::Within(d),
            (false, None) => FirstWait::Forever,
        }
    }
}

/// Waits to lead; `None` when `--no-wait`/`--timeout` gave up first.
async fn acquire(candidacy: &Candidacy, wait: Option<FirstWait>) -> Result<Option<Held>, Failure> {
    let (elector, ttl) = match (wait, candidacy) {
        (Some(FirstWait::NoWait { ttl }), Candidacy::One(e)) => (e, ttl),
        _ => return acquire_within(candidacy, wait).await,
    };
    // The first read decides: another replica leads, or this one
    // acquires (a free lease is taken within milliseconds). Bounded
    // by a TTL for a store that does not answer.
    let mut state = elector.leadership();
    let decided = tokio::time::timeout(ttl, async {
                loop {
                    let following = match &*state.borrow_and_update() {
                        State::Leading { .. } => return Ok(true),
                        State::Following { leader, term } => Some((leader.clone(), *term)),
                        _ => None,
                    };
                    if let Some((leader, term)) = following {
                        tracing::warn!(leader = %leader, term, "another replica leads; not running the command (--no-wait, exit {EXIT_NOT_LEADER})");
                        return Ok(false);
                    }
                    if state.changed().await.is_err() {
                        return Err(Failure::from(tenure::Error::Shutdown));
                    }
                }
            })
            .await;
    match decided {
        Ok(Ok(true)) => Ok(candidacy.current()),
        Ok(Ok(false)) => Ok(None),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            tracing::warn!("no leader could be determined within a TTL; not running the command (--no-wait, exit {EXIT_NOT_LEADER})");
            Ok(None)
        }
    }
}

/// Waits to lead, as long as it takes or within `--timeout`.
async fn acquire_within(
    candidacy: &Candidacy,
    wait: Option<FirstWait>,
) -> Result<Option<Held>, Failure> {
    match wait {
        Some(FirstWait::Within(limit)) => {
            match tokio::time::timeout(limit, candidacy.acquired()).await {
                Ok(l) => Ok(Some(l?)),
                Err(_) => {
                    tracing::warn!(after = ?limit, "not leader within --timeout; not running the command (exit {EXIT_NOT_LEADER})");
                    Ok(None)
                }
            }
        }
        _ => Ok(Some(candidacy.acquired().await?)),
    }
}

/// Logs who leads `election` whenever it changes, so a follower's log says
/// whom it waits for (this replica's own tenures are logged where they start).
async fn log_leaders(election: String, mut state: tokio::sync::watch::Receiver<State>) {
    let mut last: Option<State> = None;
    loop {
        let now = state.borrow_and_update().clone();
        if last.as_ref() != Some(&now) {
            match &now {
                State::Following { leader, term } => tracing::info!(
                    election = %election,
                    leader = tenure::store::identity_of(leader),
                    holder = %leader,
                    term,
                    "following"
                ),
                State::NoLeader if last.is_some() => {
                    tracing::info!(election = %election, "no leader")
                }
                _ => {}
            }
            last = Some(now);
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}

/// Runs the command for one tenure.
///
/// The tenure is held ([`Leadership::hold`]) for as long as the command may
/// run: a resign, transfer or preemption first stops the command (SIGTERM,
/// the kill grace, SIGKILL, and the guard's word that its whole tree is
/// gone) and only then lets the elector hand the lease over.
async fn lead(
    a: &RunArgs,
    candidacy: &Candidacy,
    guard: &mut Guard,
    held: &Held,
    signals: &mut Signals,
    grace: Duration,
    mut once: Option<(&Once, Attempt)>,
) -> Result<After, Failure> {
    let (elector, leadership) = (&held.elector, &held.leadership);
    let hold = leadership.hold();
    let mut renewals = leadership.clone();
    let mut restart_delay = Duration::from_millis(100);
    loop {
        // Start only with more lease left than the kill grace, or the job
        // could not be given its SIGTERM grace; otherwise wait for renewals.
        // Renewals that keep leaving too little (a store path too slow for
        // this kill grace) mean this tenure cannot run the job: after a TTL
        // of them, resign, so that another candidate can.
        let give_up = tokio::time::Instant::now() + a.ttl;
        while leadership.remaining() <= grace {
            tokio::select! {
                biased;
                code = signals.next() => {
                    release(candidacy, hold).await;
                    return Ok(After::Exit(code));
                }
                _ = leadership.stepping_down() => return stepped_down(a, candidacy, leadership, hold).await,
                renewed = renewals.renewed() => if renewed.is_none() {
                    return lost(a, candidacy, elector, leadership, hold).await;
                },
                _ = tokio::time::sleep_until(give_up) => if leadership.remaining() <= grace {
                    tracing::warn!(
                        left = ?leadership.remaining(),
                        kill_grace = ?grace,
                        "renewals leave no more lease than the kill grace (a slow store?); \
                         resigning so that another candidate can run the command"
                    );
                    return lost(a, candidacy, elector, leadership, hold).await;
                },
            }
        }
        let Some(deadline) = leadership.deadline() else {
            return lost(a, candidacy, elector, leadership, hold).await;
        };
        if leadership.is_stepping_down() {
            return stepped_down(a, candidacy, leadership, hold).await;
        }
        let launch = Launch {
            term: leadership.term(),
            attempt: once.as_ref().map_or(0, |(_, at)| at.number),
            slot: held.slot,
        };
        let mut child = match guard.spawn(launch, deadline).await {
            Ok(c) => c,
            // tenure was not scheduled in time and the deadline passed.
            Err(_) if !leadership.is_valid() => {
                return lost(a, candidacy, elector, leadership, hold).await
            }
            Err(e) => {
                drop(hold);
                let _ = candidacy.shutdown().await;
                return Err(Failure::Runtime(format!(
                    "cannot start {:?}: {e}",
                    a.command[0]
                )));
            }
        };
        tracing::info!(
            term = leadership.term(),
            slot = held.slot,
            pid = child.pid(),
            cgroup = child.in_cgroup(),
            "leader: command started"
        );
        let started = std::time::Instant::now();
        let exit = loop {
            tokio::select! {
                biased;
                code = signals.next() => {
                    stop(&mut child, Some(leadership), grace, "tenure was asked to stop").await;
                    release(candidacy, hold).await;
                    return Ok(After::Exit(code));
                }
                _ = leadership.expiring(grace) => {
                    stop(&mut child, Some(leadership), grace, "leadership is ending").await;
                    return lost(a, candidacy, elector, leadership, hold).await;
                }
                // A resign, transfer or preemption: the same stop as on
                // SIGTERM, and the lease goes only once the job is gone.
                _ = leadership.stepping_down() => {
                    stop(&mut child, Some(leadership), grace, "asked to hand over").await;
                    return stepped_down(a, candidacy, leadership, hold).await;
                }
                exit = child.wait() => break exit,
                // Every renewal moves the guard's deadline with it.
                Some(deadline) = renewals.renewed() => child.extend(deadline),
            }
        };
        let exit = exit.unwrap_or(Exit {
            status: job::JobStatus::Code(1),
            lapsed: false,
        });
        if exit.lapsed {
            // The guard killed the job at the deadline: tenure itself was not
            // scheduled in time (stopped, starved). The tenure is over.
            tracing::warn!(
                "the lease deadline passed before tenure could renew; the guard killed the command"
            );
            return lost(a, candidacy, elector, leadership, hold).await;
        }
        let code = exit_code(exit.status);
        if a.restart && leadership.is_valid() {
            tracing::warn!(code, "command exited; restarting (--restart)");
            if started.elapsed() > Duration::from_secs(10) {
                restart_delay = Duration::from_millis(100);
            }
            // The back-off races the end of the tenure and signals.
            tokio::select! {
                biased;
                code = signals.next() => {
                    release(candidacy, hold).await;
                    return Ok(After::Exit(code));
                }
                _ = leadership.stepping_down() => return stepped_down(a, candidacy, leadership, hold).await,
                _ = tokio::time::sleep(restart_delay) => {}
            }
            restart_delay = (restart_delay * 2).min(Duration::from_secs(5));
            // Start again only under this same tenure (the loop waits for a
            // renewal if too little of it is left).
            if elector.term() == Some(leadership.term()) {
                continue;
            }
            return lost(a, candidacy, elector, leadership, hold).await;
        }
        if let Some((once, attempt)) = once.take() {
            // The outcome is written while the lease is still ours.
            return match once.finish(attempt, code).await {
                Ok(Some(settled)) => {
                    release(candidacy, hold).await;
                    Ok(After::Exit(settled))
                }
                Ok(None) => {
                    // Failed, with attempts left: the next leader (maybe
                    // this replica again) tries again.
                    drop(hold);
                    let _ = elector.resign().await;
                    Ok(After::Campaign)
                }
                Err(e) => {
                    release(candidacy, hold).await;
                    Err(e)
                }
            };
        }
        tracing::info!(code, "command exited; releasing the lease");
        release(candidacy, hold).await;
        return Ok(After::Exit(code));
    }
}

/// After the command was stopped because the tenure ended, or when the
/// tenure cannot give a new command its kill grace.
async fn lost(
    a: &RunArgs,
    candidacy: &Candidacy,
    elector: &Elector,
    leadership: &Leadership,
    hold: HandoverHold,
) -> Result<After, Failure> {
    // The command is gone: the lease may go.
    drop(hold);
    // Hand over whatever is left of this tenure rather than sit on it
    // without the command; never a newer tenure.
    if elector.term() == Some(leadership.term()) {
        let _ = elector.resign().await;
    }
    if a.exit_on_loss {
        let _ = candidacy.shutdown().await;
        return Ok(After::Exit(EXIT_LOST));
    }
    Ok(After::Campaign)
}

/// After a hand-over was asked for and the command (if any) has stopped:
/// dropping the hold lets the elector hand the lease over.
async fn stepped_down(
    a: &RunArgs,
    candidacy: &Candidacy,
    leadership: &Leadership,
    hold: HandoverHold,
) -> Result<After, Failure> {
    tracing::info!(
        term = leadership.term(),
        "command stopped; handing the lease over"
    );
    drop(hold);
    if a.exit_on_loss {
        let _ = candidacy.shutdown().await;
        return Ok(After::Exit(EXIT_LOST));
    }
    Ok(After::Campaign)
}

async fn stop(child: &mut Job<'_>, leadership: Option<&Leadership>, grace: Duration, why: &str) {
    tracing::warn!(pid = child.pid(), "{why}: stopping the command");
    match child.stop(leadership, grace).await {
        Ok(exit) => tracing::info!(code = exit_code(exit.status), "command stopped"),
        Err(e) => tracing::error!("waiting for the command failed: {e}"),
    }
}

/// Releases the lease once the command is gone (the hold dropped first).
async fn release(candidacy: &Candidacy, hold: HandoverHold) {
    drop(hold);
    release_lease(candidacy).await;
}

/// Shuts the elector down, which releases the lease.
async fn release_lease(candidacy: &Candidacy) {
    if let Err(e) = candidacy.shutdown().await {
        tracing::warn!("could not release the lease ({e}); it expires by itself");
    }
}
