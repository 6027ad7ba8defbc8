//! Starting the job inside its cgroup from birth: `clone3(CLONE_INTO_CGROUP)`
//! (Linux 5.7+; what systemd does).
//!
//! Why not `std::process::Command` with a `pre_exec` hook that writes `0` to
//! `cgroup.procs` (the fallback, in `guard.rs`): migrating a task into a
//! cgroup takes the kernel's global `cgroup_threadgroup_rwsem` for writing,
//! and the first writer after a quiet period waits for a whole RCU grace
//! period (10-15 ms measured on kernel 6.18). A job is started once per
//! tenure, so every start paid it. A child born in the cgroup is never
//! migrated: the fork path takes that lock only for reading. std's `Command`
//! cannot pass `CLONE_INTO_CGROUP`, so this spawn is written by hand.
//!
//! Everything the child needs (paths, argv, envp, signal sets) is prepared
//! before cloning; the child calls only async-signal-safe functions and never
//! allocates, then execs or writes its errno to a close-on-exec pipe and
//! exits 127, as std's spawn does.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::Pid;

use super::wire::Launch;

/// Set to `0` to start jobs the fallback way, joining the cgroup by a write to
/// `cgroup.procs` (tests use it to keep that path tested).
pub const DISABLE_ENV: &str = "TENURE_JOB_CLONE3";

/// `struct clone_args` of `<linux/sched.h>` up to `cgroup`
/// (`CLONE_ARGS_SIZE_VER2`, 88 bytes). Defined here: the libc crate has it on
/// a few targets only.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Why the job was not started.
#[derive(Debug)]
pub enum Error {
    /// clone3 or `CLONE_INTO_CGROUP` is not available here (kernel older
    /// than 5.7, or a seccomp filter refuses clone3): use the fallback.
    Unsupported,
    /// The start failed (the program could not be exec'd, ...).
    Io(io::Error),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// A C string, with std's error for an interior NUL.
fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// A null-terminated array of pointers into `strings` (which must outlive it).
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Starts `path` (resolved, as exec needs it) with `argv` (`argv[0]` as the
/// user wrote it) and the guard's environment plus the launch's variables
/// ([`Launch::env`]), in its
/// own process group, inside the cgroup whose directory is `cgroup`, with
/// the parent-death signal SIGKILL. Returns once the program was exec'd.
pub fn spawn_in_cgroup(
    path: &Path,
    argv: &[OsString],
    launch: Launch,
    cgroup: BorrowedFd<'_>,
) -> Result<Pid, Error> {
    // Everything the child uses is made here, before cloning.
    let path = cstring(path.as_os_str())?;
    let argv: Vec<CString> = argv.iter().map(|a| cstring(a)).collect::<Result<_, _>>()?;
    let mut env: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if Launch::VARIABLES.iter().any(|v| k == *v) {
            continue;
        }
        let mut kv = k;
        kv.push("=");
        kv.push(v);
        env.push(cstring(&kv)?);
    }
    for (k, v) in launch.env() {
        env.push(cstring(OsStr::new(&format!("{k}={v}")))?);
    }
    let argv_ptrs = pointers(&argv);
    let env_ptrs = pointers(&env);
    // SAFETY: plain C structs, filled in by sigemptyset below.
    let mut no_signals: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; SIG_DFL with an empty mask and no flags.
    let mut default_action: libc::sigaction = unsafe { std::mem::zeroed() };
    default_action.sa_sigaction = libc::SIG_DFL;
    // SAFETY: valid pointers to sigset_t.
    if unsafe { libc::sigemptyset(&mut no_signals) } != 0
        || unsafe { libc::sigemptyset(&mut default_action.sa_mask) } != 0
    {
        return Err(io::Error::last_os_error().into());
    }
    let guard_pid = std::process::id() as libc::pid_t;
    let (errors_in, errors_out) = cloexec_pipe()?;

    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM is fork: the child gets a copy of this
    // (single-threaded) process and continues here with 0. It only runs
    // `child`, which never returns.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        // SAFETY: in the child; every pointer points into memory prepared
        // above, copied with the process.
        unsafe {
            child(
                errors_out.as_raw_fd(),
                guard_pid,
                &path,
                &argv_ptrs,
                &env_ptrs,
                &default_action,
                &no_signals,
            )
        }
    }
    if ret < 0 {
        return Err(match Errno::last() {
            // No clone3 (before 5.3, or a seccomp filter: Docker's answers
            // ENOSYS, older profiles EPERM), no CLONE_INTO_CGROUP (before
            // 5.7: EINVAL), a struct size it does not know (E2BIG), or a
            // cgroup it cannot start a process in (EOPNOTSUPP). The fallback
            // joins the cgroup by writing cgroup.procs, or reports the error.
            Errno::ENOSYS | Errno::EINVAL | Errno::EOPNOTSUPP | Errno::E2BIG | Errno::EPERM => {
                Error::Unsupported
            }
            e => Error::Io(e.into()),
        });
    }
    let pid = Pid::from_raw(ret as libc::pid_t);
    drop(errors_out);
    // End of file: the pipe was closed by a successful exec. Four bytes: the
    // child's errno.
    let mut buf = [0u8; 4];
    let mut got = 0;
    let read_error = loop {
        match nix::unistd::read(errors_in.as_raw_fd(), &mut buf[got..]) {
            Ok(0) => break None,
            Ok(n) => {
                got += n;
                if got == buf.len() {
                    break None;
                }
            }
            Err(Errno::EINTR) => {}
            Err(e) => break Some(e),
        }
    };
    match (got, read_error) {
        (0, None) => Ok(pid),
        (4, None) => {
            wait_for(pid);
            Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf)).into())
        }
        (_, e) => {
            // Cannot tell whether it exec'd: it must not run unwatched.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            wait_for(pid);
            Err(io::Error::other(format!(
                "cannot read the start report of the command: {}",
                e.map(|e| e.to_string())
                    .unwrap_or_else(|| format!("{got} bytes"))
            ))
            .into())
        }
    }
}

/// Reaps the child that failed to start.
fn wait_for(pid: Pid) {
    while let Err(Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
}

/// A pipe, both ends close-on-exec: (read end, write end).
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just made them; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The child, between clone3 and exec: async-signal-safe calls only, no
/// allocation, never returns. Same steps, in the same order, as std's spawn
/// with `process_group(0)` and the fallback's `pre_exec` hook (minus joining
/// the cgroup: it was born there, so it is in it before it can fork).
///
/// # Safety
/// Only in the child of a fork-like clone; pointers as prepared by
/// `spawn_in_cgroup`.
unsafe fn child(
    errors: libc::c_int,
    guard_pid: libc::pid_t,
    path: &CString,
    argv: &[*const libc::c_char],
    env: &[*const libc::c_char],
    default_action: &libc::sigaction,
    no_signals: &libc::sigset_t,
) -> ! {
    let fail = || -> ! {
        let errno = Errno::last_raw().to_ne_bytes();
        libc::write(errors, errno.as_ptr().cast(), errno.len());
        libc::_exit(127)
    };
    // A process group of its own: `T` and the kills reach all of it.
    if libc::setpgid(0, 0) != 0 {
        fail();
    }
    // Belt and braces: if the guard itself were SIGKILLed, the kernel kills
    // the job (unless it exec's a set-id binary).
    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
        fail();
    }
    // Rust ignores SIGPIPE; std's spawn puts the default back for the child.
    if libc::sigaction(libc::SIGPIPE, default_action, std::ptr::null_mut()) != 0 {
        fail();
    }
    // The guard blocks SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGCHLD for its
    // signalfd, and a blocked mask survives exec: the job would never see the
    // SIGTERM that asks it to stop.
    if libc::sigprocmask(libc::SIG_SETMASK, no_signals, std::ptr::null_mut()) != 0 {
        fail();
    }
    // The guard died before PR_SET_PDEATHSIG was set: nobody would kill us.
    if libc::getppid() != guard_pid {
        libc::_exit(127);
    }
    libc::execve(path.as_ptr(), argv.as_ptr(), env.as_ptr());
    fail()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::cgroup::Cgroup;
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    use nix::sys::wait::{waitpid, WaitStatus};

    fn launch(term: u64) -> Launch {
        Launch {
            term,
            attempt: 0,
            slot: None,
        }
    }

    /// The job is born in the cgroup, in a process group of its own, with no
    /// blocked signal (though the spawning thread blocks SIGTERM, as the
    /// guard does), SIGPIPE back to default, and its term; an exec failure
    /// comes back as the exec's errno.
    #[test]
    fn the_job_is_born_in_its_cgroup_in_a_group_of_its_own_with_clean_signals() {
        let Some(cgroup) = Cgroup::create(0) else {
            eprintln!("SKIPPED: no writable cgroup v2 with cgroup.kill here");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "{{ grep '^0::' /proc/self/cgroup; grep -E '^Sig(Blk|Ign):' /proc/self/status; \
             echo term=$TENURE_TERM; echo pgid=$(cut -d' ' -f5 /proc/$$/stat) pid=$$; }} > {}",
            out.display()
        );
        let argv: Vec<OsString> = ["sh", "-c", &script].iter().map(OsString::from).collect();
        let sh = crate::job::resolve("sh").unwrap();
        let mut term = SigSet::empty();
        term.add(Signal::SIGTERM);
        let mut old = SigSet::empty();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&term), Some(&mut old))
            .unwrap();
        let started = spawn_in_cgroup(&sh, &argv, launch(7), cgroup.dir_fd());
        let bad = std::fs::write(dir.path().join("bad"), "#!/nonexistent/interpreter\n")
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(
                    dir.path().join("bad"),
                    std::fs::Permissions::from_mode(0o755),
                )
            })
            .map(|()| {
                spawn_in_cgroup(
                    &dir.path().join("bad"),
                    &[OsString::from("bad")],
                    launch(7),
                    cgroup.dir_fd(),
                )
            });
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).unwrap();
        let pid = match started {
            Ok(pid) => pid,
            Err(Error::Unsupported) => {
                eprintln!("SKIPPED: clone3(CLONE_INTO_CGROUP) is not available here");
                cgroup.remove();
                return;
            }
            Err(Error::Io(e)) => panic!("spawn failed: {e}"),
        };
        assert_eq!(waitpid(pid, None).unwrap(), WaitStatus::Exited(pid, 0));
        let text = std::fs::read_to_string(&out).unwrap();
        let name = cgroup
            .dir()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let line = |prefix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in {text}"))
                .trim()
                .to_string()
        };
        assert!(line("0::").ends_with(&format!("/{name}")), "{text}");
        assert_eq!(line("SigBlk:"), "0000000000000000", "{text}");
        let ignored = u64::from_str_radix(&line("SigIgn:"), 16).unwrap();
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE ignored: {text}"
        );
        assert_eq!(line("term="), "7");
        assert!(text.contains(&format!("pgid={pid} pid={pid}")), "{text}");
        match bad.unwrap() {
            Err(Error::Io(e)) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
            Err(Error::Unsupported) => panic!("clone3 worked, then was unsupported"),
            Ok(pid) => panic!("a missing interpreter was exec'd as {pid}"),
        }
        cgroup.remove();
    }
}
