//! What the job's guard costs, and the stale window it leaves.
//!
//! ```text
//! cargo bench -p tenure-cli --bench guard -- [--trials 200] [--freezes 10]
//!     [--gap MS] [--also PATH]
//! ```
//!
//! `--gap MS` pauses that long before each measured start (default 0), as a
//! job start after a quiet time: a leadership change, not a burst of restarts.
//! It matters with a cgroup: a job moved into its cgroup by a `cgroup.procs`
//! write (the fallback spawn, or builds before clone3) waits an RCU grace
//! period on the first such write after a quiet time. `--also PATH` measures
//! the guard of another `tenure` binary too (an older build, say), interleaved
//! with this one's.
//!
//! Prints:
//! - the resident memory (RSS, and PSS, which shares the binary's pages with
//!   `tenure run` fairly) of `tenure run`, its guard and the job while leading;
//! - job start latency, spawn → job exec'd, started directly (what `tenure run`
//!   did before the guard) and through `tenure __guard`, interleaved, with
//!   percentiles and the difference;
//! - the stale window: `tenure run`, guard and job all SIGSTOPped past the
//!   deadline, then SIGCONT (job first): time until the job is gone.
//!
//! A benchmark, not a test: it reports figures and asserts nothing.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tenure_testsupport::process::alive;

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

fn main() {
    let mut trials = 200usize;
    let mut freezes = 10usize;
    let mut gap = Duration::ZERO;
    let mut also: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--trials" => trials = args.next().and_then(|v| v.parse().ok()).unwrap_or(trials),
            "--freezes" => freezes = args.next().and_then(|v| v.parse().ok()).unwrap_or(freezes),
            "--gap" => {
                gap = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .map(Duration::from_millis)
                    .unwrap_or(gap)
            }
            "--also" => also = args.next(),
            _ => {} // cargo bench passes --bench
        }
    }
    let dir = tempfile::tempdir().expect("temp dir");
    memory(dir.path());
    start_latency(trials, gap, also.as_deref());
    stale_window(dir.path(), freezes);
}

fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec, constant clock id.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn kib(pid: i32, file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn parent_of(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < within, "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `tenure run` leading with `sleep` as its job, as a user runs it.
fn start_run(dir: &Path, election: &str, ttl: &str) -> (std::process::Child, i32) {
    let pidfile = dir.join(format!("{election}.pid"));
    let _ = std::fs::remove_file(&pidfile);
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let child = Command::new(BIN)
        .args([
            "run",
            "--store",
            &url,
            "--election",
            election,
            "--ttl",
            ttl,
            "--",
        ])
        .args([
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 1000", pidfile.display()),
        ])
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn tenure run");
    let job = wait_for(Duration::from_secs(15), || read_pid(&pidfile));
    (child, job)
}

fn memory(dir: &Path) {
    let (mut run, job) = start_run(dir, "memory", "10s");
    std::thread::sleep(Duration::from_millis(500));
    let guard = parent_of(job);
    println!("resident memory while leading (KiB):");
    println!("  {:<12} {:>8} {:>8}", "process", "RSS", "PSS");
    for (name, pid) in [
        ("tenure run", run.id() as i32),
        ("guard", guard),
        ("job (sleep)", job),
    ] {
        println!(
            "  {:<12} {:>8} {:>8}",
            name,
            kib(pid, "status", "VmRSS:"),
            kib(pid, "smaps_rollup", "Pss:")
        );
    }
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = run.wait();
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    (p(0.5), p(0.9), p(0.99))
}

/// A guard started as `tenure run` starts it, for `/bin/true` jobs.
struct BenchGuard {
    process: std::process::Child,
    ours: UnixStream,
    reader: BufReader<UnixStream>,
}

impl BenchGuard {
    fn start(bin: &str) -> BenchGuard {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let fd = theirs.as_raw_fd();
        let mut cmd = Command::new(bin);
        cmd.args(["__guard", &fd.to_string(), "/bin/true"])
            .process_group(0);
        // SAFETY: fcntl only, in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::fcntl(fd, libc::F_SETFD, 0);
                Ok(())
            });
        }
        let process = cmd.spawn().expect("spawn guard");
        drop(theirs);
        let reader = BufReader::new(ours.try_clone().expect("dup"));
        BenchGuard {
            process,
            ours,
            reader,
        }
    }

    /// A start request → the guard's report that the job was started (after
    /// its own spawn returned, so after exec); then waits for the job's end.
    fn start_job(&mut self, term: usize) -> f64 {
        let deadline = boottime() + Duration::from_secs(10);
        let t = Instant::now();
        (&self.ours)
            .write_all(format!("D {}\nR {term} 0\n", deadline.as_nanos()).as_bytes())
            .expect("write");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read");
        let took = t.elapsed().as_secs_f64() * 1000.0;
        assert!(line.starts_with("S "), "guard said {line:?}");
        line.clear();
        self.reader.read_line(&mut line).expect("read");
        assert!(line.starts_with("X "), "guard said {line:?}");
        took
    }

    fn stop(self) {
        let BenchGuard {
            mut process,
            ours,
            reader,
        } = self;
        drop(reader);
        drop(ours);
        let _ = process.wait();
    }
}

/// Spawn → job exec'd. Directly: `spawn()` returns once exec succeeded. Through
/// the guard (started once, as `tenure run` does): a start request → the
/// guard's report that the job was started (after its own spawn returned).
fn start_latency(trials: usize, gap: Duration, also: Option<&str>) {
    let mut guard = BenchGuard::start(BIN);
    let mut other = also.map(BenchGuard::start);
    let mut direct = Vec::new();
    let mut guarded = Vec::new();
    let mut other_guarded = Vec::new();
    for term in 1..=trials {
        std::thread::sleep(gap);
        let t = Instant::now();
        let mut c = Command::new("/bin/true")
            .process_group(0)
            .spawn()
            .expect("spawn");
        direct.push(t.elapsed().as_secs_f64() * 1000.0);
        let _ = c.wait();

        std::thread::sleep(gap);
        guarded.push(guard.start_job(term));
        if let Some(o) = &mut other {
            std::thread::sleep(gap);
            other_guarded.push(o.start_job(term));
        }
    }
    guard.stop();
    if let Some(o) = other {
        o.stop();
    }
    let (d50, d90, d99) = percentiles(direct);
    let (g50, g90, g99) = percentiles(guarded);
    println!(
        "job start latency, spawn -> job exec'd, {trials} trials each, interleaved, {} ms before each (ms):",
        gap.as_millis()
    );
    println!("  {:<16} {:>7} {:>7} {:>7}", "", "p50", "p90", "p99");
    println!("  {:<16} {d50:>7.3} {d90:>7.3} {d99:>7.3}", "direct");
    println!("  {:<16} {g50:>7.3} {g90:>7.3} {g99:>7.3}", "through guard");
    println!(
        "  {:<16} {:>7.3} {:>7.3} {:>7.3}",
        "difference",
        g50 - d50,
        g90 - d90,
        g99 - d99
    );
    if let Some(path) = also {
        let (o50, o90, o99) = percentiles(other_guarded);
        println!(
            "  {:<16} {o50:>7.3} {o90:>7.3} {o99:>7.3}",
            "guard of --also"
        );
        println!("    (--also {path})");
    }
}

fn stale_window(dir: &Path, freezes: usize) {
    if freezes == 0 {
        return;
    }
    use nix::sys::signal::{killpg, Signal};
    use nix::unistd::Pid;
    let mut windows = Vec::new();
    for i in 0..freezes {
        let (mut run, job) = start_run(dir, &format!("freeze{i}"), "1s");
        let groups = [run.id() as i32, parent_of(job), job].map(Pid::from_raw);
        for g in groups {
            let _ = killpg(g, Signal::SIGSTOP);
        }
        // Past the deadline (< 1 s after the last renewal) while frozen.
        std::thread::sleep(Duration::from_millis(1500));
        for g in groups.iter().rev() {
            let _ = killpg(*g, Signal::SIGCONT);
        }
        let t = Instant::now();
        while alive(job) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(50));
        }
        windows.push(t.elapsed().as_secs_f64() * 1000.0);
        let _ = nix::sys::signal::kill(Pid::from_raw(run.id() as i32), Signal::SIGTERM);
        let _ = run.wait();
    }
    let max = windows.iter().copied().fold(0.0, f64::max);
    let (p50, p90, _) = percentiles(windows);
    println!(
        "stale window, SIGCONT of a tree frozen past its deadline -> job gone, {freezes} trials (ms): p50 {p50:.3} p90 {p90:.3} max {max:.3}"
    );
}
