//! `GET /v1/events`: Server-Sent Events of leadership changes.
//!
//! One observer per router, not one per client: every client subscribes to
//! a broadcast of its changes, and first gets the latest change of every
//! election (what `tenure watch --json` prints first). A client that goes
//! away drops its receiver and nothing else.
//!
//! What a client costs is bounded whatever the number of elections and
//! however slowly it reads: the first state is walked in the shared map a
//! few elections at a time (never copied per client), live changes wait in
//! one broadcast ring shared by all clients, and a client that falls more
//! than [`BUFFER`] changes behind is disconnected (it reconnects and gets
//! the current state, instead of silently missing changes). A client whose
//! socket takes nothing is closed by the server's write timeout.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::error::UNREACHABLE;
use super::State;
use crate::observe::{observe, Change, ObserveOptions, Selection};
use crate::store::{DynStore, ElectionKey};

/// How often an idle stream carries a comment, so proxies keep it open (default).
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How many changes a client may be behind before it is disconnected
/// (the broadcast ring shared by all clients).
pub(crate) const BUFFER: usize = 1024;

/// How many elections of the first state a client takes from the shared
/// map at a time.
const BATCH: usize = 64;

/// The latest change of every election, shared by all clients.
type Latest = Arc<Mutex<BTreeMap<ElectionKey, String>>>;

/// The shared observer and its fan-out.
pub(crate) struct Fanout {
    tx: broadcast::Sender<String>,
    latest: Latest,
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
        let (tx, _) = broadcast::channel(BUFFER);
        let latest = Arc::new(Mutex::new(BTreeMap::new()));
        let mut changes = observe(store, Selection::All, ObserveOptions::default());
        let task = tokio::spawn({
            let tx = tx.clone();
            let latest = Arc::clone(&latest);
            async move {
                while let Some(mut change) = changes.next().await {
                    if let Change::StoreUnavailable { error } = &mut change {
                        tracing::warn!("events: the store cannot be read: {error}");
                        *error = UNREACHABLE.into();
                    }
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

    /// A client's receiver of live changes, and the shared latest state.
    fn subscribe(&self) -> (Latest, broadcast::Receiver<String>) {
        // Subscribe first: a change between this and the walk of the
        // latest state is sent twice, never missed.
        let rx = self.tx.subscribe();
        (Arc::clone(&self.latest), rx)
    }
}

/// One client's place in the stream: the walk of the latest state, then
/// the live changes.
struct Cursor {
    latest: Latest,
    /// The last election of the latest state handed out; `None` before the first.
    after: Option<ElectionKey>,
    /// Lines taken from the map and not yet sent (at most [`BATCH`]).
    batch: VecDeque<String>,
    /// The walk of the latest state is over.
    walked: bool,
    rx: broadcast::Receiver<String>,
}

impl Cursor {
    async fn next(&mut self) -> Option<String> {
        if let Some(line) = self.batch.pop_front() {
            return Some(line);
        }
        if !self.walked {
            {
                let map = self.latest.lock().unwrap_or_else(|p| p.into_inner());
                let rest = match &self.after {
                    None => map.range::<ElectionKey, _>(..),
                    Some(k) => map.range::<ElectionKey, _>((Bound::Excluded(k), Bound::Unbounded)),
                };
                for (k, line) in rest.take(BATCH) {
                    self.batch.push_back(line.clone());
                    self.after = Some(k.clone());
                }
            }
            if let Some(line) = self.batch.pop_front() {
                return Some(line);
            }
            self.walked = true;
        }
        match self.rx.recv().await {
            Ok(line) => Some(line),
            // Too slow: it missed changes. Disconnect it; it reconnects and
            // starts from the current state.
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::debug!("events: a client fell {n} changes behind; disconnected");
                None
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// `GET /v1/events`.
pub(crate) async fn sse(state: State) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (latest, rx) = state.events.subscribe();
    let every = state.api.keep_alive;
    drop(state);
    let cursor = Cursor {
        latest,
        after: None,
        batch: VecDeque::with_capacity(BATCH),
        walked: false,
        rx,
    };
    let all = stream::unfold(cursor, |mut c| async move {
        let line = c.next().await?;
        Some((Ok(Event::default().data(line)), c))
    });
    Sse::new(all).keep_alive(KeepAlive::new().interval(every).text("keep-alive"))
}
