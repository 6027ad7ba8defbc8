//! The examples in `examples/`, run as they are (their `run`/`start`
//! functions, the same code `main` calls) against SQLite, and the fenced
//! worker against PostgreSQL where it runs (required in CI).

use std::time::Duration;

use tenure::store::sql::{sqlx, SqlStore};
use tenure::store::{ElectionKey, EndReason, LeaseStoreExt, StoreOptions};

#[allow(dead_code)]
#[path = "../examples/fenced_worker.rs"]
mod fenced_worker;

#[allow(dead_code)]
#[path = "../examples/observer.rs"]
mod observer;

#[allow(dead_code)]
#[path = "../examples/background_service.rs"]
mod background_service;

fn unique(name: &str) -> String {
    format!(
        "{name}-{:x}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

/// Two fenced workers on one database: the first writes, stops (Ctrl-C in
/// real life), the second takes over and writes; every row landed under the
/// term of the worker that wrote it, and both terms ended "released".
async fn two_workers_hand_over(url: &str) {
    let election = unique("worker");
    let (stop_a, stop_a_rx) = tokio::sync::oneshot::channel::<()>();
    let (stop_b, stop_b_rx) = tokio::sync::oneshot::channel::<()>();
    let a = tokio::spawn({
        let (url, election) = (url.to_string(), election.clone());
        async move { fenced_worker::run(&url, &election, stop_a_rx).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b = tokio::spawn({
        let (url, election) = (url.to_string(), election.clone());
        async move { fenced_worker::run(&url, &election, stop_b_rx).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop_a.send(()).unwrap();
    let wrote_a = a.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop_b.send(()).unwrap();
    let wrote_b = b.await.unwrap().unwrap();
    assert!(
        wrote_a > 0 && wrote_b > 0,
        "[{url}] a wrote {wrote_a}, b wrote {wrote_b}"
    );

    let store = tenure::store::connect(url, &StoreOptions::default())
        .await
        .unwrap();
    let history = store
        .history(&ElectionKey::new("default", &election), 10)
        .await
        .unwrap();
    assert_eq!(history.len(), 2, "[{url}] {history:?}");
    assert!(
        history
            .iter()
            .all(|h| h.end_reason == Some(EndReason::Released)),
        "[{url}] both terms released at shutdown: {history:?}"
    );
    let sql = store.downcast_ref::<SqlStore>().unwrap();
    let terms: Vec<i64> = history.iter().map(|h| h.term as i64).collect();
    let mut rows = 0;
    for term in &terms {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM worker_ledger WHERE election = '{election}' AND term = {term}"
        ))
        .fetch_one(sql.pool())
        .await
        .unwrap();
        rows += n as u64;
    }
    // Stopping a worker drops its work future, possibly after a write's
    // commit reached the database but before the worker counted it: each
    // worker may have landed one row more than it reports, never fewer.
    let reported = wrote_a + wrote_b;
    assert!(
        (reported..=reported + 2).contains(&rows),
        "[{url}] {rows} rows landed for {reported} reported writes"
    );
    let twice: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM (SELECT term, n FROM worker_ledger WHERE election = '{election}' \
         GROUP BY term, n HAVING COUNT(*) > 1) AS d"
    ))
    .fetch_one(sql.pool())
    .await
    .unwrap();
    assert_eq!(twice, 0, "[{url}] a write landed twice");
    sqlx::query(&format!(
        "DELETE FROM worker_ledger WHERE election = '{election}'"
    ))
    .execute(sql.pool())
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_worker_hands_over_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    two_workers_hand_over(&format!("sqlite://{}", dir.path().join("w.db").display())).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_worker_hands_over_on_postgres() {
    let url = tenure_testsupport::servers::postgres_url();
    if tenure_testsupport::servers::connect_or_skip(&url, &StoreOptions::default())
        .await
        .is_some()
    {
        two_workers_hand_over(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_reports_a_leader() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("o.db").display());
    let store = tenure::store::connect(&url, &StoreOptions::default())
        .await
        .unwrap();
    let elector = tenure::Elector::builder(store)
        .election("watched")
        .build()
        .unwrap();
    let holder = elector.holder_id().to_string();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let watching = tokio::spawn(async move {
        observer::run(&url, stop_rx, |c| {
            let _ = seen_tx.send(c.clone());
        })
        .await
    });
    let reported = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(change) = seen_rx.recv().await {
            if matches!(&change, tenure::Change::Leader { leader, .. } if *leader == holder) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(reported, Ok(true), "the observer reports the leader");
    stop.send(()).unwrap();
    watching.await.unwrap().unwrap();
    elector.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_service_leads_and_stops_with_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("s.db").display());
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (app, background) = background_service::start(&url, stop_rx).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !app.status().starts_with("leader") {
        assert!(tokio::time::Instant::now() < deadline, "{}", app.status());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.send(()).unwrap();
    background.await.unwrap().unwrap();
    assert_eq!(app.status(), "no leader");
}
