//! Private store servers started from the installed binaries (temp data
//! directory, free port), so the harness can crash and restart them without
//! touching the machine's shared servers. The launchers are shared with the
//! tests in `tenure-testsupport`.

pub use tenure_testsupport::servers::{Kind, Server, ServerOptions};
use tenure_testsupport::{EtcdCluster, ZkEnsemble};

/// A private store the harness may crash and restart: a database server, a
/// ZooKeeper server or ensemble (`java` with Debian's jars), or an etcd
/// cluster of one or more members.
pub enum Private {
    Db(Server),
    Zk(ZkEnsemble),
    Etcd(EtcdCluster),
}

impl Private {
    pub fn url(&self) -> String {
        match self {
            Private::Db(s) => s.url(),
            Private::Zk(z) => z.url(),
            Private::Etcd(e) => e.url(),
        }
    }

    /// How many servers answer clients (an ensemble's or cluster's members).
    pub fn members(&self) -> usize {
        match self {
            Private::Db(_) => 1,
            Private::Zk(z) => z.len(),
            Private::Etcd(e) => e.len(),
        }
    }

    /// SIGKILL, as a crash (PostgreSQL: immediate shutdown); of the one
    /// member of a single ZooKeeper server or etcd member.
    pub fn crash(&mut self) -> std::io::Result<()> {
        self.crash_member(0)
    }

    /// Starts it again on its data.
    pub fn start(&mut self) -> std::io::Result<()> {
        self.restart_member(0)
    }

    /// SIGKILL of member `i` of an ensemble or cluster, keeping its data.
    pub fn crash_member(&mut self, i: usize) -> std::io::Result<()> {
        match self {
            Private::Db(s) => {
                s.crash();
                Ok(())
            }
            Private::Zk(z) => {
                z.kill(i);
                Ok(())
            }
            Private::Etcd(e) => e.crash(i),
        }
    }

    /// Starts member `i` again on its data and waits until the ensemble
    /// or cluster serves.
    pub fn restart_member(&mut self, i: usize) -> std::io::Result<()> {
        match self {
            Private::Db(s) => s.start(),
            Private::Zk(z) => z.restart(i),
            Private::Etcd(e) => e.restart(i),
        }
    }

    /// Which member leads the ensemble (ZAB) or cluster (raft), if known.
    pub fn leading_member(&self) -> Option<usize> {
        match self {
            Private::Db(_) => None,
            Private::Zk(z) => z.leader(),
            Private::Etcd(e) => e.leader(),
        }
    }
}
