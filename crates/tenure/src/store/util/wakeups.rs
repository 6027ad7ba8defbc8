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
    started: Arc<Mutex<bool>>,
}

#[cfg(feature = "postgres")]
/// What a listener task asks, where its channel holds a connection that
/// only subscribers need (PostgreSQL's `LISTEN`): whether to stop now.
#[derive(Debug, Clone)]
pub(crate) struct Subscribers {
    tx: Weak<Sender>,
    started: Arc<Mutex<bool>>,
}

#[cfg(feature = "postgres")]
impl Subscribers {
    /// Whether nobody subscribes any more; if so the listener must stop
    /// (it is marked stopped, and the next subscription starts another).
    /// Decided under the lock that subscribing takes, so a subscription
    /// that comes meanwhile either keeps this listener or starts the next.
    pub(crate) fn stop_if_none(&self) -> bool {
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let none = self.tx.upgrade().is_none_or(|tx| tx.receiver_count() == 0);
        if none {
            *started = false;
        }
        none
    }
}

impl Wakeups {
    pub(crate) fn new() -> Self {
        Self {
            tx: Arc::new(broadcast::channel(1024).0),
            started: Arc::new(Mutex::new(false)),
        }
    }

    /// Whether anything subscribes now (the SQL stores ask).
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "mysql", feature = "postgres")),
        allow(dead_code)
    )]
    pub(crate) fn has_subscribers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// For a listener task that stops when nobody subscribes.
    #[cfg(feature = "postgres")]
    pub(crate) fn subscribers(&self) -> Subscribers {
        Subscribers {
            tx: Arc::downgrade(&self.tx),
            started: self.started.clone(),
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
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.tx.subscribe();
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
