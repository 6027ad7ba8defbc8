//! Deliberate bugs for the chaos harness's self-checks.
//!
//! A checker that passes a broken build is itself broken. Compiled only with
//! `RUSTFLAGS="--cfg tenure_chaos_bugs"` (the chaos smoke's own build, in its
//! own target directory); then setting `TENURE_CHAOS_BUG` to one of the names
//! below makes this process misbehave in exactly that way, and it says so on
//! stderr at the first check. In every other build `active` is a constant
//! `false` and the variable is ignored.

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
    /// `no-margin`: the local deadline is `t0 + ttl`: no drift allowance, no
    /// margin.
    NoMargin,
    /// `deadline-after-reply`: the local deadline counts from the reply, not
    /// from when the request was sent.
    DeadlineAfterReply,
    /// `term-not-incremented`: the memory store's acquisition keeps the
    /// previous term (the simulation's store).
    TermNotIncremented,
    /// `late-reply-accepted`: a renewal is waited for past the deadline, and
    /// its success, arriving after the deadline, resumes the tenure.
    LateReplyAccepted,
    /// `keep-alive-reused`: the memory store answers two renewals in three
    /// with the round before's success, without extending the lease.
    KeepAliveReused,
    /// `batch-wrong-item`: a batched statement's answers reach its callers
    /// shifted by one, each caller getting its neighbour's.
    BatchWrongItem,
}

#[cfg(tenure_chaos_bugs)]
fn current() -> Option<Bug> {
    static BUG: std::sync::OnceLock<Option<Bug>> = std::sync::OnceLock::new();
    *BUG.get_or_init(|| {
        let name = std::env::var("TENURE_CHAOS_BUG").ok()?;
        let bug = match name.as_str() {
            "wall-clock" => Bug::WallClock,
            "whole-seconds" => Bug::WholeSeconds,
            "renew-unchecked" => Bug::RenewUnchecked,
            "loss-on-failed-renew" => Bug::LossOnFailedRenew,
            "no-margin" => Bug::NoMargin,
            "deadline-after-reply" => Bug::DeadlineAfterReply,
            "term-not-incremented" => Bug::TermNotIncremented,
            "late-reply-accepted" => Bug::LateReplyAccepted,
            "keep-alive-reused" => Bug::KeepAliveReused,
            "batch-wrong-item" => Bug::BatchWrongItem,
            _ => return None,
        };
        eprintln!(
            "tenure: DELIBERATE BUG `{name}` IS ACTIVE in process {}: this build breaks \
             leader-election safety on purpose, for the chaos harness's self-checks only",
            std::process::id()
        );
        Some(bug)
    })
}

/// True if this process runs with `bug` switched on.
#[cfg(tenure_chaos_bugs)]
pub(crate) fn active(bug: Bug) -> bool {
    current() == Some(bug)
}

/// Always false: this build has no deliberate bugs.
#[cfg(not(tenure_chaos_bugs))]
#[inline(always)]
pub(crate) fn active(_bug: Bug) -> bool {
    false
}

/// Whether this build has the deliberate bugs compiled in (for the chaos
/// harness, which refuses `--bug` otherwise).
#[doc(hidden)]
pub fn compiled_in() -> bool {
    cfg!(tenure_chaos_bugs)
}

/// The loss-on-failed-renew bug's one hook: a deadline so far away that only a
/// failed renewal ends leadership.
pub(crate) fn stretch_deadline(deadline: std::time::Duration) -> std::time::Duration {
    if active(Bug::LossOnFailedRenew) {
        // 68 years: far, yet small enough for the nanosecond atomics.
        deadline + std::time::Duration::from_secs(1 << 31)
    } else {
        deadline
    }
}

/// The deadline-after-reply bug's one hook: where a deadline counts from,
/// given when the request was sent (`sent`) and when its reply came.
pub(crate) fn deadline_start(
    sent: std::time::Duration,
    replied: std::time::Duration,
) -> std::time::Duration {
    if active(Bug::DeadlineAfterReply) {
        replied
    } else {
        sent
    }
}

/// The late-reply-accepted bug's hook: until when a leader waits for a
/// renewal's answer, given its deadline.
pub(crate) fn renewal_wait_until(deadline: std::time::Duration) -> std::time::Duration {
    if active(Bug::LateReplyAccepted) {
        deadline + std::time::Duration::from_secs(3600)
    } else {
        deadline
    }
}

/// The keep-alive-reused bug's hook in the memory store's renewal: true
/// when this renewal is to be answered from the round before, untouched.
pub(crate) fn reuse_keep_alive_round() -> bool {
    if !active(Bug::KeepAliveReused) {
        return false;
    }
    static ROUND: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3 != 0
}

/// The batch-wrong-item bug's hook where a batched statement's answers are
/// handed out: rotated by one, so each caller gets its neighbour's answer.
// Only builds with a store that gathers statements use it.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "mysql",
        feature = "postgres",
        feature = "redis",
        feature = "etcd"
    )),
    allow(dead_code)
)]
pub(crate) fn misdirect_answers<T>(mut answers: Vec<T>) -> Vec<T> {
    if active(Bug::BatchWrongItem) && answers.len() > 1 {
        answers.rotate_left(1);
    }
    answers
}

/// The wall-clock bug's rewrite: `server_now`, the expression that reads the
/// store's clock, replaced in `sql` by this host's wall clock in microseconds.
/// Borrows `sql` unchanged unless that bug is active.
// Only the SQL stores use it.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "mysql", feature = "postgres")),
    allow(dead_code)
)]
pub(crate) fn with_client_now<'a>(sql: &'a str, server_now: &str) -> std::borrow::Cow<'a, str> {
    if !active(Bug::WallClock) {
        return std::borrow::Cow::Borrowed(sql);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0);
    std::borrow::Cow::Owned(sql.replace(server_now, &now.to_string()))
}
