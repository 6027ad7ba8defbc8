#![doc = include_str!("docs.md")]

// What only PostgreSQL needs: its spelling of the statements (the clock read
// once through a CTE, numbered placeholders, notifications sent by the
// statement that changes a lease, a follower's heartbeat and read in one
// data-modifying CTE) and the listening side of LISTEN/NOTIFY, which wakes
// followers and observers in milliseconds when a lease changes hands.
//
// | file | job |
// |---|---|
// | `dialect.rs` | how PostgreSQL spells the statements |
// | `push.rs` | LISTEN for the store, and its health |
// | `listening.rs` | the store's connection that also listens: its statements run on a `PgListener` |
// | `pooler.rs` | the URL's `pooler` and `push_url`: a pooler in transaction mode |
//
// The spelling is plain text and compiles in every build; the listener only
// with the `postgres` feature.

mod dialect;
#[cfg(feature = "postgres")]
mod listening;
pub(super) mod pooler;
#[cfg(feature = "postgres")]
mod push;

pub(super) use dialect::Postgres;
#[cfg(feature = "postgres")]
pub(super) use listening::Listening;
#[cfg(feature = "postgres")]
pub(super) use push::PushHub;
