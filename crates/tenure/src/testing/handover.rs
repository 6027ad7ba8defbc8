//! Conformance checks. Hand-over: a window reserved for the target, and
//! requests from any process that make the renewal fail.

use std::time::{Duration, Instant};

use super::{alone, claim, must_acquire, must_not_acquire, shared, tenure, Conformance};
use crate::store::Acquire;

impl Conformance {
    /// After a hand-over to an identity, only that identity may acquire until
    /// the window ends; then anyone.
    pub async fn handover_lets_only_the_target_acquire_within_the_window(&self) {
        let _turn = alone().await;
        let s = self.store().await;
        let t = self.timing().await;
        let key = self.key("transfer");
        let ttl = Duration::from_secs(30);
        let rec = must_acquire(&s, &claim(&key, "a#1", ttl)).await;
        assert!(s
            .hand_over(
                &tenure(&rec),
                &crate::store::Handover::To("b".into()),
                t.ms(300),
                crate::store::HandoverReason::Transfer
            )
            .await
            .expect("hand over"));
        must_not_acquire(&s, &claim(&key, "c#1", ttl)).await;
        must_not_acquire(&s, &claim(&key, "a#1", ttl)).await;
        let b = must_acquire(&s, &claim(&key, "b#9", ttl)).await;
        t.next_term(&self.name, rec.term, b.term);
        assert_eq!(
            b.start_reason,
            Some(crate::store::StartReason::Transfer),
            "[{}] reason recorded",
            self.name
        );
        assert_eq!(
            b.handover, None,
            "[{}] acquisition clears the hand-over",
            self.name
        );
        // A target that never comes: anyone after the window.
        assert!(s
            .hand_over(
                &tenure(&b),
                &crate::store::Handover::To("ghost".into()),
                t.ms(200),
                crate::store::HandoverReason::Transfer
            )
            .await
            .expect("hand over"));
        must_not_acquire(&s, &claim(&key, "c#1", ttl)).await;
        let start = Instant::now();
        loop {
            if let Ok(Acquire::Acquired(r)) = s.try_acquire(&claim(&key, "c#1", ttl)).await {
                assert!(
                    start.elapsed() >= t.ms(100),
                    "[{}] window honoured",
                    self.name
                );
                t.next_term(&self.name, b.term, r.term);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5) * t.k,
                "[{}] window never ended",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A hand-over request from anyone makes the leader's next renewal fail;
    /// with nobody leading, there is nothing to request.
    pub async fn handover_request_makes_renewal_fail(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        let key = self.key("request");
        let ttl = Duration::from_secs(30);
        assert!(
            s.request_handover(
                &key,
                &crate::store::Handover::Anyone,
                ttl,
                crate::store::HandoverReason::Resign
            )
            .await
            .expect("request")
            .is_none(),
            "[{}] no leader, nothing to resign",
            self.name
        );
        let rec = must_acquire(&s, &claim(&key, "a#1", ttl)).await;
        let marked = s
            .request_handover(
                &key,
                &crate::store::Handover::Anyone,
                ttl,
                crate::store::HandoverReason::Resign,
            )
            .await
            .expect("request")
            .expect("leader");
        assert_eq!(marked.handover, Some(crate::store::Handover::Anyone));
        assert!(
            !s.renew(&tenure(&rec), ttl).await.expect("renew"),
            "[{}] renewal fails once a hand-over is requested",
            self.name
        );
        must_not_acquire(&s, &claim(&key, "b#1", ttl)).await;
        assert!(s
            .hand_over(
                &tenure(&rec),
                &crate::store::Handover::Anyone,
                ttl,
                crate::store::HandoverReason::Resign
            )
            .await
            .expect("step down"));
        let b = must_acquire(&s, &claim(&key, "b#1", ttl)).await;
        assert_eq!(b.start_reason, Some(crate::store::StartReason::Resign));
    }
}
