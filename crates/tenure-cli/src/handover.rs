//! `tenure resign` and `tenure transfer`: ask the current leader, wherever it
//! runs, to step down (for anyone, or for one named member).

use std::time::{Duration, Instant};

use tenure::store::{DynStore, ElectionKey, LeaseRecord};

use crate::args::{ResignArgs, TransferArgs};
use crate::failure::Failure;
use crate::output::out;

fn key(namespace: &str, election: &str) -> Result<ElectionKey, Failure> {
    tenure::validate_name("election", election)?;
    tenure::validate_name("namespace", namespace)?;
    Ok(ElectionKey::new(namespace, election))
}

fn no_leader(e: tenure::Error) -> Failure {
    match e {
        tenure::Error::NoLeader { .. } => Failure::Runtime(format!(
            "{e}; start a candidate first (`tenure status` shows who leads)"
        )),
        other => other.into(),
    }
}

pub async fn resign(a: ResignArgs) -> Result<u8, Failure> {
    let key = key(&a.namespace, &a.election)?;
    let store = a.store.connect_read_only().await?;
    let marked = tenure::handover::resign(&store, &key)
        .await
        .map_err(no_leader)?;
    out!(
        "asked {} (term {}) to step down",
        marked.holder.as_deref().unwrap_or("?"),
        marked.term
    );
    report_next(&store, &key, &marked, a.wait).await
}

pub async fn transfer(a: TransferArgs) -> Result<u8, Failure> {
    let key = key(&a.namespace, &a.election)?;
    tenure::handover::check_transfer_target(&a.to)
        .map_err(|e| Failure::Usage(format!("--to: {e}")))?;
    let window = a.window.unwrap_or(Duration::from_secs(10));
    tenure::handover::check_transfer_window(window)
        .map_err(|e| Failure::Usage(format!("--window: {e}")))?;
    let store = a.store.connect_read_only().await?;
    let marked = tenure::handover::transfer(&store, &key, &a.to, window)
        .await
        .map_err(no_leader)?;
    out!(
        "asked {} (term {}) to hand over to {}",
        marked.holder.as_deref().unwrap_or("?"),
        marked.term,
        a.to
    );
    report_next(&store, &key, &marked, a.wait).await
}

/// Waits (up to `wait`) for the next term and says who has it.
async fn report_next(
    store: &DynStore,
    key: &ElectionKey,
    marked: &LeaseRecord,
    wait: Duration,
) -> Result<u8, Failure> {
    let start = Instant::now();
    while start.elapsed() < wait {
        if let Some(r) = store.read(key).await? {
            if r.is_held() && r.term > marked.term {
                out!(
                    "{} leads now (term {}, {}), {} ms after the request",
                    r.holder.as_deref().unwrap_or("?"),
                    r.term,
                    r.start_reason.map(|s| s.as_str()).unwrap_or("?"),
                    start.elapsed().as_millis()
                );
                return Ok(0);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    out!("no new leader within {wait:?}; `tenure watch` follows the hand-over");
    Ok(0)
}
