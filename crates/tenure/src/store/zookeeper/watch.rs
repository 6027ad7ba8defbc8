//! Push: one persistent watch per election this process reads or holds, on
//! its `leader` znode only, so that a change wakes only the processes that
//! take part in that election (ZooKeeper's election recipe's rule).

use std::sync::{Arc, Weak};

use zookeeper_client::{AddWatchMode, EventType};

use super::values::LeaderValue;
use super::Inner;
use crate::store::ElectionKey;

impl Inner {
    /// Arms the watch on `key`'s leader znode unless it is armed. Best
    /// effort: without it, followers fall back to their deadline-scheduled reads.
    pub(super) async fn watch(this: &Arc<Inner>, key: &ElectionKey) {
        {
            let watched = this.watched.lock().unwrap_or_else(|p| p.into_inner());
            if watched.get(key).is_some_and(|t| !t.is_finished()) {
                return;
            }
        }
        let Ok(client) = this.main().await else {
            return;
        };
        let path = this.node(key, "leader");
        let mut watcher = match client.watch(&path, AddWatchMode::Persistent).await {
            Ok(w) => w,
            Err(e) => {
                tracing::debug!(election = %key, "no ZooKeeper watch: {e}");
                return;
            }
        };
        let weak: Weak<Inner> = Arc::downgrade(this);
        let changes = this.changes.clone();
        let k = key.clone();
        let task = tokio::spawn(async move {
            loop {
                let ev = watcher.changed().await;
                match ev.event_type {
                    EventType::NodeCreated | EventType::NodeDeleted => {
                        let _ = changes.send(Some(k.clone()));
                    }
                    // Renewals change the data too: wake only for a
                    // hand-over request, which the leader must act on.
                    EventType::NodeDataChanged => {
                        if let Ok((data, _)) = client.get_data(&path).await {
                            let v: Option<LeaderValue> = serde_json::from_slice(&data).ok();
                            if v.is_some_and(|v| v.handover.is_some()) {
                                let _ = changes.send(Some(k.clone()));
                            }
                        }
                    }
                    EventType::NodeChildrenChanged => {}
                    EventType::Session => {
                        // Reconnected (events may have been missed) or ended.
                        let _ = changes.send(None);
                        if ev.session_state.is_terminated() {
                            break;
                        }
                    }
                }
            }
            if let Some(inner) = weak.upgrade() {
                inner
                    .watched
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&k);
            }
        });
        let old = this
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), task);
        if let Some(old) = old {
            old.abort();
        }
    }
}
