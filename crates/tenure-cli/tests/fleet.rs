//! A fleet on a small database: 50 `tenure run` replicas of one election
//! on a private PostgreSQL that takes 20 connections all start, stay alive
//! and run one job. Each replica that is neither the leader nor first in
//! line holds no connection between its reads, so the fleet needs a few
//! connections rather than 50 or more (it needed 3-4 each).

mod common;

use std::time::{Duration, Instant};

use common::{spawn_tenure, starts};
use tenure_testsupport::servers::{self, Kind, Server, ServerOptions};

const REPLICAS: usize = 50;

fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only asks whether `pid` exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_replicas_fit_on_a_server_of_twenty_connections() {
    let options = ServerOptions::default().with_args(&["-c", "max_connections=20"]);
    let Some(server) = Server::start_or_skip(Kind::Postgres, options, servers::required()) else {
        return;
    };
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let job = format!(
        "echo start $TENURE_TERM $$ >> {}; exec sleep 100000",
        events.display()
    );
    let mut replicas: Vec<_> = (0..REPLICAS)
        .map(|i| {
            spawn_tenure(
                dir.path(),
                &[
                    "run",
                    "--store",
                    &url,
                    "--election",
                    "fleet",
                    // Room for a renewal stuck behind fifty starting
                    // processes on a small machine: a lapse would rightly
                    // stop the job, and this test is about connections.
                    "--ttl",
                    "4s",
                    "--id",
                    &format!("r{i}"),
                    "--",
                    "sh",
                    "-c",
                    &job,
                ],
                &dir.path().join(format!("r{i}.log")),
            )
        })
        .collect();
    let log_of = |i: usize| {
        std::fs::read_to_string(dir.path().join(format!("r{i}.log"))).unwrap_or_default()
    };
    let check_alive = |replicas: &mut Vec<std::process::Child>, when: &str| {
        for (i, r) in replicas.iter_mut().enumerate() {
            if let Ok(Some(status)) = r.try_wait() {
                panic!("{when}: replica {i} exited ({status}):\n{}", log_of(i));
            }
        }
    };
    // Until a job runs: everyone has connected, one leads.
    let start = Instant::now();
    while starts(&events).is_empty() {
        check_alive(&mut replicas, "starting");
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no job started within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Two TTLs of following: every replica stays, one job runs.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        check_alive(&mut replicas, "following");
        let running: Vec<_> = starts(&events)
            .into_iter()
            .filter(|(_, pid)| alive(*pid))
            .collect();
        assert_eq!(running.len(), 1, "jobs running: {running:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for r in &replicas {
        // SAFETY: kill(2) on a child this test started.
        unsafe { libc::kill(r.id() as i32, libc::SIGTERM) };
    }
    for r in &mut replicas {
        let _ = r.wait();
    }
}
