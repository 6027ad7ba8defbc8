//! The etcd v3 store (`etcd://host:port[,host:port...]`, feature `etcd`).
//!
//! etcd has no clock usable inside a transaction; what it has is *leases*,
//! whose expiry the etcd leader judges. So expiry here is etcd lease expiry
//! (DESIGN rule 2), and every decision is one transaction (rule 1).
//!
//! Keys, under `<prefix>` (`StoreOptions::table_prefix`, default `tenure_`;
//! namespace and election are escaped so `/` in a name is unambiguous):
//!
//! | key | lease | value |
//! |---|---|---|
//! | `<p>/lease/<ns>/<election>` | the tenure's own lease | the holder id; its `create_revision` is the term |
//! | `<p>/state/<ns>/<election>` | none | JSON: last term, holder, metadata, reasons, informational times |
//! | `<p>/handover/<ns>/<election>` | the holder's lease (a request) or a fresh lease of the window (after a hand-over) | JSON: target, reason |
//! | `<p>/member/<ns>/<election>/<holder>` | none (its liveness is a lease named in the value) | JSON: metadata, priority, times |
//! | `<p>/history/<ns>/<election>/<term:020>` | none | JSON: one term |
//!
//! * **One lease per process** (per store instance and lease length, whole
//!   seconds): every tenure and member registration of that length is on it,
//!   and one keep-alive round serves every renewal of a renew instant (the
//!   electors renew on a shared grid; a round waits 10 ms to gather them).
//!   A key whose elector stopped renewing without releasing (shutdown without
//!   release, a stuck task) would live as long as any other election of the
//!   process renews, so the store tracks, per tenure, the start of its last
//!   acquire/renew (monotonic clock) and a **sweeper** (every quarter of the
//!   shortest TTL held) deletes, by the release transaction (recording the end
//!   as `expired`), any tenure not renewed for longer than its TTL; its
//!   elector's deadline (`t0 + ttl·(1−drift)`) passed before that. Member
//!   registrations not heartbeated within their TTL are marked lapsed the
//!   same way. If the process dies, the lease expires and takes every key.
//! * **Acquire**: the process lease is kept alive (or granted) after the
//!   call started, so the key lives at least `ttl` from the caller's `t0`; then one
//!   transaction: the lease key must not exist (`create_revision == 0`) and
//!   the state and hand-over keys must be as read (the hand-over key admitting
//!   us); it creates the lease key on that lease. The **term is the revision
//!   of that transaction**, so terms increase strictly across the whole
//!   cluster but are not dense.
//! * **Renew**: one transaction comparing the lease key's `create_revision`
//!   with the term, its value with the holder and the hand-over key's absence,
//!   concurrently with a keep-alive sent after the call started; both must
//!   succeed. The key then lives at least `ttl` past the call's start.
//! * **Times** other than expiry (`acquired_at_us`, `renewed_at_us`,
//!   `expires_at_us`, member heartbeats, history times) come from the client's
//!   clock and are informational only; no decision compares them.
//!   `remaining` comes from the lease's TTL in etcd (whole seconds, rounded
//!   down, capped at the holder's TTL).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, GetOptions, KeyValue,
    LeaseKeepAliveStream, LeaseKeeper, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::{
    identity_of, Acquire, Capabilities, Changes, Claim, ElectionKey, Handover, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, StoreOptions, Tenure,
};
use crate::error::{Error, Result};

/// The granularity of etcd leases.
const SECOND: Duration = Duration::from_secs(1);

/// How long one keep-alive round trip may take before the stream is dropped.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a renewal or heartbeat waits for others to join its keep-alive
/// round: electors renew on a shared grid, so the renewals of one instant
/// share one keep-alive. Short against any renew period (TTLs are >= 1 s).
const GATHER: Duration = Duration::from_millis(10);

/// The etcd store; see the [module documentation](self).
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    prefix: String,
    described: String,
    history_retention: u64,
    /// The process leases, one per lease length (whole seconds).
    leases: Mutex<HashMap<i64, Arc<ProcessLease>>>,
    /// What this store holds on those leases, for the sweeper.
    held: Mutex<Held>,
    changes: broadcast::Sender<Option<ElectionKey>>,
    watcher: tokio::task::JoinHandle<()>,
    endpoints: Option<tokio::task::JoinHandle<()>>,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// When this process first saw an expired lease (lease key gone, state
    /// still naming the holder), per election and term: followers measure the
    /// succession grace from there, since etcd does not say when a lease expired.
    freed_seen: Mutex<HashMap<(ElectionKey, u64), i64>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("store", &self.inner.described)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("store", &self.described)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.watcher.abort();
        if let Some(t) = &self.endpoints {
            t.abort();
        }
        if let Some(t) = self
            .sweeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
    }
}

/// Everything this store keeps on its process leases. A key on a shared lease
/// lives as long as *any* election of the process renews, so each one is
/// tracked here and deleted by the sweeper once its own renewals stop.
#[derive(Default)]
struct Held {
    /// Tenures we acquired, by (election, term).
    tenures: HashMap<(ElectionKey, u64), HeldTenure>,
    /// Acquisitions whose transaction was (or may have been) sent but whose
    /// outcome we do not know (an error, or a caller that gave up).
    pending: HashMap<(ElectionKey, String), PendingAcquire>,
    /// Acquisitions in progress, by (election, holder).
    acquiring: HashMap<(ElectionKey, String), usize>,
    /// Member registrations, by (election, holder).
    members: HashMap<(ElectionKey, String), HeldMember>,
}

struct HeldTenure {
    holder: String,
    lease: Arc<ProcessLease>,
    /// The lease the key was created on.
    lease_id: i64,
    ttl: Duration,
    /// Start of the last acquire/renew call plus its TTL (monotonic clock):
    /// the elector's own deadline is before this, so past it nobody believes
    /// in this tenure and the sweeper may delete its key.
    sweep_after: Instant,
}

struct PendingAcquire {
    lease_id: i64,
    ttl: Duration,
    sweep_after: Instant,
}

struct HeldMember {
    ttl: Duration,
    sweep_after: Instant,
    /// The member key's revision as our last heartbeat wrote it (0: none yet).
    mod_rev: i64,
}

/// Counts an acquisition in progress for the sweeper, until dropped.
struct Acquiring<'a> {
    inner: &'a Inner,
    id: (ElectionKey, String),
}

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        let mut held = self.inner.held();
        if let Some(n) = held.acquiring.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                held.acquiring.remove(&self.id);
            }
        }
    }
}

/// How a tenure ends.
#[derive(Clone, Copy)]
enum End<'a> {
    Released,
    HandedOver(&'a Handover, Duration, &'a str),
    /// Swept: its elector stopped renewing without releasing.
    Expired,
}

/// A parsed `etcd://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EtcdUrl {
    endpoints: Vec<String>,
    user: Option<(String, String)>,
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            if let Some(Ok(b)) = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_url(url: &str) -> Result<EtcdUrl> {
    let bad = |reason: String| Error::InvalidUrl {
        url: redact(url),
        reason,
    };
    let rest = url
        .split_once("://")
        .filter(|(s, _)| s.eq_ignore_ascii_case("etcd"))
        .map(|(_, r)| r)
        .ok_or_else(|| bad("expected etcd://host:port[,host:port...]".into()))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user = match userinfo {
        None => None,
        Some(u) => {
            let (name, pass) = u.split_once(':').unwrap_or((u, ""));
            Some((percent_decode(name), percent_decode(pass)))
        }
    };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad(
                "empty host; expected etcd://host:port[,host:port...]".into()
            ));
        }
        let with_port = match host.rsplit_once(':') {
            Some((_, port)) if !host.ends_with(']') => {
                port.parse::<u16>()
                    .map_err(|_| bad(format!("bad port in {host:?}")))?;
                host.to_string()
            }
            _ => format!("{host}:2379"),
        };
        endpoints.push(format!("http://{with_port}"));
    }
    Ok(EtcdUrl { endpoints, user })
}

fn redact(url: &str) -> String {
    super::redact_url(url)
}

/// Escapes a name for use as one path segment of a key.
fn seg(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

fn unseg(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2))
        .unwrap_or(0)
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 2)
}

/// Whole seconds, rounded up, at least one.
fn lease_secs(d: Duration) -> i64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(s.max(1)).unwrap_or(i64::MAX)
}

/// The lease key's companion record (no lease; survives expiry and release).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct State {
    /// The term; `None` when written by the acquiring transaction (whose
    /// revision, this key's `mod_revision`, is the term).
    term: Option<u64>,
    /// The holder while the term lasts (by this record); `None` once released.
    holder: Option<String>,
    metadata: String,
    ttl_ms: u64,
    acquired_at_us: i64,
    renewed_at_us: i64,
    /// Estimated expiry (client clock): informational.
    expires_at_us: i64,
    start_reason: String,
    previous_holder: Option<String>,
    previous_expires_at_us: i64,
    /// Why the term ended (`released` or a hand-over reason); empty while held.
    end_reason: String,
    ended_at_us: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct HandoverValue {
    to: String,
    reason: String,
    window_ms: u64,
    /// True for a request on a live lease (attached to the holder's lease).
    requested: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct MemberValue {
    metadata: String,
    priority: u32,
    joined_at_us: i64,
    heartbeat_at_us: i64,
    ttl_ms: u64,
    lease: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct HistoryValue {
    holder: String,
    start_reason: String,
    start_at_us: i64,
    end_reason: String,
    end_at_us: Option<i64>,
}

/// The outcome of a keep-alive round.
#[derive(Clone, Debug)]
enum Kept {
    /// The lease (this id) is alive for at least its TTL from the round's send.
    Alive(i64),
    /// The lease has expired; a new one must be granted.
    Expired,
}

#[derive(Default)]
struct LeaseConn {
    id: Option<i64>,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    /// The round number and outcome of the last completed round.
    last: Option<(u64, std::result::Result<Kept, String>)>,
    /// When the last round that found the lease alive was sent (or granted).
    alive_at: Option<(i64, Instant)>,
    /// A round sent its keep-alive and has not read the answer yet. Still set
    /// when the next round starts, the caller gave up mid-round: the stream
    /// then holds an answer to an older send and must not be read.
    in_round: bool,
}

/// The etcd lease this process shares among all its tenures and member
/// registrations of one length (whole seconds).
struct ProcessLease {
    secs: i64,
    /// Rounds whose keep-alive was sent (incremented before sending).
    sent: AtomicU64,
    conn: tokio::sync::Mutex<LeaseConn>,
}

impl ProcessLease {
    fn new(secs: i64) -> Self {
        Self {
            secs,
            sent: AtomicU64::new(0),
            conn: tokio::sync::Mutex::new(LeaseConn::default()),
        }
    }

    /// A keep-alive sent after this call started: shares a round with
    /// concurrent callers when that round was sent after they started. With
    /// `gather`, the round waits [`GATHER`] first, so that the renewals of one
    /// grid instant share it.
    async fn keep_alive(&self, client: &Client, gather: bool) -> std::result::Result<Kept, String> {
        let started = self.sent.load(Ordering::SeqCst);
        let mut conn = self.conn.lock().await;
        if let Some((round, result)) = &conn.last {
            if *round > started {
                return result.clone();
            }
        }
        if gather {
            // Callers arriving meanwhile queue on `conn` having read `sent`
            // before this round is numbered: they share it.
            tokio::time::sleep(GATHER).await;
        }
        let mut wait = Duration::from_millis(50);
        loop {
            let round = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
            let sent_at = Instant::now();
            let result = Self::round(&mut conn, client).await;
            if let Ok(Kept::Alive(id)) = &result {
                conn.alive_at = Some((*id, sent_at));
            }
            if result.is_err() {
                // A late answer on this stream would belong to this round:
                // never read it as a later round's.
                conn.stream = None;
            }
            conn.last = Some((round, result.clone()));
            match result {
                // A broken connection to one member: a new stream (and a new
                // send, still after the caller started) may reach another.
                Err(e) if wait <= Duration::from_millis(400) => {
                    tracing::debug!("retrying a lease keep-alive: {e}");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                other => return other,
            }
        }
    }

    async fn round(conn: &mut LeaseConn, client: &Client) -> std::result::Result<Kept, String> {
        let Some(id) = conn.id else {
            return Ok(Kept::Expired);
        };
        if std::mem::take(&mut conn.in_round) {
            conn.stream = None;
        }
        if conn.stream.is_none() {
            // Opening the stream sends a keep-alive and reads its answer:
            // that is this round (sent after every waiting caller started).
            let mut c = client.clone();
            return match tokio::time::timeout(KEEPALIVE_TIMEOUT, c.lease_keep_alive(id)).await {
                Err(_) => Err("keep-alive stream did not open in time".to_string()),
                Ok(Ok(s)) => {
                    conn.stream = Some(s);
                    Ok(Kept::Alive(id))
                }
                Ok(Err(e)) if is_lease_not_found(&e) => {
                    conn.id = None;
                    Ok(Kept::Expired)
                }
                Ok(Err(e)) => Err(e.to_string()),
            };
        }
        conn.in_round = true;
        let Some((keeper, _)) = conn.stream.as_mut() else {
            return Err("no keep-alive stream".into());
        };
        keeper.keep_alive().await.map_err(|e| e.to_string())?;
        let Some((_, stream)) = conn.stream.as_mut() else {
            return Err("no keep-alive stream".into());
        };
        let resp = tokio::time::timeout(KEEPALIVE_TIMEOUT, stream.message())
            .await
            .map_err(|_| "keep-alive not answered in time".to_string())?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "keep-alive stream closed".to_string())?;
        conn.in_round = false;
        if resp.ttl() > 0 && resp.id() == id {
            Ok(Kept::Alive(id))
        } else {
            conn.id = None;
            conn.stream = None;
            Ok(Kept::Expired)
        }
    }

    /// A lease that was alive for its full TTL from a moment at most `age`
    /// ago (a recent round is reused; else as [`Self::fresh`]). For member
    /// heartbeats, whose liveness is not a safety matter.
    async fn recent(&self, store: &Inner, age: Duration) -> Result<i64> {
        {
            let conn = self.conn.lock().await;
            if let (Some(id), Some((alive, at))) = (conn.id, conn.alive_at) {
                if id == alive && at.elapsed() < age {
                    return Ok(id);
                }
            }
        }
        self.fresh(store, true).await
    }

    /// A lease alive for its full TTL from a moment after this call started:
    /// kept alive, or granted afresh if it had expired.
    async fn fresh(&self, store: &Inner, gather: bool) -> Result<i64> {
        let started = self.sent.load(Ordering::SeqCst);
        match self.keep_alive(&store.client, gather).await {
            Ok(Kept::Alive(id)) => return Ok(id),
            Ok(Kept::Expired) => {}
            Err(e) => return Err(store.unavailable(format!("lease keep-alive failed: {e}"))),
        }
        let mut conn = self.conn.lock().await;
        if let Some((round, Ok(Kept::Alive(id)))) = &conn.last {
            // A concurrent caller granted one after we started.
            if *round > started && conn.id == Some(*id) {
                return Ok(*id);
            }
        }
        let secs = self.secs;
        let sent_at = Instant::now();
        let granted = retry(&store.client, |mut c| async move {
            c.lease_grant(secs, None).await
        })
        .await
        .map_err(|e| store.map_err(e))?;
        conn.id = Some(granted.id());
        conn.stream = None;
        // A grant is as fresh as a keep-alive: record it as a round.
        let round = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        conn.last = Some((round, Ok(Kept::Alive(granted.id()))));
        conn.alive_at = Some((granted.id(), sent_at));
        tracing::debug!(store = %store.described, lease = granted.id(), ttl = granted.ttl(), "granted an etcd lease");
        Ok(granted.id())
    }
}

/// Errors worth retrying at once: a connection to one member broke, or the
/// cluster is between leaders.
fn is_transient(e: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    match e {
        E::TransportError(_) | E::IoError(_) => true,
        E::GRpcStatus(s) => {
            let code = s.code() as i32;
            let msg = s.message();
            code == tonic_code::UNAVAILABLE
                || (code == tonic_code::UNKNOWN && msg.contains("transport"))
                || msg.contains("no leader")
                || msg.contains("leader changed")
                || msg.contains("timed out")
        }
        _ => false,
    }
}

/// Runs an etcd call, retrying transient failures for about 1.5 s.
async fn retry<T, F, Fut>(
    client: &Client,
    mut call: F,
) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut(Client) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut wait = Duration::from_millis(50);
    loop {
        match call(client.clone()).await {
            Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            other => return other,
        }
    }
}

fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
}

/// One consistent read of an election's keys.
struct Snapshot {
    lease: Option<KeyValue>,
    state: Option<KeyValue>,
    handover: Option<KeyValue>,
}

impl Snapshot {
    fn state(&self) -> Option<(State, u64)> {
        let kv = self.state.as_ref()?;
        let st: State = serde_json::from_slice(kv.value()).ok()?;
        let term = st.term.unwrap_or(kv.mod_revision() as u64);
        Some((st, term))
    }
    fn handover(&self) -> Option<HandoverValue> {
        serde_json::from_slice(self.handover.as_ref()?.value()).ok()
    }
    fn holder(&self) -> Option<String> {
        self.lease
            .as_ref()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
    }
    fn mod_rev(kv: &Option<KeyValue>) -> i64 {
        kv.as_ref().map(|k| k.mod_revision()).unwrap_or(0)
    }
}

fn first_range(resp: &TxnOpResponse) -> Option<KeyValue> {
    match resp {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    }
}

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
        let timeout = options.connect_timeout;
        let unavailable = |reason: String| Error::Unavailable {
            store: described.clone(),
            reason,
        };
        // Which endpoints accept TCP at all: tells "down" from "not etcd".
        let mut reachable = 0;
        for ep in &parsed.endpoints {
            let addr = ep.trim_start_matches("http://");
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
            .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
            .with_keep_alive_while_idle(true)
            .with_require_leader(true);
        if let Some((user, pass)) = &parsed.user {
            copts = copts.with_user(user.clone(), pass.clone());
        }
        let not_etcd = || {
            Error::Protocol {
            store: described.clone(),
            reason: format!(
                "no etcd v3 (gRPC) answer within {timeout:?}: is this an etcd server? (an etcd URL names etcd client ports, default 2379)"
            ),
        }
        };
        let client = match tokio::time::timeout(
            timeout,
            Client::connect(parsed.endpoints.clone(), Some(copts)),
        )
        .await
        {
            Err(_) => return Err(not_etcd()),
            Ok(Err(e)) => {
                return Err(match map_client_error(&described, e) {
                    Error::Unavailable { .. } => not_etcd(),
                    other => other,
                })
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
                Ok(Err(e)) => last = Some(map_client_error(&described, e)),
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
            Err(_) => return Err(unavailable(format!("no answer within {timeout:?}"))),
            Ok(Err(e)) => return Err(map_client_error(&described, e)),
            Ok(Ok(_)) => {}
        }
        let (tx, _) = broadcast::channel(1024);
        let watcher = tokio::spawn(watch_loop(
            client.clone(),
            options.table_prefix.clone(),
            tx.clone(),
            described.clone(),
        ));
        let endpoints = (parsed.endpoints.len() > 1)
            .then(|| tokio::spawn(endpoint_health(client.clone(), parsed.endpoints.clone())));
        let inner = Arc::new(Inner {
            endpoints,
            client,
            prefix: options.table_prefix.clone(),
            described,
            history_retention: options.history_retention.max(1),
            leases: Mutex::new(HashMap::new()),
            held: Mutex::new(Held::default()),
            changes: tx,
            watcher,
            sweeper: Mutex::new(None),
            freed_seen: Mutex::new(HashMap::new()),
        });
        let sweeper = tokio::spawn(sweep_loop(Arc::downgrade(&inner)));
        *inner.sweeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(sweeper);
        Ok(Self { inner })
    }

    /// Keep-alive rounds sent (and leases granted) so far, over all this
    /// store's process leases. For tests and benchmarks.
    #[doc(hidden)]
    pub fn keep_alive_rounds(&self) -> u64 {
        let leases = self.inner.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases.values().map(|l| l.sent.load(Ordering::SeqCst)).sum()
    }

    /// Tenures and member registrations this store is tracking on its process
    /// leases (for the sweeper). For tests.
    #[doc(hidden)]
    pub fn tracked(&self) -> (usize, usize) {
        let held = self.inner.held();
        (held.tenures.len(), held.members.len())
    }
}

/// Deletes the keys of tenures and member registrations whose renewals or
/// heartbeats stopped without a release (the process lease would keep them
/// alive as long as any other election of this process renews). Runs every
/// quarter of the shortest TTL held; ends when the store is dropped.
async fn sweep_loop(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            Some(i) => i.sweep_period(),
            None => return,
        };
        tokio::time::sleep(period).await;
        let Some(i) = inner.upgrade() else { return };
        i.sweep().await;
    }
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A quarter of the shortest TTL held (250 ms when nothing is held).
    fn sweep_period(&self) -> Duration {
        let held = self.held();
        let ttls = held
            .tenures
            .values()
            .map(|t| t.ttl)
            .chain(held.pending.values().map(|p| p.ttl))
            .chain(held.members.values().map(|m| m.ttl));
        (ttls.min().unwrap_or(SECOND) / 4).clamp(Duration::from_millis(100), SECOND)
    }

    /// One sweep: ends every tracked tenure, unknown acquisition and member
    /// registration whose last renewal/heartbeat started more than its TTL ago.
    async fn sweep(&self) {
        let now = Instant::now();
        let (tenures, pending, members) = {
            let mut held = self.held();
            let tenures: Vec<_> = held
                .tenures
                .iter()
                .filter(|(_, t)| now > t.sweep_after)
                .map(|(id, _)| id.clone())
                .collect();
            let tenures: Vec<_> = tenures
                .into_iter()
                .filter_map(|id| held.tenures.remove_entry(&id))
                .collect();
            let pending: Vec<_> = held
                .pending
                .iter()
                .filter(|(id, p)| now > p.sweep_after && !held.acquiring.contains_key(*id))
                .map(|(id, _)| id.clone())
                .collect();
            let pending: Vec<_> = pending
                .into_iter()
                .filter_map(|id| held.pending.remove_entry(&id))
                .collect();
            let members: Vec<_> = held
                .members
                .iter()
                .filter(|(_, m)| now > m.sweep_after)
                .map(|(id, _)| id.clone())
                .collect();
            let members: Vec<_> = members
                .into_iter()
                .filter_map(|id| held.members.remove_entry(&id))
                .collect();
            (tenures, pending, members)
        };
        for ((key, term), t) in tenures {
            let tenure = Tenure {
                key: key.clone(),
                holder: t.holder.clone(),
                term,
            };
            match self.end_tenure(&tenure, End::Expired).await {
                Ok(true) => {
                    tracing::info!(store = %self.described, election = %key, term, holder = %t.holder, "deleted a tenure not renewed within its TTL")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(election = %key, term, "sweep failed, retrying: {e}");
                    // Still ours to sweep (or to revive, by a renewal that
                    // starts now: then the key lives a TTL past its start).
                    self.held().tenures.entry((key, term)).or_insert(t);
                }
            }
        }
        for ((key, holder), p) in pending {
            if let Err(e) = self.sweep_pending(&key, &holder, p.lease_id).await {
                tracing::debug!(election = %key, "sweep of an unknown acquisition failed: {e}");
            }
        }
        for ((key, holder), m) in members {
            if m.mod_rev == 0 {
                continue;
            }
            match self.lapse_member(&key, &holder, m.mod_rev).await {
                Ok(true) => {
                    tracing::info!(store = %self.described, election = %key, holder = %holder, "a member registration not heartbeated within its TTL lapsed")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(election = %key, "member sweep failed, retrying: {e}");
                    self.held().members.entry((key, holder)).or_insert(m);
                }
            }
        }
    }

    /// Marks a member registration lapsed, as its own lease's expiry would:
    /// the value names no lease any more (so it reads as not live, and
    /// [`LeaseStore::reap`] removes it). Only if it is still as our last
    /// heartbeat wrote it.
    async fn lapse_member(&self, key: &ElectionKey, holder: &str, mod_rev: i64) -> Result<bool> {
        let mk = format!("{}{}", self.member_prefix(key), seg(holder));
        let resp = self
            .get(mk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let Some(kv) = resp.kvs().first().filter(|kv| kv.mod_revision() == mod_rev) else {
            return Ok(false);
        };
        let Ok(mut v) = serde_json::from_slice::<MemberValue>(kv.value()) else {
            return Ok(false);
        };
        v.lease = 0;
        let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        let txn = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, mod_rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let r = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        Ok(r.succeeded())
    }

    /// An acquisition whose outcome we never learned: if its key exists (ours,
    /// on the lease granted for it) and nobody of ours holds that term or is
    /// acquiring it, end it. The checks are made after the read, so a key
    /// created by a newer acquisition (tracked, or still in progress) is left
    /// alone; the transaction pins the exact key read (its create revision).
    async fn sweep_pending(&self, key: &ElectionKey, holder: &str, lease_id: i64) -> Result<()> {
        let resp = self
            .get(self.k("lease", key), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let Some(kv) = resp.kvs().first() else {
            return Ok(());
        };
        if kv.value() != holder.as_bytes() || kv.lease() != lease_id {
            return Ok(());
        }
        let term = kv.create_revision() as u64;
        {
            let held = self.held();
            let id = (key.clone(), holder.to_string());
            if held.acquiring.contains_key(&id) || held.tenures.contains_key(&(key.clone(), term)) {
                return Ok(());
            }
        }
        let tenure = Tenure {
            key: key.clone(),
            holder: holder.to_string(),
            term,
        };
        if self.end_tenure(&tenure, End::Expired).await? {
            tracing::info!(store = %self.described, election = %key, term, "deleted the key of an acquisition whose answer was lost");
        }
        Ok(())
    }

    fn k(&self, kind: &str, key: &ElectionKey) -> String {
        format!(
            "{}/{kind}/{}/{}",
            self.prefix,
            seg(&key.namespace),
            seg(&key.election)
        )
    }

    fn member_prefix(&self, key: &ElectionKey) -> String {
        format!("{}/", self.k("member", key))
    }

    fn history_prefix(&self, key: &ElectionKey) -> String {
        format!("{}/", self.k("history", key))
    }

    fn history_key(&self, key: &ElectionKey, term: u64) -> String {
        format!("{}{term:020}", self.history_prefix(key))
    }

    fn unavailable(&self, reason: String) -> Error {
        Error::Unavailable {
            store: self.described.clone(),
            reason,
        }
    }

    fn protocol(&self, reason: impl Into<String>) -> Error {
        Error::Protocol {
            store: self.described.clone(),
            reason: reason.into(),
        }
    }

    fn map_err(&self, e: etcd_client::Error) -> Error {
        map_client_error(&self.described, e)
    }

    /// The process lease for TTLs of this length (created, not yet granted,
    /// on first use).
    fn process_lease(&self, ttl: Duration) -> Arc<ProcessLease> {
        let secs = lease_secs(ttl);
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases
            .entry(secs)
            .or_insert_with(|| Arc::new(ProcessLease::new(secs)))
            .clone()
    }

    /// Marks an acquisition of `key` by `holder` in progress until dropped.
    fn acquiring(&self, key: &ElectionKey, holder: &str) -> Acquiring<'_> {
        let id = (key.clone(), holder.to_string());
        *self.held().acquiring.entry(id.clone()).or_default() += 1;
        Acquiring { inner: self, id }
    }

    async fn txn(
        &self,
        txn: Txn,
    ) -> std::result::Result<etcd_client::TxnResponse, etcd_client::Error> {
        Ok(self.txn_retried(txn).await?.0)
    }

    /// Runs a transaction, retrying (for about 1.5 s) when the connection to
    /// one member fails or the cluster is electing a leader. Also says whether
    /// it retried: an earlier attempt may then have been applied, and the
    /// caller must recognise its own write instead of reading it as a loss.
    /// Every transaction here is a compare-and-set, so a repeat never applies twice.
    async fn txn_retried(
        &self,
        txn: Txn,
    ) -> std::result::Result<(etcd_client::TxnResponse, bool), etcd_client::Error> {
        let mut retried = false;
        let mut wait = Duration::from_millis(50);
        loop {
            let mut c = self.client.clone();
            match c.txn(txn.clone()).await {
                Ok(r) => return Ok((r, retried)),
                Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                    tracing::debug!(store = %self.described, "retrying a transaction: {e}");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A plain read, retried like [`Self::txn_retried`].
    async fn get(
        &self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> std::result::Result<etcd_client::GetResponse, etcd_client::Error> {
        let key = key.into();
        let mut wait = Duration::from_millis(50);
        loop {
            let mut c = self.client.clone();
            match c.get(key.clone(), options.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) if is_transient(&e) && wait <= Duration::from_millis(800) => {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn snapshot(&self, key: &ElectionKey) -> Result<(Snapshot, i64)> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.k("lease", key), None),
            TxnOp::get(self.k("state", key), None),
            TxnOp::get(self.k("handover", key), None),
        ]);
        let resp = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        let ops = resp.op_responses();
        if ops.len() != 3 {
            return Err(self.protocol("a snapshot read returned the wrong number of results"));
        }
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((
            Snapshot {
                lease: first_range(&ops[0]),
                state: first_range(&ops[1]),
                handover: first_range(&ops[2]),
            },
            rev,
        ))
    }

    /// Remaining TTL of a lease, in whole seconds; `None` if it is gone.
    async fn lease_ttl(&self, id: i64) -> Result<Option<Duration>> {
        if id == 0 {
            return Ok(None);
        }
        let c = self.client.clone();
        match retry(
            &c,
            |mut c| async move { c.lease_time_to_live(id, None).await },
        )
        .await
        {
            Ok(r) if r.ttl() >= 0 => Ok(Some(Duration::from_secs(r.ttl() as u64))),
            Ok(_) => Ok(None),
            Err(e) if is_lease_not_found(&e) => Ok(None),
            Err(e) => Err(self.map_err(e)),
        }
    }

    /// Builds the record for a snapshot, asking etcd for the leases' TTLs.
    async fn record(&self, key: &ElectionKey, snap: &Snapshot) -> Result<Option<LeaseRecord>> {
        let state = snap.state();
        if snap.lease.is_none() && state.is_none() {
            return Ok(None);
        }
        let (lease_ttl, handover_ttl) = tokio::join!(
            async {
                match &snap.lease {
                    Some(kv) => self.lease_ttl(kv.lease()).await,
                    None => Ok(None),
                }
            },
            async {
                match &snap.handover {
                    Some(kv) if !snap.handover().is_some_and(|h| h.requested) => {
                        self.lease_ttl(kv.lease()).await
                    }
                    _ => Ok(None),
                }
            }
        );
        let (lease_ttl, handover_ttl) = (lease_ttl?, handover_ttl?);
        let read_at = now_us();
        let (st, state_term) = state.unwrap_or_default();
        let version = Snapshot::mod_rev(&snap.lease)
            .max(Snapshot::mod_rev(&snap.state))
            .max(Snapshot::mod_rev(&snap.handover)) as u64;
        let mut rec = LeaseRecord {
            key: key.clone(),
            holder: None,
            metadata: String::new(),
            term: state_term,
            version,
            ttl: Duration::from_millis(st.ttl_ms),
            acquired_at_us: st.acquired_at_us,
            renewed_at_us: st.renewed_at_us,
            expires_at_us: st.expires_at_us,
            read_at_us: read_at,
            remaining: Duration::ZERO,
            handover_to: None,
            handover_until_us: 0,
            start_reason: st.start_reason.clone(),
            previous_holder: st.previous_holder.clone(),
            previous_expires_at_us: st.previous_expires_at_us,
        };
        match &snap.lease {
            Some(kv) => {
                let term = kv.create_revision() as u64;
                rec.holder = snap.holder();
                rec.term = term;
                if state_term == term {
                    rec.metadata = st.metadata.clone();
                } else {
                    // The state is from an older term (it is written in the
                    // same transaction, so this means foreign data).
                    rec.ttl = Duration::ZERO;
                    rec.start_reason = String::new();
                    rec.previous_holder = None;
                }
                if let Some(left) = lease_ttl {
                    // etcd rounds the remaining TTL down to whole seconds: round
                    // it up instead (the watch wakes followers at the actual
                    // expiry anyway), but never report more than the holder's TTL.
                    let left = left + SECOND;
                    rec.remaining = if rec.ttl.is_zero() {
                        left
                    } else {
                        left.min(rec.ttl)
                    };
                    rec.expires_at_us = read_at + us(rec.remaining);
                }
            }
            None if st.holder.is_some() && st.end_reason.is_empty() => {
                // The lease expired in etcd: name the holder, with no time left.
                rec.holder = st.holder.clone();
                let mut seen = self.freed_seen.lock().unwrap_or_else(|p| p.into_inner());
                let first = *seen.entry((key.clone(), state_term)).or_insert(read_at);
                if seen.len() > 10_000 {
                    seen.clear();
                }
                rec.expires_at_us = st.expires_at_us.max(first);
            }
            None => {
                rec.expires_at_us = st.ended_at_us;
            }
        }
        if let Some(h) = snap.handover() {
            rec.handover_to = Some(h.to.clone());
            rec.handover_until_us = if h.requested {
                read_at + i64::try_from(h.window_ms).unwrap_or(0) * 1000
            } else {
                read_at + handover_ttl.map(us).unwrap_or(0)
            };
            if !h.requested && handover_ttl.is_none() {
                rec.handover_to = None;
                rec.handover_until_us = 0;
            }
        }
        Ok(Some(rec))
    }

    /// Records a term's end in its history entry (best effort).
    async fn close_history(&self, key: &ElectionKey, term: u64, reason: &str, at_us: i64) {
        let hk = self.history_key(key, term);

        let Ok(resp) = self.get(hk.clone(), None).await else {
            return;
        };
        let Some(kv) = resp.kvs().first() else { return };
        let Ok(mut h) = serde_json::from_slice::<HistoryValue>(kv.value()) else {
            return;
        };
        if h.end_at_us.is_some() {
            return;
        }
        h.end_reason = reason.to_string();
        h.end_at_us = Some(at_us);
        let Ok(v) = serde_json::to_vec(&h) else {
            return;
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(
                hk.clone(),
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::put(hk, v, None)]);
        if let Err(e) = self.txn(txn).await {
            tracing::debug!(election = %key, term, "history not updated: {e}");
        }
    }

    /// Starts a term's history entry, closes the expired previous one and
    /// prunes old entries (best effort, after the acquisition).
    async fn write_history(
        &self,
        key: &ElectionKey,
        term: u64,
        h: HistoryValue,
        prev: Option<(u64, i64)>,
    ) {
        if let Ok(v) = serde_json::to_vec(&h) {
            let hk = self.history_key(key, term);
            let put = retry(&self.client, |mut c| {
                let (hk, v) = (hk.clone(), v.clone());
                async move { c.put(hk, v, None).await }
            });
            if let Err(e) = put.await {
                tracing::debug!(election = %key, term, "history not written: {e}");
                return;
            }
        }
        if let Some((prev_term, expired_at)) = prev {
            self.close_history(key, prev_term, "expired", expired_at)
                .await;
        }
        let prefix = self.history_prefix(key);
        let mut c = self.client.clone();
        let Ok(count) = self
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
        else {
            return;
        };
        let excess = (count.count() as u64).saturating_sub(self.history_retention);
        if excess == 0 {
            return;
        }
        let Ok(old) = self
            .get(
                prefix.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_keys_only()
                        .with_sort(SortTarget::Key, SortOrder::Ascend)
                        .with_limit(excess as i64),
                ),
            )
            .await
        else {
            return;
        };
        if let Some(last) = old.kvs().last() {
            let mut end = last.key().to_vec();
            end.push(0);
            let _ = c
                .delete(prefix, Some(DeleteOptions::new().with_range(end)))
                .await;
        }
    }

    async fn try_acquire_once(&self, claim: &Claim) -> Result<Option<Acquire>> {
        let started = Instant::now();
        let key = &claim.key;
        let _acquiring = self.acquiring(key, &claim.holder);
        let (snap, _) = self.snapshot(key).await?;
        if snap.lease.is_some() {
            return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
        }
        let identity = identity_of(&claim.holder);
        if let Some(h) = snap.handover() {
            let open = h.requested || h.to == "*" || h.to == identity;
            if !open {
                return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
            }
        }
        let now = now_us();
        let (prev, prev_term) = snap.state().map(|(s, t)| (Some(s), t)).unwrap_or((None, 0));
        let (start_reason, previous_holder, previous_expires) = match &prev {
            None => ("first".to_string(), None, 0),
            Some(s) if s.holder.is_some() && s.end_reason.is_empty() => {
                ("expiry".to_string(), s.holder.clone(), s.expires_at_us)
            }
            // Swept by its own process: an expiry too.
            Some(s) if s.end_reason == "expired" => (
                "expiry".to_string(),
                s.previous_holder.clone(),
                s.ended_at_us,
            ),
            Some(s) if s.end_reason == "released" || s.end_reason.is_empty() => {
                ("release".to_string(), None, s.ended_at_us)
            }
            Some(s) => (s.end_reason.clone(), None, s.ended_at_us),
        };
        let state = State {
            term: None,
            holder: Some(claim.holder.clone()),
            metadata: claim.metadata.clone(),
            ttl_ms: claim.ttl.as_millis() as u64,
            acquired_at_us: now,
            renewed_at_us: now,
            expires_at_us: now + us(claim.ttl),
            start_reason: start_reason.clone(),
            previous_holder: previous_holder.clone(),
            previous_expires_at_us: previous_expires,
            end_reason: String::new(),
            ended_at_us: 0,
        };
        let state_bytes = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        // The process lease of this length, kept alive (or granted) after
        // this call started: the key then lives at least `ttl` from now.
        let lease = self.process_lease(claim.ttl);
        let lease_id = lease.fresh(self, false).await?;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, 0),
                Compare::mod_revision(sk.clone(), CompareOp::Equal, Snapshot::mod_rev(&snap.state)),
                Compare::mod_revision(
                    hk.clone(),
                    CompareOp::Equal,
                    Snapshot::mod_rev(&snap.handover),
                ),
            ])
            .and_then([
                TxnOp::put(
                    lk,
                    claim.holder.clone(),
                    Some(PutOptions::new().with_lease(lease_id)),
                ),
                TxnOp::put(sk, state_bytes, None),
                TxnOp::delete(hk, None),
            ]);
        // Until the outcome is known, the sweeper must be able to find a key
        // this may create (an error, or a caller that gives up mid-call).
        let id = (key.clone(), claim.holder.clone());
        self.held().pending.insert(
            id.clone(),
            PendingAcquire {
                lease_id,
                ttl: claim.ttl,
                sweep_after: started + claim.ttl,
            },
        );
        let (resp, retried) = match self.txn_retried(txn).await {
            Ok(r) => r,
            Err(e) if is_lease_not_found(&e) => {
                self.held().pending.remove(&id);
                return Ok(None);
            }
            Err(e) => return Err(self.map_err(e)),
        };
        let term = if resp.succeeded() {
            resp.header()
                .map(|h| h.revision() as u64)
                .ok_or_else(|| self.protocol("transaction answer without a header"))?
        } else {
            // Someone else changed the election since our read: re-read. After
            // a retry, the change may be our own first attempt: the lease key
            // then names us on the lease granted for this very call.
            let (snap, _) = self.snapshot(key).await?;
            match &snap.lease {
                Some(kv)
                    if retried
                        && kv.lease() == lease_id
                        && kv.value() == claim.holder.as_bytes() =>
                {
                    kv.create_revision() as u64
                }
                _ => {
                    self.held().pending.remove(&id);
                    return Ok(Some(Acquire::Held(self.record(key, &snap).await?)));
                }
            }
        };
        let history = HistoryValue {
            holder: claim.holder.clone(),
            start_reason: start_reason.clone(),
            start_at_us: now,
            end_reason: String::new(),
            end_at_us: None,
        };
        {
            let mut held = self.held();
            held.pending.remove(&id);
            held.tenures.insert(
                (key.clone(), term),
                HeldTenure {
                    holder: claim.holder.clone(),
                    lease,
                    lease_id,
                    ttl: claim.ttl,
                    sweep_after: started + claim.ttl,
                },
            );
        }
        let prev_close = previous_holder
            .as_ref()
            .map(|_| (prev_term, previous_expires));
        self.write_history(key, term, history, prev_close).await;
        Ok(Some(Acquire::Acquired(LeaseRecord {
            key: key.clone(),
            holder: Some(claim.holder.clone()),
            metadata: claim.metadata.clone(),
            term,
            version: term,
            ttl: claim.ttl,
            acquired_at_us: now,
            renewed_at_us: now,
            expires_at_us: now + us(claim.ttl),
            read_at_us: now,
            remaining: claim.ttl,
            handover_to: None,
            handover_until_us: 0,
            start_reason,
            previous_holder,
            previous_expires_at_us: previous_expires,
        })))
    }

    /// Ends `tenure` in one transaction: deletes the lease key, records the
    /// end in the state, and for a hand-over writes the hand-over key.
    async fn end_tenure(&self, tenure: &Tenure, end: End<'_>) -> Result<bool> {
        let handover = match end {
            End::HandedOver(to, window, reason) => Some((to, window, reason)),
            End::Released | End::Expired => None,
        };
        let key = &tenure.key;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let now = now_us();
        // Carry over what the state says about the term (informational only;
        // the transaction below decides on the lease key alone).
        let old: Option<State> = self
            .get(sk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?
            .kvs()
            .first()
            .and_then(|kv| serde_json::from_slice(kv.value()).ok());
        let old = old.unwrap_or_default();
        // A swept tenure's history ends, like an expired lease's, at its
        // estimated expiry. The state says "now": followers measure the
        // succession grace from when the key went away.
        let ended = match end {
            End::Expired
                if old.holder.as_deref() == Some(tenure.holder.as_str())
                    && old.end_reason.is_empty()
                    && old.expires_at_us > 0 =>
            {
                old.expires_at_us.min(now)
            }
            _ => now,
        };
        let reason = match end {
            End::Released => "released".to_string(),
            End::Expired => "expired".to_string(),
            End::HandedOver(_, _, r) => r.to_string(),
        };
        let state = State {
            term: Some(tenure.term),
            holder: None,
            metadata: String::new(),
            ttl_ms: old.ttl_ms,
            acquired_at_us: old.acquired_at_us,
            renewed_at_us: old.renewed_at_us,
            expires_at_us: now,
            start_reason: old.start_reason,
            previous_holder: Some(tenure.holder.clone()),
            previous_expires_at_us: now,
            end_reason: reason.clone(),
            ended_at_us: now,
        };
        let state_bytes = serde_json::to_vec(&state).map_err(|e| self.protocol(e.to_string()))?;
        let mut ops = vec![
            TxnOp::delete(lk.clone(), None),
            TxnOp::put(sk, state_bytes, None),
        ];
        match handover {
            None => ops.push(TxnOp::delete(hk, None)),
            Some((to, window, reason)) => {
                let secs = lease_secs(window);
                let grant = retry(&self.client, |mut c| async move {
                    c.lease_grant(secs, None).await
                })
                .await
                .map_err(|e| self.map_err(e))?;
                let v = HandoverValue {
                    to: to.column().to_string(),
                    reason: reason.to_string(),
                    window_ms: window.as_millis() as u64,
                    requested: false,
                };
                let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
                ops.push(TxnOp::put(
                    hk,
                    v,
                    Some(PutOptions::new().with_lease(grant.id())),
                ));
            }
        }
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk, CompareOp::Equal, tenure.holder.clone()),
            ])
            .and_then(ops);
        let (resp, retried) = self.txn_retried(txn).await.map_err(|e| self.map_err(e))?;
        let mut done = resp.succeeded();
        if !done && retried {
            // Our first attempt may have been applied: the state then records
            // exactly this tenure's end.
            let st: Option<State> = self
                .get(self.k("state", key), None)
                .await
                .map_err(|e| self.map_err(e))?
                .kvs()
                .first()
                .and_then(|kv| serde_json::from_slice(kv.value()).ok());
            done = st.is_some_and(|st| {
                st.term == Some(tenure.term)
                    && st.holder.is_none()
                    && st.previous_holder.as_deref() == Some(tenure.holder.as_str())
                    && st.end_reason == reason
                    && st.ended_at_us == now
            });
        }
        // Ended now or earlier (or never ours): either way nothing of ours
        // to keep alive or sweep. The process lease itself stays: it is shared.
        self.held().tenures.remove(&(key.clone(), tenure.term));
        if done {
            self.close_history(key, tenure.term, &reason, ended).await;
        }
        Ok(done)
    }
}

/// Maps an etcd client error to the crate's error, naming the fix where there is one.
fn map_client_error(store: &str, e: etcd_client::Error) -> Error {
    use etcd_client::Error as E;
    let store = store.to_string();
    match e {
        E::GRpcStatus(s) => {
            use tonic_code::*;
            let msg = s.message().to_string();
            match s.code() as i32 {
                UNAUTHENTICATED | PERMISSION_DENIED => Error::PermissionDenied {
                    store,
                    reason: format!("{msg} (check the user and password in the URL, and the user's role on the key prefix)"),
                },
                INVALID_ARGUMENT | FAILED_PRECONDITION
                    if msg.contains("authentication") || msg.contains("user name") || msg.contains("password") || msg.contains("auth") =>
                {
                    Error::PermissionDenied {
                        store,
                        reason: format!("{msg} (check the user and password in the URL)"),
                    }
                }
                UNAVAILABLE | DEADLINE_EXCEEDED | CANCELLED | ABORTED | RESOURCE_EXHAUSTED | UNKNOWN => {
                    Error::Unavailable { store, reason: format!("{:?}: {msg}", s.code()) }
                }
                _ => Error::Protocol { store, reason: format!("{:?}: {msg}", s.code()) },
            }
        }
        E::InvalidArgs(m) | E::EndpointError(m) => Error::InvalidUrl {
            url: store,
            reason: m,
        },
        E::InvalidUri(u) => Error::InvalidUrl {
            url: store,
            reason: u.to_string(),
        },
        other => Error::Unavailable {
            store,
            reason: other.to_string(),
        },
    }
}

/// gRPC status codes (as numbers, so we need not depend on tonic directly).
mod tonic_code {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const PERMISSION_DENIED: i32 = 7;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const ABORTED: i32 = 10;
    pub const UNAVAILABLE: i32 = 14;
    pub const UNAUTHENTICATED: i32 = 16;
}

/// Watches the prefix and turns changes of lease, state and hand-over keys
/// into notifications; reconnects with back-off and then says "anything may
/// have changed" (`None`).
async fn watch_loop(
    client: Client,
    prefix: String,
    tx: broadcast::Sender<Option<ElectionKey>>,
    described: String,
) {
    let mut backoff = Duration::from_millis(100);
    let mut first = true;
    loop {
        let mut c = client.clone();
        match c
            .watch(
                format!("{prefix}/"),
                Some(WatchOptions::new().with_prefix()),
            )
            .await
        {
            Ok(mut stream) => {
                if !first {
                    let _ = tx.send(None);
                }
                backoff = Duration::from_millis(100);
                loop {
                    match stream.message().await {
                        Ok(Some(resp)) => {
                            if resp.canceled() {
                                tracing::debug!(store = %described, "watch cancelled: {}", resp.cancel_reason());
                                break;
                            }
                            for ev in resp.events() {
                                let Some(kv) = ev.kv() else { continue };
                                if let Some(key) = parse_election_key(&prefix, kv.key()) {
                                    let _ = tx.send(Some(key));
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(store = %described, "watch failed: {e}");
                            break;
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(store = %described, "watch could not start: {e}"),
        }
        first = false;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Keeps the client's balancer away from members that refuse connections (a
/// killed member would otherwise fail about one call in N), and adds them
/// back when they return. Probes every 500 ms; never removes the last one.
async fn endpoint_health(client: Client, endpoints: Vec<String>) {
    let mut active: Vec<bool> = vec![true; endpoints.len()];
    loop {
        let mut alive = Vec::with_capacity(endpoints.len());
        for ep in &endpoints {
            let addr = ep.trim_start_matches("http://");
            let ok = matches!(
                tokio::time::timeout(
                    Duration::from_millis(300),
                    tokio::net::TcpStream::connect(addr)
                )
                .await,
                Ok(Ok(_))
            );
            alive.push(ok);
        }
        let none = !alive.iter().any(|a| *a);
        for (i, ep) in endpoints.iter().enumerate() {
            let want = alive[i] || none;
            if want && !active[i] {
                if client.add_endpoint(ep).await.is_ok() {
                    tracing::info!(endpoint = %ep, "etcd member reachable again");
                    active[i] = true;
                }
            } else if !want && active[i] && client.remove_endpoint(ep).await.is_ok() {
                tracing::warn!(endpoint = %ep, "etcd member refuses connections; not using it");
                active[i] = false;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The election a lease, state or hand-over key belongs to.
fn parse_election_key(prefix: &str, key: &[u8]) -> Option<ElectionKey> {
    let key = std::str::from_utf8(key).ok()?;
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (kind, rest) = rest.split_once('/')?;
    if !matches!(kind, "lease" | "state" | "handover") {
        return None;
    }
    let (ns, election) = rest.split_once('/')?;
    if election.contains('/') {
        return None;
    }
    Some(ElectionKey::new(unseg(ns), unseg(election)))
}

#[async_trait]
impl LeaseStore for EtcdStore {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        self.inner.try_acquire(claim).await
    }
    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.inner.renew(tenure, ttl).await
    }
    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.inner.release(tenure).await
    }
    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        self.inner.read(key).await
    }
    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        self.inner.list(namespace).await
    }
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        self.inner.heartbeat(member, ttl).await
    }
    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        self.inner.leave(key, holder).await
    }
    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        self.inner.members(key).await
    }
    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        self.inner.reap(key).await
    }
    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<bool> {
        self.inner.hand_over(tenure, to, window, reason).await
    }
    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<Option<LeaseRecord>> {
        self.inner.request_handover(key, to, window, reason).await
    }
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.inner.history(key, limit).await
    }
    fn subscribe(&self) -> Option<Changes> {
        self.inner.subscribe()
    }
}

#[async_trait]
impl LeaseStore for Inner {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: true,
            fenced_transactions: false,
            // One keep-alive of the process lease serves every renewal of a
            // renew instant (each still checks its own key, read-only).
            batch_renew: true,
            durable: true,
            min_ttl: SECOND,
            sparse_terms: true,
        }
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        for _ in 0..2 {
            if let Some(a) = self.try_acquire_once(claim).await? {
                return Ok(a);
            }
            // The lease vanished between the keep-alive and the transaction:
            // grant a new one and try once more.
        }
        Err(self.unavailable(
            "the lease granted for this acquisition expired twice before its transaction".into(),
        ))
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        let started = Instant::now();
        // Only a tenure we hold (not yet swept), on a lease of at least `ttl`.
        // Pushing its sweep time to a TTL past this call's start, before
        // anything is sent, keeps the sweeper off it while this call may succeed.
        let (lease, lease_id) = {
            let mut held = self.held();
            match held.tenures.get_mut(&(tenure.key.clone(), tenure.term)) {
                Some(t) if t.holder == tenure.holder && t.lease.secs >= lease_secs(ttl) => {
                    t.sweep_after = t.sweep_after.max(started + ttl);
                    t.ttl = ttl;
                    (t.lease.clone(), t.lease_id)
                }
                _ => return Ok(false),
            }
        };
        let key = &tenure.key;
        let lk = self.k("lease", key);
        let sk = self.k("state", key);
        let hk = self.k("handover", key);
        let now = now_us();
        // The transaction reads the state as it was and rewrites its times.
        let txn = Txn::new()
            .when([
                Compare::create_revision(lk.clone(), CompareOp::Equal, tenure.term as i64),
                Compare::value(lk.clone(), CompareOp::Equal, tenure.holder.clone()),
                Compare::lease(lk, CompareOp::Equal, lease_id),
                Compare::create_revision(hk, CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::get(sk.clone(), None)]);
        // The keep-alive is shared with every renewal of this instant (one
        // round for all, sent after each of them started). A failed renewal
        // keeps its tracking entry: its key, if any is left, is the sweeper's.
        let (kept, checked) = tokio::join!(lease.keep_alive(&self.client, true), self.txn(txn));
        let checked = checked.map_err(|e| self.map_err(e))?;
        match kept {
            Ok(Kept::Alive(id)) if id == lease_id => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(self.unavailable(format!("lease keep-alive failed: {e}"))),
        }
        if !checked.succeeded() {
            return Ok(false);
        }
        // Informational times: a best-effort update, conditional on the state
        // not having changed, so it can never overwrite a later term's state.
        if let Some(kv) = checked.op_responses().first().and_then(first_range) {
            if let Ok(mut st) = serde_json::from_slice::<State>(kv.value()) {
                st.term = Some(tenure.term);
                st.renewed_at_us = now;
                st.expires_at_us = now + us(ttl);
                st.ttl_ms = ttl.as_millis() as u64;
                if let Ok(v) = serde_json::to_vec(&st) {
                    let txn = Txn::new()
                        .when([Compare::mod_revision(
                            sk.clone(),
                            CompareOp::Equal,
                            kv.mod_revision(),
                        )])
                        .and_then([TxnOp::put(sk, v, None)]);
                    if let Err(e) = self.txn(txn).await {
                        tracing::debug!(election = %key, "renewal time not recorded: {e}");
                    }
                }
            }
        }
        Ok(true)
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.end_tenure(tenure, End::Released).await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let (snap, _) = self.snapshot(key).await?;
        self.record(key, &snap).await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let base = match namespace {
            Some(ns) => format!("{}/state/{}/", self.prefix, seg(ns)),
            None => format!("{}/state/", self.prefix),
        };

        let resp = self
            .get(base, Some(GetOptions::new().with_prefix().with_keys_only()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut keys: Vec<ElectionKey> = resp
            .kvs()
            .iter()
            .filter_map(|kv| parse_election_key(&self.prefix, kv.key()))
            .collect();
        keys.sort();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(r) = self.read(&key).await? {
                out.push(r);
            }
        }
        Ok(out)
    }

    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        let started = Instant::now();
        let id = (member.key.clone(), member.holder.clone());
        {
            let mut held = self.held();
            let m = held.members.entry(id.clone()).or_insert(HeldMember {
                ttl,
                sweep_after: started + ttl,
                mod_rev: 0,
            });
            m.sweep_after = m.sweep_after.max(started + ttl);
            m.ttl = ttl;
        }
        // Membership is about liveness, not safety: a round of the process
        // lease from the last third of the TTL will do.
        let lease = self.process_lease(ttl);
        let lease_id = lease.recent(self, ttl / 3).await?;
        let mk = format!("{}{}", self.member_prefix(&member.key), seg(&member.holder));

        let old = self
            .get(mk.clone(), None)
            .await
            .map_err(|e| self.map_err(e))?;
        let now = now_us();
        let (joined, rev) = match old.kvs().first() {
            Some(kv) => (
                serde_json::from_slice::<MemberValue>(kv.value())
                    .map(|m| m.joined_at_us)
                    .unwrap_or(now),
                kv.mod_revision(),
            ),
            None => (now, 0),
        };
        let v = MemberValue {
            metadata: member.metadata.clone(),
            priority: member.priority,
            joined_at_us: joined,
            heartbeat_at_us: now,
            ttl_ms: ttl.as_millis() as u64,
            lease: lease_id,
        };
        let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
        // Conditional on what we read, so seniority (the key's create
        // revision) survives concurrent heartbeats; a lost race is harmless.
        let txn = Txn::new()
            .when([Compare::mod_revision(mk.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(mk, v, None)]);
        let r = self.txn(txn).await.map_err(|e| self.map_err(e))?;
        if r.succeeded() {
            if let Some(h) = r.header() {
                // (Re-)tracked even if swept meanwhile: the key exists again.
                let mut held = self.held();
                let m = held.members.entry(id).or_insert(HeldMember {
                    ttl,
                    sweep_after: started + ttl,
                    mod_rev: 0,
                });
                m.sweep_after = m.sweep_after.max(started + ttl);
                m.mod_rev = h.revision();
            }
        }
        Ok(())
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let mk = format!("{}{}", self.member_prefix(key), seg(holder));
        let c = self.client.clone();
        let r = retry(&c, |mut c| {
            let mk = mk.clone();
            async move { c.delete(mk, None).await }
        })
        .await
        .map_err(|e| self.map_err(e))?;
        self.held()
            .members
            .remove(&(key.clone(), holder.to_string()));
        Ok(r.deleted() > 0)
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let prefix = self.member_prefix(key);

        let resp = self
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut rows = Vec::new();
        let mut ttls: HashMap<i64, Option<Duration>> = HashMap::new();
        for kv in resp.kvs() {
            let Ok(v) = serde_json::from_slice::<MemberValue>(kv.value()) else {
                continue;
            };
            let Some(holder) = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(&prefix))
                .map(unseg)
            else {
                continue;
            };
            if let std::collections::hash_map::Entry::Vacant(e) = ttls.entry(v.lease) {
                e.insert(self.lease_ttl(v.lease).await?);
            }
            rows.push((kv.create_revision(), holder, v));
        }
        let now = now_us();
        rows.sort_by(|a, b| {
            b.2.priority
                .cmp(&a.2.priority)
                .then(a.0.cmp(&b.0))
                .then(a.1.cmp(&b.1))
        });
        Ok(rows
            .into_iter()
            .map(|(_, holder, v)| {
                let left = ttls.get(&v.lease).copied().flatten();
                MemberRecord {
                    key: key.clone(),
                    identity: identity_of(&holder).to_string(),
                    holder,
                    metadata: v.metadata,
                    priority: v.priority,
                    joined_at_us: v.joined_at_us,
                    heartbeat_at_us: v.heartbeat_at_us,
                    expires_at_us: left.map(|l| now + us(l)).unwrap_or(v.heartbeat_at_us),
                    live: left.is_some(),
                }
            })
            .collect())
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        let prefix = self.member_prefix(key);

        let resp = self
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.map_err(e))?;
        let mut reaped = 0;
        for kv in resp.kvs() {
            let lease = serde_json::from_slice::<MemberValue>(kv.value())
                .map(|m| m.lease)
                .unwrap_or(0);
            if self.lease_ttl(lease).await?.is_some() {
                continue;
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    kv.key().to_vec(),
                    CompareOp::Equal,
                    kv.mod_revision(),
                )])
                .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
            if self
                .txn(txn)
                .await
                .map_err(|e| self.map_err(e))?
                .succeeded()
            {
                reaped += 1;
            }
        }
        Ok(reaped)
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<bool> {
        self.end_tenure(tenure, End::HandedOver(to, window, reason))
            .await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: &str,
    ) -> Result<Option<LeaseRecord>> {
        for _ in 0..3 {
            let (snap, _) = self.snapshot(key).await?;
            let Some(lease_kv) = snap.lease.clone() else {
                return Ok(None);
            };
            let v = HandoverValue {
                to: to.column().to_string(),
                reason: reason.to_string(),
                window_ms: window.as_millis() as u64,
                requested: true,
            };
            let v = serde_json::to_vec(&v).map_err(|e| self.protocol(e.to_string()))?;
            let lk = self.k("lease", key);
            let hk = self.k("handover", key);
            // Attached to the holder's lease: the request ends with its lease.
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(lk, CompareOp::Equal, lease_kv.mod_revision()),
                    Compare::mod_revision(
                        hk.clone(),
                        CompareOp::Equal,
                        Snapshot::mod_rev(&snap.handover),
                    ),
                ])
                .and_then([TxnOp::put(
                    hk,
                    v,
                    Some(PutOptions::new().with_lease(lease_kv.lease())),
                )]);
            match self.txn(txn).await {
                Ok(r) if r.succeeded() => {
                    let (snap, _) = self.snapshot(key).await?;
                    return self.record(key, &snap).await;
                }
                Ok(_) => continue,
                Err(e) if is_lease_not_found(&e) => return Ok(None),
                Err(e) => return Err(self.map_err(e)),
            }
        }
        Err(self.unavailable("the lease kept changing during a hand-over request".into()))
    }

    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        let resp = self
            .get(
                self.history_prefix(key),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Key, SortOrder::Descend)
                        .with_limit(limit as i64),
                ),
            )
            .await
            .map_err(|e| self.map_err(e))?;
        let prefix = self.history_prefix(key);
        Ok(resp
            .kvs()
            .iter()
            .filter_map(|kv| {
                let term = std::str::from_utf8(kv.key())
                    .ok()?
                    .strip_prefix(&prefix)?
                    .parse::<u64>()
                    .ok()?;
                let h: HistoryValue = serde_json::from_slice(kv.value()).ok()?;
                Some(HistoryRecord {
                    key: key.clone(),
                    term,
                    holder: h.holder,
                    start_reason: h.start_reason,
                    start_at_us: h.start_at_us,
                    end_reason: h.end_reason,
                    end_at_us: h.end_at_us,
                })
            })
            .collect())
    }

    fn subscribe(&self) -> Option<Changes> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse_url("etcd://a:1,b,c:3").unwrap();
        assert_eq!(u.endpoints, ["http://a:1", "http://b:2379", "http://c:3"]);
        assert_eq!(u.user, None);
        let u = parse_url("etcd://root:p%40ss@h:2379/x").unwrap();
        assert_eq!(u.user, Some(("root".into(), "p@ss".into())));
        assert!(parse_url("etcd://h:x").is_err());
        assert!(parse_url("etcd://").is_err());
        assert_eq!(
            redact("etcd://root:secret@h:1,g:2"),
            "etcd://root:***@h:1,g:2"
        );
        assert!(!parse_url("etcd://u:SECRET@h:bad")
            .unwrap_err()
            .to_string()
            .contains("SECRET"));
    }

    #[test]
    fn keys_round_trip() {
        let k = parse_election_key("p", b"p/lease/a%2Fb/c%25d").unwrap();
        assert_eq!(k, ElectionKey::new("a/b", "c%d"));
        assert_eq!(seg("a/b%"), "a%2Fb%25");
        assert!(parse_election_key("p", b"p/member/a/b/c").is_none());
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1001)), 2);
        assert_eq!(lease_secs(Duration::from_secs(3)), 3);
    }
}
