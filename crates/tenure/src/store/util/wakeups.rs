//! The fan-out shared by the stores that push changes (PostgreSQL
//! LISTEN/NOTIFY, Redis pub/sub): one listener task per store, started on the
//! first subscription, feeding every subscriber through a broadcast channel.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::broadcast;

use crate::store::{Changes, ElectionKey};

/// What a listener task sends into: it holds only a `Weak`, so it notices
/// (and stops) when the store is dropped.
pub(crate) type Sender = broadcast::Sender<Option<ElectionKey>>;

#[derive(Debug)]
pub(crate) struct Wakeups {
    tx: Arc<Sender>,
    started: Mutex<bool>,
}

impl Wakeups {
    pub(crate) fn new() -> Self {
        Self {
            tx: Arc::new(broadcast::channel(1024).0),
            started: Mutex::new(false),
        }
    }

    /// Wakes every subscriber for `key` (for stores whose wake-ups come from
    /// their own calls rather than a listener task).
    #[cfg(feature = "mysql")]
    pub(crate) fn send(&self, key: ElectionKey) {
        let _ = self.tx.send(Some(key));
    }

    /// The sender, for a task that must not keep the store alive.
    #[cfg(feature = "mysql")]
    pub(crate) fn downgrade(&self) -> Weak<Sender> {
        Arc::downgrade(&self.tx)
    }

    /// A new subscriber; the first call spawns `listen` on the current tokio
    /// runtime. `None` outside a runtime (callers then poll).
    pub(crate) fn subscribe<F, Fut>(&self, listen: F) -> Option<Changes>
    where
        F: FnOnce(Weak<Sender>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let rx = self.tx.subscribe();
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        if !*started {
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return None;
            };
            rt.spawn(listen(Arc::downgrade(&self.tx)));
            *started = true;
        }
        Some(rx)
    }
}

/// Tells every subscriber that anything may have changed (they read), if
/// the store still exists.
#[cfg(any(feature = "postgres", feature = "redis"))]
pub(crate) fn wake_all(tx: &Weak<Sender>) {
    if let Some(t) = tx.upgrade() {
        let _ = t.send(None);
    }
}
