#![doc = include_str!("docs.md")]

// What only MySQL and MariaDB need: their spelling of the statements, and
// wake-ups without notifications: followers and leaders are woken through
// named locks and sleeping connections, and MariaDB 10.5 or newer lets a
// follower heartbeat and read in one statement.
//
// | file | job |
// |---|---|
// | `dialect.rs` | how MySQL/MariaDB spell the statements (and MariaDB's one-statement heartbeat and read) |
// | `named_locks.rs` | followers block in `GET_LOCK` on the leader's lock and wake when it is freed |
// | `bell.rs` | the leader's doorbell for hand-over requests, asleep on its statements' connection; what the doorbells share |
// | `watch_bell.rs` | observers' doorbells for elections nobody holds |
// | `mariadb.rs` | whether the server has `INSERT ... RETURNING`, and sending the one statement |
//
// None of this decides anything: every wake-up is followed by a read, and
// every decision is the conditional statement shared by all databases. The
// spelling is plain text and compiles in every build; the rest only with
// the `mysql` feature.

#[cfg(feature = "mysql")]
mod bell;
mod dialect;
#[cfg(feature = "mysql")]
mod mariadb;
#[cfg(feature = "mysql")]
mod named_locks;
#[cfg(feature = "mysql")]
mod watch_bell;

#[cfg(feature = "mysql")]
pub(super) use bell::interrupted;
pub(super) use dialect::MySql;
#[cfg(feature = "mysql")]
pub(super) use mariadb::{Returning, Tried};
#[cfg(feature = "mysql")]
pub(super) use named_locks::NamedLocks;
