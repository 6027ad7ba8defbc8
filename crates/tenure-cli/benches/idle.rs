//! What idle candidates cost the store, counted by the store server itself.
//!
//! Scenario A: `tenure run --ttl T -- sleep` processes in one election, left
//! idle for `--secs`: A1 is a leader alone, A3 a leader and two followers, so
//! one follower costs (A3 - A1) / 2. Scenario B: this process runs N electors
//! of distinct elections on one store connection, all leading (nobody
//! competes): N = 1 against N = `--elections`. B always uses this tree's
//! library, also when `--bin` points scenario A at another build.
//! Scenario W: `tenure watch` processes (of the `--bin` build) of one
//! election: W1 one watcher of an election nobody holds, W3 three; WH a
//! `tenure run` leader and one watcher, so a watcher of a held election
//! costs WH - A1.
//!
//! Counters, each server's own; the cost of the benchmark's own sampling is
//! measured first (two samples back to back) and subtracted:
//! - MariaDB/MySQL: `Questions` of SHOW GLOBAL STATUS (client statements);
//!   Com_select and Com_update alongside.
//! - PostgreSQL: xact_commit + xact_rollback of pg_stat_database for the URL's
//!   database (a statement outside a transaction is one). A backend reports its
//!   counts when it goes idle, at most once a second, a remainder within 10 s
//!   (PostgreSQL 15+), so every sample first waits 1.1 s; a window's edges can
//!   still be off by a few transactions.
//! - Redis: client requests seen by a MONITOR connection (commands that Lua
//!   scripts run are not requests), and total_commands_processed of INFO
//!   stats (which counts them) alongside.
//! - etcd (a private single node): grpc_server_msg_received_total of /metrics
//!   summed (every request message, each lease keep-alive on its stream too);
//!   grpc_server_handled_total (finished RPCs) alongside, and the messages
//!   of the methods tenure sends (Txn, Range, LeaseKeepAlive,
//!   LeaseTimeToLive, LeaseGrant, Watch).
//!
//! SQLite has no server to count: skipped. The counters are server-wide
//! (PostgreSQL's per database): anything else using the servers during a run
//! inflates the figures; the "background" column measures that before scenario A.
//!
//! Run: `cargo bench -p tenure-cli --bench idle -- [--secs 30] [--ttl 10s]
//! [--elections 1000] [--only a|b|w (comma-separated)] [--bin PATH] [--store URL|etcd]...`
//! Without --store: the local MariaDB, PostgreSQL and Redis, and a private
//! single-node etcd if the `etcd` binary is installed.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::{Connection, Row};
use tenure::store::{redact_url, DynStore, ElectionKey, LeaseStoreExt, StoreOptions};
use tenure::Elector;

const NAMESPACE: &str = "idle-bench";
/// After everyone is in place, before counting: two TTLs, so the warm-up is
/// over (first reads and heartbeats, and PostgreSQL's prepare of each
/// statement on each pooled connection: a fresh `tenure run` leader made 1.47
/// transactions/s in its first 30 s and 0.50/s after its first minute, the
/// statements logged by the server being 0.53/s and 0.50/s).
fn settle(o: &Opts) -> Duration {
    (o.ttl * 2).max(Duration::from_secs(3))
}

struct Opts {
    secs: u64,
    ttl: Duration,
    elections: usize,
    only: Option<String>,
    bin: String,
    stores: Vec<String>,
}

fn parse() -> Opts {
    let mut o = Opts {
        secs: 30,
        ttl: Duration::from_secs(10),
        elections: 1000,
        only: None,
        bin: env!("CARGO_BIN_EXE_tenure").to_string(),
        stores: vec![],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--secs" => o.secs = args.next().and_then(|v| v.parse().ok()).unwrap_or(o.secs),
            "--ttl" => {
                o.ttl = args
                    .next()
                    .and_then(|v| humantime::parse_duration(&v).ok())
                    .unwrap_or(o.ttl)
            }
            "--elections" => {
                o.elections = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(o.elections)
            }
            "--only" => o.only = args.next(),
            "--bin" => o.bin = args.next().unwrap_or(o.bin),
            "--store" => o.stores.extend(args.next()),
            _ => {} // cargo bench passes --bench
        }
    }
    o
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// One reading: the main counter first, then the ones shown alongside.
type Reading = Vec<(&'static str, f64)>;

/// A connection that reads one server's request counters.
enum Counter {
    Mysql(sqlx::MySqlConnection),
    Postgres(sqlx::PgConnection),
    /// INFO's connection, and the count of client requests seen by MONITOR.
    Redis(TcpStream, Arc<AtomicU64>),
    Etcd(String),
}

/// Counts the requests clients send, from a MONITOR stream: Redis's
/// `total_commands_processed` also counts every command a Lua script runs
/// (a renewal is one EVALSHA and two or three commands inside it), which is
/// work on the server but not a request.
fn monitor_redis(addr: &str) -> Result<Arc<AtomicU64>, String> {
    let mut s = TcpStream::connect(addr).map_err(err)?;
    s.write_all(b"*1\r\n$7\r\nMONITOR\r\n").map_err(err)?;
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            // `+<time> [<db> <client>] "CMD" ...`; script commands say `lua]`.
            if line.contains("] \"") && !line.contains(" lua]") {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    Ok(count)
}

impl Counter {
    async fn open(url: &str) -> Result<Self, String> {
        let host = |rest: &str| {
            let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
            let host = hosts.rsplit('@').next().unwrap_or(hosts);
            host.split(',').next().unwrap_or(host).to_string()
        };
        if url.starts_with("mysql:") || url.starts_with("mariadb:") {
            let url = url.replacen("mariadb:", "mysql:", 1);
            let c = sqlx::MySqlConnection::connect(&url).await;
            c.map(Self::Mysql).map_err(err)
        } else if url.starts_with("postgres") {
            let c = sqlx::PgConnection::connect(url).await;
            c.map(Self::Postgres).map_err(err)
        } else if let Some(rest) = url.strip_prefix("redis://") {
            let s = TcpStream::connect(host(rest)).map_err(err)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .map_err(err)?;
            Ok(Self::Redis(s, monitor_redis(&host(rest))?))
        } else if let Some(rest) = url.strip_prefix("etcd://") {
            Ok(Self::Etcd(host(rest)))
        } else {
            Err("no server counters for this store".into())
        }
    }

    async fn sample(&mut self) -> Result<Reading, String> {
        match self {
            Self::Mysql(c) => {
                let sql = "SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_select', 'Com_update')";
                let rows = sqlx::raw_sql(sql).fetch_all(c).await.map_err(err)?;
                let mut r = vec![("Questions", 0.0), ("Com_select", 0.0), ("Com_update", 0.0)];
                for row in rows {
                    let name: String = row.try_get(0).map_err(err)?;
                    let value: String = row.try_get(1).map_err(err)?;
                    for (n, v) in r.iter_mut() {
                        if n.eq_ignore_ascii_case(&name) {
                            *v = value.parse().map_err(err)?;
                        }
                    }
                }
                Ok(r)
            }
            Self::Postgres(c) => {
                let sql = "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database WHERE datname = current_database()";
                let row = sqlx::raw_sql(sql).fetch_one(c).await.map_err(err)?;
                Ok(vec![("xacts", row.try_get(0).map_err(err)?)])
            }
            Self::Redis(s, requests) => {
                s.write_all(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
                    .map_err(err)?;
                let text = read_bulk(s)?;
                let v = field(&text, "total_commands_processed:")?;
                Ok(vec![
                    ("requests", requests.load(Ordering::Relaxed) as f64),
                    ("commands", v),
                ])
            }
            Self::Etcd(addr) => {
                let mut s = TcpStream::connect(&*addr).map_err(err)?;
                s.set_read_timeout(Some(Duration::from_secs(5)))
                    .map_err(err)?;
                s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .map_err(err)?;
                let mut text = String::new();
                s.read_to_string(&mut text).map_err(err)?;
                use tenure_testsupport::etcd::sum_counter;
                let sum = |metric: &str| sum_counter(&text, metric, None);
                // Per method too: what an idle candidate sends, by kind.
                let method =
                    |m: &str| sum_counter(&text, "grpc_server_msg_received_total", Some(m));
                Ok(vec![
                    ("msg_received", sum("grpc_server_msg_received_total")),
                    ("handled", sum("grpc_server_handled_total")),
                    ("Txn", method("Txn")),
                    ("Range", method("Range")),
                    ("LeaseKeepAlive", method("LeaseKeepAlive")),
                    ("LeaseTimeToLive", method("LeaseTimeToLive")),
                    ("LeaseGrant", method("LeaseGrant")),
                    ("Watch", method("Watch")),
                ])
            }
        }
    }
}

/// A RESP bulk string: `$len\r\n` then len bytes and `\r\n`.
fn read_bulk(s: &mut TcpStream) -> Result<String, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).map_err(err)?;
        if n == 0 {
            return Err("redis closed the connection".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..eol]).to_string();
        let len: usize = head
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| format!("unexpected redis reply {head:?}"))?;
        if buf.len() >= eol + 2 + len + 2 {
            return Ok(String::from_utf8_lossy(&buf[eol + 2..eol + 2 + len]).to_string());
        }
    }
}

fn field(text: &str, name: &str) -> Result<f64, String> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .ok_or_else(|| format!("no {name} in INFO stats"))
}

/// Rates of one server's counters, its own sampling subtracted.
struct Meter {
    counter: Counter,
    /// Wait before each sample (PostgreSQL's reporting delay).
    pause: Duration,
    /// What one sample adds to the next one's counts.
    own: Vec<f64>,
}

impl Meter {
    async fn new(url: &str) -> Result<Self, String> {
        let counter = Counter::open(url).await?;
        let pause = if matches!(counter, Counter::Postgres(_)) {
            Duration::from_millis(1100)
        } else {
            Duration::ZERO
        };
        let mut m = Self {
            counter,
            pause,
            own: vec![],
        };
        // The least of three back-to-back deltas: others' traffic only adds.
        let mut prev = m.read().await?;
        for _ in 0..3 {
            let next = m.read().await?;
            let d: Vec<f64> = next.iter().zip(&prev).map(|(b, a)| b.1 - a.1).collect();
            m.own = if m.own.is_empty() {
                d
            } else {
                m.own.iter().zip(d).map(|(x, y)| x.min(y)).collect()
            };
            prev = next;
        }
        Ok(m)
    }

    async fn read(&mut self) -> Result<Reading, String> {
        tokio::time::sleep(self.pause).await;
        self.counter.sample().await
    }

    /// Requests per second over `secs` from now.
    async fn rate(&mut self, secs: u64) -> Result<Reading, String> {
        let a = self.read().await?;
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let b = self.read().await?;
        let t = start.elapsed().as_secs_f64();
        let own = self.own.iter().chain(std::iter::repeat(&0.0));
        Ok(b.iter()
            .zip(&a)
            .zip(own)
            .map(|((b, a), o)| (b.0, (b.1 - a.1 - o) / t))
            .collect())
    }
}

fn spawn(o: &Opts, url: &str, key: &ElectionKey, i: usize, dir: &std::path::Path) -> Child {
    let ttl = humantime::format_duration(o.ttl).to_string();
    Command::new(&o.bin)
        .args(["run", "--store", url, "--namespace", &key.namespace])
        .args([
            "--election",
            &key.election,
            "--ttl",
            &ttl,
            "--id",
            &format!("c{i}"),
        ])
        .args(["--", "sleep", "100000"])
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("c{i}.log"))).expect("candidate log file"))
        .spawn()
        .expect("spawn the tenure binary")
}

/// Scenario A with `n` candidates: their rate, or why there is none.
async fn scenario_a(
    o: &Opts,
    url: &str,
    store: &DynStore,
    m: &mut Meter,
    n: usize,
) -> Result<Reading, String> {
    let key = ElectionKey::new(NAMESPACE, format!("a{n}-{}", now_us()));
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut procs: Vec<Child> = (0..n).map(|i| spawn(o, url, &key, i, dir.path())).collect();
    let start = Instant::now();
    let mut term = None;
    while term.is_none() && start.elapsed() < o.ttl * 3 + Duration::from_secs(20) {
        let lease = store
            .read(&key)
            .await
            .ok()
            .flatten()
            .filter(|r| r.is_held());
        let members = store.members(&key).await.map_or(n, |v| v.len());
        term = lease.filter(|_| members >= n).map(|r| r.term);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let result = match term {
        None => Err("no leader with all members in time".to_string()),
        Some(term) => {
            tokio::time::sleep(settle(o)).await;
            let r = m.rate(o.secs).await;
            let now = store.read(&key).await.ok().flatten().map(|r| r.term);
            let alive = procs.iter_mut().all(|p| matches!(p.try_wait(), Ok(None)));
            match (r, now == Some(term) && alive) {
                (Ok(r), true) => Ok(r),
                (Ok(_), false) => Err("leadership changed or a candidate exited".into()),
                (Err(e), _) => Err(e),
            }
        }
    };
    for p in &mut procs {
        // SAFETY: plain kill(2) on a child we started.
        unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
        let _ = p.wait();
    }
    if result.is_err() {
        let log = std::fs::read_to_string(dir.path().join("c0.log")).unwrap_or_default();
        eprintln!("  candidate c0's log:\n{log}");
    }
    result
}

fn spawn_watcher(o: &Opts, url: &str, key: &ElectionKey, i: usize, dir: &std::path::Path) -> Child {
    Command::new(&o.bin)
        .args(["watch", "--store", url, "--namespace", &key.namespace])
        .args(["--election", &key.election])
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("w{i}.log"))).expect("watcher log file"))
        .spawn()
        .expect("spawn the tenure binary")
}

/// Scenario W: `n` watchers of one election, led by a `tenure run` leader
/// if `held`, else nobody's.
async fn scenario_w(
    o: &Opts,
    url: &str,
    store: &DynStore,
    m: &mut Meter,
    n: usize,
    held: bool,
) -> Result<Reading, String> {
    let key = ElectionKey::new(NAMESPACE, format!("w{n}-{held}-{}", now_us()));
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut procs: Vec<Child> = vec![];
    let mut term = None;
    if held {
        procs.push(spawn(o, url, &key, 0, dir.path()));
        let start = Instant::now();
        while term.is_none() && start.elapsed() < o.ttl * 3 + Duration::from_secs(20) {
            term = store
                .read(&key)
                .await
                .ok()
                .flatten()
                .filter(|r| r.is_held())
                .map(|r| r.term);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let result = if held && term.is_none() {
        Err("no leader in time".to_string())
    } else {
        procs.extend((0..n).map(|i| spawn_watcher(o, url, &key, i, dir.path())));
        tokio::time::sleep(settle(o)).await;
        let r = m.rate(o.secs).await;
        let now = store
            .read(&key)
            .await
            .ok()
            .flatten()
            .filter(|r| r.is_held());
        let alive = procs.iter_mut().all(|p| matches!(p.try_wait(), Ok(None)));
        match (r, now.map(|r| r.term) == term && alive) {
            (Ok(r), true) => Ok(r),
            (Ok(_), false) => Err("the election changed or a process exited".into()),
            (Err(e), _) => Err(e),
        }
    };
    for p in &mut procs {
        // SAFETY: plain kill(2) on a child we started.
        unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
        let _ = p.wait();
    }
    result
}

/// Scenario B: `n` electors of distinct elections in this process.
async fn scenario_b(o: &Opts, url: &str, m: &mut Meter, n: usize) -> Result<Reading, String> {
    let store = tenure::store::connect(url, &StoreOptions::default())
        .await
        .map_err(err)?;
    let prefix = format!("b{n}-{}", now_us());
    let mut electors = Vec::new();
    for i in 0..n {
        let e = Elector::builder(store.clone())
            .namespace(NAMESPACE)
            .election(format!("{prefix}-{i}"))
            .identity("idle-bench")
            .ttl(o.ttl)
            .build();
        electors.push(e.map_err(err)?);
    }
    let start = Instant::now();
    let limit = o.ttl * 3 + Duration::from_secs(60);
    while !electors.iter().all(|e| e.is_leader()) && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let leading = electors.iter().filter(|e| e.is_leader()).count();
    eprintln!(
        "  N={n}: {leading} leading after {:.1} s",
        start.elapsed().as_secs_f64()
    );
    let result = if leading < n {
        Err(format!("only {leading} of {n} electors lead"))
    } else {
        tokio::time::sleep(settle(o)).await;
        let r = m.rate(o.secs).await;
        match electors.iter().filter(|e| e.is_leader()).count() {
            l if l == n => r,
            l => Err(format!("only {l} of {n} still lead after the window")),
        }
    };
    let mut tasks = tokio::task::JoinSet::new();
    for e in electors {
        tasks.spawn(async move { e.shutdown().await });
    }
    while tasks.join_next().await.is_some() {}
    result
}

fn cell(r: &Result<Reading, String>, div: f64) -> String {
    match r {
        Ok(v) => format!("{:.2}", v[0].1 / div),
        Err(_) => "-".into(),
    }
}

/// The counters shown alongside, as `name a|b|...` for the given readings.
fn detail(rs: &[&Result<Reading, String>]) -> String {
    let Some(Ok(first)) = rs.iter().find(|r| r.is_ok()) else {
        return rs
            .iter()
            .filter_map(|r| r.as_ref().err())
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
    };
    let mut out = vec![];
    for (i, (name, _)) in first.iter().enumerate().skip(1) {
        let vals: Vec<String> = rs
            .iter()
            .map(|r| r.as_ref().map_or("-".into(), |v| format!("{:.2}", v[i].1)))
            .collect();
        out.push(format!("{name} {}", vals.join("|")));
    }
    for e in rs.iter().filter_map(|r| r.as_ref().err()) {
        out.push(format!("error: {e}"));
    }
    out.join("  ")
}

#[tokio::main]
async fn main() {
    let o = parse();
    let cmd: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    println!(
        "$ cargo bench -p tenure-cli --bench idle -- {}",
        cmd.join(" ")
    );
    println!(
        "settings: --secs {} --ttl {} --elections {} --only {} ; scenario A binary: {} ; scenario B: this tree's library",
        o.secs,
        humantime::format_duration(o.ttl),
        o.elections,
        o.only.as_deref().unwrap_or("a,b,w"),
        o.bin
    );
    println!("requests/s by the servers' own counters, the benchmark's sampling subtracted; the counters are server-wide, so other users of the servers during the run inflate them");
    let mut stores = if o.stores.is_empty() {
        vec![
            tenure_testsupport::servers::mysql_url(),
            tenure_testsupport::servers::postgres_url(),
            tenure_testsupport::servers::redis_url(),
            "etcd".into(),
        ]
    } else {
        o.stores.clone()
    };
    let mut etcd = None;
    for url in stores.iter_mut().filter(|u| u.as_str() == "etcd") {
        if tenure_testsupport::etcd::binary().is_none() {
            println!("etcd: skipped (no etcd binary)");
            continue;
        }
        let c = etcd.get_or_insert_with(|| {
            tenure_testsupport::EtcdCluster::start(1).expect("a private etcd")
        });
        *url = c.url();
    }
    stores.retain(|u| u != "etcd");
    let runs = |s: &str| {
        o.only
            .as_deref()
            .is_none_or(|x| x.split(',').any(|y| y == s))
    };
    let (run_a, run_b, run_w) = (runs("a"), runs("b"), runs("w"));
    let mut rows_a = vec![];
    let mut rows_b = vec![];
    let mut rows_w = vec![];
    for url in &stores {
        let name = redact_url(url);
        let store = tenure::store::connect(url, &StoreOptions::default()).await;
        let (store, mut m) = match (store.map_err(err), Meter::new(url).await) {
            (Ok(s), Ok(m)) => (s, m),
            (Err(e), _) | (_, Err(e)) => {
                println!("{name}: skipped ({e})");
                continue;
            }
        };
        let counter = m.counter.sample().await.map_or("?", |r| r[0].0);
        eprintln!("{name}: one sample costs {:?}", m.own);
        if run_a {
            let bg = m.rate(o.secs.min(10)).await;
            eprintln!("{name}: A1");
            let a1 = scenario_a(&o, url, &store, &mut m, 1).await;
            eprintln!("{name}: A3");
            let a3 = scenario_a(&o, url, &store, &mut m, 3).await;
            let follower = match (&a1, &a3) {
                (Ok(x), Ok(y)) => format!("{:.2}", (y[0].1 - x[0].1) / 2.0),
                _ => "-".into(),
            };
            rows_a.push(format!(
                "{name:<40} {counter:<12} {:>10} {:>10} {:>10} {:>10} {follower:>10}  {}",
                cell(&bg, 1.0),
                cell(&a1, 1.0),
                cell(&a3, 1.0),
                cell(&a3, 3.0),
                detail(&[&bg, &a1, &a3])
            ));
        }
        if run_w {
            let bg = m.rate(o.secs.min(10)).await;
            eprintln!("{name}: W1");
            let w1 = scenario_w(&o, url, &store, &mut m, 1, false).await;
            eprintln!("{name}: W3");
            let w3 = scenario_w(&o, url, &store, &mut m, 3, false).await;
            eprintln!("{name}: A1");
            let a1 = scenario_a(&o, url, &store, &mut m, 1).await;
            eprintln!("{name}: WH");
            let wh = scenario_w(&o, url, &store, &mut m, 1, true).await;
            let minus = |x: &Result<Reading, String>, y: &Result<Reading, String>| match (x, y) {
                (Ok(x), Ok(y)) => format!("{:.2}", x[0].1 - y[0].1),
                _ => "-".into(),
            };
            rows_w.push(format!(
                "{name:<40} {counter:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  {}",
                cell(&bg, 1.0),
                cell(&w1, 1.0),
                cell(&w3, 1.0),
                cell(&a1, 1.0),
                cell(&wh, 1.0),
                minus(&wh, &a1),
                detail(&[&bg, &w1, &w3, &a1, &wh])
            ));
        }
        if run_b {
            eprintln!("{name}: B N=1");
            let b1 = scenario_b(&o, url, &mut m, 1).await;
            eprintln!("{name}: B N={}", o.elections);
            let bn = scenario_b(&o, url, &mut m, o.elections).await;
            let ratio = match (&b1, &bn) {
                (Ok(x), Ok(y)) if x[0].1 > 0.0 => format!("{:.0}", y[0].1 / x[0].1),
                _ => "-".into(),
            };
            rows_b.push(format!(
                "{name:<40} {counter:<12} {:>10} {:>10} {:>12} {ratio:>7}  {}",
                cell(&b1, 1.0),
                cell(&bn, 1.0),
                cell(&bn, o.elections as f64),
                detail(&[&b1, &bn])
            ));
        }
    }
    if run_a {
        println!("\nScenario A: `tenure run --ttl {}` candidates of one election, idle {} s (requests/s)", humantime::format_duration(o.ttl), o.secs);
        println!(
            "{:<40} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10}  detail (background|A1|A3)",
            "store", "counter", "background", "A1 leader", "A3 total", "A3 /cand", "follower"
        );
        rows_a.iter().for_each(|r| println!("{r}"));
        println!("background: no candidates; A1: a leader alone; A3: a leader and two followers; follower = (A3 - A1) / 2");
    }
    if run_w {
        println!(
            "\nScenario W: `tenure watch` processes of one election, idle {} s (requests/s)",
            o.secs
        );
        println!(
            "{:<40} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}  detail (background|W1|W3|A1|WH)",
            "store", "counter", "background", "W1 free", "W3 free", "A1 leader", "WH", "held watcher"
        );
        rows_w.iter().for_each(|r| println!("{r}"));
        println!("W1/W3: one/three watchers of an election nobody holds (the background included); WH: a `tenure run --ttl {}` leader and one watcher; held watcher = WH - A1", humantime::format_duration(o.ttl));
    }
    if run_b {
        println!("\nScenario B: one process, N electors of distinct elections, all leading, idle {} s (requests/s)", o.secs);
        println!(
            "{:<40} {:<12} {:>10} {:>10} {:>12} {:>7}  detail (N=1|N={})",
            "store",
            "counter",
            "N=1",
            format!("N={}", o.elections),
            "per election",
            "ratio",
            o.elections
        );
        rows_b.iter().for_each(|r| println!("{r}"));
    }
}
