//! The supervised child: its own process group, killed with us, stopped in time.
//!
//! The child runs in a new process group so that stopping it reaches everything
//! it started (unless something calls `setsid`). It is started with
//! `PR_SET_PDEATHSIG = SIGKILL`, so if tenure itself is killed with SIGKILL the
//! kernel kills the child too: leader-only work never outlives the process that
//! renews its lease. Processes the child started are not covered by that signal;
//! scripts should `exec` their final command (see README).

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tenure::clock::{BootClock, Clock};
use tenure::Leadership;

/// A running command in its own process group.
#[derive(Debug)]
pub struct Child {
    inner: tokio::process::Child,
    pgid: Pid,
}

/// Starts `argv` with extra environment variables, in a new process group.
pub fn spawn(argv: &[String], env: &[(&str, String)]) -> io::Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // The store URL may carry a password; the job has no business with it.
        .env_remove("TENURE_STORE")
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then no signal
            // would ever come, so do not start at all.
            if libc::getppid() != parent {
                return Err(io::Error::other("tenure exited while starting the command"));
            }
            Ok(())
        });
    }
    let inner = cmd.spawn()?;
    let pid = inner
        .id()
        .ok_or_else(|| io::Error::other("child exited before its pid was known"))?;
    Ok(Child {
        inner,
        pgid: Pid::from_raw(pid as i32),
    })
}

impl Child {
    /// The child's pid (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pgid.as_raw()
    }

    fn signal(&self, sig: Signal) {
        // ESRCH (group already empty) is fine.
        let _ = killpg(self.pgid, sig);
    }

    /// Waits for the child to exit, then kills whatever it left behind in its
    /// process group: leftovers would be leader work running without a lease.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let status = self.inner.wait().await;
        self.signal(Signal::SIGKILL);
        status
    }

    /// Stops the child: SIGTERM, then SIGKILL after `grace`, and in any case
    /// SIGKILL at the leadership's local deadline (which is before the lease can
    /// expire for others) or at once if leadership is already gone.
    pub async fn stop(
        &mut self,
        leadership: Option<&Leadership>,
        grace: Duration,
    ) -> io::Result<ExitStatus> {
        let clock = BootClock;
        let still_valid = leadership.map(|l| l.is_valid()).unwrap_or(true);
        if !still_valid {
            self.signal(Signal::SIGKILL);
            return self.wait().await;
        }
        self.signal(Signal::SIGTERM);
        let term_sent = clock.now();
        loop {
            let kill_at = match leadership {
                None => term_sent + grace,
                Some(l) => match l.deadline() {
                    Some(d) => (term_sent + grace).min(d),
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
                status = self.inner.wait() => {
                    self.signal(Signal::SIGKILL);
                    return status;
                }
                _ = clock.sleep_until(kill_at) => {
                    self.signal(Signal::SIGKILL);
                    return self.wait().await;
                }
                // Leadership ended while we waited: recompute (kill now).
                _ = lost, if leadership.is_some_and(|l| l.is_valid()) => {}
            }
        }
    }
}

/// The exit code a shell would report for `status`.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => 1,
    }
}

/// Finds `program` the way exec would, so a typo fails before campaigning.
pub fn resolve(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = std::path::PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
    })
}
