//! `POST .../resign`, `.../transfer` and `.../proclaim`: only with the
//! configured bearer token.

use std::time::Duration;

use axum::extract::Path;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;

use super::elections::key;
use super::error::ApiError;
use super::State;

/// Equal in time independent of where the bytes differ (the length may leak).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credentials of an `Authorization: Bearer <token>` value; the
/// scheme is case-insensitive (RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

fn authorize(state: &State, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.api.token else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "resign, transfer and proclaim are disabled: no token configured (--token-file)",
        ));
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    match given {
        Some(g) if same(g.trim().as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "wrong bearer token",
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token: send `Authorization: Bearer <token>`",
        )),
    }
}

/// The request's JSON body, or a 400 naming the `shape` expected.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("expected a JSON body {shape}: {e}")))
}

fn asked(r: &crate::store::LeaseRecord) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "asked": r.holder,
        "term": r.term,
    }))
}

/// `POST /v1/elections/{namespace}/{election}/resign`.
pub(crate) async fn resign(
    state: State,
    Path((namespace, election)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    authorize(&state, &headers)?;
    let key = key(&namespace, &election)?;
    let r = crate::handover::resign(&state.api.store, &key).await?;
    Ok((StatusCode::ACCEPTED, asked(&r)))
}

/// The body of a transfer request.
#[derive(Debug, Deserialize)]
pub(crate) struct TransferBody {
    /// The identity to hand over to.
    to: String,
    /// How long only the target may take over, in milliseconds (default 10 s).
    window_ms: Option<u64>,
}

/// `POST /v1/elections/{namespace}/{election}/transfer` with `{"to": "identity"}`.
pub(crate) async fn transfer(
    state: State,
    Path((namespace, election)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    authorize(&state, &headers)?;
    let key = key(&namespace, &election)?;
    let body: TransferBody = json_body(&body, r#"{"to": "<identity>"}"#)?;
    let window = Duration::from_millis(body.window_ms.unwrap_or(10_000));
    crate::handover::check_transfer_window(window)
        .map_err(|e| ApiError::bad_request(format!("window_ms: {e}")))?;
    let r = crate::handover::transfer(&state.api.store, &key, &body.to, window).await?;
    Ok((StatusCode::ACCEPTED, asked(&r)))
}

/// The body of a proclaim request.
#[derive(Debug, Deserialize)]
pub(crate) struct ProclaimBody {
    /// The leader's new metadata.
    metadata: String,
}

/// `POST /v1/elections/{namespace}/{election}/proclaim` with
/// `{"metadata": "..."}`: this process's own elector, while it leads that
/// election, replaces its tenure's metadata ([`crate::Leadership::proclaim`]).
/// Served only where the API has an elector (`tenure run --http`): a
/// central server leads nothing, so it answers 409 like a follower.
pub(crate) async fn proclaim(
    state: State,
    Path((namespace, election)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    authorize(&state, &headers)?;
    let key = key(&namespace, &election)?;
    let body: ProclaimBody = json_body(&body, r#"{"metadata": "<text>"}"#)?;
    crate::names::validate_metadata(&body.metadata)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let not_leading = || {
        ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "this process does not lead {key}: send proclaim to the leader's own \
                 HTTP API (`tenure run --http`)"
            ),
        )
    };
    let leadership = state
        .api
        .elector
        .as_ref()
        .filter(|e| *e.election() == key)
        .and_then(|e| e.current())
        .ok_or_else(not_leading)?;
    if !leadership.proclaim(body.metadata.clone()).await? {
        return Err(not_leading());
    }
    Ok((
        StatusCode::OK,
        Json(serde_json::json!({
            "term": leadership.term(),
            "metadata": body.metadata,
        })),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_compares_whole_tokens() {
        assert!(super::same(b"secret", b"secret"));
        assert!(!super::same(b"secret", b"secreT"));
        assert!(!super::same(b"secret", b"secrets"));
        assert!(!super::same(b"", b"x"));
    }

    #[test]
    fn bearer_scheme_in_any_case() {
        for v in ["Bearer t", "bearer t", "BEARER t", "bEaReR t"] {
            assert_eq!(super::bearer(v), Some("t"), "{v}");
        }
        assert_eq!(super::bearer("Basic t"), None);
        assert_eq!(super::bearer("Bearert"), None);
    }
}
