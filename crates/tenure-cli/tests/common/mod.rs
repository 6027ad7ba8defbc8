//! Helpers for the CLI tests: running the binary and `tenure serve`, a
//! breakable TCP proxy, the shared servers' tables.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// `tenure args...` in `dir`, with no input, no TENURE_STORE and warnings only.
pub fn tenure_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// Runs `tenure args...` to completion in `dir`.
pub fn tenure(dir: &Path, args: &[&str]) -> Output {
    tenure_command(dir, args).output().expect("run tenure")
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts `tenure args...` in the background.
pub fn spawn_tenure(dir: &Path, args: &[&str], log: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn tenure")
}

/// A background `tenure run` and its log; SIGTERMed and reaped when dropped.
pub struct Candidate {
    pub child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

/// The candidates' logs, one after the other.
pub fn logs<'a>(cands: impl IntoIterator<Item = &'a Candidate>) -> String {
    cands
        .into_iter()
        .map(|c| std::fs::read_to_string(&c.log).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n----\n")
}

/// A `tenure serve` process and the address it announced.
pub struct Serve {
    pub child: std::process::Child,
    pub addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tenure serve --http 127.0.0.1:0 args...`, with at most `nofile` open
/// files if given (`ulimit -n` in a shell that then execs it).
pub fn serve(dir: &Path, nofile: Option<u32>, args: &[&str]) -> Serve {
    use std::io::{BufRead, BufReader};
    let mut cmd = match nofile {
        Some(n) => {
            let mut c = Command::new("sh");
            c.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), BIN]);
            c
        }
        None => Command::new(BIN),
    };
    let mut child = cmd
        .arg("serve")
        .args(["--http", "127.0.0.1:0"])
        .args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tenure serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the announced address");
    let addr = line
        .trim()
        .strip_prefix("serving http://")
        .unwrap_or_else(|| panic!("serve announced {line:?}"))
        .to_string();
    Serve { child, addr }
}

/// Waits (up to 20 s) until `identity` is a live member of `election`
/// (namespace `default`) on `url`: a follower that has read the lease and
/// registered. `context` (the candidates' logs) goes into the failure.
pub async fn wait_until_registered(
    url: &str,
    election: &str,
    identity: &str,
    context: impl Fn() -> String,
) {
    use tenure::store::LeaseStoreExt;
    let store = tenure::store::connect(url, &tenure::store::StoreOptions::default())
        .await
        .unwrap();
    let key = tenure::store::ElectionKey::new("default", election);
    let start = Instant::now();
    loop {
        let members = store.members(&key).await.unwrap_or_default();
        if members.iter().any(|m| m.identity == identity && m.live) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{identity} never registered:\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `cond` every millisecond until it holds or `within` passes.
pub async fn wait_until<T>(what: &str, within: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The "start TERM PID" lines that jobs append to an events file.
pub fn starts(events: &Path) -> Vec<(u64, i32)> {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            (p.next()? == "start").then_some(())?;
            Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?))
        })
        .collect()
}

/// The resident memory of process `pid`, in KiB, from `/proc`.
pub fn rss_kb(pid: u32) -> u64 {
    tenure_testsupport::process::rss_kb(pid).expect("VmRSS")
}

#[allow(unused_imports)] // not every test binary watches a process
pub use tenure_testsupport::process::alive;

#[allow(unused_imports)] // not every test binary cuts a network
pub use tenure_testsupport::proxy::Proxy;

/// The shared PostgreSQL behind a proxy of its own: the direct URL, the
/// proxy, and the URL through the proxy, with `password` set where given.
/// `None`, with the reason printed, where the server is missing and CI does
/// not require it.
pub async fn postgres_behind_a_proxy(password: Option<&str>) -> Option<(String, Proxy, String)> {
    use tenure_testsupport::servers;
    let url = servers::postgres_url();
    servers::connect_or_skip(&url, &Default::default()).await?;
    let (proxy, via) = Proxy::in_front_of(&url).await.expect("start the proxy");
    let Some(password) = password else {
        return Some((url, proxy, via));
    };
    let mut via = url::Url::parse(&via).expect("url");
    via.set_password(Some(password)).expect("password");
    Some((url, proxy, via.to_string()))
}

/// Creates the tables under `prefix` in the database at `url` (`tenure
/// migrate`, run in `dir`), and drops them again when the returned guard goes.
pub fn migrated_tables(dir: &Path, url: &str, prefix: &str) -> DropTables {
    let tables = DropTables {
        url: url.to_string(),
        prefix: prefix.to_string(),
    };
    let o = tenure(dir, &["migrate", "--store", url, "--table-prefix", prefix]);
    assert!(o.status.success(), "{}", text(&o));
    tables
}

/// Drops this run's tables from the shared database when the test ends,
/// passing or not (best effort; its own runtime, as Drop cannot await).
pub struct DropTables {
    pub url: String,
    pub prefix: String,
}

impl Drop for DropTables {
    fn drop(&mut self) {
        let (url, prefix) = (self.url.clone(), self.prefix.clone());
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                use sqlx::Connection;
                // sqlx's Any drivers are installed: `connect_or_skip` connected first.
                if let Ok(mut c) = sqlx::AnyConnection::connect(&url).await {
                    for t in ["leases", "members", "history", "schema"] {
                        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {prefix}{t}"))
                            .execute(&mut c)
                            .await;
                    }
                    let _ = c.close().await;
                }
            });
        })
        .join();
    }
}

fn etcd() -> Option<&'static tenure_testsupport::EtcdCluster> {
    static ETCD: std::sync::OnceLock<Option<tenure_testsupport::EtcdCluster>> =
        std::sync::OnceLock::new();
    ETCD.get_or_init(|| {
        tenure_testsupport::EtcdCluster::start_or_skip(1, tenure_testsupport::servers::required())
    })
    .as_ref()
}

fn zk() -> Option<&'static tenure_testsupport::ZkEnsemble> {
    static ZK: std::sync::OnceLock<Option<tenure_testsupport::ZkEnsemble>> =
        std::sync::OnceLock::new();
    ZK.get_or_init(|| {
        tenure_testsupport::ZkEnsemble::start_or_skip(1, tenure_testsupport::servers::required())
    })
    .as_ref()
}

/// A private PgBouncer in transaction mode in front of the shared
/// PostgreSQL, one per test binary.
pub fn pgbouncer() -> Option<&'static tenure_testsupport::PgBouncer> {
    static BOUNCER: std::sync::OnceLock<Option<tenure_testsupport::PgBouncer>> =
        std::sync::OnceLock::new();
    BOUNCER
        .get_or_init(|| {
            tenure_testsupport::PgBouncer::start_or_skip(
                &tenure_testsupport::servers::postgres_url(),
                10,
            )
        })
        .as_ref()
}

/// The URL of `store` (sqlite, mariadb, postgres, pgbouncer, redis, etcd,
/// zookeeper) to test on: a file in `dir`, the shared servers, PostgreSQL
/// through a private PgBouncer, or a private etcd or ZooKeeper for this
/// test binary. `None`, with the reason printed, where
/// the server is missing and CI does not require it.
pub async fn store_url(store: &str, dir: &Path) -> Option<String> {
    use tenure_testsupport::servers;
    let url = match store {
        "sqlite" => format!("sqlite://{}", dir.join("tenure.db").display()),
        "mariadb" => servers::mysql_url(),
        "postgres" => servers::postgres_url(),
        "pgbouncer" => pgbouncer()?.url(),
        "redis" => servers::redis_url(),
        "etcd" => etcd()?.url(),
        "zookeeper" => zk()?.url(),
        other => panic!("unknown store {other}"),
    };
    servers::connect_or_skip(&url, &tenure::store::StoreOptions::default())
        .await
        .map(|_| url)
}

/// A SQLite store URL for the file `t.db` in `dir`.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("t.db").display())
}

/// The process id a job wrote to the file `path`, once it is there.
pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The parent of `pid`, from `/proc` (for a job: its guard; for a guard: its `tenure run`).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A number that differs between runs and processes, for names of elections
/// on the shared servers.
pub fn rand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id()
}
