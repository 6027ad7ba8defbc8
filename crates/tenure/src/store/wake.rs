//! How a store wakes the elector: pushed change notifications, and
//! watches on free elections' acquisitions.

use super::record::ElectionKey;

/// A receiver of change notifications; see [`Wakeups::subscribe`](crate::store::Wakeups::subscribe).
pub type Changes = tokio::sync::broadcast::Receiver<Option<ElectionKey>>;

/// Why a wait for a change ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A notification for a wanted election.
    Notified,
    /// One for every election: the push channel (re)opened or failed, and
    /// anything may have changed.
    Everyone,
    /// This receiver fell behind and notifications were dropped: one for a
    /// wanted election may have been among them.
    Lagged,
}

/// Waits for a notification that concerns `key` (or all keys); never resolves
/// without a subscription.
pub(crate) async fn changed(changes: &mut Option<Changes>, key: Option<&ElectionKey>) -> Woken {
    changed_matching(changes, |k| key.is_none_or(|key| key == k)).await
}

/// [`changed`] for the elections `wanted` accepts (a wake-all always counts).
pub(crate) async fn changed_matching(
    changes: &mut Option<Changes>,
    wanted: impl Fn(&ElectionKey) -> bool,
) -> Woken {
    let Some(rx) = changes.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(Some(k)) if !wanted(&k) => continue,
            Ok(Some(_)) => return Woken::Notified,
            Ok(None) => return Woken::Everyone,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return Woken::Lagged,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                *changes = None;
                return std::future::pending().await;
            }
        }
    }
}

/// A watch on the acquisitions of one free election, from
/// [`Wakeups::watch_acquisitions`](crate::store::Wakeups::watch_acquisitions): dropping it ends the watch.
pub struct AcquisitionWatch {
    _guard: Box<dyn std::any::Any + Send + Sync>,
}

impl AcquisitionWatch {
    /// A watch that lasts while `guard` lives (for store implementations).
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        Self {
            _guard: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for AcquisitionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcquisitionWatch")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver that fell behind says so instead of passing for a
    /// notification: a leader must not read on it (see the leader's loop).
    #[tokio::test]
    async fn a_lagged_receiver_is_not_a_notification() {
        let (tx, rx) = tokio::sync::broadcast::channel(4);
        let mine = ElectionKey::new("default", "mine");
        let other = ElectionKey::new("default", "other");
        let mut changes = Some(rx);
        for _ in 0..10 {
            tx.send(Some(other.clone())).ok();
        }
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Lagged);
        let mut changes = Some(tx.subscribe());
        tx.send(Some(other.clone())).ok();
        tx.send(Some(mine.clone())).ok();
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Notified);
        tx.send(None).ok();
        assert_eq!(changed(&mut changes, Some(&mine)).await, Woken::Everyone);
    }
}
