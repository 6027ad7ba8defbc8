//! Conformance checks. Push and observers: wake-ups on release, and observers
//! that see every change without writing.

use std::time::{Duration, Instant};

use super::{alone, claim, elector, must_acquire, shared, tenure, Conformance};
use crate::store::DynStore;
use crate::State;

impl Conformance {
    /// Stores with push wake followers on a release: with a 10 s poll period, a
    /// follower still takes over within half a second.
    pub async fn push_wakes_followers_on_release(&self) {
        let _turn = alone().await;
        let probe = self.store().await;
        if !probe.capabilities().push {
            return;
        }
        let key = self.key("push");
        let build = |store: DynStore, id: &str| {
            elector(
                store,
                &key,
                id,
                Duration::from_secs(30),
                Duration::from_secs(10),
            )
        };
        let a = build(self.store().await, "a");
        tokio::time::timeout(Duration::from_secs(5), a.acquired())
            .await
            .expect("a leads")
            .expect("alive");
        let b = build(self.store().await, "b");
        let mut rx = b.leadership();
        tokio::time::timeout(
            Duration::from_secs(5),
            rx.wait_for(|s| matches!(s, State::Following { .. })),
        )
        .await
        .expect("b follows")
        .expect("alive");
        // Let b settle into its long sleep (where a subscription holds a
        // connection, after ranking itself the designated successor and
        // subscribing: a member read, and a read once it listens).
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Timed from the release's return (shutdown also closes the term
        // and leaves, several writes on a busy disk); well within the 10 s
        // poll and the 30 s lease, so only a push can wake b in time.
        a.shutdown().await.expect("shutdown");
        let released = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), b.acquired())
            .await
            .unwrap_or_else(|_| {
                panic!("[{}] push did not wake the follower (10 s poll)", self.name)
            })
            .expect("alive");
        assert!(released.elapsed() < Duration::from_secs(2));
        b.shutdown().await.expect("shutdown");
    }

    /// An observer reports "no leader" for an election that does not exist,
    /// then each leader and the release, without writing.
    pub async fn observers_see_every_change_and_never_write(&self) {
        let _turn = shared().await;
        use crate::observe::{observe, Change, ObserveOptions, Selection};
        let s = self.store().await;
        let key = self.key("observed");
        let opts = ObserveOptions {
            poll_period: Duration::from_millis(10),
            ..ObserveOptions::default()
        };
        let mut o = observe(
            self.store().await,
            Selection::Elections(vec![key.clone()]),
            opts,
        );
        async fn next(o: &mut crate::observe::Observer) -> Change {
            tokio::time::timeout(Duration::from_secs(5), o.next())
                .await
                .expect("a change")
                .expect("alive")
        }
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 0
            },
            "[{}]",
            self.name
        );
        let rec = must_acquire(&s, &claim(&key, "a#1", Duration::from_secs(30))).await;
        assert_eq!(
            next(&mut o).await,
            Change::Leader {
                key: key.clone(),
                leader: "a#1".into(),
                term: rec.term,
                metadata: "meta of a#1".into()
            },
            "[{}]",
            self.name
        );
        assert!(s.release(&tenure(&rec)).await.expect("release"));
        assert_eq!(
            next(&mut o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: rec.term
            },
            "[{}]",
            self.name
        );
        let version = s.read(&key).await.expect("read").expect("row").version;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            s.read(&key).await.expect("read").expect("row").version,
            version,
            "[{}] observers never write",
            self.name
        );
    }
}
