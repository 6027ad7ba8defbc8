//! PostgreSQL behind a connection pooler: the URL parameters `pooler` and
//! `push_url`, which tenure reads and the driver never sees.
//!
//! A pooler in transaction mode (PgBouncer's `pool_mode = transaction`)
//! gives a client a server connection for one transaction at a time. What
//! that breaks, and how the store goes around it:
//! - a statement's preparation and execution are two exchanges, which may
//!   reach two server connections, and a prepared statement stays on a
//!   server connection the next client finds: every lend of the store's
//!   connection is a transaction, which forgets what it prepared before it
//!   commits (`connection.rs`);
//! - `LISTEN` lasts for a session the pooler does not keep: it is not
//!   attempted through the pooler; `push_url` names a direct connection
//!   for it; without one nothing is pushed, and the two followers first in line read every tenth of a TTL, the others at the lease's expiry.

use crate::error::{Error, Result};
use crate::store::redact_url;

/// The pooler between tenure and a PostgreSQL server, as the URL describes
/// it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::store::sql) struct Pooler {
    /// `pooler=transaction`: a server connection lasts one transaction.
    pub(in crate::store::sql) transaction_mode: bool,
    /// `push_url=`: where `LISTEN` connects instead (a driver URL).
    pub(in crate::store::sql) push_url: Option<String>,
}

impl Pooler {
    /// Whether `LISTEN` can be used: not through a pooler in transaction
    /// mode, unless a direct URL is given for it.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(in crate::store::sql) fn listens(&self) -> bool {
        !self.transaction_mode || self.push_url.is_some()
    }

    /// Whether the URL declares nothing of a pooler: statements and
    /// `LISTEN` go to the same server, on the same connection.
    pub(in crate::store::sql) fn is_direct(&self) -> bool {
        !self.transaction_mode && self.push_url.is_none()
    }

    /// What `tenure status` says of the pooler; `None` without one.
    pub(in crate::store::sql) fn describe(&self) -> Option<String> {
        if self.is_direct() {
            return None;
        }
        let mode = if self.transaction_mode {
            "transaction mode (each lend of the connection is one transaction)"
        } else {
            "no transaction pooler declared"
        };
        let listen = match &self.push_url {
            Some(push) => format!("LISTEN goes to {} (push_url)", redact_url(push)),
            None => "LISTEN is not attempted through it: the two followers first in line read every tenth of a TTL, the others at the lease's expiry (set push_url= to a direct URL for wake-ups in milliseconds)".to_string(),
        };
        Some(format!("{mode}; {listen}"))
    }
}

/// Takes `pooler` and `push_url` out of the PostgreSQL URL `url`: the URL
/// left for the driver, and the pooler they describe. `push_url` is a
/// percent-encoded `postgres://` URL of the same database, reached
/// directly.
pub(in crate::store::sql) fn take(url: &str) -> Result<(String, Pooler)> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), Pooler::default()));
    };
    let mut pooler = Pooler::default();
    let mut kept = url::form_urlencoded::Serializer::new(String::new());
    let mut any_kept = false;
    let mut cached = false;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "pooler" => match &*v {
                "transaction" => pooler.transaction_mode = true,
                "session" | "none" => pooler.transaction_mode = false,
                other => {
                    return Err(bad(format!(
                        "pooler={other:?} is not a pooling mode tenure knows; use pooler=transaction for PgBouncer's pool_mode = transaction (session mode needs no parameter)"
                    )))
                }
            },
            "push_url" => {
                let scheme = v.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
                if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
                    return Err(bad(
                        "push_url must be a percent-encoded postgres:// URL of the same database, reached without the pooler (e.g. push_url=postgres%3A%2F%2Fuser%40db-host%3A5432%2Fapp)".to_string(),
                    ));
                }
                if v.contains("pooler=transaction") {
                    return Err(bad(
                        "push_url must reach the server directly: LISTEN does not work through a pooler in transaction mode".to_string(),
                    ));
                }
                pooler.push_url = Some(v.into_owned());
            }
            _ => {
                if k == "statement-cache-capacity" && v != "0" {
                    cached = true;
                }
                kept.append_pair(&k, &v);
                any_kept = true;
            }
        }
    }
    if pooler.transaction_mode && cached {
        return Err(bad(
            "statement-cache-capacity must be 0 (or left out) with pooler=transaction: a cached statement would be used on a server connection that never prepared it".to_string(),
        ));
    }
    let driver = if any_kept {
        format!("{base}?{}", kept.finish())
    } else {
        base.to_string()
    };
    Ok((driver, pooler))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_parameters_no_pooler() {
        let (url, pooler) = take("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(url, "postgres://h/db?sslmode=disable");
        assert_eq!(pooler, Pooler::default());
        assert!(pooler.listens());
        assert_eq!(pooler.describe(), None);
    }

    #[test]
    fn transaction_mode_without_push_url_does_not_listen() {
        let (url, pooler) =
            take("postgres://h:6432/db?pooler=transaction&sslmode=disable").unwrap();
        assert_eq!(url, "postgres://h:6432/db?sslmode=disable");
        assert!(pooler.transaction_mode);
        assert!(!pooler.listens());
        assert!(pooler.describe().unwrap().contains("not attempted"));
    }

    #[test]
    fn push_url_is_decoded_and_redacted_in_the_description() {
        let (url, pooler) =
            take("postgres://h:6432/db?pooler=transaction&push_url=postgres%3A%2F%2Fu%3As3cret%40h%3A5432%2Fdb")
                .unwrap();
        assert_eq!(url, "postgres://h:6432/db");
        assert_eq!(
            pooler.push_url.as_deref(),
            Some("postgres://u:s3cret@h:5432/db")
        );
        assert!(pooler.listens());
        let said = pooler.describe().unwrap();
        assert!(!said.contains("s3cret"), "{said}");
        assert!(said.contains("h:5432"), "{said}");
    }

    #[test]
    fn bad_values_are_refused_with_the_fix() {
        let e = take("postgres://h/db?pooler=statement")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pooler=transaction"), "{e}");
        let e = take("postgres://h/db?push_url=redis%3A%2F%2Fh")
            .unwrap_err()
            .to_string();
        assert!(e.contains("postgres://"), "{e}");
        let e = take("postgres://h/db?push_url=postgres%3A%2F%2Fh%2Fdb%3Fpooler%3Dtransaction")
            .unwrap_err()
            .to_string();
        assert!(e.contains("directly"), "{e}");
        let e = take("postgres://h/db?pooler=transaction&statement-cache-capacity=100")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be 0"), "{e}");
        assert!(take("postgres://h/db?pooler=transaction&statement-cache-capacity=0").is_ok());
    }
}
