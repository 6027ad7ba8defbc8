//! Serving a router with limits: [`serve`] and its [`Limits`].
//!
//! `axum::serve` accepts every connection and keeps it as long as the
//! client wants. With more clients than file descriptors, `accept` fails,
//! new connections (health probes too) wait in the kernel's backlog until
//! they time out, and the process looks dead to its orchestrator. This
//! accept loop:
//!
//! - serves at most [`Limits::max_connections`] connections normally;
//! - past that, up to [`Limits::probe_connections`] more, each for one
//!   request: `GET /healthz` and `GET /readyz` are answered as usual,
//!   anything else with 503 at once. When those are all taken, the oldest
//!   one that has not sent a request yet is closed for the newcomer, so a
//!   probe is answered even while idle clients flood the port;
//! - closes a connection that has not sent complete request headers within
//!   [`Limits::header_timeout`], counted from its opening or from its
//!   previous answer: clients trickling headers, and idle keep-alive
//!   connections;
//! - gives each connection a kernel send buffer of 128 KiB
//!   (instead of letting it grow to megabytes for a client that does not
//!   read);
//! - closes a connection whose socket has taken no byte for
//!   [`Limits::write_timeout`] while an answer waits to be written: event
//!   streams of clients that stopped reading, with what was buffered for them.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_io_timeout::TimeoutStream;

/// Limits of [`serve`]. [`Limits::default`] derives the connection cap
/// from the process's open-file limit (`RLIMIT_NOFILE`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Connections served normally (default: what the open-file limit
    /// leaves after a tenth of it, at least 64, for the store and files, and
    /// after the probe connections).
    pub max_connections: usize,
    /// Connections past `max_connections` that may each ask
    /// `/healthz` or `/readyz` once (other requests: 503); default a
    /// sixteenth of the usable descriptors, 4 to 64.
    pub probe_connections: usize,
    /// How long a connection may take to send complete request headers,
    /// from its opening or its previous answer (default 10 s); also how
    /// long an idle keep-alive connection stays open. Probe connections
    /// past the cap get at most 2 s.
    pub header_timeout: Duration,
    /// How long an answer may wait for the client's socket to take a byte
    /// before the connection is closed (default 30 s).
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self::for_open_files(open_file_limit())
    }
}

/// The process's soft `RLIMIT_NOFILE` (1,024 if it cannot be read).
pub fn open_file_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we pass.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if r == 0 {
        lim.rlim_cur
    } else {
        1024
    }
}

impl Limits {
    /// The default limits for a process that may open `files` descriptors.
    pub fn for_open_files(files: u64) -> Self {
        let files = usize::try_from(files.min(1 << 20)).unwrap_or(1 << 20);
        let headroom = (files / 10).max(64);
        let usable = files.saturating_sub(headroom).max(32);
        let probe_connections = (usable / 16).clamp(4, 64);
        Self {
            max_connections: usable.saturating_sub(probe_connections).max(16),
            probe_connections,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
        }
    }

    /// With this many connections served normally.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// With this many probe connections past the cap.
    pub fn probe_connections(mut self, n: usize) -> Self {
        self.probe_connections = n;
        self
    }

    /// With this header (and keep-alive idle) timeout.
    pub fn header_timeout(mut self, t: Duration) -> Self {
        self.header_timeout = t;
        self
    }

    /// With this write timeout.
    pub fn write_timeout(mut self, t: Duration) -> Self {
        self.write_timeout = t;
        self
    }
}

/// The kernel send buffer of each connection (the kernel doubles it for
/// its bookkeeping): a client that stops reading holds this much, not the
/// megabytes the kernel's auto-tuning would give it.
pub(crate) const SEND_BUFFER: usize = 128 * 1024;

/// Longest header timeout of a probe connection past the cap.
const PROBE_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Decrements the count of normal connections when one ends.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A probe connection past the cap, as the accept loop tracks it.
struct Probe {
    /// It has sent a request (it is not closed for a newcomer).
    asked: Arc<AtomicBool>,
    /// Its task ended.
    done: Arc<AtomicBool>,
    /// Dropping it closes the connection.
    _close: oneshot::Sender<()>,
}

/// Serves `router` on `listener` within `limits`, until the task is
/// dropped. Errors of `accept` (out of descriptors) are logged and retried
/// after a short pause.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut probes: VecDeque<Probe> = VecDeque::new();
    let mut warned: Option<Instant> = None;
    let service = TowerToHyperService::new(router);
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                    tracing::warn!("HTTP: cannot accept a connection: {e}");
                    warned = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&tcp).set_send_buffer_size(SEND_BUFFER);
        if open.load(Ordering::Acquire) < limits.max_connections {
            open.fetch_add(1, Ordering::AcqRel);
            let guard = Open(Arc::clone(&open));
            let service = service.clone();
            let limits = limits.clone();
            tokio::spawn(async move {
                let _guard = guard;
                connection(tcp, service, &limits, limits.header_timeout, true).await;
            });
            continue;
        }
        if warned.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
            tracing::warn!(
                "HTTP: {} connections open, the cap (--max-connections); further ones only get /healthz and /readyz",
                limits.max_connections
            );
            warned = Some(Instant::now());
        }
        probes.retain(|p| !p.done.load(Ordering::Acquire));
        if probes.len() >= limits.probe_connections {
            // Close the oldest that has not asked anything yet.
            match probes.iter().position(|p| !p.asked.load(Ordering::Acquire)) {
                Some(i) => drop(probes.remove(i)),
                None => continue, // drops `tcp`: every probe slot is answering
            }
        }
        let asked = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (close, closed) = oneshot::channel();
        probes.push_back(Probe {
            asked: Arc::clone(&asked),
            done: Arc::clone(&done),
            _close: close,
        });
        let service = service.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let probe = hyper::service::service_fn(move |req: Request<Incoming>| {
                asked.store(true, Ordering::Release);
                let service = service.clone();
                async move {
                    match req.uri().path() {
                        "/healthz" | "/readyz" => service.call(req).await,
                        _ => Ok::<_, Infallible>(too_many()),
                    }
                }
            });
            let timeout = limits.header_timeout.min(PROBE_HEADER_TIMEOUT);
            tokio::select! {
                _ = connection(tcp, probe, &limits, timeout, false) => {}
                _ = closed => {}
            }
            done.store(true, Ordering::Release);
        });
    }
}

/// 503 for a request past the connection cap.
fn too_many() -> Response<Body> {
    let mut r = Response::new(Body::from(
        r#"{"error":"too many connections: only /healthz and /readyz are answered; retry later"}"#,
    ));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    h.insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    r
}

/// Serves one connection (HTTP/1.1) until it ends or a limit closes it.
async fn connection<S>(
    tcp: TcpStream,
    service: S,
    limits: &Limits,
    header_timeout: Duration,
    keep_alive: bool,
) where
    S: hyper::service::HttpService<Incoming, ResBody = Body>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut io = TimeoutStream::new(tcp);
    io.set_write_timeout(Some(limits.write_timeout));
    let io = TokioIo::new(Box::pin(io));
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(keep_alive)
        .serve_connection(io, service)
        .await;
    if let Err(e) = served {
        tracing::debug!("HTTP connection closed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::Limits;

    #[test]
    fn defaults_stay_below_the_open_file_limit() {
        for files in [64u64, 256, 1024, 65_536, 1 << 20, u64::MAX] {
            let l = Limits::for_open_files(files);
            assert!(l.max_connections >= 16, "{files}: {l:?}");
            assert!((4..=64).contains(&l.probe_connections), "{files}: {l:?}");
            if files >= 256 {
                let used = (l.max_connections + l.probe_connections) as u64;
                assert!(used + 64 <= files, "{files}: {l:?}");
            }
        }
        let l = Limits::for_open_files(256);
        assert_eq!((l.max_connections, l.probe_connections), (180, 12));
    }
}
