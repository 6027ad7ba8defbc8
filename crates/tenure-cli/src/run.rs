//! `tenure run`: campaign, run the command while leader, stop it before the lease can lapse.

use std::time::Duration;

use tenure::{Elector, Leadership};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::RunArgs;
use crate::failure::Failure;
use crate::job::{self, exit_code, Exit, Guard, Job};

/// Exit code of `--exit-on-loss` when leadership was lost.
const EXIT_LOST: u8 = 3;

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
        let f =
            |e: std::io::Error| Failure::Runtime(format!("cannot install signal handlers: {e}"));
        Ok(Self {
            int: signal(SignalKind::interrupt()).map_err(f)?,
            term: signal(SignalKind::terminate()).map_err(f)?,
        })
    }

    /// Waits for SIGINT or SIGTERM and returns the exit code that reports it.
    async fn next(&mut self) -> u8 {
        tokio::select! {
            _ = self.int.recv() => 128 + libc::SIGINT as u8,
            _ = self.term.recv() => 128 + libc::SIGTERM as u8,
        }
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
    let listener = match &a.http {
        Some(addr) => Some(crate::serve::bind(addr).await?),
        None => None,
    };
    let mut signals = Signals::new()?;
    let store = if a.wait {
        tokio::select! {
            s = a.store.connect_waiting() => s?,
            code = signals.next() => return Ok(code),
        }
    } else {
        a.store.connect().await?
    };
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
    let elector = builder.build()?;
    // The HTTP API for the supervised election (ends with the process).
    let _http = listener.map(|l| {
        crate::serve::announce(&l);
        crate::serve::spawn(l, store, Some(elector.clone()), token, None)
    });
    // The guard starts now, once: starting a job later costs what it did
    // without a guard (one fork and exec).
    let env = [
        ("TENURE_ELECTION", a.election.clone()),
        ("TENURE_NAMESPACE", a.namespace.clone()),
        ("TENURE_HOLDER", elector.holder_id().to_string()),
    ];
    let mut guard = match Guard::start(&a.command, &env) {
        Ok(g) => g,
        Err(e) => {
            let _ = elector.shutdown().await;
            return Err(Failure::Runtime(format!(
                "cannot start the job's guard: {e}"
            )));
        }
    };
    tracing::info!(election = %elector.election(), holder = elector.holder_id(), "campaigning");

    loop {
        let leadership = tokio::select! {
            l = elector.acquired() => l?,
            code = signals.next() => {
                let _ = elector.shutdown().await;
                return Ok(code);
            }
        };
        match lead(&a, &elector, &mut guard, &leadership, &mut signals, grace).await? {
            After::Campaign => continue,
            After::Exit(code) => return Ok(code),
        }
    }
}

/// Runs the command for one tenure.
async fn lead(
    a: &RunArgs,
    elector: &Elector,
    guard: &mut Guard,
    leadership: &Leadership,
    signals: &mut Signals,
    grace: Duration,
) -> Result<After, Failure> {
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
                    release(elector).await;
                    return Ok(After::Exit(code));
                }
                renewed = renewals.renewed() => if renewed.is_none() {
                    return lost(a, elector, leadership).await;
                },
                _ = leadership.lost() => return lost(a, elector, leadership).await,
                _ = tokio::time::sleep_until(give_up) => if leadership.remaining() <= grace {
                    tracing::warn!(
                        left = ?leadership.remaining(),
                        kill_grace = ?grace,
                        "renewals leave no more lease than the kill grace (a slow store?); \
                         resigning so that another candidate can run the command"
                    );
                    return lost(a, elector, leadership).await;
                },
            }
        }
        let Some(deadline) = leadership.deadline() else {
            return lost(a, elector, leadership).await;
        };
        let mut child = match guard.spawn(leadership.term(), deadline).await {
            Ok(c) => c,
            // tenure was not scheduled in time and the deadline passed.
            Err(_) if !leadership.is_valid() => return lost(a, elector, leadership).await,
            Err(e) => {
                let _ = elector.shutdown().await;
                return Err(Failure::Runtime(format!(
                    "cannot start {:?}: {e}",
                    a.command[0]
                )));
            }
        };
        tracing::info!(
            term = leadership.term(),
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
                    release(elector).await;
                    return Ok(After::Exit(code));
                }
                _ = leadership.expiring(grace) => {
                    stop(&mut child, Some(leadership), grace, "leadership is ending").await;
                    return lost(a, elector, leadership).await;
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
            return lost(a, elector, leadership).await;
        }
        let code = exit_code(exit.status);
        if a.restart && leadership.is_valid() {
            tracing::warn!(code, "command exited; restarting (--restart)");
            if started.elapsed() > Duration::from_secs(10) {
                restart_delay = Duration::from_millis(100);
            }
            // The back-off races the end of the tenure and signals.
            tokio::select! {
                _ = tokio::time::sleep(restart_delay) => {}
                _ = leadership.lost() => return lost(a, elector, leadership).await,
                code = signals.next() => {
                    release(elector).await;
                    return Ok(After::Exit(code));
                }
            }
            restart_delay = (restart_delay * 2).min(Duration::from_secs(5));
            // Start again only under this same tenure (the loop waits for a
            // renewal if too little of it is left).
            if elector.term() == Some(leadership.term()) {
                continue;
            }
            return lost(a, elector, leadership).await;
        }
        tracing::info!(code, "command exited; releasing the lease");
        release(elector).await;
        return Ok(After::Exit(code));
    }
}

/// After the command was stopped because the tenure ended, or when the
/// tenure cannot give a new command its kill grace.
async fn lost(a: &RunArgs, elector: &Elector, leadership: &Leadership) -> Result<After, Failure> {
    // Hand over whatever is left of this tenure rather than sit on it
    // without the command; never a newer tenure.
    if elector.term() == Some(leadership.term()) {
        let _ = elector.resign().await;
    }
    if a.exit_on_loss {
        let _ = elector.shutdown().await;
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

async fn release(elector: &Elector) {
    if let Err(e) = elector.shutdown().await {
        tracing::warn!("could not release the lease ({e}); it expires by itself");
    }
}
