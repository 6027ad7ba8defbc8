#![doc = include_str!("docs.md")]

// What only SQLite needs: its spelling of the statements, its pragmas and
// the probe that finds a file that is not a database, and the wake-up: the
// replicas share one file on one host, so followers are woken by file events
// on the database and its write-ahead log (inotify on Linux) instead of by
// queries.
//
// | file | job |
// |---|---|
// | `dialect.rs` | how SQLite spells the statements |
// | `connect.rs` | pragmas of every connection, the probe, the file a URL names |
// | `file_watch.rs` | followers woken by file events |
//
// The spelling and the pragmas are plain text and compile in every build;
// the rest only with the `sqlite` feature.

mod connect;
mod dialect;
#[cfg(feature = "sqlite")]
mod file_watch;

#[cfg(feature = "sqlite")]
pub(super) use connect::{exists, path_of};
pub(super) use connect::{probe, with_pragmas};
pub(super) use dialect::Sqlite;
#[cfg(feature = "sqlite")]
pub(super) use file_watch::FileWatch;
