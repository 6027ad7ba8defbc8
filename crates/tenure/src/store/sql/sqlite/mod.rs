#![doc = include_str!("docs.md")]

// What only SQLite needs: the replicas share one file on one host, so
// followers are woken by file events on the database and its write-ahead
// log (inotify on Linux) instead of by queries. Pragmas and the single
// writer are set where every database connects (`connect.rs`).

mod file_watch;

pub(super) use file_watch::FileWatch;
