//! `tenure watch`: stream leadership changes as they happen (never writes).

use std::io::Write;
use std::time::SystemTime;

use tenure::observe::{observe, Change, ObserveOptions, Selection};
use tenure::store::ElectionKey;
use tokio::signal::unix::{signal, SignalKind};

use crate::args::WatchArgs;
use crate::failure::Failure;

pub async fn watch(a: WatchArgs) -> Result<u8, Failure> {
    for e in &a.election {
        tenure::validate_name("election", e)?;
    }
    let store = a.store.connect_read_only().await?;
    let selection = match (&a.election[..], &a.namespace) {
        ([], None) => Selection::All,
        ([], Some(ns)) => Selection::Namespace(ns.clone()),
        (names, ns) => Selection::Elections(
            names
                .iter()
                .map(|n| {
                    ElectionKey::new(ns.clone().unwrap_or_else(|| "default".into()), n.clone())
                })
                .collect(),
        ),
    };
    let mut changes = observe(store, selection, ObserveOptions::default());
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Failure::Runtime(e.to_string()))?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| Failure::Runtime(e.to_string()))?;
    let mut out = std::io::stdout();
    loop {
        let change = tokio::select! {
            c = changes.next() => match c { Some(c) => c, None => return Ok(1) },
            _ = int.recv() => return Ok(0),
            _ = term.recv() => return Ok(0),
        };
        let at = humantime::format_rfc3339_millis(SystemTime::now());
        let line = if a.json {
            let mut v =
                serde_json::to_value(&change).map_err(|e| Failure::Runtime(e.to_string()))?;
            if let Some(o) = v.as_object_mut() {
                o.insert("at".into(), at.to_string().into());
            }
            v.to_string()
        } else {
            match &change {
                Change::Leader {
                    key,
                    leader,
                    term,
                    metadata,
                    ..
                } if !metadata.is_empty() => {
                    format!("{at}  {key}  leader {leader} (term {term}, metadata {metadata:?})")
                }
                Change::Leader {
                    key, leader, term, ..
                } => format!("{at}  {key}  leader {leader} (term {term})"),
                Change::NoLeader { key, last_term } => {
                    format!("{at}  {key}  no leader (last term {last_term})")
                }
                Change::StoreUnavailable { error } => {
                    format!("{at}  store unavailable: {error}; retrying")
                }
                Change::StoreRecovered => format!("{at}  store reachable again"),
                other => format!("{at}  {other:?}"),
            }
        };
        // A closed pipe (`tenure watch | head`) ends the command quietly.
        writeln!(out, "{line}")
            .and_then(|_| out.flush())
            .map_err(crate::output::failure)?;
    }
}
