//! The process lease: one etcd lease per lease length, shared by every
//! tenure and member registration of this store, kept alive in gathered rounds.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use futures_util::future::try_join_all;

use super::errors::is_lease_not_found;
use super::retry::retry;
use super::Inner;
use crate::error::Result;
use crate::store::util::gather::Arrivals;

/// The granularity of etcd leases.
pub(super) const SECOND: Duration = Duration::from_secs(1);

/// How long one keep-alive round trip may take before the stream is dropped.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whole seconds, rounded up, at least one.
pub(super) fn lease_secs(d: Duration) -> i64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i64::try_from(s.max(1)).unwrap_or(i64::MAX)
}

/// Up to this many distinct leases named in a member list, each one's TTL
/// is asked for (it dates the member's last heartbeat); above, one list of
/// etcd's leases says which are alive. Every follower reads the member list
/// after each change of hands, so one query per lease would make N² of them
/// per hand-over in a fleet of N processes (200 replicas: ~80,000, and
/// etcd's reads then timed out).
pub(super) const LEASE_QUERIES_MAX: usize = 8;

/// What etcd says of a lease a member registration names.
#[derive(Clone, Copy, Debug)]
pub(super) enum LeaseLife {
    /// Alive, with its remaining and granted TTL (whole seconds; etcd
    /// rounds the remaining one down).
    Left { left: Duration, granted: Duration },
    /// Alive, its last keep-alive not dated: it was within its TTL.
    Alive,
    /// Expired or revoked, or none named.
    Gone,
}

/// The outcome of a keep-alive round.
#[derive(Clone, Debug)]
pub(super) enum Kept {
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
    /// When the answer of that round arrived: etcd counts the TTL from when
    /// it handled the round, which is before this.
    answered_at: Option<Instant>,
    /// A round sent its keep-alive and has not read the answer yet. Still set
    /// when the next round starts, the caller gave up mid-round: the stream
    /// then holds an answer to an older send and must not be read.
    in_round: bool,
}

/// The etcd lease this process shares among all its tenures and member
/// registrations of one length (whole seconds).
pub(super) struct ProcessLease {
    pub(super) secs: i64,
    /// Rounds whose keep-alive was sent (incremented before sending).
    sent: AtomicU64,
    /// The store's count of rounds (`tenure_store_statements_total`).
    rounds: metrics::Counter,
    /// Callers of [`Self::keep_alive`], so a gathering round can tell
    /// whether more are coming.
    arrivals: Arrivals,
    conn: tokio::sync::Mutex<LeaseConn>,
}

impl ProcessLease {
    fn new(secs: i64, rounds: metrics::Counter) -> Self {
        Self {
            secs,
            sent: AtomicU64::new(0),
            rounds,
            arrivals: Arrivals::default(),
            conn: tokio::sync::Mutex::new(LeaseConn::default()),
        }
    }

    /// A keep-alive sent after this call started: shares a round with
    /// concurrent callers when that round was sent after they started. With
    /// `gather`, the round first waits for the other callers of this instant
    /// ([`Arrivals::settled`]): electors renew on a shared grid, so the
    /// renewals of one instant share one keep-alive.
    pub(super) async fn keep_alive(
        &self,
        client: &Client,
        gather: bool,
    ) -> std::result::Result<Kept, String> {
        let started = self.sent.load(Ordering::SeqCst);
        self.arrivals.arrived();
        let mut conn = self.conn.lock().await;
        if let Some((round, result)) = &conn.last {
            if *round > started {
                return result.clone();
            }
        }
        if gather {
            // Callers arriving meanwhile queue on `conn` having read `sent`
            // before this round is numbered: they share it.
            self.arrivals.settled().await;
        }
        let mut wait = Duration::from_millis(50);
        loop {
            let round = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
            self.rounds.increment(1);
            let sent_at = Instant::now();
            let result = Self::round(&mut conn, client, self.secs).await;
            if let Ok(Kept::Alive(id)) = &result {
                conn.alive_at = Some((*id, sent_at));
                conn.answered_at = Some(Instant::now());
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

    async fn round(
        conn: &mut LeaseConn,
        client: &Client,
        secs: i64,
    ) -> std::result::Result<Kept, String> {
        let Some(id) = conn.id else {
            return Ok(Kept::Expired);
        };
        let ttl = Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX));
        if conn.answered_at.is_some_and(|at| at.elapsed() >= ttl) {
            // Not kept alive for a whole TTL since etcd last renewed it: it
            // has expired. Asking would cost up to ~0.5 s: etcd answers a
            // keep-alive of an expired lease only once its lessor has revoked
            // it (a sweep every 500 ms), and the designated successor's
            // acquisition then outlasted the succession grace (a herd of 20).
            // A lease still alive by some etcd-side extension (a leader
            // change) is harmless to abandon: no tenure of ours can still be
            // within its deadline on it, and it expires by itself.
            conn.id = None;
            conn.stream = None;
            return Ok(Kept::Expired);
        }
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
    pub(super) async fn recent(&self, store: &Inner, age: Duration) -> Result<i64> {
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

    /// The lease's id if a round found it alive less than its TTL ago.
    fn known_alive(&self) -> Option<i64> {
        let conn = self.conn.try_lock().ok()?;
        let (id, at) = conn.alive_at?;
        let ttl = Duration::from_secs(u64::try_from(self.secs).ok()?);
        (conn.id == Some(id) && at.elapsed() < ttl).then_some(id)
    }

    /// A lease alive for its full TTL from a moment after this call started:
    /// kept alive, or granted afresh if it had expired.
    pub(super) async fn fresh(&self, store: &Inner, gather: bool) -> Result<i64> {
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
        // A grant is as fresh as a keep-alive: it is a round, numbered before
        // it is sent like every keep-alive. Numbered after it returned, a
        // caller that started while the grant was in flight would count it as
        // sent after it started, and its deadline could outlast the lease.
        let round = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        self.rounds.increment(1);
        let sent_at = Instant::now();
        let granted = retry(&store.client, |mut c| async move {
            c.lease_grant(secs, None).await
        })
        .await
        .map_err(|e| store.map_err(e))?;
        conn.id = Some(granted.id());
        conn.stream = None;
        conn.last = Some((round, Ok(Kept::Alive(granted.id()))));
        conn.alive_at = Some((granted.id(), sent_at));
        conn.answered_at = Some(Instant::now());
        tracing::debug!(store = %store.described, lease = granted.id(), ttl = granted.ttl(), "granted an etcd lease");
        Ok(granted.id())
    }
}

impl Inner {
    /// The process lease for TTLs of this length (created, not yet granted,
    /// on first use).
    pub(super) fn process_lease(&self, ttl: Duration) -> Arc<ProcessLease> {
        let secs = lease_secs(ttl);
        let mut leases = self.leases.lock().unwrap_or_else(|p| p.into_inner());
        leases
            .entry(secs)
            .or_insert_with(|| Arc::new(ProcessLease::new(secs, self.keep_alives.clone())))
            .clone()
    }

    /// The ids of this store's process leases that are certainly alive now:
    /// a round found them alive less than their TTL ago. (A lease busy in a
    /// round is left out; callers then ask etcd.)
    pub(super) async fn own_live_leases(&self) -> Vec<i64> {
        let leases: Vec<Arc<ProcessLease>> = self
            .leases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        leases.iter().filter_map(|l| l.known_alive()).collect()
    }

    /// Remaining TTL of a lease, in whole seconds; `None` if it is gone.
    pub(super) async fn lease_ttl(&self, id: i64) -> Result<Option<Duration>> {
        Ok(self.lease_times(id).await?.map(|(left, _)| left))
    }

    /// What etcd says of each of the leases `ids` that member registrations
    /// name (each asked once): up to [`LEASE_QUERIES_MAX`] distinct leases,
    /// each one's TTL, side by side (a follower reads the member list on
    /// its way to a takeover); above, one list of etcd's live leases.
    pub(super) async fn lease_lives(
        &self,
        ids: impl IntoIterator<Item = i64>,
    ) -> Result<HashMap<i64, LeaseLife>> {
        let mut ids: Vec<i64> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() <= LEASE_QUERIES_MAX {
            let times = try_join_all(ids.iter().map(|&id| self.lease_times(id))).await?;
            return Ok(ids
                .iter()
                .zip(times)
                .map(|(&id, t)| {
                    let life = match t {
                        Some((left, granted)) => LeaseLife::Left { left, granted },
                        None => LeaseLife::Gone,
                    };
                    (id, life)
                })
                .collect());
        }
        let c = self.client.clone();
        let listed = retry(&c, |mut c| async move { c.leases().await })
            .await
            .map_err(|e| self.map_err(e))?;
        let alive: HashSet<i64> = listed.leases().iter().map(|l| l.id()).collect();
        Ok(ids
            .iter()
            .map(|&id| {
                let life = match id != 0 && alive.contains(&id) {
                    true => LeaseLife::Alive,
                    false => LeaseLife::Gone,
                };
                (id, life)
            })
            .collect())
    }

    /// Remaining and granted TTL of a lease, in whole seconds (the remaining
    /// one rounded down by etcd); `None` if it is gone.
    pub(super) async fn lease_times(&self, id: i64) -> Result<Option<(Duration, Duration)>> {
        if id == 0 {
            return Ok(None);
        }
        let c = self.client.clone();
        let secs = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
        match retry(
            &c,
            |mut c| async move { c.lease_time_to_live(id, None).await },
        )
        .await
        {
            Ok(r) if r.ttl() >= 0 => Ok(Some((secs(r.ttl()), secs(r.granted_ttl())))),
            Ok(_) => Ok(None),
            Err(e) if is_lease_not_found(&e) => Ok(None),
            Err(e) => Err(self.map_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// A TCP proxy that delays everything the server sends by `delay` ms
    /// (order kept), so a call can be caught in flight.
    async fn delaying_proxy(upstream: String, delay: Arc<AtomicU64>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
                let delay = delay.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let due =
                            Instant::now() + Duration::from_millis(delay.load(Ordering::SeqCst));
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    while let Some((due, bytes)) = rx.recv().await {
                        tokio::time::sleep_until(due.into()).await;
                        if cw.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        port
    }

    /// A caller that starts while a grant is in flight must not count that
    /// grant as sent after it started: its deadline, counted from its own
    /// start, could outlast the lease. Grants are numbered before they are
    /// sent, like keep-alives, so the caller runs a round of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grant_in_flight_is_not_fresh_for_a_later_caller() {
        let Some(etcd) = tenure_testsupport::EtcdCluster::start_or_skip(
            1,
            tenure_testsupport::servers::required(),
        ) else {
            return;
        };
        let upstream = etcd.url().trim_start_matches("etcd://").to_string();
        let delay = Arc::new(AtomicU64::new(0));
        let port = delaying_proxy(upstream, delay.clone()).await;
        let store = super::super::EtcdStore::connect(
            &format!("etcd://127.0.0.1:{port}"),
            &crate::store::StoreOptions::default(),
        )
        .await
        .expect("etcd through the proxy");
        let inner = store.inner.clone();
        let lease = inner.process_lease(Duration::from_secs(5));
        delay.store(300, Ordering::SeqCst);
        let (a_inner, a_lease) = (inner.clone(), lease.clone());
        let granting = tokio::spawn(async move { a_lease.fresh(&a_inner, false).await });
        // The grant is on its way (its answer held back by the proxy).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let b_started = Instant::now();
        lease.fresh(&inner, false).await.expect("fresh lease for b");
        granting.await.expect("join").expect("grant");
        let (_, alive_since) = lease.conn.lock().await.alive_at.expect("alive");
        assert!(
            alive_since >= b_started,
            "b was handed a lease round sent {:?} before it started",
            b_started - alive_since
        );
    }

    #[test]
    fn whole_seconds() {
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1001)), 2);
        assert_eq!(lease_secs(Duration::from_secs(3)), 3);
    }
}
