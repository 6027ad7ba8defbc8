//! `GET /`, `GET /v1/elections`, `GET /v1/elections/{namespace}/{election}`:
//! read the store; when it cannot be read, answer the last known state marked stale.

use std::collections::BTreeMap;
use std::future::Future;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, UNREACHABLE};
use super::view::ElectionView;
use super::{Shared, State};
use crate::store::{identity_of, ElectionKey, LeaseStoreExt};

/// What the store said last, for answers while it cannot be read.
#[derive(Debug, Default)]
pub(crate) struct LastKnown {
    /// Every election from the last successful list (without history).
    pub(crate) all: Option<Vec<ElectionView>>,
    /// Each election from its last successful single read (with history).
    pub(crate) one: BTreeMap<ElectionKey, ElectionView>,
}

/// The header that carries why an answer is stale.
const STALE: &str = "x-tenure-stale";

/// Runs a store read bounded by the API's read timeout. The error is the
/// generic reason for HTTP answers; the store's own goes to the log.
pub(crate) async fn bounded<T>(
    s: &Shared,
    read: impl Future<Output = crate::Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(s.api.read_timeout, read).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            tracing::warn!("HTTP: the store cannot be read: {e}");
            Err(UNREACHABLE.into())
        }
        Err(_) => {
            tracing::warn!(
                "HTTP: no answer from {} within {:?}",
                s.api.store.describe(),
                s.api.read_timeout
            );
            Err(format!(
                "{UNREACHABLE}: no answer within {:?}",
                s.api.read_timeout
            ))
        }
    }
}

fn stale_headers(reason: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    // A reason that is not a valid header value (non-ASCII) is still stale.
    let v = HeaderValue::from_str(&reason.replace(['\r', '\n'], " "))
        .unwrap_or(HeaderValue::from_static(UNREACHABLE));
    h.insert(STALE, v);
    h
}

/// `GET /`: the Kubernetes `leader-elector` sidecar's answer, from the
/// elector's own view (no store call).
pub(crate) async fn sidecar(state: State) -> Result<Json<serde_json::Value>, ApiError> {
    let Some(elector) = &state.api.elector else {
        return Err(ApiError::not_found(
            "GET / answers for this process's own election; start with --election (library: Api::elector)",
        ));
    };
    let name = match &*elector.leadership().borrow() {
        crate::State::Leading { .. } => elector.identity().to_string(),
        crate::State::Following { leader, .. } => identity_of(leader).to_string(),
        _ => String::new(),
    };
    Ok(Json(serde_json::json!({ "name": name })))
}

/// Every election with its members (and `history` recent terms each);
/// records each election's `tenure_members`.
pub(crate) async fn read_all(s: &Shared, history: usize) -> crate::Result<Vec<ElectionView>> {
    let store = &s.api.store;
    let mut out = Vec::new();
    let records = store.list(None).await?;
    let mut members = crate::store::members_of(&**store, &records, None).await?;
    for r in records {
        let members = members.remove(&r.key).unwrap_or_default();
        crate::telemetry::members(&r.key, &members);
        crate::telemetry::observed(&r.key, Some(&r));
        let history = match history {
            0 => Vec::new(),
            n => store.history(&r.key, n).await?,
        };
        out.push(ElectionView::new(&r, members, history));
    }
    Ok(out)
}

/// The query of `GET /v1/elections`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    /// Also each election's recent terms (how many; at most 1,000).
    #[serde(default)]
    history: usize,
}

/// `GET /v1/elections[?history=N]`.
pub(crate) async fn list(
    state: State,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::bad_request(format!("{e}; expected ?history=N (a number of terms)"))
    })?;
    match bounded(&state, read_all(&state, query.history.min(1000))).await {
        Ok(views) => {
            lock(&state).all = Some(views.clone());
            Ok(Json(views).into_response())
        }
        Err(reason) => {
            let last = lock(&state).all.clone();
            match last {
                Some(mut views) => {
                    views.iter_mut().for_each(|v| v.stale = true);
                    Ok((stale_headers(&reason), Json(views)).into_response())
                }
                None => Err(ApiError::unavailable(reason)),
            }
        }
    }
}

pub(crate) fn key(namespace: &str, election: &str) -> Result<ElectionKey, ApiError> {
    crate::validate_name("namespace", namespace)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    crate::validate_name("election", election).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(ElectionKey::new(namespace, election))
}

async fn read_one(s: &Shared, key: &ElectionKey) -> crate::Result<Option<ElectionView>> {
    let store = &s.api.store;
    let Some(r) = store.read(key).await? else {
        return Ok(None);
    };
    let members = store.members(key).await?;
    crate::telemetry::members(key, &members);
    let history = store.history(key, s.api.history).await?;
    Ok(Some(ElectionView::new(&r, members, history)))
}

/// `GET /v1/elections/{namespace}/{election}`.
pub(crate) async fn one(
    state: State,
    Path((namespace, election)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let key = key(&namespace, &election)?;
    match bounded(&state, read_one(&state, &key)).await {
        Ok(Some(view)) => {
            lock(&state).one.insert(key, view.clone());
            Ok(Json(view).into_response())
        }
        Ok(None) => Err(ApiError::not_found(format!(
            "no election {key}: it was never acquired (GET /v1/elections lists them)"
        ))),
        Err(reason) => {
            let last = lock(&state).one.get(&key).cloned();
            match last {
                Some(mut view) => {
                    view.stale = true;
                    Ok((stale_headers(&reason), Json(view)).into_response())
                }
                None => Err(ApiError::unavailable(reason)),
            }
        }
    }
}

pub(crate) fn lock(s: &Shared) -> std::sync::MutexGuard<'_, LastKnown> {
    // A panic elsewhere while holding the lock left a cache, not a broken invariant.
    s.last.lock().unwrap_or_else(|p| p.into_inner())
}
