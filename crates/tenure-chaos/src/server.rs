//! Private store servers started from the installed binaries (temp data
//! directory, free port), so the harness can crash and restart them without
//! touching the machine's shared servers. The launchers are shared with the
//! tests in `tenure-testsupport`.

use tenure_testsupport::servers::{Kind, Server, ServerOptions};
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
    /// Starts the private store `--store` names (`None` for SQLite and for
    /// a URL, which the harness never restarts).
    pub fn start_named(store: &str) -> std::io::Result<Option<Private>> {
        Ok(Some(match store {
            "mariadb" => Private::Db(Server::new(Kind::MariaDb)?),
            "postgres" => Private::Db(Server::new(Kind::Postgres)?),
            // One ZooKeeper server: a restart fault crashes and restarts it;
            // sessions (and the leader's ephemeral znode) survive a restart
            // shorter than their timeout, as on a real ensemble. Three:
            // members crash one at a time (the ensemble keeps its quorum).
            "zk" => Private::Zk(ZkEnsemble::start(1)?),
            "zk3" => Private::Zk(ZkEnsemble::start(3)?),
            // etcd members crash keeping their data and restart on it, so
            // committed terms survive, as on a real cluster.
            "etcd" => Private::Etcd(EtcdCluster::start(1)?),
            "etcd3" => Private::Etcd(EtcdCluster::start(3)?),
            // A4 broken on purpose: no persistence at all, so a restart
            // loses every acknowledged write, terms included (docs/redis.md).
            "redis-volatile" => Private::Db(Server::start_with(
                Kind::Redis,
                ServerOptions::default().with_args(&["--appendonly", "no", "--save", ""]),
            )?),
            // Persistent (AOF, fsync on every write): a restart fault must
            // not forget terms; an unpersisted Redis would, as docs/redis.md
            // says.
            "redis" => Private::Db(Server::start_with(
                Kind::Redis,
                ServerOptions::default().with_args(&[
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ]),
            )?),
            _ => return Ok(None),
        }))
    }

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

    /// SIGKILL of member `i` of an ensemble or cluster, keeping its data
    /// (a single server is member 0; PostgreSQL: immediate shutdown).
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
