//! `tenure run` as cron uses it: `--no-wait` and `--timeout` give up
//! without running the job when another replica leads (exit 75), and
//! `--once KEY` runs the job until one run succeeds across all replicas.

mod common;

use common::parent_of;

use common::rand_u32;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{spawn_tenure, sqlite_url, tenure, text, wait_until};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `tenure run`'s exit code when `--no-wait`/`--timeout` gave up.
const EXIT_NOT_LEADER: i32 = 75;

/// A replica that leads `election` and runs `sleep` until dropped.
struct Leader(Child);

impl Drop for Leader {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

async fn leader(dir: &Path, url: &str, election: &str) -> Leader {
    let child = spawn_tenure(
        dir,
        &[
            "run",
            "--store",
            url,
            "--election",
            election,
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "touch leader.started; exec sleep 1000",
        ],
        &dir.join("leader.log"),
    );
    wait_until("the leader's job", Duration::from_secs(10), || {
        dir.join("leader.started").exists().then_some(())
    })
    .await;
    Leader(child)
}

/// Runs `tenure run --election nightly WAIT... -- touch ran` to completion
/// in `dir`; returns its output and how long it took.
fn touch_ran(dir: &Path, url: &str, wait: &[&str]) -> (std::process::Output, Duration) {
    let mut args = vec!["run", "--store", url, "--election", "nightly"];
    args.extend_from_slice(wait);
    args.extend_from_slice(&["--", "touch", "ran"]);
    let start = Instant::now();
    let out = tenure(dir, &args);
    (out, start.elapsed())
}

#[tokio::test]
async fn no_wait_against_a_live_leader_exits_75_at_once_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let _leader = leader(d, &url, "nightly").await;
    let (out, took) = touch_ran(d, &url, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(EXIT_NOT_LEADER), "{}", text(&out));
    // Not waiting for the leader (which never leaves): starting a debug
    // build and connecting is all the time it takes.
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(!d.join("ran").exists(), "the job must not run");
    assert!(
        text(&out).contains("another replica leads"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn no_wait_on_a_free_election_runs_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let (out, _) = touch_ran(d, &url, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(d.join("ran").exists());
}

#[tokio::test]
async fn timeout_gives_up_after_its_time_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let _leader = leader(d, &url, "nightly").await;
    let (out, took) = touch_ran(d, &url, &["--timeout", "2s"]);
    assert_eq!(out.status.code(), Some(EXIT_NOT_LEADER), "{}", text(&out));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "took {took:?}"
    );
    assert!(!d.join("ran").exists(), "the job must not run");
}

#[tokio::test]
async fn timeout_runs_the_job_when_leadership_comes_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let leader = leader(d, &url, "nightly").await;
    let waiter = spawn_tenure(
        d,
        &[
            "run",
            "--store",
            &url,
            "--election",
            "nightly",
            "--timeout",
            "10s",
            "--",
            "touch",
            "ran",
        ],
        &d.join("waiter.log"),
    );
    // The leader steps down (SIGTERM releases at once): the waiter leads.
    drop(leader);
    let status = tokio::task::spawn_blocking(move || {
        let mut w = waiter;
        w.wait()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(d.join("ran").exists());
}

/// Runs `tenure run --once KEY` in `dir` to completion, in the background,
/// with `--ttl 3s` unless `extra` says otherwise.
fn once(dir: &Path, url: &str, election: &str, id: &str, extra: &[&str], job: &str) -> Child {
    let mut args = vec![
        "run",
        "--store",
        url,
        "--election",
        election,
        "--id",
        id,
        "--once",
        "2026-11-27",
    ];
    // A lease that a renewal stuck behind the other replicas' writes on a
    // loaded machine cannot bring within the kill grace: at 1 s (grace
    // 250 ms) one such renewal ended term 1 during a job, which then ran
    // again under term 2, as it must when its runner may have lost its lease.
    if !extra.contains(&"--ttl") {
        args.extend_from_slice(&["--ttl", "3s"]);
    }
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", job]);
    spawn_tenure(dir, &args, &dir.join(format!("{id}.log")))
}

async fn exit_code(child: Child) -> Option<i32> {
    tokio::task::spawn_blocking(move || {
        let mut c = child;
        c.wait()
    })
    .await
    .unwrap()
    .unwrap()
    .code()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn logs(dir: &Path, ids: &[&str]) -> String {
    ids.iter()
        .map(|id| std::fs::read_to_string(dir.join(format!("{id}.log"))).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n----\n")
}

/// Three replicas started together: the job runs once, every replica exits
/// 0, and a fourth started after the success exits 0 at once without running.
async fn once_runs_the_job_once_across_replicas(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(url) = common::store_url(store, d).await else {
        return;
    };
    let election = format!("cron-{store}-{:x}", rand_u32());
    let job = "echo \"run $TENURE_TERM $TENURE_ATTEMPT\" >> runs; sleep 0.5";
    let replicas: Vec<Child> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| once(d, &url, &election, id, &[], job))
        .collect();
    for r in replicas {
        assert_eq!(
            exit_code(r).await,
            Some(0),
            "{}",
            logs(d, &["r1", "r2", "r3"])
        );
    }
    let runs = lines(&d.join("runs"));
    assert_eq!(
        runs.len(),
        1,
        "{store}: the job ran {runs:?}\n{}",
        logs(d, &["r1", "r2", "r3"])
    );
    assert!(runs[0].ends_with(" 1"), "TENURE_ATTEMPT=1: {runs:?}");
    let start = Instant::now();
    let late = once(d, &url, &election, "r4", &[], job);
    assert_eq!(exit_code(late).await, Some(0));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(lines(&d.join("runs")).len(), 1, "the late replica ran it");
    let log = logs(d, &["r4"]);
    assert!(log.contains("done by r"), "{log}");
    let out = tenure(
        d,
        &[
            "status",
            "--store",
            &url,
            "--election",
            &election,
            "--history",
        ],
    );
    assert!(
        text(&out).contains("2026-11-27") && text(&out).contains("done by r"),
        "{}",
        text(&out)
    );
}

macro_rules! once_tests {
    ($($store:ident: $name:literal),* $(,)?) => {$(
        mod $store {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn once_runs_the_job_once_across_replicas() {
                super::once_runs_the_job_once_across_replicas($name).await;
            }
        }
    )*};
}

once_tests!(
    sqlite: "sqlite",
    mariadb: "mariadb",
    postgres: "postgres",
    redis: "redis",
    etcd: "etcd",
    zookeeper: "zookeeper",
);

/// The runner is SIGKILLed mid-job: another replica runs the job again (as
/// attempt 2), and one success is recorded.
#[tokio::test]
async fn once_runs_the_job_again_when_its_runner_dies() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let job =
        "if [ \"$TENURE_ATTEMPT\" = 1 ]; then echo $PPID > runner-guard.pid; exec sleep 1000; fi; \
               echo \"done $TENURE_ATTEMPT\" >> runs";
    let a = once(d, &url, "nightly", "a", &[], job);
    let b = once(d, &url, "nightly", "b", &[], job);
    let guard: i32 = wait_until("the first attempt", Duration::from_secs(10), || {
        std::fs::read_to_string(d.join("runner-guard.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
    .await;
    // The guard's parent is the `tenure run` that runs the job.
    let runner = parent_of(guard).expect("the runner");
    kill(Pid::from_raw(runner), Signal::SIGKILL).unwrap();
    let (killed, survivor) = if runner == a.id() as i32 {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(exit_code(killed).await, None, "SIGKILLed");
    assert_eq!(
        exit_code(survivor).await,
        Some(0),
        "{}",
        logs(d, &["a", "b"])
    );
    assert_eq!(lines(&d.join("runs")), vec!["done 2".to_string()]);
    let out = tenure(
        d,
        &[
            "status",
            "--store",
            &url,
            "--election",
            "nightly",
            "--history",
        ],
    );
    let status = text(&out);
    assert_eq!(status.matches("done by").count(), 1, "{status}");
    assert!(status.contains("(attempt 2)"), "{status}");
}

/// A job that keeps failing runs `--attempts` times in all, and every
/// replica exits with its code.
#[tokio::test]
async fn once_gives_up_after_its_attempts_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let job = "echo \"run $TENURE_ATTEMPT\" >> runs; sleep 0.2; exit 3";
    let a = once(d, &url, "nightly", "a", &["--attempts", "2"], job);
    let b = once(d, &url, "nightly", "b", &["--attempts", "2"], job);
    assert_eq!(exit_code(a).await, Some(3), "{}", logs(d, &["a", "b"]));
    assert_eq!(exit_code(b).await, Some(3), "{}", logs(d, &["a", "b"]));
    assert_eq!(
        lines(&d.join("runs")),
        vec!["run 1".to_string(), "run 2".into()]
    );
    // Given up for good: a replica started later fails at once too.
    let c = once(d, &url, "nightly", "c", &["--attempts", "2"], job);
    assert_eq!(exit_code(c).await, Some(3));
    assert_eq!(lines(&d.join("runs")).len(), 2);
}
