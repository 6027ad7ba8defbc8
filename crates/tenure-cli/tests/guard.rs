//! The job never outlives its lease, whatever happens to `tenure run` itself:
//! stopped (SIGSTOP, Ctrl-Z), blocked on a full stderr pipe, SIGKILLed while
//! the job is a set-id program that PR_SET_PDEATHSIG does not cover, or frozen
//! together with the job past its deadline. Real processes, real signals, real
//! servers (SQLite, MariaDB, PostgreSQL).

mod common;

use common::parent_of;

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{alive, postgres_behind_a_proxy, read_pid, wait_until, Proxy, BIN};

/// The binary under test; `TENURE_TEST_BIN` points these tests at another
/// build (for example an older one, to see them fail without the guard).
fn bin() -> String {
    std::env::var("TENURE_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tenure::store::{DynStore, ElectionKey, LeaseStoreExt, StoreOptions};
use tenure_testsupport::servers;

/// Tests whose assertions are latencies of a few milliseconds run one at a
/// time, so they measure the guard, not the other tests on two cores.
static TIMED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Copy, Debug)]
enum Kind {
    Sqlite,
    Mariadb,
    Postgres,
}

/// A store for one test: its URL and a client for checks.
struct TestStore {
    url: String,
    client: DynStore,
}

async fn store(kind: Kind, dir: &Path) -> Option<TestStore> {
    let url = match kind {
        Kind::Sqlite => format!("sqlite://{}", dir.join("t.db").display()),
        Kind::Mariadb => servers::mysql_url(),
        Kind::Postgres => servers::postgres_url(),
    };
    let client = servers::connect_or_skip(&url, &StoreOptions::default()).await?;
    Some(TestStore { url, client })
}

fn election(prefix: &str) -> String {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id();
    format!("{prefix}-{n:x}")
}

/// `tenure run` in a process group of its own (as a shell job would be), so
/// the test can stop the group without stopping itself.
fn spawn_run(dir: &Path, url: &str, election: &str, id: &str, script: &str) -> Child {
    spawn_run_with(dir, url, election, id, script, |_| {})
}

fn spawn_run_with(
    dir: &Path,
    url: &str,
    election: &str,
    id: &str,
    script: &str,
    configure: impl FnOnce(&mut Command),
) -> Child {
    spawn_run_ttl(dir, url, election, id, "2s", script, configure)
}

/// [`spawn_run_with`] with a TTL other than 2 s.
fn spawn_run_ttl(
    dir: &Path,
    url: &str,
    election: &str,
    id: &str,
    ttl: &str,
    script: &str,
    configure: impl FnOnce(&mut Command),
) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args([
        "run",
        "--store",
        url,
        "--election",
        election,
        "--ttl",
        ttl,
        "--id",
        id,
    ])
    .current_dir(dir)
    .env_remove("TENURE_STORE")
    .env("TENURE_LOG", "info")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())
    .process_group(0);
    // Flags the test adds come before the command.
    configure(&mut cmd);
    cmd.args(["--", "sh", "-c", script]);
    cmd.spawn().expect("spawn tenure run")
}

/// Lines "start TERM PID" that the jobs append to `events`.
fn starts(dir: &Path) -> Vec<(u64, i32)> {
    common::starts(&dir.join("events"))
}

async fn next_start(dir: &Path, seen: usize, what: &str) -> (u64, i32) {
    let start = Instant::now();
    loop {
        let s = starts(dir);
        if s.len() > seen {
            return s[s.len() - 1];
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}\nevents:\n{}\n{}",
            std::fs::read_to_string(dir.join("events")).unwrap_or_default(),
            logs(dir)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Candidate a leads (its job started), then candidate b joins as a live
/// member; returns both and a's first start.
async fn a_leads_and_b_waits(
    d: &Path,
    s: &TestStore,
    prefix: &str,
    job: &str,
) -> ([Child; 2], (u64, i32)) {
    let name = election(prefix);
    let a = spawn_run(d, &s.url, &name, "a", job);
    let first = next_start(d, 0, "a's job to start").await;
    let b = spawn_run(d, &s.url, &name, "b", job);
    let key = ElectionKey::new("default", name);
    let joined = Instant::now();
    while s
        .client
        .members(&key)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.live)
        .count()
        < 2
    {
        assert!(joined.elapsed() < Duration::from_secs(10), "b joins");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ([a, b], first)
}

fn stop_all(procs: &mut [Child]) {
    for p in procs {
        let _ = killpg(Pid::from_raw(p.id() as i32), Signal::SIGCONT);
        let _ = kill(Pid::from_raw(p.id() as i32), Signal::SIGKILL);
        let _ = p.wait();
    }
}

fn logs(dir: &Path) -> String {
    let mut out = String::new();
    for id in ["a", "b"] {
        if let Ok(l) = std::fs::read_to_string(dir.join(format!("{id}.log"))) {
            out += &format!("--- {id}.log\n{l}");
        }
    }
    out
}

/// The job holds an exclusive flock while it lives; a job that cannot get it
/// records a VIOLATION: two jobs alive at once, caught exactly.
const FLOCK_JOB: &str =
    "exec 9>>lock; if ! flock -n 9; then echo VIOLATION >> events; exit 1; fi; \
                         echo \"start $TENURE_TERM $$\" >> events; exec sleep 1000";

/// SIGSTOP of the leader's `tenure` alone, then SIGTSTP (Ctrl-Z) of the other
/// leader's whole process group, each for over 3 s with a 2 s TTL: the guard
/// kills the job at the deadline, the other replica takes over, and no two jobs
/// are ever alive at once. The stopped tenure, resumed, campaigns again.
async fn stopped_tenure_never_leaves_two_jobs_running(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(s) = store(kind, d).await else {
        return;
    };
    let (mut procs, (t1, job1)) = a_leads_and_b_waits(d, &s, "stopped", FLOCK_JOB).await;

    // 1. SIGSTOP of tenure alone (its job is in other process groups).
    let a_pid = Pid::from_raw(procs[0].id() as i32);
    let gone_after = stop_for_3s(
        || kill(a_pid, Signal::SIGSTOP).unwrap(),
        || kill(a_pid, Signal::SIGCONT).unwrap(),
        job1,
    )
    .await;
    let (t2, job2) = next_start(d, 1, "b's job after a was stopped").await;
    assert!(t2 > t1);

    // 2. Ctrl-Z: SIGTSTP to the leader's (b's) whole process group.
    let b_group = Pid::from_raw(procs[1].id() as i32);
    stop_for_3s(
        || killpg(b_group, Signal::SIGTSTP).unwrap(),
        || killpg(b_group, Signal::SIGCONT).unwrap(),
        job2,
    )
    .await;
    let (t3, _) = next_start(d, 2, "a's job after b was stopped").await;
    assert!(t3 > t2);
    // Both tenures resumed and keep campaigning: neither exited.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for p in &mut procs {
        assert!(
            p.try_wait().unwrap().is_none(),
            "tenure keeps running after SIGCONT\n{}",
            logs(d)
        );
    }
    stop_all(&mut procs);
    let events = std::fs::read_to_string(d.join("events")).unwrap();
    assert!(
        !events.contains("VIOLATION"),
        "two jobs ran at once ({kind:?}):\n{events}\n{}",
        logs(d)
    );
    eprintln!(
        "{kind:?}: a stopped tenure's job was killed by its guard {gone_after:?} after SIGSTOP (ttl 2 s)"
    );
}

/// Stops a leader's tenure for 3 s (ttl 2 s): its job must be gone within
/// the TTL of the stop, killed by the guard while tenure is still stopped.
/// (The stopped process may hold a store lock, SQLite's for one, so the
/// takeover itself is only awaited after SIGCONT.)
async fn stop_for_3s(stop: impl FnOnce(), cont: impl FnOnce(), job: i32) -> Duration {
    stop();
    let stopped = Instant::now();
    while alive(job) && stopped.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let gone_after = stopped.elapsed();
    assert!(
        gone_after < Duration::from_secs(2),
        "the stopped tenure's job was still alive {gone_after:?} after the stop (ttl 2 s)"
    );
    tokio::time::sleep(Duration::from_secs(3).saturating_sub(stopped.elapsed())).await;
    cont();
    gone_after
}

#[tokio::test]
async fn stopped_tenure_never_leaves_two_jobs_running_sqlite() {
    stopped_tenure_never_leaves_two_jobs_running(Kind::Sqlite).await;
}

#[tokio::test]
async fn stopped_tenure_never_leaves_two_jobs_running_mariadb() {
    stopped_tenure_never_leaves_two_jobs_running(Kind::Mariadb).await;
}

#[tokio::test]
async fn stopped_tenure_never_leaves_two_jobs_running_postgres() {
    stopped_tenure_never_leaves_two_jobs_running(Kind::Postgres).await;
}

/// A copy of `sleep` that is set-group-id to `nogroup`: exec'ing it changes
/// the effective group, so the kernel clears PR_SET_PDEATHSIG (prctl(2)).
/// `None` when this user cannot make one (not root).
fn setgid_sleep(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("sleep-sgid");
    std::fs::copy("/bin/sleep", &path).ok()?;
    std::os::unix::fs::chown(&path, None, Some(65534)).ok()?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o2755)).ok()?;
    let mode = std::fs::metadata(&path).ok()?.permissions().mode();
    (mode & 0o2000 != 0).then_some(path)
}

/// Whether this process could make a cgroup v2 of its own (the guard's case).
fn cgroup_v2_writable() -> bool {
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            (right.split(' ').next()? == "cgroup2")
                .then(|| left.split(' ').nth(4).map(PathBuf::from))?
        });
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string));
    let (Some(mount), Some(own)) = (mount, own) else {
        eprintln!("NOTE: no cgroup v2 here; testing the process-group fallback instead");
        return false;
    };
    let probe = mount
        .join(own.trim_start_matches('/'))
        .join(format!("tenure-test-probe-{}", std::process::id()));
    let ok = std::fs::create_dir(&probe).is_ok() && probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if !ok {
        eprintln!(
            "NOTE: cgroup v2 is not writable here; testing the process-group fallback instead"
        );
    }
    ok
}

/// How the guard puts the job in a cgroup of its own.
#[derive(Clone, Copy, Debug, PartialEq)]
enum JobCgroup {
    /// Born in it: clone3(CLONE_INTO_CGROUP), the default.
    Born,
    /// Moved in before exec by a write to `cgroup.procs` (the fallback where
    /// clone3 cannot be used; `TENURE_JOB_CLONE3=0`).
    Joined,
    /// None (`TENURE_JOB_CGROUP=0`): process group + subreaper.
    No,
}

/// SIGKILL of `tenure run` while the job is a set-gid program (no parent-death
/// signal), with a grandchild in its process group and one that left it with
/// `setsid`: nothing of the job remains within 100 ms. Run with the job's own
/// cgroup (started in it by clone3, or moved in) and without it. With a
/// cgroup, the job and both children are checked to be in it.
async fn killed_tenure_leaves_nothing_behind(kind: Kind, mode: JobCgroup) {
    let _serial = TIMED.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(s) = store(kind, d).await else {
        return;
    };
    let sgid = setgid_sleep(d);
    if sgid.is_none() {
        assert!(
            !servers::required(),
            "CI runs as root and must test a set-gid job"
        );
        eprintln!("SKIPPED part: cannot make a set-gid program here (not root); testing grandchildren only");
    }
    let last = match &sgid {
        Some(p) => format!("exec {} 1000", p.display()),
        None => "exec sleep 1000".to_string(),
    };
    let script = format!(
        "sleep 1000 & echo $! > grandchild.pid; setsid sleep 1000 & echo $! > escaped.pid; \
         echo $$ > job.pid; {last}"
    );
    let cgroup = mode != JobCgroup::No && cgroup_v2_writable();
    let mut t = spawn_run_with(d, &s.url, &election("killed"), "a", &script, |c| {
        if !cgroup {
            c.env("TENURE_JOB_CGROUP", "0");
        }
        if mode == JobCgroup::Joined {
            c.env("TENURE_JOB_CLONE3", "0");
        }
    });
    let pids: Vec<i32> = wait_until("the job and its children", Duration::from_secs(15), || {
        let p: Vec<i32> = ["job.pid", "grandchild.pid", "escaped.pid"]
            .iter()
            .filter_map(|f| read_pid(&d.join(f)))
            .collect();
        (p.len() == 3 && p.iter().all(|p| alive(*p))).then_some(p)
    })
    .await;
    // The job's exec of the set-gid program has happened once its comm says so.
    if sgid.is_some() {
        wait_until("the set-gid exec", Duration::from_secs(5), || {
            std::fs::read_to_string(format!("/proc/{}/comm", pids[0]))
                .ok()
                .filter(|c| c.trim() == "sleep-sgid")
        })
        .await;
    }
    // "leader: command started ... cgroup=BOOL" is logged right after the start.
    let started = wait_until("the start to be logged", Duration::from_secs(5), || {
        let log = std::fs::read_to_string(d.join("a.log")).unwrap_or_default();
        log.contains("command started").then_some(log)
    })
    .await;
    assert!(
        started.contains(&format!("cgroup={cgroup}")),
        "the job is {}in a cgroup:\n{started}",
        if cgroup { "" } else { "not " }
    );
    if cgroup {
        // The guard makes a cgroup per job: tenure-job-<guard pid>-<n>.
        let guard = parent_of(pids[0]).expect("the job's parent is the guard");
        let want = format!("/tenure-job-{guard}-");
        for p in &pids {
            let cg = std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
            let v2 = cg.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("");
            assert!(v2.contains(&want), "{p} is in {v2:?}, not in {want}N");
        }
    }
    kill(Pid::from_raw(t.id() as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    let _ = t.wait();
    let left = loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || killed.elapsed() > Duration::from_secs(5) {
            break left;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let took = killed.elapsed();
    for p in &left {
        let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
    }
    assert!(
        left.is_empty(),
        "still alive 5 s after tenure was SIGKILLed: {left:?}"
    );
    eprintln!("{kind:?} {mode:?} cgroup={cgroup}: job, grandchild and setsid'd child gone {took:?} after SIGKILL of tenure");
    // Typically 2 ms; the bound leaves room for a busy machine's scheduling
    // (a guard that waited for the lease instead would take seconds).
    assert!(took <= Duration::from_millis(250), "took {took:?}");
}

#[tokio::test]
async fn killed_tenure_leaves_nothing_behind_sqlite_cgroup() {
    killed_tenure_leaves_nothing_behind(Kind::Sqlite, JobCgroup::Born).await;
}

#[tokio::test]
async fn killed_tenure_leaves_nothing_behind_sqlite_cgroup_joined_by_write() {
    killed_tenure_leaves_nothing_behind(Kind::Sqlite, JobCgroup::Joined).await;
}

#[tokio::test]
async fn killed_tenure_leaves_nothing_behind_sqlite_process_group_and_subreaper() {
    killed_tenure_leaves_nothing_behind(Kind::Sqlite, JobCgroup::No).await;
}

#[tokio::test]
async fn killed_tenure_leaves_nothing_behind_mariadb() {
    killed_tenure_leaves_nothing_behind(Kind::Mariadb, JobCgroup::Born).await;
}

#[tokio::test]
async fn killed_tenure_leaves_nothing_behind_postgres() {
    killed_tenure_leaves_nothing_behind(Kind::Postgres, JobCgroup::No).await;
}

/// Cuts the store off from `tenure run`: a blackholed TCP proxy for the
/// servers; for SQLite, an exclusive transaction that blocks every write.
enum Cut {
    Proxy(Proxy),
    SqliteLock(sqlx::SqliteConnection),
}

/// stderr of `tenure run` is a pipe nobody reads, filled to the brim, with
/// trace logging; the store is then cut. Logging cannot block the deadline:
/// the job is killed before the lease can expire for anyone else.
async fn blocked_stderr_cannot_delay_the_kill(kind: Kind) {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(s) = store(kind, d).await else {
        return;
    };
    let name = election("stderr");
    let (url, mut cut) = match kind {
        Kind::Sqlite => (s.url.clone(), None),
        Kind::Mariadb | Kind::Postgres => {
            let (proxy, via) = Proxy::in_front_of(&s.url).await.expect("start the proxy");
            (via, Some(Cut::Proxy(proxy)))
        }
    };
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    let mut t = Command::new(bin())
        .args([
            "run",
            "--store",
            &url,
            "--election",
            &name,
            "--ttl",
            "2s",
            "--exit-on-loss",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo $$ > job.pid; while :; do sleep 0.05; done",
        ])
        .current_dir(d)
        .env("TENURE_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(write_end.try_clone().unwrap()))
        .process_group(0)
        .spawn()
        .unwrap();
    let job = wait_until("the job to start", Duration::from_secs(15), || {
        read_pid(&d.join("job.pid"))
    })
    .await;
    // Fill the pipe through a file description of our own (O_NONBLOCK would
    // otherwise be shared with tenure's stderr).
    {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let mut own = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(format!("/proc/self/fd/{}", write_end.as_raw_fd()))
            .unwrap();
        let chunk = [b'x'; 4096];
        while own.write(&chunk).is_ok() {}
    }
    drop(write_end);
    let expiry_before_cut = s
        .client
        .read(&ElectionKey::new("default", name.clone()))
        .await
        .unwrap()
        .unwrap()
        .expires_at_us;
    match &mut cut {
        Some(Cut::Proxy(p)) => p.set_blackhole(true),
        _ => {
            let mut c =
                sqlx::SqliteConnection::connect(&format!("sqlite://{}", d.join("t.db").display()))
                    .await
                    .unwrap();
            sqlx::query("BEGIN EXCLUSIVE")
                .execute(&mut c)
                .await
                .unwrap();
            cut = Some(Cut::SqliteLock(c));
        }
    }
    wait_until("the job to be killed", Duration::from_secs(10), || {
        (!alive(job)).then_some(())
    })
    .await;
    let died_at_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    if let Some(Cut::SqliteLock(mut c)) = cut.take() {
        sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
    }
    // The last renewal before the cut set the expiry; same host, same clock.
    // Once the cut heals, tenure frees the lease (the job is gone), and a
    // release records its own time as the expiry: then the expiry read
    // before the cut, never later than the one in force, stands.
    let rec = s
        .client
        .read(&ElectionKey::new("default", name))
        .await
        .unwrap()
        .unwrap();
    let expiry_us = if rec.holder.is_some() {
        assert!(rec.expires_at_us >= expiry_before_cut);
        rec.expires_at_us
    } else {
        expiry_before_cut
    };
    let margin_ms = (expiry_us - died_at_us) as f64 / 1000.0;
    let _ = kill(Pid::from_raw(t.id() as i32), Signal::SIGKILL);
    let _ = t.wait();
    drop(read_end);
    assert!(
        margin_ms > 0.0,
        "{kind:?}: the job died {:.1} ms AFTER the lease expired",
        -margin_ms
    );
    eprintln!("{kind:?}: with stderr blocked, the job was killed {margin_ms:.1} ms before the lease expired");
}

#[tokio::test]
async fn blocked_stderr_cannot_delay_the_kill_sqlite() {
    blocked_stderr_cannot_delay_the_kill(Kind::Sqlite).await;
}

#[tokio::test]
async fn blocked_stderr_cannot_delay_the_kill_mariadb() {
    blocked_stderr_cannot_delay_the_kill(Kind::Mariadb).await;
}

#[tokio::test]
async fn blocked_stderr_cannot_delay_the_kill_postgres() {
    blocked_stderr_cannot_delay_the_kill(Kind::Postgres).await;
}

/// tenure, the guard and the job are all stopped (a frozen VM, a stopped
/// container, `kill -STOP` of every group) until another replica has taken
/// over; after SIGCONT the job must be killed within 50 ms. That gap is the
/// stale window nothing local can close (fencing covers it: see docs/cli.md).
async fn frozen_tree_is_killed_right_after_sigcont(kind: Kind) {
    let _serial = TIMED.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some(s) = store(kind, d).await else {
        return;
    };
    let job = "echo \"start $TENURE_TERM $$\" >> events; exec sleep 1000";
    let (mut procs, (t1, job1)) = a_leads_and_b_waits(d, &s, "frozen", job).await;
    let guard = parent_of(job1).expect("the job's parent is the guard");
    let groups = [procs[0].id() as i32, guard, job1].map(Pid::from_raw);
    for g in groups {
        killpg(g, Signal::SIGSTOP).unwrap();
    }
    // Frozen for longer than the TTL: a's lease has expired for b. (A frozen
    // tenure may hold a store lock, SQLite's for one, so b's takeover is
    // checked after the thaw.)
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(alive(job1), "a stopped job still exists");
    // Worst order: the job wakes first.
    for g in groups.iter().rev() {
        killpg(*g, Signal::SIGCONT).unwrap();
    }
    let resumed = Instant::now();
    while alive(job1) && resumed.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(100));
    }
    let stale = resumed.elapsed();
    let (t2, _) = next_start(d, 1, "b to take over").await;
    assert!(t2 > t1);
    stop_all(&mut procs);
    eprintln!("{kind:?}: stale window after SIGCONT of the frozen tree: {stale:?}");
    assert!(
        // Typically 2 ms: room for a busy machine's scheduling.
        stale <= Duration::from_millis(150),
        "{kind:?}: job still alive {stale:?} after SIGCONT\n{}",
        logs(d)
    );
}

#[tokio::test]
async fn frozen_tree_is_killed_right_after_sigcont_sqlite() {
    frozen_tree_is_killed_right_after_sigcont(Kind::Sqlite).await;
}

#[tokio::test]
async fn frozen_tree_is_killed_right_after_sigcont_mariadb() {
    frozen_tree_is_killed_right_after_sigcont(Kind::Mariadb).await;
}

#[tokio::test]
async fn frozen_tree_is_killed_right_after_sigcont_postgres() {
    frozen_tree_is_killed_right_after_sigcont(Kind::Postgres).await;
}

/// `--restart` starts a job only with more lease left than the kill grace:
/// with the store cut, a job that exits shortly before the last kill-grace of
/// the lease begins is not started again after the restart back-off (it could
/// not be given its SIGTERM grace); the tenure ends instead. Before the fix,
/// the restart came with under a second left and the job was stopped at once.
#[tokio::test]
async fn restart_waits_for_enough_lease_for_the_kill_grace() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let url = format!("sqlite://{}", d.join("t.db").display());
    let name = election("restart");
    // The first two jobs exit at once, so the restart back-off grows to
    // 400 ms (100, 200, then 400); the third waits for the `go` file.
    let script = "echo \"start $TENURE_TERM $$\" >> events; \
                  [ \"$(wc -l < events)\" -lt 3 ] && exit 1; \
                  while [ ! -e go ]; do sleep 0.01; done; exit 1";
    let mut t = spawn_run_with(d, &url, &name, "a", script, |c| {
        c.args([
            "--renew-period",
            "100ms",
            "--kill-grace",
            "1s",
            "--restart",
            "--exit-on-loss",
        ]);
    });
    let (term, _) = next_start(d, 2, "the third job").await;
    let mut lock = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut lock)
        .await
        .unwrap();
    let cut = Instant::now();
    // ttl 2 s renewed every 100 ms: tenure's deadline D is between ~1.78 s
    // and ~1.93 s after the cut, and it stops the job at D - 1 s. The job
    // exits 0.65 s after the cut, before that; the restart would come
    // 400 ms later, after D - 1 s: too little lease left to start a job.
    tokio::time::sleep_until((cut + Duration::from_millis(650)).into()).await;
    std::fs::write(d.join("go"), "").unwrap();
    let status = wait_until("tenure to exit on loss", Duration::from_secs(10), || {
        t.try_wait().unwrap()
    })
    .await;
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    let starts = starts(d);
    assert_eq!(
        starts.len(),
        3,
        "a job was started again with less lease left than its kill grace \
         (term {term}); starts: {starts:?}\n{}",
        logs(d)
    );
    assert_eq!(status.code(), Some(3), "{}", logs(d));
}

/// The job of the lease tests: records its start and a SIGTERM in `events`.
const TERM_RECORDING_JOB: &str = "trap 'echo \"term $TENURE_TERM $$\" >> events; exit 0' TERM; \
     echo \"start $TENURE_TERM $$\" >> events; while :; do sleep 0.05; done";

/// The FIRST job of a tenure also waits for enough lease, as restarts do:
/// when the acquisition's answer comes back slowly (a proxy in front of
/// PostgreSQL delays each direction by 150 ms; with sqlx's ping before each
/// query the acquisition takes ~0.6 s, and the margin is then its cap of
/// ttl/4), a 4 s tenure starts with about 4 × 0.99 − 1 − 0.6 = 2.36 s left,
/// less than the 2.7 s kill grace. The job must not start then (it would be
/// stopped at once, without its grace, and the tenure resigned); it starts
/// after the first renewal (the proxy is fast again by then, ~3 s left) and
/// keeps running under the same term.
#[tokio::test]
async fn first_spawn_waits_for_enough_lease_for_the_kill_grace() {
    let _timed = TIMED.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some((_, proxy, url)) = postgres_behind_a_proxy(None).await else {
        return;
    };
    let s = store(Kind::Postgres, d).await.expect("PostgreSQL answered");
    let name = election("first-spawn");
    let key = ElectionKey::new("default", name.clone());
    // A holder that is not a member holds the lease for 3 s, so `a` starts,
    // registers and follows before it can acquire.
    let ghost = tenure::store::Claim {
        key: key.clone(),
        holder: "ghost#1".into(),
        metadata: String::new(),
        ttl: Duration::from_secs(3),
    };
    assert!(matches!(
        s.client.try_acquire(&ghost).await.unwrap(),
        tenure::store::Acquire::Acquired(_)
    ));
    let mut t = spawn_run_ttl(d, &url, &name, "a", "4s", TERM_RECORDING_JOB, |c| {
        c.args(["--renew-period", "100ms", "--kill-grace", "2700ms"]);
    });
    let spawned = Instant::now();
    while !s
        .client
        .members(&key)
        .await
        .unwrap()
        .iter()
        .any(|m| m.identity == "a" && m.live)
    {
        assert!(
            spawned.elapsed() < Duration::from_secs(10),
            "a registers\n{}",
            logs(d)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set_delay(Duration::from_millis(150));
    let held = s.client.read(&key).await.unwrap().unwrap();
    assert!(
        held.holder.as_deref() == Some("ghost#1") && held.remaining > Duration::from_millis(500),
        "the ghost's lease must outlast turning the delay on: {held:?}"
    );
    // Once a's acquisition is committed (its answer still in the proxy),
    // later traffic is fast again.
    let term = loop {
        let rec = s.client.read(&key).await.unwrap().unwrap();
        if rec.holder.as_deref().is_some_and(|h| h.starts_with("a#")) {
            break rec.term;
        }
        assert!(
            rec.term == held.term,
            "someone else acquired: {rec:?}\n{}",
            logs(d)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    proxy.set_delay(Duration::ZERO);
    let (started_term, job) = next_start(d, 0, "a's job").await;
    assert_eq!(started_term, term, "{}", logs(d));
    // Watch it for 1.5 s (15 renew periods): one job, never stopped, one term.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(1500) {
        let events = std::fs::read_to_string(d.join("events")).unwrap_or_default();
        assert!(
            !events.contains("term ") && starts(d).len() == 1 && alive(job),
            "the first job was started with less lease left than its kill grace \
             and stopped at once:\n{events}\n{}",
            logs(d)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rec = s.client.read(&key).await.unwrap().unwrap();
    assert_eq!(rec.term, term, "the tenure went on: {rec:?}\n{}", logs(d));
    let _ = kill(Pid::from_raw(t.id() as i32), Signal::SIGTERM);
    let _ = t.wait();
}

/// `tenure status --json --history 10` for one election.
fn status_json(dir: &Path, url: &str, election: &str) -> serde_json::Value {
    let out = common::tenure(
        dir,
        &[
            "status",
            "--store",
            url,
            "--election",
            election,
            "--json",
            "--history",
            "10",
        ],
    );
    assert!(out.status.success(), "status: {}", common::text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    rows[0].clone()
}

/// On the restart path, a tenure that cannot get enough lease for the kill
/// grace gives the election up. `a` (through a proxy in
/// front of PostgreSQL, ttl 4 s, kill grace 2.7 s, `--restart`) leads; its
/// job exits five times, so the restart back-off is 1.6 s; during it a's
/// store path becomes slow (300 ms each way; a renewal then takes ~1 s),
/// and its renewals land but leave under 4 × 0.99 − 1 (the margin's cap) −
/// 0.6 = 2.36 s, less than the kill grace. The job must not be started
/// again, and the tenure must not sit on the lease without a job either: it
/// resigns, and `b` (direct, fast) takes over by resignation, not expiry.
/// Before the fix, `a` waited for a renewal that would leave enough, for as
/// long as the slow renewals kept coming: leader forever, job never running.
#[tokio::test]
async fn restart_without_enough_lease_resigns_to_another_candidate() {
    let _timed = TIMED.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let Some((_, proxy, url)) = postgres_behind_a_proxy(None).await else {
        return;
    };
    let s = store(Kind::Postgres, d).await.expect("PostgreSQL answered");
    let name = election("restart-resign");
    let key = ElectionKey::new("default", name.clone());
    let flags = |c: &mut Command| {
        c.args(["--renew-period", "100ms", "--kill-grace", "2700ms"]);
    };
    // Jobs 1-4 exit at once (back-offs 100, 200, 400, 800 ms); job 5 waits
    // for `go`, then exits; a sixth job (there must be none) would run on.
    let a_job = "echo \"start $TENURE_TERM $$\" >> events; n=$(grep -c '^start' events); \
                 [ \"$n\" -lt 5 ] && exit 1; [ \"$n\" -gt 5 ] && exec sleep 1000; \
                 while [ ! -e go ]; do sleep 0.01; done; exit 1";
    let a = spawn_run_ttl(d, &url, &name, "a", "4s", a_job, |c| {
        flags(c);
        c.arg("--restart");
    });
    let (term, _) = next_start(d, 4, "a's fifth job").await;
    let b_job = "echo \"b-start $TENURE_TERM $$\" >> events; exec sleep 1000";
    let b = spawn_run_ttl(d, &s.url, &name, "b", "4s", b_job, flags);
    let joined = Instant::now();
    while !s
        .client
        .members(&key)
        .await
        .unwrap()
        .iter()
        .any(|m| m.identity == "b" && m.live)
    {
        assert!(joined.elapsed() < Duration::from_secs(10), "b registers");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set_delay(Duration::from_millis(300));
    std::fs::write(d.join("go"), "").unwrap();
    // a gives up after a TTL of slow renewals; its hand-over then goes
    // through a fast path again (on the slow one it may not land before the
    // lease expires, and b would take over by expiry, which is not the point).
    let slow = Instant::now();
    while !std::fs::read_to_string(d.join("a.log"))
        .unwrap_or_default()
        .contains("resigning so that another candidate")
    {
        assert!(
            slow.elapsed() < Duration::from_secs(20),
            "a did not give up a lease it cannot run the job with\n{}",
            logs(d)
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    proxy.set_delay(Duration::ZERO);
    let b_term = loop {
        let events = std::fs::read_to_string(d.join("events")).unwrap_or_default();
        let b_start = events
            .lines()
            .find_map(|l| l.strip_prefix("b-start "))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok());
        if let Some(t) = b_start {
            break t;
        }
        assert!(
            slow.elapsed() < Duration::from_secs(20),
            "b did not lead within 20 s\n{events}\n{}",
            logs(d)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        starts(d).len(),
        5,
        "a's job was not started again\n{}",
        logs(d)
    );
    assert_eq!(b_term, term + 1, "{}", logs(d));
    // b's term began by resignation: its acquisition recorded why the
    // lease was free (written by b's own queue, so wait for the row).
    let row = |status: &serde_json::Value, t: u64| {
        status["history"]
            .as_array()
            .expect("history")
            .iter()
            .find(|h| h["term"] == t)
            .cloned()
    };
    let shown = Instant::now();
    let (status, b_row) = loop {
        let status = status_json(d, &s.url, &name);
        if let Some(r) = row(&status, b_term) {
            break (status, r);
        }
        assert!(
            shown.elapsed() < Duration::from_secs(10),
            "term {b_term} not in the history: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(b_row["start_reason"], "resign", "{status:#}\n{}", logs(d));
    // a's own row is closed by a's queue, best effort (on the slow path it
    // sometimes stays open); never as expired.
    let a_row = row(&status, term).expect("a's term in the history");
    assert!(
        a_row["end_reason"].is_null() || a_row["end_reason"] == "resign",
        "{status:#}"
    );
    let a_log = std::fs::read_to_string(d.join("a.log")).unwrap_or_default();
    assert!(
        a_log.contains("resigning so that another candidate"),
        "{a_log}"
    );
    stop_all(&mut [a, b]);
}
