//! `GET /healthz`, `GET /readyz`, `GET /metrics`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::elections::{bounded, read_all};
use super::error::ApiError;
use super::State;

/// `GET /healthz`: 503 only while this process's elector leads and less
/// than a third of its TTL is left before its local deadline
/// (`t0 + ttl·(1 − drift) − margin`, `t0` taken before its last successful
/// renewal), i.e. after about two thirds of a TTL without a renewal (two
/// missed renewals at the default period of TTL/3); otherwise 200. A
/// follower, or a process without an elector, is always healthy.
///
/// This is deliberately not client-go's rule. client-go's `HealthzAdaptor`
/// fails once the leader has not renewed for longer than the lease duration
/// plus a tolerance; a tenure leader steps down at its local deadline,
/// which comes before its lease can expire, so by then it is a (healthy)
/// follower and that rule could never fire. This one turns unhealthy before
/// the deadline, while the stuck leader still holds the lease, so a probe
/// can restart it.
pub(crate) async fn healthz(state: State) -> Response {
    if let Some(elector) = &state.api.elector {
        if let Some(leadership) = elector.current() {
            let left = leadership.remaining();
            let ttl = elector.ttl();
            if left < ttl / 3 {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(serde_json::json!({
                        "healthy": false,
                        "reason": format!(
                            "leading {} (term {}) without a renewal: {} ms left of a {} ms TTL",
                            elector.election(),
                            leadership.term(),
                            left.as_millis(),
                            ttl.as_millis()
                        ),
                    })),
                )
                    .into_response();
            }
        }
    }
    Json(serde_json::json!({ "healthy": true })).into_response()
}

/// `GET /readyz`: one bounded read of the store.
pub(crate) async fn readyz(state: State) -> Response {
    let store = state.api.store.clone();
    match bounded(&state, async move { store.list(None).await }).await {
        Ok(_) => Json(serde_json::json!({ "ready": true })).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "ready": false, "reason": reason })),
        )
            .into_response(),
    }
}

/// `GET /metrics`: the render hook's text, after one bounded read of every
/// election's member list, so `tenure_members` is as of this scrape (a
/// steady elector reads no member list). If the store cannot be read, the
/// values of the last read are rendered; `/readyz` says why.
pub(crate) async fn metrics(state: State) -> Result<Response, ApiError> {
    let Some(render) = &state.api.metrics else {
        return Err(ApiError::not_found(
            "no metrics configured (library: Api::metrics with a recorder's render function)",
        ));
    };
    // Its errors and time-outs only leave the last values in place.
    let _ = bounded(&state, read_all(&state, 0)).await;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(),
    )
        .into_response())
}
