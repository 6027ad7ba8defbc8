//! Deliberate bugs for the chaos harness's self-checks (feature `chaos-bugs`).
//!
//! A checker that passes a broken build is itself broken. With the feature
//! compiled in, setting `TENURE_CHAOS_BUG` to one of the names below makes this
//! process misbehave in exactly that way; without the variable nothing changes.
//! Release builds never enable the feature.

/// The bugs the chaos harness must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bug {
    /// `wall-clock`: expiry judged by the client's wall clock, sent to the store.
    WallClock,
    /// `whole-seconds`: the store's clock truncated to whole seconds.
    WholeSeconds,
    /// `renew-unchecked`: renew without the holder/term/expiry check.
    RenewUnchecked,
    /// `loss-on-failed-renew`: leadership ends only when a renewal fails, not at
    /// the local deadline.
    LossOnFailedRenew,
}

#[cfg(feature = "chaos-bugs")]
fn current() -> Option<Bug> {
    static BUG: std::sync::OnceLock<Option<Bug>> = std::sync::OnceLock::new();
    *BUG.get_or_init(|| match std::env::var("TENURE_CHAOS_BUG").as_deref() {
        Ok("wall-clock") => Some(Bug::WallClock),
        Ok("whole-seconds") => Some(Bug::WholeSeconds),
        Ok("renew-unchecked") => Some(Bug::RenewUnchecked),
        Ok("loss-on-failed-renew") => Some(Bug::LossOnFailedRenew),
        _ => None,
    })
}

/// True if this process runs with `bug` switched on.
#[cfg(feature = "chaos-bugs")]
pub(crate) fn active(bug: Bug) -> bool {
    current() == Some(bug)
}

/// Always false without the `chaos-bugs` feature.
#[cfg(not(feature = "chaos-bugs"))]
#[inline(always)]
pub(crate) fn active(_bug: Bug) -> bool {
    false
}

/// The placeholder the wall-clock bug puts where the store's clock belongs.
pub(crate) const CLIENT_NOW: &str = "/*client_now*/0";

/// Replaces [`CLIENT_NOW`] with this host's wall clock in microseconds.
pub(crate) fn with_client_now(sql: &str) -> std::borrow::Cow<'_, str> {
    if !active(Bug::WallClock) {
        return std::borrow::Cow::Borrowed(sql);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    std::borrow::Cow::Owned(sql.replace(CLIENT_NOW, &now.to_string()))
}
