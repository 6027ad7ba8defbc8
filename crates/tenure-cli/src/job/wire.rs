//! The messages between `tenure run` and its guard: one text line each, over a
//! Unix socket pair.
//!
//! Text lines rather than a binary format because they are a handful of bytes,
//! easy to read in `strace`, and both ends are this binary: there is no version
//! skew to manage.

use std::time::Duration;

/// From `tenure run` to the guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToGuard {
    /// Kill the job at this `CLOCK_BOOTTIME` instant unless a later message
    /// moves it. Sent before each start and after every renewal.
    Deadline(Duration),
    /// Start the job with the variables of this [`Launch`].
    Start(Launch),
    /// Ask the job to stop: SIGTERM to its process group now, SIGKILL after
    /// this grace (counted by the guard from the SIGTERM it sent, so a guard
    /// slow to act still gives the job its grace; the deadline bounds it).
    Terminate(Duration),
    /// Kill the job and everything it started, now.
    Kill,
}

/// What a job is started under, given to it in its environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The tenure's term: `TENURE_TERM`.
    pub term: u64,
    /// `TENURE_ATTEMPT` (from 1, `tenure run --once`); 0 leaves it unset.
    pub attempt: u32,
    /// `TENURE_SLOT` (`tenure run --slots`); unset without.
    pub slot: Option<u32>,
}

impl Launch {
    /// The variables a job inherits from nobody else: any the guard has
    /// itself are replaced by the launch's (or removed).
    pub const VARIABLES: [&'static str; 3] = ["TENURE_TERM", "TENURE_ATTEMPT", "TENURE_SLOT"];

    /// The variables to set, as `(name, value)`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("TENURE_TERM", self.term.to_string())];
        if self.attempt > 0 {
            env.push(("TENURE_ATTEMPT", self.attempt.to_string()));
        }
        if let Some(slot) = self.slot {
            env.push(("TENURE_SLOT", slot.to_string()));
        }
        env
    }
}

/// How the job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// From the guard to `tenure run`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromGuard {
    /// The job runs with this pid (also its process group); `cgroup` is the
    /// directory of the jobs' own cgroup, if the kernel let the guard make one.
    Started { pid: i32, cgroup: Option<String> },
    /// The job could not be started.
    Failed(String),
    /// The job and everything it left behind are gone. `lapsed` is true when
    /// the guard killed it because the deadline passed without an extension.
    Exited { status: JobStatus, lapsed: bool },
}

impl ToGuard {
    pub fn encode(&self) -> String {
        match self {
            ToGuard::Deadline(d) => format!("D {}\n", d.as_nanos()),
            ToGuard::Start(l) => match l.slot {
                Some(slot) => format!("R {} {} {slot}\n", l.term, l.attempt),
                None => format!("R {} {} -\n", l.term, l.attempt),
            },
            ToGuard::Terminate(grace) => format!("T {}\n", grace.as_nanos()),
            ToGuard::Kill => "K\n".to_string(),
        }
    }

    pub fn decode(line: &str) -> Option<Self> {
        let (tag, rest) = split(line);
        match tag {
            "D" => rest
                .parse::<u64>()
                .ok()
                .map(|ns| ToGuard::Deadline(Duration::from_nanos(ns))),
            "R" => {
                let mut fields = rest.split(' ');
                let (term, attempt, slot) = (fields.next()?, fields.next()?, fields.next()?);
                Some(ToGuard::Start(Launch {
                    term: term.parse().ok()?,
                    attempt: attempt.parse().ok()?,
                    slot: match slot {
                        "-" => None,
                        s => Some(s.parse().ok()?),
                    },
                }))
            }
            "T" => rest
                .parse::<u64>()
                .ok()
                .map(|ns| ToGuard::Terminate(Duration::from_nanos(ns))),
            "K" => Some(ToGuard::Kill),
            _ => None,
        }
    }
}

impl FromGuard {
    pub fn encode(&self) -> String {
        match self {
            FromGuard::Started { pid, cgroup } => {
                format!("S {pid} {}\n", cgroup.as_deref().unwrap_or("-"))
            }
            // One line: the message must not break the framing.
            FromGuard::Failed(m) => format!("F {}\n", m.replace('\n', " ")),
            FromGuard::Exited { status, lapsed } => {
                let (kind, n) = match status {
                    JobStatus::Code(c) => ("C", c),
                    JobStatus::Signal(s) => ("S", s),
                };
                format!("X {kind} {n} {}\n", u8::from(*lapsed))
            }
        }
    }

    pub fn decode(line: &str) -> Option<Self> {
        let (tag, rest) = split(line);
        match tag {
            "S" => {
                let (pid, cgroup) = rest.split_once(' ')?;
                Some(FromGuard::Started {
                    pid: pid.parse().ok()?,
                    cgroup: (cgroup != "-").then(|| cgroup.to_string()),
                })
            }
            "F" => Some(FromGuard::Failed(rest.to_string())),
            "X" => {
                let mut p = rest.split(' ');
                let kind = p.next()?;
                let n: i32 = p.next()?.parse().ok()?;
                let lapsed = p.next()? == "1";
                let status = match kind {
                    "C" => JobStatus::Code(n),
                    "S" => JobStatus::Signal(n),
                    _ => return None,
                };
                Some(FromGuard::Exited { status, lapsed })
            }
            _ => None,
        }
    }
}

fn split(line: &str) -> (&str, &str) {
    let line = line.trim_end_matches('\n');
    line.split_once(' ').unwrap_or((line, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_survives_a_round_trip() {
        for m in [
            ToGuard::Deadline(Duration::new(12_345, 678)),
            ToGuard::Start(Launch {
                term: 7,
                attempt: 0,
                slot: None,
            }),
            ToGuard::Start(Launch {
                term: 8,
                attempt: 3,
                slot: Some(2),
            }),
            ToGuard::Terminate(Duration::from_millis(500)),
            ToGuard::Kill,
        ] {
            assert_eq!(ToGuard::decode(&m.encode()), Some(m));
        }
        for m in [
            FromGuard::Started {
                pid: 42,
                cgroup: None,
            },
            FromGuard::Started {
                pid: 42,
                cgroup: Some("/sys/fs/cgroup/a b".into()),
            },
            FromGuard::Failed("no such file".into()),
            FromGuard::Exited {
                status: JobStatus::Code(7),
                lapsed: false,
            },
            FromGuard::Exited {
                status: JobStatus::Signal(9),
                lapsed: true,
            },
        ] {
            assert_eq!(FromGuard::decode(&m.encode()), Some(m));
        }
    }

    #[test]
    fn a_message_with_a_newline_stays_one_line() {
        let line = FromGuard::Failed("a\nb".into()).encode();
        assert_eq!(line.matches('\n').count(), 1);
    }

    #[test]
    fn garbage_is_rejected() {
        assert_eq!(ToGuard::decode("D x"), None);
        assert_eq!(ToGuard::decode("Q"), None);
        assert_eq!(FromGuard::decode("X C"), None);
        assert_eq!(FromGuard::decode("X Z 1 0"), None);
    }
}
