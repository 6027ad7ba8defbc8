//! `tenure run`: campaign, run the command while leader, stop it before the lease can lapse.

use std::time::Duration;

use tenure::{Elector, Leadership};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::RunArgs;
use crate::failure::Failure;
use crate::supervise::{self, exit_code, Child};

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
    let program = &a.command[0];
    if supervise::resolve(program).is_none() {
        return Err(Failure::Usage(format!(
            "command not found or not executable: {program:?}"
        )));
    }
    let grace = a
        .kill_grace
        .unwrap_or_else(|| (a.ttl / 4).min(Duration::from_secs(5)));
    if grace >= a.ttl / 2 {
        return Err(Failure::Usage(format!(
            "--kill-grace {grace:?} must be below ttl/2 = {:?}, so the command can be stopped before the lease expires",
            a.ttl / 2
        )));
    }
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
    let mut builder = Elector::builder(store)
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
    tracing::info!(election = %elector.election(), holder = elector.holder_id(), "campaigning");

    loop {
        let leadership = tokio::select! {
            l = elector.acquired() => l?,
            code = signals.next() => {
                let _ = elector.shutdown().await;
                return Ok(code);
            }
        };
        match lead(&a, &elector, &leadership, &mut signals, grace).await? {
            After::Campaign => continue,
            After::Exit(code) => return Ok(code),
        }
    }
}

/// Runs the command for one tenure.
async fn lead(
    a: &RunArgs,
    elector: &Elector,
    leadership: &Leadership,
    signals: &mut Signals,
    grace: Duration,
) -> Result<After, Failure> {
    let env = [
        ("TENURE_TERM", leadership.term().to_string()),
        ("TENURE_ELECTION", a.election.clone()),
        ("TENURE_NAMESPACE", a.namespace.clone()),
        ("TENURE_HOLDER", elector.holder_id().to_string()),
    ];
    let mut restart_delay = Duration::from_millis(100);
    loop {
        let mut child = match supervise::spawn(&a.command, &env) {
            Ok(c) => c,
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
            "leader: command started"
        );
        let started = std::time::Instant::now();
        tokio::select! {
            biased;
            code = signals.next() => {
                stop(&mut child, Some(leadership), grace, "tenure was asked to stop").await;
                release(elector).await;
                return Ok(After::Exit(code));
            }
            _ = leadership.expiring(grace) => {
                stop(&mut child, Some(leadership), grace, "leadership is ending").await;
                // Hand over whatever is left of this tenure rather than sit on it
                // without the command; never a newer tenure.
                if elector.term() == Some(leadership.term()) {
                    let _ = elector.resign().await;
                }
                if a.exit_on_loss {
                    let _ = elector.shutdown().await;
                    return Ok(After::Exit(EXIT_LOST));
                }
                return Ok(After::Campaign);
            }
            status = child.wait() => {
                let code = status.map(exit_code).unwrap_or(1);
                if a.restart && leadership.is_valid() {
                    tracing::warn!(code, "command exited; restarting (--restart)");
                    if started.elapsed() > Duration::from_secs(10) {
                        restart_delay = Duration::from_millis(100);
                    }
                    // The back-off races the end of the tenure and signals.
                    tokio::select! {
                        _ = tokio::time::sleep(restart_delay) => {}
                        _ = leadership.expiring(grace) => return Ok(After::Campaign),
                        code = signals.next() => {
                            release(elector).await;
                            return Ok(After::Exit(code));
                        }
                    }
                    restart_delay = (restart_delay * 2).min(Duration::from_secs(5));
                    // Start again only under this same tenure, with room to stop in time.
                    if leadership.remaining() > grace && elector.term() == Some(leadership.term()) {
                        continue;
                    }
                    return Ok(After::Campaign);
                }
                tracing::info!(code, "command exited; releasing the lease");
                release(elector).await;
                return Ok(After::Exit(code));
            }
        }
    }
}

async fn stop(child: &mut Child, leadership: Option<&Leadership>, grace: Duration, why: &str) {
    tracing::warn!(pid = child.pid(), "{why}: stopping the command");
    match child.stop(leadership, grace).await {
        Ok(status) => tracing::info!(code = exit_code(status), "command stopped"),
        Err(e) => tracing::error!("waiting for the command failed: {e}"),
    }
}

async fn release(elector: &Elector) {
    if let Err(e) = elector.shutdown().await {
        tracing::warn!("could not release the lease ({e}); it expires by itself");
    }
}
