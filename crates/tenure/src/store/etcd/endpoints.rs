//! Endpoint health: which cluster members the client's balancer may use.

use std::time::Duration;

use etcd_client::Client;

/// Keeps the client's balancer away from members that refuse connections (a
/// killed member would otherwise fail about one call in N), and adds them
/// back when they return. Probes every 500 ms; never removes the last one.
/// `active` says which endpoints the client was built with.
pub(super) async fn endpoint_health(client: Client, endpoints: Vec<String>, active: Vec<bool>) {
    let mut active = active;
    loop {
        let alive = reachable(&endpoints).await;
        let none = !alive.iter().any(|a| *a);
        for (i, ep) in endpoints.iter().enumerate() {
            let want = alive[i] || none;
            if want && !active[i] {
                if client.add_endpoint(ep).await.is_ok() {
                    tracing::info!(endpoint = %ep, "etcd member reachable again");
                    active[i] = true;
                }
            } else if !want && active[i] && client.remove_endpoint(ep).await.is_ok() {
                tracing::warn!(endpoint = %ep, "etcd member refuses connections; not using it");
                active[i] = false;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Which endpoints accept a TCP connection within 300 ms.
pub(super) async fn reachable(endpoints: &[String]) -> Vec<bool> {
    let mut alive = Vec::with_capacity(endpoints.len());
    for ep in endpoints {
        let addr = super::url::address(ep);
        let ok = matches!(
            tokio::time::timeout(
                Duration::from_millis(300),
                tokio::net::TcpStream::connect(addr)
            )
            .await,
            Ok(Ok(_))
        );
        alive.push(ok);
    }
    alive
}
