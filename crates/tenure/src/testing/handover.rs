//! Conformance checks. Hand-over: a window reserved for the target, and
//! requests from any process that make the renewal fail.

use std::time::{Duration, Instant};

use super::{alone, claim, must_acquire, must_not_acquire, shared, tenure, Conformance};
use crate::store::{Acquire, Handover, HandoverReason, LeaseStoreExt};

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
                // Long enough for three writes on a busy disk: the window
                // must still be open when b comes.
                Duration::from_secs(30),
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
        // A target that never comes: anyone after the window. The window
        // opens when the hand-over is written, after `start`: counted from
        // there, a slow write (SQLite on a busy disk) before the first
        // try cannot make the window look short.
        let start = Instant::now();
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
        loop {
            if let Ok(Acquire::Acquired(r)) = s.try_acquire(&claim(&key, "c#1", ttl)).await {
                // 200 ms by the store's clock; half of it by ours leaves
                // room for clocks that tick coarsely.
                assert!(
                    start.elapsed() >= t.ms(100),
                    "[{}] window honoured: c acquired {:?} after the hand-over was sent",
                    self.name,
                    start.elapsed()
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

    /// Hand-over windows beyond [`MAX_HANDOVER_WINDOW`] (25 h), up to
    /// `Duration::MAX`, are refused as a usage error by both the leader's
    /// hand-over and a request from another process, and nothing is written:
    /// the lease, its version, its renewals and its history are as before
    /// (before the bound, SQLite stored `now + window` as a REAL that no read
    /// could decode, and etcd's `window_ms * 1000` could overflow). A window
    /// of exactly the bound is accepted.
    ///
    /// [`MAX_HANDOVER_WINDOW`]: crate::store::MAX_HANDOVER_WINDOW
    pub async fn oversized_handover_windows_are_refused_and_nothing_is_written(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        let key = self.key("window");
        let ttl = Duration::from_secs(30);
        let rec = must_acquire(&s, &claim(&key, "a#1", ttl)).await;
        let before = s.read(&key).await.expect("read").expect("record");
        let max = crate::store::MAX_HANDOVER_WINDOW;
        for window in [
            max + Duration::from_micros(1),
            max * 2,
            Duration::from_secs(300_000 * 365 * 86_400),
            Duration::MAX,
        ] {
            let to = Handover::To("b".into());
            let err = s
                .hand_over(&tenure(&rec), &to, window, HandoverReason::Transfer)
                .await
                .expect_err("an oversized hand-over is refused");
            assert!(
                err.is_usage(),
                "[{}] hand_over {window:?}: {err}",
                self.name
            );
            let err = s
                .request_handover(&key, &Handover::Anyone, window, HandoverReason::Resign)
                .await
                .expect_err("an oversized hand-over request is refused");
            assert!(
                err.is_usage(),
                "[{}] request_handover {window:?}: {err}",
                self.name
            );
            let now = s
                .read(&key)
                .await
                .unwrap_or_else(|e| panic!("[{}] readable after {window:?}: {e}", self.name))
                .expect("record");
            assert_eq!(
                (now.holder.as_deref(), now.term, now.version, &now.handover),
                (Some("a#1"), before.term, before.version, &None),
                "[{}] nothing written for a window of {window:?}",
                self.name
            );
        }
        assert!(
            s.renew(&tenure(&rec), ttl).await.expect("renew"),
            "[{}] no hand-over request was left behind",
            self.name
        );
        s.flush().await.expect("flush");
        let history = s.history(&key, 10).await.expect("history");
        assert_eq!(history.len(), 1, "[{}] one term: {history:?}", self.name);
        assert_eq!(history[0].end_reason, None, "[{}] still open", self.name);
        // The bound itself is a valid window: only the target may take over.
        assert!(s
            .hand_over(
                &tenure(&rec),
                &Handover::To("b".into()),
                max,
                HandoverReason::Transfer
            )
            .await
            .expect("a window of exactly the bound"));
        must_not_acquire(&s, &claim(&key, "c#1", ttl)).await;
        let b = must_acquire(&s, &claim(&key, "b#1", ttl)).await;
        assert_eq!(b.start_reason, Some(crate::store::StartReason::Transfer));
    }
}
