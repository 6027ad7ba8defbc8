//! Conformance checks. Expiry and the store's clock: leases end by the store's
//! clock, with sub-second precision, and recorded times are the store's.

use std::time::{Duration, Instant};

use super::{
    alone, claim, must_acquire, must_not_acquire, shared, tenure, wait_expired, Conformance,
};

impl Conformance {
    /// Once a lease expires by the store's clock, its holder cannot renew it and
    /// the next acquisition gets a higher term; the old holder cannot release it.
    pub async fn renew_after_expiry_fails_and_next_term_is_higher(&self) {
        let _turn = shared().await;
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("expiry");
        let t = self.timing().await;
        let rec = must_acquire(&a, &claim(&key, "a#1", t.ms(200))).await;
        wait_expired(&b, &key, Duration::from_secs(5) * t.k).await;
        assert!(
            !a.renew(&tenure(&rec), Duration::from_secs(30))
                .await
                .expect("renew"),
            "[{}] renew after expiry must fail",
            self.name
        );
        let next = must_acquire(&b, &claim(&key, "b#1", Duration::from_secs(30))).await;
        assert!(
            next.term > rec.term,
            "[{}] next term {} must exceed {}",
            self.name,
            next.term,
            rec.term
        );
        assert!(
            !a.release(&tenure(&rec)).await.expect("release"),
            "[{}] stale release must fail",
            self.name
        );
        let now = a.read(&key).await.expect("read").expect("row");
        assert_eq!(now.holder.as_deref(), Some("b#1"));
        // The same holder coming back after a loss also gets a new term.
        assert!(b.release(&tenure(&next)).await.expect("release"));
        let again = must_acquire(&a, &claim(&key, "a#1", Duration::from_secs(30))).await;
        assert!(
            again.term > next.term,
            "[{}] re-acquisition must get a new term",
            self.name
        );
    }

    /// A 200 ms TTL is honoured with sub-second precision.
    pub async fn sub_second_ttl(&self) {
        let _turn = alone().await;
        let (a, b) = (self.store().await, self.store().await);
        let key = self.key("short-ttl");
        let t = self.timing().await;
        let ttl = t.ms(200);
        let start = Instant::now();
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        // The lower bound counts from before the acquisition was sent, the
        // upper from its return: a slow write (SQLite on a busy disk)
        // cannot make the lease look short or long.
        let acquired = Instant::now();
        assert!(
            rec.remaining <= ttl && rec.remaining > t.ms(100),
            "[{}] remaining {:?} of a fresh 200ms lease",
            self.name,
            rec.remaining
        );
        assert_eq!(rec.ttl, ttl);
        let held = must_not_acquire(&b, &claim(&key, "b#1", ttl))
            .await
            .expect("record");
        assert!(
            held.remaining <= ttl,
            "[{}] remaining {:?}",
            self.name,
            held.remaining
        );
        wait_expired(&b, &key, Duration::from_secs(5) * t.k).await;
        let (took, since_acquired) = (start.elapsed(), acquired.elapsed());
        assert!(
            took >= t.ms(150) && since_acquired < t.ms(900),
            "[{}] a 200ms lease expired {took:?} after the acquisition was sent, {since_acquired:?} after it returned",
            self.name
        );
        must_acquire(&b, &claim(&key, "b#1", ttl)).await;
    }

    /// Lease times are the store's: expiry = renewal + TTL exactly, and the
    /// renewal time agrees with the store's clock, whatever the client's clock says.
    pub async fn times_come_from_the_store_clock(&self) {
        let _turn = shared().await;
        let a = self.store().await;
        let key = self.key("clock");
        let ttl = Duration::from_secs(7);
        let rec = must_acquire(&a, &claim(&key, "a#1", ttl)).await;
        assert_eq!(
            rec.expires_at_us - rec.renewed_at_us,
            7_000_000,
            "[{}] expiry = renewal + ttl",
            self.name
        );
        assert_eq!(rec.acquired_at_us, rec.renewed_at_us);
        let read = a.read(&key).await.expect("read").expect("row");
        let store_now = read.expires_at_us - read.remaining.as_micros() as i64;
        assert!(
            (store_now - rec.renewed_at_us).abs() < 5_000_000,
            "[{}] renewal time {} is the store's clock ({store_now})",
            self.name,
            rec.renewed_at_us
        );
        assert!(a.renew(&tenure(&rec), ttl).await.expect("renew"));
        let renewed = a.read(&key).await.expect("read").expect("row");
        assert!(renewed.renewed_at_us >= rec.renewed_at_us);
        assert!(
            renewed.version > rec.version,
            "[{}] version bumps on renew",
            self.name
        );
    }
}
