//! The one error type of the crate.
//!
//! Callers mostly need to know which of three things happened: the store could not
//! be reached (retry later), leadership is gone (stop acting as leader), or the
//! configuration is wrong (fix it; retrying will not help). The variants keep those
//! apart; [`Error::is_retryable`] answers the first question directly.

use std::time::Duration;

/// The cause kept under a store error: the driver's or client's own error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors returned by tenure.
///
/// Messages name the problem and, where there is one, the fix. They never contain
/// a password: store URLs are redacted before they are put into an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range or malformed (election name, TTL, renew period, ...).
    #[error("invalid {field}: {reason}")]
    InvalidConfig {
        /// Which setting is wrong, e.g. `ttl` or `election`.
        field: &'static str,
        /// Why, and what would be accepted.
        reason: String,
    },

    /// The store URL could not be parsed or names no known store.
    #[error("invalid store URL {url}: {reason}")]
    InvalidUrl {
        /// The URL with any password replaced by `***`.
        url: String,
        /// What is wrong and what would be accepted.
        reason: String,
    },

    /// The store could not be reached or did not answer in time. Retrying may help.
    #[error("store {store} unavailable: {reason}")]
    Unavailable {
        /// The store, described without secrets.
        store: String,
        /// The underlying cause.
        reason: String,
        /// The error underneath (sqlx's or etcd-client's), for programs that
        /// need more than the message. Not kept for Redis: redis-rs errors
        /// can quote the URL, password included.
        #[source]
        source: Option<BoxError>,
    },

    /// The store refused the credentials or lacks a privilege tenure needs.
    #[error("store {store} refused access: {reason}")]
    PermissionDenied {
        /// The store, described without secrets.
        store: String,
        /// The underlying cause and the fix.
        reason: String,
        /// The error underneath (sqlx's or etcd-client's), for programs that
        /// need more than the message. Not kept for Redis: redis-rs errors
        /// can quote the URL, password included.
        #[source]
        source: Option<BoxError>,
    },

    /// A TLS connection to the store could not be set up: the server
    /// certificate does not verify, a certificate or key file is missing or
    /// unreadable, the server wants a client certificate, or the server does not
    /// speak TLS. A configuration problem: retrying does not help.
    #[error("TLS to store {store}: {reason}")]
    Tls {
        /// The store, described without secrets.
        store: String,
        /// What failed and the URL parameter that fixes it.
        reason: String,
        /// The error underneath (sqlx's or etcd-client's), for programs that
        /// need more than the message. Not kept for Redis: redis-rs errors
        /// can quote the URL, password included.
        #[source]
        source: Option<BoxError>,
    },

    /// The store's tables are missing or have a schema version this build does not know.
    #[error("store {store} schema problem: {reason}")]
    Schema {
        /// The store, described without secrets.
        store: String,
        /// What is wrong and how to fix it.
        reason: String,
        /// The error underneath (sqlx's or etcd-client's), for programs that
        /// need more than the message. Not kept for Redis: redis-rs errors
        /// can quote the URL, password included.
        #[source]
        source: Option<BoxError>,
    },

    /// The store answered with something tenure did not expect (a bug or a foreign table).
    #[error("store {store} returned unexpected data: {reason}")]
    Protocol {
        /// The store, described without secrets.
        store: String,
        /// What was unexpected.
        reason: String,
        /// The error underneath (sqlx's or etcd-client's), for programs that
        /// need more than the message. Not kept for Redis: redis-rs errors
        /// can quote the URL, password included.
        #[source]
        source: Option<BoxError>,
    },

    /// An election's stored lease holds values no version of tenure writes (a
    /// negative term, a term at the limit, an expiry beyond the TTL it
    /// states): most often a hand-edited row. Tenure refuses to acquire it or
    /// hand out its term until it is repaired; retrying does not help, so
    /// candidates retry it only slowly. The message names the election and
    /// the statement or command that repairs it.
    #[error("the lease of {election} in store {store} is corrupt: {reason}; tenure will not acquire it until it is repaired: {repair}")]
    Corrupt {
        /// `namespace/election`.
        election: String,
        /// The store, described without secrets.
        store: String,
        /// Which value is out of range, and why.
        reason: String,
        /// How to repair the record (a statement or command to run).
        repair: String,
    },

    /// This candidate does not hold (or no longer holds) the lease.
    #[error("not the leader of {election}")]
    NotLeader {
        /// `namespace/election`.
        election: String,
    },

    /// Nobody leads the election (nothing to resign or transfer).
    #[error("no leader of {election}: nothing to hand over")]
    NoLeader {
        /// `namespace/election`.
        election: String,
    },

    /// The leader's own work inside a fenced write failed (an application
    /// statement of a [fenced transaction](crate::store::sql::SqlStore::fenced)).
    /// The work was rolled back.
    #[error("fenced work failed: {source}")]
    Work {
        /// The application's error, e.g. the `sqlx::Error` of its statement.
        #[source]
        source: BoxError,
    },

    /// The store cannot do what was asked (e.g. fenced transactions on a
    /// store that has none); the message names what to use instead.
    #[error("store {store} does not support {what}")]
    Unsupported {
        /// The store, described without secrets.
        store: String,
        /// What it lacks, and what to use instead.
        what: String,
    },

    /// The elector has been shut down.
    #[error("the elector has been shut down")]
    Shutdown,

    /// An operation did not finish within its time budget.
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// The operation.
        what: &'static str,
        /// The budget it had.
        after: Duration,
    },
}

/// The source of an [`Error::Unavailable`] from a server that proved it is
/// there (it answered) but did not serve a request in time: it is busy, not
/// gone, so [`Error::is_server_full`] says to wait for it.
#[derive(Debug, thiserror::Error)]
#[error("the server answered but is too busy to serve another client in time")]
pub(crate) struct Overloaded;

impl Error {
    /// An [`Error::Unavailable`] from a server that answered but did not
    /// serve a request in time: [`Error::is_server_full`] is true for it.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn overloaded(store: String, reason: String) -> Self {
        Error::Unavailable {
            store,
            reason,
            source: Some(Box::new(Overloaded)),
        }
    }

    /// True for errors that may go away by themselves (store unreachable, timeouts).
    ///
    /// ```
    /// let e = tenure::Error::Unavailable {
    ///     store: "postgres://db/app".into(),
    ///     reason: "refused".into(),
    ///     source: None,
    /// };
    /// assert!(e.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable { .. } | Error::Timeout { .. })
    }

    /// True when a server that is there had no room for another client: a
    /// SQL server refused a connection because it has none left to give
    /// (PostgreSQL's "sorry, too many clients already", MySQL's "Too many
    /// connections", a role's or user's connection limit), or an etcd
    /// server answered its status but not a read within the connect timeout
    /// (too busy to serve one more client now). Others hold the room, so
    /// asking again later may succeed, and nothing in the caller's setup is
    /// wrong. `tenure run` and `tenure serve` wait for room on such an
    /// error, where an unreachable store makes them exit.
    ///
    /// ```
    /// let e = tenure::Error::Unavailable {
    ///     store: "postgres://db/app".into(),
    ///     reason: "refused".into(),
    ///     source: None,
    /// };
    /// assert!(!e.is_server_full());
    /// ```
    pub fn is_server_full(&self) -> bool {
        let Error::Unavailable {
            source: Some(source),
            ..
        } = self
        else {
            return false;
        };
        if source.downcast_ref::<Overloaded>().is_some() {
            return true;
        }
        #[cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]
        {
            source
                .downcast_ref::<sqlx::Error>()
                .is_some_and(crate::store::sql::is_server_full)
        }
        #[cfg(not(any(feature = "sqlite", feature = "mysql", feature = "postgres")))]
        {
            let _ = source;
            false
        }
    }

    /// True for errors that come from the caller's input or setup: fixing the
    /// input, not retrying, is what helps. The CLI exits with code 2 for these.
    /// TLS failures count: a certificate that does not verify is a setup problem.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::InvalidConfig { .. } | Error::InvalidUrl { .. } | Error::Tls { .. }
        )
    }

    /// Keeps `cause` under a store error (unavailable, permission, TLS,
    /// schema, protocol); other errors are returned as they are.
    // Unused in builds with only some stores.
    #[cfg_attr(
        not(any(
            feature = "sqlite",
            feature = "mysql",
            feature = "postgres",
            feature = "etcd",
            feature = "zookeeper"
        )),
        allow(dead_code)
    )]
    pub(crate) fn with_source(
        mut self,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        match &mut self {
            Error::Unavailable { source, .. }
            | Error::PermissionDenied { source, .. }
            | Error::Tls { source, .. }
            | Error::Schema { source, .. }
            | Error::Protocol { source, .. } => *source = Some(Box::new(cause)),
            _ => {}
        }
        self
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            field,
            reason: reason.into(),
        }
    }
}

/// Lets `?` pass an application statement's error out of fenced work
/// ([`SqlStore::fenced`](crate::store::sql::SqlStore::fenced)) as [`Error::Work`].
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Work {
            source: Box::new(e),
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overloaded_server_counts_as_full_and_an_unreachable_one_does_not() {
        let busy = Error::overloaded(
            "etcd://127.0.0.1:2379".into(),
            "answered its status but not a read within 5s".into(),
        );
        assert!(busy.is_server_full());
        assert!(busy.is_retryable());
        assert!(busy.to_string().contains("not a read within 5s"));
        let gone = Error::Unavailable {
            store: "etcd://127.0.0.1:2379".into(),
            reason: "connection refused".into(),
            source: None,
        };
        assert!(!gone.is_server_full());
    }
}
