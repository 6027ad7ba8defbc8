//! The HTTP API (feature `http`): an axum [`Router`] with the routes of
//! `tenure serve`, for applications that embed an [`Elector`] and want the
//! same endpoints in their own server.
//!
//! | route | answer |
//! |---|---|
//! | `GET /` | `{"name": "<leader identity>"}` of the configured elector's election, as the Kubernetes `leader-elector` sidecar answers (`""`: no leader) |
//! | `GET /v1/elections[?history=N]` | every election: [`ElectionView`]s (as `tenure status --json`), with N recent terms each if asked |
//! | `GET /v1/elections/{namespace}/{election}` | one election with its recent terms; 404 if never acquired |
//! | `GET /v1/events` | Server-Sent Events, one [`Change`](crate::Change) per event as `tenure watch --json` prints it |
//! | `GET /healthz` | 503 only while this process leads with less than a third of its TTL left before its local deadline (no renewal for about two thirds of a TTL); earlier than client-go's health adaptor, whose "not renewed for TTL + tolerance" a tenure leader never reaches (it steps down at its deadline) |
//! | `GET /readyz` | 200 once the store answers a read; 503 with `"reason": "store unreachable"` while it does not (the store's error goes to the log: it may name the store's host and user) |
//! | `GET /metrics` | the render hook's text (Prometheus), after a read of every election's members (`tenure_members`); 404 without a hook |
//! | `POST /v1/elections/{namespace}/{election}/resign`, `.../transfer` | ask the leader to step down (for anyone, or `{"to": "identity"}`); need the bearer token, 403 without one configured |
//! | `POST /v1/elections/{namespace}/{election}/proclaim` | `{"metadata": "..."}`: this process, while it leads, replaces its tenure's metadata; needs the bearer token; 409 where this process does not lead |
//! | `GET /ui` | the dashboard page, its first paint (every election: leader, term, lease left, members) rendered from a read of the store, so it shows the state without scripts |
//!
//! When the store cannot be read, the election routes answer the last
//! state they read, each election marked `"stale": true`.
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tenure::{http, store, Elector};
//!
//! let store = store::connect("sqlite://tenure.db", &Default::default()).await?;
//! let elector = Elector::builder(store.clone()).election("scheduler").build()?;
//! // The application's own routes, with tenure's merged in.
//! let app = axum::Router::new()
//!     .route("/work", axum::routing::get(|| async { "ok" }))
//!     .merge(http::Api::new(store).elector(elector.clone()).router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // Connection cap, header and write timeouts (see `Limits`); plain
//! // `axum::serve(listener, app)` works too, without them.
//! http::serve(listener, app, http::Limits::default()).await;
//! # Ok(()) }
//! ```

mod control;
mod elections;
mod error;
mod events;
mod health;
mod server;
mod ui;
mod view;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;

use crate::store::DynStore;
use crate::Elector;

pub use server::{open_file_limit, serve, Limits};
pub use view::{timestamp, ElectionView};

/// Renders the metrics text for `GET /metrics` (e.g. a Prometheus
/// exporter's handle: `move || handle.render()`).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// What the routes serve; build it, then call [`Api::router`].
#[derive(Clone)]
pub struct Api {
    store: DynStore,
    elector: Option<Elector>,
    token: Option<String>,
    metrics: Option<RenderMetrics>,
    history: usize,
    read_timeout: Duration,
    keep_alive: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Api")
            .field("store", &self.store.describe())
            .field(
                "elector",
                &self.elector.as_ref().map(|e| e.election().clone()),
            )
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("metrics", &self.metrics.is_some())
            .finish()
    }
}

impl Api {
    /// Routes serving every election of `store`.
    pub fn new(store: DynStore) -> Self {
        Self {
            store,
            elector: None,
            token: None,
            metrics: None,
            history: 10,
            read_timeout: Duration::from_secs(2),
            keep_alive: events::KEEP_ALIVE,
        }
    }

    /// This process's own candidate: `GET /` names its election's leader and
    /// `GET /healthz` judges its renewals.
    pub fn elector(mut self, elector: Elector) -> Self {
        self.elector = Some(elector);
        self
    }

    /// The bearer token that `POST .../resign`, `.../transfer` and
    /// `.../proclaim` require; without one they answer 403 and change nothing.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// What `GET /metrics` answers (Prometheus text format). Before each
    /// answer the route reads every election's member list (bounded by the
    /// read timeout), so `tenure_members` is as of the scrape.
    pub fn metrics(mut self, render: RenderMetrics) -> Self {
        self.metrics = Some(render);
        self
    }

    /// How many recent terms `GET /v1/elections/{namespace}/{election}` shows (default 10).
    pub fn history(mut self, terms: usize) -> Self {
        self.history = terms;
        self
    }

    /// The longest a store read may take before the routes answer from the
    /// last known state (default 2 s).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// How often an idle `GET /v1/events` stream carries a `: keep-alive`
    /// comment, so proxies keep it open (default 15 s).
    pub fn keep_alive(mut self, every: Duration) -> Self {
        self.keep_alive = every;
        self
    }

    /// The router. Must be called inside a tokio runtime: it starts the one
    /// observer that every `GET /v1/events` client shares.
    pub fn router(self) -> Router {
        let state = Arc::new(Shared {
            events: events::Fanout::start(self.store.clone()),
            last: Mutex::new(elections::LastKnown::default()),
            api: self,
        });
        Router::new()
            .route("/", get(elections::sidecar))
            .route("/v1/elections", get(elections::list))
            .route("/v1/elections/{namespace}/{election}", get(elections::one))
            .route(
                "/v1/elections/{namespace}/{election}/resign",
                post(control::resign),
            )
            .route(
                "/v1/elections/{namespace}/{election}/transfer",
                post(control::transfer),
            )
            .route(
                "/v1/elections/{namespace}/{election}/proclaim",
                post(control::proclaim),
            )
            .route("/v1/events", get(events::sse))
            .route("/healthz", get(health::healthz))
            .route("/readyz", get(health::readyz))
            .route("/metrics", get(health::metrics))
            .route("/ui", get(ui::ui))
            .with_state(state)
    }
}

/// The state behind every route.
pub(crate) struct Shared {
    pub(crate) api: Api,
    pub(crate) events: events::Fanout,
    pub(crate) last: Mutex<elections::LastKnown>,
}

pub(crate) type State = axum::extract::State<Arc<Shared>>;
