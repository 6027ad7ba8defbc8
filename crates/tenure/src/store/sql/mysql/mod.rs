#![doc = include_str!("docs.md")]

// What only MySQL and MariaDB need: they have no notifications, so followers
// and leaders are woken through named locks and sleeping connections, and
// MariaDB 10.5 or newer lets a follower heartbeat and read in one statement.
//
// | file | job |
// |---|---|
// | `named_locks.rs` | followers block in `GET_LOCK` on the leader's lock and wake when it is freed |
// | `bell.rs` | the leader's doorbell for hand-over requests; what the doorbells share |
// | `watch_bell.rs` | observers' doorbells for elections nobody holds |
// | `mariadb.rs` | MariaDB ≥ 10.5: a follower's heartbeat and read in one statement |
//
// None of this decides anything: every wake-up is followed by a read, and
// every decision is the conditional statement shared by all databases.

mod bell;
mod mariadb;
mod named_locks;
mod watch_bell;

pub(super) use mariadb::{Returning, Tried};
pub(super) use named_locks::NamedLocks;
