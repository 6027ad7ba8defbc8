//! One candidate process: campaigns, does leader-only work on the fenced
//! resource every few milliseconds, and logs what it believed and when.

use std::path::PathBuf;
use std::time::Duration;

use tenure::clock::{BootClock, Clock};
use tenure::store::StoreOptions;
use tenure::Elector;

use crate::history::{append, Event};
use crate::resource::Resource;
use crate::shared_clock;

#[derive(Debug, clap::Args)]
pub struct CandidateArgs {
    #[arg(long)]
    pub store: String,
    #[arg(long)]
    pub election: String,
    #[arg(long)]
    pub id: String,
    #[arg(long)]
    pub inc: u32,
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    #[arg(long)]
    pub events: PathBuf,
    #[arg(long)]
    pub resource: PathBuf,
    /// Campaign as one candidate of a semaphore with this many slots (0:
    /// one election); each slot's history goes to its own directory.
    #[arg(long, default_value_t = 0)]
    pub slots: usize,
}

pub async fn run(a: CandidateArgs) -> std::io::Result<()> {
    // Where each election's history goes: the files given, or with
    // `--slots`, one directory per slot beside them (`slot_dir`).
    let places: Vec<(PathBuf, PathBuf)> = match a.slots {
        0 => vec![(a.events.clone(), a.resource.clone())],
        n => (0..n)
            .map(|slot| {
                let out = a.events.parent().unwrap_or(std::path::Path::new("."));
                let dir = slot_dir(out, slot);
                let events = dir.join(a.events.file_name().unwrap_or_default());
                (events, dir.join("resource"))
            })
            .collect(),
    };
    let mut logs = Vec::new();
    for (events, _) in &places {
        if let Some(dir) = events.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(events)?;
        append(
            &mut file,
            &Event::Start {
                cand: a.id.clone(),
                inc: a.inc,
                pid: std::process::id(),
                t: shared_clock::now_ns(),
                faketime: std::env::var("FAKETIME").ok(),
            },
        );
        logs.push(file);
    }
    let store = loop {
        match tenure::store::connect(&a.store, &StoreOptions::default()).await {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let builder = Elector::builder(store)
        .election(a.election.clone())
        .identity(a.id.clone())
        .ttl(a.ttl)
        .poll_period(Duration::from_millis(40));
    let electors: Vec<Elector> = match a.slots {
        0 => vec![builder.build().map_err(std::io::Error::other)?],
        n => builder
            .build_semaphore(n)
            .map_err(std::io::Error::other)?
            .electors()
            .to_vec(),
    };
    let watchers: Vec<_> = electors
        .iter()
        .zip(logs)
        .map(|(e, log)| tokio::spawn(watch(e.clone(), log, a.id.clone(), a.inc)))
        .collect();

    // Leader-only work, on each election's own resource.
    let mut resources = Vec::new();
    for (_, resource) in &places {
        resources.push(Resource::open(resource)?);
    }
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (e, resource) in electors.iter().zip(&mut resources) {
            let e = e.clone();
            resource.attempt(&a.id, a.inc, move || e.term());
        }
        if watchers.iter().any(|w| w.is_finished()) {
            return Ok(());
        }
    }
}

/// Where slot `slot`'s history goes in `--slots` mode: `slot-N` in the
/// run's output directory, which the checker reads as an election of its own.
pub fn slot_dir(out: &std::path::Path, slot: usize) -> PathBuf {
    out.join(format!("slot-{slot}"))
}

/// Logs acquisitions and when `lost()` fired, against the deadline in
/// force (both on the elector's clock), until the elector is shut down.
async fn watch(elector: Elector, mut events: std::fs::File, id: String, inc: u32) {
    while let Ok(l) = elector.acquired().await {
        append(
            &mut events,
            &Event::Acquired {
                cand: id.clone(),
                inc,
                term: l.term(),
                t: shared_clock::now_ns(),
            },
        );
        let mut deadline = l.deadline().unwrap_or_default();
        loop {
            tokio::select! {
                _ = l.lost() => break,
                _ = tokio::time::sleep(Duration::from_millis(2)) => {
                    if let Some(d) = l.deadline() { deadline = d; }
                }
            }
        }
        append(
            &mut events,
            &Event::Lost {
                cand: id.clone(),
                inc,
                term: l.term(),
                t: shared_clock::now_ns(),
                lost_ns: BootClock.now().as_nanos() as u64,
                deadline_ns: deadline.as_nanos() as u64,
            },
        );
    }
}
