//! How followers and observers of each database are woken: the one part of
//! a [`SqlStore`](super::SqlStore) that differs by database beyond the
//! statements' spelling. The store tells it what it saw and did (a read, an
//! acquisition, an ended tenure, a hand-over request) and asks it for
//! subscriptions; each database acts on what it needs and ignores the rest.
//!
//! | database | mechanism | in |
//! |---|---|---|
//! | PostgreSQL | LISTEN/NOTIFY | `postgres/push.rs` |
//! | MySQL/MariaDB | named locks and doorbells | `mysql/named_locks.rs`, `mysql/bell.rs`, `mysql/watch_bell.rs` |
//! | SQLite | file events on the database and its log | `sqlite/file_watch.rs` |
//!
//! None of it decides anything: every wake-up is followed by a read, and
//! every decision is a conditional statement judged by the server's clock.

use std::sync::Arc;
use std::time::Duration;

use sqlx::AnyPool;

use super::dialect::Dialect;
use super::statements::Statements;
use crate::error::{Error, Result};
use crate::store::{AcquisitionWatch, Changes, ElectionKey, LeaseRecord, PushHealth, StoreOptions};

/// The wake-up mechanism of one store's database.
#[derive(Debug)]
pub(super) enum Wake {
    /// SQLite: file events on the database and its write-ahead log.
    #[cfg(feature = "sqlite")]
    FileWatch(Arc<super::sqlite::FileWatch>),
    /// MySQL/MariaDB: named locks that followers wait in, doorbells, and
    /// what the server says of `INSERT ... RETURNING`.
    #[cfg(feature = "mysql")]
    NamedLocks {
        /// Followers' waits and the leader's doorbell.
        locks: Arc<super::mysql::NamedLocks>,
        /// Whether a follower's heartbeat and read are one statement here.
        returning: super::mysql::Returning,
    },
    /// PostgreSQL: LISTEN, on the store's own connection (or, through a
    /// pooler, on one of its own to the `push_url`).
    #[cfg(feature = "postgres")]
    Listen(Arc<super::postgres::PushHub>),
    /// Nothing pushes: PostgreSQL through a pooler in transaction mode
    /// without a direct URL for `LISTEN` (`postgres/pooler.rs`). The two
    /// followers first in line read every tenth of a TTL, the others at
    /// the lease's expiry (`Capabilities::reads_at_expiry`).
    #[cfg(feature = "postgres")]
    Unpushed,
}

/// What [`Wake::new`] needs of the store it is part of.
pub(super) struct Parts<'a> {
    pub(super) dialect: Dialect,
    pub(super) url: &'a str,
    pub(super) driver_url: &'a str,
    pub(super) described: &'a str,
    pub(super) pool: &'a AnyPool,
    pub(super) own: &'a Arc<super::connection::OneConnection>,
    pub(super) statements: &'a Arc<Statements>,
    pub(super) options: &'a StoreOptions,
    pub(super) pooler: &'a super::postgres::pooler::Pooler,
}

impl Wake {
    /// The mechanism of `parts.dialect`; an error naming the cargo feature
    /// when this build leaves that database out.
    pub(super) fn new(parts: Parts<'_>) -> Result<Self> {
        #[allow(unused_variables)]
        let Parts {
            dialect,
            url,
            driver_url,
            described,
            pool,
            own,
            statements,
            options,
            pooler,
        } = parts;
        match dialect {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => Ok(Wake::FileWatch(Arc::new(super::sqlite::FileWatch::new(
                super::sqlite::path_of(url),
                pool.clone(),
                statements.clone(),
            )))),
            #[cfg(feature = "mysql")]
            Dialect::MySql => Ok(Wake::NamedLocks {
                locks: Arc::new(super::mysql::NamedLocks::new(
                    pool.clone(),
                    own.clone(),
                    &options.table_prefix,
                )),
                returning: Default::default(),
            }),
            #[cfg(feature = "postgres")]
            Dialect::Postgres if !pooler.listens() => Ok(Wake::Unpushed),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Ok(Wake::Listen(Arc::new(super::postgres::PushHub::new(
                pooler
                    .push_url
                    .clone()
                    .unwrap_or_else(|| driver_url.to_string()),
                &options.table_prefix,
                own.clone(),
                options.push_probe_period,
            )))),
            #[allow(unreachable_patterns)]
            other => Err(Error::InvalidUrl {
                url: described.to_string(),
                reason: format!(
                    "this build of tenure has no {} store; build it with the cargo feature `{}`",
                    other.server_name(),
                    other.backend()
                ),
            }),
        }
    }

    /// MySQL/MariaDB's named locks, where this is that database.
    #[cfg(feature = "mysql")]
    fn named_locks(&self) -> Option<&Arc<super::mysql::NamedLocks>> {
        match self {
            Wake::NamedLocks { locks, .. } => Some(locks),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// What MySQL/MariaDB's server says of `INSERT ... RETURNING`, where
    /// this is that database.
    #[cfg(feature = "mysql")]
    pub(super) fn returning(&self) -> Option<&super::mysql::Returning> {
        match self {
            Wake::NamedLocks { returning, .. } => Some(returning),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// A read found `rec` for `key`: MySQL/MariaDB followers wait on the
    /// named lock of the holder they read.
    pub(super) fn seen(&self, key: &ElectionKey, rec: Option<&LeaseRecord>) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.seen(key, rec);
        }
        #[cfg(not(feature = "mysql"))]
        let _ = (key, rec);
    }

    /// This process acquired `key`: on MySQL/MariaDB it takes the named lock
    /// its followers will wait on, off the caller's path.
    pub(super) fn acquired(&self, key: &ElectionKey, ttl: Duration) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            let (locks, key) = (locks.clone(), key.clone());
            tokio::spawn(async move { locks.leading(&key, ttl).await });
        }
        #[cfg(not(feature = "mysql"))]
        let _ = (key, ttl);
    }

    /// This process renewed `key`: on MySQL/MariaDB its named lock is taken
    /// again if the connection it was held on was replaced.
    pub(super) fn renewed(&self, key: &ElectionKey, ttl: Duration) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.renewed(key, ttl);
        }
        #[cfg(not(feature = "mysql"))]
        let _ = (key, ttl);
    }

    /// A tenure of `key` ended here: on MySQL/MariaDB its named lock is
    /// freed, waking the followers that wait on it.
    pub(super) fn ended(&self, key: &ElectionKey) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.spawn_ended(key);
        }
        #[cfg(not(feature = "mysql"))]
        let _ = key;
    }

    /// A hand-over of `key` was requested: on MySQL/MariaDB the leader's
    /// doorbell rings (elsewhere the leader hears of it from its own push).
    pub(super) async fn handover_requested(&self, key: &ElectionKey) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.ring(key).await;
        }
        #[cfg(not(feature = "mysql"))]
        let _ = key;
    }

    /// Waits until the wake-ups this store started have gone out (the named
    /// locks freed on MySQL/MariaDB).
    pub(super) async fn settle(&self) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.settle().await;
        }
    }

    /// Tells listeners that `key` changed, on `conn` (PostgreSQL). Best
    /// effort: a lost notification only delays them to their next read.
    #[allow(irrefutable_let_patterns)]
    pub(super) async fn notify(&self, conn: &mut super::conn::Conn, key: &ElectionKey) {
        #[cfg(feature = "postgres")]
        if let Wake::Listen(hub) = self {
            hub.notify(conn, key).await;
        }
        #[cfg(not(feature = "postgres"))]
        let _ = (conn, key);
    }

    /// A subscription to changes of any lease in the store's tables.
    pub(super) fn subscribe(&self) -> Option<Changes> {
        match self {
            #[cfg(feature = "sqlite")]
            Wake::FileWatch(watch) => watch.subscribe(),
            #[cfg(feature = "mysql")]
            Wake::NamedLocks { locks, .. } => locks.subscribe(),
            #[cfg(feature = "postgres")]
            Wake::Listen(hub) => hub.subscribe(),
            #[cfg(feature = "postgres")]
            Wake::Unpushed => None,
        }
    }

    /// A watch on acquisitions of `key` (MySQL/MariaDB's doorbells, for
    /// elections nobody holds); `None` where changes are pushed anyway.
    pub(super) fn watch_acquisitions(&self, key: &ElectionKey) -> Option<AcquisitionWatch> {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            return locks.watch(key);
        }
        let _ = key;
        None
    }

    /// Whether anything is pushed at all.
    pub(super) fn pushes(&self) -> bool {
        #[cfg(feature = "postgres")]
        if matches!(self, Wake::Unpushed) {
            return false;
        }
        true
    }

    /// Whether acquisitions reach subscribers without a watch of their own.
    pub(super) fn pushes_acquisitions(&self) -> bool {
        #[cfg(feature = "mysql")]
        if self.named_locks().is_some() {
            return false;
        }
        true
    }

    /// How the push channel is doing, where the database reports it
    /// (PostgreSQL's LISTEN); elsewhere which channel it is.
    pub(super) fn health(&self) -> PushHealth {
        match self {
            #[cfg(feature = "sqlite")]
            Wake::FileWatch(_) => PushHealth::Unreported {
                channel: "SQLite file watch".to_owned(),
            },
            #[cfg(feature = "mysql")]
            Wake::NamedLocks { .. } => PushHealth::Unreported {
                channel: "MySQL named locks".to_owned(),
            },
            #[cfg(feature = "postgres")]
            Wake::Listen(hub) => hub.health(),
            #[cfg(feature = "postgres")]
            Wake::Unpushed => PushHealth::NotOffered,
        }
    }

    /// Whether a subscription holds a database connection (not SQLite's
    /// file watch).
    pub(super) fn holds_a_connection(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Wake::FileWatch(_) => false,
            #[cfg(feature = "postgres")]
            Wake::Unpushed => false,
            #[allow(unreachable_patterns)]
            _ => true,
        }
    }

    /// Whether anything in the process subscribes now.
    pub(super) fn has_subscribers(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Wake::FileWatch(watch) => watch.has_subscribers(),
            #[cfg(feature = "mysql")]
            Wake::NamedLocks { locks, .. } => locks.has_subscribers(),
            #[cfg(feature = "postgres")]
            Wake::Listen(hub) => hub.has_subscribers(),
            #[cfg(feature = "postgres")]
            Wake::Unpushed => false,
        }
    }

    /// How many connections the wake-ups hold open now.
    pub(super) fn connections_held(&self) -> usize {
        match self {
            #[cfg(feature = "sqlite")]
            Wake::FileWatch(_) => 0,
            #[cfg(feature = "mysql")]
            Wake::NamedLocks { locks, .. } => locks.connections_held(),
            #[cfg(feature = "postgres")]
            Wake::Listen(hub) => hub.connections_held(),
            #[cfg(feature = "postgres")]
            Wake::Unpushed => 0,
        }
    }

    /// Stops what would outlive the store: MySQL/MariaDB's named-lock
    /// waiters hold the lock table alive and a connection each, for up to
    /// 12 TTLs.
    pub(super) fn stop(&self) {
        #[cfg(feature = "mysql")]
        if let Some(locks) = self.named_locks() {
            locks.stop_waiters();
        }
    }
}
