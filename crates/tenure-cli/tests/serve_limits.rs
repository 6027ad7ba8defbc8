//! `tenure serve` under load it must survive: more connections than its
//! file descriptors allow (probes still answer), clients that trickle
//! headers or sit idle (closed on time), event-stream clients that never
//! read (memory stays bounded, they are disconnected); the store's address
//! in no HTTP answer while it is down; token files and the bearer scheme.

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    migrated_tables, postgres_behind_a_proxy, rss_kb, serve, tenure, tenure_command, text,
    wait_until,
};
use tenure_testsupport::http::blocking::get;

/// One request with `Connection: close`; the whole answer (status line,
/// headers, body), or an error if none came within `within`.
fn request(addr: &str, head: &str, within: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(within))?;
    write!(
        s,
        "{head}\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    Ok(String::from_utf8_lossy(&resp).into_owned())
}

fn status(resp: &str) -> u16 {
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {resp:?}"))
}

fn leader_of(addr: &str) -> String {
    let (_, body) = get(addr, "/");
    serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["name"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Whether the server closed `s`: reads what it sent (an error answer at
/// most) and reports true on end of stream or a reset.
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// More idle connections than the process has file descriptors for:
/// `/healthz` and `/readyz` still answer at once; other routes answer 503
/// quickly past the cap, and 200 again once the idle clients left.
#[test]
fn serve_probes_answer_past_the_connection_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = serve(
        dir.path(),
        Some(256),
        &["--store", &url, "--election", "cap", "--id", "one"],
    );
    assert_eq!(get(&s.addr, "/healthz").0, 200);
    let idle: Vec<TcpStream> = (0..400)
        .map(|_| TcpStream::connect(&s.addr).expect("connect"))
        .collect();
    // Let the server take them all in (or fail to).
    std::thread::sleep(Duration::from_millis(500));
    for path in ["/healthz", "/readyz"] {
        let start = Instant::now();
        let resp = request(
            &s.addr,
            &format!("GET {path} HTTP/1.1"),
            Duration::from_secs(3),
        );
        let resp = resp.unwrap_or_else(|e| {
            panic!(
                "{path} with 400 idle connections open: no answer within {:?}: {e}",
                start.elapsed()
            )
        });
        assert_eq!(status(&resp), 200, "{path}: {resp}");
        eprintln!("{path} answered in {:?} past the cap", start.elapsed());
    }
    let resp = request(
        &s.addr,
        "GET /v1/elections HTTP/1.1",
        Duration::from_secs(3),
    )
    .expect("past the cap other routes answer at once");
    assert_eq!(status(&resp), 503, "{resp}");
    assert!(resp.contains("too many connections"), "{resp}");
    drop(idle);
    let (code, resp) = wait_until_ok(&s.addr, "/v1/elections");
    assert_eq!(code, 200, "{resp}");
    // Still elects.
    assert_eq!(leader_of(&s.addr), "one");
}

fn wait_until_ok(addr: &str, path: &str) -> (u16, String) {
    let start = Instant::now();
    loop {
        let (code, resp) = get(addr, path);
        if code == 200 || start.elapsed() > Duration::from_secs(10) {
            return (code, resp);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client that sends its request headers a byte at a time is
/// disconnected once the header timeout (default 10 s) has passed.
#[test]
fn serve_drops_clients_that_trickle_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = serve(dir.path(), None, &["--store", &url]);
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    let start = Instant::now();
    c.write_all(b"GET /healthz HTTP/1.1\r\n").expect("send");
    let closed_after = loop {
        if closed_by_server(&mut c) {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "a client trickling headers is still connected after {:?}",
            start.elapsed()
        );
        // One header byte every 200 ms, never the end of the headers.
        if c.write_all(b"X").is_err() {
            break start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(150));
    };
    eprintln!("trickling client disconnected after {closed_after:?}");
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after < Duration::from_secs(13),
        "disconnected after {closed_after:?}, expected the 10 s header timeout"
    );
    assert_eq!(get(&s.addr, "/healthz").0, 200);
}

/// An idle keep-alive connection is closed after the idle timeout (the
/// header timeout, default 10 s), a connection that never sends anything too.
#[test]
fn serve_closes_idle_keep_alive_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let s = serve(dir.path(), None, &["--store", &url]);
    let mut silent = TcpStream::connect(&s.addr).expect("connect");
    let mut c = TcpStream::connect(&s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("read");
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().expect("length");
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length];
    r.read_exact(&mut body).expect("body");
    let idle_since = Instant::now();
    let mut silent_closed = None;
    let closed_after = loop {
        if silent_closed.is_none() && closed_by_server(&mut silent) {
            silent_closed = Some(idle_since.elapsed());
        }
        if closed_by_server(&mut c) {
            break idle_since.elapsed();
        }
        assert!(
            idle_since.elapsed() < Duration::from_secs(20),
            "an idle keep-alive connection is still open after {:?}",
            idle_since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("idle keep-alive connection closed after {closed_after:?}, a silent one after {silent_closed:?}");
    assert!(
        closed_after >= Duration::from_secs(9) && closed_after < Duration::from_secs(13),
        "closed after {closed_after:?}, expected the 10 s idle timeout"
    );
    assert!(
        silent_closed.is_some_and(|t| t < Duration::from_secs(13)),
        "a connection that never sent anything: {silent_closed:?}"
    );
}

/// Creates `n` elections, each led, with 200 bytes of metadata, straight
/// in the SQLite store's tables (as `n` leaders would leave them).
async fn seed_elections(dir: &Path, url: &str, n: usize) {
    let o = tenure(dir, &["migrate", "--store", url]);
    assert!(o.status.success(), "{}", text(&o));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("open the SQLite store");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as i64;
    let meta = "m".repeat(200);
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
         INSERT INTO tenure_leases (namespace, election, holder, metadata, term, version,
                                    ttl_us, acquired_us, renewed_us, expires_us)
         SELECT 'default', 'election-' || i, 'holder-' || i || '#1', ?2, 1, 1,
                3600000000, ?3, ?3, ?3 + 3600000000 FROM n",
    )
    .bind(n as i64)
    .bind(&meta)
    .bind(now)
    .execute(&pool)
    .await
    .expect("insert the elections");
    pool.close().await;
}

/// Opens `/v1/events` and reads `n` data lines.
fn read_events(addr: &str, n: usize) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(c, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut r = BufReader::new(c);
    let mut seen = 0;
    while seen < n {
        let mut line = String::new();
        assert!(r.read_line(&mut line).expect("read") > 0, "stream ended");
        if line.starts_with("data:") {
            seen += 1;
        }
    }
}

/// Waits until the RSS of `pid` stops moving (two readings 500 ms apart
/// within 2 MB) and returns it.
fn settled_rss(pid: u32) -> u64 {
    let start = Instant::now();
    let mut last = rss_kb(pid);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = rss_kb(pid);
        if now.abs_diff(last) < 2048 || start.elapsed() > Duration::from_secs(20) {
            return now;
        }
        last = now;
    }
}

/// 300 event-stream clients that never read, on a store of 20,000
/// elections: the server's memory stays bounded, it disconnects them once
/// their writes stall for the write timeout (default 30 s), and its memory
/// stays bounded after they left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_sse_clients_that_never_read_stay_bounded() {
    const ELECTIONS: usize = 20_000;
    const CLIENTS: usize = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    seed_elections(dir.path(), &url, ELECTIONS).await;
    let s = serve(dir.path(), None, &["--store", &url]);
    let pid = s.child.id();
    // One reader takes the whole first snapshot: the server knows them all.
    let addr = s.addr.clone();
    tokio::task::spawn_blocking(move || read_events(&addr, ELECTIONS))
        .await
        .expect("reader");
    let before = settled_rss(pid);
    let fds_before = open_fds(pid);
    let stuck: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).expect("connect");
            write!(c, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
            c
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let during = settled_rss(pid);
    eprintln!(
        "serve RSS {before} kB with one reader, {during} kB with {CLIENTS} clients that never read"
    );
    assert!(
        during < before + 150 * 1024,
        "RSS grew from {before} kB to {during} kB with {CLIENTS} clients that never read"
    );
    // Probes still answer meanwhile (the deadline allows for a debug build
    // on a busy machine streaming 300 × 20,000 events on one thread; the
    // bench measures a release build).
    let asked = Instant::now();
    let probe = request(&s.addr, "GET /healthz HTTP/1.1", Duration::from_secs(15))
        .expect("healthz while streams are stuck");
    assert_eq!(status(&probe), 200, "{probe}");
    eprintln!("/healthz answered in {:?} meanwhile", asked.elapsed());
    // The server lets go of them once their writes stalled for 30 s.
    let start = Instant::now();
    wait_until(
        "the server disconnects clients that never read",
        Duration::from_secs(60),
        || (open_fds(pid) < fds_before + 10).then_some(()),
    )
    .await;
    eprintln!(
        "server closed the stuck streams {:?} after they were all open (fds {} before them)",
        start.elapsed(),
        fds_before
    );
    drop(stuck);
    let after = settled_rss(pid);
    eprintln!("serve RSS {after} kB after they left");
    assert!(
        after < before + 100 * 1024,
        "RSS {after} kB after the clients left, {before} kB before them"
    );
    // Streams still work.
    let addr = s.addr.clone();
    tokio::task::spawn_blocking(move || read_events(&addr, 10))
        .await
        .expect("reader");
}

/// Everything one HTTP answer shows: status line, headers, body.
fn answers(addr: &str, paths: &[&str]) -> Vec<(String, String)> {
    paths
        .iter()
        .map(|p| {
            let resp = request(addr, &format!("GET {p} HTTP/1.1"), Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("GET {p}: {e}"));
            (p.to_string(), resp)
        })
        .collect()
}

/// While the store is down, no HTTP answer (bodies, headers, `/readyz`,
/// `/metrics`, the event stream) shows its URL, address, user or password:
/// a generic reason instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_never_show_the_store_address() {
    let Some((url, proxy, via)) = postgres_behind_a_proxy(Some("hunter2-never-shown")).await else {
        return;
    };
    let prefix = format!("svl{}_", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let _tables = migrated_tables(dir.path(), &url, &prefix);
    let election = "hidden";
    let s = serve(
        dir.path(),
        None,
        &[
            "--store",
            &via,
            "--table-prefix",
            &prefix,
            "--election",
            election,
            "--id",
            "one",
            "--ttl",
            "3s",
        ],
    );
    wait_until("the candidate leads", Duration::from_secs(10), || {
        (leader_of(&s.addr) == "one").then_some(())
    })
    .await;
    let one = format!("/v1/elections/default/{election}");
    let paths = [
        "/",
        "/v1/elections",
        one.as_str(),
        "/healthz",
        "/readyz",
        "/metrics",
    ];
    // Known state before the outage, so the election routes answer stale.
    answers(&s.addr, &paths);
    // An event stream open across the outage.
    let mut events = TcpStream::connect(&s.addr).expect("connect");
    write!(events, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut seen = Vec::new();
    // Down in two ways: no answer at all, then connections cut.
    for cut in ["blackhole", "reset"] {
        proxy.set_blackhole(true);
        if cut == "reset" {
            proxy.reset();
        }
        let start = Instant::now();
        let (code, resp) = loop {
            let (code, resp) = get(&s.addr, "/readyz");
            if code == 503 || start.elapsed() > Duration::from_secs(10) {
                break (code, resp);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(code, 503, "{cut}: {resp}");
        assert!(resp.contains("store unreachable"), "{cut}: {resp}");
        seen.extend(answers(&s.addr, &paths));
        // A transfer that cannot reach the store either.
        seen.push((
            "resign".into(),
            request(
                &s.addr,
                &format!("POST /v1/elections/default/{election}/resign HTTP/1.1"),
                Duration::from_secs(10),
            )
            .expect("resign"),
        ));
    }
    // The stream meanwhile (it carries a store-unavailable event).
    events
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut stream = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let mut buf = [0u8; 8192];
        match events.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => stream.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if String::from_utf8_lossy(&stream).contains("store_unavailable")
            || String::from_utf8_lossy(&stream).contains("StoreUnavailable")
        {
            break;
        }
    }
    seen.push((
        "/v1/events".into(),
        String::from_utf8_lossy(&stream).into_owned(),
    ));
    let port = proxy.port.to_string();
    let host = url::Url::parse(&url)
        .expect("url")
        .host_str()
        .unwrap_or("")
        .to_string();
    let forbidden = [
        "hunter2".to_string(),
        "postgres://".to_string(),
        "postgres:".to_string(),
        "postgres@".to_string(),
        "***".to_string(),
        format!("127.0.0.1:{port}"),
        format!(":{port}"),
        format!("{host}:{port}"),
    ];
    for (path, resp) in &seen {
        for f in &forbidden {
            assert!(
                !resp.contains(f.as_str()),
                "{path} shows {f:?} while the store is down:\n{resp}"
            );
        }
    }
    let all: String = seen.iter().map(|(_, r)| r.as_str()).collect();
    assert!(
        all.contains("x-tenure-stale: store unreachable"),
        "no stale answer with the generic reason:\n{all}"
    );
    proxy.set_blackhole(false);
}

/// A token file of two lines is refused at start (exit 2, naming the
/// file and the fix, never the token), by `serve` and `run --http`;
/// the store still works.
#[test]
fn serve_rejects_a_token_file_of_two_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let file = dir.path().join("token");
    std::fs::write(&file, "first-secret-line\nsecond-secret-line\n").expect("write");
    let file = file.display().to_string();
    for o in serve_and_run_exit_2(
        dir.path(),
        &url,
        &["--token-file", &file],
        &[&file, "one line"],
    ) {
        assert!(!text(&o).contains("secret-line"), "{}", text(&o));
    }
    // Refused before touching the store; the store still works.
    let o = tenure(dir.path(), &["migrate", "--store", &url]);
    assert!(o.status.success(), "{}", text(&o));
    let o = tenure(dir.path(), &["status", "--store", &url]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Runs `tenure args...`; fails the test if it still runs after `within`.
fn tenure_within(dir: &Path, args: &[&str], within: Duration) -> std::process::Output {
    let mut child = tenure_command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > within {
            let _ = child.kill();
            let o = child.wait_with_output().expect("output");
            panic!("{args:?} still running after {within:?}:\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `Authorization: bearer TOKEN` (any case of the scheme) authenticates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_accepts_the_bearer_scheme_in_any_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret\n").expect("write");
    let s = serve(
        dir.path(),
        None,
        &[
            "--store",
            &url,
            "--election",
            "bearer",
            "--id",
            "one",
            "--ttl",
            "2s",
            "--token-file",
            &file.display().to_string(),
        ],
    );
    wait_until("the candidate leads", Duration::from_secs(10), || {
        (leader_of(&s.addr) == "one").then_some(())
    })
    .await;
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let mut c = TcpStream::connect(&s.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            c,
            "POST /v1/elections/default/bearer/resign HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Authorization: {scheme} s3cret\r\nContent-Length: 0\r\n\r\n"
        )
        .expect("send");
        let mut resp = String::new();
        c.read_to_string(&mut resp).expect("read");
        // Authenticated: asked (202), or nothing to hand over while the
        // lone candidate takes the lease back (409); never 401.
        assert!([202, 409].contains(&status(&resp)), "{scheme}: {resp}");
        wait_until("the candidate leads again", Duration::from_secs(15), || {
            (leader_of(&s.addr) == "one").then_some(())
        })
        .await;
    }
    let (code, resp) = {
        let resp = request(
            &s.addr,
            "POST /v1/elections/default/bearer/resign HTTP/1.1\r\nAuthorization: bearer wrong",
            Duration::from_secs(10),
        )
        .expect("resign");
        (status(&resp), resp)
    };
    assert_eq!(code, 401, "{resp}");
}

/// The limit flags: zero is a usage error (exit 2 naming the flag), on
/// `serve` and on `run --http`.
#[test]
fn serve_limit_flags_of_zero_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--header-timeout", "0s"),
        ("--write-timeout", "0s"),
    ] {
        serve_and_run_exit_2(dir.path(), &url, &[flag, value], &[flag, "above zero"]);
    }
}

/// `tenure serve` and `tenure run --http` on `url` with `flags`: each exits
/// 2 within 10 s, its stderr holding every one of `needles`. Their outputs.
fn serve_and_run_exit_2(
    dir: &Path,
    url: &str,
    flags: &[&str],
    needles: &[&str],
) -> Vec<std::process::Output> {
    let serve = [&["serve", "--store", url, "--http", "127.0.0.1:0"], flags].concat();
    let run = [
        &[
            "run",
            "--store",
            url,
            "--election",
            "e",
            "--http",
            "127.0.0.1:0",
        ],
        flags,
        &["--", "true"],
    ]
    .concat();
    [serve, run]
        .iter()
        .map(|args| {
            let o = tenure_within(dir, args, Duration::from_secs(10));
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                needles.iter().all(|n| err.contains(n)),
                "{args:?}: {}",
                text(&o)
            );
            o
        })
        .collect()
}
