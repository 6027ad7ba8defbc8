//! Checks on the lease values a store reads back, before anyone acts on them.
//!
//! Tenure itself never writes a negative term, a term near the integer limit,
//! or an expiry further away than the TTL the record states; such values come
//! from hand-edited rows (or another program). Acting on them would hand out
//! a term twice (a negative term clamped to 0), fail every acquisition on an
//! overflow, or wait forever for a holder that does not exist. Every store
//! checks what it decodes with [`check_lease`] and reports a failure as
//! [`Error::Corrupt`](crate::Error::Corrupt), naming the election and how to
//! repair it; the acquiring writes refuse such rows too (`term >= 0 AND term
//! < MAX_TERM`), so a corrupt row is never changed by tenure.

use std::time::Duration;

use crate::config::MAX_TTL;
use crate::store::MAX_HANDOVER_WINDOW;

/// The largest term a store hands out: 2^53 − 1, the largest integer every
/// store's arithmetic keeps exactly (Redis scripts compute in doubles, JSON
/// readers often do too). A record at or above it is corrupt: acquiring it
/// would overflow or round.
pub const MAX_TERM: u64 = (1 << 53) - 1;

/// How far a held lease's expiry may lie beyond its TTL from the store's
/// now: room for the store's clock stepping back a little. An expiry that
/// far was not written by tenure.
pub const EXPIRY_SLACK: Duration = Duration::from_secs(60);

/// The values of a lease record that [`check_lease`] judges, as stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StoredLease {
    /// The term as stored (signed: a hand-edited row may be negative).
    pub term: i64,
    /// The version as stored.
    pub version: i64,
    /// The TTL the record states, in µs.
    pub ttl_us: i64,
    /// Whether the record names a holder.
    pub held: bool,
    /// The expiry (store clock, µs).
    pub expires_us: i64,
    /// The store's now at the read (µs).
    pub now_us: i64,
    /// The end of a hand-over window (store clock, µs), 0 if none.
    pub handover_until_us: i64,
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// `Ok` if tenure could have written these values, else what is wrong.
pub(crate) fn check_lease(v: StoredLease) -> Result<(), String> {
    if v.term < 0 {
        return Err(format!("its term is {} (terms are never negative)", v.term));
    }
    if v.term as u64 >= MAX_TERM {
        return Err(format!(
            "its term is {} (at or above the largest term {MAX_TERM}: the next acquisition \
             would overflow)",
            v.term
        ));
    }
    if v.version < 0 || v.version as u64 >= MAX_TERM {
        return Err(format!(
            "its version is {} (tenure writes 0 to {})",
            v.version,
            MAX_TERM - 1
        ));
    }
    if v.ttl_us < 0 || v.ttl_us > us(MAX_TTL) {
        return Err(format!(
            "its TTL is {} µs (tenure writes 0 to {} µs)",
            v.ttl_us,
            us(MAX_TTL)
        ));
    }
    if v.held {
        let left = v.expires_us.saturating_sub(v.now_us);
        let bound = v.ttl_us.saturating_add(us(EXPIRY_SLACK));
        if left > bound {
            // No "now" in the message: it is logged once per distinct error.
            return Err(format!(
                "its lease expires at expires_us {} (µs since the epoch), more than the \
                 {} s TTL it states from the store's now",
                v.expires_us,
                v.ttl_us / 1_000_000,
            ));
        }
    }
    let window = v.handover_until_us.saturating_sub(v.now_us);
    if window > us(MAX_HANDOVER_WINDOW + EXPIRY_SLACK) {
        return Err(format!(
            "its hand-over window ends at handover_until_us {}, more than the longest \
             window of {} s from the store's now",
            v.handover_until_us,
            MAX_HANDOVER_WINDOW.as_secs()
        ));
    }
    Ok(())
}

/// [`check_lease`] of a decoded record, its times judged from `now_us`
/// (a time of the clock that stamped its expiry), for stores that keep
/// unsigned values (etcd, ZooKeeper: their terms are the store's own
/// revisions or versions, but TTLs, windows and state terms are stored
/// JSON).
// Unused in builds without etcd or ZooKeeper.
#[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
pub(crate) fn check_record(rec: &crate::store::LeaseRecord, now_us: i64) -> Result<(), String> {
    check_lease(StoredLease {
        term: i64::try_from(rec.term).unwrap_or(i64::MAX),
        version: 0,
        ttl_us: us(rec.ttl),
        held: rec.holder.is_some(),
        expires_us: rec.expires_at_us,
        now_us,
        handover_until_us: rec.handover_until_us,
    })
}

/// The record of `key` whose values [`check_lease`] refused, carried inside a
/// driver error until the store turns it into
/// [`Error::Corrupt`](crate::Error::Corrupt) with its repair.
#[derive(Clone, Debug, thiserror::Error)]
#[error("the lease of {key} is corrupt: {reason}")]
// Only the SQL stores carry it through their driver's error.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "mysql", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) struct CorruptLease {
    pub key: crate::store::ElectionKey,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sane() -> StoredLease {
        StoredLease {
            term: 7,
            version: 9,
            ttl_us: 10_000_000,
            held: true,
            expires_us: 1_000_000_000 + 10_000_000,
            now_us: 1_000_000_000,
            handover_until_us: 0,
        }
    }

    #[test]
    fn what_tenure_writes_passes() {
        assert_eq!(check_lease(sane()), Ok(()));
        assert_eq!(check_lease(StoredLease { term: 0, ..sane() }), Ok(()));
        let vacant = StoredLease {
            held: false,
            expires_us: i64::MAX,
            ..sane()
        };
        assert_eq!(check_lease(vacant), Ok(()));
    }

    #[test]
    fn hand_edited_values_are_refused() {
        let e = check_lease(StoredLease { term: -5, ..sane() }).unwrap_err();
        assert!(e.contains("term is -5"), "{e}");
        let e = check_lease(StoredLease {
            term: i64::MAX,
            ..sane()
        })
        .unwrap_err();
        assert!(e.contains("largest term"), "{e}");
        let e = check_lease(StoredLease {
            term: MAX_TERM as i64,
            ..sane()
        })
        .unwrap_err();
        assert!(e.contains("largest term"), "{e}");
        let e = check_lease(StoredLease {
            expires_us: 253_402_300_799_000_000,
            ..sane()
        })
        .unwrap_err();
        assert!(e.contains("more than the 10 s TTL"), "{e}");
        let e = check_lease(StoredLease {
            ttl_us: -1,
            ..sane()
        })
        .unwrap_err();
        assert!(e.contains("TTL"), "{e}");
        let e = check_lease(StoredLease {
            handover_until_us: i64::MAX,
            ..sane()
        })
        .unwrap_err();
        assert!(e.contains("hand-over window"), "{e}");
    }
}
