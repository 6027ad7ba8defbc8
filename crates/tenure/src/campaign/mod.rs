//! The campaign task: follows until the lease is free, acquires, renews, steps down.
//!
//! One task per elector, moving between phases: following ([`follow`]) until
//! the lease is free and an acquisition wins ([`acquire`]), then leading
//! ([`lead`]) until it steps down ([`handover`]), asked to or at its local
//! deadline at the latest, whether or not the store ever answers. The
//! member heartbeat and the leader's reap of lapsed members run beside the
//! phases ([`membership`]). Every store call a leader waits on while it
//! still leads races its local deadline and the command channel through one
//! helper ([`race`]).
//!
//! Every `tokio::select!` in the campaign is `biased`: when several branches
//! are ready, the first listed wins, not tokio's random pick, so a
//! simulation seed replays exactly. Either order is handled.

mod acquire;
mod follow;
mod handover;
mod lead;
mod membership;
mod race;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::{Config, Timing};
use crate::error::{Error, Result};
use crate::leadership::{Shared, State};
use crate::store::{Changes, DynStore, LeaseStoreExt, Member, Tenure};

use follow::FollowerState;
use handover::SteppingDown;

/// Requests from the [`Elector`](crate::Elector) handle.
#[derive(Debug)]
pub(crate) enum Command {
    Resign(oneshot::Sender<Result<()>>),
    Transfer(String, oneshot::Sender<Result<()>>),
    Shutdown(oneshot::Sender<Result<()>>),
}

/// The phase that comes next.
enum Next {
    Follow { hold_off: Option<Duration> },
    Lead { tenure: Tenure, deadline: Duration },
    Stop,
}

pub(crate) struct Campaign {
    config: Arc<Config>,
    store: DynStore,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Smoothed round-trip time of successful writes, for the safety margin.
    rtt: Duration,
    /// Consecutive store failures, to log the first of a streak loudly and the rest quietly.
    failures: u32,
    /// The corrupt-lease error last logged ([`Error::Corrupt`]), to log each
    /// new one once rather than every retry.
    corrupt: Option<String>,
    /// Pushed change notifications, where the store has them (and, where a
    /// subscription holds a connection, while this candidate leads or is
    /// the designated successor: see [`Self::listen`]).
    changes: Option<Changes>,
    /// Whether a subscription holds a database connection here
    /// ([`Capabilities::push_holds_a_connection`]).
    ///
    /// [`Capabilities::push_holds_a_connection`]: crate::store::Capabilities::push_holds_a_connection
    frugal: bool,
    /// What a follower carries from one wait to the next read.
    follower: FollowerState,
    /// When (local clock) this candidate last reaped lapsed members as leader
    /// (or first led).
    reaped_at: Option<Duration>,
    /// Where stepping down stands: the member list left, a shutdown waiting.
    stepping_down: SteppingDown,
}

fn jittered(period: Duration) -> Duration {
    // Uniform in [period/2, period]: spreads candidates apart without making
    // anyone slower than the configured period.
    period.mul_f64(crate::random::factor(0.5, 1.0))
}

impl Campaign {
    pub(crate) fn new(
        config: Arc<Config>,
        store: DynStore,
        shared: Arc<Shared>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let caps = store.capabilities();
        // Frugal: followers hold no connection between reads, and read at
        // the lease's expiry unless they listen.
        let frugal = (caps.push && caps.push_holds_a_connection) || caps.reads_at_expiry;
        // A frugal follower subscribes once its first read shows it the
        // designated successor: a fleet starting together must not open
        // a listening connection each.
        let changes = if frugal { None } else { store.subscribe() };
        Self {
            config,
            store,
            shared,
            commands,
            rtt: Duration::ZERO,
            failures: 0,
            corrupt: None,
            changes,
            frugal,
            follower: FollowerState::default(),
            reaped_at: None,
            stepping_down: SteppingDown::default(),
        }
    }

    pub(crate) async fn run(self) {
        // If the campaign ever panicked, handles must not believe we lead or
        // wait forever: the guard ends leadership and marks the elector closed.
        let guard = Closed(self.shared.clone());
        self.campaign().await;
        drop(guard);
    }

    /// The loop between phases, from the first following to the stop.
    async fn campaign(mut self) {
        let membership = tokio::spawn(membership::keep_registered(
            self.store.clone(),
            self.shared.clone(),
            self.member(),
            self.config.timing.clone(),
        ));
        let mut next = Next::Follow { hold_off: None };
        loop {
            next = match next {
                Next::Follow { hold_off } => self.follow(hold_off).await,
                Next::Lead { tenure, deadline } => self.lead(tenure, deadline).await,
                Next::Stop => break,
            };
        }
        membership.abort();
        if let Some(reply) = self.stepping_down.shutdown_pending.take() {
            let _ = reply.send(Ok(()));
        }
        if !self.stepping_down.left() {
            let leave = self.store.leave(&self.config.key, &self.config.holder);
            let _ = tokio::time::timeout(self.timing().leave_timeout, leave).await;
        }
        close(&self.shared);
    }

    fn member(&self) -> Member {
        Member {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            metadata: self.shared.metadata(),
            priority: self.config.priority,
        }
    }

    /// This candidate's tenure under `term`.
    fn tenure(&self, term: u64) -> Tenure {
        Tenure {
            key: self.config.key.clone(),
            holder: self.config.holder.clone(),
            term,
        }
    }

    /// Where a subscription holds a database connection: subscribes (`on`)
    /// or lets go. The leader listens (a hand-over request reaches it at
    /// once), and so do the two followers first in line (a release reaches
    /// the designated successor at once; see `follow.rs`, `rank`); the
    /// other followers read at the lease's expiry and hold no connection in
    /// between. Elsewhere the subscription stays, and `on` only says whether
    /// this follower answers a push at once (`follow.rs`,
    /// `push_answer_delay`). Whether a subscription started.
    fn listen(&mut self, on: bool) -> bool {
        self.follower.in_line = on;
        if !self.frugal {
            return false;
        }
        match (on, self.changes.is_some()) {
            (true, false) => {
                tracing::debug!(election = %self.config.key, "listening for pushes");
                self.changes = self.store.subscribe();
                return self.changes.is_some();
            }
            (false, true) => {
                tracing::debug!(election = %self.config.key, "not first in line to succeed: no longer listening");
                self.changes = None;
            }
            _ => {}
        }
        false
    }

    fn now(&self) -> Duration {
        self.shared.clock.now()
    }

    fn timing(&self) -> &Timing {
        &self.config.timing
    }

    fn store_failed(&mut self, what: &str, e: &Error) {
        crate::telemetry::store_error(what);
        self.failures += 1;
        if self.failures == 1 || self.failures % 50 == 0 {
            tracing::warn!(election = %self.config.key, failures = self.failures, "{what} failed: {e}");
        } else {
            tracing::debug!(election = %self.config.key, failures = self.failures, "{what} failed: {e}");
        }
    }

    fn store_ok(&mut self) {
        if self.corrupt.take().is_some() {
            tracing::info!(election = %self.config.key, "the lease reads as valid again");
        }
        if self.failures > 0 {
            tracing::info!(election = %self.config.key, after = self.failures, "store reachable again");
        }
        self.failures = 0;
    }

    fn note_rtt(&mut self, sample: Duration) {
        self.rtt = if self.rtt.is_zero() {
            sample
        } else {
            // EWMA with weight 1/4, but jump up at once: a margin that lags a
            // slowing store is the unsafe direction.
            (self.rtt.mul_f64(0.75) + sample.mul_f64(0.25)).max(sample.min(self.rtt * 2))
        };
    }
}

/// Ends leadership and marks the elector closed, waking anyone waiting in
/// `acquired()`.
fn close(shared: &Shared) {
    shared.end();
    shared
        .closed
        .store(true, std::sync::atomic::Ordering::Release);
    shared.current.send_replace(None);
    shared.publish(State::NoLeader);
}

/// Ends leadership and closes the elector when the campaign task ends, however.
struct Closed(Arc<Shared>);

impl Drop for Closed {
    fn drop(&mut self) {
        close(&self.0);
    }
}
