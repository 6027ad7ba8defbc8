//! Hand-edited lease records on PostgreSQL, MariaDB, Redis and SQLite: a
//! negative term, a term at `i64::MAX`, and a ghost holder whose lease ends
//! in the year 9999; on etcd a TTL beyond the longest (a ghost holder there
//! has no lease key, so it is merely expired). `tenure status` and `tenure run` must refuse the record
//! with an error naming the election and the repair; `run` must start no job
//! (so no term is handed out twice or out of order) and must not spin on the
//! store; and after the repair printed by the error is applied, the election
//! elects and hands over again under terms above every term seen before.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{rand_u32, store_url, tenure, text, wait_until, DropTables};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Appends `start TERM PID` to `events`, then waits to be stopped.
const JOB: &str = "echo \"start $TENURE_TERM $$\" >> events; exec sleep 1000";

#[derive(Clone, Copy, Debug)]
enum Tamper {
    /// `term = -5`.
    Negative,
    /// `term = i64::MAX`.
    MaxTerm,
    /// `holder = 'ghost'`, expiry in the year 9999.
    Ghost,
    /// `term = 1e19`: on SQLite a REAL (what `i64::MAX + 1` becomes there),
    /// on Redis a number the scripts' doubles read but no integer.
    RealTerm,
    /// etcd: the state record's TTL far beyond the longest (its terms are
    /// revisions and its times the writers' clocks, so a TTL is what a
    /// hand edit can make impossible there).
    HugeTtl,
}

/// The year 9999 in µs since the epoch.
const YEAR_9999_US: i64 = 253_402_300_799_000_000;

struct Candidate {
    child: Child,
    log: PathBuf,
}

impl Candidate {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

struct Setup {
    dir: tempfile::TempDir,
    url: String,
    prefix: String,
    election: String,
    store: &'static str,
}

impl Setup {
    fn store_args<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut all = args.to_vec();
        all.extend([
            "--store",
            &self.url,
            "--table-prefix",
            &self.prefix,
            "--election",
            &self.election,
        ]);
        all
    }

    /// `tenure run` as `id`, logging at debug level (every refused read is
    /// a line, so the lines count the store requests on a corrupt lease).
    fn run(&self, id: &str) -> Candidate {
        let log = self.dir.path().join(format!("{id}.log"));
        let mut args = self.store_args(&["run", "--ttl", "1s", "--id", id]);
        args.extend(["--", "sh", "-c", JOB]);
        let child = Command::new(common::BIN)
            .args(&args)
            .current_dir(self.dir.path())
            .env_remove("TENURE_STORE")
            .env("TENURE_LOG", "tenure=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn tenure");
        Candidate { child, log }
    }

    fn starts(&self) -> Vec<(u64, i32)> {
        common::starts(&self.dir.path().join("events"))
    }

    async fn sql(&self, statement: &str) {
        use sqlx::Connection;
        let mut c = sqlx::AnyConnection::connect(&self.url)
            .await
            .expect("connect");
        sqlx::query(statement)
            .execute(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
        let _ = c.close().await;
    }

    fn redis_key(&self) -> String {
        format!("{}lease:7:default:{}", self.prefix, self.election)
    }

    /// Runs `redis-cli` on the test's Redis; its standard output.
    fn redis_cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .arg("-u")
            .arg(&self.url)
            .args(args)
            .output()
            .expect("run redis-cli");
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `etcdctl` (or, with `shell`, a shell command line) against the
    /// test's etcd; its standard output.
    fn etcdctl(&self, args: &[&str], shell: Option<&str>) -> String {
        let endpoints = self
            .url
            .strip_prefix("etcd://")
            .expect("an etcd URL")
            .split(',')
            .map(|h| format!("http://{h}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = match shell {
            Some(line) => {
                let mut c = Command::new("sh");
                c.arg("-c").arg(line);
                c
            }
            None => {
                let mut c = Command::new("etcdctl");
                c.args(args);
                c
            }
        };
        let out = cmd
            .env("ETCDCTL_API", "3")
            .env("ETCDCTL_ENDPOINTS", endpoints)
            .output()
            .expect("run etcdctl");
        assert!(out.status.success(), "etcdctl {args:?} {shell:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Removes this test's keys from the shared Redis.
    fn drop_redis_keys(&self) {
        let keys = self.redis_cli(&["--scan", "--pattern", &format!("{}*", self.prefix)]);
        for k in keys.lines().filter(|k| !k.is_empty()) {
            self.redis_cli(&["DEL", k]);
        }
    }

    async fn tamper(&self, how: Tamper) {
        if self.store == "redis" {
            let key = self.redis_key();
            let max = i64::MAX.to_string();
            let year_9999 = YEAR_9999_US.to_string();
            let out = match how {
                Tamper::Negative => self.redis_cli(&["HSET", &key, "term", "-5"]),
                Tamper::MaxTerm => self.redis_cli(&["HSET", &key, "term", &max]),
                Tamper::Ghost => {
                    self.redis_cli(&["HSET", &key, "holder", "ghost", "expires_us", &year_9999])
                }
                Tamper::RealTerm => self.redis_cli(&["HSET", &key, "term", "1e19"]),
                Tamper::HugeTtl => panic!("only etcd's state has a TTL to tamper with"),
            };
            assert!(!out.contains("ERR"), "{out}");
            return;
        }
        if self.store == "etcd" {
            // The election's state record names a holder whose lease runs
            // to the year 9999 (etcd's own lease is gone: released).
            let keys = self.etcdctl(&["get", "--prefix", "", "--keys-only"], None);
            let state = keys
                .lines()
                .find(|k| k.contains("/state/") && k.ends_with(&self.election))
                .unwrap_or_else(|| panic!("no state key in {keys}"))
                .to_string();
            let value = self.etcdctl(&["get", &state, "--print-value-only"], None);
            let mut v: serde_json::Value = serde_json::from_str(value.trim()).expect("state JSON");
            v["holder"] = "ghost".into();
            v["end_reason"] = "".into();
            match how {
                Tamper::Ghost => v["expires_at_us"] = YEAR_9999_US.into(),
                Tamper::HugeTtl => v["ttl_ms"] = 1_000_000_000_000u64.into(),
                _ => panic!("etcd terms are revisions: {how:?}"),
            }
            self.etcdctl(&["put", &state, &v.to_string()], None);
            return;
        }
        let set = match how {
            Tamper::Negative => "term = -5".to_string(),
            Tamper::MaxTerm => format!("term = {}", i64::MAX),
            Tamper::Ghost => format!("holder = 'ghost', expires_us = {YEAR_9999_US}"),
            Tamper::RealTerm => "term = 1e19".to_string(),
            Tamper::HugeTtl => panic!("only etcd's state has a TTL to tamper with"),
        };
        self.sql(&format!(
            "UPDATE {}leases SET {set} WHERE election = '{}'",
            self.prefix, self.election
        ))
        .await;
    }

    /// Applies the repair that the error names: the command between the
    /// backticks after "run ".
    async fn repair(&self, message: &str) {
        let at = message
            .find("repaired: run `")
            .unwrap_or_else(|| panic!("no repair in: {message}"))
            + "repaired: run `".len();
        let command = &message[at..at + message[at..].find('`').expect("closing backtick")];
        if self.store == "etcd" {
            assert!(command.starts_with("etcdctl del "), "{command}");
            self.etcdctl(&[], Some(command));
            return;
        }
        if self.store == "redis" {
            let rest = command
                .strip_prefix("redis-cli ")
                .unwrap_or_else(|| panic!("not a redis-cli command: {command}"));
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("redis-cli -u '{}' {rest}", self.url))
                .output()
                .expect("run redis-cli");
            assert!(
                out.status.success() && out.stderr.is_empty(),
                "{command}: {out:?}"
            );
        } else {
            self.sql(command).await;
        }
    }
}

async fn setup(store: &'static str) -> Option<Setup> {
    let dir = tempfile::tempdir().unwrap();
    let url = store_url(store, dir.path()).await?;
    let n = rand_u32();
    Some(Setup {
        dir,
        url,
        prefix: format!("tamp{n:x}_"),
        election: format!("tampered-{n:x}"),
        store,
    })
}

/// The whole story on one store for one kind of tampering.
async fn story(store: &'static str, how: Tamper) {
    let Some(s) = setup(store).await else {
        return;
    };
    let sql = !matches!(store, "redis" | "etcd");
    let _drop = (sql && store != "sqlite").then(|| DropTables {
        url: s.url.clone(),
        prefix: s.prefix.clone(),
    });
    let migrate = tenure(
        s.dir.path(),
        &["migrate", "--store", &s.url, "--table-prefix", &s.prefix],
    );
    assert!(migrate.status.success() || !sql, "{}", text(&migrate));

    // A first tenure, released: terms up to `first` were handed out.
    let a = s.run("a");
    let (first, _) = wait_until("the first job", Duration::from_secs(20), || {
        s.starts().first().copied()
    })
    .await;
    drop(a);

    s.tamper(how).await;

    // `status` refuses the record: names the election, says it is corrupt
    // and how to repair it; exit code 1.
    let status = tenure(s.dir.path(), &s.store_args(&["status"]));
    let out = text(&status);
    assert_eq!(status.status.code(), Some(1), "{store} {how:?}: {out}");
    let stderr = String::from_utf8_lossy(&status.stderr).to_string();
    assert!(
        stderr.contains(&format!("default/{}", s.election))
            && stderr.contains("is corrupt")
            && stderr.contains("repaired: run `"),
        "{store} {how:?}: {out}"
    );
    let expect = match how {
        Tamper::Negative => "term is -5",
        Tamper::MaxTerm => "largest term",
        Tamper::Ghost => "expires_us 253402300799000000",
        Tamper::RealTerm => "term",
        Tamper::HugeTtl => "its TTL is 1000000000000000 µs",
    };
    assert!(stderr.contains(expect), "{store} {how:?}: {out}");
    if let Tamper::RealTerm = how {
        assert!(
            stderr.contains("1e19") || stderr.contains("not a 64-bit integer"),
            "{out}"
        );
    }

    // `run` starts no job on the corrupt record, says why once, and does
    // not spin: over 4 s it reads the record at most a few times.
    let before = s.starts().len();
    let b = s.run("b");
    let watched = Instant::now();
    wait_until(
        "run to report the corrupt lease",
        Duration::from_secs(10),
        || b.log().contains("is corrupt").then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(watched.elapsed())).await;
    let log = b.log();
    let refusals = log.lines().filter(|l| l.contains("is corrupt")).count();
    let loud = log
        .lines()
        .filter(|l| l.contains("is corrupt") && l.contains("ERROR"))
        .count();
    assert!(
        (1..=3).contains(&refusals),
        "{store} {how:?}: {refusals} refusals in 4 s:\n{log}"
    );
    assert_eq!(loud, 1, "{store} {how:?}: logged once:\n{log}");
    assert_eq!(
        s.starts().len(),
        before,
        "{store} {how:?}: a job started on a corrupt lease: {:?}",
        s.starts()
    );

    // Repair as the message says; the waiting candidate then elects
    // (it looks again within 10 s), and a resign hands over to another.
    s.repair(&stderr).await;
    let (second, _) = wait_until("a job after the repair", Duration::from_secs(30), || {
        s.starts().get(before).copied()
    })
    .await;
    assert!(
        second > first,
        "{store} {how:?}: term {second} after {first}"
    );
    let c = s.run("c");
    wait_until("c to join", Duration::from_secs(10), || {
        let o = tenure(s.dir.path(), &s.store_args(&["status"]));
        String::from_utf8_lossy(&o.stdout)
            .contains("c#")
            .then_some(())
    })
    .await;
    let resign = tenure(s.dir.path(), &s.store_args(&["resign"]));
    assert!(resign.status.success(), "{}", text(&resign));
    let (third, _) = wait_until("a job after the hand-over", Duration::from_secs(30), || {
        s.starts().get(before + 1).copied()
    })
    .await;
    assert!(
        third > second,
        "{store} {how:?}: term {third} after {second}"
    );
    let terms: Vec<u64> = s.starts().iter().map(|t| t.0).collect();
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "{store} {how:?}: terms increase: {terms:?}"
    );
    let status = tenure(s.dir.path(), &s.store_args(&["status"]));
    assert!(status.status.success(), "{}", text(&status));
    drop((b, c));
    if store == "redis" {
        s.drop_redis_keys();
    }
}

macro_rules! stories {
    ($($name:ident: $store:literal, $how:ident;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                story($store, Tamper::$how).await;
            }
        )*
    };
}

stories! {
    sqlite_negative_term: "sqlite", Negative;
    sqlite_max_term: "sqlite", MaxTerm;
    sqlite_ghost_holder: "sqlite", Ghost;
    sqlite_real_term: "sqlite", RealTerm;
    postgres_negative_term: "postgres", Negative;
    postgres_max_term: "postgres", MaxTerm;
    postgres_ghost_holder: "postgres", Ghost;
    mariadb_negative_term: "mariadb", Negative;
    mariadb_max_term: "mariadb", MaxTerm;
    mariadb_ghost_holder: "mariadb", Ghost;
    redis_negative_term: "redis", Negative;
    redis_max_term: "redis", MaxTerm;
    redis_ghost_holder: "redis", Ghost;
    redis_real_term: "redis", RealTerm;
    etcd_huge_ttl: "etcd", HugeTtl;
}

/// etcd: a state record naming a ghost holder whose expiry (a time the
/// writer stamped with its own clock) lies in the year 9999 holds nothing
/// up: the lease key, gone, says nobody holds the election, and a
/// writer's clock may run hours ahead of the reader's (a dead leader's
/// must not block its successor), so the stamp is not judged. `status`
/// shows the ghost expired and a candidate leads under a later term.
#[tokio::test]
async fn etcd_ghost_holder_without_a_lease_is_expired() {
    let Some(s) = setup("etcd").await else {
        return;
    };
    let a = s.run("a");
    let (first, _) = wait_until("the first job", Duration::from_secs(20), || {
        s.starts().first().copied()
    })
    .await;
    drop(a);
    s.tamper(Tamper::Ghost).await;
    let status = tenure(s.dir.path(), &s.store_args(&["status"]));
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("ghost expired"),
        "{}",
        text(&status)
    );
    let b = s.run("b");
    let (second, _) = wait_until("a job after the ghost", Duration::from_secs(20), || {
        s.starts().get(1).copied()
    })
    .await;
    assert!(second > first, "term {second} after {first}");
    assert!(!b.log().contains("is corrupt"), "{}", b.log());
}
