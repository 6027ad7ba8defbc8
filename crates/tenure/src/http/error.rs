//! Errors as JSON: `{"error": "..."}` with the status that says whose fault it is.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Why an answer is stale or not ready, as HTTP clients see it: the
/// store's own error may name its host, port or user, so it goes to the
/// log and clients get this.
pub(crate) const UNREACHABLE: &str = "store unreachable";

/// An error answer of the HTTP API.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> Self {
        // The store's own errors may name its host, port or user: those go
        // to the log, clients get a generic reason. Usage errors and "no
        // leader" speak of the request only.
        match &e {
            crate::Error::NoLeader { .. } => Self::new(StatusCode::CONFLICT, e.to_string()),
            e if e.is_usage() => Self::bad_request(e.to_string()),
            e if e.is_retryable() => {
                tracing::warn!("HTTP: the store cannot be reached: {e}");
                Self::unavailable(UNREACHABLE)
            }
            e => {
                tracing::error!("HTTP: store error: {e}");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "store error (the server's log has the details)",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}
