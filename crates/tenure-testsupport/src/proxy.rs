//! A TCP proxy in front of a server that can be switched to swallow all
//! traffic: a blackholed network, where connections stay open and nothing
//! arrives. Bytes swallowed while it is on are gone, as on a real network
//! whose packets are dropped past the retransmission limit: a stream protocol
//! (HTTP/2, the PostgreSQL or MySQL protocol) then sees a broken connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy; it runs on the current tokio runtime until that ends.
pub struct Proxy {
    /// The local port clients connect to (on 127.0.0.1).
    pub port: u16,
    blackhole: Arc<AtomicBool>,
    /// The copying tasks of the connections so far (aborted by `reset`).
    pipes: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to
    /// `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_string();
        let pipes: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (bh, tasks) = (blackhole.clone(), pipes.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let (bh, tasks) = (bh.clone(), tasks.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        let up = tokio::spawn(pipe(cr, sw, bh.clone())).abort_handle();
                        let down = tokio::spawn(pipe(sr, cw, bh)).abort_handle();
                        let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                        tasks.retain(|t| !t.is_finished());
                        tasks.extend([up, down]);
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            blackhole,
            pipes,
        })
    }

    /// Closes every connection made so far (both sides see it end); new
    /// ones are accepted as before.
    pub fn reset(&self) {
        for task in self
            .pipes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }

    /// Swallows (`true`) or forwards (`false`) all traffic from now on.
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blackhole: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if blackhole.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
