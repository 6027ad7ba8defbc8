//! Watches every election in a store and prints each change of leader, as
//! `tenure watch` does, without taking part.
//!
//! ```sh
//! cargo run -p tenure --example observer -- sqlite://worker.db
//! ```

use std::future::Future;

use tenure::observe::{observe, Change, ObserveOptions, Selection};
use tenure::store::{self, StoreOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite://worker.db".into());
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    run(&url, stop, |change| match change {
        Change::Leader {
            key, leader, term, ..
        } => println!("{key}: {leader} leads (term {term})"),
        Change::NoLeader { key, last_term } => println!("{key}: no leader (last term {last_term})"),
        other => println!("{other:?}"),
    })
    .await?;
    Ok(())
}

/// Calls `on_change` with every change in the store at `url` until `stop`.
pub async fn run(
    url: &str,
    stop: impl Future,
    mut on_change: impl FnMut(&Change),
) -> tenure::Result<()> {
    let store = store::connect(url, &StoreOptions::default()).await?;
    let mut changes = observe(store, Selection::All, ObserveOptions::default());
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            change = changes.next() => match change {
                Some(change) => on_change(&change),
                None => return Ok(()),
            },
        }
    }
}
