//! Finding and killing what the job left behind, without cgroups.
//!
//! The guard makes itself a child subreaper: every process the job started
//! whose parent dies is reparented to the guard, not to init, whatever process
//! group or session it moved to. Killing the job's group and then, repeatedly,
//! every child of the guard, reaches all of them; `waitpid` answering ECHILD
//! proves none is left.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Makes the calling process the reaper of its orphaned descendants.
pub fn become_subreaper() {
    // SAFETY: prctl with an integer argument; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
    }
}

/// The pids whose parent is this (single-threaded) process: from
/// `/proc/self/task/<pid>/children` where the kernel has it, else by reading
/// every /proc/<pid>/stat.
fn children() -> Vec<Pid> {
    let me = std::process::id() as i32;
    if let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{me}/children")) {
        return list
            .split_whitespace()
            .filter_map(|p| p.parse().ok().map(Pid::from_raw))
            .collect();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let ppid: i32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == me).then_some(Pid::from_raw(pid))
    })
    .collect()
}

/// SIGKILLs every child of this process.
pub fn kill_children() {
    for pid in children() {
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// Whether `job` (a child) has exited, without reaping it: while it is a
/// zombie its pid, and so its process group id, cannot be reused, so its group
/// can still be killed safely.
pub fn has_exited(job: Pid) -> bool {
    matches!(
        waitid(
            Id::Pid(job),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
        ),
        Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
    )
}

/// Reaps every child that has exited; returns the status of `job` if it was
/// among them, and whether no child at all is left.
pub fn reap(job: Pid) -> (Option<WaitStatus>, bool) {
    let mut job_status = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return (job_status, false),
            Ok(s) => {
                if s.pid() == Some(job)
                    && matches!(s, WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                {
                    job_status = Some(s);
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => return (job_status, true), // ECHILD: nobody left
        }
    }
}

/// Kills and reaps every remaining descendant, for at most `within`; returns
/// whether none is left (false: one is stuck, in uninterruptible sleep say).
pub fn kill_all_descendants(within: Duration) -> bool {
    let start = Instant::now();
    loop {
        kill_children();
        if reap(Pid::from_raw(0)).1 {
            return true;
        }
        if start.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
