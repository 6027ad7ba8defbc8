//! What a fleet of idle replicas costs the store server: N `tenure run --ttl
//! T -- sleep` processes of one election, per store and per N.
//!
//! For each N (`--n 10,100,200`): start the replicas, wait until one leads
//! and two TTLs more, then for `--secs`:
//! - connections held: TCP connections from the replicas' processes to the
//!   server's port (`ss -tnp`), sampled every 100 ms; peak and mean;
//! - new connections per second, counted by the server (PostgreSQL
//!   `pg_stat_database.sessions`, MariaDB `Connections`, Redis
//!   `total_connections_received`; server-wide), or for etcd and ZooKeeper,
//!   which keep their sessions, the new client ports seen by `ss` (a lower
//!   bound: a connection opened and closed between two samples is missed);
//! - requests per second, counted by the server (PostgreSQL transactions of
//!   the database, MariaDB `Questions`, Redis `total_commands_processed`,
//!   etcd `grpc_server_msg_received_total`, ZooKeeper `zk_packets_received`;
//!   server-wide), per replica, and apart for the leader and a follower:
//!   before the fleets, one replica alone (N = 1, a leader with no
//!   followers) is measured over the same window, and a follower's figure
//!   is what N replicas cost beyond that leader, over N − 1 (the server's
//!   background and the bench's own counter reads fall out with it);
//! - RSS per replica (`/proc/PID/status`);
//! - CPU per replica: user and system time over the window
//!   (`/proc/PID/stat`), as a percentage of one core;
//!
//! then `--handovers` graceful hand-overs (SIGTERM to the leader, a new
//! replica in its place), 1.33 TTLs apart: from the signal until a read
//! shows the next leader, p50 and p99. At the end: how many replicas are
//! still alive, and how long until one job runs after the last hand-over
//! (jobs are the leaders' `sleep` children; at most two TTLs; the most seen
//! at once if that is not one).
//!
//! Run: `cargo bench -p tenure-cli --bench fleet -- [--n 10,100,200]
//! [--secs 20] [--ttl 10s] [--handovers 5] [--bin PATH] [--store URL]...
//! [--pgbouncer N] [--etcd] [--zookeeper] [--private-postgres]` (default
//! stores: the local PostgreSQL and MariaDB). `--etcd` and `--zookeeper`
//! add a private one-member etcd or one-server ZooKeeper (Debian's
//! `etcd-server`, `zookeeper`; ZooKeeper with `maxClientCnxns=0`, as every
//! replica here comes from one address). `--private-postgres` adds a private
//! PostgreSQL with the default `max_connections` (100) and
//! `pg_stat_statements` loaded, which counts the statements executed apart
//! from connection set-up and prepares. `--logs DIR` keeps each run's
//! replica logs (`DIR/fleet-*/r<i>.log`, a respawned replica appending to
//! its predecessor's), at the level `TENURE_FLEET_LOG` names (a
//! `TENURE_LOG` filter; default `warn`; `tenure=debug` shows each
//! follower's reads and its successor).
//! `--pgbouncer N` adds the local PostgreSQL through a private PgBouncer in
//! transaction mode pooling N server connections (Debian's `pgbouncer`),
//! without and with `push_url` (LISTEN on a direct connection): connections
//! held are the replicas' to the pooler and, with `push_url`, to PostgreSQL
//! directly; the server counters are those of PostgreSQL behind it. `--bin` runs another
//! build of `tenure`, for a side-by-side comparison. Raise the open-files
//! limit for N in the hundreds.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::{Connection, Row};
use tenure::store::{redact_url, DynStore, ElectionKey, LeaseRecord, StoreOptions};

struct Opts {
    ns: Vec<usize>,
    secs: u64,
    ttl: Duration,
    handovers: usize,
    bin: String,
    stores: Vec<String>,
    /// Server connections of a private PgBouncer to run through.
    pgbouncer: Option<u32>,
    /// Whether to add a private etcd.
    etcd: bool,
    /// Whether to add a private ZooKeeper.
    zookeeper: bool,
    /// Whether to add a private PostgreSQL that counts statements.
    private_postgres: bool,
    /// Where to keep the replicas' logs (`r<i>.log`, warnings and errors).
    logs: Option<String>,
}

fn parse() -> Opts {
    let mut o = Opts {
        ns: vec![10, 100, 200],
        secs: 20,
        ttl: Duration::from_secs(10),
        handovers: 5,
        bin: env!("CARGO_BIN_EXE_tenure").to_string(),
        stores: vec![],
        pgbouncer: None,
        etcd: false,
        zookeeper: false,
        private_postgres: false,
        logs: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--n" => {
                o.ns = value()
                    .split(',')
                    .map(|n| n.parse().expect("--n: numbers, comma-separated"))
                    .collect()
            }
            "--secs" => o.secs = value().parse().expect("--secs"),
            "--ttl" => o.ttl = humantime::parse_duration(&value()).expect("--ttl"),
            "--handovers" => o.handovers = value().parse().expect("--handovers"),
            "--bin" => o.bin = value(),
            "--store" => o.stores.push(value()),
            "--pgbouncer" => o.pgbouncer = Some(value().parse().expect("--pgbouncer")),
            "--etcd" => o.etcd = true,
            "--zookeeper" => o.zookeeper = true,
            "--private-postgres" => o.private_postgres = true,
            "--logs" => o.logs = Some(value()),
            // cargo bench passes --bench.
            _ => {}
        }
    }
    if o.stores.is_empty()
        && o.pgbouncer.is_none()
        && !o.etcd
        && !o.zookeeper
        && !o.private_postgres
    {
        o.stores = vec![
            LOCAL_POSTGRES.into(),
            "mysql://root@127.0.0.1:3306/test".into(),
        ];
    }
    o
}

/// The local PostgreSQL, and what a private PgBouncer stands in front of.
const LOCAL_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/test";

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The server's port in `url`.
fn port_of(url: &str) -> u16 {
    let default = match url.split(':').next() {
        Some("postgres" | "postgresql") => 5432,
        Some("mysql" | "mariadb") => 3306,
        Some("redis") => 6379,
        Some("zookeeper" | "zk") => 2181,
        _ => 2379,
    };
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('@')
        .next_back()
        .and_then(|rest| rest.split(['/', '?']).next())
        .and_then(|host| host.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(default)
}

/// What one idle window cost the server, per second, server-wide.
#[derive(Clone, Copy)]
struct Rates {
    requests: f64,
    statements: f64,
}

impl Rates {
    /// What each of the `n - 1` followers costs, beyond the leader alone.
    fn per_follower(self, alone: Rates, n: usize) -> Rates {
        let followers = n.saturating_sub(1).max(1) as f64;
        Rates {
            requests: (self.requests - alone.requests) / followers,
            statements: (self.statements - alone.statements) / followers,
        }
    }
}

/// A rate for the table: three decimals, "n/a" where the server does not tell.
fn rate(r: f64) -> String {
    if r.is_nan() {
        "n/a".to_string()
    } else {
        format!("{r:.3}")
    }
}

/// The private servers this bench started, whose counters it reads.
#[derive(Default)]
struct Private {
    etcd: Option<tenure_testsupport::EtcdCluster>,
    zookeeper: Option<tenure_testsupport::ZkEnsemble>,
}

/// A server's own counters, server-wide.
#[derive(Clone, Copy)]
struct Counters {
    /// What the server counts as requests (see the module docs).
    requests: f64,
    /// Connections opened; NaN where the server does not tell.
    opened: f64,
    /// Statements executed, without connection set-up or prepares:
    /// PostgreSQL `pg_stat_statements` calls where the extension is loaded
    /// (NaN otherwise), MariaDB `Com_stmt_execute`; the requests elsewhere.
    statements: f64,
}

/// The server's own counters, where it tells them.
async fn counters(url: &str, private: &Private) -> Option<Counters> {
    if url.starts_with("postgres") {
        // Through a pooler: PostgreSQL's own counters, behind it.
        let url = if url.contains("pooler=transaction") {
            LOCAL_POSTGRES
        } else {
            url
        };
        let mut c = sqlx::PgConnection::connect(url).await.ok()?;
        let row = sqlx::query(
            "SELECT (xact_commit + xact_rollback)::float8, sessions::float8 \
             FROM pg_stat_database WHERE datname = current_database()",
        )
        .fetch_one(&mut c)
        .await
        .ok()?;
        // The bench's own reads of these views are not counted.
        let statements = sqlx::query(
            "SELECT coalesce(sum(calls), 0)::float8 FROM pg_stat_statements \
             WHERE query NOT ILIKE '%pg_stat%'",
        )
        .fetch_one(&mut c)
        .await
        .map_or(f64::NAN, |r| r.get(0));
        let _ = c.close().await;
        return Some(Counters {
            requests: row.get(0),
            opened: row.get(1),
            statements,
        });
    }
    if url.starts_with("mysql") || url.starts_with("mariadb") {
        let url = url.replacen("mariadb:", "mysql:", 1);
        let mut c = sqlx::MySqlConnection::connect(&url).await.ok()?;
        let mut get = async |name: &str| -> Option<f64> {
            let row = sqlx::query(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
                .fetch_one(&mut c)
                .await
                .ok()?;
            row.get::<String, _>(1).parse().ok()
        };
        let counters = Counters {
            requests: get("Questions").await?,
            opened: get("Connections").await?,
            statements: get("Com_stmt_execute").await?,
        };
        let _ = c.close().await;
        return Some(counters);
    }
    if url.starts_with("redis") {
        let out = Command::new("redis-cli")
            .args(["-u", url, "INFO", "stats"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))?
                .trim()
                .parse()
                .ok()
        };
        let requests = field("total_commands_processed")?;
        return Some(Counters {
            requests,
            opened: field("total_connections_received")?,
            statements: requests,
        });
    }
    if url.starts_with("etcd") {
        let metrics = private.etcd.as_ref()?.metrics_addr(0).parse().ok()?;
        let (_, text) = tenure_testsupport::http::try_get(metrics, "/metrics").await?;
        let received =
            tenure_testsupport::etcd::sum_counter(&text, "grpc_server_msg_received_total", None);
        return Some(Counters {
            requests: received,
            opened: f64::NAN,
            statements: received,
        });
    }
    if url.starts_with("zookeeper") || url.starts_with("zk") {
        let text = private.zookeeper.as_ref()?.four_letters(0, "mntr").ok()?;
        let received = text
            .lines()
            .find_map(|l| l.strip_prefix("zk_packets_received"))?
            .trim()
            .parse()
            .ok()?;
        return Some(Counters {
            requests: received,
            opened: f64::NAN,
            statements: received,
        });
    }
    None
}

/// The local addresses of the established connections to `port` from
/// each of `pids`, per `ss`.
fn connections(port: u16, pids: &HashSet<u32>) -> HashSet<String> {
    let Ok(out) = Command::new("ss")
        .args(["-Htnp", "state", "established"])
        .arg(format!("( dport = :{port} )"))
        .output()
    else {
        return HashSet::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split("pid=")
                .skip(1)
                .filter_map(|p| p.split(',').next()?.parse::<u32>().ok())
                .any(|p| pids.contains(&p))
        })
        // Recv-Q Send-Q Local Peer Process
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

/// CPU time (user and system) a process has used, in seconds.
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count from after it.
    // Then field 3 (state) is index 0, utime (14) index 11, stime (15) 12.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

struct Fleet<'a> {
    o: &'a Opts,
    url: &'a str,
    key: ElectionKey,
    dir: tempfile::TempDir,
    procs: Vec<Child>,
}

impl Fleet<'_> {
    fn spawn(&self, i: usize) -> Child {
        let ttl = humantime::format_duration(self.o.ttl).to_string();
        Command::new(&self.o.bin)
            .args(["run", "--store", self.url, "--election", &self.key.election])
            .args([
                "--ttl",
                &ttl,
                "--id",
                &format!("r{i}"),
                "--",
                "sleep",
                "100000",
            ])
            .current_dir(self.dir.path())
            .env(
                "TENURE_LOG",
                std::env::var("TENURE_FLEET_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                // Appended: a respawned replica keeps its predecessor's log.
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.path().join(format!("r{i}.log")))
                    .expect("log file"),
            )
            .spawn()
            .expect("spawn tenure")
    }

    fn pids(&self) -> HashSet<u32> {
        self.procs.iter().map(Child::id).collect()
    }

    /// The leader's index and record once a read shows a term above `above`.
    async fn leader(
        &self,
        store: &DynStore,
        above: u64,
        within: Duration,
    ) -> Option<(usize, LeaseRecord)> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(r)) = store.read(&self.key).await {
                if r.is_held() && r.term > above {
                    let idx = r
                        .holder
                        .as_deref()?
                        .strip_prefix('r')?
                        .split('#')
                        .next()?
                        .parse()
                        .ok()?;
                    return Some((idx, r));
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        None
    }

    /// Replicas alive, and `sleep` jobs running under them (a job's parent
    /// is its replica's guard process).
    fn alive_and_jobs(&mut self) -> (usize, usize) {
        let pids = self.pids();
        let parent = |pid: u32| -> Option<u32> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat.rsplit_once(") ")?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        let alive = self
            .procs
            .iter_mut()
            .filter_map(|c| c.try_wait().ok())
            .filter(Option::is_none)
            .count();
        let jobs = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // pid (comm) state ppid ...
                let Some((_, rest)) = stat.rsplit_once(") ") else {
                    return false;
                };
                let ppid = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<u32>().ok());
                stat.contains("(sleep)")
                    && ppid.is_some_and(|p| {
                        pids.contains(&p) || parent(p).is_some_and(|g| pids.contains(&g))
                    })
            })
            .count();
        (alive, jobs)
    }
}

impl Drop for Fleet<'_> {
    fn drop(&mut self) {
        for c in &mut self.procs {
            // SAFETY: kill(2) on a child this benchmark started.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.procs {
            let _ = c.wait();
        }
    }
}

/// Runs N replicas on `url` and prints their row; `alone` is what one
/// replica alone cost (the leader), to tell a follower's share. Returns the
/// idle window's server-wide rates.
async fn run(
    url: &str,
    n: usize,
    o: &Opts,
    private: &Private,
    alone: Option<Rates>,
) -> Option<Rates> {
    let store = match tenure::store::connect(url, &StoreOptions::default()).await {
        Ok(s) => s,
        Err(e) => {
            println!("{}: skipped ({e})", redact_url(url));
            return None;
        }
    };
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    let mut fleet = Fleet {
        o,
        url,
        key: ElectionKey::new("default", format!("fleet-{stamp}")),
        dir: match &o.logs {
            // Kept for reading after the run.
            Some(root) => {
                std::fs::create_dir_all(root).expect("--logs directory");
                tempfile::Builder::new()
                    .prefix("fleet-")
                    .disable_cleanup(true)
                    .tempdir_in(root)
                    .expect("log directory")
            }
            None => tempfile::tempdir().expect("tempdir"),
        },
        procs: vec![],
    };
    fleet.procs = (0..n).map(|i| fleet.spawn(i)).collect();
    let Some((_, first)) = fleet.leader(&store, 0, o.ttl * 6).await else {
        println!("{} N={n}: nobody led", redact_url(url));
        return None;
    };
    tokio::time::sleep(o.ttl * 2).await;
    // Through a pooler, the direct connections (push_url) count too.
    let mut ports = vec![port_of(url)];
    if url.contains("push_url=") {
        ports.push(port_of(LOCAL_POSTGRES));
    }
    let pids = fleet.pids();
    let before = counters(url, private).await;
    let cpu_before: f64 = pids.iter().filter_map(|p| cpu_secs(*p)).sum();
    let start = Instant::now();
    let (mut peak, mut sum, mut samples) = (0, 0, 0);
    let sample =
        || -> HashSet<String> { ports.iter().flat_map(|p| connections(*p, &pids)).collect() };
    let (mut seen, mut new_seen) = (sample(), 0usize);
    while start.elapsed() < Duration::from_secs(o.secs) {
        let now = sample();
        new_seen += now.difference(&seen).count();
        peak = peak.max(now.len());
        sum += now.len();
        samples += 1;
        seen = now;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_after: f64 = pids.iter().filter_map(|p| cpu_secs(*p)).sum();
    let cpu_pct = (cpu_after - cpu_before) / elapsed / n as f64 * 100.0;
    let after = counters(url, private).await;
    let rss: Vec<u64> = pids.iter().filter_map(|p| rss_kib(*p)).collect();
    let rss_mib = rss.iter().sum::<u64>() as f64 / rss.len().max(1) as f64 / 1024.0;
    let (rates, opened) = match (before, after) {
        (Some(b), Some(a)) => (
            Some(Rates {
                requests: (a.requests - b.requests) / elapsed,
                statements: (a.statements - b.statements) / elapsed,
            }),
            if a.opened.is_nan() {
                format!("{:.2} (ss)", new_seen as f64 / elapsed)
            } else {
                format!("{:.2}", (a.opened - b.opened) / elapsed)
            },
        ),
        _ => (None, "n/a".into()),
    };
    let per_replica = |r: Option<Rates>| -> (String, String) {
        r.map_or(("n/a".into(), "n/a".into()), |r| {
            (rate(r.requests / n as f64), rate(r.statements / n as f64))
        })
    };
    let (requests, statements) = per_replica(rates);
    // The leader alone, and a follower beyond it.
    let (leader, follower) = match (rates, alone) {
        (Some(r), _) if n == 1 => (rate(r.requests), "-".to_string()),
        (Some(r), Some(a)) => (rate(a.requests), rate(r.per_follower(a, n).requests)),
        _ => ("n/a".to_string(), "n/a".to_string()),
    };
    // Graceful hand-overs (none with no follower to take over).
    let mut took = vec![];
    let mut term = first.term - 1;
    for _ in 0..if n > 1 { o.handovers } else { 0 } {
        let Some((idx, cur)) = fleet.leader(&store, term, o.ttl * 3).await else {
            break;
        };
        // The followers see the new leader at their next read (within
        // 1.25 TTLs) and rank themselves: hand-overs as a rolling restart
        // spaces them. (Two in a row within a TTL still reach listeners:
        // the two first in line listen.)
        tokio::time::sleep(o.ttl + o.ttl / 3).await;
        let signalled = Instant::now();
        // SAFETY: kill(2) on a child this benchmark started.
        unsafe { libc::kill(fleet.procs[idx].id() as i32, libc::SIGTERM) };
        let Some((_, next)) = fleet.leader(&store, cur.term, o.ttl * 3).await else {
            break;
        };
        took.push(signalled.elapsed().as_secs_f64() * 1000.0);
        term = next.term - 1;
        let _ = fleet.procs[idx].wait();
        fleet.procs[idx] = fleet.spawn(idx);
    }
    // The last hand-over's job starts once its leader has the lease and
    // forks it: count until one job runs (or two TTLs went by), keeping
    // the most seen at once.
    let settling = Instant::now();
    let (mut alive, mut jobs) = fleet.alive_and_jobs();
    let mut most = jobs;
    while jobs != 1 && settling.elapsed() < o.ttl * 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        (alive, jobs) = fleet.alive_and_jobs();
        most = most.max(jobs);
    }
    let settled = if jobs == 1 && most <= 1 {
        format!("1 job after {:.1} s", settling.elapsed().as_secs_f64())
    } else {
        format!(
            "{jobs} job(s) after {:.1} s, at most {most} at once",
            settling.elapsed().as_secs_f64()
        )
    };
    let handover = if took.is_empty() {
        "n/a".to_string()
    } else {
        format!("{:.1} / {:.1}", pct(&mut took, 0.5), pct(&mut took, 0.99))
    };
    println!(
        "| {} | {n} | {peak} | {:.1} | {opened} | {requests} | {leader} | {follower} | {statements} | {rss_mib:.1} | {cpu_pct:.3} | {handover} ({}) | {alive}/{n} alive, {settled} |",
        redact_url(url),
        sum as f64 / samples.max(1) as f64,
        took.len(),
    );
    rates
}

#[tokio::main]
async fn main() {
    let mut o = parse();
    let bouncer = o
        .pgbouncer
        .map(|n| tenure_testsupport::PgBouncer::start(LOCAL_POSTGRES, n).expect("start PgBouncer"));
    if let Some(b) = &bouncer {
        // Without and with a direct URL for LISTEN.
        let direct: String =
            url::form_urlencoded::byte_serialize(LOCAL_POSTGRES.as_bytes()).collect();
        o.stores.push(b.url());
        o.stores.push(format!("{}&push_url={direct}", b.url()));
    }
    let mut private = Private::default();
    let postgres = o.private_postgres.then(|| {
        use tenure_testsupport::{Kind, Server, ServerOptions};
        let options = ServerOptions::default().with_args(&[
            "-c",
            "max_connections=100",
            "-c",
            "shared_preload_libraries=pg_stat_statements",
        ]);
        Server::start_with(Kind::Postgres, options).expect("start PostgreSQL")
    });
    if let Some(p) = &postgres {
        let mut c = sqlx::PgConnection::connect(&p.url())
            .await
            .expect("connect to the private PostgreSQL");
        sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .execute(&mut c)
            .await
            .expect("CREATE EXTENSION pg_stat_statements");
        let _ = c.close().await;
        o.stores.push(p.url());
    }
    if o.etcd {
        let etcd = tenure_testsupport::EtcdCluster::start(1).expect("start etcd");
        o.stores.push(etcd.url());
        private.etcd = Some(etcd);
    }
    if o.zookeeper {
        let zookeeper = tenure_testsupport::ZkEnsemble::start(1).expect("start ZooKeeper");
        o.stores.push(zookeeper.url());
        private.zookeeper = Some(zookeeper);
    }
    println!(
        "tenure fleet: {} (ttl {:?}, {} s idle window, {} hand-overs)",
        o.bin, o.ttl, o.secs, o.handovers
    );
    println!("| store | N | connections peak | connections mean | new connections/s | requests/s per replica | requests/s, leader alone | requests/s per follower | statements/s per replica | RSS MiB per replica | CPU % per replica | graceful hand-over p50 / p99 ms (n) | end |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for url in &o.stores {
        // One replica alone first: the leader's share of every row below.
        let mut ns = vec![1];
        ns.extend(o.ns.iter().copied().filter(|&n| n != 1));
        let mut alone = None;
        for n in ns {
            let rates = run(url, n, &o, &private, alone).await;
            if n == 1 {
                alone = rates;
            }
        }
    }
}
