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

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
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

fn main() {
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
