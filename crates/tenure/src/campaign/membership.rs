//! Membership: this candidate's registration in the member list, beside the phases.
//!
//! Succession needs a member list in which live candidates are fresh and
//! dead ones lapse: a heartbeat task keeps this candidate registered when
//! nothing else does (a follower's timed reads carry its heartbeat), and the
//! leader now and then reaps lapsed registrations, off its renewal path.

use std::sync::Arc;
use std::time::Duration;

use super::Campaign;
use crate::config::Timing;
use crate::leadership::Shared;
use crate::store::{DynStore, LeaseStoreExt, Member};

impl Campaign {
    /// After a successful renewal sent at `t0`: starts the reap of lapsed
    /// members when one is due (`led_since`: when the current tenure began).
    pub(super) fn reap_if_due(&mut self, led_since: Duration, t0: Duration) {
        // Counted from the first time this candidate led: a
        // thousand electors that just acquired do not all reap at
        // their first renewal.
        let reaped_at = *self.reaped_at.get_or_insert(led_since);
        if t0.saturating_sub(reaped_at) >= self.timing().reap_period {
            // Dead members are reaped by the leader, rarely (readers
            // skip lapsed ones anyway): bookkeeping, so off the
            // leader's path (a slow reap must not delay a shutdown
            // or a resign).
            self.reaped_at = Some(t0);
            tokio::spawn(reap(
                self.store.clone(),
                self.shared.clone(),
                self.member(),
                self.config.timing.clone(),
            ));
        }
    }
}

/// The leader's garbage collection of lapsed registrations (see
/// `Timing::reap_period`). Where the lease vouches for its holder
/// (`Capabilities::lease_vouches_for_holder`), the leader's own registration
/// is not refreshed while it leads and has lapsed by now: it is refreshed
/// first, so the reap does not delete it, and if that fails nothing is
/// reaped (the garbage waits for the next reap).
async fn reap(store: DynStore, shared: Arc<Shared>, member: Member, timing: Timing) {
    if store.capabilities().lease_vouches_for_holder {
        if shared.membership_paused() {
            return;
        }
        let sent = shared.clock.now();
        let heartbeat = store.heartbeat(&member, timing.member_ttl);
        match tokio::time::timeout(timing.heartbeat_timeout, heartbeat).await {
            Ok(Ok(())) => shared.heartbeat_sent(sent),
            _ => return,
        }
    }
    let _ = tokio::time::timeout(timing.reap_timeout, store.reap(&member.key)).await;
}

/// Keeps this candidate registered when nothing else does: a follower's
/// reads carry its heartbeat, so this task mostly registers a new candidate
/// and refreshes the leader's registration on stores whose lease does not
/// vouch for its holder (etcd, ZooKeeper: every 1.5 TTLs). Elsewhere a
/// leader sends no heartbeat while it leads: holding the lease proves it
/// alive, and member readers count it live from its renewals
/// (`Capabilities::lease_vouches_for_holder`), so an idle leader costs its
/// renewals alone. None while membership is paused after a resignation.
pub(super) async fn keep_registered(
    store: DynStore,
    shared: Arc<Shared>,
    member: Member,
    timing: Timing,
) {
    let vouched = store.capabilities().lease_vouches_for_holder;
    loop {
        // The first registration goes at once; later ones when due. A
        // leader that registered skips them (see above); once it stops
        // leading (`is_leader` is false from its local deadline on) its
        // registration is long due, and the next tick refreshes it.
        let age = shared.heartbeat_age();
        let leading = vouched && age != Duration::MAX && shared.is_leader();
        if !shared.membership_paused() && !leading && timing.heartbeat_due(age) {
            let sent = shared.clock.now();
            let heartbeat = store.heartbeat(&member, timing.member_ttl);
            match tokio::time::timeout(timing.heartbeat_timeout, heartbeat).await {
                Ok(Ok(())) => shared.heartbeat_sent(sent),
                Ok(Err(e)) => tracing::debug!(election = %member.key, "heartbeat failed: {e}"),
                Err(_) => tracing::debug!(election = %member.key, "heartbeat timed out"),
            }
        }
        // On a grid: the due heartbeats of all this process's elections go
        // at the same instants, and the store batches them.
        let next = timing.next_heartbeat(shared.clock.now());
        let paused_until = Duration::from_nanos(
            shared
                .membership_paused_until
                .load(std::sync::atomic::Ordering::Acquire),
        );
        // Wake when the pause ends, to rejoin at once; and when a pause is
        // set while asleep, to learn when it ends, so that a resigned member
        // rejoins when its hold-off ends, not up to TTL/2 later
        // (`tests/succession.rs::a_resigned_member_rejoins_when_its_hold_off_ends`).
        let wake = if paused_until > shared.clock.now() {
            paused_until.min(next)
        } else {
            next
        };
        tokio::select! {
            biased;
            _ = shared.clock.sleep_until(wake) => {}
            _ = shared.membership_pause_set.notified() => {}
        }
    }
}
