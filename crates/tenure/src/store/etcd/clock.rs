//! Client-clock times, in microseconds: informational only, no decision
//! compares them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2))
        .unwrap_or(0)
}

pub(super) fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2)
}
