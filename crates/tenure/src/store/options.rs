//! The settings shared by every store [`connect`](crate::store::connect) can open.

use std::time::Duration;

/// Settings shared by the stores [`connect`](crate::store::connect) can open.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Prefix of the SQL table names (`<prefix>leases`, `<prefix>schema`); an identifier.
    pub table_prefix: String,
    /// Create missing tables on first use. Turn off where a DBA owns the
    /// schema. Off, a SQLite file that does not exist is refused rather
    /// than created (unless the URL sets `mode`).
    pub auto_migrate: bool,
    /// How long to wait for a connection before reporting the store unavailable.
    pub connect_timeout: Duration,
    /// The pool's size: fenced transactions and the application's
    /// statements ([`SqlStore::pool`](crate::store::sql::SqlStore::pool)).
    /// The store's own statements share one connection outside it.
    pub max_connections: u32,
    /// Terms kept in the history table per election (older ones are deleted).
    pub history_retention: u64,
    /// How often a store whose push channel can be tested end to end
    /// (PostgreSQL LISTEN) checks that it still delivers: it notifies itself
    /// through another connection, and a notification that does not arrive
    /// within [`PUSH_PROBE_TIMEOUT`](Self::PUSH_PROBE_TIMEOUT) marks the
    /// channel down (followers then read every tenth of a TTL) and reopens it.
    /// Also checked each time the channel opens. A connection that stays open
    /// but delivers nothing (half-open, or behind a pooler that drops
    /// notifications) is otherwise never noticed.
    pub push_probe_period: Duration,
}

impl StoreOptions {
    /// The default table prefix.
    pub const DEFAULT_TABLE_PREFIX: &'static str = "tenure_";

    /// The default [`push_probe_period`](Self::push_probe_period): one
    /// statement per store per five minutes.
    pub const DEFAULT_PUSH_PROBE_PERIOD: Duration = Duration::from_secs(300);

    /// How long a push probe's notification may take to arrive.
    pub const PUSH_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// Sets the table prefix.
    pub fn with_table_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.table_prefix = prefix.into();
        self
    }

    /// Sets whether missing tables are created.
    pub fn with_auto_migrate(mut self, on: bool) -> Self {
        self.auto_migrate = on;
        self
    }

    /// Sets how many terms of history are kept per election (at least 1).
    pub fn with_history_retention(mut self, terms: u64) -> Self {
        self.history_retention = terms.max(1);
        self
    }

    /// Sets how often the push channel is checked end to end (at least
    /// [`PUSH_PROBE_TIMEOUT`](Self::PUSH_PROBE_TIMEOUT)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = tenure::store::StoreOptions::default()
    ///     .with_push_probe_period(Duration::from_secs(60));
    /// assert_eq!(options.push_probe_period, Duration::from_secs(60));
    /// ```
    pub fn with_push_probe_period(mut self, period: Duration) -> Self {
        self.push_probe_period = period.max(Self::PUSH_PROBE_TIMEOUT);
        self
    }

    /// Sets the connection timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            table_prefix: Self::DEFAULT_TABLE_PREFIX.to_string(),
            auto_migrate: true,
            connect_timeout: Duration::from_secs(5),
            max_connections: 4,
            history_retention: 1000,
            push_probe_period: Self::DEFAULT_PUSH_PROBE_PERIOD,
        }
    }
}
