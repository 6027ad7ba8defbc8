//! What candidates and the harness record. One JSON object per line.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// An event in a candidate's log; `t` is the shared clock in nanoseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A candidate process started.
    Start {
        cand: String,
        inc: u32,
        pid: u32,
        t: u64,
        faketime: Option<String>,
    },
    /// The elector reported leadership under `term`.
    Acquired {
        cand: String,
        inc: u32,
        term: u64,
        t: u64,
    },
    /// `Leadership::lost()` resolved. Both `lost_ns` and `deadline_ns` are on the
    /// candidate's own (possibly faked) elector clock.
    Lost {
        cand: String,
        inc: u32,
        term: u64,
        t: u64,
        lost_ns: u64,
        deadline_ns: u64,
    },
}

/// One attempt to write to the fenced resource.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Write_ {
    pub cand: String,
    pub inc: u32,
    pub term: u64,
    pub t: u64,
    pub accepted: bool,
}

/// A fault the harness injected; times on the shared clock.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Fault {
    pub kind: String,
    /// The candidate it hit, or "store".
    pub target: String,
    pub start: u64,
    pub heal: u64,
    pub detail: String,
}

/// Appends one JSON line.
pub fn append<T: Serialize>(file: &mut std::fs::File, value: &T) {
    if let Ok(mut line) = serde_json::to_vec(value) {
        line.push(b'\n');
        let _ = file.write_all(&line);
    }
}

/// Reads every JSON line of a file that parses as `T`.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
