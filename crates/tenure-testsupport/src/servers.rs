//! The test servers: where the machine's shared ones are and whether their
//! absence fails the run ([`mysql_url`], [`required`], [`connect_or_skip`],
//! [`sql_urls`]), and private database servers started from the installed
//! binaries (temp data directory, free port on 127.0.0.1), so tests and the
//! chaos harness can configure, crash and restart them without touching the
//! shared ones ([`Server`]).
//!
//! ```no_run
//! use tenure_testsupport::servers::{Kind, Server, ServerOptions};
//! let pg = Server::start_with(Kind::Postgres, ServerOptions::tls()).unwrap();
//! let ca = pg.tls().unwrap();
//! let url = format!("{}?sslmode=verify-full&sslrootcert={}", pg.url(), ca.ca_cert.display());
//!
//! // Redis speaking only TLS (`--port 0 --tls-port <port>`, client certificates
//! // optional): connect to `rediss://127.0.0.1:<port>` trusting `ca.ca_cert`;
//! // `ca.client_cert`/`ca.client_key` are accepted if presented.
//! let redis = Server::start_with(Kind::Redis, ServerOptions::tls()).unwrap();
//! let (port, ca_file) = (redis.port, &redis.tls().unwrap().ca_cert);
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tenure::store::{connect, redact_url, DynStore, StoreOptions};

use crate::tls::TestCa;

/// MariaDB/MySQL URL for tests: `TENURE_TEST_MYSQL`, default the local server.
pub fn mysql_url() -> String {
    std::env::var("TENURE_TEST_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}

/// PostgreSQL URL for tests: `TENURE_TEST_POSTGRES`, default the local server.
pub fn postgres_url() -> String {
    std::env::var("TENURE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Redis URL for tests: `TENURE_TEST_REDIS`, default the local server's database 0.
pub fn redis_url() -> String {
    std::env::var("TENURE_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into())
}

/// True when a missing server must fail the test run: in CI (`CI=true`) or
/// when `TENURE_REQUIRE_SERVERS=1`.
pub fn required() -> bool {
    std::env::var("TENURE_REQUIRE_SERVERS").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Connects to a test server, or returns `None` after printing why the test
/// is skipped. Panics instead when servers are [`required`].
pub async fn connect_or_skip(url: &str, options: &StoreOptions) -> Option<DynStore> {
    match connect(url, options).await {
        Ok(s) => Some(s),
        Err(e) if required() => panic!(
            "test server {} is required (CI=true or TENURE_REQUIRE_SERVERS=1) but unusable: {e}",
            redact_url(url)
        ),
        Err(e) => {
            eprintln!("SKIPPED: server {} unavailable: {e}", redact_url(url));
            None
        }
    }
}

/// The SQL stores to run a test on: a fresh SQLite file `sql.db` in `dir`,
/// then the MariaDB and PostgreSQL test servers where they run (a missing
/// one is skipped, or fails the run when servers are [`required`]).
pub async fn sql_urls(dir: &Path) -> Vec<String> {
    let mut urls = vec![format!("sqlite://{}", dir.join("sql.db").display())];
    for url in [mysql_url(), postgres_url()] {
        if connect_or_skip(&url, &StoreOptions::default())
            .await
            .is_some()
        {
            urls.push(url);
        }
    }
    urls
}

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// PostgreSQL (`initdb` + `postgres`, run as the `postgres` user).
    Postgres,
    /// MariaDB (`mariadb-install-db` + `mariadbd`).
    MariaDb,
    /// Redis (`redis-server`, no persistence).
    Redis,
}

/// How to set a server up.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// Serve TLS with a freshly generated test CA (see [`Server::tls`]).
    /// Redis then listens only on its TLS port.
    pub tls: bool,
    /// With `tls`: create this database user, which may log in only with the
    /// client certificate of the test CA (its common name is this user name):
    /// PostgreSQL `hostssl ... cert`, MariaDB `REQUIRE X509`. Ignored for Redis,
    /// which always runs with `--tls-auth-clients optional`.
    pub cert_user: Option<String>,
    /// More command-line arguments for the server, after tenure's own (so for
    /// Redis they override them: `--appendonly yes`, `--requirepass x`).
    pub extra_args: Vec<String>,
}

impl ServerOptions {
    /// TLS on, no certificate-only user.
    pub fn tls() -> Self {
        Self {
            tls: true,
            ..Self::default()
        }
    }

    /// Adds command-line arguments (see [`Self::extra_args`]).
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.extra_args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Redis: adds the user `nosub` (password `secret`), who may run every
    /// command but `SUBSCRIBE` and its pattern and shard forms, as behind an
    /// ACL or a proxy without pub/sub: push never opens for it.
    pub fn with_redis_user_without_subscribe(self) -> Self {
        self.with_args(&[
            "--user",
            "nosub",
            "on",
            ">secret",
            "~*",
            "&*",
            "+@all",
            "-subscribe",
            "-psubscribe",
            "-ssubscribe",
        ])
    }

    /// Adds a user that must log in with the client certificate.
    pub fn with_cert_user(mut self, user: impl Into<String>) -> Self {
        self.cert_user = Some(user.into());
        self
    }
}

/// A private server; stopped (without a clean shutdown) when dropped.
pub struct Server {
    kind: Kind,
    dir: tempfile::TempDir,
    /// The TCP port on 127.0.0.1 (for Redis with TLS: the TLS port).
    pub port: u16,
    child: Option<Child>,
    tls: Option<TestCa>,
    extra_args: Vec<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("kind", &self.kind)
            .field("dir", &self.dir.path())
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; another process may take
/// it). Never the same port twice in one test process: the kernel hands a
/// just-released port out again, and two private servers started side by
/// side (parallel tests, the members of one etcd cluster) then collided.
pub fn free_port() -> std::io::Result<u16> {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    // Keep the candidates bound until one is new, so the kernel offers others.
    let mut held = Vec::new();
    for _ in 0..64 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let mut seen = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        if seen.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
    Err(std::io::Error::other("no unused free port after 64 tries"))
}

/// A fresh directory for a private server's data, named `prefix...`, on
/// tmpfs (`/dev/shm`) where there is one, else in the system's temporary
/// directory. etcd and ZooKeeper fsync every write, and on a busy two-core
/// machine one fsync now and then takes longer than a short TTL's release
/// budget. Data still survives what the tests do to a server (SIGKILL,
/// restart); only a machine crash would lose it, and no test crashes the
/// machine.
pub fn scratch_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let base = Some(Path::new("/dev/shm"))
        .filter(|p| p.is_dir())
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new().prefix(prefix).tempdir_in(base)
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

/// Whether `name` is an executable on the `PATH`, or in `/usr/sbin` or
/// `/usr/bin` (server binaries live there, and a user's `PATH` may lack sbin).
fn on_path(name: &str) -> bool {
    which::which(name).is_ok() || which::which_in(name, Some("/usr/sbin:/usr/bin"), "/").is_ok()
}

fn mariadbd() -> &'static str {
    if on_path("mariadbd") {
        "mariadbd"
    } else {
        "mysqld"
    }
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

impl Kind {
    /// Checks that the binaries this kind needs are installed; the error names
    /// the missing one and the Debian package that has it.
    pub fn available(self) -> Result<(), String> {
        let (bins, package): (Vec<PathBuf>, &str) = match self {
            Kind::Postgres => (
                vec![
                    pg_bin("initdb"),
                    pg_bin("postgres"),
                    pg_bin("pg_ctl"),
                    pg_bin("pg_isready"),
                    pg_bin("psql"),
                ],
                "postgresql",
            ),
            Kind::MariaDb => (
                vec![
                    PathBuf::from(mariadbd()),
                    "mariadb-install-db".into(),
                    "mariadb".into(),
                ],
                "mariadb-server",
            ),
            Kind::Redis => (vec!["redis-server".into()], "redis-server"),
        };
        for b in bins {
            let found = if b.is_absolute() {
                b.is_file()
            } else {
                on_path(&b.to_string_lossy())
            };
            if !found {
                return Err(format!(
                    "{} not found (install the Debian package {package})",
                    b.display()
                ));
            }
        }
        if self == Kind::Postgres && !on_path("runuser") {
            return Err("runuser not found (install util-linux)".into());
        }
        Ok(())
    }
}

impl Server {
    /// A plain (no TLS) server of `kind`, started and ready.
    pub fn new(kind: Kind) -> std::io::Result<Server> {
        Self::start_with(kind, ServerOptions::default())
    }

    /// Like [`Self::start_with`]; where the binaries `kind` needs are
    /// missing it skips (prints SKIPPED and returns `None`) unless
    /// `required` (the tests' policy, [`required`]), where it panics. A
    /// server that is installed but does not start panics either way.
    pub fn start_or_skip(kind: Kind, options: ServerOptions, required: bool) -> Option<Server> {
        if let Err(why) = kind.available() {
            assert!(
                !required,
                "{kind:?} is required (CI=true or TENURE_REQUIRE_SERVERS=1): {why}"
            );
            eprintln!("SKIPPED: {why}");
            return None;
        }
        match Self::start_with(kind, options) {
            Ok(server) => Some(server),
            Err(e) => panic!("a private {kind:?} server did not start: {e}"),
        }
    }

    /// A server of `kind` set up as `options` say, started and ready. For
    /// PostgreSQL and MariaDB the database `test` exists; PostgreSQL trusts
    /// `postgres` and MariaDB `root` without a password (over TLS or not).
    pub fn start_with(kind: Kind, options: ServerOptions) -> std::io::Result<Server> {
        kind.available().map_err(std::io::Error::other)?;
        let dir = tempfile::Builder::new()
            .prefix("tenure-test-server")
            .tempdir()?;
        let data = dir.path().join("data");
        let tls = if options.tls {
            let cn = options.cert_user.as_deref().unwrap_or("tenure_client");
            Some(TestCa::generate(&dir.path().join("tls"), cn)?)
        } else {
            None
        };
        match kind {
            Kind::Postgres => {
                // PostgreSQL refuses to run as root: hand the directory
                // (data and key files) to `postgres`.
                run(Command::new("chown")
                    .arg("-R")
                    .arg("postgres:postgres")
                    .arg(dir.path()))?;
                run(Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(pg_bin("initdb"))
                    .args(["-A", "trust", "-U", "postgres", "-D"])
                    .arg(&data))?;
                if let Some(user) = &options.cert_user {
                    // First matching line wins: the certificate user only over
                    // TLS with a verified client certificate, everyone else trusted.
                    let hba = format!(
                        "local all all trust\n\
                         hostssl all {user} 127.0.0.1/32 cert\n\
                         hostssl all {user} ::1/128 cert\n\
                         host all {user} 0.0.0.0/0 reject\n\
                         host all all 127.0.0.1/32 trust\n\
                         host all all ::1/128 trust\n"
                    );
                    std::fs::write(data.join("pg_hba.conf"), hba)?;
                }
            }
            Kind::MariaDb => {
                // A temporary directory of its own: a starting MariaDB deletes
                // the `#sql*` files it finds in its tmpdir, and two private
                // servers starting at once in /tmp broke each other's install.
                std::fs::create_dir_all(dir.path().join("tmp"))?;
                run(Command::new("mariadb-install-db")
                    .args([
                        "--no-defaults",
                        "--user=root",
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                    ])
                    .arg(format!("--datadir={}", data.display()))
                    .arg(format!("--tmpdir={}", dir.path().join("tmp").display())))?;
            }
            Kind::Redis => std::fs::create_dir_all(&data)?,
        }
        let mut s = Server {
            kind,
            dir,
            port: free_port()?,
            child: None,
            tls,
            extra_args: options.extra_args.clone(),
        };
        s.start()?;
        match kind {
            Kind::MariaDb => {
                let mut sql = "CREATE DATABASE IF NOT EXISTS test;".to_string();
                if let Some(user) = &options.cert_user {
                    sql.push_str(&format!(
                        "CREATE USER '{user}'@'%' REQUIRE X509;\
                         GRANT ALL ON test.* TO '{user}'@'%';"
                    ));
                }
                run(Command::new("mariadb")
                    .args(["--no-defaults", "-uroot", "--protocol=socket"])
                    .arg(format!("--socket={}", s.dir.path().join("sock").display()))
                    .args(["-e", &sql]))?;
            }
            Kind::Postgres => {
                let mut cmds = vec!["CREATE DATABASE test".to_string()];
                if let Some(user) = &options.cert_user {
                    cmds.push(format!("CREATE ROLE {user} LOGIN SUPERUSER"));
                }
                for c in cmds {
                    run(Command::new("runuser")
                        .args(["-u", "postgres", "--"])
                        .arg(pg_bin("psql"))
                        .arg("-h")
                        .arg(s.dir.path())
                        .args(["-p", &s.port.to_string(), "-U", "postgres", "-c", &c]))?;
                }
            }
            Kind::Redis => {}
        }
        Ok(s)
    }

    /// The kind of server.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The test CA whose certificates the server uses (with `tls` only).
    pub fn tls(&self) -> Option<&TestCa> {
        self.tls.as_ref()
    }

    /// The server's temp directory (data, log `server.log`, TLS files in `tls/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A URL for the server's superuser on database `test`, without TLS
    /// parameters; Redis: `redis://` or, with TLS, `rediss://`.
    pub fn url(&self) -> String {
        match self.kind {
            Kind::Postgres => format!("postgres://postgres@127.0.0.1:{}/test", self.port),
            Kind::MariaDb => format!("mysql://root@127.0.0.1:{}/test", self.port),
            Kind::Redis if self.tls.is_some() => format!("rediss://127.0.0.1:{}", self.port),
            Kind::Redis => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The last lines of the server's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) -> std::io::Result<()> {
        let data = self.dir.path().join("data");
        let log = std::fs::File::create(self.dir.path().join("server.log"))?;
        let port = self.port.to_string();
        let mut cmd = match self.kind {
            Kind::Postgres => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"])
                    .arg(pg_bin("postgres"))
                    .arg("-D")
                    .arg(&data)
                    .args([
                        "-p",
                        &port,
                        "-c",
                        "listen_addresses=127.0.0.1",
                        "-c",
                        "max_connections=200",
                    ])
                    .arg("-k")
                    .arg(self.dir.path());
                if let Some(ca) = &self.tls {
                    c.args(["-c", "ssl=on"])
                        .arg("-c")
                        .arg(format!("ssl_cert_file={}", ca.server_cert.display()))
                        .arg("-c")
                        .arg(format!("ssl_key_file={}", ca.server_key.display()))
                        .arg("-c")
                        .arg(format!("ssl_ca_file={}", ca.ca_cert.display()));
                }
                c
            }
            Kind::MariaDb => {
                let mut c = Command::new(mariadbd());
                c.args([
                    "--no-defaults",
                    "--user=root",
                    "--bind-address=127.0.0.1",
                    "--skip-name-resolve",
                ])
                .arg(format!("--datadir={}", data.display()))
                .arg(format!(
                    "--tmpdir={}",
                    self.dir.path().join("tmp").display()
                ))
                .arg(format!("--port={}", self.port))
                .arg(format!(
                    "--socket={}",
                    self.dir.path().join("sock").display()
                ))
                .arg(format!(
                    "--pid-file={}",
                    self.dir.path().join("pid").display()
                ));
                if let Some(ca) = &self.tls {
                    c.arg(format!("--ssl-ca={}", ca.ca_cert.display()))
                        .arg(format!("--ssl-cert={}", ca.server_cert.display()))
                        .arg(format!("--ssl-key={}", ca.server_key.display()));
                }
                c
            }
            Kind::Redis => {
                let mut c = Command::new("redis-server");
                c.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&data);
                if let Some(ca) = &self.tls {
                    c.args(["--port", "0", "--tls-port", &port])
                        .arg("--tls-cert-file")
                        .arg(&ca.server_cert)
                        .arg("--tls-key-file")
                        .arg(&ca.server_key)
                        .arg("--tls-ca-cert-file")
                        .arg(&ca.ca_cert)
                        .args(["--tls-auth-clients", "optional"]);
                } else {
                    c.args(["--port", &port]);
                }
                c
            }
        };
        cmd.args(&self.extra_args);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || start.elapsed() > Duration::from_secs(60) {
                return Err(std::io::Error::other(format!(
                    "{:?} did not start ({}); log {}:\n{}",
                    self.kind,
                    exited.map_or("timed out".to_string(), |s| s.to_string()),
                    self.dir.path().join("server.log").display(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.kind == Kind::Postgres {
            // The port opens before recovery ends ("the database system is
            // starting up"): wait until it accepts logins.
            loop {
                let ready = Command::new(pg_bin("pg_isready"))
                    .arg("-h")
                    .arg(self.dir.path())
                    .args(["-p", &port, "-U", "postgres", "-d", "postgres"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()?;
                if ready.success() {
                    break;
                }
                if start.elapsed() > Duration::from_secs(60) {
                    return Err(std::io::Error::other(format!(
                        "PostgreSQL did not get ready; log {}:\n{}",
                        self.dir.path().join("server.log").display(),
                        self.log_tail()
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Stops the server without a clean shutdown: SIGKILL for MariaDB and
    /// Redis, an immediate shutdown (no checkpoint, crash recovery on start)
    /// for PostgreSQL.
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
            Kind::MariaDb | Kind::Redis => {
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

#[cfg(test)]
mod tests {
    #[test]
    fn programs_are_found_on_the_path_and_in_sbin() {
        assert!(super::on_path("sh"));
        assert!(!super::on_path("no-such-program-for-tenure"));
        // sbin counts even when the PATH lacks it.
        if std::path::Path::new("/usr/sbin/runuser").is_file() {
            assert!(super::on_path("runuser"));
        }
    }
}
