//! Conformance checks. Exclusion and compare-and-set: one winner per term, only
//! the holder renews or releases, terms only grow, names are exact.

use std::time::Duration;

use super::{claim, must_acquire, must_not_acquire, shared, tenure, Conformance};
use crate::store::{Acquire, ElectionKey, Tenure};

impl Conformance {
    /// 16 candidates on 16 connections race for one lease, five rounds: exactly
    /// one wins each round, and the terms of the rounds strictly increase.
    pub async fn concurrent_candidates_one_winner_per_term(&self) {
        let _turn = shared().await;
        let key = self.key("race");
        let mut stores = Vec::new();
        for _ in 0..16 {
            stores.push(self.store().await);
        }
        let mut last_term = 0;
        for round in 0..5 {
            let mut tasks = Vec::new();
            for (i, store) in stores.iter().enumerate() {
                let store = store.clone();
                let c = claim(&key, &format!("cand-{i}#r{round}"), Duration::from_secs(30));
                tasks.push(tokio::spawn(async move { store.try_acquire(&c).await }));
            }
            let mut winners = Vec::new();
            for t in tasks {
                match t.await.expect("task") {
                    Ok(Acquire::Acquired(rec)) => winners.push(rec),
                    Ok(Acquire::Held(_)) => {}
                    Err(e) => panic!("[{}] concurrent acquire failed: {e}", self.name),
                }
            }
            assert_eq!(
                winners.len(),
                1,
                "[{}] round {round}: exactly one of 16 must win, got {winners:?}",
                self.name
            );
            let w = &winners[0];
            assert!(
                w.term > last_term,
                "[{}] terms must increase: {} after {last_term}",
                self.name,
                w.term
            );
            last_term = w.term;
            let now = stores[0].read(&key).await.expect("read").expect("row");
            assert_eq!(
                now.holder, w.holder,
                "[{}] the store names the winner",
                self.name
            );
            assert_eq!(now.term, w.term);
            assert!(
                stores[0].release(&tenure(w)).await.expect("release"),
                "winner can release"
            );
        }
    }

    /// Renew and release succeed only for the exact holder and term.
    pub async fn non_holder_cannot_renew_or_release(&self) {
        let _turn = shared().await;
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("owner");
        let ttl = Duration::from_secs(30);
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        let mine = tenure(&rec);
        let thief = Tenure {
            holder: "b#1".into(),
            ..mine.clone()
        };
        let same_identity_other_session = Tenure {
            holder: "a#2".into(),
            ..mine.clone()
        };
        let wrong_term = Tenure {
            term: mine.term + 1,
            ..mine.clone()
        };
        let old_term = Tenure {
            term: mine.term.saturating_sub(1),
            ..mine.clone()
        };
        for t in [&thief, &same_identity_other_session, &wrong_term, &old_term] {
            assert!(
                !b.renew(t, ttl).await.expect("renew"),
                "[{}] {t:?} must not renew",
                self.name
            );
            assert!(
                !b.release(t).await.expect("release"),
                "[{}] {t:?} must not release",
                self.name
            );
        }
        must_not_acquire(&b, &claim(&key, "b#1", ttl)).await;
        must_not_acquire(&a, &claim(&key, "a#1", ttl)).await;
        let after = a.read(&key).await.expect("read").expect("row");
        assert_eq!(after.holder.as_deref(), Some("a#1"));
        assert_eq!(
            after.term, mine.term,
            "[{}] failed writes leave the term alone",
            self.name
        );
        assert!(
            a.renew(&mine, ttl).await.expect("renew"),
            "[{}] the holder renews",
            self.name
        );
        assert!(a.release(&mine).await.expect("release"));
        assert!(
            !a.renew(&mine, ttl).await.expect("renew"),
            "[{}] no renew after release",
            self.name
        );
    }

    /// A release frees the lease at once: another candidate acquires immediately.
    pub async fn release_lets_another_acquire_at_once(&self) {
        let _turn = shared().await;
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("release");
        let rec = must_acquire(&a, &claim(&key, "a#1", Duration::from_secs(60))).await;
        assert!(a.release(&tenure(&rec)).await.expect("release"));
        let read = b.read(&key).await.expect("read").expect("row");
        assert!(
            !read.is_held(),
            "[{}] released lease reads as free: {read:?}",
            self.name
        );
        assert_eq!(
            read.term, rec.term,
            "[{}] release keeps the term",
            self.name
        );
        let next = must_acquire(&b, &claim(&key, "b#1", Duration::from_secs(60))).await;
        self.timing()
            .await
            .next_term(&self.name, rec.term, next.term);
    }

    /// A holder's proclaim changes its tenure's metadata and nothing else;
    /// renewals keep it; any other tenure's proclaim is refused.
    pub async fn proclaim_changes_only_the_current_tenure(&self) {
        let _turn = shared().await;
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("proclaim");
        let ttl = Duration::from_secs(60);
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        let mine = tenure(&rec);
        let name = &self.name;
        assert!(
            a.proclaim(&mine, "addr=10.0.0.2:8080")
                .await
                .expect("proclaim"),
            "[{name}] the holder proclaims"
        );
        let seen = b.read(&key).await.expect("read").expect("row");
        assert_eq!(
            seen.metadata, "addr=10.0.0.2:8080",
            "[{name}] others read it"
        );
        assert_eq!(seen.holder.as_deref(), Some("a#1"), "[{name}] same holder");
        assert_eq!(seen.term, rec.term, "[{name}] proclaim keeps the term");
        assert!(
            seen.expires_at_us >= rec.expires_at_us,
            "[{name}] proclaim does not shorten the lease: {seen:?} after {rec:?}"
        );
        assert!(a.renew(&mine, ttl).await.expect("renew"), "[{name}] renews");
        let renewed = b.read(&key).await.expect("read").expect("row");
        assert_eq!(
            renewed.metadata, "addr=10.0.0.2:8080",
            "[{name}] a renewal keeps the proclaimed metadata"
        );
        for (stranger, what) in [
            (
                Tenure {
                    holder: "b#1".into(),
                    ..mine.clone()
                },
                "another holder",
            ),
            (
                Tenure {
                    term: mine.term + 1,
                    ..mine.clone()
                },
                "another term",
            ),
        ] {
            assert!(
                !b.proclaim(&stranger, "forged").await.expect("proclaim"),
                "[{name}] {what}'s proclaim is refused"
            );
        }
        assert!(a.release(&mine).await.expect("release"));
        assert!(
            !a.proclaim(&mine, "after release").await.expect("proclaim"),
            "[{name}] no proclaim after release"
        );
        let next = must_acquire(&b, &claim(&key, "b#1", ttl)).await;
        assert!(
            !a.proclaim(&mine, "old term").await.expect("proclaim"),
            "[{name}] an ended term's proclaim is refused"
        );
        let read = a.read(&key).await.expect("read").expect("row");
        assert_eq!(
            (read.holder.as_deref(), read.metadata.as_str()),
            (Some("b#1"), "meta of b#1"),
            "[{name}] the new tenure's metadata is untouched"
        );
        assert!(b.release(&tenure(&next)).await.expect("release"));
    }

    /// Consecutive handovers between two connections give strictly increasing terms.
    pub async fn handovers_increase_terms(&self) {
        let _turn = shared().await;
        let stores = [self.store().await, self.store().await];
        let key = self.key("handovers");
        let mut last = 0;
        for i in 0..self.handovers {
            let store = &stores[i % 2];
            let rec = must_acquire(
                store,
                &claim(&key, &format!("c{}#x", i % 2), Duration::from_secs(60)),
            )
            .await;
            assert!(
                rec.term > last,
                "[{}] handover {i}: term {} after {last}",
                self.name,
                rec.term
            );
            last = rec.term;
            assert!(store.release(&tenure(&rec)).await.expect("release"));
        }
    }

    /// Election names are compared exactly: case, Unicode and length limits.
    pub async fn names_are_exact(&self) {
        let _turn = shared().await;
        let a = self.store().await;
        let ns = self.key("x").namespace;
        let ttl = Duration::from_secs(30);
        let names = ["Cron", "cron", "cron ", "日本語", &"n".repeat(255)];
        for n in names {
            must_acquire(&a, &claim(&ElectionKey::new(ns.clone(), n), "a#1", ttl)).await;
        }
        let listed = a.list(Some(&ns)).await.expect("list");
        assert_eq!(
            listed.len(),
            names.len(),
            "[{}] each name is its own election",
            self.name
        );
        for rec in &listed {
            assert!(
                names.contains(&rec.key.election.as_str()),
                "[{}] name round-trips: {:?}",
                self.name,
                rec.key
            );
        }
    }
}
