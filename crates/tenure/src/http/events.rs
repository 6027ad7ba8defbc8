//! `GET /v1/events`: Server-Sent Events of leadership changes.
//!
//! One observer per router, not one per client: every client subscribes to
//! a broadcast of its changes, and first gets the latest change of every
//! election (what `tenure watch --json` prints first). A client that goes
//! away drops its receiver and nothing else.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::State;
use crate::observe::{observe, Change, ObserveOptions, Selection};
use crate::store::{DynStore, ElectionKey};

/// How often an idle stream carries a comment, so proxies keep it open (default).
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The shared observer and its fan-out.
pub(crate) struct Fanout {
    tx: broadcast::Sender<String>,
    latest: Arc<Mutex<BTreeMap<ElectionKey, String>>>,
    task: JoinHandle<()>,
}

impl Drop for Fanout {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A change as one JSON line of `tenure watch --json`: the change plus `at`.
pub(crate) fn json_line(change: &Change) -> String {
    let mut v = serde_json::to_value(change).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        let at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        o.insert("at".into(), at.into());
    }
    v.to_string()
}

impl Fanout {
    pub(crate) fn start(store: DynStore) -> Self {
        let (tx, _) = broadcast::channel(1024);
        let latest = Arc::new(Mutex::new(BTreeMap::new()));
        let mut changes = observe(store, Selection::All, ObserveOptions::default());
        let task = tokio::spawn({
            let tx = tx.clone();
            let latest = Arc::clone(&latest);
            async move {
                while let Some(change) = changes.next().await {
                    let line = json_line(&change);
                    let key = match &change {
                        Change::Leader { key, .. } | Change::NoLeader { key, .. } => {
                            Some(key.clone())
                        }
                        _ => None,
                    };
                    if let Some(key) = key {
                        latest
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(key, line.clone());
                    }
                    // No subscribers is not an error.
                    let _ = tx.send(line);
                }
            }
        });
        Self { tx, latest, task }
    }

    /// The latest change of every election, then every change as it comes.
    fn subscribe(&self) -> (Vec<String>, broadcast::Receiver<String>) {
        // Subscribe first: a change between the two steps is sent twice,
        // never missed.
        let rx = self.tx.subscribe();
        let snapshot = self
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        (snapshot, rx)
    }
}

/// `GET /v1/events`.
pub(crate) async fn sse(state: State) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (snapshot, rx) = state.events.subscribe();
    let every = state.api.keep_alive;
    drop(state);
    let live = stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(line) => return Some((line, rx)),
                // A slow client missed changes; the next ones still come
                // (an observer would report them the same way after a gap).
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    let all = stream::iter(snapshot)
        .chain(live)
        .map(|line| Ok(Event::default().data(line)));
    Sse::new(all).keep_alive(KeepAlive::new().interval(every).text("keep-alive"))
}
