//! The harness: starts the store and the candidates, injects faults at random,
//! then hands the recorded history to the checker.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::store::{DynStore, ElectionKey, StoreOptions, Tenure};
use tenure_testsupport::proxy::Proxy;

use crate::history::{append, Fault};
use crate::server::Private;
use crate::shared_clock;

const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

#[derive(Debug, clap::Args)]
pub struct HarnessArgs {
    /// `sqlite`, `mariadb`, `postgres`, `redis`, `zk` or `etcd` (private server instances that the harness
    /// may crash and restart), `zk3` or `etcd3` (a private three-server ZooKeeper ensemble or
    /// three-member etcd cluster, whose members it crashes and restarts one at a time and
    /// partitions candidates from), `redis-volatile` (a private Redis without persistence, which
    /// loses acknowledged writes on restart: SAFETY.md's A4 broken, violations expected),
    /// or a store URL (never restarted).
    #[arg(long, default_value = "sqlite")]
    pub store: String,
    /// How long to inject faults.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Lease TTL of the candidates.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Candidate processes.
    #[arg(long, default_value_t = 5)]
    pub candidates: usize,
    /// Random seed (printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output directory for the history and the report.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Comma-separated fault kinds (kill, stop, clock, replay, latency, blackhole, reset, cut, restart,
    /// member, partition); default: all that apply.
    #[arg(long)]
    pub faults: Option<String>,
    /// Run the candidates with a deliberate bug (needs a build with RUSTFLAGS="--cfg tenure_chaos_bugs"; see docs/chaos.md); violations are then expected.
    #[arg(long)]
    pub bug: Option<String>,
    /// Clock faults use rates beyond the documented 1% drift bound (0.7x for every candidate but c1, which keeps true time); violations are then expected.
    #[arg(long)]
    pub clock_beyond_bound: bool,
    /// SQLite only: every second candidate (c1, c3, ...) runs with its wall clock, which is SQLite's
    /// store clock for their statements, one TTL (whole seconds) ahead: the
    /// store's clock stepped forward beyond the margin (SAFETY.md's A2
    /// broken); violations are then expected.
    #[arg(long)]
    pub store_clock_step: bool,
    /// Campaign as a semaphore of this many slots (0: one election): each
    /// slot is checked as an election of its own, so no slot ever has two
    /// holders (a semaphore never has more holders than slots). Faults
    /// that aim at the leader aim at slot 0's.
    #[arg(long, default_value_t = 0)]
    pub slots: usize,
}

impl HarnessArgs {
    /// Whether this run breaks a safety assumption or the build on purpose,
    /// so that violations are expected (the self-checks).
    pub fn expects_violations(&self) -> bool {
        self.bug.is_some()
            || self.clock_beyond_bound
            || self.store_clock_step
            || self.store == "redis-volatile"
    }
}

struct Candidate {
    id: String,
    inc: u32,
    child: Child,
    faketime: Option<String>,
}

struct Run {
    args: HarnessArgs,
    rng: StdRng,
    out: PathBuf,
    url_for: Vec<String>,
    /// Each candidate's proxies, one per store server (none for SQLite).
    proxies: Vec<Vec<Proxy>>,
    cands: Vec<Candidate>,
    election: String,
    observer: DynStore,
    faults_file: std::fs::File,
    faults: Vec<Fault>,
    sqlite: bool,
    /// Tenures the observer has seen, for replays.
    tenures: Vec<Tenure>,
}

/// The fault kinds a run injects unless `--faults` names others: `server`
/// (reached over the network, so through proxies), `private` (the harness's
/// own instance) with `members` servers (a whole single server restarts; an
/// ensemble's or cluster's members crash one at a time, and a candidate can
/// be cut from some of them).
///
/// Clock faults only where the store keeps its own clock. SQLite's store
/// clock is the wall clock of the process running the statement, which every
/// process on one host shares; libfaketime cannot change a process's
/// monotonic rate without changing its wall clock too, and rates that differ
/// from each process's start part two long-lived candidates' wall clocks
/// without bound (0.45-0.8 s in a 30-minute run): a store clock that steps
/// between statements, assumption A2 broken by the harness. The
/// `--store-clock-step` check breaks A2 on SQLite on purpose with
/// `--faults clock`, which [`allowed_kinds`] keeps.
pub fn default_kinds(server: bool, private: bool, members: usize) -> Vec<&'static str> {
    let mut k = vec!["kill", "stop", "replay"];
    if server {
        k.push("clock");
        k.extend(["latency", "blackhole", "reset", "cut"]);
    }
    if private && members == 1 {
        k.push("restart");
    }
    if private && members > 1 {
        k.extend(["member", "partition"]);
    }
    k
}

/// The fault kinds `--faults` may name for a store: its defaults, and clock
/// faults everywhere (on SQLite they break A2, which only the deliberate
/// broken-setup runs ask for).
pub fn allowed_kinds(server: bool, private: bool, members: usize) -> Vec<&'static str> {
    let mut k = default_kinds(server, private, members);
    if !k.contains(&"clock") {
        k.push("clock");
    }
    k
}

pub async fn run(args: HarnessArgs) -> Result<crate::check::Report, String> {
    if args.bug.is_some() && !tenure::chaos_bugs_compiled_in() {
        return Err("--bug needs a build with the deliberate bugs compiled in: \
             RUSTFLAGS=\"--cfg tenure_chaos_bugs\" cargo build -p tenure-chaos --target-dir target/chaos-bugs \
             (.ci/chaos-smoke does this)"
            .to_string());
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "target/chaos/{}-{}",
            args.store.replace(['/', ':', '@'], "_"),
            seed
        ))
    });
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    clear_history(&out);
    if let Some(bug) = &args.bug {
        // The harness's own store connection (used to replay stale statements)
        // must run the same broken build as the candidates.
        std::env::set_var("TENURE_CHAOS_BUG", bug);
    }
    if args.store_clock_step && args.store != "sqlite" {
        return Err(
            "--store-clock-step applies to --store sqlite only (its store clock is \
             the wall clock of the process running the statement)"
                .to_string(),
        );
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = args.store.clone();
    let mut server = tokio::task::spawn_blocking(move || Private::start_named(&store))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let upstream_url = match (&server, args.store.as_str()) {
        (Some(s), _) => s.url(),
        (None, "sqlite") => format!("sqlite://{}", tmp.path().join("chaos.db").display()),
        (None, url) => url.to_string(),
    };
    let members = server.as_ref().map_or(1, Private::members);
    let is_server = upstream_url.starts_with("redis")
        || upstream_url.starts_with("etcd")
        || upstream_url.starts_with("mysql")
        || upstream_url.starts_with("postgres")
        || upstream_url.starts_with("mariadb")
        || upstream_url.starts_with("zk");
    let kinds: Vec<String> = match &args.faults {
        Some(list) => list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => default_kinds(is_server, server.is_some(), members)
            .into_iter()
            .map(String::from)
            .collect(),
    };
    for k in &kinds {
        let ok = allowed_kinds(is_server, server.is_some(), members).contains(&k.as_str());
        if !ok {
            return Err(format!(
                "fault kind {k:?} does not apply to store {}",
                args.store
            ));
        }
    }
    let observer = tenure::store::connect(&upstream_url, &StoreOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    // Each candidate reaches every server through a proxy of its own, so a
    // network fault isolates that candidate alone, from all servers or
    // (partition) from some.
    let (hosts, _) = split_host(&upstream_url);
    let mut proxies = Vec::new();
    let mut url_for = Vec::new();
    for _ in 0..args.candidates {
        let mut mine = Vec::new();
        if is_server {
            for host in hosts.split(',') {
                mine.push(Proxy::start(host).await.map_err(|e| e.to_string())?);
            }
        }
        let through: Vec<String> = mine
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port))
            .collect();
        url_for.push(match through.is_empty() {
            true => upstream_url.clone(),
            false => upstream_url.replacen(&hosts, &through.join(","), 1),
        });
        proxies.push(mine);
    }
    println!(
        "tenure-chaos: store {} ttl {:?} candidates {} duration {:?} seed {seed} faults {} {}",
        tenure::store::redact_url(&upstream_url),
        args.ttl,
        args.candidates,
        args.duration,
        kinds.join(","),
        args.bug
            .as_deref()
            .map(|b| format!("BUG={b}"))
            .unwrap_or_default()
    );
    let faults_file = std::fs::File::create(out.join("faults.jsonl")).map_err(|e| e.to_string())?;
    let mut run = Run {
        rng: StdRng::seed_from_u64(seed),
        out: out.clone(),
        url_for,
        proxies,
        cands: Vec::new(),
        election: format!("chaos-{seed:x}-{:x}", shared_clock::now_ns()),
        observer,
        faults_file,
        faults: Vec::new(),
        sqlite: upstream_url.starts_with("sqlite"),
        tenures: Vec::new(),
        args,
    };
    let started = shared_clock::now_ns();
    for i in 0..run.args.candidates {
        // With a stepped store clock, c1 (the first whose statements see the
        // clock ahead) starts only once c0, a true-clock candidate, leads: it
        // finds c0's lease expired while c0 still believes. Started together, a
        // stepped candidate usually won first and leadership stayed among the
        // stepped ones (they see every lease end early): the check passed a
        // broken setup (CI, stop 17).
        // The same for the wall-clock bug: c0 (clock furthest behind) must
        // lead first. When c4 (2 h ahead) won the start, its leases looked
        // hours long to everyone else, it kept leadership through every
        // fault, and the check passed a broken build (CI, seed 10258: all
        // eleven faults on c4, no violation).
        // And for clock rates beyond the bound: c0 (slow) leads first, so the
        // first blackhole cuts off a slow leader while c1 (true clock) looks.
        let wall_clock_bug = run.args.bug.as_deref() == Some("wall-clock");
        let slow_first = run.args.clock_beyond_bound;
        if (run.args.store_clock_step || wall_clock_bug || slow_first) && i == 1 {
            run.wait_for_a_leader(run.args.ttl * 10).await;
        }
        // A clock offset for some from the start: the wall-clock bug shows at once.
        let clock_faults = kinds.iter().any(|k| k == "clock");
        let all =
            run.args.clock_beyond_bound || run.args.bug.is_some() || run.args.store_clock_step;
        let fake = (clock_faults && (all || run.rng.gen_bool(0.4))).then(|| run.random_faketime(i));
        let c = run.spawn(i, 0, fake.clone())?;
        run.cands.push(c);
    }
    let end = started + run.args.duration.as_nanos() as u64;
    let mut n = 0u32;
    while shared_clock::now_ns() < end {
        n += 1;
        let ttl = run.args.ttl;
        let gap = if n % 5 == 0 {
            ttl * 5
        } else {
            ttl.mul_f64(run.rng.gen_range(1.5..3.0)) + Duration::from_secs(1)
        };
        let until = shared_clock::now_ns() + gap.as_nanos() as u64;
        while shared_clock::now_ns() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = run.leader_index().await;
        }
        run.revive_exited()?;
        if shared_clock::now_ns() >= end {
            break;
        }
        let kind = kinds[run.next_kind(n as usize, kinds.len())].clone();
        run.inject(&kind, &mut server).await?;
    }
    for c in &mut run.cands {
        let _ = c.child.kill();
        let _ = c.child.wait();
    }
    drop(server);
    let ended = shared_clock::now_ns();
    let check =
        |dir: &Path| crate::check::check(dir, run.args.ttl, started, ended, &run.faults, seed);
    let report = match run.args.slots {
        0 => check(&run.out),
        n => {
            let slots = (0..n)
                .map(|slot| check(&crate::candidate::slot_dir(&run.out, slot)))
                .collect();
            crate::check::Report::of_slots(slots).ok_or("no slots to check")?
        }
    };
    Ok(report)
}

/// Removes the files of an earlier run in the same directory (only ours).
fn clear_history(out: &Path) {
    if let Ok(dir) = std::fs::read_dir(out) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = (name.starts_with("events-") && name.ends_with(".jsonl"))
                || (name.starts_with('c') && name.ends_with(".log"))
                || matches!(
                    name.as_str(),
                    "faults.jsonl" | "report.json" | "timeline.svg"
                );
            if ours {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir_all(out.join("resource"));
    if let Ok(dir) = std::fs::read_dir(out) {
        for entry in dir.flatten() {
            if entry.file_name().to_string_lossy().starts_with("slot-") {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// `host:port` of a server URL (`host:port,host:port` for several servers), and the rest.
fn split_host(url: &str) -> (String, String) {
    let after = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let after_at = after.rsplit_once('@').map(|(_, r)| r).unwrap_or(after);
    let host_port = after_at.split(['/', '?']).next().unwrap_or("").to_string();
    (host_port, url.to_string())
}

impl Run {
    /// Index of the `n`th fault's kind (from 1) among `count` kinds.
    ///
    /// Normal runs draw each kind. Self-checks take them in turn, in the
    /// order listed, because usually one kind alone shows their broken
    /// setup: in `--clock-beyond-bound --faults blackhole,clock` a clock
    /// fault kills and restarts the leader, which then cannot act, so only
    /// blackholes make overlaps (46 of 47 violations over 18 seeds). A 25 s
    /// run injects 4 to 6 faults; drawn, about one seed in 20 to 30 got no
    /// blackhole and passed a broken setup.
    fn next_kind(&mut self, n: usize, count: usize) -> usize {
        if self.args.expects_violations() {
            (n - 1) % count
        } else {
            self.rng.gen_range(0..count)
        }
    }

    fn random_faketime(&mut self, idx: usize) -> String {
        // SQLite has no server: its "store clock" is the wall clock of the
        // process running the statement, which every process on one host shares.
        // A per-process offset would model a situation that cannot occur there
        // (and that no SQLite-based design survives), so SQLite candidates asked
        // for clock faults (they are not among its defaults) get rate changes only.
        if self.args.store_clock_step {
            // Every other candidate's statements see the store's clock a
            // TTL ahead: when a true-clock candidate leads, they find its
            // lease expired while it still believes.
            let step = if idx % 2 == 1 {
                self.args.ttl.as_secs_f64().ceil().max(1.0) as u64
            } else {
                0
            };
            return format!("+{step}s x1.0");
        }
        let hours = if self.sqlite {
            0
        } else if self.args.bug.as_deref() == Some("wall-clock") {
            // Spread by index, not drawn: the bug shows only when a
            // follower's clock is ahead of the leader's. With drawn offsets
            // the first leader sometimes had the clock furthest ahead, and
            // clock faults drew only later ones, so the check passed a broken
            // build (CI, seed 17115). c0 usually leads first; c1-c4 are ahead.
            idx as i32 - 2
        } else {
            self.rng.gen_range(-3i32..=3)
        };
        let rate = if self.args.clock_beyond_bound {
            // Every candidate but c1 runs slow. A slow leader believes it
            // leads past the lease's real expiry; the violation shows only when
            // a follower with a true clock takes over then. Followers no longer
            // poll: one slowed as much as the leader also waits too long, so
            // with every clock at 0.7x the check passed a broken setup (CI,
            // stop 16). With one true clock among slow ones, that follower is
            // the first to look whenever a slow leader is cut off.
            if idx == 1 {
                1.0
            } else {
                0.7
            }
        } else {
            self.rng.gen_range(0.995..1.005)
        };
        format!("{hours:+}h x{rate:.4}")
    }

    fn spawn(
        &mut self,
        idx: usize,
        inc: u32,
        faketime: Option<String>,
    ) -> Result<Candidate, String> {
        let id = format!("c{idx}");
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::File::create(self.out.join(format!("{id}-{inc}.log")))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "candidate",
            "--store",
            &self.url_for[idx],
            "--election",
            &self.election,
            "--id",
            &id,
        ])
        .args([
            "--inc",
            &inc.to_string(),
            "--ttl",
            &humantime::format_duration(self.args.ttl).to_string(),
        ])
        .arg("--events")
        .arg(self.out.join(format!("events-{id}-{inc}.jsonl")))
        .arg("--resource")
        .arg(self.out.join("resource"))
        .args(["--slots", &self.args.slots.to_string()])
        // TENURE_CHAOS_LOG: the candidates' log filter (TENURE_LOG's syntax),
        // for following a failed seed in more detail.
        .env(
            "TENURE_LOG",
            std::env::var("TENURE_CHAOS_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        match &self.args.bug {
            Some(b) => cmd.env("TENURE_CHAOS_BUG", b),
            None => cmd.env_remove("TENURE_CHAOS_BUG"),
        };
        if let Some(f) = &faketime {
            if !Path::new(FAKETIME_LIB).exists() {
                return Err(format!(
                    "clock faults need libfaketime ({FAKETIME_LIB}); apt-get install libfaketime"
                ));
            }
            cmd.env("LD_PRELOAD", FAKETIME_LIB)
                .env("FAKETIME", f)
                .env("FAKETIME_DONT_RESET", "1");
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start a candidate: {e}"))?;
        Ok(Candidate {
            id,
            inc,
            child,
            faketime,
        })
    }

    fn record(&mut self, kind: &str, target: &str, start: u64, detail: String) {
        let f = Fault {
            kind: kind.into(),
            target: target.into(),
            start,
            heal: shared_clock::now_ns(),
            detail,
        };
        append(&mut self.faults_file, &f);
        self.faults.push(f);
    }

    /// Restarts candidates that exited on their own (they should not).
    fn revive_exited(&mut self) -> Result<(), String> {
        for i in 0..self.cands.len() {
            if let Ok(Some(status)) = self.cands[i].child.try_wait() {
                let inc = self.cands[i].inc + 1;
                let fake = self.cands[i].faketime.clone();
                eprintln!(
                    "candidate {} exited by itself ({status}); restarting",
                    self.cands[i].id
                );
                self.cands[i] = self.spawn(i, inc, fake)?;
            }
        }
        Ok(())
    }

    /// The election faults aim at: the one, or slot 0 of a semaphore.
    fn key(&self) -> ElectionKey {
        match self.args.slots {
            0 => ElectionKey::new("default", self.election.clone()),
            _ => ElectionKey::new("default", tenure::slot_election(&self.election, 0)),
        }
    }

    /// Waits until some candidate leads, at most `limit`.
    async fn wait_for_a_leader(&mut self, limit: Duration) {
        let until = shared_clock::now_ns() + limit.as_nanos() as u64;
        while shared_clock::now_ns() < until && self.leader_index().await.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn leader_index(&mut self) -> Option<usize> {
        let rec = self.observer.read(&self.key()).await.ok()??;
        if let Some(h) = &rec.holder {
            if !self.tenures.iter().any(|t| t.term == rec.term) {
                self.tenures.push(Tenure {
                    key: self.key(),
                    holder: h.clone(),
                    term: rec.term,
                });
            }
        }
        let holder = rec.live_holder()?;
        holder
            .trim_start_matches('c')
            .split('#')
            .next()?
            .parse()
            .ok()
    }

    /// Replays a renewal and a release of an earlier tenure, as a delayed or
    /// retried statement from a stale leader would arrive. The store must refuse
    /// both and leave the lease as it was.
    async fn replay(&mut self, start: u64) {
        let current = self.observer.read(&self.key()).await.ok().flatten();
        let Some(current) = current else { return };
        let mut stale: Vec<Tenure> = self
            .tenures
            .iter()
            .filter(|t| t.term != current.term)
            .cloned()
            .collect();
        // The current holder under another term: what a delayed statement from
        // its own earlier tenure looks like. Only the term check refuses it.
        if let Some(h) = &current.holder {
            stale.push(Tenure {
                key: self.key(),
                holder: h.clone(),
                term: if current.term > 1 {
                    current.term - 1
                } else {
                    current.term + 1
                },
            });
        }
        if stale.is_empty() {
            self.record("replay", "store", start, "nothing to replay yet".into());
            return;
        }
        let old = stale[self.rng.gen_range(0..stale.len())].clone();
        let renewed = self.observer.renew(&old, self.args.ttl).await;
        let released = self.observer.release(&old).await;
        let verdict = match (&renewed, &released) {
            (Ok(false), Ok(false)) => "refused".to_string(),
            _ => format!("ACCEPTED (renew {renewed:?}, release {released:?})"),
        };
        self.record(
            "replay",
            "store",
            start,
            format!(
                "renew+release of stale term {} by {}: {verdict}",
                old.term, old.holder
            ),
        );
    }

    fn hold(&mut self) -> Duration {
        self.args.ttl.mul_f64(self.rng.gen_range(0.5..3.0))
    }

    fn signal(&self, idx: usize, sig: i32) {
        // SAFETY: kill(2) on a child we started.
        unsafe { libc::kill(self.cands[idx].child.id() as i32, sig) };
    }

    async fn inject(&mut self, kind: &str, server: &mut Option<Private>) -> Result<(), String> {
        let leader = self.leader_index().await;
        // Self-checks aim every fault at the leader, so a broken build cannot
        // slip through on a lucky draw.
        let p_leader = if self.args.expects_violations() {
            1.0
        } else {
            0.6
        };
        let idx = match leader {
            Some(l) if self.rng.gen_bool(p_leader) => l,
            _ => self.rng.gen_range(0..self.cands.len()),
        };
        let target = self.cands[idx].id.clone();
        let start = shared_clock::now_ns();
        match kind {
            "kill" | "clock" => {
                self.signal(idx, libc::SIGKILL);
                let _ = self.cands[idx].child.wait();
                let pause = Duration::from_millis(self.rng.gen_range(0..1000));
                tokio::time::sleep(pause).await;
                // A killed process comes back on the same host, with the same
                // clock; only a clock fault changes it. (Restarting with the
                // true clock let --store-clock-step runs lose every stepped
                // candidate to two kills and pass a broken setup: CI, stop 17.)
                let fake = if kind == "clock" {
                    Some(self.random_faketime(idx))
                } else {
                    self.cands[idx].faketime.clone()
                };
                let inc = self.cands[idx].inc + 1;
                self.cands[idx] = self.spawn(idx, inc, fake.clone())?;
                let detail = match fake {
                    Some(f) => format!("restarted after {pause:?} with FAKETIME=\"{f}\""),
                    None => format!("restarted after {pause:?}"),
                };
                self.record(kind, &target, start, detail);
            }
            "stop" => {
                let hold = self.hold();
                self.signal(idx, libc::SIGSTOP);
                tokio::time::sleep(hold).await;
                self.signal(idx, libc::SIGCONT);
                self.record(kind, &target, start, format!("SIGSTOP for {hold:?}"));
            }
            "latency" | "blackhole" | "cut" => {
                let hold = self.hold();
                let latency = self.args.ttl.mul_f64(self.rng.gen_range(0.3..1.2));
                for p in &self.proxies[idx] {
                    match kind {
                        "latency" => p.set_delay(latency),
                        "blackhole" => p.set_blackhole(true),
                        _ => p.set_cut(true),
                    }
                }
                tokio::time::sleep(hold).await;
                for p in &self.proxies[idx] {
                    p.pass();
                }
                let detail = if kind == "latency" {
                    format!("{latency:?} added for {hold:?}")
                } else {
                    format!("for {hold:?}")
                };
                self.record(kind, &target, start, detail);
            }
            "replay" => self.replay(start).await,
            "reset" => {
                for p in &self.proxies[idx] {
                    p.reset();
                }
                self.record(kind, &target, start, "connections reset".into());
            }
            "restart" => {
                let hold = self.hold();
                crash_and_restart(server, None, hold).await?;
                self.record(kind, "store", start, format!("crashed, down for {hold:?}"));
            }
            "member" => {
                let hold = self.hold();
                let members = server.as_ref().map_or(1, Private::members);
                // The leading member half the time: its crash makes the
                // others elect a new one while leases run.
                let leading = server.as_ref().and_then(Private::leading_member);
                let m = match leading {
                    Some(l) if self.rng.gen_bool(0.5) => l,
                    _ => self.rng.gen_range(0..members),
                };
                let role = if Some(m) == leading {
                    "the leading member"
                } else {
                    "member"
                };
                crash_and_restart(server, Some(m), hold).await?;
                self.record(
                    kind,
                    "store",
                    start,
                    format!("{role} m{m} crashed, down for {hold:?}"),
                );
            }
            "partition" => {
                let hold = self.hold();
                let n = self.proxies[idx].len();
                let mut cut: Vec<usize> = (0..n).collect();
                // Cut from one to all but one of the servers: the candidate
                // still reaches the others.
                let keep = self.rng.gen_range(1..n.max(2));
                for _ in 0..keep.min(cut.len()) {
                    let i = self.rng.gen_range(0..cut.len());
                    cut.swap_remove(i);
                }
                cut.sort_unstable();
                for &i in &cut {
                    self.proxies[idx][i].set_cut(true);
                }
                tokio::time::sleep(hold).await;
                for &i in &cut {
                    self.proxies[idx][i].pass();
                }
                let names: Vec<String> = cut.iter().map(|i| format!("m{i}")).collect();
                self.record(
                    kind,
                    &target,
                    start,
                    format!("cut from {} for {hold:?}", names.join(",")),
                );
            }
            other => return Err(format!("unknown fault kind {other:?}")),
        }
        Ok(())
    }
}

/// Crashes the private store (member `member` of an ensemble or cluster,
/// or the whole single server), keeps it down for `hold`, and starts it
/// again on its data, waiting until it serves.
async fn crash_and_restart(
    server: &mut Option<Private>,
    member: Option<usize>,
    hold: Duration,
) -> Result<(), String> {
    let Some(mut s) = server.take() else {
        return Ok(());
    };
    // A single server is member 0.
    let member = member.unwrap_or(0);
    let (s, crashed) = tokio::task::spawn_blocking(move || {
        let r = s.crash_member(member);
        (s, r)
    })
    .await
    .map_err(|e| e.to_string())?;
    crashed.map_err(|e| e.to_string())?;
    tokio::time::sleep(hold).await;
    let (s, started) = tokio::task::spawn_blocking(move || {
        let mut s = s;
        let r = s.restart_member(member);
        (s, r)
    })
    .await
    .map_err(|e| e.to_string())?;
    *server = Some(s);
    started.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct P {
        #[command(flatten)]
        a: HarnessArgs,
    }

    fn args(list: &[&str]) -> HarnessArgs {
        P::parse_from(std::iter::once("chaos").chain(list.iter().copied())).a
    }

    #[test]
    fn broken_assumptions_expect_violations_and_the_step_needs_sqlite() {
        assert!(!args(&["--store", "redis"]).expects_violations());
        assert!(args(&["--store", "redis-volatile"]).expects_violations());
        assert!(args(&["--store-clock-step"]).expects_violations());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().to_str().expect("utf-8 path");
        let err = rt
            .block_on(run(args(&[
                "--store",
                "postgres",
                "--store-clock-step",
                "--out",
                out,
            ])))
            .expect_err("refused");
        assert!(err.contains("--store sqlite only"), "{err}");
    }

    #[test]
    fn sqlite_runs_leave_the_shared_wall_clock_alone_unless_asked() {
        // SQLite: no server, no private instance.
        assert!(!default_kinds(false, false, 1).contains(&"clock"));
        assert!(allowed_kinds(false, false, 1).contains(&"clock"));
        for (private, members) in [(false, 1), (true, 1), (true, 3)] {
            assert!(default_kinds(true, private, members).contains(&"clock"));
        }
    }
}
