//! Helpers for the CLI tests: running the binary, a breakable TCP proxy.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const BIN: &str = env!("CARGO_BIN_EXE_tenure");

/// Runs `tenure args...` to completion in `dir`.
pub fn tenure(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run tenure")
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts `tenure args...` in the background.
pub fn spawn_tenure(dir: &Path, args: &[&str], log: &Path) -> std::process::Child {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("TENURE_STORE")
        .env("TENURE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("spawn tenure")
}

/// Polls `cond` every millisecond until it holds or `within` passes.
pub async fn wait_until<T>(what: &str, within: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The "start TERM PID" lines that jobs append to an events file.
pub fn starts(events: &Path) -> Vec<(u64, i32)> {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            (p.next()? == "start").then_some(())?;
            Some((p.next()?.parse().ok()?, p.next()?.parse().ok()?))
        })
        .collect()
}

pub fn alive(pid: i32) -> bool {
    // A zombie still has a /proc entry; state Z means it is dead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// A TCP proxy in front of a server that can be switched to swallow all traffic
/// (a blackholed network: connections stay open, nothing arrives) or to
/// delay it (a slow network: everything arrives, in order, later).
pub struct Proxy {
    pub port: u16,
    blackhole: Arc<AtomicBool>,
    /// Milliseconds each chunk waits in each direction.
    delay_ms: Arc<AtomicU64>,
}

impl Proxy {
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_string();
        let (bh, delay) = (blackhole.clone(), delay_ms.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let (bh, delay) = (bh.clone(), delay.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::spawn(pipe(cr, sw, bh.clone(), delay.clone()));
                        tokio::spawn(pipe(sr, cw, bh, delay));
                    }
                });
            }
        });
        Proxy {
            port,
            blackhole,
            delay_ms,
        }
    }

    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }

    /// Every chunk read from now on is forwarded `delay` later, in each
    /// direction (a round trip grows by twice that); chunks keep their order,
    /// so data read before a shorter delay was set still comes first.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blackhole: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
) {
    // The writer forwards each chunk at its due time, in order.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if blackhole.load(Ordering::SeqCst) {
            continue;
        }
        let due =
            tokio::time::Instant::now() + Duration::from_millis(delay_ms.load(Ordering::SeqCst));
        if tx.send((due, buf[..n].to_vec())).is_err() {
            return;
        }
    }
}
