//! etcd client errors → the crate's errors, naming the fix where there is one.

use super::Inner;
use crate::error::Error;
use crate::store::ElectionKey;

pub(super) fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// Maps an etcd client error to the crate's error, naming the fix where there is one.
pub(super) fn map_client_error(store: &str, e: etcd_client::Error) -> Error {
    explain(store, &e).with_source(e)
}

/// The error that names the problem and its fix, for an etcd client error.
fn explain(store: &str, e: &etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let store = store.to_string();
    match e {
        E::GRpcStatus(s) => {
            use tonic_code::*;
            let msg = s.message().to_string();
            match s.code() as i32 {
                UNAUTHENTICATED | PERMISSION_DENIED => Error::PermissionDenied { source: None,
                    store,
                    reason: format!("{msg} (check the user and password in the URL, and the user's role on the key prefix)"),
                },
                INVALID_ARGUMENT | FAILED_PRECONDITION
                    if msg.contains("authentication") || msg.contains("user name") || msg.contains("password") || msg.contains("auth") =>
                {
                    Error::PermissionDenied { source: None,
                        store,
                        reason: format!("{msg} (check the user and password in the URL)"),
                    }
                }
                UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED | ABORTED | RESOURCE_EXHAUSTED | UNKNOWN => {
                    Error::Unavailable { source: None, store, reason: format!("{:?}: {msg}", s.code()) }
                }
                _ => Error::Protocol { source: None, store, reason: format!("{:?}: {msg}", s.code()) },
            }
        }
        E::InvalidArgs(m) | E::EndpointError(m) => Error::InvalidUrl {
            url: store,
            reason: m.clone(),
        },
        E::InvalidUri(u) => Error::InvalidUrl {
            url: store,
            reason: u.to_string(),
        },
        other => Error::Unavailable {
            source: None,
            store,
            reason: other.to_string(),
        },
    }
}

/// gRPC status codes (as numbers, so we need not depend on tonic directly).
pub(super) mod tonic_code {
    pub(crate) const CANCELLED: i32 = 1;
    pub(crate) const UNKNOWN: i32 = 2;
    pub(crate) const INVALID_ARGUMENT: i32 = 3;
    pub(crate) const DEADLINE_EXCEEDED: i32 = 4;
    pub(crate) const PERMISSION_DENIED: i32 = 7;
    pub(crate) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(crate) const FAILED_PRECONDITION: i32 = 9;
    pub(crate) const ABORTED: i32 = 10;
    pub(crate) const UNAVAILABLE: i32 = 14;
    pub(crate) const UNAUTHENTICATED: i32 = 16;
}

impl Inner {
    pub(super) fn unavailable(&self, reason: String) -> Error {
        Error::Unavailable {
            source: None,
            store: self.described.clone(),
            reason,
        }
    }

    /// The error for a lease of `key` whose stored values tenure did not
    /// write, with the `etcdctl` commands that repair it. Deleting the keys
    /// repeats no term: terms are etcd revisions, which only grow.
    pub(super) fn corrupt(&self, key: &ElectionKey, reason: String) -> Error {
        let del =
            |kind: &str| format!("etcdctl del '{}'", self.k(kind, key).replace('\'', "'\\''"));
        Error::Corrupt {
            election: key.to_string(),
            store: self.described.clone(),
            reason,
            repair: format!(
                "run `{} && {} && {}` (with etcdctl's --endpoints for this cluster); \
                 terms are etcd revisions, so no term repeats",
                del("lease"),
                del("handover"),
                del("state")
            ),
        }
    }

    pub(super) fn protocol(&self, reason: impl Into<String>) -> Error {
        Error::Protocol {
            source: None,
            store: self.described.clone(),
            reason: reason.into(),
        }
    }

    pub(super) fn map_err(&self, e: etcd_client::Error) -> Error {
        map_client_error(&self.described, e)
    }
}
