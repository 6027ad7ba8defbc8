//! SQL store problems the CLI must name precisely, on real servers and files:
//! a SQLite file this user may not write, a SQLite file another process has
//! locked, read-only commands on tables that do not exist (a mistyped
//! `--table-prefix`), a foreign table of tenure's name, and a server that
//! refuses more connections.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{spawn_tenure, tenure, text, BIN};
use sqlx::{Connection, Executor};
use tenure_testsupport::servers;
use tenure_testsupport::servers::{Kind, Server, ServerOptions};

fn unique(stem: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{stem}{}_{}_", std::process::id(), nanos % 1_000_000)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `tenure args...` as the unprivileged user `nobody` (uid 65534) when
/// this test runs as root, where file permissions would not stop it;
/// otherwise as this user. Killed after `within`.
fn tenure_unprivileged(dir: &Path, args: &[&str], within: Duration) -> Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    let child = cmd
        .args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tenure");
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let killer = std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(std::sync::atomic::Ordering::Acquire) {
            if start.elapsed() > within {
                // SAFETY: kill(2) on the pid of our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
    let out = child.wait_with_output().expect("wait for tenure");
    done.store(true, std::sync::atomic::Ordering::Release);
    let killed = killer.join().unwrap_or(false);
    assert!(
        !killed,
        "tenure {args:?} did not exit within {within:?}:\n{}",
        text(&out)
    );
    out
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).expect("chown");
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A directory `nobody` can enter (tempdirs are 0700).
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    dir
}

/// A SQLite file this user may read but not write, and a writable file in a
/// directory it may not write (where SQLite keeps its journal): `tenure run`
/// exits 1 at once, naming the file and what must be writable, instead of
/// campaigning forever against a store that refuses every write.
#[test]
fn sqlite_file_that_cannot_be_written_exits_1_naming_the_file() {
    let nobody = 65534;
    for case in ["read-only file", "read-only directory"] {
        let top = open_dir();
        let sub = top.path().join("db");
        std::fs::create_dir(&sub).unwrap();
        chmod(&sub, 0o755);
        let db = sub.join("ro.db");
        let url = format!("sqlite://{}", db.display());
        let out = tenure(top.path(), &["migrate", "--store", &url]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        // Not in WAL mode, so that opening needs no -wal/-shm file: the
        // journal is the only file a write needs beside the database.
        let c = Command::new("sqlite3")
            .arg(&db)
            .arg("PRAGMA journal_mode=DELETE;")
            .output();
        if c.is_err() {
            // Without the sqlite3 shell, tenure's own WAL file stays.
            eprintln!("note: sqlite3 shell not installed; the database stays in WAL mode");
        }
        for f in std::fs::read_dir(&sub).unwrap() {
            let p = f.unwrap().path();
            if is_root() {
                chown(&p, if case == "read-only file" { 0 } else { nobody });
            }
            chmod(
                &p,
                if case == "read-only file" {
                    0o644
                } else {
                    0o666
                },
            );
            if !is_root() && case == "read-only file" {
                chmod(&p, 0o444);
            }
        }
        if case == "read-only file" {
            // The directory is writable: only the file is not.
            if is_root() {
                chown(&sub, nobody);
            } else {
                chmod(&sub, 0o755);
            }
        } else if !is_root() {
            chmod(&sub, 0o555);
        }
        let started = Instant::now();
        let out = tenure_unprivileged(
            top.path(),
            &["run", "--store", &url, "--election", "ro", "--", "true"],
            Duration::from_secs(20),
        );
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{case}: {all}");
        assert!(
            all.contains(&db.display().to_string()),
            "{case}: names the file: {all}"
        );
        assert!(
            all.contains("writable by this user"),
            "{case}: says what must be writable: {all}"
        );
        assert!(!all.contains("password"), "{case}: {all}");
        assert!(!all.contains("reachable again"), "{case}: {all}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{case}: exits at once, took {:?}",
            started.elapsed()
        );
        // Whoever may write it still can.
        if !is_root() {
            chmod(&sub, 0o755);
            for f in std::fs::read_dir(&sub).unwrap() {
                chmod(&f.unwrap().path(), 0o644);
            }
        }
        let out = tenure(top.path(), &["status", "--store", &url]);
        assert_eq!(out.status.code(), Some(0), "{case}: {}", text(&out));
        let out = tenure(
            top.path(),
            &[
                "run",
                "--store",
                &url,
                "--election",
                "ro",
                "--no-wait",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{case}: {}", text(&out));
    }
}

/// A second process holds `BEGIN EXCLUSIVE` on the SQLite file: tenure says
/// the file is locked by another process, not that a host is unreachable.
#[test]
fn sqlite_file_locked_by_another_process_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("locked.db");
    let url = format!("sqlite://{}", db.display());
    let mut holder = match Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN EXCLUSIVE')\n\
             print('locked', flush=True)\n\
             sys.stdin.read()\n",
        )
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(!servers::required(), "python3 is required in CI: {e}");
            eprintln!("SKIPPED: no python3 to hold the lock: {e}");
            return;
        }
    };
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    for args in [
        vec!["status", "--store", url.as_str()],
        vec!["run", "--store", &url, "--election", "l", "--", "true"],
    ] {
        let out = tenure(dir.path(), &args);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {all}");
        assert!(
            all.contains(&format!(
                "the database file {} is locked by another process",
                db.display()
            )),
            "{args:?}: {all}"
        );
        assert!(!all.contains("host is reachable"), "{all}");
    }
    drop(holder.stdin.take());
    let _ = holder.wait();
    // Unlocked: an election elects, and status shows it.
    let out = tenure(
        dir.path(),
        &[
            "run",
            "--store",
            &url,
            "--election",
            "l",
            "--no-wait",
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = tenure(dir.path(), &["status", "--store", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("default/l"), "{}", text(&out));
}

/// The tables whose names start with `prefix` in the database `url`.
async fn tables_with_prefix(url: &str, prefix: &str) -> Vec<String> {
    let sql = if url.starts_with("sqlite:") {
        format!("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '{prefix}%'")
    } else if url.starts_with("postgres") {
        format!("SELECT tablename::text FROM pg_tables WHERE tablename LIKE '{prefix}%'")
    } else {
        format!(
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE '{prefix}%'"
        )
    };
    drivers();
    let mut c = sqlx::AnyConnection::connect(url).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar(&sql).fetch_all(&mut c).await.unwrap();
    let _ = c.close().await;
    names
}

async fn drop_tables(url: &str, prefix: &str) {
    let mut c = sqlx::AnyConnection::connect(url).await.unwrap();
    for t in ["leases", "members", "history", "runs", "schema"] {
        let _ = c
            .execute(format!("DROP TABLE IF EXISTS {prefix}{t}").as_str())
            .await;
    }
    let _ = c.close().await;
}

/// `tenure status` and `tenure watch` with a mistyped `--table-prefix`
/// create nothing: they say the tables do not exist and how to create them,
/// and exit 1. On SQLite, PostgreSQL and MariaDB.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_on_missing_tables_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        // The real tables exist (a `tenure run` made them) under the default prefix.
        let out = tenure(
            dir.path(),
            &[
                "run",
                "--store",
                &url,
                "--election",
                "real",
                "--no-wait",
                "--",
                "true",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{url}: {}", text(&out));
        let typo = unique("typo");
        for cmd in ["status", "watch"] {
            let out = tokio::task::block_in_place(|| {
                tenure(dir.path(), &[cmd, "--store", &url, "--table-prefix", &typo])
            });
            let all = text(&out);
            assert_eq!(out.status.code(), Some(1), "{cmd} {url}: {all}");
            assert!(
                all.contains(&format!("the {typo}leases table does not exist")),
                "{cmd} {url}: {all}"
            );
            assert!(
                all.contains(&format!("tenure migrate --store URL --table-prefix {typo}"))
                    && all.contains("tenure run"),
                "{cmd} {url}: says how to create them: {all}"
            );
            assert!(all.contains("--table-prefix"), "{all}");
            assert!(!all.contains("no elections"), "{all}");
            assert_eq!(
                tables_with_prefix(&url, &typo).await,
                Vec::<String>::new(),
                "{cmd} {url} created tables"
            );
        }
        // The store with the right prefix still shows its election (asked
        // for by name: the shared servers hold other tests' elections).
        let out = tenure(
            dir.path(),
            &["status", "--store", &url, "--election", "real"],
        );
        assert_eq!(out.status.code(), Some(0), "{url}: {}", text(&out));
        assert!(text(&out).contains("default/real"), "{}", text(&out));
    }
}

/// A `<prefix>members` table that is not tenure's is found by the first
/// `tenure run`, before it creates anything beside it; not by the second.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_members_table_is_found_on_the_first_run() {
    let dir = tempfile::tempdir().unwrap();
    for url in servers::sql_urls(dir.path()).await {
        let prefix = unique("foreign");
        {
            let create = if url.starts_with("sqlite:") {
                format!("{url}?mode=rwc")
            } else {
                url.clone()
            };
            let mut c = sqlx::AnyConnection::connect(&create).await.unwrap();
            c.execute(
                format!("CREATE TABLE {prefix}members (id INT PRIMARY KEY, payload TEXT)").as_str(),
            )
            .await
            .unwrap();
            let _ = c.close().await;
        }
        let out = tokio::task::block_in_place(|| {
            tenure(
                dir.path(),
                &[
                    "run",
                    "--store",
                    &url,
                    "--table-prefix",
                    &prefix,
                    "--election",
                    "f",
                    "--no-wait",
                    "--",
                    "true",
                ],
            )
        });
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{url}: {all}");
        assert!(
            all.contains(&format!(
                "a {prefix}* table exists here but is not tenure's"
            )) && all.contains(&format!("{prefix}members")),
            "{url}: {all}"
        );
        let tables = tables_with_prefix(&url, &prefix).await;
        drop_tables(&url, &prefix).await;
        assert_eq!(
            tables,
            vec![format!("{prefix}members")],
            "{url}: nothing is created beside the foreign table"
        );
    }
}

/// Starts a private server of `kind` with `args`, or `None` (SKIPPED) when
/// its binaries are missing; in CI a missing binary fails.
fn private(kind: Kind, args: &[&str]) -> Option<Server> {
    let options = ServerOptions::default().with_args(args);
    Server::start_or_skip(kind, options, servers::required())
}

/// Installs sqlx's `Any` drivers as tenure does (a lazy store touches nothing).
fn drivers() {
    let _ = tenure::store::sql::SqlStore::connect_lazy("sqlite://unused.db", &Default::default());
}

/// Opens connections as `url`'s user until the server refuses one, and
/// keeps them open.
async fn fill(url: &str) -> Vec<sqlx::AnyConnection> {
    drivers();
    let mut held = Vec::new();
    while let Ok(c) = sqlx::AnyConnection::connect(url).await {
        held.push(c);
        assert!(held.len() < 50, "the server accepts every connection");
    }
    held
}

/// Closes held connections (dropping one leaves the server to notice later).
async fn release(held: Vec<sqlx::AnyConnection>) {
    for c in held {
        let _ = c.close().await;
    }
}

async fn hold(url: &str, n: usize) -> Vec<sqlx::AnyConnection> {
    drivers();
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(
            sqlx::AnyConnection::connect(url)
                .await
                .expect("hold a connection"),
        );
    }
    held
}

/// Asserts that `tenure status --store url` and `tenure run --no-wait` fail
/// with exit 1, quoting the server's `words` and never `secret`.
fn assert_refused(dir: &Path, url: &str, words: &str, secret: &str) {
    for args in [
        vec!["status", "--store", url],
        vec![
            "run",
            "--store",
            url,
            "--election",
            "full",
            "--no-wait",
            "--",
            "true",
        ],
    ] {
        let started = Instant::now();
        let out = tenure(dir, &args);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {all}");
        assert!(all.contains(words), "{args:?}: expected {words:?}: {all}");
        assert!(!all.contains(secret), "{args:?}: secret shown: {all}");
        assert!(!all.contains("returned unexpected data"), "{all}");
        assert!(
            !all.contains("no connection could be opened in time"),
            "{all}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

/// While `held` takes every connection the server has, `tenure run` (with
/// neither `--wait` nor `--no-wait`) does not exit: it logs the server's
/// `words` (never `secret`) and asks again, as a follower whose read was
/// refused would. Once `held` is closed it leads and runs its command.
async fn run_waits_for_room(
    dir: &Path,
    url: &str,
    words: &str,
    secret: &str,
    held: Vec<sqlx::AnyConnection>,
) {
    let log = dir.join("waits-for-room.log");
    let mut child = spawn_tenure(
        dir,
        &["run", "--store", url, "--election", "room", "--", "true"],
        &log,
    );
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    let start = Instant::now();
    // Two refusals logged: it asked again after the first.
    while logged().matches(words).count() < 2 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "tenure run exited ({status}) while the server was full:\n{}",
                logged()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "not two refusals quoting {words:?} within 40 s:\n{}",
            logged()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!logged().contains(secret), "secret shown:\n{}", logged());
    release(held).await;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "tenure run did not lead and finish within 40 s of the server having room:\n{}",
            logged()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "{}", logged());
}

/// A PostgreSQL whose connection slots are all taken, and a role whose
/// CONNECTION LIMIT is reached: the error quotes the server.
#[tokio::test(flavor = "multi_thread")]
async fn postgres_refusing_connections_is_quoted() {
    let Some(pg) = private(
        Kind::Postgres,
        &[
            "-c",
            "max_connections=6",
            "-c",
            "superuser_reserved_connections=0",
        ],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = pg.url();
    let out = tenure(dir.path(), &["migrate", "--store", &root]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    {
        let mut c = sqlx::PgConnection::connect(&root).await.unwrap();
        c.execute(
            "CREATE ROLE lim LOGIN PASSWORD 'pw-9k2' CONNECTION LIMIT 1; \
             GRANT ALL ON ALL TABLES IN SCHEMA public TO lim",
        )
        .await
        .unwrap();
        let _ = c.close().await;
    }
    let port = pg.port;
    let lim = format!("postgres://lim:pw-9k2@127.0.0.1:{port}/test");
    refused_at_the_user_limit(
        dir.path(),
        &lim,
        "too many connections for role \"lim\"",
        "pw-9k2",
    )
    .await;
    // Every slot taken.
    let held = hold(&root, 6).await;
    let pw_url = format!("postgres://postgres:pw-77q@127.0.0.1:{port}/test");
    tokio::task::block_in_place(|| {
        assert_refused(
            dir.path(),
            &pw_url,
            "sorry, too many clients already",
            "pw-77q",
        )
    });
    run_waits_for_room(
        dir.path(),
        &pw_url,
        "sorry, too many clients already",
        "pw-77q",
        held,
    )
    .await;
    // Slots free again: status works and an election elects.
    tokio::task::block_in_place(|| works_again(dir.path(), &root));
}

/// With a user allowed one connection at `url`: tenure, which needs more
/// than one at a time, is refused (quoting `words`, never showing `secret`),
/// and again while someone else holds that one connection; then waits for
/// the connection to be free again.
async fn refused_at_the_user_limit(dir: &Path, url: &str, words: &str, secret: &str) {
    // A command needs one connection at a time (the probe's closes before
    // the store's opens), so a user limited to one can run `tenure
    // status`; refused once someone else holds the user's one connection.
    tokio::task::block_in_place(|| {
        let out = tenure(dir, &["status", "--store", url]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        // Until the server has seen the command's connection close.
        common_wait_for_slots(url);
    });
    let held = hold(url, 1).await;
    tokio::task::block_in_place(|| assert_refused(dir, url, words, secret));
    release(held).await;
    tokio::task::block_in_place(|| common_wait_for_slots(url));
}

/// Once the server at `url` accepts connections again, an election elects
/// and `tenure status` works.
fn works_again(dir: &Path, url: &str) {
    common_wait_for_slots(url);
    for args in [
        vec![
            "run",
            "--store",
            url,
            "--election",
            "full",
            "--no-wait",
            "--",
            "true",
        ],
        vec!["status", "--store", url],
    ] {
        let out = tenure(dir, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
    }
}

/// Waits until the server has accepted a connection again (the backends of
/// closed connections take a moment to exit).
fn common_wait_for_slots(url: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    drivers();
    let start = Instant::now();
    rt.block_on(async {
        loop {
            if let Ok(c) = sqlx::AnyConnection::connect(url).await {
                let _ = c.close().await;
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no slot freed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// A MariaDB whose connections are all taken ("Too many connections"), and
/// a user with MAX_USER_CONNECTIONS 1 at its limit: the error quotes the
/// server and names no password.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_refusing_connections_is_quoted() {
    let Some(my) = private(Kind::MariaDb, &["--max-connections=4"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = my.url();
    let out = tenure(dir.path(), &["migrate", "--store", &root]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    {
        let mut c = sqlx::MySqlConnection::connect(&root).await.unwrap();
        c.execute(
            "CREATE USER 'lim'@'%' IDENTIFIED BY 'pw-3v8' WITH MAX_USER_CONNECTIONS 1; \
             GRANT ALL ON test.* TO 'lim'@'%'; \
             CREATE USER 'app'@'%' IDENTIFIED BY 'pw-5t1'; \
             GRANT ALL ON test.* TO 'app'@'%'",
        )
        .await
        .unwrap();
        let _ = c.close().await;
    }
    let port = my.port;
    let lim = format!("mysql://lim:pw-3v8@127.0.0.1:{port}/test");
    let app = format!("mysql://app:pw-5t1@127.0.0.1:{port}/test");
    refused_at_the_user_limit(
        dir.path(),
        &lim,
        "User 'lim' has exceeded the 'max_user_connections' resource",
        "pw-3v8",
    )
    .await;
    // Every connection taken.
    let held = fill(&app).await;
    tokio::task::block_in_place(|| {
        assert_refused(dir.path(), &app, "Too many connections", "pw-5t1")
    });
    run_waits_for_room(dir.path(), &app, "Too many connections", "pw-5t1", held).await;
    tokio::task::block_in_place(|| works_again(dir.path(), &root));
}
