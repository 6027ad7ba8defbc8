//! PostgreSQL LISTEN/NOTIFY: a graceful handover wakes followers and observers
//! in milliseconds instead of at their next poll.
//!
//! One listening connection per store (per process), started on the first
//! subscription: the store's own statement connection
//! (`connection.rs`, `listening.rs`), or, where a pooler stands between
//! the store and PostgreSQL, a connection of its own to the `push_url`. It
//! reconnects by itself and, after a reconnect, tells every subscriber that
//! anything may have changed.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::store::sql::connection::{OnOwn, OneConnection};
use crate::store::util::push_health::{PushHealth, PushMonitor};
use crate::store::util::push_outage::{Backoff, PushOutage};
use crate::store::util::wakeups::{wake_all, Sender, Subscribers, Wakeups};
use crate::store::{Changes, ElectionKey, StoreOptions};
use sqlx::postgres::PgListener;

const WHAT: &str = "PostgreSQL LISTEN";

/// Separates namespace and election in a payload; names cannot contain it.
const SEP: char = '\u{1f}';

#[derive(Debug)]
pub(in crate::store::sql) struct PushHub {
    url: String,
    channel: String,
    /// The store's own connection: where probes are sent from, and where
    /// the listener waits unless it has a connection of its own
    /// ([`OneConnection::listens`]).
    own: Arc<OneConnection>,
    probe_period: Duration,
    wakeups: Wakeups,
    monitor: Arc<PushMonitor>,
}

impl PushHub {
    pub(in crate::store::sql) fn new(
        url: String,
        prefix: &str,
        own: Arc<OneConnection>,
        probe_period: Duration,
    ) -> Self {
        Self {
            url,
            channel: crate::store::sql::statements::changes_channel(prefix),
            own,
            probe_period,
            wakeups: Wakeups::new(),
            monitor: Arc::new(PushMonitor::new(WHAT)),
        }
    }

    pub(in crate::store::sql) fn subscribe(&self) -> Option<Changes> {
        let listener = Listener {
            url: self.url.clone(),
            channel: self.channel.clone(),
            own: self.own.clone(),
            probe_period: self.probe_period,
            monitor: Arc::clone(&self.monitor),
            subscribers: self.wakeups.subscribers(),
        };
        self.wakeups.subscribe(|tx| listener.run(tx))
    }

    /// Whether anything in the process subscribes.
    pub(in crate::store::sql) fn has_subscribers(&self) -> bool {
        self.wakeups.has_subscribers()
    }

    /// How many connections the listener holds besides the store's own:
    /// one to the `push_url` while it is up, none on the store's own.
    pub(in crate::store::sql) fn connections_held(&self) -> usize {
        usize::from(!self.own.listens() && matches!(self.health(), PushHealth::Up { .. }))
    }

    pub(in crate::store::sql) fn health(&self) -> PushHealth {
        self.monitor.health()
    }

    pub(in crate::store::sql) async fn notify(
        &self,
        conn: &mut crate::store::sql::conn::Conn,
        key: &ElectionKey,
    ) {
        let payload = format!("{}{SEP}{}", key.namespace, key.election);
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(self.channel.as_str())
            .bind(payload)
            .execute(conn)
            .await;
        if let Err(e) = sent {
            tracing::debug!("pg_notify failed: {e}");
        }
    }
}

fn parse(payload: &str) -> Option<ElectionKey> {
    let (ns, election) = payload.split_once(SEP)?;
    Some(ElectionKey::new(ns, election))
}

/// A probe's payload starts with this; it has no [`SEP`], so no store takes
/// it for an election (a version without probes wakes its followers at each
/// probe it hears: one read per follower per probing process per period).
const PROBE_MARK: &str = "tenure-probe:";

fn is_probe(payload: &str) -> bool {
    payload.starts_with(PROBE_MARK) && !payload.contains(SEP)
}

/// How long a probe's statement may take to be sent; a slow pool is not a
/// broken channel, so the arrival's timeout counts from its answer.
const PROBE_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The pause before another probe when one could not be sent.
const PROBE_RETRY: Duration = Duration::from_secs(1);

/// What the listening task needs.
struct Listener {
    url: String,
    channel: String,
    own: Arc<OneConnection>,
    probe_period: Duration,
    monitor: Arc<PushMonitor>,
    /// The listening connection is closed once nothing in the process
    /// subscribes: electors subscribe only while they lead or are the
    /// designated successor (`Capabilities::push_holds_a_connection`).
    subscribers: Subscribers,
}

/// One connection's probes: PostgreSQL tells a listener nothing when its
/// notifications stop arriving (a half-open connection, a pooler in
/// transaction mode that drops them), so the listener notifies itself
/// through the store's connection, once the channel opens and every probe period, and
/// takes a probe that does not arrive for a lost channel.
struct Probes {
    payload: String,
    period: Duration,
    /// When the pending probe's statement was answered.
    pending: Option<Instant>,
    next: Instant,
    /// Whether a probe arrived on this connection: only then is it up.
    confirmed: bool,
}

impl Probes {
    fn new(period: Duration) -> Self {
        Self {
            payload: format!("{PROBE_MARK}{:016x}", rand::random::<u64>()),
            period,
            pending: None,
            next: Instant::now(),
            confirmed: false,
        }
    }

    /// Sends a probe if one is due and none is pending, waiting up to
    /// `timeout` for the statement's answer. Why it was not sent, if not.
    async fn send_due(
        &mut self,
        own: &OneConnection,
        channel: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        if self.pending.is_some() || Instant::now() < self.next {
            return Ok(());
        }
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(self.payload.as_str())
            .execute_on(own);
        let failed = match tokio::time::timeout(timeout, sent).await {
            Ok(Ok(_)) => {
                self.pending = Some(Instant::now());
                return Ok(());
            }
            Ok(Err(e)) => format!("a probe could not be sent: {e}"),
            Err(_) => format!("a probe was not answered within {timeout:?}"),
        };
        tracing::debug!("push {failed}");
        self.next = Instant::now() + PROBE_RETRY;
        Err(failed)
    }

    /// Until when to wait for the next notification.
    fn wait_until(&self) -> Instant {
        let check = Instant::now() + Duration::from_secs(5);
        match self.pending {
            Some(answered) => answered + StoreOptions::PUSH_PROBE_TIMEOUT,
            None => self.next.min(check),
        }
    }

    fn overdue(&self) -> bool {
        self.pending
            .is_some_and(|t| t.elapsed() >= StoreOptions::PUSH_PROBE_TIMEOUT)
    }

    /// Whether `payload` is our probe; it then counts as arrived.
    fn arrived(&mut self, payload: &str) -> bool {
        if payload != self.payload {
            return false;
        }
        self.pending = None;
        self.next = Instant::now() + self.period;
        true
    }
}

impl Listener {
    /// Runs until the store (and with it the sender) is dropped, or nothing
    /// in the process subscribes any more (seen within 5 s).
    async fn run(self, tx: Weak<Sender>) {
        if self.own.listens() {
            self.run_on_own(tx).await
        } else {
            self.run_on_its_own(tx).await
        }
    }

    /// Listens on the store's own connection, between its statements: the
    /// connection is the listener's only while no statement wants it.
    async fn run_on_own(self, tx: Weak<Sender>) {
        let store = crate::store::redact_url(&self.url);
        let mut outage = PushOutage::new(Arc::clone(&self.monitor));
        let mut backoff = Backoff::new();
        let mut probes = Probes::new(self.probe_period);
        loop {
            if self.subscribers.stop_if_none() {
                self.monitor.closed();
                return;
            }
            // On the listening connection itself: one that does not answer
            // in the time a probe has to arrive is as lost as one that
            // delivers nothing (and the failed statement closed it).
            let timeout = StoreOptions::PUSH_PROBE_TIMEOUT;
            if let Err(why) = probes.send_due(&self.own, &self.channel, timeout).await {
                if outage.lost(WHAT, &store, &why) {
                    wake_all(&tx);
                }
                probes = Probes::new(self.probe_period);
                tokio::time::sleep(backoff.next_pause()).await;
                continue;
            }
            if self.own.is_wanted() {
                // Behind the statement that rang, which is about to take
                // the connection.
                tokio::task::yield_now().await;
                continue;
            }
            let (mut lent, fresh) = match self.own.lend_to_listen(&self.channel).await {
                Ok(listening) => listening,
                Err(e) => {
                    if outage.lost(WHAT, &store, &e) {
                        wake_all(&tx);
                    }
                    tokio::time::sleep(backoff.next_pause()).await;
                    continue;
                }
            };
            let Some(t) = tx.upgrade() else { return };
            if fresh {
                // A new connection: notifications sent before its LISTEN
                // (or, the first time, since the subscribers subscribed)
                // went unheard; and it is up only once a probe arrives.
                let _ = t.send(None);
                probes = Probes::new(self.probe_period);
                drop(lent.keep().await);
                continue;
            }
            let Some(listening) = lent.conn().listening() else {
                unreachable!("the store's connection listens")
            };
            let wait = probes.wait_until();
            let next = tokio::select! {
                biased;
                () = self.own.wanted() => None,
                next = tokio::time::timeout_at(wait.into(), listening.try_recv()) => Some(next),
            };
            let lost = match next {
                // A statement wants the connection.
                None => None,
                Some(Err(_)) if probes.overdue() => Some(format!(
                    "a notification this process sent has not arrived within {:?} \
                     (a dead connection)",
                    StoreOptions::PUSH_PROBE_TIMEOUT
                )),
                // Time to probe.
                Some(Err(_)) => None,
                Some(Ok(Ok(Some(n)))) => {
                    self.heard(&n, &mut probes, &t, &mut backoff, &mut outage, &store);
                    None
                }
                Some(Ok(Ok(None))) => Some("connection closed".to_owned()),
                Some(Ok(Err(e))) => Some(e.to_string()),
            };
            match lost {
                None => drop(lent.keep().await),
                Some(why) => {
                    // Dropped unkept, the connection closes; the next
                    // statement, or this loop, opens another.
                    drop(lent);
                    outage.lost(WHAT, &store, &why);
                    let _ = t.send(None);
                    tokio::time::sleep(backoff.next_pause()).await;
                }
            }
        }
    }

    /// What a notification means: a probe of this listener's (the channel
    /// is up), another store's probe, or a change to pass on.
    fn heard(
        &self,
        n: &sqlx::postgres::PgNotification,
        probes: &mut Probes,
        t: &Sender,
        backoff: &mut Backoff,
        outage: &mut PushOutage,
        store: &str,
    ) {
        if probes.arrived(n.payload()) {
            // Up only now: notifications were accepted before, and this
            // shows they arrive.
            if !std::mem::replace(&mut probes.confirmed, true) {
                backoff.opened();
                outage.restored(WHAT, store);
            }
        } else if !is_probe(n.payload()) {
            // (Another store's probe has no separator, even in a
            // namespace named like one.)
            let _ = t.send(parse(n.payload()));
        }
    }

    /// Listens on a connection of its own, to the `push_url`.
    async fn run_on_its_own(self, tx: Weak<Sender>) {
        let store = crate::store::redact_url(&self.url);
        let mut outage = PushOutage::new(Arc::clone(&self.monitor));
        let mut backoff = Backoff::new();
        loop {
            if self.subscribers.stop_if_none() {
                self.monitor.closed();
                return;
            }
            let failed = match PgListener::connect(&self.url).await {
                Ok(mut listener) => match listener.listen(&self.channel).await {
                    Ok(()) => Ok(listener),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            let mut listener = match failed {
                Ok(l) => l,
                Err(e) => {
                    if outage.lost(WHAT, &store, &e) {
                        wake_all(&tx);
                    }
                    tokio::time::sleep(backoff.next_pause()).await;
                    continue;
                }
            };
            // We may have missed notifications while disconnected (or, on the
            // first connection, since our subscribers subscribed).
            match tx.upgrade() {
                Some(t) => {
                    let _ = t.send(None);
                }
                None => return,
            }
            let mut probes = Probes::new(self.probe_period);
            loop {
                // A slow statement is not a broken channel: the arrival's
                // timeout counts from the answer.
                let _ = probes
                    .send_due(&self.own, &self.channel, PROBE_SEND_TIMEOUT)
                    .await;
                let next =
                    tokio::time::timeout_at(probes.wait_until().into(), listener.try_recv()).await;
                let Some(t) = tx.upgrade() else { return };
                if self.subscribers.stop_if_none() {
                    drop(listener);
                    self.monitor.closed();
                    return;
                }
                match next {
                    Err(_) if probes.overdue() => {
                        let why = format!(
                            "a notification this process sent has not arrived within {:?} \
                             (a dead connection, or a pooler that does not forward notifications)",
                            StoreOptions::PUSH_PROBE_TIMEOUT
                        );
                        outage.lost(WHAT, &store, &why);
                        let _ = t.send(None);
                        break;
                    }
                    Err(_) => continue,
                    Ok(Ok(Some(n))) => {
                        self.heard(&n, &mut probes, &t, &mut backoff, &mut outage, &store);
                    }
                    Ok(Ok(None)) => {
                        // Connection lost: connect again above (which says when
                        // it is back), waking everyone first.
                        outage.lost(WHAT, &store, &"connection closed");
                        let _ = t.send(None);
                        break;
                    }
                    Ok(Err(e)) => {
                        outage.lost(WHAT, &store, &e);
                        let _ = t.send(None);
                        break;
                    }
                }
            }
            // At once after a channel that stayed up; otherwise backing off.
            tokio::time::sleep(backoff.next_pause()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_told_from_elections() {
        assert!(is_probe("tenure-probe:00000000000000ff"));
        // A namespace may start like a probe; its elections still wake.
        let election = format!("tenure-probe:ns{SEP}job");
        assert!(!is_probe(&election));
        assert_eq!(
            parse(&election),
            Some(ElectionKey::new("tenure-probe:ns", "job"))
        );
    }
}
