//! `tenure run --slots N`: at most N replicas run the command at once, each
//! under its own slot's lease and term; a slot whose holder is killed
//! (`kill -9`) is refilled once its lease expires, and a resigned slot is
//! taken by a waiting replica at once, after the job stopped.
//!
//! Each job writes a heartbeat line every 2 ms on `CLOCK_MONOTONIC` (one
//! clock for every process on the machine) to `hb-SLOT-TERM`; the files
//! show how many jobs ran at any moment.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    logs, parent_of, rand_u32, spawn_tenure, store_url, tenure, text, wait_until, Candidate,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const TTL: Duration = Duration::from_secs(2);

/// Beats until SIGTERM, then for 100 ms more (inside the kill grace), then
/// exits 0 saying so.
const JOB: &str = r#"
import os, signal, sys, time
name = "hb-%s-%s" % (os.environ["TENURE_SLOT"], os.environ["TENURE_TERM"])
out = open(name + ".tmp", "w", buffering=1)
out.write("start %d %d\n" % (os.getpid(), time.monotonic_ns()))
os.rename(name + ".tmp", name)
asked = None
def on_term(*_):
    global asked
    asked = time.monotonic_ns()
signal.signal(signal.SIGTERM, on_term)
while True:
    out.write("hb %d\n" % time.monotonic_ns())
    if asked is not None and time.monotonic_ns() - asked > 100_000_000:
        out.write("clean-exit %d\n" % time.monotonic_ns())
        out.close()
        sys.exit(0)
    time.sleep(0.002)
"#;

/// One job's heartbeat file.
#[derive(Debug)]
struct Job {
    slot: u32,
    term: u64,
    pid: i32,
    start: u64,
    last: u64,
    clean_exit: bool,
}

fn jobs(dir: &Path) -> Vec<Job> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some((slot, term)) = name.strip_prefix("hb-").and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(slot), Ok(term)) = (slot.parse(), term.parse()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let mut first = text.lines().next().unwrap_or("").split_whitespace().skip(1);
        let (Some(Ok(pid)), Some(Ok(start))) = (
            first.next().map(str::parse::<i32>),
            first.next().map(str::parse::<u64>),
        ) else {
            continue;
        };
        let mut job = Job {
            slot,
            term,
            pid,
            start,
            last: start,
            clean_exit: false,
        };
        for l in text.lines() {
            let mut p = l.split_whitespace();
            match (p.next(), p.next().and_then(|n| n.parse::<u64>().ok())) {
                (Some("hb"), Some(t)) => job.last = job.last.max(t),
                (Some("clean-exit"), Some(_)) => job.clean_exit = true,
                _ => {}
            }
        }
        out.push(job);
    }
    out.sort_by_key(|j| j.start);
    out
}

/// The most jobs whose heartbeats overlapped at any instant, and any two
/// jobs of one slot that overlapped.
fn overlaps(jobs: &[Job]) -> (usize, Vec<String>) {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for j in jobs {
        edges.push((j.start, 1));
        edges.push((j.last + 1, -1));
    }
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    let mut same_slot = Vec::new();
    for (i, a) in jobs.iter().enumerate() {
        for b in &jobs[i + 1..] {
            if a.slot == b.slot && b.start <= a.last {
                same_slot.push(format!(
                    "slot {}: term {} and term {}",
                    a.slot, a.term, b.term
                ));
            }
        }
    }
    (most as usize, same_slot)
}

/// The jobs running now (beating within the last 500 ms: a job beats every
/// 2 ms, but a busy machine can hold one back for a while).
fn running(dir: &Path) -> Vec<Job> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0);
    jobs(dir)
        .into_iter()
        .filter(|j| !j.clean_exit && now.saturating_sub(j.last) < 500_000_000)
        .collect()
}

/// The replica (index) whose `tenure run` runs the job with this pid.
fn replica_of(replicas: &[Candidate], job_pid: i32) -> usize {
    let tenure = parent_of(job_pid)
        .and_then(parent_of)
        .expect("the job's tenure");
    replicas
        .iter()
        .position(|r| r.child.id() as i32 == tenure)
        .expect("a replica runs the job")
}

async fn two_slots_three_replicas(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(url) = store_url(store, d).await else {
        return;
    };
    let election = format!("slots-{store}-{:x}", rand_u32());
    std::fs::write(d.join("job.py"), JOB).unwrap();
    let mut replicas: Vec<Candidate> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            let log = d.join(format!("{id}.log"));
            let args = [
                "run",
                "--store",
                &url,
                "--election",
                &election,
                "--slots",
                "2",
                "--ttl",
                "2s",
                "--kill-grace",
                "500ms",
                "--id",
                id,
                "--",
                "python3",
                "job.py",
            ];
            Candidate {
                child: spawn_tenure(d, &args, &log),
                log,
            }
        })
        .collect();
    let first = wait_until("two jobs running", Duration::from_secs(20), || {
        let r = running(d);
        (r.len() == 2).then_some(r)
    })
    .await;
    assert_ne!(first[0].slot, first[1].slot, "{}", logs(&replicas));
    // `tenure status` of the semaphore shows its slots.
    let out = tenure(d, &["status", "--store", &url, "--election", &election]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && shown.contains(&tenure::slot_election(&election, 0))
            && shown.contains(&tenure::slot_election(&election, 1)),
        "{}",
        text(&out)
    );
    assert_ne!(
        replica_of(&replicas, first[0].pid),
        replica_of(&replicas, first[1].pid),
        "one replica runs both jobs:\n{}",
        logs(&replicas)
    );

    // A resign: the job stops with its grace, and the waiting replica
    // takes the slot at once (well within a TTL).
    let resigned = &first[0];
    let slot_election = tenure::slot_election(&election, resigned.slot as usize);
    let out = tenure(
        d,
        &["resign", "--store", &url, "--election", &slot_election],
    );
    assert!(out.status.success(), "{}", text(&out));
    // From the request's return: starting the command and connecting are
    // not the hand-over's part.
    let asked = Instant::now();
    let next = wait_until(
        "the resigned slot refilled",
        Duration::from_secs(10),
        || {
            jobs(d)
                .into_iter()
                .find(|j| j.slot == resigned.slot && j.term > resigned.term)
        },
    )
    .await;
    let took = asked.elapsed();
    let ended = jobs(d)
        .into_iter()
        .find(|j| j.slot == resigned.slot && j.term == resigned.term)
        .unwrap();
    assert!(
        ended.clean_exit,
        "the resigned job got no grace:\n{}",
        logs(&replicas)
    );
    assert!(
        took < TTL,
        "a resigned slot took {took:?} to refill:\n{}",
        logs(&replicas)
    );
    eprintln!("{store}: resigned slot refilled after {took:?}");

    // kill -9 a holder's tenure: the guard kills its job at once, the
    // slot's lease expires, and the third replica (the resigner, now
    // waiting) fills it.
    let victim = running(d)
        .into_iter()
        .find(|j| j.slot != next.slot || j.term != next.term)
        .unwrap_or_else(|| panic!("two jobs after the resign:\n{}", logs(&replicas)));
    let dead = replicas.remove(replica_of(&replicas, victim.pid));
    let killed = Instant::now();
    kill(Pid::from_raw(dead.child.id() as i32), Signal::SIGKILL).unwrap();
    wait_until("the killed holder's slot refilled", TTL * 5, || {
        jobs(d)
            .into_iter()
            .find(|j| j.slot == victim.slot && j.term > victim.term)
    })
    .await;
    let took = killed.elapsed();
    eprintln!("{store}: a killed holder's slot refilled after {took:?} (TTL {TTL:?})");
    assert!(
        took < TTL + Duration::from_secs(2),
        "the killed holder's slot took {took:?} to refill:\n{}",
        logs(&replicas)
    );
    drop(dead);
    // Let the last jobs beat a little, then judge every file.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let all = jobs(d);
    let (most, same_slot) = overlaps(&all);
    assert!(
        most <= 2,
        "{most} jobs ran at once: {all:?}\n{}",
        logs(&replicas)
    );
    assert!(same_slot.is_empty(), "{same_slot:?}\n{}", logs(&replicas));
    drop(replicas);
}

macro_rules! slot_tests {
    ($($store:ident: $name:literal),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $store() {
            two_slots_three_replicas($name).await;
        }
    )*};
}

slot_tests!(sqlite: "sqlite", postgres: "postgres", redis: "redis", etcd: "etcd");
