//! Conformance checks. Members: registration, heartbeats, successor order,
//! lapse and reaping.

use std::time::{Duration, Instant};

use super::{alone, Conformance};

impl Conformance {
    /// Members register with a heartbeat, list best successor first, lapse and are reaped.
    pub async fn members_register_heartbeat_and_are_reaped(&self) {
        let _turn = alone().await;
        let s = self.store().await;
        let t = self.timing().await;
        let key = self.key("members");
        let member = |holder: &str, priority| crate::store::Member {
            key: key.clone(),
            holder: holder.into(),
            metadata: format!("addr of {holder}"),
            priority,
        };
        s.heartbeat(&member("old#1", 0), t.ms(300))
            .await
            .expect("join");
        tokio::time::sleep(Duration::from_millis(5)).await;
        s.heartbeat(&member("young#1", 0), Duration::from_secs(30))
            .await
            .expect("join");
        s.heartbeat(&member("vip#1", 5), Duration::from_secs(30))
            .await
            .expect("join");
        let m = s.members(&key).await.expect("members");
        let order: Vec<&str> = m.iter().map(|m| m.holder.as_str()).collect();
        assert_eq!(
            order,
            ["vip#1", "old#1", "young#1"],
            "[{}] priority, then seniority",
            self.name
        );
        assert!(m.iter().all(|m| m.live));
        assert_eq!(m[0].identity, "vip");
        assert_eq!(m[0].metadata, "addr of vip#1");
        // A heartbeat keeps the join time.
        let joined = m[1].joined_at_us;
        s.heartbeat(&member("old#1", 0), t.ms(300))
            .await
            .expect("beat");
        let m = s.members(&key).await.expect("members");
        let old = m.iter().find(|m| m.holder == "old#1").expect("old");
        assert_eq!(
            old.joined_at_us, joined,
            "[{}] heartbeats keep seniority",
            self.name
        );
        // old lapses after 300 ms and is reaped.
        let start = Instant::now();
        loop {
            let m = s.members(&key).await.expect("members");
            if !m.iter().find(|m| m.holder == "old#1").expect("old").live {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5) * t.k,
                "[{}] member did not lapse",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            s.reap(&key).await.expect("reap"),
            1,
            "[{}] one lapsed member reaped",
            self.name
        );
        assert!(s.leave(&key, "young#1").await.expect("leave"));
        let m = s.members(&key).await.expect("members");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].holder, "vip#1");
    }
}
