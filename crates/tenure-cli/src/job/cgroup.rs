//! A cgroup v2 of the job's own, so that one write kills every process the job
//! started, including those that left its process group with `setsid`.
//!
//! Used when the kernel offers it: a cgroup2 hierarchy is mounted, the guard's
//! own cgroup is writable (root, or a delegated subtree) and has `cgroup.kill`
//! (Linux 5.14+). Otherwise the guard falls back to the process group and its
//! role as child subreaper (see `reap.rs`). No crate does this small part of
//! the cgroup interface without pulling in a whole cgroup manager, so it is
//! written here against the kernel's file interface.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Set to `0` to keep jobs out of cgroups (tests use it to check the fallback).
pub const DISABLE_ENV: &str = "TENURE_JOB_CGROUP";

/// The job's cgroup: made by the guard before the job starts, removed after.
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    /// The directory itself, for `clone3(CLONE_INTO_CGROUP)`: the job is born
    /// in the cgroup (see `spawn.rs`).
    dir_fd: File,
    /// `cgroup.procs`, for the fallback where clone3 cannot be used: opened
    /// before the fork so the child only has to write.
    procs: File,
    /// Whether `cgroup.kill` was written: see `was_killed`.
    killed: Cell<bool>,
}

impl Cgroup {
    /// Makes `tenure-job-<pid>-<seq>` under the guard's own cgroup, or
    /// `None` when cgroups v2 cannot be used here.
    pub fn create(seq: u64) -> Option<Cgroup> {
        if std::env::var(DISABLE_ENV).is_ok_and(|v| v == "0") {
            return None;
        }
        let mount = cgroup2_mount()?;
        let own = own_cgroup()?;
        let dir = mount
            .join(own.trim_start_matches('/'))
            .join(format!("tenure-job-{}-{seq}", std::process::id()));
        fs::create_dir(&dir).ok()?;
        // Both opened close-on-exec (std always adds O_CLOEXEC).
        let opened = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(&dir)
            .and_then(|d| {
                let procs = OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))?;
                Ok((d, procs))
            });
        let group = match opened {
            Ok((dir_fd, procs)) => Cgroup {
                dir,
                dir_fd,
                procs,
                killed: Cell::new(false),
            },
            Err(_) => {
                let _ = fs::remove_dir(&dir);
                return None;
            }
        };
        if !group.dir.join("cgroup.kill").exists() {
            group.remove();
            return None;
        }
        Some(group)
    }

    /// The directory, for the report to `tenure run`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup's directory, open: `clone3(CLONE_INTO_CGROUP)` starts the
    /// job inside.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir_fd.as_fd()
    }

    /// A descriptor of `cgroup.procs`: where clone3 cannot be used, a forked
    /// child writes `0` to it to move itself in before exec (async-signal-safe:
    /// one `write`).
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Kills every process in the cgroup at once.
    pub fn kill(&self) {
        self.killed.set(true);
        kill_dir(&self.dir);
    }

    /// Whether it was killed: the kernel (seen on 6.18) SIGKILLs at birth
    /// every process that clone3 starts in a cgroup killed before, so a
    /// killed cgroup must not receive another job that way.
    pub fn was_killed(&self) -> bool {
        self.killed.get()
    }

    /// Removes the cgroup if it is empty (one attempt); returns it otherwise.
    pub fn try_remove(self) -> Option<Cgroup> {
        fs::remove_dir(&self.dir).is_err().then_some(self)
    }

    /// Removes the (emptied) cgroup; the kernel refuses while processes remain,
    /// so this retries for a short while after a kill.
    pub fn remove(self) {
        let start = Instant::now();
        while fs::remove_dir(&self.dir).is_err() && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Kills every process of the cgroup at `dir` (ignores errors: a cgroup that
/// is gone has nothing left to kill).
pub fn kill_dir(dir: &Path) {
    if let Ok(mut f) = OpenOptions::new().write(true).open(dir.join("cgroup.kill")) {
        let _ = f.write_all(b"1");
    }
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on hybrid systems).
fn cgroup2_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        // "... mount_point options ... - fstype source super_options"
        let (left, right) = line.split_once(" - ")?;
        if right.split(' ').next()? != "cgroup2" {
            return None;
        }
        left.split(' ').nth(4).map(PathBuf::from)
    })
}

/// This process's cgroup v2 path (the `0::` line of /proc/self/cgroup).
fn own_cgroup() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}
