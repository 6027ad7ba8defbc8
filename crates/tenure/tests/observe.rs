//! The observer as an application meets it, on SQLite (a file any test can
//! make): it reports this process's own leadership promptly, and a release
//! followed by a takeover as two changes, with "no leader" in between.

use std::time::{Duration, Instant};

use tenure::observe::{observe, Change, ObserveOptions, Selection};
use tenure::store::{ElectionKey, StoreOptions};
use tenure::Elector;

async fn next(o: &mut tenure::Observer) -> Change {
    tokio::time::timeout(Duration::from_secs(5), o.next())
        .await
        .expect("a change within 5 s")
        .expect("observer alive")
}

/// Observers that poll so seldom that what they report within a second
/// was pushed.
fn pushed_only() -> ObserveOptions {
    let mut options = ObserveOptions::default();
    options.poll_period = Duration::from_secs(5);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_reports_own_leadership_promptly_and_no_leader_between_terms() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("o.db").display());
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let key = ElectionKey::new("default", "observed");
    let mut changes = observe(
        store.clone(),
        Selection::Elections(vec![key.clone()]),
        pushed_only(),
    );
    // And one in "another process": a store of its own on the same file.
    let mut remote = observe(
        tenure::store::connect(&url, &StoreOptions::default())
            .await
            .unwrap(),
        Selection::Elections(vec![key.clone()]),
        pushed_only(),
    );
    for o in [&mut changes, &mut remote] {
        assert_eq!(
            next(o).await,
            Change::NoLeader {
                key: key.clone(),
                last_term: 0
            }
        );
    }
    // This process leads, through the store the observer reads.
    let a = Elector::builder(store.clone())
        .election("observed")
        .identity("a")
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let la = a.acquired().await.unwrap();
    let led = Instant::now();
    for (who, o) in [("this process", &mut changes), ("another", &mut remote)] {
        let change = next(o).await;
        let late = led.elapsed();
        assert!(
            matches!(&change, Change::Leader { leader, term, .. } if leader == a.holder_id() && *term == la.term()),
            "{change:?}"
        );
        println!("{who}: own leadership reported {late:?} after acquired()");
        // Pushed, not polled: the observers poll every 5 s, and the file
        // watch looks every 10 ms (the bound leaves room for a busy machine).
        assert!(
            late < Duration::from_secs(1),
            "{who}: reported {late:?} late"
        );
    }
    // Another "process" follows; a hands over on shutdown.
    let b = Elector::builder(
        tenure::store::connect(&url, &StoreOptions::default())
            .await
            .unwrap(),
    )
    .election("observed")
    .identity("b")
    .ttl(Duration::from_secs(10))
    .build()
    .unwrap();
    let mut bs = b.leadership();
    tokio::time::timeout(
        Duration::from_secs(5),
        bs.wait_for(|s| matches!(s, tenure::State::Following { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    a.shutdown().await.unwrap();
    let lb = tokio::time::timeout(Duration::from_secs(5), b.acquired())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::NoLeader {
            key: key.clone(),
            last_term: la.term()
        },
        "the release is reported before the takeover"
    );
    let change = next(&mut changes).await;
    assert!(
        matches!(&change, Change::Leader { leader, term, .. } if leader == b.holder_id() && *term == lb.term()),
        "{change:?}"
    );
    drop(remote);
    b.shutdown().await.unwrap();
}
