//! A leader-only worker that writes to the database it elects on, fenced by
//! its lease, with an observer, event hooks and a graceful shutdown.
//!
//! ```sh
//! cargo run -p tenure --example fenced_worker -- sqlite://worker.db
//! cargo run -p tenure --features postgres --example fenced_worker -- postgres://postgres@127.0.0.1/test
//! ```
//!
//! Start it in two terminals: one writes, the other waits. Ctrl-C the writer
//! and the other takes over within milliseconds; `kill -STOP` it instead and
//! the other takes over after the TTL, and the paused one's writes are refused
//! when it wakes.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenure::observe::{observe, ObserveOptions, Selection};
use tenure::store::sql::{sqlx, SqlStore};
use tenure::store::{self, ElectionKey, StoreOptions};
use tenure::{Elector, Event};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite://worker.db".into());
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let written = run(&url, "fenced-worker", stop).await?;
    println!("stopped; this process wrote {written} rows");
    Ok(())
}

/// Leads `election` on `url` until `stop`, writing one fenced row every
/// 100 ms while leading. Returns how many rows it wrote.
pub async fn run(url: &str, election: &str, stop: impl Future) -> tenure::Result<u64> {
    let store = store::connect(url, &StoreOptions::default()).await?;
    if let Some(sql) = store.downcast_ref::<SqlStore>() {
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS worker_ledger \
             (election VARCHAR(255) NOT NULL, term BIGINT NOT NULL, n BIGINT NOT NULL)",
        )
        .execute(sql.pool())
        .await?;
    }

    // Who leads, as anyone can see it (it never writes).
    let key = ElectionKey::new("default", election);
    let mut changes = observe(
        store.clone(),
        Selection::Elections(vec![key]),
        ObserveOptions::default(),
    );
    let observer = tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            println!("observer: {change:?}");
        }
    });

    let elector = Elector::builder(store.clone())
        .election(election)
        .ttl(Duration::from_secs(2))
        .on_event(|event| match event {
            Event::StartedLeading { term } => println!("hook: leading under term {term}"),
            Event::StoppedLeading { term, reason } => println!("hook: term {term} over ({reason})"),
            Event::NewLeader { leader, term } => println!("hook: {leader} leads (term {term})"),
            _ => {}
        })
        .build()?;

    let written = AtomicU64::new(0);
    let (store, counter) = (&store, &written);
    elector
        .run_until(stop, |leadership| async move {
            let term = leadership.term() as i64;
            for n in 1_i64.. {
                let wrote = leadership
                    .fenced(store, async |tx| {
                        // `$1` placeholders: SQLite and PostgreSQL (MySQL wants `?`).
                        sqlx::query(
                            "INSERT INTO worker_ledger (election, term, n) VALUES ($1, $2, $3)",
                        )
                        .bind(election)
                        .bind(term)
                        .bind(n)
                        .execute(tx.connection())
                        .await?;
                        Ok(())
                    })
                    .await;
                match wrote {
                    Ok(()) => {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                    // A successor holds the lease (we were paused?): nothing was
                    // written. Our elector notices by its deadline at the latest;
                    // then this future is dropped and it campaigns again.
                    Err(tenure::Error::NotLeader { .. }) => leadership.lost().await,
                    Err(e) => eprintln!("write failed, retrying: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await?; // shut down: the lease is released and the history written
    observer.abort();
    Ok(written.load(Ordering::Relaxed))
}
