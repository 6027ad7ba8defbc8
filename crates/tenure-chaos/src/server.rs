//! Private database servers started from the installed binaries (temp data
//! directory, free port), so the harness can crash and restart them without
//! touching the machine's shared servers.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    MariaDb,
}

pub struct Server {
    kind: Kind,
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn pg_bin(name: &str) -> PathBuf {
    for dir in [
        "/usr/lib/postgresql/17/bin",
        "/usr/lib/postgresql/16/bin",
        "/usr/lib/postgresql/15/bin",
        "/usr/lib/postgresql/14/bin",
    ] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    PathBuf::from(name)
}

fn run(cmd: &mut Command) -> std::io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

impl Server {
    pub fn new(kind: Kind) -> std::io::Result<Server> {
        let dir = tempfile::Builder::new()
            .prefix("tenure-chaos-db")
            .tempdir()?;
        let data = dir.path().join("data");
        match kind {
            Kind::Postgres => {
                // PostgreSQL refuses to run as root: hand the directory to `postgres`.
                run(Command::new("chown")
                    .arg("-R")
                    .arg("postgres:postgres")
                    .arg(dir.path()))?;
                run(Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_bin("initdb"))
                    .args(["-A", "trust", "-U", "postgres", "-D"])
                    .arg(&data))?;
            }
            Kind::MariaDb => {
                run(Command::new("mariadb-install-db")
                    .args([
                        "--no-defaults",
                        "--user=root",
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                    ])
                    .arg(format!("--datadir={}", data.display())))?;
            }
        }
        let mut s = Server {
            kind,
            dir,
            port: free_port()?,
            child: None,
        };
        s.start()?;
        if kind == Kind::MariaDb {
            run(Command::new("mariadb").args([
                "-h",
                "127.0.0.1",
                "-uroot",
                "-P",
                &s.port.to_string(),
                "-e",
                "CREATE DATABASE IF NOT EXISTS test",
            ]))?;
        } else {
            run(Command::new("runuser").args([
                "-u",
                "postgres",
                "--",
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                &s.port.to_string(),
                "-U",
                "postgres",
                "-c",
                "CREATE DATABASE test",
            ]))?;
        }
        Ok(s)
    }

    pub fn url(&self) -> String {
        match self.kind {
            Kind::Postgres => format!("postgres://postgres@127.0.0.1:{}/test", self.port),
            Kind::MariaDb => format!("mysql://root@127.0.0.1:{}/test", self.port),
        }
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) -> std::io::Result<()> {
        let data = self.dir.path().join("data");
        let log = std::fs::File::create(self.dir.path().join("server.log"))?;
        let child = match self.kind {
            Kind::Postgres => Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg_bin("postgres"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-p",
                    &self.port.to_string(),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "max_connections=200",
                ])
                .arg("-k")
                .arg(self.dir.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
            Kind::MariaDb => Command::new("mariadbd")
                .args([
                    "--no-defaults",
                    "--user=root",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                ])
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--port={}", self.port))
                .arg(format!(
                    "--socket={}",
                    self.dir.path().join("sock").display()
                ))
                .arg(format!(
                    "--pid-file={}",
                    self.dir.path().join("pid").display()
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
        };
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(std::io::Error::other(format!(
                    "{:?} did not start; see {}",
                    self.kind,
                    self.dir.path().join("server.log").display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Stops the server without a clean shutdown: SIGKILL for MariaDB, an
    /// immediate shutdown (no checkpoint, crash recovery on start) for PostgreSQL.
    pub fn crash(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        match self.kind {
            Kind::Postgres => {
                let _ = Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_bin("pg_ctl"))
                    .arg("-D")
                    .arg(self.dir.path().join("data"))
                    .args(["stop", "-m", "immediate", "-w"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
            Kind::MariaDb => {
                let _ = c.kill();
            }
        }
        let _ = c.wait();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && start.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.crash();
    }
}
