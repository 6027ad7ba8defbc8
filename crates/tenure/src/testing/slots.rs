//! Conformance checks. Semaphores: N slots never have N + 1 holders, one
//! candidate holds one slot, and a slot whose holder died is filled again.

use std::time::{Duration, Instant};

use super::{alone, Conformance};
use crate::store::DynStore;
use crate::{Elector, Semaphore};

/// Slots in the check: fewer than the candidates, so one always waits.
const SLOTS: usize = 2;

impl Conformance {
    /// Three candidates, two slots: two distinct candidates hold one slot
    /// each and the third waits; a holder that dies without releasing is
    /// replaced by the waiting one once its lease expires. Sampled every
    /// millisecond throughout: never two holders of one slot, never a
    /// candidate with two slots, never more holders than slots.
    pub async fn a_semaphore_never_has_more_holders_than_slots(&self) {
        let _turn = alone().await;
        let key = self.key("slots");
        let ttl = self.timing().await.ttl(Duration::from_secs(1));
        let build = |store: DynStore, id: &str| {
            Elector::builder(store)
                .namespace(key.namespace.clone())
                .election(key.election.clone())
                .identity(id)
                .ttl(ttl)
                .release_on_shutdown(false)
                .build_semaphore(SLOTS)
                .expect("semaphore")
        };
        let mut candidates = Vec::new();
        for id in ["a", "b", "c"] {
            candidates.push(build(self.store().await, id));
        }
        let full = |c: &[Semaphore]| c.iter().filter(|s| s.current().is_some()).count() == SLOTS;
        self.watch_slots(
            &candidates,
            Duration::from_secs(10),
            full,
            "both slots filled",
        )
        .await;
        // A holder dies: its slot's lease must expire, then the waiting
        // candidate fills it.
        let dead = candidates
            .iter()
            .position(|s| s.current().is_some())
            .expect("a holder");
        let died = candidates.remove(dead);
        let slot = died.current().expect("holds").slot();
        died.shutdown().await.expect("shutdown");
        let refilled = |c: &[Semaphore]| {
            c.iter()
                .any(|s| s.current().is_some_and(|p| p.slot() == slot))
        };
        self.watch_slots(
            &candidates,
            ttl * 10,
            refilled,
            "the dead holder's slot refilled",
        )
        .await;
        for s in candidates {
            s.shutdown().await.expect("shutdown");
        }
    }

    /// Samples the candidates until `done` holds (or `within` passes, which
    /// fails the check), asserting the semaphore's rules at every sample.
    async fn watch_slots(
        &self,
        candidates: &[Semaphore],
        within: Duration,
        done: impl Fn(&[Semaphore]) -> bool,
        what: &str,
    ) {
        let start = Instant::now();
        loop {
            let mut holders = vec![0; SLOTS];
            for s in candidates {
                let held: Vec<usize> = s
                    .electors()
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.is_leader())
                    .map(|(slot, _)| slot)
                    .collect();
                assert!(
                    held.len() <= 1,
                    "[{}] {} holds slots {held:?} at once",
                    self.name,
                    s.holder_id()
                );
                for slot in held {
                    holders[slot] += 1;
                }
            }
            assert!(
                holders.iter().all(|h| *h <= 1),
                "[{}] a slot with two holders: {holders:?}",
                self.name
            );
            if done(candidates) {
                return;
            }
            assert!(
                start.elapsed() < within,
                "[{}] not within {within:?}: {what}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
