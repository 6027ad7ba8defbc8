//! Hand-overs under `tenure run`, on every store: a resign, a transfer or a
//! preemption stops the job the way SIGTERM to tenure does (the job's own
//! SIGTERM handler runs, within `--kill-grace`), and the successor's job
//! starts only after the old one is gone, also when the old leader's guard
//! is slow to act (stopped for 0.5 s while the request arrives).
//!
//! Each job writes a heartbeat line every 2 ms on `CLOCK_MONOTONIC` (one
//! clock for every process on the machine): the new job's first line must
//! come after the old job's last.

mod common;

use common::parent_of;

use common::rand_u32;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{logs, spawn_tenure, store_url, tenure, text, wait_until, Candidate};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tenure::store::{ElectionKey, StoreOptions};

/// Traps SIGTERM, then keeps beating for 200 ms (inside the 500 ms kill
/// grace) and exits 0, saying so: a job that got its grace leaves
/// `clean-exit` as its last line.
const JOB: &str = r#"
import os, signal, sys, time
term = os.environ["TENURE_TERM"]
out = open("hb-" + term, "w", buffering=1)
out.write("start %d %d\n" % (os.getpid(), time.monotonic_ns()))
asked = None
def on_term(*_):
    global asked
    asked = time.monotonic_ns()
signal.signal(signal.SIGTERM, on_term)
while True:
    out.write("hb %d\n" % time.monotonic_ns())
    if asked is not None:
        if not out.closed and time.monotonic_ns() - asked > 200_000_000:
            out.write("clean-exit %d\n" % time.monotonic_ns())
            out.close()
            sys.exit(0)
    time.sleep(0.002)
"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Request {
    /// `tenure resign` from another process (through the store).
    Resign,
    /// `tenure transfer --to b` from another process.
    Transfer,
    /// `--preempt-after` on the leader, `--priority` on the follower.
    Preempt,
    /// `POST .../resign` to the leader's own `--http` (in-process).
    HttpResign,
}

/// A job's heartbeat file: its pid, its first and last beat, and whether
/// it exited by itself after SIGTERM.
struct Beats {
    pid: i32,
    start: u64,
    last: u64,
    clean_exit: bool,
}

fn beats(path: &Path) -> Option<Beats> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let mut first = lines.next()?.split_whitespace().skip(1);
    let pid = first.next()?.parse().ok()?;
    let start: u64 = first.next()?.parse().ok()?;
    let mut last = start;
    let mut clean_exit = false;
    for l in text.lines() {
        let mut p = l.split_whitespace();
        match (p.next(), p.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("hb"), Some(t)) => last = last.max(t),
            (Some("clean-exit"), Some(_)) => clean_exit = true,
            _ => {}
        }
    }
    Some(Beats {
        pid,
        start,
        last,
        clean_exit,
    })
}

/// The heartbeat files in `dir`, by term.
fn jobs(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let term = e.file_name().to_str()?.strip_prefix("hb-")?.parse().ok()?;
                Some((term, e.path()))
            })
            .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

async fn scenario(store: &str, request: Request) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(url) = store_url(store, d).await else {
        return;
    };
    let election = format!("ho-{store}-{request:?}-{:x}", rand_u32()).to_lowercase();
    std::fs::write(d.join("job.py"), JOB).unwrap();
    std::fs::write(d.join("token"), "s3cret\n").unwrap();
    let http_port = tenure_testsupport::servers::free_port()
        .unwrap()
        .to_string();
    let spawn = |id: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "--store",
            &url,
            "--election",
            &election,
            "--ttl",
            "3s",
            "--kill-grace",
            "500ms",
            "--id",
            id,
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "python3", "job.py"]);
        let log = d.join(format!("{id}.log"));
        Candidate {
            child: spawn_tenure(d, &args, &log),
            log,
        }
    };
    let a_extra: Vec<&str> = match request {
        Request::Preempt => vec!["--preempt-after", "1500ms"],
        Request::HttpResign => vec!["--http", &http_port, "--token-file", "token"],
        _ => vec![],
    };
    let a = spawn("a", &a_extra);
    let (old_term, old_file) = wait_until("a's job to start", Duration::from_secs(20), || {
        jobs(d).into_iter().next()
    })
    .await;
    let b_extra: Vec<&str> = match request {
        Request::Preempt => vec!["--priority", "5"],
        _ => vec![],
    };
    let b = spawn("b", &b_extra);
    common::wait_until_registered(&url, &election, "b", || logs([&a, &b])).await;
    let store_handle = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new("default", election.clone());
    let old = beats(&old_file).expect("a's heartbeat file");
    // The old leader's guard is the job's parent: stopped, it cannot act on
    // anything tenure asks (as on a loaded machine) for 0.5 s.
    let guard = parent_of(old.pid).expect("the job's guard");
    kill(Pid::from_raw(guard), Signal::SIGSTOP).unwrap();
    let resumed = scopeguard(guard);
    let requester = match request {
        Request::Resign => Some(std::thread::spawn({
            let (d, url, election) = (d.to_path_buf(), url.clone(), election.clone());
            move || tenure(&d, &["resign", "--store", &url, "--election", &election])
        })),
        Request::Transfer => Some(std::thread::spawn({
            let (d, url, election) = (d.to_path_buf(), url.clone(), election.clone());
            move || {
                tenure(
                    &d,
                    &[
                        "transfer",
                        "--store",
                        &url,
                        "--election",
                        &election,
                        "--to",
                        "b",
                    ],
                )
            }
        })),
        Request::HttpResign => Some(std::thread::spawn({
            let (port, election) = (http_port.clone(), election.clone());
            move || {
                let out = std::process::Command::new("curl")
                    .args([
                        "-s",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "-X",
                        "POST",
                        "-H",
                        "Authorization: Bearer s3cret",
                        &format!("http://127.0.0.1:{port}/v1/elections/default/{election}/resign"),
                    ])
                    .output()
                    .expect("curl");
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    "202",
                    "HTTP resign: {out:?}"
                );
                out
            }
        })),
        Request::Preempt => {
            wait_until("a to preempt itself", Duration::from_secs(10), || {
                std::fs::read_to_string(&a.log)
                    .unwrap_or_default()
                    .contains("preempted by a member of higher priority")
                    .then_some(())
            })
            .await;
            None
        }
    };
    // The fault itself: the guard stays stopped for 0.5 s.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(resumed);
    let (new_term, new_file) = wait_until(
        "the successor's job to start",
        Duration::from_secs(20),
        || jobs(d).into_iter().find(|(t, _)| *t > old_term),
    )
    .await;
    if let Some(r) = requester {
        let out = r.join().unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
    let new = wait_until("the successor's heartbeats", Duration::from_secs(5), || {
        beats(&new_file)
    })
    .await;
    let old = beats(&old_file).unwrap();
    let all = logs([&a, &b]);
    assert!(
        new.start > old.last,
        "{store} {request:?}: the new job (term {new_term}) started {:?} before the old one's last heartbeat:\n{all}",
        Duration::from_nanos(old.last - new.start)
    );
    assert!(
        old.clean_exit,
        "{store} {request:?}: the old job (term {old_term}) did not get its SIGTERM and grace:\n{all}"
    );
    let holder = store_handle.read(&key).await.unwrap().unwrap().holder;
    assert!(
        holder.as_deref().is_some_and(|h| h.starts_with("b#")),
        "{store} {request:?}: b leads after the hand-over, not {holder:?}:\n{all}"
    );
    drop((a, b));
}

/// SIGCONTs the guard when dropped, also when the test fails first.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

fn scopeguard(pid: i32) -> Resume {
    Resume(pid)
}

macro_rules! handover_tests {
    ($($store:ident: $name:literal),* $(,)?) => {$(
        mod $store {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn resign_stops_the_job_before_handing_over() {
                scenario($name, Request::Resign).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn transfer_stops_the_job_before_handing_over() {
                scenario($name, Request::Transfer).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn preemption_stops_the_job_before_handing_over() {
                scenario($name, Request::Preempt).await;
            }
        }
    )*};
}

handover_tests!(
    sqlite: "sqlite",
    mariadb: "mariadb",
    postgres: "postgres",
    pgbouncer: "pgbouncer",
    redis: "redis",
    etcd: "etcd",
    zookeeper: "zookeeper",
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_resign_stops_the_job_before_handing_over() {
    scenario("sqlite", Request::HttpResign).await;
}
