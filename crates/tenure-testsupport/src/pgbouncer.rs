//! A private PgBouncer in transaction pooling mode in front of a PostgreSQL
//! server, started from the installed binary (Debian's `pgbouncer`) with a
//! temp directory and a free port, and stopped (by the pid it wrote) when
//! dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::servers::{free_port, required};

/// Where Debian installs it (not on a user's `PATH` without sbin).
fn binary() -> Option<PathBuf> {
    which::which("pgbouncer")
        .or_else(|_| which::which_in("pgbouncer", Some("/usr/sbin:/usr/bin"), "/"))
        .ok()
}

/// A running PgBouncer (`pool_mode = transaction`).
pub struct PgBouncer {
    dir: tempfile::TempDir,
    port: u16,
    database: String,
    child: Child,
}

impl PgBouncer {
    /// A PgBouncer in transaction mode in front of the server of
    /// `upstream` (a `postgres://user@host:port/database` URL; the user is
    /// trusted there), pooling at most `server_connections` connections
    /// to it. Skips (prints SKIPPED, `None`) when the binary is missing,
    /// unless servers are [`required`], where it panics naming the Debian
    /// package.
    pub fn start_or_skip(upstream: &str, server_connections: u32) -> Option<PgBouncer> {
        if binary().is_none() {
            assert!(
                !required(),
                "pgbouncer is required (CI=true or TENURE_REQUIRE_SERVERS=1): not found (install the Debian package pgbouncer)"
            );
            eprintln!("SKIPPED: pgbouncer not found (install the Debian package pgbouncer)");
            return None;
        }
        match Self::start(upstream, server_connections) {
            Ok(bouncer) => Some(bouncer),
            Err(e) => panic!("a private PgBouncer did not start: {e}"),
        }
    }

    /// Like [`Self::start_or_skip`], failing where the binary is missing.
    pub fn start(upstream: &str, server_connections: u32) -> std::io::Result<PgBouncer> {
        let bin = binary().ok_or_else(|| std::io::Error::other("pgbouncer not found"))?;
        let up = url::Url::parse(upstream).map_err(std::io::Error::other)?;
        let host = up.host_str().unwrap_or("127.0.0.1").to_string();
        let port = up.port().unwrap_or(5432);
        let user = match up.username() {
            "" => "postgres".to_string(),
            u => u.to_string(),
        };
        let database = up.path().trim_start_matches('/').to_string();
        let dir = tempfile::Builder::new()
            .prefix("tenure-test-pgbouncer")
            .tempdir()?;
        let listen = free_port()?;
        let log = dir.path().join("pgbouncer.log");
        let pid = dir.path().join("pgbouncer.pid");
        // `auth_type = any`: clients are not asked for a password, and
        // every server connection logs in as the database line's user.
        // `extra_float_digits`: a startup parameter sqlx sends that
        // PgBouncer does not know (every deployment in front of JDBC or
        // sqlx ignores it the same way).
        let ini = format!(
            "[databases]\n\
             {database} = host={host} port={port} dbname={database} user={user}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {listen}\n\
             unix_socket_dir =\n\
             auth_type = any\n\
             pool_mode = transaction\n\
             default_pool_size = {server_connections}\n\
             max_client_conn = 5000\n\
             ignore_startup_parameters = extra_float_digits\n\
             logfile = {log}\n\
             pidfile = {pid}\n",
            log = log.display(),
            pid = pid.display(),
        );
        let conf = dir.path().join("pgbouncer.ini");
        std::fs::write(&conf, ini)?;
        // PgBouncer refuses to run as root.
        let as_postgres = is_root();
        if as_postgres {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .output()?;
            if !out.status.success() {
                return Err(std::io::Error::other(format!(
                    "chown failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
        }
        // Through a shell that stops PgBouncer when its stdin (a pipe this
        // process holds) closes: when this process exits, even with the
        // pooler in a `static` that is never dropped. The pid PgBouncer
        // writes is its own (runuser is its parent).
        let run_as = if as_postgres {
            "runuser -u postgres -- "
        } else {
            ""
        };
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                r#"{run_as}"$0" "$1" </dev/null & p=$!; read _; kill "$(cat "$2")" 2>/dev/null; kill $p 2>/dev/null; wait $p"#
            ))
            .arg(&bin)
            .arg(&conf)
            .arg(&pid)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut bouncer = PgBouncer {
            dir,
            port: listen,
            database,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok() {
                return Ok(bouncer);
            }
            if let Ok(Some(status)) = bouncer.child.try_wait() {
                return Err(std::io::Error::other(format!(
                    "pgbouncer exited ({status}): {}",
                    bouncer.log_tail()
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "pgbouncer did not listen on 127.0.0.1:{listen} within 20 s: {}",
                    bouncer.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A URL through this PgBouncer that declares it (`pooler=transaction`).
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}?pooler=transaction",
            self.port, self.database
        )
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Whether this process runs as root (the owner of its `/proc` entry).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // Closing the shell's stdin stops PgBouncer.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
