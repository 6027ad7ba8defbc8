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
}

pub async fn run(a: CandidateArgs) -> std::io::Result<()> {
    let mut events = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.events)?;
    append(
        &mut events,
        &Event::Start {
            cand: a.id.clone(),
            inc: a.inc,
            pid: std::process::id(),
            t: shared_clock::now_ns(),
            faketime: std::env::var("FAKETIME").ok(),
        },
    );
    let store = loop {
        match tenure::store::connect(&a.store, &StoreOptions::default()).await {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let elector = std::sync::Arc::new(
        Elector::builder(store)
            .election(a.election.clone())
            .identity(a.id.clone())
            .ttl(a.ttl)
            .poll_period(Duration::from_millis(40))
            .build()
            .map_err(std::io::Error::other)?,
    );

    // Leadership watcher: logs acquisitions and when lost() fired, against the
    // deadline in force (both on the elector's clock).
    let watcher = {
        let elector = elector.clone();
        let (id, inc) = (a.id.clone(), a.inc);
        tokio::spawn(async move {
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
        })
    };

    // Leader-only work.
    let mut resource = Resource::open(&a.resource)?;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let e = elector.clone();
        resource.attempt(&a.id, a.inc, move || e.term());
        if watcher.is_finished() {
            return Ok(());
        }
    }
}
