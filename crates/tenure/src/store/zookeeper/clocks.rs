//! Which clock may judge a lease's expiry.
//!
//! ZooKeeper stamps a write's `mtime` with the wall clock of the ZooKeeper
//! leader that proposed it. Two stamps are comparable only when the same
//! leader made both: the epoch (the high 32 bits of a zxid) counts leader
//! elections, so equal epochs mean one leader, one machine, one clock. A
//! leader znode stamped in an earlier epoch is judged by this process's own
//! monotonic clock instead: expired once this process has seen it unchanged
//! (same creation, same version) for the TTL plus the drift bound. Its
//! holder sent the write that made that version before the write was
//! committed, hence before this process first saw it, so the holder's
//! deadline has passed by then; the deletion that follows is conditional on
//! that version, so a renewal in between wins.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::ElectionKey;

/// The ZooKeeper leader election a zxid was proposed in.
pub(super) fn epoch(zxid: i64) -> i64 {
    zxid >> 32
}

/// How long a leader znode judged by this process's clock must stay
/// unchanged: the TTL plus the elector's drift bound (1%), rounded up.
pub(super) fn unchanged_long_enough(ttl: Duration) -> Duration {
    ttl + ttl / 100 + Duration::from_millis(1)
}

/// The version of each election's leader znode this process saw, and
/// since when.
#[derive(Debug, Default)]
pub(super) struct Sightings(Mutex<HashMap<ElectionKey, Sighting>>);

#[derive(Debug, Clone, Copy)]
struct Sighting {
    czxid: i64,
    version: i32,
    since: Instant,
}

impl Sightings {
    /// Records that `key`'s leader znode, created by `czxid`, reads at
    /// `version` now; returns how long this process has seen that very
    /// version.
    pub(super) fn unchanged_for(&self, key: &ElectionKey, czxid: i64, version: i32) -> Duration {
        let now = Instant::now();
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let s = seen.entry(key.clone()).or_insert(Sighting {
            czxid,
            version,
            since: now,
        });
        if s.czxid != czxid || s.version != version {
            *s = Sighting {
                czxid,
                version,
                since: now,
            };
        }
        now.duration_since(s.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_version_starts_the_count_again() {
        let s = Sightings::default();
        let key = ElectionKey::new("default", "e");
        assert!(s.unchanged_for(&key, 7, 0) < Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(20));
        assert!(s.unchanged_for(&key, 7, 0) >= Duration::from_millis(20));
        assert!(s.unchanged_for(&key, 7, 1) < Duration::from_millis(20));
        assert!(s.unchanged_for(&key, 9, 1) < Duration::from_millis(20));
    }

    #[test]
    fn epochs_are_the_high_half_of_a_zxid() {
        assert_eq!(epoch((3 << 32) | 17), 3);
        assert_ne!(epoch(1 << 32), epoch(2 << 32));
    }
}
