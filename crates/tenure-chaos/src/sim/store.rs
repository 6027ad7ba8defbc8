//! One candidate's view of the shared in-memory store, through a simulated
//! network and process: each call may be lost on the way there, answered
//! with an error, delayed on either leg, or have its reply lost; a paused
//! process sends and receives nothing; a crashed one makes no more calls
//! (its requests already on the way still land); a partition holds calls
//! until it heals and then fails them.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure::store::{History, LeaseStoreExt, Membership, PushHealth, Wakeups};
use tenure::testing::{Batched, Statement};

use async_trait::async_trait;
use tenure::store::memory::MemoryStore;
use tenure::store::{
    Acquire, Capabilities, Claim, ElectionKey, Handover, HandoverReason, HistoryRecord,
    LeaseRecord, LeaseStore, Member, MemberRecord, RunRecord, RunRecords, Tenure,
};
use tenure::{Error, Result};
use tokio::sync::Notify;

use super::push::Subscriber;
use super::World;

/// A switch tasks can wait on. Not a `watch`: tokio's watch wakes its
/// receivers in a random order (sharded), which would break one seed, one run.
#[derive(Debug, Default)]
pub struct Flag {
    on: AtomicBool,
    changed: Notify,
}

impl Flag {
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub fn get(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Waits until the switch is `on`.
    pub async fn until(&self, on: bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.get() == on {
                return;
            }
            changed.await;
        }
    }
}

/// The per-incarnation switches of one candidate's process and link.
#[derive(Debug, Default)]
pub struct Net {
    pub paused: Flag,
    pub partitioned: Flag,
    pub dead: AtomicBool,
}

impl Net {
    /// Waits while the process is paused.
    pub async fn running(&self) {
        self.paused.until(false).await;
    }
}

/// One candidate's process and its link to the shared store: every call
/// goes through [`Link::call`].
#[derive(Debug)]
pub struct Link {
    pub world: Arc<World>,
    /// The shared store, seen from this candidate (its clock rides along
    /// for the wall-clock bug).
    pub inner: Arc<MemoryStore>,
    pub net: Arc<Net>,
    pub cand: String,
}

/// The store as one candidate sees it.
#[derive(Debug)]
pub struct FaultyStore {
    link: Arc<Link>,
    /// This incarnation's push channel, where the seed's store pushes.
    push: Option<Subscriber>,
    /// The renewals of one instant, gathered into one call as the Redis and
    /// etcd stores gather theirs (with the same code): one fate for all.
    renewals: Arc<Batched<Renewals>>,
}

impl FaultyStore {
    pub fn new(link: Link, push: Option<Subscriber>) -> Self {
        let link = Arc::new(link);
        let renewals = Batched::new(
            Renewals(link.clone()),
            "sim://".into(),
            metrics::Counter::noop(),
        );
        Self {
            link,
            push,
            renewals,
        }
    }

    /// A write through the simulated process and link ([`Link::call`])
    /// that, where it applies (`applied` says of its answer), is announced
    /// on the push channels, from the store's side: a write whose reply is
    /// lost, or that lands late, is announced all the same.
    async fn write<T, Fut>(
        &self,
        key: &ElectionKey,
        f: impl FnOnce(Arc<MemoryStore>) -> Fut + Send + 'static,
        applied: fn(&T) -> bool,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let (key, world) = (key.clone(), self.link.world.clone());
        self.link
            .call(move |s| async move {
                let r = f(s).await;
                if r.as_ref().is_ok_and(applied) {
                    world.announce(&key);
                }
                r
            })
            .await
    }
}

/// Renewals sent together: one call through the link renews each lease in
/// turn, with no simulated time between them.
#[derive(Debug)]
struct Renewals(Arc<Link>);

impl Statement for Renewals {
    type Item = Tenure;
    type Answer = bool;
    const CHUNK: usize = 1000;
    const WHAT: &'static str = "renewal";

    fn send(
        &self,
        ttl_us: i64,
        items: Vec<&Tenure>,
    ) -> impl Future<Output = std::result::Result<Vec<bool>, String>> + Send {
        let tenures: Vec<Tenure> = items.into_iter().cloned().collect();
        let ttl = Duration::from_micros(u64::try_from(ttl_us).unwrap_or(0));
        let link = self.0.clone();
        async move {
            let world = link.world.clone();
            link.call(move |s| async move {
                let mut renewed = Vec::with_capacity(tenures.len());
                for t in &tenures {
                    let ok = s.renew(t, ttl).await?;
                    // A store that ends expired leases itself counts
                    // renewals as push activity (etcd's watch sees the
                    // state key rewritten).
                    if ok && world.store_ends_expired {
                        world.count_renewal();
                    }
                    renewed.push(ok);
                }
                Ok(renewed)
            })
            .await
            .map_err(|e| e.to_string())
        }
    }
}

/// What happens to one call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fate {
    Normal,
    /// Refused by the store (not applied), answered at once.
    Error,
    /// Lost on the way (not applied); the caller hears an error after `d`.
    LostRequest(Duration),
    /// Applied; the reply is lost, the caller hears an error after `d`.
    LostReply(Duration),
    /// Applied after `d`.
    DelayedRequest(Duration),
    /// Applied at once, answered after `d`.
    DelayedReply(Duration),
}

impl Link {
    fn fate(&self) -> Fate {
        let w = &self.world;
        let p = w.cfg.call_fault_rate;
        let ttl = w.cfg.ttl;
        let mut rng = w.rng();
        use rand::Rng;
        if !rng.gen_bool(p) {
            return Fate::Normal;
        }
        let d = ttl.mul_f64(rng.gen_range(0.0..1.2));
        match rng.gen_range(0..5) {
            0 => Fate::Error,
            1 => Fate::LostRequest(d),
            2 => Fate::LostReply(d),
            3 => Fate::DelayedRequest(d),
            _ => Fate::DelayedReply(d),
        }
    }

    fn unavailable(&self, reason: &str) -> Error {
        Error::Unavailable {
            source: None,
            store: "sim://".into(),
            reason: reason.into(),
        }
    }

    /// One call through the simulated process and link.
    async fn call<T, Fut>(
        &self,
        f: impl FnOnce(Arc<MemoryStore>) -> Fut + Send + 'static,
    ) -> Result<T>
    where
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        if self.net.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.net.running().await;
        if self.net.partitioned.get() {
            self.net.partitioned.until(false).await;
            self.net.running().await;
            return Err(self.unavailable("partitioned (simulated)"));
        }
        if self.world.store_down.load(Ordering::SeqCst) {
            return Err(self.unavailable("store down (simulated)"));
        }
        let fate = self.fate();
        self.world
            .trace(|| format!("{} {fate:?} {}", self.cand, std::any::type_name::<T>()));
        let start = self.world.now_ns();
        let store = self.inner.clone();
        let result = match fate {
            Fate::Normal => f(store).await,
            Fate::Error => Err(self.unavailable("store error (simulated)")),
            Fate::LostRequest(d) => {
                tokio::time::sleep(d).await;
                Err(self.unavailable("request lost (simulated)"))
            }
            Fate::LostReply(d) => {
                let _ = f(store).await;
                tokio::time::sleep(d).await;
                Err(self.unavailable("reply lost (simulated)"))
            }
            Fate::DelayedRequest(d) => {
                // A request on the wire lands even if the caller gives up or
                // the process dies meanwhile: a task of its own.
                let landed = tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    f(store).await
                });
                match landed.await {
                    Ok(r) => r,
                    Err(_) => Err(self.unavailable("simulation ended")),
                }
            }
            Fate::DelayedReply(d) => {
                let r = f(store).await;
                tokio::time::sleep(d).await;
                r
            }
        };
        if fate != Fate::Normal {
            let kind = match fate {
                Fate::Normal => "",
                Fate::Error => "store-error",
                Fate::LostRequest(_) => "lost-request",
                Fate::LostReply(_) => "lost-reply",
                Fate::DelayedRequest(_) => "delayed-request",
                Fate::DelayedReply(_) => "delayed-reply",
            };
            self.world
                .record_fault(kind, &self.cand, start, self.world.now_ns(), String::new());
        }
        // A paused process reads its replies only when it runs again.
        self.net.running().await;
        if self.net.dead.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        result
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.link.world.store.capabilities();
        caps.push = self.push.is_some();
        caps.push_acquisitions = self.push.is_some();
        caps.push_expiry = self.push.is_some() && self.link.world.store_ends_expired;
        caps
    }

    fn wakeups(&self) -> Option<&dyn Wakeups> {
        self.push.as_ref().map(|_| self as &dyn Wakeups)
    }

    fn describe(&self) -> String {
        "sim://".into()
    }

    fn run_records(&self) -> Option<&dyn RunRecords> {
        Some(self)
    }

    async fn try_acquire(&self, claim: &Claim) -> Result<Acquire> {
        let claim = claim.clone();
        let key = claim.key.clone();
        self.write(
            &key,
            move |s| async move { s.try_acquire(&claim).await },
            |r| matches!(r, Acquire::Acquired(_)),
        )
        .await
    }

    async fn renew(&self, tenure: &Tenure, ttl: Duration) -> Result<bool> {
        self.link.world.remember(tenure);
        let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        self.renewals.call(ttl_us, tenure.clone()).await
    }

    async fn release(&self, tenure: &Tenure) -> Result<bool> {
        self.link.world.remember(tenure);
        let tenure = tenure.clone();
        let key = tenure.key.clone();
        self.write(
            &key,
            move |s| async move { s.release(&tenure).await },
            |&r| r,
        )
        .await
    }

    async fn read(&self, key: &ElectionKey) -> Result<Option<LeaseRecord>> {
        let key = key.clone();
        self.link
            .call(move |s| async move { s.read(&key).await })
            .await
    }

    async fn list(&self, namespace: Option<&str>) -> Result<Vec<LeaseRecord>> {
        let ns = namespace.map(str::to_string);
        self.link
            .call(move |s| async move { s.list(ns.as_deref()).await })
            .await
    }

    async fn hand_over(
        &self,
        tenure: &Tenure,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<bool> {
        let (tenure, to) = (tenure.clone(), to.clone());
        let key = tenure.key.clone();
        let hand_over = move |s: Arc<MemoryStore>| async move {
            s.hand_over(&tenure, &to, window, reason).await
        };
        self.write(&key, hand_over, |&r| r).await
    }

    async fn request_handover(
        &self,
        key: &ElectionKey,
        to: &Handover,
        window: Duration,
        reason: HandoverReason,
    ) -> Result<Option<LeaseRecord>> {
        let (asked, to) = (key.clone(), to.clone());
        let request = move |s: Arc<MemoryStore>| async move {
            s.request_handover(&asked, &to, window, reason).await
        };
        self.write(key, request, Option::is_some).await
    }

    async fn proclaim(&self, tenure: &Tenure, metadata: &str) -> Result<bool> {
        let (tenure, metadata) = (tenure.clone(), metadata.to_string());
        let key = tenure.key.clone();
        self.write(
            &key,
            move |s| async move { s.proclaim(&tenure, &metadata).await },
            |&r| r,
        )
        .await
    }

    fn membership(&self) -> Option<&dyn Membership> {
        Some(self)
    }

    fn history_log(&self) -> Option<&dyn History> {
        Some(self)
    }
}

#[async_trait]
impl Membership for FaultyStore {
    async fn heartbeat(&self, member: &Member, ttl: Duration) -> Result<()> {
        let member = member.clone();
        self.link
            .call(move |s| async move { s.heartbeat(&member, ttl).await })
            .await
    }

    async fn heartbeat_and_read(
        &self,
        member: &Member,
        ttl: Duration,
    ) -> Result<Option<LeaseRecord>> {
        let member = member.clone();
        self.link
            .call(move |s| async move { s.heartbeat_and_read(&member, ttl).await })
            .await
    }

    async fn leave(&self, key: &ElectionKey, holder: &str) -> Result<bool> {
        let (key, holder) = (key.clone(), holder.to_string());
        self.link
            .call(move |s| async move { s.leave(&key, &holder).await })
            .await
    }

    async fn members(&self, key: &ElectionKey) -> Result<Vec<MemberRecord>> {
        let key = key.clone();
        self.link
            .call(move |s| async move { s.members(&key).await })
            .await
    }

    async fn reap(&self, key: &ElectionKey) -> Result<u64> {
        let key = key.clone();
        self.link
            .call(move |s| async move { s.reap(&key).await })
            .await
    }
}

#[async_trait]
impl History for FaultyStore {
    async fn history(&self, key: &ElectionKey, limit: usize) -> Result<Vec<HistoryRecord>> {
        let key = key.clone();
        self.link
            .call(move |s| async move { s.history(&key, limit).await })
            .await
    }
}

/// The shared store's run records, through the same simulated network.
#[async_trait]
impl RunRecords for FaultyStore {
    async fn get(&self, key: &ElectionKey, name: &str) -> Result<Option<RunRecord>> {
        let (key, name) = (key.clone(), name.to_string());
        self.link
            .call(move |s| async move { RunRecords::get(&*s, &key, &name).await })
            .await
    }

    async fn put(
        &self,
        key: &ElectionKey,
        name: &str,
        value: &str,
        expected: u64,
        keep: Duration,
    ) -> Result<Option<RunRecord>> {
        let (key, name, value) = (key.clone(), name.to_string(), value.to_string());
        self.link
            .call(move |s| async move {
                RunRecords::put(&*s, &key, &name, &value, expected, keep).await
            })
            .await
    }

    async fn list(&self, key: &ElectionKey, limit: usize) -> Result<Vec<RunRecord>> {
        let key = key.clone();
        self.link
            .call(move |s| async move { RunRecords::list(&*s, &key, limit).await })
            .await
    }
}

impl Wakeups for FaultyStore {
    fn subscribe(&self) -> Option<tenure::store::Changes> {
        self.push.as_ref().map(|p| p.tx.subscribe())
    }

    /// What this channel delivered, where the store pushes the ends of
    /// expired leases (the only place the campaign asks).
    fn push_activity(&self) -> Option<u64> {
        let p = self.push.as_ref()?;
        self.link
            .world
            .store_ends_expired
            .then(|| p.delivered.load(Ordering::SeqCst))
    }

    /// Down while this candidate is partitioned or the store restarts (its
    /// channel is broken then, see `push.rs`), so followers take the
    /// campaign's slow-read path meanwhile, as on a real store.
    fn push_health(&self) -> PushHealth {
        let channel = "simulated push".to_string();
        if self.push.is_none() {
            return PushHealth::NotOffered;
        }
        let reason = if self.link.net.partitioned.get() {
            "partitioned (simulated)"
        } else if self.link.world.store_down.load(Ordering::SeqCst) {
            "the store is restarting (simulated)"
        } else {
            return PushHealth::Up { channel };
        };
        PushHealth::Down {
            channel,
            // Not tracked: the campaign looks only at whether it is down.
            down_for_ms: 0,
            reason: reason.into(),
        }
    }
}
