//! Helpers shared by several stores: none of them is a store, and none is
//! part of the public API.
//!
//! | file | job |
//! |---|---|
//! | `params.rs` | the query parameters each store URL takes, and the user-info check |
//! | `percent.rs` | percent-decoding of URL parts and escaped key segments |
//! | `ca_file.rs` | checking a CA file named by a URL before connecting |
//! | `client_tls.rs` | `cacert=`/`cert=`/`key=` files and rustls failures explained (Redis, etcd, ZooKeeper) |
//! | `crypto.rs` | ring installed as the process's rustls provider before any TLS |
//! | `rustls_cause.rs` | the rustls error dug out of a driver's error chain |
//! | `gather.rs` | calls that arrive together sent as one statement (renewals, heartbeats, reaps) |
//! | `wakeups.rs` | the fan-out of pushed changes to every subscriber |
//! | `push_health.rs` | how a push channel stands, as `tenure status` shows it |
//! | `push_outage.rs` | one log line per push outage, and the reconnect backoff |

#[cfg(any(
    feature = "tls",
    feature = "redis",
    feature = "etcd",
    feature = "zookeeper"
))]
pub(crate) mod ca_file;
#[cfg(any(feature = "redis", feature = "etcd", feature = "zookeeper"))]
pub(crate) mod client_tls;
#[cfg(any(feature = "tls", feature = "redis", feature = "zookeeper"))]
pub(crate) mod crypto;
#[cfg(any(
    feature = "sqlite",
    feature = "mysql",
    feature = "postgres",
    feature = "redis",
    feature = "etcd"
))]
pub(crate) mod gather;
pub(crate) mod params;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) mod percent;
pub(crate) mod push_health;
#[cfg(any(feature = "postgres", feature = "redis", feature = "etcd"))]
pub(crate) mod push_outage;
#[cfg(any(feature = "tls", feature = "redis", feature = "etcd"))]
pub(crate) mod rustls_cause;
#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "mysql",
    feature = "redis"
))]
pub(crate) mod wakeups;
