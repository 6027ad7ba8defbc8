//! ZooKeeper client errors → the crate's errors, naming the fix where there is one.

use zookeeper_client::Error as ZkError;

use crate::error::Error;

/// Maps a client error on `path` to the crate's error.
pub(super) fn map(store: &str, path: &str, e: ZkError) -> Error {
    let store = store.to_string();
    let explained = match &e {
        ZkError::NoAuth => Error::PermissionDenied {
            store,
            reason: format!(
                "ZooKeeper's ACL on {path} (or its parent) denies this client; grant the URL's \
                 digest user create/read/write/delete there, or choose a chroot this client may use"
            ),
            source: None,
        },
        ZkError::AuthFailed => Error::PermissionDenied {
            store,
            reason: "authentication failed (check user:password in the URL)".into(),
            source: None,
        },
        ZkError::NoHosts
        | ZkError::Timeout
        | ZkError::ConnectionLoss
        | ZkError::SessionExpired
        | ZkError::SessionMoved
        | ZkError::ClientClosed
        | ZkError::Throttled
        | ZkError::NotReadOnly => Error::Unavailable {
            store,
            reason: format!("{e} (at {path})"),
            source: None,
        },
        _ => Error::Protocol {
            store,
            reason: format!("{e} (at {path})"),
            source: None,
        },
    };
    explained.with_source(e)
}
