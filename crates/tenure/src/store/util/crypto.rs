//! The process-wide rustls crypto provider.
//!
//! rustls picks its provider from its enabled features when exactly one is
//! on. The ZooKeeper client depends on rustls with its default features,
//! which add aws-lc-rs beside the ring provider every other store is built
//! with; with two, rustls refuses to choose, and any configuration built
//! from the process default (sqlx's, the Redis client's) would panic.
//! Every store that may speak TLS therefore installs ring first.

/// Makes ring the process's rustls provider unless one is installed
/// already (by the application or an earlier store), which is then kept.
pub(crate) fn use_ring_unless_chosen() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
