//! The library's Router merged into an application's own axum server: the
//! application's routes and tenure's answer side by side.

use std::sync::Arc;

use tenure_testsupport::http::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn router_merges_into_an_application() {
    let store = tenure::store::connect("memory://", &Default::default())
        .await
        .expect("store");
    let elector = tenure::Elector::builder(store.clone())
        .election("scheduler")
        .identity("app-1")
        .build()
        .expect("elector");
    elector.acquired().await.expect("leads");
    let app = axum::Router::new()
        .route("/work", axum::routing::get(|| async { "app route" }))
        .merge(
            tenure::http::Api::new(store)
                .elector(elector.clone())
                .metrics(Arc::new(|| "my_metric 1\n".to_string()))
                .router(),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    assert_eq!(get(addr, "/work").await, (200, "app route".to_string()));
    assert_eq!(
        get(addr, "/").await,
        (200, r#"{"name":"app-1"}"#.to_string())
    );
    let (status, body) = get(addr, "/v1/elections/default/scheduler").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["term"], 1);
    assert_eq!(
        get(addr, "/metrics").await,
        (200, "my_metric 1\n".to_string())
    );
    assert_eq!(get(addr, "/healthz").await.0, 200);
    // Without a token, resign is refused and the elector still leads.
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /v1/elections/default/scheduler/resign HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        .await
        .expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.expect("read");
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(elector.is_leader());
    server.abort();
    elector.shutdown().await.expect("shutdown");
}
