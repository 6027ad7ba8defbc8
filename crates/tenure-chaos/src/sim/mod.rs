//! Deterministic simulation of the real elector (`tenure-chaos sim`).
//!
//! Three real [`Elector`]s, each with its real campaign task, run on one
//! current-thread tokio runtime whose time is paused: tokio jumps to the
//! next timer whenever every task waits, so a minute of election takes
//! milliseconds, and with the elector's randomness seeded
//! ([`tenure::seed_thread_rng`]) one seed gives one exact run. They share
//! one [`MemoryStore`] on a store clock of its own; each candidate has its
//! own clock ([`SimClock`]) with its own origin and rate, and reaches the
//! store through a [`FaultyStore`] that loses, delays and fails calls. A
//! nemesis adds pauses, crashes and restarts, partitions, store outages,
//! clock-rate changes and replays of stale statements. The history (what
//! each candidate believed, when, under which term) goes to the chaos
//! harness's checker ([`crate::check::check_history`]). See docs/chaos.md.

mod clock;
mod push;
mod store;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::clock::Clock;
use tenure::store::memory::MemoryStore;
use tenure::store::{ElectionKey, LeaseStore, Tenure};
use tenure::Elector;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use clock::SimClock;
use store::{FaultyStore, Link, Net};

use crate::check::{check_history, Report};
use crate::history::{Event, Fault, Write_};

/// `tenure-chaos sim`: a sweep of seeds, or one seed.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Run this one seed (reproduce a failure), printing its whole report.
    #[arg(long)]
    pub seed: Option<u64>,
    /// The sweep's first seed.
    #[arg(long, default_value_t = 1)]
    pub first_seed: u64,
    /// The sweep's number of seeds (the sweep stops earlier at --budget).
    #[arg(long, default_value_t = u64::MAX)]
    pub seeds: u64,
    /// Wall-clock time for the sweep.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "50s")]
    pub budget: Duration,
    /// Simulated time per seed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub duration: Duration,
    /// Lease TTL.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub ttl: Duration,
    /// Candidates.
    #[arg(long, default_value_t = 5)]
    pub candidates: usize,
    /// Share of store calls hit by a fault (lost, delayed, failed).
    #[arg(long, default_value_t = 0.35)]
    pub call_fault_rate: f64,
    /// A deliberate bug (build with --cfg tenure_chaos_bugs): the sweep must catch it.
    #[arg(long)]
    pub bug: Option<String>,
    /// Every candidate but c1 runs at 0.7× the store's clock rate (A1 broken):
    /// the sweep must find violations.
    #[arg(long)]
    pub clock_beyond_bound: bool,
    /// The store's clock steps forward by ttl/2 now and then (A2 broken): the
    /// sweep must find violations.
    #[arg(long)]
    pub store_clock_step: bool,
}

impl SimArgs {
    fn expect_violations(&self) -> bool {
        self.bug.is_some() || self.clock_beyond_bound || self.store_clock_step
    }

    /// The command that replays `seed` exactly.
    fn reproduce(&self, seed: u64) -> String {
        let mut cmd = if self.bug.is_some() {
            "RUSTFLAGS=\"--cfg tenure_chaos_bugs\" cargo run -p tenure-chaos --target-dir target/chaos-bugs -- sim".to_string()
        } else {
            "cargo run -p tenure-chaos -- sim".to_string()
        };
        cmd += &format!(" --seed {seed}");
        if let Some(b) = &self.bug {
            cmd += &format!(" --bug {b}");
        }
        if self.clock_beyond_bound {
            cmd += " --clock-beyond-bound";
        }
        if self.store_clock_step {
            cmd += " --store-clock-step";
        }
        let d = SimArgs::default_values();
        if self.duration != d.duration {
            cmd += &format!(" --duration {}", humantime::format_duration(self.duration));
        }
        if self.ttl != d.ttl {
            cmd += &format!(" --ttl {}", humantime::format_duration(self.ttl));
        }
        if self.candidates != d.candidates {
            cmd += &format!(" --candidates {}", self.candidates);
        }
        if self.call_fault_rate != d.call_fault_rate {
            cmd += &format!(" --call-fault-rate {}", self.call_fault_rate);
        }
        cmd
    }

    fn default_values() -> SimArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: SimArgs,
        }
        P::parse_from(["sim"]).a
    }
}

/// The simulated world: shared store, recorded history, the seeded generator.
#[derive(Debug)]
pub struct World {
    cfg: SimArgs,
    t0: Instant,
    rng: Mutex<StdRng>,
    store: Arc<MemoryStore>,
    store_clock: SimClock,
    store_down: AtomicBool,
    /// What happened in each of [`ELECTIONS`], in that order.
    logs: Vec<ElectionLog>,
    faults: Mutex<Vec<Fault>>,
    /// Whether this seed's store pushes changes (even seeds; odd seeds'
    /// followers poll, as where nothing pushes).
    push: bool,
    /// Whether this seed's store ends expired leases itself and pushes
    /// that, and pushes renewals (seeds 2, 6, 10, ...: half the pushing
    /// ones), as etcd does: followers then wait for the push instead of
    /// reading at the expiry ([`sweep_expired`]).
    store_ends_expired: bool,
    /// The candidates' push channels (see `push`).
    subscribers: Mutex<Vec<push::Subscriber>>,
    /// Tenures seen in renewals and releases, for replays.
    tenures: Mutex<Vec<Tenure>>,
    /// Every store call, when `SIM_DUMP` names a file (to find where two
    /// runs part).
    trace: Option<Mutex<Vec<String>>>,
}

impl World {
    fn trace(&self, line: impl FnOnce() -> String) {
        if let Some(t) = &self.trace {
            let l = format!("{} {}", self.now_ns(), line());
            lock(t).push(l);
        }
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, StdRng> {
        self.rng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Simulated real time in nanoseconds (the checker's shared clock).
    fn now_ns(&self) -> u64 {
        (Instant::now() - self.t0).as_nanos() as u64 + 1_000_000_000
    }

    fn record_fault(&self, kind: &str, target: &str, start: u64, heal: u64, detail: String) {
        lock(&self.faults).push(Fault {
            kind: kind.into(),
            target: target.into(),
            start,
            heal,
            detail,
        });
    }

    fn remember(&self, t: &Tenure) {
        let mut v = lock(&self.tenures);
        if !v.contains(t) {
            v.push(t.clone());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The elections every simulated process campaigns in. Two, so that a
/// process leading both renews them in one gathered call (see
/// `store::Renewals`), and an operator's hand-over request on one of them
/// makes that call's answers differ: a batch that answers the wrong item
/// then keeps a leader whose lease was not renewed.
const ELECTIONS: [&str; 2] = ["sim", "sim-2"];

fn election_key(e: usize) -> ElectionKey {
    ElectionKey::new("default", ELECTIONS[e])
}

/// What happened in one election, checked on its own.
#[derive(Debug, Default)]
struct ElectionLog {
    events: Mutex<Vec<Event>>,
    writes: Mutex<Vec<Write_>>,
    /// The fenced resource's highest term.
    max_term: AtomicU64,
    /// Work ticks at which an elector answered a term that the store's own
    /// row did not grant (see `start`).
    unbacked: Mutex<Vec<Unbacked>>,
}

/// How late `lost()` may fire after its deadline in virtual time, read on
/// the candidate's clock: one tick of tokio's timer (1 ms, to which it
/// rounds every sleep up) on a clock running up to 1 % fast, and the
/// clock's nanosecond rounding. Nothing else delays it: no thread waits
/// for a core.
const SIM_LOST_SLACK_MS: f64 = 1.02;

/// A work tick at which a candidate's elector answered `term` while the
/// store's row (`row`, as read then) did not name it, with that term,
/// unexpired by the store's clock.
#[derive(Debug)]
struct Unbacked {
    cand: String,
    inc: u32,
    term: u64,
    t: u64,
    row: String,
}

/// One running incarnation of a candidate.
struct Proc {
    /// One per election of [`ELECTIONS`], in that order.
    electors: Vec<Elector>,
    net: Arc<Net>,
    clock: SimClock,
    tasks: Vec<JoinHandle<()>>,
}

/// A candidate across its incarnations.
struct Slot {
    name: String,
    inc: u32,
    rate: f64,
    proc: Option<Proc>,
    /// Nemesis episodes on this candidate end here (one at a time).
    busy_until: Instant,
}

fn start(world: &Arc<World>, slot: &mut Slot) -> tenure::Result<()> {
    slot.inc += 1;
    let origin = Duration::from_secs(world.rng().gen_range(1..1_000_000));
    let clock = SimClock::new(origin, slot.rate);
    let net = Arc::new(Net::default());
    let push = world.push.then(|| {
        let (tx, _) = tokio::sync::broadcast::channel(push::CHANNEL_CAPACITY);
        let sub = push::Subscriber {
            cand: slot.name.clone(),
            net: net.clone(),
            tx,
            delivered: Arc::default(),
        };
        world.subscribe(sub.clone());
        sub
    });
    let store: Arc<dyn LeaseStore> = Arc::new(FaultyStore::new(
        Link {
            world: world.clone(),
            inner: Arc::new(world.store.client_view(Arc::new(clock.clone()))),
            net: net.clone(),
            cand: slot.name.clone(),
        },
        push,
    ));
    let mut electors = Vec::new();
    let mut tasks = Vec::new();
    for (e, election) in ELECTIONS.iter().enumerate() {
        let elector = Elector::builder(store.clone())
            .election(*election)
            .identity(slot.name.clone())
            .ttl(world.cfg.ttl)
            .poll_period(Duration::from_millis(40))
            .clock(Arc::new(clock.clone()))
            .build()?;
        tasks.push(work(world, &elector, e, slot, &clock, &net));
        electors.push(elector);
    }
    slot.proc = Some(Proc {
        electors,
        net,
        clock,
        tasks,
    });
    Ok(())
}

/// Acquisitions, leader-only work, and when lost() fired against the
/// deadline in force, as the chaos harness's candidates log them, for
/// election `e`. The work is a write to the fenced resource every 5 ms
/// while `is_leader()` answers a term, at the same instant: the first at
/// the acquisition, so only the end of a belief is measured to 5 ms.
fn work(
    world: &Arc<World>,
    elector: &Elector,
    e: usize,
    slot: &Slot,
    clock: &SimClock,
    net: &Arc<Net>,
) -> JoinHandle<()> {
    let (name, inc) = (slot.name.clone(), slot.inc);
    let (el, w, c, net) = (elector.clone(), world.clone(), clock.clone(), net.clone());
    tokio::spawn(async move {
        let log = &w.logs[e];
        while let Ok(l) = el.acquired().await {
            net.running().await;
            lock(&log.events).push(Event::Acquired {
                cand: name.clone(),
                inc,
                term: l.term(),
                t: w.now_ns(),
            });
            let mut deadline = l.deadline().unwrap_or_default();
            loop {
                if let Some(term) = el.term() {
                    backed_by_the_row(&w, &el, e, &name, inc, term).await;
                    let max = log.max_term.fetch_max(term, Ordering::SeqCst);
                    lock(&log.writes).push(Write_ {
                        cand: name.clone(),
                        inc,
                        term,
                        t: w.now_ns(),
                        accepted: term >= max,
                    });
                }
                if let Some(d) = l.deadline() {
                    deadline = d;
                }
                tokio::select! {
                    // Listed order when several are ready (not tokio's random pick),
                    // so a simulation seed replays exactly; either order is handled.
                    biased;
                    _ = l.lost() => break,
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                net.running().await;
            }
            lock(&log.events).push(Event::Lost {
                cand: name.clone(),
                inc,
                term: l.term(),
                t: w.now_ns(),
                lost_ns: c.now().as_nanos() as u64,
                deadline_ns: deadline.as_nanos() as u64,
            });
        }
    })
}

/// The store's own end of expired leases, on seeds that have one (etcd
/// deletes a lease key when its lease expires, and a live process's sweeper
/// deletes a tenure its elector stopped renewing): a lease still naming a
/// holder is released shortly after its expiry on the store's clock (up to
/// a tenth of a TTL later: etcd's lessor looks every 500 ms) and the
/// release is announced. Never before the expiry, so never a safety
/// matter; what it exercises is followers that wait for this push instead
/// of reading at the expiry. Not while the store is down.
async fn sweep_expired(world: Arc<World>) {
    let ttl = world.cfg.ttl;
    loop {
        let mut next = ttl;
        let rows = if world.store_down.load(Ordering::SeqCst) {
            Vec::new()
        } else {
            world.store.list(None).await.unwrap_or_default()
        };
        for r in rows {
            let Some(holder) = r.holder.clone() else {
                continue;
            };
            if !r.remaining.is_zero() {
                next = next.min(r.remaining);
                continue;
            }
            let tenure = Tenure {
                key: r.key.clone(),
                holder,
                term: r.term,
            };
            if world.store.release(&tenure).await.unwrap_or(false) {
                world.announce(&r.key);
            }
        }
        let lag = ttl.mul_f64(world.rng().gen_range(0.0..0.1));
        tokio::time::sleep(next + lag).await;
    }
}

/// Checks the store's own row at a work tick where the elector answered
/// `term`: it must name this elector's holder and that term, unexpired by
/// the store's clock. Read from the shared store directly (no network, no
/// virtual time passes), so this sees every tick, not only those a second
/// candidate's write happens to overlap.
async fn backed_by_the_row(w: &World, el: &Elector, e: usize, cand: &str, inc: u32, term: u64) {
    let Ok(row) = w.store.read(&election_key(e)).await else {
        return;
    };
    let backed = row.as_ref().is_some_and(|r| {
        r.holder.as_deref() == Some(el.holder_id()) && r.term == term && !r.remaining.is_zero()
    });
    if !backed {
        lock(&w.logs[e].unbacked).push(Unbacked {
            cand: cand.to_string(),
            inc,
            term,
            t: w.now_ns(),
            row: format!("{row:?}"),
        });
    }
}

/// A crash: no more calls, no more work, no release (requests already on
/// the wire still land).
fn crash(slot: &mut Slot) {
    if let Some(p) = slot.proc.take() {
        p.net.dead.store(true, Ordering::SeqCst);
        p.net.paused.set(false);
        for t in &p.tasks {
            t.abort();
        }
        drop(p.electors);
    }
}

/// The outcome of one seed.
pub struct Outcome {
    pub report: Report,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// A digest of the whole history (for the determinism check).
    pub digest: u64,
}

impl Outcome {
    pub fn fault_count(&self) -> usize {
        self.faults.values().sum()
    }
}

/// Runs one seed to the end and checks its history.
pub fn run_one(cfg: &SimArgs, seed: u64) -> std::io::Result<Outcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    tenure::seed_thread_rng(Some(seed));
    let out = rt.block_on(simulate(cfg.clone(), seed));
    // The runtime's leftover tasks (campaigns still stepping down) are
    // dropped with it, still on this thread's seeded generator.
    drop(rt);
    tenure::seed_thread_rng(None);
    out
}

async fn simulate(cfg: SimArgs, seed: u64) -> std::io::Result<Outcome> {
    let store_clock = SimClock::new(Duration::from_secs(5_000_000), 1.0);
    let world = Arc::new(World {
        t0: Instant::now(),
        rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0x7e4e_5eed)),
        store: Arc::new(MemoryStore::with_clock(Arc::new(store_clock.clone()))),
        store_clock,
        store_down: AtomicBool::new(false),
        logs: ELECTIONS.iter().map(|_| ElectionLog::default()).collect(),
        push: seed % 2 == 0,
        store_ends_expired: seed % 4 == 2,
        subscribers: Mutex::new(Vec::new()),
        faults: Mutex::new(Vec::new()),
        tenures: Mutex::new(Vec::new()),
        trace: std::env::var_os("SIM_DUMP").map(|_| Mutex::new(Vec::new())),
        cfg: cfg.clone(),
    });
    let mut slots: Vec<Slot> = Vec::new();
    for i in 0..cfg.candidates {
        let rate = if cfg.clock_beyond_bound && i > 0 {
            0.7
        } else {
            within_bound(&world)
        };
        let mut slot = Slot {
            name: format!("c{}", i + 1),
            inc: 0,
            rate,
            proc: None,
            busy_until: Instant::now(),
        };
        start(&world, &mut slot).map_err(std::io::Error::other)?;
        slots.push(slot);
    }
    if world.store_ends_expired {
        tokio::spawn(sweep_expired(world.clone()));
    }
    let start_ns = world.now_ns();
    let end = Instant::now() + cfg.duration;
    let ttl = cfg.ttl;
    let mut restarts: Vec<(Instant, usize)> = Vec::new();
    while Instant::now() < end {
        let gap = ttl.mul_f64(world.rng().gen_range(0.1..0.6));
        tokio::time::sleep(gap).await;
        let now = Instant::now();
        // Restarts that are due.
        let due: Vec<usize> = restarts
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, i)| *i)
            .collect();
        restarts.retain(|(at, _)| *at > now);
        for i in due {
            start(&world, &mut slots[i]).map_err(std::io::Error::other)?;
        }
        nemesis(&world, &mut slots, &mut restarts);
    }
    let end_ns = world.now_ns();
    for s in &mut slots {
        crash(s);
    }
    let faults = std::mem::take(&mut *lock(&world.faults));
    let mut histories = Vec::new();
    let mut reports = Vec::new();
    for log in &world.logs {
        let events = std::mem::take(&mut *lock(&log.events));
        let writes = std::mem::take(&mut *lock(&log.writes));
        let mut r = check_history(&events, &writes, ttl, start_ns, end_ns, &faults, seed);
        for u in std::mem::take(&mut *lock(&log.unbacked)) {
            r.violations.push(crate::check::Violation {
                check: "leader's row",
                message: format!(
                    "{}#{} acted as leader of term {} while the store's row did not grant it: {}",
                    u.cand, u.inc, u.term, u.row
                ),
                at_s: (u.t as f64 - start_ns as f64) / 1e9,
                excerpt: Vec::new(),
            });
        }
        reports.push(r);
        histories.push((events, writes));
    }
    let Some(mut report) = Report::combined(reports, |e| format!("election {}", ELECTIONS[e]))
    else {
        return Err(std::io::Error::other("no elections to simulate"));
    };
    // The checker allows real timers 100 ms of slack; virtual time has none
    // beyond a tick of tokio's timer.
    if report.max_lost_late_ms > SIM_LOST_SLACK_MS {
        report.violations.push(crate::check::Violation {
            check: "loss signal by the deadline",
            message: format!(
                "lost() fired {:.3} ms after the deadline in virtual time (at most {SIM_LOST_SLACK_MS} ms)",
                report.max_lost_late_ms
            ),
            at_s: 0.0,
            excerpt: Vec::new(),
        });
    }
    let mut by_kind = BTreeMap::new();
    for f in &faults {
        *by_kind.entry(f.kind.clone()).or_insert(0) += 1;
    }
    if let Ok(path) = std::env::var("SIM_DUMP") {
        let mut all: Vec<(u64, String)> = Vec::new();
        for (e, (events, writes)) in histories.iter().enumerate() {
            let el = ELECTIONS[e];
            all.extend(events.iter().map(|x| (0, format!("{el} {x:?}"))));
            all.extend(writes.iter().map(|w| (w.t, format!("{el} {w:?}"))));
        }
        all.extend(faults.iter().map(|f| (f.start, format!("{f:?}"))));
        let mut text: Vec<String> = all.into_iter().map(|(_, l)| l).collect();
        if let Some(t) = &world.trace {
            text.extend(lock(t).iter().cloned());
        }
        let _ = std::fs::write(path, text.join("\n"));
    }
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{histories:?}{faults:?}").hash(&mut h);
        h.finish()
    };
    Ok(Outcome {
        report,
        faults: by_kind,
        digest,
    })
}

/// A clock rate inside the 1 % drift bound (slower clocks up to the bound,
/// faster ones by as much; faster is always safe).
fn within_bound(world: &World) -> f64 {
    world.rng().gen_range(0.991..1.01)
}

/// One nemesis step: picks a target (the believer 60 % of the time) and a fault.
fn nemesis(world: &Arc<World>, slots: &mut [Slot], restarts: &mut Vec<(Instant, usize)>) {
    let ttl = world.cfg.ttl;
    let now = Instant::now();
    let leader = slots.iter().position(|s| {
        s.proc
            .as_ref()
            .is_some_and(|p| p.electors.iter().any(Elector::is_leader))
    });
    let (i, kind, span, e) = {
        let mut rng = world.rng();
        let i = match leader {
            Some(l) if rng.gen_bool(0.6) => l,
            _ => rng.gen_range(0..slots.len()),
        };
        let mut kinds = vec![
            "stop",
            "kill",
            "blackhole",
            "store-down",
            "replay",
            "resign",
            "transfer",
            "shutdown",
            "operator",
        ];
        if !world.cfg.clock_beyond_bound {
            kinds.push("clock");
        }
        if world.cfg.store_clock_step {
            kinds.extend(["store-step", "store-step"]);
        }
        let kind = kinds[rng.gen_range(0..kinds.len())];
        let span = ttl.mul_f64(rng.gen_range(0.5..3.0));
        (i, kind, span, rng.gen_range(0..ELECTIONS.len()))
    };
    let slot = &mut slots[i];
    let t = world.now_ns();
    let heal = t + span.as_nanos() as u64;
    match kind {
        "stop" | "kill" | "blackhole" | "clock" | "resign" | "transfer" | "shutdown"
            if slot.busy_until > now || slot.proc.is_none() => {}
        "stop" => {
            let Some(p) = &slot.proc else { return };
            // A stopped process: no calls out, no replies in, no work, and
            // its timers fire only when it runs again.
            p.net.paused.set(true);
            p.clock.set_frozen(true);
            let (net, clock) = (p.net.clone(), p.clock.clone());
            tokio::spawn(async move {
                tokio::time::sleep(span).await;
                clock.set_frozen(false);
                net.paused.set(false);
            });
            slot.busy_until = now + span;
            world.record_fault("stop", &slot.name, t, heal, format!("{span:?}"));
        }
        "kill" => {
            crash(slot);
            let after = Duration::from_millis(world.rng().gen_range(0..1000));
            restarts.push((now + after, i));
            slot.busy_until = now + after;
            world.record_fault(
                "kill",
                &slot.name,
                t,
                t + after.as_nanos() as u64,
                format!("restart after {after:?}"),
            );
        }
        "blackhole" => {
            let Some(p) = &slot.proc else { return };
            p.net.partitioned.set(true);
            let net = p.net.clone();
            tokio::spawn(async move {
                tokio::time::sleep(span).await;
                net.partitioned.set(false);
            });
            slot.busy_until = now + span;
            world.record_fault("blackhole", &slot.name, t, heal, format!("{span:?}"));
        }
        "clock" => {
            let Some(p) = &slot.proc else { return };
            let rate = within_bound(world);
            p.clock.set_rate(rate);
            slot.rate = rate;
            world.record_fault("clock", &slot.name, t, t, format!("rate {rate:.4}"));
        }
        "resign" | "transfer" => {
            let Some(p) = &slot.proc else { return };
            let el = p.electors[e].clone();
            let to = format!("c{}", world.rng().gen_range(1..=world.cfg.candidates));
            let detail = if kind == "resign" {
                tokio::spawn(async move {
                    let _ = el.resign().await;
                });
                String::new()
            } else {
                let to2 = to.clone();
                tokio::spawn(async move {
                    let _ = el.transfer(&to2).await;
                });
                format!("to {to}")
            };
            let detail = format!("{} {detail}", ELECTIONS[e]);
            world.record_fault(kind, &slot.name, t, t, detail);
        }
        "shutdown" => {
            // A graceful stop (release), then a restart: a new incarnation
            // may start while the old one is still releasing.
            let Some(p) = slot.proc.take() else { return };
            tokio::spawn(async move {
                for el in &p.electors {
                    let _ = el.shutdown().await;
                }
                for t in &p.tasks {
                    t.abort();
                }
            });
            let after = Duration::from_millis(world.rng().gen_range(0..1000));
            restarts.push((now + after, i));
            slot.busy_until = now + after;
            world.record_fault(
                "shutdown",
                &slot.name,
                t,
                t + after.as_nanos() as u64,
                format!("restart after {after:?}"),
            );
        }
        "store-down" => {
            if world.store_down.swap(true, Ordering::SeqCst) {
                return;
            }
            let span = span / 3;
            let w = world.clone();
            tokio::spawn(async move {
                tokio::time::sleep(span).await;
                w.store_down.store(false, Ordering::SeqCst);
                // Back as after a restart, with every committed write: the
                // push channels reopen.
                w.reopen_channels();
            });
            world.record_fault(
                "store-down",
                "store",
                t,
                t + span.as_nanos() as u64,
                format!("{span:?}"),
            );
        }
        "store-step" => {
            let by = ttl / 2;
            world.store_clock.step(by);
            world.record_fault("store-step", "store", t, t, format!("store clock +{by:?}"));
        }
        "replay" => replay(world, e, t),
        "operator" => operator(world, e, t),
        _ => {}
    }
}

/// Replays a renew and a release of a stale tenure straight at the store,
/// as a statement delayed in the network would arrive; a stale tenure is
/// one whose term is below the row's current term.
fn replay(world: &Arc<World>, e: usize, t: u64) {
    let key = election_key(e);
    let w = world.clone();
    tokio::spawn(async move {
        let Ok(Some(row)) = w.store.read(&key).await else {
            return;
        };
        let stale: Vec<Tenure> = lock(&w.tenures)
            .iter()
            .filter(|x| x.key == key && x.term < row.term)
            .cloned()
            .collect();
        if stale.is_empty() {
            return;
        }
        let pick = stale[w.rng().gen_range(0..stale.len())].clone();
        let renewed = w.store.renew(&pick, w.cfg.ttl).await.unwrap_or(false);
        let released = w.store.release(&pick).await.unwrap_or(false);
        let detail = format!(
            "stale term {} of {} (current {}): renew {}, release {}",
            pick.term,
            pick.holder,
            row.term,
            if renewed { "ACCEPTED" } else { "refused" },
            if released { "ACCEPTED" } else { "refused" },
        );
        w.record_fault("replay", "store", t, t, detail);
    });
}

/// `tenure resign` or `tenure transfer` run by an operator on another
/// machine: a hand-over request written on the lease of election `e`, which
/// the leader hears by push or by its next renewal failing.
fn operator(world: &Arc<World>, e: usize, t: u64) {
    let key = election_key(e);
    let to = world.rng().gen_range(0..=world.cfg.candidates);
    let w = world.clone();
    tokio::spawn(async move {
        let store: tenure::store::DynStore = w.store.clone();
        let (asked, done) = if to == 0 {
            (
                "resign".to_string(),
                tenure::handover::resign(&store, &key).await,
            )
        } else {
            let target = format!("c{to}");
            let window = w.cfg.ttl * 3;
            let done = tenure::handover::transfer(&store, &key, &target, window).await;
            (format!("transfer to {target}"), done)
        };
        if done.is_ok() {
            w.announce(&key);
        }
        let detail = format!(
            "{} {asked}: {}",
            ELECTIONS[e],
            done.map_or_else(|err| err.to_string(), |r| format!("term {} marked", r.term))
        );
        w.record_fault("operator", "store", t, t, detail);
    });
}

/// What a sweep found so far, shared by its threads.
#[derive(Default)]
struct Sweep {
    runs: u64,
    faults: usize,
    acquisitions: usize,
    by_kind: BTreeMap<String, usize>,
    /// The latest `lost()` fired after its deadline, in any seed (ms).
    max_lost_late_ms: f64,
    /// The lowest seed that showed a violation.
    failed: Option<u64>,
    error: Option<std::io::Error>,
}

impl Sweep {
    /// Adds one seed's outcome; true when the sweep should stop (a violation).
    fn add(&mut self, cfg: &SimArgs, seed: u64, out: &Outcome) -> bool {
        self.runs += 1;
        self.faults += out.fault_count();
        self.acquisitions += out.report.acquisitions;
        self.max_lost_late_ms = self.max_lost_late_ms.max(out.report.max_lost_late_ms);
        for (k, n) in &out.faults {
            *self.by_kind.entry(k.clone()).or_default() += n;
        }
        if cfg.seed.is_some() || !out.report.violations.is_empty() {
            print_seed(cfg, seed, out);
        }
        if out.report.violations.is_empty() {
            return false;
        }
        self.failed = Some(self.failed.map_or(seed, |f| f.min(seed)));
        true
    }
}

/// `tenure-chaos sim`: runs the sweep (or one seed) and says whether it passed.
pub fn main(cfg: SimArgs) -> ExitCode {
    if let Some(bug) = &cfg.bug {
        if !tenure::chaos_bugs_compiled_in() {
            eprintln!(
                "tenure-chaos sim: --bug needs a build with the deliberate bugs: \
                 RUSTFLAGS=\"--cfg tenure_chaos_bugs\" cargo build -p tenure-chaos --target-dir target/chaos-bugs"
            );
            return ExitCode::from(2);
        }
        // Read once, at the first check, by tenure's bugs module.
        std::env::set_var("TENURE_CHAOS_BUG", bug);
    }
    let expect = cfg.expect_violations();
    let seeds: Box<dyn Iterator<Item = u64> + Send> = match cfg.seed {
        Some(s) => Box::new(std::iter::once(s)),
        None => Box::new((0..cfg.seeds).map(|i| cfg.first_seed.wrapping_add(i))),
    };
    // Seeds are independent (each has its own runtime and seeded generator),
    // so a plain sweep runs them on every core: its budget is wall time. A
    // self-check stays on one thread, so that "caught at run N" is exact.
    let threads = if cfg.seed.is_none() && !expect {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    };
    let wall = std::time::Instant::now();
    let seeds = Mutex::new(seeds);
    let sweep = Mutex::new(Sweep::default());
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed)
                    && (cfg.seed.is_some() || wall.elapsed() < cfg.budget)
                {
                    let next = lock(&seeds).next();
                    let Some(seed) = next else { break };
                    let out = run_one(&cfg, seed);
                    let mut sweep = lock(&sweep);
                    match out {
                        Ok(out) => {
                            if sweep.add(&cfg, seed, &out) {
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                        Err(e) => {
                            sweep.error = Some(e);
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let Sweep {
        runs,
        faults,
        acquisitions,
        by_kind,
        max_lost_late_ms,
        failed,
        error,
    } = sweep.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = error {
        eprintln!("tenure-chaos sim: cannot start a runtime: {e}");
        return ExitCode::from(2);
    }
    let secs = wall.elapsed().as_secs_f64();
    let cpu = cpu_seconds();
    println!(
        "simulated {runs} seed(s) × {:?} in {secs:.1} s ({cpu:.1} s of CPU): {faults} faults injected \
         ({:.0} per minute, {:.0} per CPU minute), {acquisitions} acquisitions",
        cfg.duration,
        faults as f64 * 60.0 / secs.max(1e-9),
        faults as f64 * 60.0 / cpu.max(1e-9),
    );
    println!("faults by kind: {by_kind:?}");
    println!("lost() fired at most {max_lost_late_ms:.3} ms after its deadline");
    match (expect, failed) {
        (false, None) => {
            println!("RESULT: ok, no violations");
            ExitCode::SUCCESS
        }
        (true, Some(seed)) => {
            println!("RESULT: ok, the expected violations were caught (seed {seed}, run {runs})");
            ExitCode::SUCCESS
        }
        (false, Some(seed)) => {
            println!(
                "RESULT: FAILED, violations at seed {seed}; reproduce: {}",
                cfg.reproduce(seed)
            );
            ExitCode::from(1)
        }
        (true, None) => {
            println!("RESULT: FAILED, the broken setting passed {runs} seed(s)");
            ExitCode::from(1)
        }
    }
}

/// This process's CPU time so far (user + system): on a shared machine the
/// wall-clock rate says more about the neighbours than about the simulation.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF is always valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn print_seed(cfg: &SimArgs, seed: u64, out: &Outcome) {
    let r = &out.report;
    println!(
        "seed {seed}: {} faults, {} acquisitions, {} writes ({} refused by the fence), {} violation(s), history digest {:016x}",
        out.fault_count(),
        r.acquisitions,
        r.writes,
        r.rejected_writes,
        r.violations.len(),
        out.digest
    );
    for v in r.violations.iter().take(3) {
        println!(
            "\nVIOLATION [{}] at {:+.3}s: {}",
            v.check, v.at_s, v.message
        );
        for l in v.excerpt.iter().rev().take(40).rev() {
            println!("    {l}");
        }
    }
    if !r.violations.is_empty() {
        println!("\nreproduce: {}", cfg.reproduce(seed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short() -> SimArgs {
        let mut a = SimArgs::default_values();
        a.duration = Duration::from_secs(20);
        a
    }

    #[test]
    fn one_seed_replays_exactly() {
        let cfg = short();
        let a = run_one(&cfg, 42).expect("runs");
        let b = run_one(&cfg, 42).expect("runs");
        assert!(a.fault_count() > 50, "faults were injected: {:?}", a.faults);
        assert!(a.report.acquisitions > 1, "leadership moved");
        assert_eq!(a.digest, b.digest, "same seed, same history");
        let c = run_one(&cfg, 43).expect("runs");
        assert_ne!(a.digest, c.digest, "another seed, another history");
    }

    #[test]
    fn a_few_seeds_keep_every_property() {
        let cfg = short();
        for seed in 1..=5 {
            let out = run_one(&cfg, seed).expect("runs");
            assert!(
                out.report.violations.is_empty(),
                "seed {seed}: {:?}\nreproduce: {}",
                out.report.violations,
                cfg.reproduce(seed)
            );
        }
    }

    #[test]
    fn beyond_the_drift_bound_is_caught() {
        let mut cfg = short();
        cfg.clock_beyond_bound = true;
        let caught = (1..=20).any(|seed| {
            !run_one(&cfg, seed)
                .expect("runs")
                .report
                .violations
                .is_empty()
        });
        assert!(
            caught,
            "clocks at 0.7× the store's rate broke nothing in 20 seeds"
        );
    }
}
