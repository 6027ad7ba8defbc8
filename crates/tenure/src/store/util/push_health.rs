//! How a store's push channel stands, as this process sees it: what
//! `tenure status` prints, and what makes followers fall back to reading
//! at a slow period while the channel is down.

use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// The state of a store's push channel (PostgreSQL LISTEN, Redis pub/sub,
/// the etcd watch) in this process, from [`Wakeups::push_health`](crate::store::Wakeups::push_health).
///
/// While it is [`Down`](Self::Down), followers are not woken by releases:
/// they read the lease every tenth of a TTL (at least the poll period)
/// instead of only when it would expire, so a release is still noticed
/// within that period, and everyone reads again once the channel is back.
///
/// ```
/// use tenure::store::PushHealth;
///
/// let h = PushHealth::NotOffered;
/// assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"state":"not_offered"}"#);
/// ```
///
/// [`Wakeups::push_health`](crate::store::Wakeups::push_health): crate::store::Wakeups::push_health
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum PushHealth {
    /// The store pushes nothing ([`Capabilities::push`] is false):
    /// followers poll.
    ///
    /// [`Capabilities::push`]: crate::store::Capabilities::push
    NotOffered,
    /// The store pushes, but has no one channel to report on: MySQL/MariaDB's
    /// named locks are one wait per follower (each falls back to reading
    /// when its wait fails), SQLite's a look at the file, ZooKeeper's
    /// watches ride the session.
    Unreported {
        /// What carries the pushes, e.g. `MySQL named locks`.
        channel: String,
    },
    /// Not open yet: nothing in this process has subscribed, or the first
    /// attempt is under way.
    NotOpen {
        /// Which channel, e.g. `PostgreSQL LISTEN`.
        channel: String,
    },
    /// The channel is open: releases and hand-overs wake followers at once.
    Up {
        /// Which channel, e.g. `PostgreSQL LISTEN`.
        channel: String,
    },
    /// The channel is lost or could not be opened; it is being retried.
    Down {
        /// Which channel, e.g. `PostgreSQL LISTEN`.
        channel: String,
        /// How long it has been down, in milliseconds.
        down_for_ms: u64,
        /// Why, as the last failure said (never with a password).
        reason: String,
    },
}

impl PushHealth {
    /// Whether the channel is known to be down.
    pub fn is_down(&self) -> bool {
        matches!(self, Self::Down { .. })
    }
}

impl std::fmt::Display for PushHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotOffered => f.write_str("none (the store cannot push): followers poll"),
            Self::Unreported { channel } => {
                write!(f, "{channel} (no channel state to report)")
            }
            Self::NotOpen { channel } => write!(f, "{channel} not open yet"),
            Self::Up { channel } => write!(f, "{channel} up: releases wake followers at once"),
            Self::Down {
                channel,
                down_for_ms,
                reason,
            } => {
                write!(f, "{channel} DOWN ({reason})")?;
                if *down_for_ms >= 1000 {
                    write!(f, " for {:.0} s", *down_for_ms as f64 / 1000.0)?;
                }
                f.write_str(": followers read every TTL/10 until it is back")
            }
        }
    }
}

/// What a listener task last found; shared with its store.
#[derive(Debug)]
#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "etcd")),
    allow(dead_code)
)]
pub(crate) struct PushMonitor {
    channel: &'static str,
    state: Mutex<Seen>,
}

#[derive(Debug)]
enum Seen {
    NotYet,
    Up,
    Down { since: Instant, reason: String },
}

#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "etcd")),
    allow(dead_code)
)]
impl PushMonitor {
    pub(crate) fn new(channel: &'static str) -> Self {
        Self {
            channel,
            state: Mutex::new(Seen::NotYet),
        }
    }

    fn set(&self, seen: Seen) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = seen;
    }

    /// The channel failed; the outage began at `since` (the first failure).
    pub(crate) fn down(&self, since: Instant, reason: String) {
        self.set(Seen::Down { since, reason });
        #[cfg(any(feature = "postgres", feature = "redis", feature = "etcd"))]
        crate::telemetry::push_up(self.channel, false);
    }

    /// The channel is open.
    /// The channel was closed on purpose (nobody subscribes any more).
    #[cfg(feature = "postgres")]
    pub(crate) fn closed(&self) {
        self.set(Seen::NotYet);
    }

    pub(crate) fn up(&self) {
        self.set(Seen::Up);
        #[cfg(any(feature = "postgres", feature = "redis", feature = "etcd"))]
        crate::telemetry::push_up(self.channel, true);
    }

    /// As [`PushHealth`].
    pub(crate) fn health(&self) -> PushHealth {
        let channel = self.channel.to_owned();
        match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            Seen::NotYet => PushHealth::NotOpen { channel },
            Seen::Up => PushHealth::Up { channel },
            Seen::Down { since, reason } => PushHealth::Down {
                channel,
                down_for_ms: u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
                reason: reason.clone(),
            },
        }
    }
}
