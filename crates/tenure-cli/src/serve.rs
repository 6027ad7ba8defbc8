//! `tenure serve`: the HTTP API over every election of a store, optionally
//! campaigning (the Kubernetes `leader-elector` sidecar); also the listener
//! behind `tenure run --http`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tenure::store::DynStore;
use tenure::Elector;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

use crate::args::{HttpLimitArgs, ServeArgs};
use crate::failure::Failure;

/// `--http` as given: `HOST:PORT`, or a bare port on 127.0.0.1.
pub fn parse_addr(text: &str) -> Result<SocketAddr, Failure> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        Failure::Usage(format!(
            "--http {text:?} is not an address; use HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080) or a port"
        ))
    })
}

/// Binds `--http` before anything else starts, so a taken address is a usage error.
pub async fn bind(text: &str) -> Result<TcpListener, Failure> {
    let addr = parse_addr(text)?;
    TcpListener::bind(addr).await.map_err(|e| {
        Failure::Usage(format!(
            "--http {addr}: cannot listen there: {e}; pick a free address or port"
        ))
    })
}

/// Reads the bearer token; an empty or unreadable file is a usage error.
pub fn read_token(path: Option<&Path>) -> Result<Option<String>, Failure> {
    let Some(path) = path else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("cannot read --token-file {}: {e}", path.display())))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(Failure::Usage(format!(
            "--token-file {} is empty; put the bearer token in it",
            path.display()
        )));
    }
    // A token with a line break could never match a header value.
    let lines = token.lines().count();
    if lines > 1 || token.contains('\r') {
        return Err(Failure::Usage(format!(
            "--token-file {} has {lines} lines; it must hold the bearer token alone on one line",
            path.display()
        )));
    }
    Ok(Some(token))
}

/// Installs the process's Prometheus recorder, before the store is built:
/// a store registers its statement counters
/// (`tenure_store_statements_total`) with the recorder current then.
pub fn install_metrics() {
    let _ = prometheus();
}

/// The process's Prometheus recorder: installed once, rendered by `/metrics`.
fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // A histogram (buckets), not the exporter's default summary:
            // buckets aggregate across replicas.
            let built = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("tenure_renew_duration_seconds".into()),
                    &[
                        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    ],
                )
                .and_then(|b| b.install_recorder());
            match built {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::warn!("metrics disabled: {e}");
                    None
                }
            }
        })
        .clone()
}

/// The server's limits from the command line; zero values are usage
/// errors. Also sets the process's cap on elections with metric series of
/// their own.
pub fn limits(a: &HttpLimitArgs) -> Result<tenure::http::Limits, Failure> {
    let mut l = tenure::http::Limits::default();
    if let Some(n) = a.max_connections {
        if n == 0 {
            return Err(Failure::Usage(
                "--max-connections must be above zero (e.g. 1000)".into(),
            ));
        }
        l = l.max_connections(n);
        let files = tenure::http::open_file_limit();
        if (n + l.probe_connections) as u64 + 64 > files {
            tracing::warn!(
                "--max-connections {n}: with {} probe connections it leaves under 64 of the {files} open files (ulimit -n) for the store; accepts may fail",
                l.probe_connections
            );
        }
    }
    for (flag, t) in [
        ("--header-timeout", a.header_timeout),
        ("--write-timeout", a.write_timeout),
    ] {
        if t.is_zero() {
            return Err(Failure::Usage(format!(
                "{flag} must be above zero (e.g. 10s)"
            )));
        }
    }
    tenure::observe::set_metrics_election_cap(a.metrics_elections);
    Ok(l.header_timeout(a.header_timeout)
        .write_timeout(a.write_timeout))
}

/// Serves the API on `listener` until the returned task is dropped or aborted.
pub fn spawn(
    listener: TcpListener,
    store: DynStore,
    elector: Option<Elector>,
    token: Option<String>,
    keep_alive: Option<std::time::Duration>,
    limits: tenure::http::Limits,
) -> tokio::task::JoinHandle<()> {
    let mut api = tenure::http::Api::new(store);
    if let Some(k) = keep_alive {
        api = api.keep_alive(k);
    }
    if let Some(e) = elector {
        api = api.elector(e);
    }
    if let Some(t) = token {
        api = api.token(t);
    }
    if let Some(h) = prometheus() {
        api = api.metrics(Arc::new(move || h.render()));
    }
    let app = api.router();
    tracing::debug!("HTTP limits: {limits:?}");
    tokio::spawn(tenure::http::serve(listener, app, limits))
}

/// Prints where the API listens (stdout, flushed: scripts wait for it).
pub fn announce(listener: &TcpListener) {
    if let Ok(addr) = listener.local_addr() {
        // Nobody reading stdout is no reason to stop serving.
        let _ = crate::output::write(&format!("serving http://{addr}\n"));
    }
}

pub async fn serve(a: ServeArgs) -> Result<u8, Failure> {
    let token = read_token(a.token_file.as_deref())?;
    let limits = limits(&a.http_limits)?;
    let listener = bind(&a.http).await?;
    install_metrics();
    let mut int = signal(SignalKind::interrupt()).map_err(|e| Failure::Runtime(e.to_string()))?;
    let mut term = signal(SignalKind::terminate()).map_err(|e| Failure::Runtime(e.to_string()))?;
    if a.election.is_some() {
        a.store.require_named("tenure serve --election")?;
    }
    let store = tokio::select! {
        s = a.store.connect_waiting(a.wait) => s?,
        _ = int.recv() => return Ok(0),
        _ = term.recv() => return Ok(0),
    };
    tracing::info!("store: {}", store.describe());
    let elector = match &a.election {
        Some(election) => {
            let priority = u32::try_from(a.priority)
                .ok()
                .filter(|p| *p <= tenure::MAX_PRIORITY)
                .ok_or_else(|| {
                    Failure::Usage(format!(
                        "invalid priority: {} is out of range; use 0 to {}",
                        a.priority,
                        tenure::MAX_PRIORITY
                    ))
                })?;
            let mut b = Elector::builder(store.clone())
                .namespace(a.namespace.clone())
                .election(election.clone())
                .ttl(a.ttl)
                .priority(priority)
                .metadata(a.metadata.clone());
            if let Some(id) = &a.identity {
                b = b.identity(id.clone());
            }
            Some(b.build()?)
        }
        None => None,
    };
    announce(&listener);
    if a.sse_keep_alive.is_zero() {
        return Err(Failure::Usage(
            "--sse-keep-alive must be above zero (e.g. 15s)".into(),
        ));
    }
    let server = spawn(
        listener,
        store,
        elector.clone(),
        token,
        Some(a.sse_keep_alive),
        limits,
    );
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    server.abort();
    if let Some(e) = elector {
        // Release, so a successor takes over at once.
        let _ = e.shutdown().await;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("8080").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(parse_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        let e = parse_addr("localhost:http").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("localhost:http"), "{e}");
    }
}
