//! Connecting: tells "down" from "not etcd" from "bad credentials", then
//! starts the watch, endpoint-health and sweeper tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::sync::broadcast;

use super::endpoints::endpoint_health;
use super::errors::map_client_error;
use super::retry::retry;
use super::sweeper::{sweep_loop, Held};
use super::url::{parse_url, redact};
use super::watch::watch_loop;
use super::{EtcdStore, Inner};
use crate::error::{Error, Result};
use crate::store::StoreOptions;

/// How often the client pings an etcd server: above etcd's default
/// `--grpc-keepalive-min-time` of 5 s, with room for timer jitter.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// How long a ping may go unanswered before the connection counts as dead.
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(3);

impl EtcdStore {
    /// Connects to the etcd cluster a URL names and starts watching for changes.
    ///
    /// Fails within `options.connect_timeout` with [`Error::Unavailable`] when no
    /// endpoint answers, [`Error::Protocol`] when an endpoint accepts TCP but is
    /// not an etcd server, and [`Error::PermissionDenied`] for bad credentials.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        crate::names::validate_table_prefix(&options.table_prefix)?;
        let parsed = parse_url(url)?;
        let described = redact(url);
        // The TLS files first: a wrong path is a usage error, also while the
        // cluster is down.
        let tls = parsed
            .tls
            .as_ref()
            .map(|files| super::tls::options(files, &described))
            .transpose()?;
        let timeout = options.connect_timeout;
        let unavailable = |reason: String| Error::Unavailable {
            source: None,
            store: described.clone(),
            reason,
        };
        // Which endpoints accept TCP at all: tells "down" from "not etcd".
        let mut reachable = 0;
        for ep in &parsed.endpoints {
            let addr = super::url::address(ep);
            if let Ok(Ok(_)) =
                tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await
            {
                reachable += 1;
            }
        }
        if reachable == 0 {
            return Err(unavailable(format!(
                "no endpoint accepts connections ({})",
                parsed.endpoints.join(", ")
            )));
        }
        let mut copts = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout.max(Duration::from_secs(2)))
            // HTTP/2 pings find a dead connection (the watch's, above all)
            // without waiting for a request to time out. etcd (grpc-go)
            // closes a connection whose client pings more often than its
            // `--grpc-keepalive-min-time` (5 s by default) with GOAWAY
            // "too_many_pings", and one that pings without an open stream
            // at all: a ping every second lost every quiet follower's watch
            // every four seconds.
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
            .with_keep_alive_while_idle(false)
            .with_require_leader(true);
        if let Some((user, pass)) = &parsed.user {
            copts = copts.with_user(user.clone(), pass.clone());
        }
        if let Some(tls) = tls {
            copts = copts.with_tls(tls);
        }
        // A TLS failure is a configuration error: reported at once, not
        // retried until the timeout and then called "not etcd".
        let tls_error = |e: &etcd_client::Error| {
            parsed
                .tls
                .as_ref()
                .and_then(|files| super::tls::classify(files, &described, e))
        };
        let scheme_hint = if parsed.tls.is_some() {
            "; etcds:// needs a client port that serves TLS (etcd --cert-file, --key-file, https:// client URLs)"
        } else {
            "; an etcd that serves TLS needs etcds://"
        };
        let not_etcd = || {
            Error::Protocol { source: None,
            store: described.clone(),
            reason: format!(
                "no etcd v3 (gRPC) answer within {timeout:?}: is this an etcd server? (an etcd URL names etcd client ports, default 2379){scheme_hint}"
            ),
        }
        };
        // Start with the members that accept connections (all of them if
        // none do, so the error below names the problem): a new store must
        // not send its first calls to a dead member.
        let reachable = super::endpoints::reachable(&parsed.endpoints).await;
        let first: Vec<String> = if reachable.iter().any(|r| *r) {
            parsed
                .endpoints
                .iter()
                .zip(&reachable)
                .filter(|(_, r)| **r)
                .map(|(e, _)| e.clone())
                .collect()
        } else {
            parsed.endpoints.clone()
        };
        let client = match tokio::time::timeout(
            timeout,
            Client::connect(first.clone(), Some(copts)),
        )
        .await
        {
            Err(_) => return Err(not_etcd()),
            Ok(Err(e)) => {
                if let Some(tls) = tls_error(&e) {
                    return Err(tls.with_source(e));
                }
                return Err(match map_client_error(&described, e) {
                    Error::Unavailable { .. } => not_etcd(),
                    other => other,
                });
            }
            Ok(Ok(c)) => c,
        };
        // Ask until one endpoint answers (a cluster member may be down).
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last = None;
        loop {
            let mut probe = client.clone();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, probe.status()).await {
                Ok(Ok(_)) => break,
                Ok(Err(e)) => {
                    if let Some(tls) = tls_error(&e) {
                        return Err(tls.with_source(e));
                    }
                    last = Some(map_client_error(&described, e))
                }
                Err(_) => {}
            }
            if tokio::time::Instant::now() + Duration::from_millis(100) >= deadline {
                return Err(match last {
                    Some(Error::Unavailable { reason, .. })
                        if reason.contains("no leader") || reason.contains("Unavailable") =>
                    {
                        unavailable(reason)
                    }
                    Some(e @ Error::PermissionDenied { .. }) => e,
                    _ => not_etcd(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A read checks the credentials' permissions on our prefix.
        let prefix = format!("{}/", options.table_prefix);
        let read = retry(&client, |mut c| {
            let prefix = prefix.clone();
            async move {
                c.get(
                    prefix,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
            }
        });
        match tokio::time::timeout(timeout, read).await {
            // It answered its status: a saturated server (hundreds of
            // replicas starting at once), which `tenure run` waits for.
            Err(_) => {
                return Err(Error::overloaded(
                    described.clone(),
                    format!("answered its status but not a read within {timeout:?}"),
                ))
            }
            Ok(Err(e)) => {
                return Err(match tls_error(&e) {
                    Some(tls) => tls.with_source(e),
                    None => map_client_error(&described, e),
                })
            }
            Ok(Ok(_)) => {}
        }
        let (tx, _) = broadcast::channel(1024);
        let activity = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let push = Arc::new(crate::store::util::push_health::PushMonitor::new(
            super::watch::WHAT,
        ));
        let watcher = tokio::spawn(watch_loop(
            client.clone(),
            options.table_prefix.clone(),
            tx.clone(),
            activity.clone(),
            described.clone(),
            Arc::clone(&push),
        ));
        let endpoints = (parsed.endpoints.len() > 1).then(|| {
            let active = parsed.endpoints.iter().map(|e| first.contains(e)).collect();
            tokio::spawn(endpoint_health(
                client.clone(),
                parsed.endpoints.clone(),
                active,
            ))
        });
        let batches = super::batch::Batches::new(super::batch::Caller {
            client: client.clone(),
            described: described.clone(),
        });
        let inner = Arc::new(Inner {
            endpoints,
            client,
            prefix: options.table_prefix.clone(),
            described,
            history_retention: options.history_retention.max(1),
            leases: Mutex::new(HashMap::new()),
            held: Mutex::new(Held::default()),
            changes: tx,
            activity,
            push,
            watcher,
            sweeper: Mutex::new(None),
            freed_seen: Mutex::new(HashMap::new()),
            batches,
            heartbeat_reads: crate::telemetry::store_statements("etcd", "heartbeat_read"),
            keep_alives: crate::telemetry::store_statements("etcd", "keepalive"),
        });
        let sweeper = tokio::spawn(sweep_loop(Arc::downgrade(&inner)));
        *inner.sweeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(sweeper);
        Ok(Self { inner })
    }
}
