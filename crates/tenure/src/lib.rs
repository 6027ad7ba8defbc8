//! Leader election for services that already run a database.
//!
//! N replicas of a service share one SQLite file, MySQL/MariaDB or PostgreSQL
//! database, a Redis, an etcd cluster or a ZooKeeper ensemble; tenure makes
//! exactly one of them the leader of each named election, hands it a fencing
//! token (the [term](Leadership::term), which strictly increases with every
//! acquisition), tells everyone when leadership moves, moves it within the
//! lease TTL when a leader dies, and within milliseconds when a leader steps
//! aside (every store pushes the release to the followers).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::{store, Elector, Event};
//!
//! // Any store URL: sqlite://tenure.db, postgres://..., mysql://..., redis://..., etcd://..., zk://...
//! let store = store::connect("memory://", &store::StoreOptions::default()).await?;
//! let elector = Elector::builder(store.clone())
//!     .election("billing-cron")
//!     .ttl(Duration::from_secs(10))
//!     .on_event(|e| if let Event::StoppedLeading { reason, .. } = e { eprintln!("stopped leading: {reason}") })
//!     .build()?;
//!
//! // In a service: `tokio::signal::ctrl_c()`; here the work ends by itself.
//! let stop = std::future::pending::<()>();
//! let term = elector
//!     .run_until(stop, |leadership| async move {
//!         // Leader-only work. Dropped the moment leadership is lost (at the
//!         // local deadline at the latest); when it returns, the elector resigns.
//!         leadership.term() // the fencing token for everything it writes
//!     })
//!     .await?;
//! assert_eq!(term, Some(1));
//! assert!(!elector.is_leader()); // run_until shut the elector down: lease released
//! # Ok(()) }
//! ```
//!
//! # Contents
//!
//! - [`Elector`]: one candidate in one election. [`Elector::is_leader`] costs
//!   an atomic load and a clock read; [`Elector::leadership`] is a
//!   `watch::Receiver` of [`State`]; [`Elector::run`] / [`Elector::run_until`]
//!   run leader-only work; [`Elector::events`] and
//!   [`ElectorBuilder::on_event`] say when leadership starts and stops, and why.
//! - [`Leadership`]: one tenure: its term, its local deadline, the signal that
//!   it ended, and [fenced writes](Leadership::fenced).
//! - [`observe()`]: watch elections without competing.
//! - [`store`]: the stores, [`store::connect`] by URL, and the [`LeaseStore`](store::LeaseStore)
//!   trait for a store of your own; [`handover`]: ask a leader elsewhere to
//!   step down.
//!
//! # Stores
//!
//! This is the one table of stores; the repository's `docs/stores.md` has
//! URL parameters and TLS, and each store's module its details.
//!
//! | store | URL | feature | how followers wake | expiry judged by | min TTL | terms | fenced writes |
//! |---|---|---|---|---|---|---|---|
//! | SQLite | `sqlite://FILE` | `sqlite` (default) | file events: inotify (through `notify`) on the database file and its WAL; a `stat` every 200 ms, every 10 ms where the files cannot be watched | the host's clock, in the statement | 100 ms | dense (+1) | transactions: [`Leadership::fenced`], [`SqlStore::fenced`](store::sql::SqlStore::fenced) |
//! | MySQL 8 / MariaDB 10.5+ | `mysql://`, `mariadb://` | `mysql` | named locks: followers wait in `GET_LOCK` on the leader's lock, freed by a release; a new leader rings the watchers of a free election (`KILL QUERY` of their sleep) | the server's clock | 100 ms | dense (+1) | transactions, as SQLite |
//! | PostgreSQL 12+ | `postgres://`, `postgresql://` | `postgres` | `LISTEN`/`NOTIFY` | the server's clock | 100 ms | dense (+1) | transactions, as SQLite |
//! | Redis 5+ | `redis://`, `rediss://` | `redis` | pub/sub | the server's `TIME`, in a Lua script | 100 ms | dense (+1); survive a restart only with AOF and `appendfsync always` (a connect warns otherwise; `?durability=volatile` accepts it) | `SET`/`HSET`/`XADD`/`DEL` in the checking script: [`RedisStore::fenced`][redis-fenced] |
//! | etcd 3.4+ | `etcd://h1:2379,h2:2379`, `etcds://` | `etcd` | the watch of the key prefix | etcd's lease expiry (revoked in a 500 ms sweep) | 1 s (whole seconds, rounded up) | etcd revisions: strictly increasing, with gaps | your ops in the comparing `Txn`: [`EtcdStore::fenced_txn`][etcd-fenced] |
//! | ZooKeeper 3.6+ | `zk://h1:2181,h2:2181/chroot`, `zks://` | `zookeeper` | a persistent watch per election | session expiry (session timeout = TTL) and `mtime` + TTL, by one ZooKeeper leader's clock (across a ZooKeeper leader change, the acquirer's monotonic clock) | any, up to the servers' `maxSessionTimeout` | dense (+1): the version of a counter znode | none: hand the term on |
//! | memory | `memory://` | always | in-process | the process (tests only) | 100 ms | dense (+1) | none |
//!
//! Push is a wake-up only: the conditional write still decides who leads,
//! and a follower still reads when the lease it saw would expire. Where a
//! push channel is down, followers read every tenth of a TTL.
//!
//! # Choosing a TTL
//!
//! The TTL is how long a crashed leader keeps the election without a leader:
//! its successor takes over a few milliseconds after the lease expires by the
//! store's clock. A graceful release ([`Elector::shutdown`],
//! [`Elector::resign`]) hands over in milliseconds whatever the TTL. Shorter
//! TTLs cost more renewals (one per ttl/3 per process, batched across
//! elections) and make a leader step down sooner when the store is slow: a
//! TTL must cover a store failover or a GC pause you want to ride out. The
//! default, 10 s, suits most services; 1–3 s where failover time matters and
//! the store is close.
//!
//! # Fencing
//!
//! A process can pause (GC, `SIGSTOP`, a frozen VM) past its local deadline
//! and still act as if it led; [`Elector::is_leader`] cannot help a process
//! that is not running. Only the place written to can refuse a stale leader:
//!
//! - pass [`Leadership::term`] along with every write and have the receiver
//!   refuse terms lower than the highest it has seen, or
//! - write through the store, which checks the lease in the same atomic step:
//!   [`Leadership::fenced`] on SQL (a transaction that re-checks and locks
//!   the lease, so no takeover commits in between), [`RedisStore::fenced`][redis-fenced],
//!   [`EtcdStore::fenced_txn`][etcd-fenced].
//!
//! ```no_run
//! # async fn demo(store: tenure::store::DynStore, elector: tenure::Elector) -> tenure::Result<()> {
//! use tenure::store::sql::sqlx; // the sqlx tenure uses (`Any` driver)
//!
//! let leadership = elector.acquired().await?;
//! let term = leadership.term() as i64;
//! leadership
//!     .fenced(&store, async |tx| {
//!         // Placeholders as the database wants them: `$1` on PostgreSQL and
//!         // SQLite, `?` on MySQL/MariaDB (and SQLite).
//!         sqlx::query("INSERT INTO ledger (term, entry) VALUES ($1, 'nightly')")
//!             .bind(term)
//!             .execute(tx.connection())
//!             .await?;
//!         Ok(())
//!     })
//!     .await?; // Err(NotLeader) once a successor holds the lease: nothing written
//! # Ok(()) }
//! ```
//!
//! # Observing
//!
//! - Your own candidate: [`Elector::leadership`] (the current [`State`]),
//!   [`Elector::events`] or [`ElectorBuilder::on_event`]
//!   ([`Event::StartedLeading`], [`Event::StoppedLeading`] with a
//!   [`StopReason`], [`Event::NewLeader`]).
//! - Any election, without competing: [`observe()`] streams a [`Change`] for
//!   every new leader and every gap between terms.
//!
//! Names: a candidate's **holder id** is `identity#session`
//! ([`Elector::holder_id`], [`Leadership::holder_id`]); wherever an API says
//! who leads, the field is `leader` and holds that leader's holder id
//! ([`State::Following`], [`Change::Leader`], [`Event::NewLeader`]). Store
//! records ([`store::LeaseRecord`]) call it the lease's `holder`.
//!
//! # Logs
//!
//! tenure logs through [`tracing`](https://docs.rs/tracing) and needs no
//! subscriber to work ([`Event`]s carry what an application acts on).
//! Targets are module paths: `tenure::campaign` and `tenure::elector` for
//! the elector's decisions, `tenure::store::sql::*`, `tenure::store::redis::*`,
//! `tenure::store::etcd::*`, `tenure::store::zookeeper::*` for the stores. Levels: `info` for leadership
//! gained, handed over or stepped down and for a store reachable again;
//! `warn` for leadership lost and for failing store calls; `debug` for store
//! details (notifications, history rows, reconnects). Nothing is logged per
//! renewal at `info`.
//!
//! # In a service (axum, tonic, ...)
//!
//! Build the elector at start-up, run the leader-only work in a task of its
//! own, hand clones of the [`Elector`] (a cheap handle) to request handlers,
//! and stop it with the server: axum's `with_graceful_shutdown` and tonic's
//! `serve_with_shutdown` take the same kind of future as
//! [`Elector::run_until`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use tenure::Elector;
//!
//! #[derive(Clone)]
//! struct AppState {
//!     elector: Elector,
//! }
//!
//! // A handler: only the leader accepts writes; the others name it.
//! fn health(state: &AppState) -> String {
//!     match &*state.elector.leadership().borrow() {
//!         tenure::State::Leading { term } => format!("leader (term {term})"),
//!         tenure::State::Following { leader, .. } => format!("follower of {leader}"),
//!         _ => "no leader".into(),
//!     }
//! }
//!
//! let store = tenure::store::connect("memory://", &Default::default()).await?;
//! let elector = Elector::builder(store).election("scheduler").build()?;
//! let state = AppState { elector: elector.clone() };
//! let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
//! let background = tokio::spawn(async move {
//!     elector
//!         .run_until(stop_rx, |_leadership| async {
//!             // e.g. a scheduler loop; never returns while it leads
//!             std::future::pending::<()>().await
//!         })
//!         .await
//! });
//! state.elector.acquired().await?;
//! assert!(health(&state).starts_with("leader"));
//! // Server shutting down (its graceful-shutdown future fired):
//! let _ = stop_tx.send(());
//! background.await.expect("no panic")?;
//! assert_eq!(health(&state), "no leader");
//! # Ok(()) }
//! ```
//!
//! # Shutdown
//!
//! [`Elector::shutdown`] stops campaigning and, when leading, releases the
//! lease so a successor takes over at once; it returns once the release, its
//! history entry and the followers' wake-up have been written (bounded by
//! 2 s), so a process may exit right after. [`Elector::run_until`] calls it
//! for you. Dropping the last clone of an [`Elector`] also releases, without
//! waiting. A process that dies without either is replaced one TTL later.
//!
//! # Safety
//!
//! Every acquire, renew and release is one atomic conditional write whose
//! expiry is judged by the store's own clock; a leader believes it leads only
//! until a local deadline computed from an instant taken *before* its last
//! successful write, on a clock that counts through suspend; the term
//! strictly increases with every acquisition. The repository's
//! `docs/design.md` states the rules in full and `docs/timing.md` the timing
//! defaults and why.
//!
// Links to items of optional features: to the item where it is built, to
// the store table otherwise (no broken links with any set of features).
#![cfg_attr(
    feature = "redis",
    doc = "[redis-fenced]: store::redis::RedisStore::fenced"
)]
#![cfg_attr(not(feature = "redis"), doc = "[redis-fenced]: crate#stores")]
#![cfg_attr(
    feature = "etcd",
    doc = "[etcd-fenced]: store::etcd::EtcdStore::fenced_txn"
)]
#![cfg_attr(not(feature = "etcd"), doc = "[etcd-fenced]: crate#stores")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![warn(unreachable_pub)]
#![forbid(unsafe_op_in_unsafe_fn)]

mod bugs;
#[doc(hidden)]
pub use bugs::compiled_in as chaos_bugs_compiled_in;
mod campaign;
pub mod clock;
mod config;
mod elector;
mod error;
pub mod events;
pub mod handover;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod leadership;
mod names;
pub mod observe;
mod random;
mod semaphore;
#[doc(hidden)]
pub use random::seed_thread_rng;
pub mod store;
mod telemetry;
// Also in the library's own unit tests, which use `testing::Instrumented`.
#[cfg(any(test, feature = "conformance"))]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod testing;

pub use config::{
    check_supervised_timing, DEFAULT_POLL, DEFAULT_TTL, MAX_PRIORITY, MAX_TTL, MIN_RENEW_PERIOD,
    MIN_TTL,
};
pub use elector::{DynStoreArg, Elector, ElectorBuilder};
pub use error::{BoxError, Error, Result};
pub use events::{Event, StopReason};
pub use leadership::{HandoverHold, Leadership, State};
pub use names::{
    validate_identity, validate_metadata, validate_name, MAX_IDENTITY_BYTES, MAX_METADATA_BYTES,
    MAX_NAME_BYTES,
};
pub use observe::{observe, Change, ObserveOptions, Observer, Selection};
pub use semaphore::{slot_election, Permit, Semaphore, MAX_SLOTS};

// The README's examples are compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
