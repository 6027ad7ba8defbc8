//! `GET /healthz`, `GET /readyz`, `GET /metrics`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::elections::bounded;
use super::error::ApiError;
use super::State;

/// `GET /healthz`, with client-go's leader-election health semantics: a
/// follower (or a process without an elector) is healthy; a leader is
/// unhealthy once its last renewal is so old that less than a third of the
/// TTL is left before its local deadline, i.e. it missed two renewals
/// (renewals go every TTL/3). It turns unhealthy before the deadline, so a
/// probe can restart a leader that is stuck while it still holds the lease.
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

/// `GET /metrics`: the render hook's text.
pub(crate) async fn metrics(state: State) -> Result<Response, ApiError> {
    match &state.api.metrics {
        Some(render) => Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            render(),
        )
            .into_response()),
        None => Err(ApiError::not_found(
            "no metrics configured (library: Api::metrics with a recorder's render function)",
        )),
    }
}
