//! Leading: renewing the lease until the local deadline.
//!
//! The leader renews on a grid of renew periods, and each successful renewal
//! moves its local deadline on; at that deadline it steps down whether or
//! not the store ever answered. Between renewals it makes no store call
//! unless a push wakes it (a hand-over request from another process), so one
//! process can lead a thousand elections. Every store call it makes races the
//! deadline and the command channel ([`super::race`]); stepping down, asked
//! or not, is in [`super::handover`].

use std::time::Duration;

use super::race::{Commands, Raced};
use super::{jittered, Campaign, Next};
use crate::store::{changed, Tenure, Woken};

/// One tenure, as its leader holds it.
struct Reign {
    tenure: Tenure,
    /// The local deadline: the leader steps down here at the latest.
    deadline: Duration,
    /// When (local clock) this tenure began.
    led_since: Duration,
    /// When the next renewal is due.
    next_renew: Duration,
    /// Failed renewals in a row.
    renew_failures: u32,
}

impl Campaign {
    /// Leads `tenure` until it ends; returns what follows.
    pub(super) async fn lead(&mut self, tenure: Tenure, deadline: Duration) -> Next {
        let led_since = self.now();
        let _ = self.listen(true);
        let mut reign = Reign {
            tenure,
            deadline,
            led_since,
            next_renew: self.timing().next_renewal(self.now()),
            renew_failures: 0,
        };
        loop {
            let pushed = match self.wait_to_renew(&reign).await {
                Ok(pushed) => pushed,
                Err(next) => return next,
            };
            if self.now() >= reign.deadline {
                return self
                    .lost(
                        &reign.tenure,
                        "deadline passed without a successful renewal",
                    )
                    .await;
            }
            let next = if self.now() < reign.next_renew {
                if !pushed {
                    continue;
                }
                self.read_after_push(&mut reign).await
            } else {
                self.renew(&mut reign).await
            };
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// Waits for the next renewal (or the deadline, if sooner), a push, or a
    /// command. `Ok(true)`: a push that may be a hand-over request woke us;
    /// `Err`: what a command led to.
    async fn wait_to_renew(&mut self, reign: &Reign) -> Result<bool, Next> {
        // A hand-over request makes the next renewal fail, so the leader
        // always notices it within a renew period; where the store pushes
        // changes, the request wakes it at once. No polling reads: a
        // process may lead a thousand elections.
        let wake = reign.next_renew.min(reign.deadline);
        let key = self.config.key.clone();
        let mut pushed = false;
        let command = {
            let sleep = self.shared.clock.sleep_until(wake);
            tokio::select! {
                biased;
                _ = sleep => None,
                // A lagged receiver is not a reason to read: in a process
                // leading a thousand elections, a burst of notifications
                // would make every leader lag and read at once, the reads
                // would take the pool from the renewals, and leaders would
                // miss their deadlines. A request lost that way fails the
                // next renewal, as without push.
                woken = changed(&mut self.changes, Some(&key)) => { pushed = woken != Woken::Lagged; None },
                cmd = self.commands.recv() => Some(cmd),
            }
        };
        if let Some(cmd) = command {
            return Err(self.command_while_leading(cmd, &reign.tenure).await);
        }
        Ok(pushed)
    }

    /// Reads the lease after a push, to see whether it asks for a
    /// hand-over; `Some`: what acting on it, or a command, led to.
    async fn read_after_push(&mut self, reign: &mut Reign) -> Option<Next> {
        let key = reign.tenure.key.clone();
        let store = self.store.clone();
        let read = tokio::time::timeout(self.timing().leader_read_timeout, store.read(&key));
        let rec = match self
            .race(read, reign.deadline, Commands::AfterDeadline)
            .await
        {
            Raced::Done(r) => r.ok().and_then(|r| r.ok()).flatten(),
            Raced::Deadline => None,
            Raced::Command(cmd) => {
                return Some(self.command_while_leading(cmd, &reign.tenure).await)
            }
        };
        if rec.is_none() {
            // The read failed or timed out: the push may have been a
            // hand-over request, and it is spent. Renew soon instead
            // of at the next grid instant: a pending request makes
            // that renewal fail, and the failure path acts on it.
            let soon = self.now() + self.timing().pushed_read_retry;
            reign.next_renew = reign.next_renew.min(soon);
        }
        self.act_on_handover_request(&reign.tenure, rec).await
    }

    /// Renews the lease; `Some`: the tenure ended (or a command came), and
    /// what follows.
    async fn renew(&mut self, reign: &mut Reign) -> Option<Next> {
        let t0 = self.now();
        let store = self.store.clone();
        let renew = store.renew(&reign.tenure, self.timing().ttl);
        let wait_until = crate::bugs::renewal_wait_until(reign.deadline);
        let renewed = match self.race(renew, wait_until, Commands::AfterDeadline).await {
            Raced::Done(r) => r,
            Raced::Deadline => {
                // A renewal that never answered is a store error too.
                crate::telemetry::store_error("renewing the lease");
                return Some(
                    self.lost(
                        &reign.tenure,
                        "the store did not answer before the deadline",
                    )
                    .await,
                );
            }
            // A command while the store is slow: act on it now, dropping
            // the renewal, instead of waiting up to the deadline.
            Raced::Command(cmd) => {
                return Some(self.command_while_leading(cmd, &reign.tenure).await)
            }
        };
        match renewed {
            Ok(true)
                if self.now() >= reign.deadline
                    && !crate::bugs::active(crate::bugs::Bug::LateReplyAccepted) =>
            {
                // The answer came at the deadline: our belief has ended
                // (lost() may already have fired), and a tenure never
                // resumes once given up. Step down and free the lease.
                Some(
                    self.lost(&reign.tenure, "the renewal answered only at the deadline")
                        .await,
                )
            }
            Ok(true) => self.renewed(reign, t0).await,
            Ok(false) => Some(self.renewal_refused(&reign.tenure, reign.deadline).await),
            Err(e) => {
                self.store_failed("renewing the lease", &e);
                reign.renew_failures += 1;
                // The first failure is often a pooled connection that died
                // with a server restart: the next one is likely fine, so
                // retry at once; after that, back off.
                let wait = if reign.renew_failures == 1 {
                    self.timing().first_renew_retry
                } else {
                    jittered(self.timing().retry_period)
                };
                reign.next_renew = self.now() + wait;
                None
            }
        }
    }

    /// The renewal sent at `t0` succeeded: the deadline moves on. Then the
    /// bookkeeping a leader does (the reap, when due) and the preemption
    /// check; `Some`: a preemption or a command ended the tenure.
    async fn renewed(&mut self, reign: &mut Reign, t0: Duration) -> Option<Next> {
        self.store_ok();
        reign.renew_failures = 0;
        self.note_rtt(self.now().saturating_sub(t0));
        crate::telemetry::renewed(&self.config.key, self.now().saturating_sub(t0));
        let start = crate::bugs::deadline_start(t0, self.now());
        reign.deadline = self.timing().deadline(start, self.rtt);
        self.shared.lead(reign.tenure.term, reign.deadline);
        reign.next_renew = self.timing().next_renewal(t0);
        self.reap_if_due(reign.led_since, t0);
        self.preempt_if_due(&reign.tenure, reign.led_since, reign.deadline)
            .await
    }

    /// The store refused the renewal: most often a hand-over request from
    /// another process (`tenure resign`), and the lease is still ours; the
    /// work stops before it is handed over. Otherwise the lease expired or
    /// was taken over, and this candidate follows.
    async fn renewal_refused(&mut self, tenure: &Tenure, deadline: Duration) -> Next {
        self.store_ok();
        // The read races the deadline, which still ends the tenure.
        let store = self.store.clone();
        let read = tokio::time::timeout(self.timing().leader_read_timeout, store.read(&tenure.key));
        let rec = self
            .before_deadline(read, deadline)
            .await
            .and_then(|r| r.ok())
            .and_then(|r| r.ok())
            .flatten();
        if let Some(next) = self.act_on_handover_request(tenure, rec).await {
            return next;
        }
        self.shared.end();
        tracing::warn!(election = %self.config.key, term = tenure.term, "leadership lost: the store no longer has our lease (expired or taken over)");
        Next::Follow { hold_off: None }
    }
}
