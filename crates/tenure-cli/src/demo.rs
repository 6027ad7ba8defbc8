//! `tenure demo`: the whole idea in a few seconds, on a temporary SQLite file.
//!
//! Three real `tenure run` processes compete; the demo kills the leader with
//! SIGKILL, shows the takeover and how long it took, then asks the new leader to
//! stop (SIGTERM) and shows the graceful handover.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tenure::store::{DynStore, ElectionKey, LeaseRecord, StoreOptions};

use crate::args::DemoArgs;
use crate::failure::Failure;
use crate::output::out;

struct Candidate {
    name: String,
    child: tokio::process::Child,
}

fn runtime(e: impl std::fmt::Display) -> Failure {
    Failure::Runtime(e.to_string())
}

pub async fn demo(a: DemoArgs) -> Result<u8, Failure> {
    if a.ttl < tenure::MIN_TTL {
        return Err(Failure::Usage(format!(
            "--ttl must be at least {:?}",
            tenure::MIN_TTL
        )));
    }
    let dir = tempfile::tempdir().map_err(runtime)?;
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let store = tenure::store::connect(&url, &StoreOptions::default()).await?;
    let exe = std::env::current_exe().map_err(runtime)?;
    let ttl = humantime::format_duration(a.ttl).to_string();
    let start = Instant::now();
    let say = |msg: String| {
        crate::output::write(&format!(
            "[{:>6.2}s] {msg}\n",
            start.elapsed().as_secs_f64()
        ))
    };

    out!("tenure demo: three `tenure run` processes compete for the election \"demo\"");
    out!("            on {url} (lease ttl {ttl}); only the leader runs its command.\n");
    let mut candidates = Vec::new();
    for i in 1..=3 {
        let name = format!("candidate-{i}");
        let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).map_err(runtime)?;
        let child = tokio::process::Command::new(&exe)
            .args([
                "run",
                "--store",
                &url,
                "--election",
                "demo",
                "--ttl",
                &ttl,
                "--id",
                &name,
            ])
            .args(["--", "sleep", "3600"])
            .env("TENURE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(runtime)?;
        candidates.push(Candidate { name, child });
    }
    let key = ElectionKey::new("default", "demo");
    let result = script(&store, &key, &mut candidates, a.ttl, &say).await;
    for c in &mut candidates {
        if let Some(pid) = c.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for c in &mut candidates {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.child.wait()).await;
    }
    result?;
    out!("\nTry it yourself: `tenure run --election nightly -- ./job.sh` on each replica,");
    out!("then `tenure status` to see who leads.");
    Ok(0)
}

fn identity(holder: &str) -> &str {
    holder.split('#').next().unwrap_or(holder)
}

async fn script(
    store: &DynStore,
    key: &ElectionKey,
    candidates: &mut [Candidate],
    ttl: Duration,
    say: &dyn Fn(String) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let first = wait_for(store, key, Duration::from_secs(20), |r| r.is_held()).await?;
    let leader = identity(first.holder.as_deref().unwrap_or_default()).to_string();
    say(format!(
        "{leader} leads (term {}); the other two follow and only read",
        first.term
    ))?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Crash: SIGKILL, no release. The others wait for the lease to run out.
    let idx = candidates
        .iter()
        .position(|c| c.name == leader)
        .ok_or_else(|| runtime("leader not found"))?;
    let pid = candidates[idx]
        .child
        .id()
        .ok_or_else(|| runtime("leader already exited"))?;
    let killed_at = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).map_err(runtime)?;
    let before = store
        .read(key)
        .await?
        .ok_or_else(|| runtime("lease vanished"))?;
    say(format!(
        "kill -9 {leader} (pid {pid}); its lease has {:.2}s left and nobody will release it",
        before.remaining.as_secs_f64()
    ))?;
    let second = wait_for(store, key, ttl * 3, |r| r.is_held() && r.term > first.term).await?;
    let took = killed_at.elapsed();
    let after_expiry = (second.acquired_at_us - before.expires_at_us) as f64 / 1000.0;
    let leader2 = identity(second.holder.as_deref().unwrap_or_default()).to_string();
    say(format!(
        "{leader2} takes over (term {}): {:.2}s after the kill, {after_expiry:.0}ms after the old lease expired",
        second.term,
        took.as_secs_f64()
    ))?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Graceful: SIGTERM makes `tenure run` stop its command and release.
    let idx = candidates
        .iter()
        .position(|c| c.name == leader2)
        .ok_or_else(|| runtime("leader not found"))?;
    let pid = candidates[idx]
        .child
        .id()
        .ok_or_else(|| runtime("leader already exited"))?;
    say(format!(
        "asking {leader2} to stop (SIGTERM): it stops its command and releases the lease"
    ))?;
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).map_err(runtime)?;
    let sent = Instant::now();
    // Poll closely enough to see the vacant moment: the release stamps the
    // store's clock into the record, which gives the handover gap in store time.
    let mut released_at = None;
    let deadline = Instant::now() + ttl * 3;
    let third = loop {
        if let Some(r) = store.read(key).await? {
            if r.holder.is_none() && r.term == second.term {
                released_at = Some(r.expires_at_us);
            }
            if r.is_held() && r.term > second.term {
                break r;
            }
        }
        if Instant::now() > deadline {
            return Err(runtime("no graceful handover; see the candidates' logs"));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let leader3 = identity(third.holder.as_deref().unwrap_or_default()).to_string();
    let handover = match released_at {
        Some(rel) => format!(
            "{:.0}ms after the release ({:.0}ms after the SIGTERM)",
            (third.acquired_at_us - rel) as f64 / 1000.0,
            sent.elapsed().as_secs_f64() * 1000.0
        ),
        None => format!(
            "{:.0}ms after the SIGTERM",
            sent.elapsed().as_secs_f64() * 1000.0
        ),
    };
    say(format!(
        "{leader3} takes over (term {}): {handover}",
        third.term
    ))?;
    out!();
    crate::output::write(&crate::status::render_table(&[store
        .read(key)
        .await?
        .ok_or_else(|| runtime("lease vanished"))?]))?;
    Ok(())
}

async fn wait_for(
    store: &DynStore,
    key: &ElectionKey,
    within: Duration,
    pred: impl Fn(&LeaseRecord) -> bool,
) -> Result<LeaseRecord, Failure> {
    let start = Instant::now();
    loop {
        if let Some(r) = store.read(key).await? {
            if pred(&r) {
                return Ok(r);
            }
        }
        if start.elapsed() > within {
            return Err(runtime(format!(
                "nothing happened within {within:?}; see the candidates' logs"
            )));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}
