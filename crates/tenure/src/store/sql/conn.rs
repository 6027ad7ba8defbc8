//! The store's own connection as its statements see it: any database's,
//! or on PostgreSQL one that also listens for notifications
//! (`postgres/listening.rs`). Both run the same `Any` statements.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
#[cfg(feature = "postgres")]
use futures_util::{FutureExt as _, StreamExt as _};
use sqlx::any::{Any, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::{AnyConnection, Connection as _, Describe, Either, Execute, Executor};

/// One open connection of the store's own ([`super::connection::OneConnection`]).
#[derive(Debug)]
pub(super) enum Conn {
    /// Statements only.
    Any(AnyConnection),
    /// PostgreSQL: statements, and notifications between them.
    #[cfg(feature = "postgres")]
    Listening(Box<super::postgres::Listening>),
}

impl Conn {
    /// Says goodbye to the server and closes the connection.
    pub(super) async fn close(self) {
        match self {
            Conn::Any(conn) => drop(conn.close().await),
            // Dropped, the listener's pool of one closes its connection.
            #[cfg(feature = "postgres")]
            Conn::Listening(listening) => drop(listening),
        }
    }

    /// The plain connection, where this is one (MySQL/MariaDB's always).
    #[cfg(feature = "mysql")]
    pub(super) fn statements_only(&mut self) -> Option<&mut AnyConnection> {
        match self {
            Conn::Any(conn) => Some(conn),
            #[cfg(feature = "postgres")]
            Conn::Listening(_) => None,
        }
    }

    /// Whether this connection can listen.
    pub(super) fn can_listen(&self) -> bool {
        match self {
            Conn::Any(_) => false,
            #[cfg(feature = "postgres")]
            Conn::Listening(_) => true,
        }
    }

    /// The listening connection, where this is one.
    #[cfg(feature = "postgres")]
    pub(super) fn listening(&mut self) -> Option<&mut super::postgres::Listening> {
        match self {
            Conn::Listening(listening) => Some(listening),
            Conn::Any(_) => None,
        }
    }
}

/// Statements on a listening connection have no prepared-statement API of
/// their own (the store never asks for one); this is what they answer.
#[cfg(feature = "postgres")]
fn unsupported(what: &str) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "{what} is not offered on the store's listening connection"
    ))
}

impl<'c> Executor<'c> for &'c mut Conn {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        #[cfg_attr(not(feature = "postgres"), allow(unused_mut))] mut query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        match self {
            Conn::Any(conn) => conn.fetch_many(query),
            #[cfg(feature = "postgres")]
            Conn::Listening(listening) => match query.take_arguments() {
                Ok(arguments) => listening.fetch_many(query.sql(), arguments),
                Err(e) => {
                    let e = sqlx::Error::Encode(e);
                    futures_util::stream::once(async { Err(e) }).boxed()
                }
            },
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        #[cfg_attr(not(feature = "postgres"), allow(unused_mut))] mut query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Any>,
    {
        match self {
            Conn::Any(conn) => conn.fetch_optional(query),
            #[cfg(feature = "postgres")]
            Conn::Listening(listening) => match query.take_arguments() {
                Ok(arguments) => listening.fetch_optional(query.sql(), arguments),
                Err(e) => {
                    let e = sqlx::Error::Encode(e);
                    async { Err(e) }.boxed()
                }
            },
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self {
            Conn::Any(conn) => conn.prepare_with(sql, parameters),
            #[cfg(feature = "postgres")]
            Conn::Listening(_) => async { Err(unsupported("preparing a statement")) }.boxed(),
        }
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>>
    where
        'c: 'e,
    {
        match self {
            Conn::Any(conn) => conn.describe(sql),
            #[cfg(feature = "postgres")]
            Conn::Listening(_) => async { Err(unsupported("describing a statement")) }.boxed(),
        }
    }
}
