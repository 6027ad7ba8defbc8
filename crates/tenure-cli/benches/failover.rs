//! Failover and handover times of `tenure run`, per store, side by side.
//!
//! Three `tenure run` candidates share a store. Each kill trial sends SIGKILL to
//! the leading process and measures, by the store's clock, how long after the
//! old lease's expiry the next leader acquired it (and, on the host clock, how
//! long after the kill). Each graceful trial sends SIGTERM to the leader (it
//! stops its command and releases) and measures release → next acquisition.
//! Then resign and transfer requests from this process (what `tenure resign`
//! and `tenure transfer` send), alternating, each timed request → next
//! acquisition.
//! The store runs on this host, so host and store clocks agree.
//!
//! Run: `cargo bench -p tenure-cli --bench failover -- [--trials 50] [--ttl 2s] [--bin PATH] [--store URL|etcd|zk]...`
//! (`--bin`: another build of `tenure` for the candidates, e.g. the previous
//! commit's, to compare on the same machine and store; `--only
//! kill,graceful,requests`: some phases only; `--log tenure=debug --logs DIR`:
//! the candidates' log filter, and a directory that keeps their logs,
//! `<store>-c<i>-<n>.log` per process started.)
//! Without --store: a temporary SQLite file, the local MariaDB, PostgreSQL and Redis,
//! and a private single-node etcd if the `etcd` binary is installed
//! (`--store etcd` starts one too; `--store zk` a private ZooKeeper server). For etcd, "[store]" rows use the client
//! clock's estimates (etcd has no server clock to read); the "[host]" rows are
//! the ones to compare.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tenure::store::{DynStore, ElectionKey, LeaseRecord, LeaseStoreExt, StoreOptions};

const BIN: &str = env!("CARGO_BIN_EXE_tenure");

struct Opts {
    trials: usize,
    ttl: Duration,
    stores: Vec<String>,
    bin: String,
    /// Which phases run: kill, graceful, requests (resign and transfer).
    only: Option<Vec<String>>,
    /// The candidates' log filter (`TENURE_LOG`), `warn` by default.
    log: String,
    /// Where the candidates' logs are kept (a temporary directory otherwise).
    logs: Option<String>,
}

impl Opts {
    fn runs(&self, phase: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|p| p == phase))
    }
}

fn parse() -> Opts {
    let mut o = Opts {
        trials: 50,
        ttl: Duration::from_secs(2),
        stores: vec![],
        bin: BIN.to_string(),
        only: None,
        log: "warn".to_string(),
        logs: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--trials" => o.trials = args.next().and_then(|v| v.parse().ok()).unwrap_or(o.trials),
            "--ttl" => {
                o.ttl = args
                    .next()
                    .and_then(|v| humantime::parse_duration(&v).ok())
                    .unwrap_or(o.ttl)
            }
            "--store" => o.stores.extend(args.next()),
            "--bin" => o.bin = args.next().unwrap_or(o.bin),
            "--only" => {
                o.only = args
                    .next()
                    .map(|v| v.split(',').map(str::to_string).collect())
            }
            "--log" => o.log = args.next().unwrap_or(o.log),
            "--logs" => o.logs = args.next(),
            _ => {} // cargo bench passes --bench
        }
    }
    o
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn line(name: &str, v: &mut [f64]) {
    if v.is_empty() {
        println!("  {name:<46} no samples");
        return;
    }
    println!(
        "  {name:<46} n={:<3} p50={:>8.1}  p90={:>8.1}  p99={:>8.1}  max={:>8.1}  (ms)",
        v.len(),
        pct(v, 0.5),
        pct(v, 0.9),
        pct(v, 0.99),
        pct(v, 1.0)
    );
}

struct Bench<'a> {
    bin: &'a str,
    store: DynStore,
    url: &'a str,
    key: ElectionKey,
    ttl: Duration,
    procs: Vec<Child>,
    dir: tempfile::TempDir,
    log: &'a str,
    logs: Option<std::path::PathBuf>,
    /// Processes started so far, to name their logs apart.
    started: usize,
}

impl<'a> Bench<'a> {
    fn spawn(&mut self, i: usize) -> Child {
        self.started += 1;
        let log = match &self.logs {
            Some(d) => d.join(format!("{}-c{i}-{}.log", self.key.election, self.started)),
            None => self.dir.path().join(format!("c{i}.log")),
        };
        let ttl = humantime::format_duration(self.ttl).to_string();
        Command::new(self.bin)
            .args([
                "run",
                "--store",
                self.url,
                "--election",
                &self.key.election,
                "--ttl",
                &ttl,
            ])
            // The job marks its start with a file whose mtime says when
            // (`:` is a shell builtin: no extra process on the path).
            .args([
                "--id",
                &format!("c{i}"),
                "--",
                "sh",
                "-c",
                ": > started-$TENURE_TERM; exec sleep 100000",
            ])
            .current_dir(self.dir.path())
            .env("TENURE_LOG", self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log"))
            .spawn()
            .expect("spawn tenure")
    }

    /// When (µs since the epoch, host clock) the job of `term` started.
    async fn job_started(&self, term: u64, within: Duration) -> Option<i64> {
        let path = self.dir.path().join(format!("started-{term}"));
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified()) {
                let us = modified.duration_since(UNIX_EPOCH).ok()?.as_micros();
                return i64::try_from(us).ok();
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        None
    }

    async fn read(&self) -> Option<LeaseRecord> {
        self.store.read(&self.key).await.ok().flatten()
    }

    async fn leader(&self, min_term: u64, within: Duration) -> Option<(usize, LeaseRecord)> {
        let start = Instant::now();
        while start.elapsed() < within {
            if let Some(r) = self.read().await {
                if r.is_held() && r.term >= min_term {
                    let idx = r
                        .holder
                        .as_deref()?
                        .trim_start_matches('c')
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

    fn signal(&mut self, idx: usize, sig: i32) {
        // SAFETY: plain kill(2) on a pid we own.
        unsafe { libc::kill(self.procs[idx].id() as i32, sig) };
        let _ = self.procs[idx].wait();
    }
}

async fn run_store(url: &str, o: &Opts) {
    let store = match tenure::store::connect(url, &StoreOptions::default()).await {
        Ok(s) => s,
        Err(e) => {
            println!("{}: skipped ({e})", tenure::store::redact_url(url));
            return;
        }
    };
    let key = ElectionKey::new("default", format!("bench-{}", now_us()));
    let mut b = Bench {
        bin: &o.bin,
        store,
        url,
        key,
        ttl: o.ttl,
        procs: vec![],
        dir: tempfile::tempdir().expect("tempdir"),
        log: &o.log,
        logs: o.logs.as_ref().map(std::path::PathBuf::from),
        started: 0,
    };
    if let Some(d) = &b.logs {
        std::fs::create_dir_all(d).expect("log directory");
    }
    b.procs = (0..3).map(|i| b.spawn(i)).collect();
    let (mut after_expiry, mut after_kill, mut after_release, mut after_sigterm) =
        (vec![], vec![], vec![], vec![]);
    // Where a crash takeover's time goes: the kill until a read first shows
    // the old lease gone (expired by the store; on etcd, its lessor's
    // revocation), and from then to the new leader's acquisition.
    let (mut kill_to_gone, mut gone_to_next) = (vec![], vec![]);
    let mut term = 0;
    for _ in 0..if o.runs("kill") { o.trials } else { 0 } {
        let Some((idx, _)) = b.leader(term, o.ttl * 5).await else {
            break;
        };
        // Let the followers settle into their sleep, as in real life.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let killed = Instant::now();
        b.signal(idx, libc::SIGKILL);
        tokio::time::sleep(Duration::from_millis(30)).await; // an in-flight renewal may still land
        let Some(last) = b.read().await else { break };
        let gone = loop {
            match b.read().await {
                Some(r) if r.term == last.term && r.is_held() => {}
                _ => break Instant::now(),
            }
            if killed.elapsed() > o.ttl * 5 {
                break Instant::now();
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        let Some((_, next)) = b.leader(last.term + 1, o.ttl * 5).await else {
            break;
        };
        after_kill.push(killed.elapsed().as_secs_f64() * 1000.0);
        kill_to_gone.push((gone - killed).as_secs_f64() * 1000.0);
        gone_to_next.push(gone.elapsed().as_secs_f64() * 1000.0);
        after_expiry.push((next.acquired_at_us - last.expires_at_us) as f64 / 1000.0);
        term = next.term;
        b.procs[idx] = b.spawn(idx);
    }
    for _ in 0..if o.runs("graceful") { o.trials } else { 0 } {
        let Some((idx, cur)) = b.leader(term, o.ttl * 5).await else {
            break;
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent_us = now_us();
        // SAFETY: plain kill(2) on a pid we own.
        unsafe { libc::kill(b.procs[idx].id() as i32, libc::SIGTERM) };
        let mut released = None;
        let start = Instant::now();
        let next = loop {
            if let Some(r) = b.read().await {
                if r.holder.is_none() && r.term == cur.term {
                    released = Some(r.expires_at_us);
                }
                if r.is_held() && r.term > cur.term {
                    break Some(r);
                }
            }
            if start.elapsed() > o.ttl * 5 {
                break None;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        let _ = b.procs[idx].wait();
        let Some(next) = next else { break };
        after_sigterm.push((next.acquired_at_us - sent_us) as f64 / 1000.0);
        // A fast successor can take over between two of our reads; the new
        // record then still carries the release time (store clock).
        let released = released.or((next.start_reason
            == Some(tenure::store::StartReason::Release)
            && next.previous_expires_at_us > 0)
            .then_some(next.previous_expires_at_us));
        if let Some(rel) = released {
            after_release.push((next.acquired_at_us - rel) as f64 / 1000.0);
        }
        if o.logs.is_some() {
            println!(
                "  graceful: c{idx} term {} released at {} us, {} (term {}) acquired {:.1} ms later",
                cur.term,
                released.unwrap_or(0),
                next.holder.as_deref().unwrap_or("?"),
                next.term,
                released.map_or(f64::NAN, |r| (next.acquired_at_us - r) as f64 / 1000.0)
            );
        }
        term = next.term;
        b.procs[idx] = b.spawn(idx);
    }
    // Requests from another process (this one), as `tenure resign` and
    // `tenure transfer` send them (CLI start-up excluded): request -> the
    // next leader's acquisition, on the host clock (the store's is the same).
    let (mut after_resign, mut after_transfer) = (vec![], vec![]);
    let (mut job_after_resign, mut job_after_transfer) = (vec![], vec![]);
    for trial in 0..if o.runs("requests") { o.trials * 2 } else { 0 } {
        let Some((idx, cur)) = b.leader(term, o.ttl * 5).await else {
            break;
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let transfer = trial % 2 == 1;
        let sent_us = now_us();
        let asked = if transfer {
            // A live member other than the leader (one that resigned stays
            // out of the member list for its hold-off).
            let members = b.store.members(&b.key).await.unwrap_or_default();
            let leader = format!("c{idx}");
            let Some(to) = members
                .iter()
                .find(|m| m.live && m.identity != leader)
                .map(|m| m.identity.clone())
            else {
                continue;
            };
            tenure::handover::transfer(&b.store, &b.key, &to, o.ttl * 5).await
        } else {
            tenure::handover::resign(&b.store, &b.key).await
        };
        if let Err(e) = asked {
            println!("  request failed: {e}");
            break;
        }
        let start = Instant::now();
        let next = loop {
            if let Some(r) = b.read().await {
                if r.is_held() && r.term > cur.term {
                    break Some(r);
                }
            }
            if start.elapsed() > o.ttl * 5 {
                break None;
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        };
        let Some(next) = next else { break };
        let ms = (next.acquired_at_us - sent_us) as f64 / 1000.0;
        // The old job is stopped (SIGTERM, and the guard's word that it is
        // gone) before the hand-over, so this includes its stop.
        let job_ms = b
            .job_started(next.term, o.ttl * 5)
            .await
            .map(|us| (us - sent_us) as f64 / 1000.0);
        if let Some(job_ms) = job_ms {
            if transfer {
                job_after_transfer.push(job_ms);
            } else {
                job_after_resign.push(job_ms);
            }
        }
        if o.logs.is_some() {
            println!(
                "  {}: c{idx} term {} asked at {sent_us} us, {} (term {}) acquired {ms:.1} ms later",
                if transfer { "transfer" } else { "resign" },
                cur.term,
                next.holder.as_deref().unwrap_or("?"),
                next.term,
            );
        }
        if transfer {
            after_transfer.push(ms);
        } else {
            after_resign.push(ms);
        }
        term = next.term;
    }
    for i in 0..b.procs.len() {
        b.signal(i, libc::SIGTERM);
    }
    println!(
        "{} (ttl {:?}, 3 candidates):",
        tenure::store::redact_url(url),
        o.ttl
    );
    line(
        "kill -9: old lease expiry -> new leader [store]",
        &mut after_expiry,
    );
    line("kill -9: kill -> new leader [host]", &mut after_kill);
    line(
        "kill -9: kill -> old lease seen gone [host]",
        &mut kill_to_gone,
    );
    line(
        "kill -9: old lease seen gone -> new leader [host]",
        &mut gone_to_next,
    );
    line(
        "graceful: release -> new leader [store]",
        &mut after_release,
    );
    line(
        "graceful: SIGTERM -> new leader [host~store]",
        &mut after_sigterm,
    );
    line(
        "resign from another process -> new leader [host~store]",
        &mut after_resign,
    );
    line(
        "transfer from another process -> new leader [host~store]",
        &mut after_transfer,
    );
    line(
        "resign from another process -> next job started [host]",
        &mut job_after_resign,
    );
    line(
        "transfer from another process -> next job started [host]",
        &mut job_after_transfer,
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let o = parse();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores = if o.stores.is_empty() {
        vec![
            format!("sqlite://{}", dir.path().join("bench.db").display()),
            tenure_testsupport::servers::mysql_url(),
            tenure_testsupport::servers::postgres_url(),
            tenure_testsupport::servers::redis_url(),
            "etcd".to_string(),
        ]
    } else {
        o.stores.clone()
    };
    // `etcd`: a private single-node etcd on a free loopback port.
    let mut etcd = None;
    for url in stores.iter_mut().filter(|u| u.as_str() == "etcd") {
        if tenure_testsupport::etcd::binary().is_none() {
            println!("etcd: skipped (no etcd binary)");
            continue;
        }
        if etcd.is_none() {
            etcd = Some(tenure_testsupport::EtcdCluster::start(1).expect("private etcd"));
        }
        if let Some(c) = &etcd {
            *url = c.url();
        }
    }
    stores.retain(|u| u != "etcd");
    // `zk`: a private single ZooKeeper server (Debian's jars) on a free port.
    let mut zk = None;
    for url in stores.iter_mut().filter(|u| u.as_str() == "zk") {
        if tenure_testsupport::zookeeper::classpath().is_none() {
            println!("zk: skipped (no ZooKeeper installed)");
            continue;
        }
        if zk.is_none() {
            zk = Some(tenure_testsupport::ZkEnsemble::start(1).expect("private ZooKeeper"));
        }
        if let Some(z) = &zk {
            *url = z.url();
        }
    }
    stores.retain(|u| u != "zk");
    for url in &stores {
        run_store(url, &o).await;
    }
}
