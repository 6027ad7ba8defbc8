//! `tenure run` as cron uses it: `--no-wait` and `--timeout` give up
//! without running the job when another replica leads (exit 75), and
//! `--once KEY` runs the job until one run succeeds across all replicas.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{spawn_tenure, tenure, text, wait_until};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `tenure run`'s exit code when `--no-wait`/`--timeout` gave up.
const EXIT_NOT_LEADER: i32 = 75;

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("t.db").display())
}

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

#[tokio::test]
async fn no_wait_against_a_live_leader_exits_75_at_once_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let _leader = leader(d, &url, "nightly").await;
    let start = Instant::now();
    let out = tenure(
        d,
        &[
            "run",
            "--store",
            &url,
            "--election",
            "nightly",
            "--no-wait",
            "--",
            "touch",
            "ran",
        ],
    );
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(EXIT_NOT_LEADER), "{}", text(&out));
    assert!(took < Duration::from_secs(1), "took {took:?}");
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
    let out = tenure(
        d,
        &[
            "run",
            "--store",
            &url,
            "--election",
            "nightly",
            "--no-wait",
            "--",
            "touch",
            "ran",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(d.join("ran").exists());
}

#[tokio::test]
async fn timeout_gives_up_after_its_time_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = sqlite_url(d);
    let _leader = leader(d, &url, "nightly").await;
    let start = Instant::now();
    let out = tenure(
        d,
        &[
            "run",
            "--store",
            &url,
            "--election",
            "nightly",
            "--timeout",
            "2s",
            "--",
            "touch",
            "ran",
        ],
    );
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(EXIT_NOT_LEADER), "{}", text(&out));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
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
