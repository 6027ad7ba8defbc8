//! Conformance checks. Run records: written once by compare-and-set, listed
//! newest first, per election with exact names, checked input, forgotten
//! after their keep. Every store must offer them.

use std::time::{Duration, Instant};

use super::{shared, Conformance};
use crate::store::{DynStore, ElectionKey, RunRecords, MAX_RUN_KEEP, MAX_RUN_VALUE_BYTES};

const HOUR: Duration = Duration::from_secs(3600);

/// The store's run records; a store without them fails the check.
fn runs<'a>(suite: &Conformance, store: &'a DynStore) -> &'a dyn RunRecords {
    match store.run_records() {
        Some(r) => r,
        None => panic!("[{}] the store offers no run records", suite.name),
    }
}

impl Conformance {
    /// A first write (expected version 0) succeeds once; later writes succeed
    /// only on the current version; of 8 connections writing at once on the
    /// same version, exactly one succeeds.
    pub async fn run_records_are_written_once_by_compare_and_set(&self) {
        let _turn = shared().await;
        let name = &self.name;
        let s = self.store().await;
        let r = runs(self, &s);
        let key = self.key("runs-cas");
        assert_eq!(r.get(&key, "daily").await.expect("get"), None, "[{name}]");
        let first = r
            .put(&key, "daily", "first", 0, HOUR)
            .await
            .expect("put")
            .unwrap_or_else(|| panic!("[{name}] the first write of a new record succeeds"));
        assert_eq!(
            (
                &first.key,
                first.name.as_str(),
                first.value.as_str(),
                first.version
            ),
            (&key, "daily", "first", 1),
            "[{name}] the record as written"
        );
        assert!(
            first.updated_at_us > 1_600_000_000_000_000,
            "[{name}] written at a time since the epoch: {first:?}"
        );
        assert_eq!(
            r.put(&key, "daily", "again", 0, HOUR).await.expect("put"),
            None,
            "[{name}] a second first write loses"
        );
        assert_eq!(
            r.get(&key, "daily").await.expect("get").as_ref(),
            Some(&first),
            "[{name}] get reads the record as the write returned it"
        );
        let second = r
            .put(&key, "daily", "second", 1, HOUR)
            .await
            .expect("put")
            .unwrap_or_else(|| panic!("[{name}] a write on the current version succeeds"));
        assert_eq!(
            (second.value.as_str(), second.version),
            ("second", 2),
            "[{name}]"
        );
        assert!(
            second.updated_at_us >= first.updated_at_us,
            "[{name}] {second:?} after {first:?}"
        );
        for stale in [0, 1, 3, u64::MAX] {
            assert_eq!(
                r.put(&key, "daily", "stale", stale, HOUR)
                    .await
                    .expect("put"),
                None,
                "[{name}] a write expecting version {stale} of a version-2 record loses"
            );
        }
        assert_eq!(
            r.get(&key, "daily").await.expect("get"),
            Some(second),
            "[{name}] losing writes change nothing"
        );
        assert_eq!(
            r.put(&key, "never-written", "x", 1, HOUR)
                .await
                .expect("put"),
            None,
            "[{name}] a record that does not exist has no version 1"
        );
        assert_eq!(r.get(&key, "never-written").await.expect("get"), None);

        let mut stores = Vec::new();
        for _ in 0..8 {
            stores.push(self.store().await);
        }
        for expected in [0, 1] {
            let mut tasks = Vec::new();
            for (i, store) in stores.iter().enumerate() {
                let (store, key, suite) = (store.clone(), key.clone(), self.clone());
                tasks.push(tokio::spawn(async move {
                    runs(&suite, &store)
                        .put(&key, "race", &format!("task {i}"), expected, HOUR)
                        .await
                }));
            }
            let mut winners = Vec::new();
            for t in tasks {
                match t.await.expect("task") {
                    Ok(Some(rec)) => winners.push(rec),
                    Ok(None) => {}
                    Err(e) => panic!("[{name}] a concurrent write failed: {e}"),
                }
            }
            assert_eq!(
                winners.len(),
                1,
                "[{name}] exactly one of 8 writes on version {expected} succeeds: {winners:?}"
            );
            assert_eq!(winners[0].version, expected + 1, "[{name}]");
            assert_eq!(
                r.get(&key, "race").await.expect("get").as_ref(),
                Some(&winners[0]),
                "[{name}] the record is the winner's"
            );
        }
    }

    /// `list` returns an election's records most recently written first, at
    /// most `limit`, each as `get` reads it.
    pub async fn run_records_are_listed_newest_first(&self) {
        let _turn = shared().await;
        let name = &self.name;
        let s = self.store().await;
        let r = runs(self, &s);
        let key = self.key("runs-list");
        assert!(r.list(&key, 10).await.expect("list").is_empty(), "[{name}]");
        for n in ["a", "b", "c"] {
            assert!(r.put(&key, n, n, 0, HOUR).await.expect("put").is_some());
            // Stores that keep milliseconds (SQLite, ZooKeeper's mtime) must
            // see the writes at different times to order them.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let names = |list: &[crate::store::RunRecord]| {
            list.iter().map(|r| r.name.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            names(&r.list(&key, 10).await.expect("list")),
            ["c", "b", "a"],
            "[{name}] newest first"
        );
        assert!(r
            .put(&key, "a", "a2", 1, HOUR)
            .await
            .expect("put")
            .is_some());
        let listed = r.list(&key, 10).await.expect("list");
        assert_eq!(
            names(&listed),
            ["a", "c", "b"],
            "[{name}] a rewrite makes a record the newest"
        );
        for rec in &listed {
            assert_eq!(
                r.get(&key, &rec.name).await.expect("get").as_ref(),
                Some(rec),
                "[{name}] list and get agree"
            );
        }
        assert_eq!(
            names(&r.list(&key, 2).await.expect("list")),
            ["a", "c"],
            "[{name}] limit"
        );
        assert!(r.list(&key, 0).await.expect("list").is_empty(), "[{name}]");
    }

    /// The same name in two elections names two records, and names compare
    /// byte for byte, whatever characters they hold.
    pub async fn run_records_are_per_election_and_names_are_exact(&self) {
        let _turn = shared().await;
        let name = &self.name;
        let s = self.store().await;
        let r = runs(self, &s);
        let a = self.key("cron");
        // Another election whose name continues `a`'s: `a`'s record
        // "x:nightly" and this one's "nightly" must not meet in any key.
        let b = ElectionKey::new(a.namespace.clone(), "cron:x");
        let c = ElectionKey::new(format!("{}-other", a.namespace), "cron");
        for k in [&a, &b, &c] {
            let rec = r.put(k, "nightly", &format!("of {k}"), 0, HOUR).await;
            assert_eq!(
                rec.expect("put").map(|r| r.version),
                Some(1),
                "[{name}] {k}'s record is its own"
            );
        }
        assert!(r
            .put(&a, "nightly", "of a, again", 1, HOUR)
            .await
            .expect("put")
            .is_some());
        assert_eq!(
            r.put(&a, "x:nightly", "x", 0, HOUR)
                .await
                .expect("put")
                .map(|r| r.version),
            Some(1),
            "[{name}] \"x:nightly\" of cron is not \"nightly\" of cron:x"
        );
        for (k, value, version) in [(&b, format!("of {b}"), 1), (&c, format!("of {c}"), 1)] {
            let got = r.get(k, "nightly").await.expect("get");
            assert_eq!(
                got.map(|r| (r.value, r.version)),
                Some((value, version)),
                "[{name}] a write to {a} leaves {k} alone"
            );
            assert_eq!(r.list(k, 10).await.expect("list").len(), 1, "[{name}] {k}");
        }
        let long = "n".repeat(255);
        let exact = [
            "Job",
            "job",
            "job ",
            "a/b:c%d",
            "..",
            "日本語",
            long.as_str(),
        ];
        for n in exact {
            assert!(
                r.put(&a, n, n, 0, HOUR).await.expect("put").is_some(),
                "[{name}] {n:?} is a record of its own"
            );
        }
        let listed = r.list(&a, 100).await.expect("list");
        assert_eq!(listed.len(), exact.len() + 2, "[{name}] {listed:?}");
        for n in exact {
            let got = r.get(&a, n).await.expect("get");
            assert_eq!(
                got.map(|r| (r.name, r.value)),
                Some((n.to_string(), n.to_string())),
                "[{name}] {n:?} round-trips"
            );
        }
    }

    /// Names, values and keeps are checked before anything is sent; a value
    /// of the largest size round-trips exactly.
    pub async fn run_records_refuse_bad_input(&self) {
        let _turn = shared().await;
        let name = &self.name;
        let s = self.store().await;
        let r = runs(self, &s);
        let key = self.key("runs-input");
        let too_long = "v".repeat(MAX_RUN_VALUE_BYTES + 1);
        let long_name = "n".repeat(256);
        let refused = [
            ("a\u{7}b", "v", HOUR),
            ("a\nb", "v", HOUR),
            ("", "v", HOUR),
            (long_name.as_str(), "v", HOUR),
            ("x", too_long.as_str(), HOUR),
            ("x", "nul \0 inside", HOUR),
            ("x", "v", Duration::ZERO),
            ("x", "v", MAX_RUN_KEEP + Duration::from_secs(1)),
        ];
        for (n, v, keep) in refused {
            match r.put(&key, n, v, 0, keep).await {
                Err(e) if e.is_usage() => {}
                other => panic!(
                    "[{name}] put({n:?}, {} bytes, {keep:?}) must be refused as bad input: {other:?}",
                    v.len()
                ),
            }
        }
        match r.get(&key, "a\u{1b}[31m").await {
            Err(e) if e.is_usage() => {}
            other => panic!("[{name}] a name with a control character: {other:?}"),
        }
        let bad_key = ElectionKey::new(key.namespace.clone(), "a\tb");
        assert!(
            r.list(&bad_key, 10).await.is_err_and(|e| e.is_usage()),
            "[{name}] an election name with a control character"
        );
        assert!(
            r.list(&key, 10).await.expect("list").is_empty(),
            "[{name}] refused writes write nothing"
        );
        // 4096 bytes of JSON-ish text with multi-byte characters, quotes,
        // backslashes and newlines.
        let mut value = String::from("{\"log\": \"é\\n\"}\n\t'; DROP TABLE x; --");
        while value.len() + "日".len() <= MAX_RUN_VALUE_BYTES {
            value.push('日');
        }
        while value.len() < MAX_RUN_VALUE_BYTES {
            value.push('x');
        }
        let written = r.put(&key, "big", &value, 0, HOUR).await.expect("put");
        assert_eq!(written.map(|w| w.value == value), Some(true), "[{name}]");
        let read = r.get(&key, "big").await.expect("get").map(|r| r.value);
        assert!(
            read.as_deref() == Some(value.as_str()),
            "[{name}] a {MAX_RUN_VALUE_BYTES}-byte value round-trips"
        );
    }

    /// A record is kept at least `keep` after its write, then forgotten: it
    /// reads as absent, its old version no longer matches, and a first write
    /// starts it again at version 1. Other records are not disturbed.
    pub async fn run_records_are_forgotten_after_keep(&self) {
        let _turn = shared().await;
        let name = &self.name;
        let s = self.store().await;
        let r = runs(self, &s);
        let t = self.timing().await;
        let key = self.key("runs-keep");
        let keep = t.ttl(Duration::from_secs(1));
        assert!(r
            .put(&key, "kept", "long", 0, HOUR)
            .await
            .expect("put")
            .is_some());
        let started = Instant::now();
        let first = r.put(&key, "brief", "v1", 0, keep).await.expect("put");
        assert_eq!(first.map(|r| r.version), Some(1), "[{name}]");
        // Expiry is the store's business (etcd checks its leases about twice
        // a second, with a minimum TTL of its own): poll generously.
        // Timed when the read that finds it gone returns: the server judged
        // the expiry at some moment before that, and a read held up on its
        // way (a busy connection, a loaded machine) must not make the record
        // look forgotten early.
        let forgotten_after = loop {
            let read = r.get(&key, "brief").await.expect("get");
            let elapsed = started.elapsed();
            match read {
                None => break elapsed,
                Some(_) => {
                    assert!(
                        elapsed < keep + Duration::from_secs(15),
                        "[{name}] a record kept {keep:?} still reads after {elapsed:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        // Store clocks count milliseconds at least: allow for rounding.
        assert!(
            forgotten_after + Duration::from_millis(20) >= keep,
            "[{name}] a record kept {keep:?} was forgotten after {forgotten_after:?}"
        );
        let listed: Vec<String> = r
            .list(&key, 10)
            .await
            .expect("list")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(
            listed,
            ["kept"],
            "[{name}] a forgotten record is not listed"
        );
        assert_eq!(
            r.put(&key, "brief", "stale", 1, HOUR).await.expect("put"),
            None,
            "[{name}] a forgotten record's version no longer matches"
        );
        let again = r
            .put(&key, "brief", "v1 again", 0, HOUR)
            .await
            .expect("put");
        assert_eq!(
            again.map(|r| (r.value, r.version)),
            Some(("v1 again".to_string(), 1)),
            "[{name}] a forgotten record starts again at version 1"
        );
        assert_eq!(
            r.get(&key, "kept").await.expect("get").map(|r| r.value),
            Some("long".to_string()),
            "[{name}] forgetting one record leaves the others"
        );
    }
}
