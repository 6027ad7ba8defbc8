//! A TCP proxy per candidate that can delay, blackhole, reset or cut the link.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass = 0,
    /// Forward after a delay.
    Latency = 1,
    /// Accept and read, forward nothing: requests vanish.
    Blackhole = 2,
    /// Refuse: close new connections at once (existing ones were reset).
    Cut = 3,
}

#[derive(Debug)]
struct State {
    mode: AtomicU8,
    latency_ms: AtomicU64,
    /// Bumped to close every open connection (a reset).
    generation: AtomicU64,
}

#[derive(Clone, Debug)]
pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
}

impl Proxy {
    pub async fn start(upstream: String) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State {
            mode: AtomicU8::new(0),
            latency_ms: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        });
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if st.mode.load(Ordering::SeqCst) == Mode::Cut as u8 {
                    drop(client);
                    continue;
                }
                let st = st.clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let generation = st.generation.load(Ordering::SeqCst);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let a = tokio::spawn(pipe(cr, sw, st.clone(), generation));
                    let b = tokio::spawn(pipe(sr, cw, st, generation));
                    let _ = tokio::join!(a, b);
                });
            }
        });
        Ok(Proxy { port, state })
    }

    pub fn set(&self, mode: Mode, latency: Duration) {
        self.state
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
        self.state.mode.store(mode as u8, Ordering::SeqCst);
        if mode == Mode::Cut {
            self.reset();
        }
    }

    /// Closes every open connection.
    pub fn reset(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    st: Arc<State>,
    generation: u64,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_millis(50), from.read(&mut buf)).await;
        if st.generation.load(Ordering::SeqCst) != generation {
            return; // dropping both halves closes the connection
        }
        let n = match read {
            Err(_) => continue,
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
        };
        match st.mode.load(Ordering::SeqCst) {
            m if m == Mode::Blackhole as u8 => continue,
            m if m == Mode::Latency as u8 => {
                tokio::time::sleep(Duration::from_millis(st.latency_ms.load(Ordering::SeqCst)))
                    .await;
            }
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
