//! The supervised job: started through a guard process that kills it at the
//! lease deadline whatever happens to `tenure run`.
//!
//! `tenure run` (this side) starts `tenure __guard` once, with one end of a
//! socket pair; for each tenure it sends the local deadline and a start
//! request, then the new deadline after every renewal, and asks the guard to
//! SIGTERM or SIGKILL the job on a normal stop. The
//! guard (`guard.rs`) is the backstop: it SIGKILLs the job's process group
//! (and cgroup, `cgroup.rs`, and orphaned descendants, `reap.rs`) when the
//! deadline passes without an extension, and at once when the socket reaches
//! end of file because `tenure run` died. It does not need `tenure run` to be
//! scheduled: a stopped (SIGSTOP, Ctrl-Z), starved or blocked `tenure run`
//! cannot keep a job running past its lease.

mod cgroup;
pub mod guard;
mod reap;
mod spawn;
mod wire;

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tenure::clock::{BootClock, Clock};
use tenure::Leadership;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use wire::{FromGuard, ToGuard};
pub use wire::{JobStatus, Launch};

/// How long `tenure run` waits for the guard to answer a start request.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Without a lease deadline to bound it, how long after the grace this
/// side kills a job whose guard has not reported its stop.
const STOP_REPORT_SLACK: Duration = Duration::from_secs(1);
/// How long it waits for the report of a kill (the guard kills leftovers for
/// up to 5 s first).
const KILL_REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    pub status: JobStatus,
    /// The guard killed it because the deadline passed without an extension.
    pub lapsed: bool,
}

/// The guard process, started once per `tenure run`, idle between jobs.
#[derive(Debug)]
pub struct Guard {
    process: tokio::process::Child,
    /// Written with plain non-blocking writes: tokio's `try_write` would
    /// refuse until the reactor has seen the socket writable.
    to_guard: StdUnixStream,
    from_guard: Lines<BufReader<OwnedReadHalf>>,
    /// Kept, never used: dropping it would shut the socket down for writing,
    /// which the guard reads as tenure being gone.
    _unused_write_half: OwnedWriteHalf,
}

/// A running job, behind the guard.
#[derive(Debug)]
pub struct Job<'g> {
    guard: &'g mut Guard,
    pid: i32,
    cgroup: Option<String>,
    exit: Option<Exit>,
}

impl Guard {
    /// Starts the guard for `argv`, with extra environment variables for
    /// every job it will start.
    pub fn start(argv: &[String], env: &[(&str, String)]) -> io::Result<Guard> {
        if argv.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
        }
        let (ours, theirs) = StdUnixStream::pair()?;
        let theirs_fd = theirs.as_raw_fd();
        let mut cmd = tokio::process::Command::new(self_exe());
        // Shown in `ps` as `tenure __guard FD CMD...`.
        cmd.arg0(
            std::env::args_os()
                .next()
                .unwrap_or_else(|| "tenure".into()),
        )
        .arg(guard::MODE)
        .arg(theirs_fd.to_string())
        .args(argv)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // The store URL may carry a password; the job has no business with it.
        .env_remove("TENURE_STORE")
        .stdin(Stdio::null())
        // A group of its own: Ctrl-Z and signals to tenure's group do not
        // stop the guard, so it can still enforce the deadline.
        .process_group(0);
        // SAFETY: runs in the forked child before exec; fcntl is async-signal-safe.
        unsafe {
            cmd.as_std_mut().pre_exec(move || {
                // Hand the guard its end of the socket (created close-on-exec).
                if libc::fcntl(theirs_fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let process = cmd.spawn()?;
        drop(theirs);
        ours.set_nonblocking(true)?;
        let to_guard = ours.try_clone()?;
        let (rx, tx) = tokio::net::UnixStream::from_std(ours)?.into_split();
        Ok(Guard {
            process,
            to_guard,
            _unused_write_half: tx,
            from_guard: BufReader::new(rx).lines(),
        })
    }

    fn send(&self, msg: ToGuard) {
        // A handful of bytes to a guard that always reads: never blocks. If it
        // ever could not be sent, the guard keeps the older, earlier deadline,
        // which errs on the safe side.
        let _ = io::Write::write(&mut &self.to_guard, msg.encode().as_bytes());
    }

    async fn next_message(&mut self) -> Option<FromGuard> {
        loop {
            match self.from_guard.next_line().await {
                Ok(Some(line)) => {
                    if let Some(m) = FromGuard::decode(&line) {
                        return Some(m);
                    }
                }
                _ => return None,
            }
        }
    }

    /// Starts the job under `term`, to be killed at `deadline` (on
    /// [`BootClock`]) unless [`Job::extend`] moves it.
    /// The job's variables are the launch's ([`Launch::env`]).
    pub async fn spawn(&mut self, launch: Launch, deadline: Duration) -> io::Result<Job<'_>> {
        self.send(ToGuard::Deadline(deadline));
        self.send(ToGuard::Start(launch));
        let answer = tokio::time::timeout(START_TIMEOUT, async {
            loop {
                match self.next_message().await {
                    // A report of an earlier job nobody waited for.
                    Some(FromGuard::Exited { .. }) => continue,
                    other => return other,
                }
            }
        });
        match answer.await {
            Ok(Some(FromGuard::Started { pid, cgroup })) => Ok(Job {
                guard: self,
                pid,
                cgroup,
                exit: None,
            }),
            Ok(Some(FromGuard::Failed(why))) => Err(io::Error::other(why)),
            Ok(_) => {
                let status = self.process.wait().await?;
                Err(io::Error::other(format!(
                    "the job's guard exited ({status})"
                )))
            }
            Err(_) => {
                // Whatever it may still start must not run.
                self.send(ToGuard::Kill);
                Err(io::Error::other(
                    "the job's guard did not answer within 10s",
                ))
            }
        }
    }
}

/// The running binary, also when it was replaced on disk since it started.
fn self_exe() -> std::path::PathBuf {
    if cfg!(target_os = "linux") {
        "/proc/self/exe".into()
    } else {
        std::env::current_exe().unwrap_or_else(|_| "tenure".into())
    }
}

impl Job<'_> {
    /// The job's pid (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the job runs in a cgroup of its own (see docs/cli.md).
    pub fn in_cgroup(&self) -> bool {
        self.cgroup.is_some()
    }

    /// Moves the guard's deadline (after a renewal).
    pub fn extend(&self, deadline: Duration) {
        self.send(ToGuard::Deadline(deadline));
    }

    fn send(&self, msg: ToGuard) {
        self.guard.send(msg);
    }

    /// Waits until the job and everything it left behind are gone. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<Exit> {
        if let Some(e) = self.exit {
            return Ok(e);
        }
        let exit = loop {
            match self.guard.next_message().await {
                Some(FromGuard::Exited { status, lapsed }) => break Exit { status, lapsed },
                Some(_) => continue,
                None => {
                    // The guard died without a report (someone SIGKILLed it):
                    // kill what may be left ourselves.
                    let status = self.guard.process.wait().await?;
                    self.kill_leftovers();
                    return Err(io::Error::other(format!(
                        "the job's guard died ({status}); the job was killed"
                    )));
                }
            }
        };
        self.exit = Some(exit);
        Ok(exit)
    }

    fn kill_leftovers(&self) {
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        if let Some(dir) = &self.cgroup {
            cgroup::kill_dir(std::path::Path::new(dir));
            let _ = std::fs::remove_dir(dir);
        }
    }

    /// Kills the job now and waits (bounded) for the guard's report.
    async fn kill(&mut self) -> io::Result<Exit> {
        self.send(ToGuard::Kill);
        match tokio::time::timeout(KILL_REPORT_TIMEOUT, self.wait()).await {
            Ok(exit) => exit,
            Err(_) => {
                self.kill_leftovers();
                Err(io::Error::other(
                    "the job's guard did not report the kill in time; killed its group",
                ))
            }
        }
    }

    /// Stops the job: SIGTERM, then SIGKILL after `grace`, and in any case
    /// SIGKILL at the leadership's local deadline (which is before the lease can
    /// expire for others) or at once if leadership is already gone. The guard
    /// counts the grace from the SIGTERM it sends, so a guard that is slow to
    /// act still gives the job its grace within the deadline; this side
    /// kills at the deadline, or (without a leadership) a while after the
    /// grace, if the guard has not reported by then.
    pub async fn stop(
        &mut self,
        leadership: Option<&Leadership>,
        grace: Duration,
    ) -> io::Result<Exit> {
        let clock = BootClock;
        if self.exit.is_some() {
            return self.wait().await;
        }
        let still_valid = leadership.map(|l| l.is_valid()).unwrap_or(true);
        if !still_valid {
            return self.kill().await;
        }
        self.send(ToGuard::Terminate(grace));
        let term_sent = clock.now();
        loop {
            let kill_at = match leadership {
                None => term_sent + grace + STOP_REPORT_SLACK,
                Some(l) => match l.deadline() {
                    Some(d) => d,
                    None => clock.now(),
                },
            };
            let lost = async {
                match leadership {
                    Some(l) => l.lost().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                exit = self.wait() => return exit,
                _ = clock.sleep_until(kill_at) => return self.kill().await,
                // Leadership ended while we waited: recompute (kill now).
                _ = lost, if leadership.is_some_and(|l| l.is_valid()) => {}
            }
        }
    }
}

/// The exit code a shell would report for `status`.
pub fn exit_code(status: JobStatus) -> u8 {
    match status {
        JobStatus::Code(c) => (c & 0xff) as u8,
        JobStatus::Signal(sig) => (128 + sig).min(255) as u8,
    }
}

/// Finds `program` the way exec would, so a typo fails before campaigning.
pub fn resolve(program: impl AsRef<std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    which::which(program).ok()
}
