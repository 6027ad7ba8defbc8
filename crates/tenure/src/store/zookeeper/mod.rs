#![doc = include_str!("docs.md")]

mod clocks;
mod errors;
mod history;
mod lease;
mod members;
mod paths;
mod read;
mod runs;
mod tls;
mod url;
mod values;
mod watch;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use tokio::sync::broadcast;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use super::{
    Acquire, Capabilities, Changes, Claim, ElectionKey, Handover, HandoverReason, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, StoreOptions, Tenure,
};
use crate::error::{Error, Result};
use crate::store::{History, Membership, Wakeups};

/// The ZooKeeper store; see the [module documentation](self).
pub struct ZkStore {
    inner: Arc<Inner>,
}

struct Inner {
    url: url::ZkUrl,
    /// `zks://`: how every session's connection speaks TLS.
    tls: Option<zookeeper_client::TlsOptions>,
    described: String,
    base: String,
    history_retention: u64,
    connect_timeout: Duration,
    /// For reads, watches and the clock: survives no particular lease.
    main: tokio::sync::Mutex<Option<Client>>,
    /// One session per TTL (milliseconds): its timeout is that TTL.
    sessions: tokio::sync::Mutex<HashMap<u64, Client>>,
    /// Election directories known to exist.
    dirs: Mutex<HashSet<ElectionKey>>,
    changes: broadcast::Sender<Option<ElectionKey>>,
    /// The elections with a watch task, and the tasks.
    watched: Mutex<HashMap<ElectionKey, tokio::task::JoinHandle<()>>>,
    /// Leader znode versions and since when this process sees them, for
    /// expiry across ZooKeeper leaders (`clocks.rs`).
    sightings: clocks::Sightings,
}

impl std::fmt::Debug for ZkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkStore")
            .field("store", &self.inner.described)
            .field("base", &self.inner.base)
            .finish()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        for (_, t) in self
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
        {
            t.abort();
        }
    }
}

/// The timeout of the session that holds leases of `ttl`: twice the TTL.
///
/// A ZooKeeper follower server tells the ZooKeeper leader, which expires
/// sessions, that it heard a session only when it relays its touches, once
/// per half tick. A renewal it forwarded and answered, but never relayed
/// (the server died or lost the leader first), leaves the session's expiry
/// counting from the relayed touch before: up to a renewal period (TTL/3)
/// and a tick before the renewal's `t0`. A session of the TTL could then
/// delete the `leader` znode before the holder's deadline (seen: 150–250 ms
/// before it at a 3 s TTL); one of twice the TTL still outlives it for
/// any `tickTime` up to 2/3 of the TTL. The lease itself still ends at the
/// TTL: acquirers judge its `mtime`, not the session.
pub(super) fn lease_session_timeout(ttl: Duration) -> Duration {
    ttl * 2
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ZkStore {
    /// Connects to the ensemble a `zk://` URL names and checks (creating it
    /// if missing) the store's znode tree inside the chroot.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        let parsed = url::parse(url)?;
        let prefix = options.table_prefix.trim_matches('/');
        if prefix.is_empty() || prefix.contains('/') || prefix == "." || prefix == ".." {
            return Err(Error::config(
                "table prefix",
                format!("{prefix:?} is not one znode name"),
            ));
        }
        let (changes, _) = broadcast::channel(1024);
        let described = super::redact_url(url);
        let tls = match &parsed.tls {
            Some(files) => Some(tls::options(files, &described)?),
            None => None,
        };
        let inner = Arc::new(Inner {
            described,
            tls,
            url: parsed,
            base: format!("/{prefix}"),
            history_retention: options.history_retention.max(1),
            connect_timeout: options.connect_timeout,
            main: tokio::sync::Mutex::new(None),
            sessions: tokio::sync::Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashSet::new()),
            changes,
            watched: Mutex::new(HashMap::new()),
            sightings: clocks::Sightings::default(),
        });
        inner.check_tree().await?;
        Ok(Self { inner })
    }
}

impl Inner {
    fn map(&self, path: &str, e: ZkError) -> Error {
        errors::map(&self.described, path, e)
    }

    /// The error for a lease of `key` whose stored values tenure did not
    /// write, with the `zkCli.sh` commands that repair it. The `term`
    /// counter node is kept, so no term repeats.
    fn corrupt(&self, key: &ElectionKey, reason: String) -> Error {
        let del = |name: &str| format!("delete {}", self.node(key, name));
        Error::Corrupt {
            election: key.to_string(),
            store: self.described.clone(),
            reason,
            repair: format!(
                "in `zkCli.sh`, run `{}`, `{}` and `{}` (keep the `term` node: \
                 terms count its versions, so no term repeats)",
                del("leader"),
                del("handover"),
                del("state")
            ),
        }
    }

    fn protocol(&self, reason: impl Into<String>) -> Error {
        Error::Protocol {
            store: self.described.clone(),
            reason: reason.into(),
            source: None,
        }
    }

    /// Opens a session with the given timeout (the server may negotiate another).
    async fn open(&self, timeout: Duration) -> Result<Client> {
        let mut connector = Client::connector()
            .with_session_timeout(timeout)
            .with_connection_timeout(self.connect_timeout);
        if let Some(d) = &self.url.digest {
            connector = connector.with_auth("digest", d.as_bytes());
        }
        let connecting = match &self.tls {
            Some(tls) => connector
                .with_tls(tls.clone())
                .secure_connect(&self.url.connect)
                .boxed(),
            None => connector.connect(&self.url.connect).boxed(),
        };
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(self.map(&self.url.chroot, e)),
            Err(_) if self.tls.is_some() => Err(Error::Tls {
                store: self.described.clone(),
                reason: format!(
                    "no ZooKeeper session over TLS within {:?}: are these the servers' \
                     secureClientPort (a plain clientPort does not answer TLS), does cacert= \
                     hold the CA that signed their certificates, and do they want a client \
                     certificate (cert=, key=; ssl.clientAuth)?",
                    self.connect_timeout
                ),
                source: None,
            }),
            Err(_) => Err(Error::Unavailable {
                store: self.described.clone(),
                reason: format!(
                    "no ZooKeeper server answered within {:?} (is the ensemble running, and \
                     are these its client ports?)",
                    self.connect_timeout
                ),
                source: None,
            }),
        }
    }

    /// The session for reads, watches and the clock, reopened if it ended.
    async fn main(&self) -> Result<Client> {
        let mut main = self.main.lock().await;
        if let Some(c) = main.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            // Its watches died with it: wake everyone to re-read.
            let _ = self.changes.send(None);
        }
        let c = self.open(Duration::from_secs(10)).await?;
        *main = Some(c.clone());
        Ok(c)
    }

    /// The session for leases of `ttl`, opened if needed, with a timeout of
    /// [`lease_session_timeout`]. Refuses a TTL whose session timeout the
    /// ensemble does not grant in full.
    async fn session(&self, ttl: Duration) -> Result<Client> {
        let mut sessions = self.sessions.lock().await;
        let key = ms(ttl).max(1);
        if let Some(c) = sessions.get(&key) {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
        }
        self.check_tick(Duration::from_millis(key)).await?;
        let wanted = lease_session_timeout(Duration::from_millis(key));
        let c = self.open(wanted).await?;
        let granted = c.session_timeout();
        if granted < wanted {
            return Err(Error::config(
                "ttl",
                format!(
                    "{ttl:?} needs ZooKeeper sessions of twice the TTL ({wanted:?}), and the \
                     ensemble grants {granted:?}: it could expire the leader's session before \
                     its deadline; use a TTL of at most {:?} or raise the servers' \
                     maxSessionTimeout",
                    granted / 2
                ),
            ));
        }
        sessions.insert(key, c.clone());
        Ok(c)
    }

    /// Refuses a TTL the ensemble's `tickTime` is too long for: a lease
    /// session of twice the TTL outlives the holder's deadline only while
    /// `tickTime` is at most 2/3 of the TTL ([`lease_session_timeout`]).
    /// ZooKeeper does not tell clients its tick, but it grants no session
    /// shorter than `minSessionTimeout`, two ticks unless configured
    /// otherwise; so a probe session asks for 4/3 of the TTL, and is
    /// granted more only if two ticks exceed that. A probe shorter than a
    /// second can time out in its handshake on a busy machine, so TTLs
    /// under 750 ms are probed with 1 s: a tick over half a second is
    /// refused there, a shorter one still too long for the TTL goes unseen.
    async fn check_tick(&self, ttl: Duration) -> Result<()> {
        let asked = (ttl * 4 / 3).max(Duration::from_secs(1));
        let granted = self.open(asked).await?.session_timeout();
        if granted <= asked {
            return Ok(());
        }
        let tick = granted / 2;
        Err(Error::config(
            "ttl",
            format!(
                "{ttl:?} is too short for this ensemble's tickTime: the servers grant no \
                 session under {granted:?}, which by default is two ticks of {tick:?}, and a \
                 ZooKeeper session can end up to a tick and a renewal period early, before \
                 the leader's deadline, unless tickTime is at most 2/3 of the TTL; use a TTL \
                 of at least {:?}, or a tickTime (and minSessionTimeout) of at most {:?}",
                Duration::from_millis(ms(tick * 3 / 2)),
                Duration::from_millis(ms(ttl * 2 / 3))
            ),
        ))
    }

    /// The ZooKeeper leader's clock now, in µs since the epoch: the `mtime`
    /// of a write. Decisions about expiry compare znode times with this.
    async fn server_now_us(&self) -> Result<i64> {
        Ok(self.server_now().await?.0)
    }

    /// [`Self::server_now_us`] and the epoch of the ZooKeeper leader whose
    /// clock it is (`clocks.rs`).
    async fn server_now(&self) -> Result<(i64, i64)> {
        let c = self.main().await?;
        let path = self.clock_path();
        let stat = c
            .set_data(&path, b"", None)
            .await
            .map_err(|e| self.map(&path, e))?;
        Ok((stat.mtime.saturating_mul(1000), clocks::epoch(stat.mzxid)))
    }

    /// Checks the base znode is ours (creating it if missing), inside an
    /// existing chroot.
    async fn check_tree(&self) -> Result<()> {
        let c = self.main().await?;
        match c.get_data(&self.base).await {
            Ok((data, _)) if data == paths::MARKER => {}
            Ok((data, stat)) => {
                let shown = String::from_utf8_lossy(&data[..data.len().min(40)]).into_owned();
                return Err(Error::config(
                    "store prefix",
                    format!(
                        "znode {}{} exists but is not a tenure store (data {shown:?}, {} children): \
                         another program owns it; choose another chroot or prefix",
                        self.url.chroot.trim_end_matches('/'),
                        self.base,
                        stat.num_children
                    ),
                ));
            }
            Err(ZkError::NoNode) => {
                let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
                match c.create(&self.base, paths::MARKER, &opts).await {
                    Ok(_) | Err(ZkError::NodeExists) => {}
                    Err(ZkError::NoNode) => return Err(self.no_chroot()),
                    Err(e) => return Err(self.map(&self.base, e)),
                }
            }
            Err(e) => return Err(self.map(&self.base, e)),
        }
        let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for p in [self.clock_path(), self.elections_root()] {
            match c.create(&p, b"", &opts).await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(e) => return Err(self.map(&p, e)),
            }
        }
        Ok(())
    }

    fn no_chroot(&self) -> Error {
        Error::InvalidUrl {
            url: self.described.clone(),
            reason: format!(
                "the chroot {} does not exist on this ensemble (tenure writes nothing outside \
                 it, so it does not create it); create it (zkCli.sh create {}) or fix the URL",
                self.url.chroot, self.url.chroot
            ),
        }
    }

    /// Creates an election's persistent directories once per store.
    async fn ensure_dir(&self, key: &ElectionKey) -> Result<()> {
        if self
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
        {
            return Ok(());
        }
        let c = self.main().await?;
        let opts = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let dir = self.dir(key);
        let ns = dir
            .rsplit_once('/')
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        for p in [
            ns,
            dir.clone(),
            format!("{dir}/members"),
            format!("{dir}/history"),
            format!("{dir}/runs"),
        ] {
            match c.create(&p, b"", &opts).await {
                Ok(_) | Err(ZkError::NodeExists) => {}
                Err(ZkError::NoNode) => return Err(self.no_chroot()),
                Err(e) => return Err(self.map(&p, e)),
            }
        }
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        Ok(())
    }
}

#[async_trait]
impl LeaseStore for ZkStore {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn run_records(&self) -> Option<&dyn super::RunRecords> {
        Some(self)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push: true,
            push_acquisitions: true,
            fenced_transactions: false,
            batch_renew: false,
            list_members: false,
            durable: true,
            min_ttl: Duration::ZERO,
            sparse_terms: false,
            // A lease ended by its `mtime + ttl` (a live session whose
            // elector stopped renewing) is deleted only by the next
            // acquirer's multi-op: nothing pushes it.
            push_expiry: false,
            // Watches ride the one session (or gRPC channel) every
            // process holds anyway.
            push_holds_a_connection: false,
            reads_at_expiry: false,
            // Registrations are judged by their znode's `mtime`: the leader
            // keeps heartbeating.
            lease_vouches_for_holder: false,
        }
    }

    fn describe(&self) -> String {
        self.inner.described.clone()
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        Inner::try_acquire(&self.inner, claim).await
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.inner.renew(tenure, ttl).await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.inner.end(tenure, None).await
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        self.inner.proclaim(tenure, metadata).await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        Inner::watch(&self.inner, key).await;
        self.inner.read(key).await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        self.inner.list(namespace).await
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        crate::store::handover_window_us(window)?;
        self.inner
            .end(tenure, Some((to, window, reason.as_str())))
            .await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        crate::store::handover_window_us(window)?;
        self.inner
            .request_handover(key, to, window, reason.as_str())
            .await
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        Some(self)
    }
}

#[async_trait]
impl Membership for ZkStore {
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
}

#[async_trait]
impl History for ZkStore {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        self.inner.history(key, limit).await
    }
}

impl Wakeups for ZkStore {
    fn push_health(&self) -> crate::store::PushHealth {
        crate::store::PushHealth::Unreported {
            channel: "ZooKeeper watches".to_owned(),
        }
    }

    fn subscribe(&self) -> Option<Changes> {
        Some(self.inner.changes.subscribe())
    }
}
