//! Test support shared by tenure's crates (not published): private database
//! servers started from the installed binaries ([`servers`]), private etcd
//! clusters ([`etcd`]), a breakable TCP proxy ([`proxy`]) and a throwaway certificate authority for TLS tests
//! ([`tls`]).
//!
//! Whether a missing server binary fails a test or skips it is the tests'
//! decision: see `tenure::testing::servers::required()`.

pub mod etcd;
pub mod proxy;
pub mod servers;
pub mod tls;
pub mod zookeeper;

pub use etcd::{EtcdCluster, EtcdOptions};
pub use servers::{Kind, Server, ServerOptions};
pub use tls::TestCa;
pub use zookeeper::ZkEnsemble;
