//! The metrics an elector records through the `metrics` facade, seen by a
//! recorder the application installs (here a small one of the test's own):
//! a leader's gauges while it leads and after it steps down, and
//! `tenure_members` as of a `GET /metrics` of the HTTP API.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tenure::store::LeaseStoreExt;
use tenure_testsupport::http::get;
use tenure_testsupport::metrics::{TestRecorder, Values};

/// The process's recorder, installed once (the facade takes one per process).
fn values() -> Values {
    static VALUES: OnceLock<Values> = OnceLock::new();
    VALUES
        .get_or_init(|| TestRecorder::new().install_global())
        .clone()
}

fn value(series: &str) -> Option<f64> {
    values()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(series)
        .copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leading_elector_records_its_gauges() {
    values();
    let store = tenure::store::connect("memory://", &Default::default())
        .await
        .expect("store");
    let elector = tenure::Elector::builder(store)
        .election("metered")
        .identity("m-1")
        .build()
        .expect("elector");
    let term = elector.acquired().await.expect("leads").term();
    let labels = "{namespace=\"default\",election=\"metered\"}";
    assert_eq!(
        value("leader_election_master_status{name=\"metered\"}"),
        Some(1.0)
    );
    assert_eq!(value(&format!("tenure_is_leader{labels}")), Some(1.0));
    assert_eq!(value(&format!("tenure_term{labels}")), Some(term as f64));
    assert!(
        value(&format!("tenure_leader_changes_total{labels}")).is_some_and(|n| n >= 1.0),
        "{:?}",
        values()
    );
    let left = value(&format!("tenure_lease_remaining_seconds{labels}"));
    assert!(
        left.is_some_and(|s| s > 0.0 && s <= elector.ttl().as_secs_f64()),
        "{left:?}"
    );
    // Stepping down sets both leadership gauges back to 0.
    elector.shutdown().await.expect("shutdown");
    assert_eq!(
        value("leader_election_master_status{name=\"metered\"}"),
        Some(0.0)
    );
    assert_eq!(value(&format!("tenure_is_leader{labels}")), Some(0.0));
}

/// Three candidates: `GET /metrics` reads the member list first, so
/// `tenure_members` is 3 at the scrape, whatever the electors read last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_route_records_the_live_members() {
    values();
    let store = tenure::store::connect("memory://", &Default::default())
        .await
        .expect("store");
    let mut electors = Vec::new();
    for id in ["c-1", "c-2", "c-3"] {
        electors.push(
            tenure::Elector::builder(store.clone())
                .election("crowd")
                .identity(id)
                .build()
                .expect("elector"),
        );
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let live = store
            .members(&tenure::store::ElectionKey::new("default", "crowd"))
            .await
            .expect("members")
            .iter()
            .filter(|m| m.live)
            .count();
        if live == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{live} live members"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let series = "tenure_members{namespace=\"default\",election=\"crowd\"}";
    // Rendered by the application's recorder; here the test's own map.
    let render = Arc::new(|| format!("{:?}\n", values()));
    let app = tenure::http::Api::new(store).metrics(render).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(value(series), Some(3.0), "{body}");
    // One leaves: the next scrape says 2.
    let gone = electors.pop().expect("three");
    gone.shutdown().await.expect("shutdown");
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(value(series), Some(2.0), "{body}");
    server.abort();
    for e in electors {
        e.shutdown().await.expect("shutdown");
    }
}

/// `tenure_push_up{channel}` follows the store's push channel: 1 once a
/// subscription opens it, 0 when it cannot open (a private Redis whose
/// `nosub` user may not SUBSCRIBE).
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_channel_state_is_a_gauge() {
    use tenure_testsupport::servers::{Kind, Server, ServerOptions};
    values();
    let options = ServerOptions::default().with_redis_user_without_subscribe();
    let Some(server) = Server::start_or_skip(
        Kind::Redis,
        options,
        tenure_testsupport::servers::required(),
    ) else {
        return;
    };
    let series = "tenure_push_up{channel=\"Redis pub/sub\"}";
    for (url, want) in [
        (server.url(), 1.0),
        (
            server
                .url()
                .replacen("redis://", "redis://nosub:secret@", 1),
            0.0,
        ),
    ] {
        let store = tenure::store::connect(&url, &Default::default())
            .await
            .expect("store");
        let _changes = store.subscribe().expect("redis pushes");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while value(series) != Some(want) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{series} is {:?}, want {want}",
                value(series)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The library's observer records what it reads of each election it
/// watches, without campaigning: leader present, term, leader identity,
/// and the change when the leader goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_records_the_elections_it_watches() {
    use tenure::observe::{observe, Change, ObserveOptions, Selection};
    use tenure::store::{Acquire, Claim, ElectionKey, LeaseStore, Tenure};
    values();
    let store = tenure::store::connect("memory://", &Default::default())
        .await
        .expect("store");
    let key = ElectionKey::new("default", "watched");
    let claim = Claim {
        key: key.clone(),
        holder: "w-1#1".into(),
        metadata: String::new(),
        ttl: Duration::from_secs(30),
    };
    let Acquire::Acquired(rec) = store.try_acquire(&claim).await.expect("acquire") else {
        panic!("free");
    };
    let mut changes = observe(
        store.clone(),
        Selection::Elections(vec![key.clone()]),
        ObserveOptions::default(),
    );
    assert!(matches!(changes.next().await, Some(Change::Leader { .. })));
    let labels = "{namespace=\"default\",election=\"watched\"}";
    assert_eq!(
        value(&format!("tenure_election_leader_present{labels}")),
        Some(1.0)
    );
    assert_eq!(
        value(&format!("tenure_election_term{labels}")),
        Some(rec.term as f64)
    );
    let info =
        "tenure_election_leader_info{namespace=\"default\",election=\"watched\",leader=\"w-1\"}";
    assert_eq!(value(info), Some(1.0), "{:?}", values());
    let tenure = Tenure {
        key: key.clone(),
        holder: "w-1#1".into(),
        term: rec.term,
    };
    assert!(store.release(&tenure).await.expect("release"));
    assert!(matches!(
        changes.next().await,
        Some(Change::NoLeader { .. })
    ));
    assert_eq!(
        value(&format!("tenure_election_leader_present{labels}")),
        Some(0.0)
    );
    assert_eq!(value(info), Some(0.0));
    assert_eq!(
        value(&format!("tenure_election_leader_changes_total{labels}")),
        Some(1.0)
    );
}
