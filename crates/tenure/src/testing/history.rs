//! Conformance checks. History: every term with why it began and ended.

use crate::store::{EndReason, LeaseStoreExt, StartReason};
use std::time::{Duration, Instant};

use super::{claim, must_acquire, shared, tenure, wait_expired, Conformance};

impl Conformance {
    /// Every term is in the history with why it began and ended.
    pub async fn history_records_every_term_with_reasons(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        if !self.offers(&s, super::parts::Part::History) {
            return;
        }
        let t = self.timing().await;
        let key = self.key("history");
        let a = must_acquire(&s, &claim(&key, "a#1", t.ms(150))).await;
        wait_expired(&s, &key, Duration::from_secs(5) * t.k).await;
        let b = must_acquire(&s, &claim(&key, "b#1", Duration::from_secs(30))).await;
        assert!(s.release(&tenure(&b)).await.expect("release"));
        let c = must_acquire(&s, &claim(&key, "c#1", Duration::from_secs(30))).await;
        // History is written just after each change, off the caller's path.
        let start = Instant::now();
        let h = loop {
            let h = s.history(&key, 10).await.expect("history");
            let complete = h.len() == 3
                && h[1].end_reason == Some(EndReason::Released)
                && h[2].end_reason == Some(EndReason::Expired);
            if complete || start.elapsed() > Duration::from_secs(5) {
                break h;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let terms: Vec<u64> = h.iter().map(|r| r.term).collect();
        assert_eq!(
            terms,
            [c.term, b.term, a.term],
            "[{}] newest first",
            self.name
        );
        assert_eq!(
            (h[2].start_reason, h[2].end_reason),
            (StartReason::First, Some(EndReason::Expired)),
            "[{}] {:?}",
            self.name,
            h[2]
        );
        assert_eq!(
            h[2].end_at_us,
            Some(a.expires_at_us),
            "[{}] an expired term ends at its expiry",
            self.name
        );
        assert_eq!(
            (h[1].start_reason, h[1].end_reason),
            (StartReason::Expiry, Some(EndReason::Released)),
            "[{}] {:?}",
            self.name,
            h[1]
        );
        assert_eq!(
            (h[0].start_reason, h[0].end_at_us),
            (StartReason::Release, None),
            "[{}] {:?}",
            self.name,
            h[0]
        );
        assert_eq!(h[0].holder, "c#1");
        assert_eq!(
            s.history(&key, 1).await.expect("history").len(),
            1,
            "[{}] limit",
            self.name
        );
    }
}
