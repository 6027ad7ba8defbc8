//! The fenced resource: a file that records every write with its term and
//! rejects a write whose term is lower than the highest it has seen.
//!
//! Writers serialise on an exclusive `flock`. The writer reads the shared clock
//! and checks `is_leader()` while holding the lock, so the history shows what a
//! leader did and when, in the order the resource saw it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::history::{append, Write_};
use crate::shared_clock;

pub struct Resource {
    lock: File,
    max: File,
    log: File,
}

impl Resource {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let open = |name: &str| -> std::io::Result<File> {
            OpenOptions::new()
                .create(true)
                .read(true)
                .append(name == "log")
                .write(true)
                .open(dir.join(name))
        };
        Ok(Self {
            lock: open("lock")?,
            max: open("max")?,
            log: open("log")?,
        })
    }

    pub fn log_path(dir: &Path) -> PathBuf {
        dir.join("log")
    }

    /// If `leader()` names a term, writes under it. Returns whether it wrote.
    pub fn attempt(&mut self, cand: &str, inc: u32, leader: impl FnOnce() -> Option<u64>) -> bool {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return false;
        }
        // The time is read before the leadership check: a pause between the two
        // makes the check fail rather than stamp an old time on a late write.
        let t = shared_clock::now_ns();
        let wrote = match leader() {
            None => false,
            Some(term) => {
                let max = self.read_max();
                let accepted = term >= max;
                if accepted && term > max {
                    self.write_max(term);
                }
                append(
                    &mut self.log,
                    &Write_ {
                        cand: cand.to_string(),
                        inc,
                        term,
                        t,
                        accepted,
                    },
                );
                true
            }
        };
        // SAFETY: as above.
        unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_UN) };
        wrote
    }

    fn read_max(&mut self) -> u64 {
        let mut s = String::new();
        let _ = self.max.seek(SeekFrom::Start(0));
        let _ = self.max.read_to_string(&mut s);
        s.trim().parse().unwrap_or(0)
    }

    fn write_max(&mut self, term: u64) {
        let _ = self.max.set_len(0);
        let _ = self.max.seek(SeekFrom::Start(0));
        let _ = self.max.write_all(term.to_string().as_bytes());
    }
}
