//! A TCP proxy in front of a server that can be switched to swallow all
//! traffic (a blackholed network, where connections stay open and nothing
//! arrives), to delay it (a slow network: everything arrives, in order,
//! later), to close its connections ([`Proxy::reset`]) or to cut the link
//! (connections closed and new ones refused). Bytes swallowed while the
//! blackhole is on are gone, as on a real network whose packets are dropped
//! past the retransmission limit, and a connection that lost bytes is closed
//! when the next bytes after the gap arrive: TCP never delivers a stream
//! with a hole in it (the kernel resets the connection instead). Delivered,
//! such a stream would match a request-response protocol's replies to the
//! wrong requests (RESP: each reply to the request after its own). The
//! tests and the chaos harness's network faults use it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy; it runs on the current tokio runtime until that ends.
#[derive(Debug)]
pub struct Proxy {
    /// The local port clients connect to (on 127.0.0.1).
    pub port: u16,
    blackhole: Arc<AtomicBool>,
    /// New connections are closed at once.
    cut: Arc<AtomicBool>,
    /// Milliseconds each chunk waits, in each direction.
    delay_ms: Arc<AtomicU64>,
    /// The copying tasks of the connections so far (aborted by `reset`).
    pipes: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    /// Bytes swallowed by the blackhole so far, both directions.
    swallowed: Arc<AtomicU64>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to
    /// `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let blackhole = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_string();
        let pipes: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let swallowed = Arc::new(AtomicU64::new(0));
        let (bh, refuse, delay, tasks, lost) = (
            blackhole.clone(),
            cut.clone(),
            delay_ms.clone(),
            pipes.clone(),
            swallowed.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let (bh, refuse, delay, tasks, lost) = (
                    bh.clone(),
                    refuse.clone(),
                    delay.clone(),
                    tasks.clone(),
                    lost.clone(),
                );
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        // Cut while connecting upstream: close this one too.
                        if refuse.load(Ordering::SeqCst) {
                            return;
                        }
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        let up = pipe(cr, sw, bh.clone(), delay.clone(), lost.clone());
                        let down = pipe(sr, cw, bh, delay, lost);
                        let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                        tasks.retain(|t| !t.is_finished());
                        tasks.extend(up.into_iter().chain(down));
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            blackhole,
            cut,
            delay_ms,
            pipes,
            swallowed,
        })
    }

    /// Bytes the blackhole swallowed so far, in both directions.
    pub fn swallowed_bytes(&self) -> u64 {
        self.swallowed.load(Ordering::SeqCst)
    }

    /// A proxy in front of the server of the store URL `url`, and `url`
    /// with the proxy's address (127.0.0.1 and its port) in place of the
    /// server's. Without a port in `url`, the scheme's default: PostgreSQL
    /// 5432, MySQL/MariaDB 3306, Redis 6379.
    pub async fn in_front_of(url: &str) -> std::io::Result<(Proxy, String)> {
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        let mut via = url::Url::parse(url).map_err(|e| invalid(format!("{url}: {e}")))?;
        let host = via
            .host_str()
            .ok_or_else(|| invalid(format!("{url}: no host")))?;
        let port = via
            .port()
            .or(match via.scheme() {
                "postgres" | "postgresql" => Some(5432),
                "mysql" | "mariadb" => Some(3306),
                "redis" | "rediss" => Some(6379),
                _ => None,
            })
            .ok_or_else(|| invalid(format!("{url}: no port")))?;
        let proxy = Proxy::start(&format!("{host}:{port}")).await?;
        via.set_host(Some("127.0.0.1"))
            .map_err(|e| invalid(e.to_string()))?;
        via.set_port(Some(proxy.port))
            .map_err(|()| invalid(format!("{url}: cannot take a port")))?;
        Ok((proxy, via.to_string()))
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

    /// Cuts the link (`true`): closes every connection and refuses new ones
    /// (accepted and closed at once) until called with `false`.
    pub fn set_cut(&self, on: bool) {
        self.cut.store(on, Ordering::SeqCst);
        if on {
            self.reset();
        }
    }

    /// Ends every fault: no cut, no blackhole, no delay.
    pub fn pass(&self) {
        self.set_cut(false);
        self.set_blackhole(false);
        self.set_delay(Duration::ZERO);
    }

    /// Swallows (`true`) or forwards (`false`) all traffic from now on.
    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }

    /// Forwards every chunk read from now on `delay` later, in each
    /// direction (a round trip grows by twice that). Chunks keep their
    /// order, so data read before a shorter delay was set still comes first.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`: one task reads and stamps each chunk with its due
/// time, another writes the chunks at their due times, in order.
fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    blackhole: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
) -> [tokio::task::AbortHandle; 2] {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut swallowed = false;
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if blackhole.load(Ordering::SeqCst) {
                swallowed = true;
                lost.fetch_add(n as u64, Ordering::SeqCst);
                continue;
            }
            if swallowed {
                // Bytes after a gap: close this direction (the peer reads
                // the end of the stream, and closing its side ends the
                // other direction too) rather than deliver a stream with a
                // hole in it.
                return;
            }
            let due = tokio::time::Instant::now()
                + Duration::from_millis(delay_ms.load(Ordering::SeqCst));
            if tx.send((due, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    });
    [reader.abort_handle(), writer.abort_handle()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes the blackhole swallowed leave a gap in the stream: the next
    /// bytes after it close the connection instead of arriving (behind the
    /// proxy, a server that echoes what it reads).
    #[tokio::test]
    async fn a_stream_with_a_gap_is_closed_not_delivered() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = echo.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = Proxy::start(&addr.to_string()).await.expect("proxy");
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port))
            .await
            .expect("connect");
        let mut buf = [0u8; 64];
        c.write_all(b"before").await.expect("write");
        let n = c.read(&mut buf).await.expect("read");
        assert_eq!(&buf[..n], b"before", "forwarded without a fault");

        proxy.set_blackhole(true);
        c.write_all(b"lost").await.expect("write");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while proxy.swallowed_bytes() < 4 {
            assert!(tokio::time::Instant::now() < deadline, "nothing swallowed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.set_blackhole(false);
        c.write_all(b"after").await.expect("write");
        let got = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("the connection is closed, not left hanging");
        match got {
            Ok(0) | Err(_) => {}
            Ok(n) => panic!(
                "bytes after the gap were delivered: {:?}",
                String::from_utf8_lossy(&buf[..n])
            ),
        }
    }
}
