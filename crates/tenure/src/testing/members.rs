//! Conformance checks. Members: registration, heartbeats, successor order,
//! lapse and reaping.

use crate::store::LeaseStoreExt;
use std::time::{Duration, Instant};

use super::{alone, shared, Conformance};

impl Conformance {
    /// Waits until `holder`'s registration reads as lapsed (a few seconds,
    /// stretched for the store's timing).
    async fn wait_lapsed(
        &self,
        s: &crate::store::DynStore,
        key: &crate::store::ElectionKey,
        holder: &str,
        t: &super::Timing,
    ) {
        let start = Instant::now();
        loop {
            let m = s.members(key).await.expect("members");
            let found = m.iter().find(|m| m.holder == holder);
            if !found
                .unwrap_or_else(|| panic!("[{}] {holder} not listed", self.name))
                .live
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5) * t.k,
                "[{}] {holder} did not lapse",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Members register with a heartbeat, list best successor first, lapse and are reaped.
    pub async fn members_register_heartbeat_and_are_reaped(&self) {
        let _turn = alone().await;
        let s = self.store().await;
        if !self.offers(&s, super::parts::Part::Membership) {
            return;
        }
        let t = self.timing().await;
        let key = self.key("members");
        let member = |holder: &str, priority| crate::store::Member {
            key: key.clone(),
            holder: holder.into(),
            metadata: format!("addr of {holder}"),
            priority,
        };
        // Registered for long: it must still be live at the reads below
        // however slow the writes between are; the next heartbeat
        // shortens it to 300 ms.
        s.heartbeat(&member("old#1", 0), Duration::from_secs(30))
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
        self.wait_lapsed(&s, &key, "old#1", &t).await;
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

    /// Where the store says so ([`Capabilities::lease_vouches_for_holder`](crate::store::Capabilities::lease_vouches_for_holder)),
    /// the holder of the unexpired lease reads as a live member heard from
    /// at its last renewal though its own registration lapsed (a leader
    /// sends no heartbeats), in `members` and `list_members` alike; a lapsed
    /// member that does not hold the lease, or the holder once it released,
    /// reads as lapsed.
    pub async fn the_lease_vouches_for_its_holder(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        if !self.offers(&s, super::parts::Part::Membership) {
            return;
        }
        if !s.capabilities().lease_vouches_for_holder {
            return;
        }
        let t = self.timing().await;
        let key = self.key("vouch");
        let member = |holder: &str| crate::store::Member {
            key: key.clone(),
            holder: holder.into(),
            metadata: String::new(),
            priority: 0,
        };
        let short = t.ms(300);
        s.heartbeat(&member("h#1"), short).await.expect("join");
        s.heartbeat(&member("other#1"), short).await.expect("join");
        let won = s
            .try_acquire(&super::claim(&key, "h#1", Duration::from_secs(30)))
            .await
            .expect("acquire");
        let crate::store::Acquire::Acquired(rec) = won else {
            panic!("[{}] acquire: {won:?}", self.name)
        };
        // Both registrations lapse; the lease (30 s) does not.
        self.wait_lapsed(&s, &key, "other#1", &t).await;
        assert!(s
            .renew(&super::tenure(&rec), Duration::from_secs(30))
            .await
            .expect("renew"));
        let lease = s.read(&key).await.expect("read").expect("a lease");
        let listed = s.list_members(Some(&key.namespace)).await.expect("list");
        for (what, m) in [
            ("members", s.members(&key).await.expect("members")),
            ("list_members", listed),
        ] {
            let h = m.iter().find(|m| m.holder == "h#1").expect("the holder");
            assert!(
                h.live && h.is_fresh(lease.read_at_us, Duration::from_secs(1)),
                "[{}] {what}: the holder is live: {h:?}",
                self.name
            );
            assert_eq!(
                h.heartbeat_at_us, lease.renewed_at_us,
                "[{}] {what}: heard from at its renewal",
                self.name
            );
            assert!(
                h.expires_at_us >= lease.expires_at_us,
                "[{}] {what}: {h:?}",
                self.name
            );
            let o = m.iter().find(|m| m.holder == "other#1").expect("other");
            assert!(!o.live, "[{}] {what}: not the holder: {o:?}", self.name);
        }
        // A reap removes the lapsed registration of a member, not the
        // holder's: its lease vouches for it, and a leader does not
        // heartbeat (a reap by anyone, at any time, must not drop it).
        assert_eq!(s.reap(&key).await.expect("reap"), 1, "[{}] reap", self.name);
        let m = s.members(&key).await.expect("members");
        assert!(
            m.iter().any(|m| m.holder == "h#1" && m.live),
            "[{}] the reap kept the holder: {m:?}",
            self.name
        );
        assert!(
            m.iter().all(|m| m.holder != "other#1"),
            "[{}] the reap removed the lapsed member: {m:?}",
            self.name
        );
        assert!(s.release(&super::tenure(&lease)).await.expect("release"));
        let m = s.members(&key).await.expect("members");
        let h = m.iter().find(|m| m.holder == "h#1").expect("the holder");
        assert!(!h.live, "[{}] released: lapsed: {h:?}", self.name);
    }

    /// A heartbeat carried by a read registers (keeping the join time on
    /// later ones) and reads what `read` reads, before and after a term.
    pub async fn heartbeat_and_read_registers_and_reads(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        if !self.offers(&s, super::parts::Part::Membership) {
            return;
        }
        let key = self.key("hbread");
        let me = crate::store::Member {
            key: key.clone(),
            holder: "f#1".into(),
            metadata: "addr of f".into(),
            priority: 2,
        };
        let ttl = Duration::from_secs(30);
        let rec = s.heartbeat_and_read(&me, ttl).await.expect("first");
        assert_eq!(
            rec.map(|r| r.term).unwrap_or(0),
            0,
            "[{}] nothing held yet",
            self.name
        );
        let m = s.members(&key).await.expect("members");
        assert_eq!(m.len(), 1, "[{}] registered by the read", self.name);
        assert!(m[0].live);
        assert_eq!((m[0].priority, m[0].metadata.as_str()), (2, "addr of f"));
        let joined = m[0].joined_at_us;
        let won = s
            .try_acquire(&super::claim(&key, "l#1", ttl))
            .await
            .expect("acquire");
        assert!(matches!(won, crate::store::Acquire::Acquired(_)));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let both = s
            .heartbeat_and_read(&me, ttl)
            .await
            .expect("again")
            .expect("a lease");
        let read = s.read(&key).await.expect("read").expect("a lease");
        assert_eq!(
            (both.holder.as_deref(), both.term, both.acquired_at_us),
            (read.holder.as_deref(), read.term, read.acquired_at_us),
            "[{}] the same record as read()",
            self.name
        );
        let m = s.members(&key).await.expect("members");
        let f = m
            .iter()
            .find(|m| m.holder == "f#1")
            .expect("still a member");
        assert_eq!(f.joined_at_us, joined, "[{}] keeps seniority", self.name);
        assert!(
            f.heartbeat_at_us > joined,
            "[{}] heartbeat refreshed",
            self.name
        );
    }

    /// `list_members` lists what `members` reads, election by election and
    /// in the same order, for one namespace and for the whole store.
    pub async fn list_members_matches_members(&self) {
        let _turn = shared().await;
        let s = self.store().await;
        if !self.offers(&s, super::parts::Part::Membership) {
            return;
        }
        let a = self.key("listed-a");
        let b = crate::store::ElectionKey::new(a.namespace.clone(), "listed-b");
        let ttl = Duration::from_secs(30);
        for (key, holders) in [(&a, ["a1#1", "a2#1"]), (&b, ["b1#1", "b2#1"])] {
            for (i, holder) in holders.iter().enumerate() {
                let me = crate::store::Member {
                    key: key.clone(),
                    holder: (*holder).into(),
                    metadata: String::new(),
                    priority: i as u32,
                };
                s.heartbeat(&me, ttl).await.expect("join");
            }
            let won = s
                .try_acquire(&super::claim(key, holders[0], ttl))
                .await
                .expect("acquire");
            assert!(matches!(won, crate::store::Acquire::Acquired(_)));
        }
        for namespace in [Some(a.namespace.as_str()), None] {
            let mut listed =
                crate::store::members_by_election(s.list_members(namespace).await.expect("list"));
            for key in [&a, &b] {
                let read = s.members(key).await.expect("members");
                let holders = |m: &[crate::store::MemberRecord]| {
                    m.iter().map(|m| m.holder.clone()).collect::<Vec<_>>()
                };
                assert_eq!(
                    holders(&listed.remove(key).unwrap_or_default()),
                    holders(&read),
                    "[{}] list_members({namespace:?}) for {key}",
                    self.name
                );
            }
            if namespace.is_some() {
                assert!(
                    listed.is_empty(),
                    "[{}] only namespace {namespace:?}: {:?}",
                    self.name,
                    listed.keys().collect::<Vec<_>>()
                );
            }
        }
    }
}
