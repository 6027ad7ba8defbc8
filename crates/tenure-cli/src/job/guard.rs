//! The guard: the job's parent, a small process that enforces the lease
//! deadline without depending on `tenure run` being scheduled.
//!
//! `tenure run` re-executes its own binary as `tenure __guard FD CMD...` once,
//! when it starts (so a job start costs one fork and exec, as without a
//! guard). On each request the guard starts the job in a process group (and,
//! where possible, a cgroup) of its own, then waits on three things only, with
//! no I/O that can block:
//!
//! - the control socket FD: start requests, deadline extensions and stop
//!   requests from `tenure run`; end of file means `tenure run` is gone
//!   (exited, crashed, SIGKILLed, OOM-killed), whatever the job exec'd since:
//!   the job is killed at once and the guard exits;
//! - a `CLOCK_BOOTTIME` timer at the current deadline: when it fires without
//!   an extension the job is SIGKILLed (also right after a SIGCONT if the
//!   whole machine or process tree was stopped past the deadline);
//! - SIGCHLD: when the job exits, whatever it left behind is killed, and the
//!   guard reports the job's status and waits for the next request.
//!
//! The guard logs nothing: it must never wait on a pipe.

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::cgroup::Cgroup;
use super::reap;
use super::spawn;
use super::wire::{FromGuard, JobStatus, Launch, ToGuard};

/// The hidden first argument that turns `tenure` into a guard.
pub const MODE: &str = "__guard";

/// How long it keeps killing leftovers that do not die (a process in
/// uninterruptible sleep) before it reports anyway.
const LEFTOVER_KILL_WAIT: Duration = Duration::from_secs(5);

/// Entry point of `tenure __guard FD CMD [ARGS...]`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let Some(fd) = args.next().and_then(|a| a.to_str()?.parse::<RawFd>().ok()) else {
        eprintln!("tenure: {MODE} is internal to `tenure run`");
        return ExitCode::from(2);
    };
    let argv: Vec<OsString> = args.collect();
    if argv.is_empty() {
        eprintln!("tenure: {MODE}: no command");
        return ExitCode::from(2);
    }
    // SAFETY: `tenure run` passed this descriptor to us and nothing else owns it.
    let ctl = unsafe { UnixStream::from_raw_fd(fd) };
    let mut guard = match Guard::new(ctl, argv) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tenure: the job's guard cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    guard.serve();
    ExitCode::SUCCESS
}

struct Guard {
    argv: Vec<OsString>,
    ctl: UnixStream,
    ctl_open: bool,
    inbox: Vec<u8>,
    timer: TimerFd,
    signals: SignalFd,
    deadline: Option<Duration>,
    cgroup: Option<Cgroup>,
    /// How many cgroups it made (see `fresh_cgroup`).
    cgroups_made: u64,
    /// Cgroups of earlier jobs that could not be removed yet (a process
    /// stuck in uninterruptible sleep): retried after each job and at exit.
    stale_cgroups: Vec<Cgroup>,
    /// Whether clone3(CLONE_INTO_CGROUP) may work here (false once it failed
    /// as unsupported).
    clone3: bool,
    /// The running job, if any.
    job: Option<Pid>,
    /// When a job that was asked to stop gets SIGKILL (end of its grace).
    kill_at: Option<Duration>,
    /// Leftovers of an earlier job may still be on their way to us.
    orphans: bool,
    lapsed: bool,
}

impl Guard {
    fn new(ctl: UnixStream, argv: Vec<OsString>) -> nix::Result<Self> {
        let fd = ctl.as_fd();
        nix::fcntl::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )?;
        ctl.set_nonblocking(true).map_err(io_errno)?;
        // The guard has a process group of its own: terminal and stop requests
        // for tenure's group do not reach it. These signals are read through a
        // signalfd (SIGCHLD) or ignored; the job's pre_exec unblocks them.
        let mut mask = SigSet::empty();
        for s in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            mask.add(s);
        }
        // An ignored SIGCHLD inherited from whoever started tenure would make
        // the kernel reap the job unseen: put the default action back.
        // SAFETY: installs the default disposition, no handler code.
        unsafe { nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl) }?;
        nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_BOOTTIME,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        reap::become_subreaper();
        Ok(Guard {
            argv,
            ctl,
            ctl_open: true,
            inbox: Vec::new(),
            timer,
            signals,
            deadline: None,
            // Made before the first job; each later job gets a fresh one
            // when jobs are born in it by clone3 (see `fresh_cgroup`).
            cgroup: Cgroup::create(0),
            cgroups_made: 1,
            stale_cgroups: Vec::new(),
            clone3: std::env::var(spawn::DISABLE_ENV).map_or(true, |v| v != "0"),
            job: None,
            kill_at: None,
            orphans: false,
            lapsed: false,
        })
    }

    /// Serves start requests until `tenure run` closes the socket; kills the
    /// job when the deadline passes or the socket closes.
    fn serve(&mut self) {
        while self.ctl_open || self.job.is_some() {
            let (ctl_ev, timer_ev) = {
                let mut fds = [
                    PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.timer.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.ctl.as_fd(), PollFlags::POLLIN),
                ];
                let n = if self.ctl_open { 3 } else { 2 };
                // Between jobs, leftovers reparented to us late (their parent
                // was stuck) send no signal on arrival: look every 100 ms.
                let timeout = if self.job.is_none() && self.orphans {
                    PollTimeout::from(100u16)
                } else {
                    PollTimeout::NONE
                };
                match poll(&mut fds[..n], timeout) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => {
                        // Not expected (ENOMEM); do not spin.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                }
                let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                (n == 3 && ready(&fds[2]), ready(&fds[1]))
            };
            if ctl_ev {
                self.read_ctl();
                if !self.ctl_open {
                    // tenure run is gone: nothing renews the lease any more.
                    self.kill_job();
                }
            }
            if timer_ev {
                let _ = self.timer.wait();
            }
            if self.job.is_some() && !self.lapsed && self.deadline.is_some_and(|d| now() >= d) {
                self.lapsed = true;
                self.kill_job();
            }
            if self.job.is_some() && self.kill_at.is_some_and(|k| now() >= k) {
                self.kill_at = None;
                self.kill_job();
            }
            while let Ok(Some(_)) = self.signals.read_signal() {}
            if let Some(job) = self.job {
                let exited = reap::has_exited(job);
                if exited {
                    // Kill its group while the zombie keeps the group id ours.
                    self.kill_job();
                }
                // Also reaps leftovers of earlier jobs that died meanwhile.
                if let (Some(status), _) = reap::reap(job) {
                    if !exited {
                        self.kill_job();
                    }
                    self.finish(status);
                }
            } else {
                // Between jobs every child is a leftover of an earlier job.
                reap::kill_children();
                self.orphans = !reap::reap(Pid::from_raw(0)).1;
            }
        }
        for c in self
            .cgroup
            .take()
            .into_iter()
            .chain(self.stale_cgroups.drain(..))
        {
            c.remove();
        }
    }

    fn start(&mut self, launch: Launch) {
        if self.job.is_some() {
            self.report(FromGuard::Failed("a job is already running".into()));
            return;
        }
        if self.deadline.is_none_or(|d| d <= now()) {
            self.report(FromGuard::Failed(
                "the lease deadline passed before the command could start".into(),
            ));
            return;
        }
        match self.spawn(launch) {
            Ok(pid) => {
                self.job = Some(pid);
                self.lapsed = false;
                self.kill_at = None;
                self.arm_timer();
                self.report(FromGuard::Started {
                    pid: pid.as_raw(),
                    cgroup: self.cgroup.as_ref().map(|c| c.dir().display().to_string()),
                });
            }
            Err(e) => self.report(FromGuard::Failed(e.to_string())),
        }
    }

    /// Starts the job: born in its cgroup with clone3 where it can be, else
    /// with std's spawn joining the cgroup (if any) before exec.
    fn spawn(&mut self, launch: Launch) -> std::io::Result<Pid> {
        // Normally done when the last job ended.
        self.fresh_cgroup();
        if let (Some(cgroup), true) = (&self.cgroup, self.clone3) {
            // Exec needs the path (std's spawn searches PATH itself). If it
            // cannot be found, std's spawn reports it the usual way.
            if let Some(path) = self.argv.first().and_then(super::resolve) {
                match spawn::spawn_in_cgroup(&path, &self.argv, launch, cgroup.dir_fd()) {
                    Ok(pid) => return Ok(pid),
                    Err(spawn::Error::Io(e)) => return Err(e),
                    Err(spawn::Error::Unsupported) => self.clone3 = false,
                }
            }
        }
        self.spawn_joining_cgroup(launch)
    }

    /// The fallback spawn: std's, with a `pre_exec` hook that moves the child
    /// into the cgroup (slow: see `spawn.rs`) and sets up the rest.
    fn spawn_joining_cgroup(&self, launch: Launch) -> std::io::Result<Pid> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| std::io::Error::new(ErrorKind::InvalidInput, "empty command"))?;
        let procs_fd = self.cgroup.as_ref().map(Cgroup::procs_fd);
        let guard_pid = std::process::id() as libc::pid_t;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args).process_group(0);
        for name in Launch::VARIABLES {
            cmd.env_remove(name);
        }
        cmd.envs(launch.env());
        // SAFETY: runs in the forked child before exec and calls only
        // async-signal-safe functions (write, prctl, sigemptyset,
        // pthread_sigmask, getppid).
        unsafe {
            cmd.pre_exec(move || {
                if let Some(fd) = procs_fd {
                    // Join the jobs' cgroup before anything can fork.
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // Belt and braces: if the guard itself were SIGKILLed, the
                // kernel kills the job (unless it exec'd a set-id binary).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The guard blocks SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGCHLD
                // for its signalfd, and a blocked mask survives exec: the job
                // would never see the SIGTERM that asks it to stop, and be
                // SIGKILLed at the end of its grace. (std does not reset the
                // mask when a pre_exec hook is set.)
                let mut none = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
                if libc::sigemptyset(none.as_mut_ptr()) != 0
                    || libc::pthread_sigmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut())
                        != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != guard_pid {
                    return Err(std::io::Error::other(
                        "the guard exited while starting the command",
                    ));
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        // Dropping std's Child neither kills nor waits: we reap it ourselves.
        Ok(Pid::from_raw(child.id() as i32))
    }

    /// The job exited: kill what it left behind, report, get ready for the next.
    fn finish(&mut self, status: WaitStatus) {
        // Leftovers would be leader work running without a lease.
        if let Some(c) = &self.cgroup {
            c.kill();
        }
        self.orphans = !reap::kill_all_descendants(LEFTOVER_KILL_WAIT);
        self.fresh_cgroup();
        self.job = None;
        self.kill_at = None;
        self.disarm_timer();
        let status = match status {
            WaitStatus::Exited(_, code) => JobStatus::Code(code),
            WaitStatus::Signaled(_, sig, _) => JobStatus::Signal(sig as i32),
            _ => JobStatus::Code(1),
        };
        self.report(FromGuard::Exited {
            status,
            lapsed: self.lapsed,
        });
    }

    /// Replaces the job's cgroup by a new one if it was killed (see
    /// `Cgroup::was_killed`), as long as jobs are born in it by clone3 (a job
    /// moved in by the fallback spawn is not affected). Called when a job has
    /// ended, so that the next start does not pay for it. If no new one can
    /// be made, the old one stays and the fallback spawn is used from then on.
    fn fresh_cgroup(&mut self) {
        if !self.clone3 || !self.cgroup.as_ref().is_some_and(Cgroup::was_killed) {
            return;
        }
        let Some(old) = self.cgroup.take() else {
            return;
        };
        let stale = std::mem::take(&mut self.stale_cgroups);
        self.stale_cgroups = stale.into_iter().filter_map(Cgroup::try_remove).collect();
        match Cgroup::create(self.cgroups_made) {
            Some(new) => {
                self.cgroups_made += 1;
                self.stale_cgroups.extend(old.try_remove());
                self.cgroup = Some(new);
            }
            None => {
                self.cgroup = Some(old);
                self.clone3 = false;
            }
        }
    }

    fn read_ctl(&mut self) {
        let mut buf = [0u8; 512];
        loop {
            match self.ctl.read(&mut buf) {
                Ok(0) => {
                    self.ctl_open = false;
                    break;
                }
                Ok(n) => self.inbox.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.ctl_open = false;
                    break;
                }
            }
        }
        while let Some(end) = self.inbox.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.inbox.drain(..=end).collect();
            match ToGuard::decode(&String::from_utf8_lossy(&line)) {
                Some(ToGuard::Deadline(d)) => {
                    self.deadline = Some(d);
                    self.arm_timer();
                }
                Some(ToGuard::Start(launch)) => self.start(launch),
                Some(ToGuard::Terminate(grace)) => {
                    if let Some(job) = self.job {
                        let _ = killpg(job, Signal::SIGTERM);
                        self.kill_at = Some(now() + grace);
                        self.arm_timer();
                    }
                }
                Some(ToGuard::Kill) => self.kill_job(),
                None => {}
            }
        }
    }

    /// Arms the timer at the deadline, or at the end of a stopping job's
    /// grace if that comes first.
    fn arm_timer(&self) {
        let first = match (self.deadline, self.kill_at) {
            (Some(d), Some(k)) => Some(d.min(k)),
            (d, k) => d.or(k),
        };
        if let (Some(d), Some(_)) = (first, self.job) {
            let at = TimeSpec::from(d.max(Duration::from_nanos(1)));
            let _ = self.timer.set(
                Expiration::OneShot(at),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            );
        }
    }

    fn disarm_timer(&self) {
        let _ = self.timer.unset();
    }

    /// SIGKILL to the job's group, its cgroup, and every orphan reparented to us.
    fn kill_job(&self) {
        if let Some(job) = self.job {
            let _ = killpg(job, Signal::SIGKILL);
        }
        // With clone3 and no job, nothing is in the cgroup (it is the next
        // job's, fresh): a kill would only spoil it (see `Cgroup::was_killed`).
        if let (Some(c), true) = (&self.cgroup, self.job.is_some() || !self.clone3) {
            c.kill();
        }
        reap::kill_children();
    }

    fn report(&mut self, msg: FromGuard) {
        if !self.ctl_open {
            return;
        }
        // A few bytes into an empty socket buffer: never blocks in practice;
        // if it would, the report is dropped rather than waited for.
        let _ = self.ctl.write_all(msg.encode().as_bytes());
    }
}

/// Now on `CLOCK_BOOTTIME`, the clock of the deadlines.
fn now() -> Duration {
    use tenure::clock::Clock;
    tenure::clock::BootClock.now()
}

fn io_errno(e: std::io::Error) -> nix::Error {
    nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
