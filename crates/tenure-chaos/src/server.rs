//! Private database servers started from the installed binaries (temp data
//! directory, free port), so the harness can crash and restart them without
//! touching the machine's shared servers. The launcher is shared with the
//! tests in `tenure-testsupport`.

pub use tenure_testsupport::servers::{Kind, Server, ServerOptions};

/// A private store server the harness may crash and restart: a database
/// server, or a single ZooKeeper server (`java` with Debian's jars).
pub enum Private {
    Db(Server),
    Zk(tenure_testsupport::ZkEnsemble),
}

impl Private {
    pub fn url(&self) -> String {
        match self {
            Private::Db(s) => s.url(),
            Private::Zk(z) => z.url(),
        }
    }

    /// SIGKILL, as a crash.
    pub fn crash(&mut self) {
        match self {
            Private::Db(s) => s.crash(),
            Private::Zk(z) => z.kill(0),
        }
    }

    /// Starts it again on its data.
    pub fn start(&mut self) -> std::io::Result<()> {
        match self {
            Private::Db(s) => s.start(),
            Private::Zk(z) => z.restart(0),
        }
    }
}
