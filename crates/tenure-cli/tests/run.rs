//! `tenure run` end to end: environment, exit codes, release, signals, takeover
//! between processes, and stopping the command before the lease can lapse.

mod common;

use common::rand_u32;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{alive, read_pid, spawn_tenure, sqlite_url, tenure, text, wait_until, Proxy};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tenure::store::{ElectionKey, LeaseStoreExt, StoreOptions};
use tenure_testsupport::servers;

#[tokio::test]
async fn child_gets_term_and_names_and_its_exit_code_is_ours_and_the_lease_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let out = tenure(
        dir.path(),
        &["run", "--store", &url, "--election", "nightly", "--id", "box1", "--",
          "sh", "-c", "echo \"$TENURE_TERM $TENURE_ELECTION $TENURE_NAMESPACE $TENURE_HOLDER\" > env.txt; exit 7"],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    let env = std::fs::read_to_string(dir.path().join("env.txt")).unwrap();
    assert!(env.starts_with("1 nightly default box1#"), "{env}");
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let rec = store
        .read(&ElectionKey::new("default", "nightly"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.holder, None, "released when the command exited");
    // A second run gets the next term at once (no waiting for a TTL).
    let start = Instant::now();
    let out = tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "nightly",
            "--",
            "sh",
            "-c",
            "exit $TENURE_TERM",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "term 2 after a release: {}",
        text(&out)
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    // And status shows it.
    let out = tenure(dir.path(), &["status", "--store", &url, "--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(
        json.contains("\"election\": \"nightly\"") && json.contains("\"term\": 2"),
        "{json}"
    );
    assert!(json.contains("\"leader\": null"), "{json}");
}

/// SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 and SIGALRM stop the job,
/// release the lease and exit with 128 + the signal: none ends tenure by its
/// default action (no release, the successor waiting a whole TTL).
async fn stop_signal_stops_the_child_releases_and_exits(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let mut t = spawn_tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "svc",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo $$ > child.pid; exec sleep 1000",
        ],
        &dir.path().join("log"),
    );
    let pidfile = dir.path().join("child.pid");
    let child = wait_until("child start", Duration::from_secs(10), || {
        read_pid(&pidfile)
    })
    .await;
    assert!(alive(child));
    kill(Pid::from_raw(t.id() as i32), signal).unwrap();
    let status = tokio::task::spawn_blocking(move || t.wait())
        .await
        .unwrap()
        .unwrap();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert_eq!(status.code(), Some(128 + signal as i32), "{signal}: {log}");
    assert!(
        log.contains(&format!("{signal} received: stopping")),
        "{signal}: {log}"
    );
    assert!(!alive(child), "the child is gone when tenure exits");
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let rec = store
        .read(&ElectionKey::new("default", "svc"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.holder, None, "released on {signal}");
}

#[tokio::test]
async fn sigterm_stops_the_child_releases_and_exits_143() {
    stop_signal_stops_the_child_releases_and_exits(Signal::SIGTERM).await;
}

#[tokio::test]
async fn sighup_stops_the_child_releases_and_exits_129() {
    stop_signal_stops_the_child_releases_and_exits(Signal::SIGHUP).await;
}

#[tokio::test]
async fn sigusr1_sigusr2_and_sigalrm_stop_the_child_and_release() {
    for signal in [Signal::SIGUSR1, Signal::SIGUSR2, Signal::SIGALRM] {
        stop_signal_stops_the_child_releases_and_exits(signal).await;
    }
}

/// A follower says whom it follows, at start and at every change.
#[tokio::test]
async fn a_follower_logs_the_leader_and_its_term() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let args = |id: &'static str| {
        [
            "run",
            "--store",
            &url,
            "--election",
            "logged",
            "--ttl",
            "2s",
            "--id",
            id,
            "--",
            "sh",
            "-c",
            "echo $$ > $TENURE_TERM.pid; exec sleep 1000",
        ]
        .map(str::to_string)
    };
    let a_args = args("alpha");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Stopped(spawn_tenure(dir.path(), &a_args, &dir.path().join("a.log")));
    wait_until("a leads", Duration::from_secs(10), || {
        read_pid(&dir.path().join("1.pid"))
    })
    .await;
    let b_args = args("beta");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let mut b = Stopped(spawn_tenure(dir.path(), &b_args, &dir.path().join("b.log")));
    let b_log = || std::fs::read_to_string(dir.path().join("b.log")).unwrap_or_default();
    wait_until("b logs whom it follows", Duration::from_secs(10), || {
        b_log()
            .lines()
            .any(|l| {
                l.contains("following") && l.contains("leader=\"alpha\"") && l.contains("term=1")
            })
            .then_some(())
    })
    .await;
    a.stop();
    wait_until("b takes over", Duration::from_secs(10), || {
        read_pid(&dir.path().join("2.pid"))
    })
    .await;
    b.stop();
    assert!(b_log().contains("no leader"), "{}", b_log());
}

/// A `tenure run` stopped with SIGTERM when dropped (also when a test fails).
struct Stopped(std::process::Child);

impl Stopped {
    fn stop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The job itself gets the SIGTERM (not only its group's signal queue): a job
/// that traps it can finish its work and exit before the kill grace. The
/// guard blocks SIGTERM for its own signalfd; a job that inherited that mask
/// never saw the signal and was SIGKILLed at the end of the grace.
#[tokio::test]
async fn the_job_receives_sigterm_and_may_exit_cleanly_before_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let mut t = spawn_tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "svc",
            // A grace far above the job's exit, and a lease that does not
            // cut it short: waiting for it would show.
            "--ttl",
            "20s",
            "--kill-grace",
            "3s",
            "--",
            // Not a shell: dash unblocks signals itself, most programs do not.
            "python3",
            "-c",
            "import os, signal, sys, time\n\
             def done(*_):\n    open('got-term', 'w').write('term')\n    sys.exit(0)\n\
             signal.signal(signal.SIGTERM, done)\n\
             open('child.pid', 'w').write(str(os.getpid()))\n\
             time.sleep(1000)",
        ],
        &dir.path().join("log"),
    );
    let pidfile = dir.path().join("child.pid");
    wait_until("child start", Duration::from_secs(10), || {
        read_pid(&pidfile)
    })
    .await;
    let asked = std::time::Instant::now();
    kill(Pid::from_raw(t.id() as i32), Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || t.wait())
        .await
        .unwrap()
        .unwrap();
    let took = asked.elapsed();
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert!(
        dir.path().join("got-term").exists(),
        "the job never saw SIGTERM (took {took:?}):\n{log}"
    );
    assert!(
        took < Duration::from_secs(3),
        "tenure took {took:?}, the kill grace, to stop a job that exits on SIGTERM:\n{log}"
    );
    assert_eq!(status.code(), Some(143), "{log}");
}

#[tokio::test]
async fn leftover_background_processes_are_killed_when_the_child_exits() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let out = tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "bg",
            "--",
            "sh",
            "-c",
            "sleep 1000 & echo $! > bg.pid; exit 0",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let bg = read_pid(&dir.path().join("bg.pid")).unwrap();
    wait_until("leftover killed", Duration::from_secs(5), || {
        (!alive(bg)).then_some(())
    })
    .await;
}

/// Three `tenure run` processes share MariaDB. The command holds an exclusive
/// flock while it runs and records a VIOLATION if it cannot get it, so any
/// moment with two commands running is caught exactly. The leader is killed
/// with SIGKILL twice and stopped with SIGTERM once; each time another
/// candidate must start the command.
#[tokio::test]
async fn three_processes_on_mariadb_one_command_at_a_time() {
    let url = servers::mysql_url();
    let Some(store) = servers::connect_or_skip(&url, &StoreOptions::default()).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let election = format!("three-{:x}", rand_u32());
    let script = "exec 9>>lock; if ! flock -n 9; then echo VIOLATION >> events; exit 1; fi; \
                  echo \"start $TENURE_TERM $$\" >> events; exec sleep 1000";
    let spawn = |i: usize| {
        spawn_tenure(
            dir.path(),
            &[
                "run",
                "--store",
                &url,
                "--election",
                &election,
                "--ttl",
                "1s",
                "--id",
                &format!("cand{i}"),
                "--",
                "sh",
                "-c",
                script,
            ],
            &dir.path().join(format!("cand{i}.log")),
        )
    };
    let mut procs: Vec<std::process::Child> = (0..3).map(spawn).collect();
    let key = ElectionKey::new("default", election.clone());
    let events = dir.path().join("events");
    let starts = || common::starts(&events);
    let mut seen = 0;
    for round in 0..3 {
        // Wait for a new command, and for the lease to name its term (under
        // load a tenure can also lapse and move on; the flock still proves
        // that no two commands overlap).
        let start = Instant::now();
        let (term, child_pid, rec) = loop {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "round {round}: no command started"
            );
            let s = starts();
            if s.len() > seen {
                let (term, pid) = *s.last().unwrap();
                let rec = store.read(&key).await.unwrap().unwrap();
                if rec.term == term && rec.is_held() {
                    break (term, pid, rec);
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        seen = starts().len();
        assert_eq!(rec.term, term, "the running command has the lease's term");
        let holder = rec.holder.unwrap();
        let idx: usize = holder
            .trim_start_matches("cand")
            .split('#')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let signal = if round < 2 {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        kill(Pid::from_raw(procs[idx].id() as i32), signal).unwrap();
        let _ = procs[idx].wait();
        wait_until("the old command to die", Duration::from_secs(5), || {
            (!alive(child_pid)).then_some(())
        })
        .await;
        if round < 2 {
            procs[idx] = spawn(idx);
        }
    }
    let (term, _) = wait_until("the final takeover", Duration::from_secs(15), || {
        starts().last().copied().filter(|_| starts().len() > seen)
    })
    .await;
    for p in &mut procs {
        let _ = kill(Pid::from_raw(p.id() as i32), Signal::SIGTERM);
        let _ = p.wait();
    }
    let log = std::fs::read_to_string(&events).unwrap();
    assert!(
        !log.contains("VIOLATION"),
        "two commands ran at once:\n{log}"
    );
    let terms: Vec<u64> = starts().iter().map(|s| s.0).collect();
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms increase: {terms:?}"
    );
    // Stopping the three one after another may let a later one take over
    // once more, so the final takeover need not be the last start.
    assert!(terms.contains(&term), "{term} in {terms:?}");
}

/// The store goes silent (a blackholed network). The command ignores SIGTERM,
/// so only SIGKILL stops it; it must be dead before the lease expires by the
/// store's clock, and `--exit-on-loss` then exits with code 3.
#[tokio::test]
async fn command_is_killed_before_the_lease_can_expire_when_the_store_goes_silent() {
    let direct = servers::mysql_url();
    let Some(store) = servers::connect_or_skip(&direct, &StoreOptions::default()).await else {
        return;
    };
    let (proxy, via_proxy) = Proxy::in_front_of(&direct).await.expect("start the proxy");
    let dir = tempfile::tempdir().unwrap();
    let election = format!("silent-{:x}", rand_u32());
    let mut t = spawn_tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &via_proxy,
            "--election",
            &election,
            "--ttl",
            "2s",
            "--exit-on-loss",
            "--",
            "sh",
            "-c",
            "trap '' TERM; echo $$ > child.pid; while :; do sleep 0.05; done",
        ],
        &dir.path().join("log"),
    );
    let child = wait_until("child start", Duration::from_secs(10), || {
        read_pid(&dir.path().join("child.pid"))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_blackhole(true);
    let blackholed = Instant::now();
    // Checked at the lease's expiry by the store's clock (same host, so the
    // clocks agree to well under a millisecond), read again until then: a
    // renewal in flight at the cut may have moved it. Were the child's
    // death timed when this test notices it, a late wake-up of the test
    // would look like a late kill.
    let key = ElectionKey::new("default", election);
    let now_us = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let expires_at_us = loop {
        let rec = store.read(&key).await.unwrap().unwrap();
        let left_us = rec.expires_at_us - now_us();
        if left_us <= 2_000 {
            break rec.expires_at_us;
        }
        assert!(
            blackholed.elapsed() < Duration::from_secs(10),
            "the lease never expired: {rec:?}"
        );
        tokio::time::sleep(Duration::from_micros((left_us - 2_000) as u64)).await;
    };
    let checked_us = now_us();
    assert!(
        !alive(child),
        "the child is alive {:.1}ms before its lease expires (blackholed {:?} before)",
        (expires_at_us - checked_us) as f64 / 1000.0,
        blackholed.elapsed()
    );
    let status = tokio::task::spawn_blocking(move || t.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "--exit-on-loss exits 3: {}",
        std::fs::read_to_string(dir.path().join("log")).unwrap()
    );
}

/// `--wait`: the store is down at start; tenure keeps retrying, then leads as
/// soon as the store appears.
#[tokio::test]
async fn wait_retries_an_unreachable_store_until_it_appears() {
    let url = servers::mysql_url();
    if servers::connect_or_skip(&url, &StoreOptions::default())
        .await
        .is_none()
    {
        return;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let late = url.replace("127.0.0.1:3306", &format!("127.0.0.1:{port}"));
    assert_ne!(
        late, url,
        "test expects the default MariaDB URL on 127.0.0.1:3306"
    );
    let dir = tempfile::tempdir().unwrap();
    let election = format!("wait-{:x}", rand_u32());
    let mut t = spawn_tenure(
        dir.path(),
        &[
            "run",
            "--wait",
            "--store",
            &late,
            "--election",
            &election,
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo $TENURE_TERM > ran; exit 0",
        ],
        &dir.path().join("log"),
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        t.try_wait().unwrap().is_none(),
        "still waiting for the store"
    );
    assert!(!dir.path().join("ran").exists());
    // The store "comes up": a proxy on that port to the real server.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut s) = tokio::net::TcpStream::connect("127.0.0.1:3306").await {
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                }
            });
        }
    });
    let ran = dir.path().join("ran");
    wait_until(
        "the command to run once the store is up",
        Duration::from_secs(15),
        || ran.exists().then_some(()),
    )
    .await;
    let status = tokio::task::spawn_blocking(move || t.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(dir.path().join("log")).unwrap()
    );
}

/// `--restart`: the command is restarted while leadership lasts.
#[tokio::test]
async fn restart_keeps_the_command_running_while_leader() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let mut t = spawn_tenure(
        dir.path(),
        &[
            "run",
            "--restart",
            "--store",
            &url,
            "--election",
            "again",
            "--",
            "sh",
            "-c",
            "echo $TENURE_TERM >> runs; exit 5",
        ],
        &dir.path().join("log"),
    );
    let runs = dir.path().join("runs");
    wait_until("three runs", Duration::from_secs(15), || {
        (std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .count()
            >= 3)
            .then_some(())
    })
    .await;
    assert!(
        t.try_wait().unwrap().is_none(),
        "tenure keeps going with --restart"
    );
    let terms: Vec<String> = std::fs::read_to_string(&runs)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert!(
        terms.iter().all(|t| t == "1"),
        "same tenure, same term: {terms:?}"
    );
    kill(Pid::from_raw(t.id() as i32), Signal::SIGTERM).unwrap();
    let status = tokio::task::spawn_blocking(move || t.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(143));
}

/// `tenure transfer`, `tenure resign`, `tenure watch` and `tenure status
/// --history` against three `tenure run` processes.
#[tokio::test]
async fn transfer_resign_watch_and_history_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let d = dir.path();
    // `watch` creates no tables: make them first.
    let out = common::tenure(d, &["migrate", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out));
    let mut watch = std::process::Command::new(common::BIN)
        .args(["watch", "--json", "--store", &url, "--election", "ops"])
        .stdout(std::fs::File::create(d.join("watch.jsonl")).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new("default", "ops");
    let mut procs = Vec::new();
    for (i, prio) in [(1, "0"), (2, "0"), (3, "7")] {
        procs.push(spawn_tenure(
            d,
            &[
                "run",
                "--store",
                &url,
                "--election",
                "ops",
                "--ttl",
                "2s",
                "--id",
                &format!("box{i}"),
                "--priority",
                prio,
                "--",
                "sleep",
                "1000",
            ],
            &d.join(format!("box{i}.log")),
        ));
        // box1 leads; the others join after it, in order.
        if i == 1 {
            let start = Instant::now();
            while !store
                .read(&key)
                .await
                .unwrap()
                .and_then(|r| r.holder)
                .is_some_and(|h| h.starts_with("box1#"))
            {
                assert!(start.elapsed() < Duration::from_secs(20), "box1 leads");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        } else {
            common::wait_until_registered(&url, "ops", &format!("box{i}"), || {
                std::fs::read_to_string(d.join(format!("box{i}.log"))).unwrap_or_default()
            })
            .await;
        }
    }
    let start = Instant::now();
    while store
        .members(&key)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.live)
        .count()
        < 3
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "three members register"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let out = tenure(
        d,
        &[
            "transfer",
            "--store",
            &url,
            "--election",
            "ops",
            "--to",
            "box2",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("box2#") && text(&out).contains("(term 2, transfer)"),
        "{}",
        text(&out)
    );
    let out = tenure(d, &["resign", "--store", &url, "--election", "ops"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("box3#") && text(&out).contains("(term 3, resign)"),
        "priority 7 succeeds: {}",
        text(&out)
    );
    // The watcher polls; a term that ends before its next read would be
    // reported only as "no leader". Wait until it has seen box3 lead.
    let start = Instant::now();
    while !std::fs::read_to_string(d.join("watch.jsonl"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("\"change\":\"leader\"") && l.contains("\"term\":3"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "watch reports term 3"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let out = tenure(
        d,
        &[
            "transfer",
            "--store",
            &url,
            "--election",
            "ops",
            "--to",
            "nobody",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "unknown target is bad input: {}",
        text(&out)
    );
    let out = tenure(d, &["status", "--store", &url, "--history", "5"]);
    let s = text(&out);
    assert!(
        s.contains("members:") && s.contains("PRIORITY") && s.contains("recent terms:"),
        "{s}"
    );
    assert!(
        s.contains("transfer") && s.contains("resign") && s.contains("first"),
        "{s}"
    );
    for p in &mut procs {
        let _ = kill(Pid::from_raw(p.id() as i32), Signal::SIGTERM);
        let _ = p.wait();
    }
    let out = tenure(d, &["resign", "--store", &url, "--election", "ops"]);
    assert_eq!(out.status.code(), Some(1), "nobody leads: {}", text(&out));
    assert!(
        text(&out).contains("no leader of default/ops"),
        "{}",
        text(&out)
    );
    let start = Instant::now();
    while !std::fs::read_to_string(d.join("watch.jsonl"))
        .unwrap_or_default()
        .lines()
        .last()
        .unwrap_or_default()
        .contains("no_leader")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "watch reports that nobody leads"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let seen = std::fs::read_to_string(d.join("watch.jsonl")).unwrap();
    let terms: Vec<&str> = seen
        .lines()
        .filter(|l| l.contains("\"change\":\"leader\""))
        .collect();
    assert!(terms.len() >= 3, "watch saw every new leader:\n{seen}");
    assert!(
        seen.lines()
            .last()
            .unwrap_or_default()
            .contains("no_leader"),
        "and the end:\n{seen}"
    );
}

/// libfaketime (Debian's `libfaketime`), which shifts a process's wall clock.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A leader is killed (SIGKILL: nothing released) while its wall clock
/// and its follower's disagree by hours (`leader`, `follower`: libfaketime
/// offsets, `None` for the true clock); the follower takes over within a
/// TTL and a few seconds. Nothing a holder wrote with its own clock, and
/// nothing the server stamped with its clock, may be judged against a
/// reader's clock: stores judge expiry by the server's clock or by the
/// reader's alone. (SQLite is left out: its store clock is the clock of
/// whichever process runs the statement, so one process's shifted clock is
/// the store's clock.)
async fn a_dead_leader_is_succeeded_across_clocks(
    store: &str,
    leader: Option<&str>,
    follower: Option<&str>,
) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if !std::path::Path::new(FAKETIME_LIB).is_file() {
        assert!(
            !servers::required(),
            "this test needs libfaketime ({FAKETIME_LIB}): apt-get install libfaketime"
        );
        eprintln!("skipped: no {FAKETIME_LIB} (apt-get install libfaketime)");
        return;
    }
    let Some(url) = common::store_url(store, d).await else {
        return;
    };
    let election = format!("skew-{store}-{:x}", rand_u32());
    let spawn = |id: &str, faketime: Option<&str>| {
        let args = [
            "run",
            "--store",
            &url,
            "--election",
            &election,
            "--ttl",
            "2s",
            "--id",
            id,
            "--",
            "sh",
            "-c",
            "echo \"$TENURE_TERM\" > \"lead-$TENURE_ID\"; exec sleep 600",
        ];
        let log = d.join(format!("{id}.log"));
        let mut cmd = common::tenure_command(d, &args);
        cmd.env("TENURE_LOG", "info")
            .env("TENURE_ID", id)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(f) = faketime {
            cmd.env("LD_PRELOAD", FAKETIME_LIB)
                .env("FAKETIME", f)
                .env("FAKETIME_DONT_RESET", "1");
        }
        common::Candidate {
            child: cmd.spawn().expect("spawn tenure"),
            log,
        }
    };
    let mut first = spawn("leader", leader);
    wait_until("the first leader", Duration::from_secs(20), || {
        d.join("lead-leader").exists().then_some(())
    })
    .await;
    let second = spawn("follower", follower);
    // The follower is registered (it has read the lease) before the kill, as
    // in a fleet.
    common::wait_until_registered(&url, &election, "follower", || {
        common::logs([&first, &second])
    })
    .await;
    kill(Pid::from_raw(first.child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = first.child.wait();
    let killed = Instant::now();
    while !d.join("lead-follower").exists() {
        assert!(
            killed.elapsed() < Duration::from_secs(12),
            "{store}: no successor 12 s after the leader was killed (clocks: leader {leader:?}, follower {follower:?}):\n{}",
            common::logs([&first, &second])
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("{store}: successor after {:?}", killed.elapsed());
    // The killed leader's guard stops its job at the lease's deadline.
    let log = common::logs([&first, &second]);
    assert!(!log.contains("is corrupt"), "{store}: {log}");
}

macro_rules! across_clocks {
    ($($name:ident: $store:literal, leader $leader:expr, follower $follower:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            a_dead_leader_is_succeeded_across_clocks($store, $leader, $follower).await;
        }
    )*};
}

across_clocks! {
    leader_ahead_mariadb: "mariadb", leader Some("+3h"), follower None;
    leader_ahead_postgres: "postgres", leader Some("+3h"), follower None;
    leader_ahead_redis: "redis", leader Some("+3h"), follower None;
    leader_ahead_etcd: "etcd", leader Some("+3h"), follower None;
    leader_ahead_zookeeper: "zookeeper", leader Some("+3h"), follower None;
    follower_behind_mariadb: "mariadb", leader None, follower Some("-3h");
    follower_behind_postgres: "postgres", leader None, follower Some("-3h");
    follower_behind_redis: "redis", leader None, follower Some("-3h");
    follower_behind_etcd: "etcd", leader None, follower Some("-3h");
    follower_behind_zookeeper: "zookeeper", leader None, follower Some("-3h");
}
