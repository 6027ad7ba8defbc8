//! Leader election for services that already run a database.
//!
//! N replicas of a service share one SQLite file, MySQL/MariaDB or PostgreSQL
//! database; tenure makes exactly one of them the leader of each named election,
//! hands it a fencing token (the [term](Leadership::term)), tells everyone when
//! leadership moves, and moves it within the lease TTL when a leader dies, or
//! within a poll period when it steps aside.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::{store, Elector, State};
//!
//! // Any store URL works: sqlite://tenure.db, mysql://..., postgres://...
//! let store = store::connect("memory://", &store::StoreOptions::default()).await?;
//! let elector = Elector::builder(store)
//!     .election("billing-cron")
//!     .ttl(Duration::from_secs(10))
//!     .build()?;
//!
//! let mut states = elector.leadership();       // watch::Receiver<State>
//! let leadership = elector.acquired().await?;  // waits until we lead
//! assert!(elector.is_leader());                // cheap: an atomic and a clock read
//! assert_eq!(*states.borrow_and_update(), State::Leading { term: leadership.term() });
//!
//! elector.shutdown().await?;                   // releases: a successor takes over at once
//! assert!(!elector.is_leader());
//! # Ok(()) }
//! ```
//!
//! Safety rests on the rules in `docs/design.md`: every decision is one
//! compare-and-set write judged by the store's clock; a leader's belief ends at
//! a local deadline computed conservatively from before its last successful
//! write; the term strictly increases with every acquisition.
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
mod leadership;
mod names;
pub mod observe;
pub mod store;
// Also in the library's own unit tests, which use `testing::Instrumented`.
#[cfg(any(test, feature = "conformance"))]
pub mod testing;

pub use config::{
    check_supervised_timing, DEFAULT_POLL, DEFAULT_TTL, MAX_PRIORITY, MAX_TTL, MIN_TTL,
};
pub use elector::{DynStoreArg, Elector, ElectorBuilder};
pub use error::{BoxError, Error, Result};
pub use events::{Event, StopReason};
pub use leadership::{Leadership, State};
pub use names::{validate_name, MAX_IDENTITY_BYTES, MAX_METADATA_BYTES, MAX_NAME_BYTES};
pub use observe::{observe, Change, ObserveOptions, Observer, Selection};

// The README's examples are compiled as doctests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme {}
