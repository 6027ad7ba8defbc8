//! Test support shared by tenure's crates (not published): the shared test
//! servers' URLs and the rule for a missing one, and private database
//! servers started from the installed binaries ([`servers`]), private etcd
//! clusters ([`etcd`]), a private PgBouncer in transaction mode
//! ([`pgbouncer`]), a breakable TCP proxy ([`proxy`]), a throwaway
//! certificate authority for TLS tests ([`tls`]), a `metrics` recorder
//! that reads what electors and stores count ([`metrics`]), a bare HTTP
//! GET ([`http`]), what `/proc` says of a process ([`process`]), and, with
//! the `world` feature, electors on a memory store and a manual clock driven
//! by hand (`world`).
//!
//! A missing server, shared or private, fails the run in CI (`CI=true`) or
//! with `TENURE_REQUIRE_SERVERS=1`, and skips the test with a printed reason
//! otherwise: see [`servers::required`].

pub mod etcd;
pub mod http;
pub mod metrics;
pub mod pgbouncer;
pub mod process;
pub mod proxy;
pub mod servers;
pub mod tls;
#[cfg(feature = "world")]
pub mod world;
pub mod zookeeper;

pub use etcd::{EtcdCluster, EtcdOptions};
pub use pgbouncer::PgBouncer;
pub use servers::{Kind, Server, ServerOptions};
pub use tls::TestCa;
pub use zookeeper::ZkEnsemble;
