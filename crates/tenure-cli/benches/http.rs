//! `tenure serve`: idle memory and `GET /` latency at a fixed request rate.
//!
//! `cargo bench -p tenure-cli --bench http -- [--rate 1000] [--secs 10] [--conns 8] [--bin PATH]`
//!
//! Starts `tenure serve --election bench` on a temporary SQLite file, lets
//! it sit idle for 5 s and reads its RSS from /proc, then sends `GET /` at a
//! fixed rate (request i is due at i/rate s) over keep-alive connections on
//! loopback and reports latency percentiles counted from when each request
//! was due (a slow answer delays the next ones and is charged to them: no
//! coordinated omission), for a bounded time.
//!
//! `cargo bench -p tenure-cli --bench http -- --scenario limits [--elections 20000] [--nofile 1024] [--bin PATH]`
//!
//! Memory and probes under load: `tenure serve` (started under `ulimit -n
//! NOFILE`) on a SQLite store of ELECTIONS led elections (200 bytes of
//! metadata each). RSS (peak of 100 ms samples) idle, with 1,000 event-stream
//! clients that read the whole first state, with 300 that never read (for
//! 10 s), and 5 s after they left; then `GET /healthz` latency percentiles on
//! a new connection each (as probes connect), 20/s for 5 s, while 1,100 idle
//! connections are open.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// The resident memory of process `pid`, in KiB; 0 once it is gone.
fn rss_kb(pid: u32) -> u64 {
    tenure_testsupport::process::rss_kb(pid).unwrap_or(0)
}

/// Sends one keep-alive `GET /` and reads the whole answer.
fn get(conn: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    conn.get_mut()
        .write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body)
}

/// Peak RSS of `pid` over `d`, sampled every 100 ms.
fn peak_rss(pid: u32, d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut peak = rss_kb(pid);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_kb(pid));
    }
    peak
}

fn limits_scenario() {
    let elections: usize = arg("--elections", "20000").parse().expect("--elections");
    let nofile: u32 = arg("--nofile", "1024").parse().expect("--nofile");
    let bin = arg("--bin", env!("CARGO_BIN_EXE_tenure"));
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let o = Command::new(&bin)
        .args(["migrate", "--store", &url])
        .output()
        .expect("migrate");
    assert!(o.status.success(), "{o:?}");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&url).await.expect("open");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_micros() as i64;
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
             INSERT INTO tenure_leases (namespace, election, holder, metadata, term, version,
                                        ttl_us, acquired_us, renewed_us, expires_us)
             SELECT 'default', 'election-' || i, 'holder-' || i || '#1', ?2, 1, 1,
                    3600000000, ?3, ?3, ?3 + 3600000000 FROM n",
        )
        .bind(elections as i64)
        .bind("m".repeat(200))
        .bind(now)
        .execute(&mut c)
        .await
        .expect("seed");
    });
    let mut child = Command::new("sh")
        .args([
            "-c",
            &format!("ulimit -n {nofile} && exec \"$0\" \"$@\""),
            &bin,
        ])
        .args(["serve", "--http", "127.0.0.1:0", "--store", &url])
        .env("TENURE_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tenure serve");
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("announced address");
    let addr = line
        .trim()
        .strip_prefix("serving http://")
        .expect("serving line")
        .to_string();
    std::thread::sleep(Duration::from_secs(5));
    println!(
        "tenure serve, {elections} elections, ulimit -n {nofile}: idle RSS {} kB",
        rss_kb(pid)
    );

    // 1,000 clients that read the whole first state.
    let readers = 1000;
    let start = Instant::now();
    let done = rt.block_on(async {
        let tasks: Vec<_> = (0..readers)
            .map(|_| {
                let addr = addr.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                    let mut s = tokio::net::TcpStream::connect(&addr).await.ok()?;
                    s.write_all(b"GET /v1/events HTTP/1.1\r\nHost: b\r\n\r\n")
                        .await
                        .ok()?;
                    let mut r = tokio::io::BufReader::new(s);
                    let mut seen = 0;
                    let mut line = String::new();
                    while seen < elections {
                        line.clear();
                        if r.read_line(&mut line).await.ok()? == 0 {
                            return None;
                        }
                        if line.starts_with("data:") {
                            seen += 1;
                        }
                    }
                    Some(r)
                })
            })
            .collect();
        let sampler = tokio::task::spawn_blocking(move || peak_rss(pid, Duration::from_secs(1)));
        let mut open = Vec::new();
        for t in tasks {
            if let Ok(Some(r)) = t.await {
                open.push(r);
            }
        }
        let _ = sampler.await;
        let peak = rss_kb(pid);
        (open.len(), peak, open)
    });
    println!(
        "{} of {readers} event-stream clients read all {elections} elections in {:.1} s; RSS then {} kB, peak over 3 s {} kB",
        done.0,
        start.elapsed().as_secs_f64(),
        done.1,
        peak_rss(pid, Duration::from_secs(3))
    );
    drop(done);
    println!(
        "RSS 5 s after they left: {} kB",
        peak_rss(pid, Duration::from_secs(5))
    );

    // 300 clients that never read.
    let stuck: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut c = TcpStream::connect(&addr).ok()?;
            c.write_all(b"GET /v1/events HTTP/1.1\r\nHost: b\r\n\r\n")
                .ok()?;
            Some(c)
        })
        .collect();
    println!(
        "{} event-stream clients that never read: peak RSS over 10 s {} kB",
        stuck.len(),
        peak_rss(pid, Duration::from_secs(10))
    );
    drop(stuck);
    println!(
        "RSS 5 s after they left: {} kB",
        peak_rss(pid, Duration::from_secs(5))
    );

    // /healthz while 1,100 idle connections are open.
    let idle: Vec<TcpStream> = (0..1100)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut lat = Vec::new();
    let mut failed = 0;
    let begin = Instant::now();
    for i in 0..100u32 {
        let due = begin + Duration::from_millis(50) * i;
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        let ok = (|| -> std::io::Result<bool> {
            let mut s = TcpStream::connect(&addr)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")?;
            let mut resp = String::new();
            s.read_to_string(&mut resp)?;
            Ok(resp.starts_with("HTTP/1.1 200"))
        })();
        match ok {
            Ok(true) => lat.push(due.elapsed()),
            _ => failed += 1,
        }
    }
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "GET /healthz, new connection each, 20/s for 5 s, {} idle connections open: {} answered 200, {failed} failed; p50 {:?}  p99 {:?}  max {:?}",
        idle.len(),
        lat.len(),
        pct(0.50),
        pct(0.99),
        lat.last().copied().unwrap_or_default()
    );
    drop(idle);
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    if arg("--scenario", "get") == "limits" {
        return limits_scenario();
    }
    let rate: u64 = arg("--rate", "1000").parse().expect("--rate");
    let secs: u64 = arg("--secs", "10").parse().expect("--secs");
    let conns: u64 = arg("--conns", "8").parse().expect("--conns");
    let bin = arg("--bin", env!("CARGO_BIN_EXE_tenure"));
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let mut child = Command::new(&bin)
        .args(["serve", "--http", "127.0.0.1:0", "--store", &url])
        .args(["--election", "bench", "--id", "bench"])
        .env("TENURE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn tenure serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("announced address");
    let addr = line
        .trim()
        .strip_prefix("serving http://")
        .expect("serving line")
        .to_string();
    std::thread::sleep(Duration::from_secs(5));
    let idle = rss_kb(child.id());
    println!("tenure serve (one election, leading) idle RSS after 5 s: {idle} kB");

    let start = Instant::now() + Duration::from_millis(100);
    let total = rate * secs;
    let workers: Vec<_> = (0..conns)
        .map(|w| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let s = TcpStream::connect(&addr).expect("connect");
                s.set_nodelay(true).expect("nodelay");
                let mut conn = BufReader::new(s);
                let mut lat = Vec::new();
                let mut i = w;
                while i < total {
                    let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    get(&mut conn).expect("GET /");
                    lat.push(due.elapsed());
                    i += conns;
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<Duration> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    let took = start.elapsed();
    let busy = rss_kb(child.id());
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "GET / at {rate}/s for {secs} s over {conns} keep-alive connections: {} requests in {:.2} s ({:.0}/s achieved)",
        lat.len(),
        took.as_secs_f64(),
        lat.len() as f64 / took.as_secs_f64()
    );
    println!(
        "latency from due time: p50 {:?}  p90 {:?}  p99 {:?}  p99.9 {:?}  max {:?}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(0.999),
        lat[lat.len() - 1]
    );
    println!("RSS after the load: {busy} kB");
    let _ = child.kill();
    let _ = child.wait();
}
