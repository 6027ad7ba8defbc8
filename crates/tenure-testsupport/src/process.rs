//! What `/proc` says of a process: whether it still runs, how much memory
//! it holds.

/// Whether process `pid` runs: it has a `/proc` entry and is no zombie (a
/// zombie keeps its entry until reaped; its state is `Z`).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The resident memory of process `pid`, in KiB (`VmRSS` in `/proc`), or
/// `None` where the process or the line is gone.
pub fn rss_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()
        })
}
