//! One pooled connection kept out of the pool between lease statements.
//!
//! sqlx pings every connection it takes back (`return_to_pool`, a round
//! trip, unconditionally), and a connection being pinged is not idle. A
//! woken successor reads the lease and the members and then acquires at
//! once, so its acquisition found every connection still in its ping and
//! the pool opened a new one: 6–11 ms on PostgreSQL, on the hand-over's
//! path. The lease statements therefore borrow one connection that is
//! handed back here, not to the pool, where the next lease statement of
//! the same hand-over finds it at once, with its statements prepared.
//!
//! Connection-neutral: the kept connection is one of the pool's (it counts
//! against the maximum), and it goes back to the pool after [`HOLD`]
//! unused, so a leader does not sit on one for its whole tenure (a
//! long-kept connection would also miss the pool's checks on return). A
//! pool of fewer than three connections keeps none: renewals, heartbeats
//! and the history queue would wait for the kept one.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool};
use tokio::time::Instant;

/// How long a connection stays kept after its last lease statement: far
/// longer than the statements of one hand-over take (milliseconds), far
/// shorter than anything else waits for a pooled connection.
pub(super) const HOLD: Duration = Duration::from_secs(1);

/// Pools smaller than this keep no connection aside.
const SMALLEST_POOL: u32 = 3;

/// The slot for the kept connection, in front of the pool.
#[derive(Debug)]
pub(super) struct Kept {
    pool: AnyPool,
    /// `None` when the pool is too small to keep a connection aside.
    slot: Option<Arc<Mutex<Slot>>>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The connection and when it was last handed back.
    conn: Option<(PoolConnection<Any>, Instant)>,
    /// Whether a task will hand `conn` back to the pool when it is due.
    returner: bool,
}

/// A connection lent for a lease statement. [`Lent::keep`] after success
/// puts it back in the slot; dropped instead (after an error or a
/// cancellation, when the connection may be broken or mid-statement) it
/// goes back to the pool, whose ping drains or closes it.
pub(super) struct Lent<'a> {
    conn: PoolConnection<Any>,
    kept: &'a Kept,
}

impl Kept {
    pub(super) fn new(pool: AnyPool, max_connections: u32) -> Self {
        Self {
            pool,
            slot: (max_connections >= SMALLEST_POOL).then(Default::default),
        }
    }

    /// The kept connection if it is free, else one from the pool.
    pub(super) async fn lend(&self) -> Result<Lent<'_>, sqlx::Error> {
        let kept = self
            .slot
            .as_ref()
            .and_then(|slot| slot.lock().ok()?.conn.take());
        let conn = match kept {
            Some((conn, _)) => conn,
            None => self.pool.acquire().await?,
        };
        Ok(Lent { conn, kept: self })
    }
}

impl Lent<'_> {
    pub(super) fn conn(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }

    /// The statement went through: keep the connection for the next one,
    /// unless another is kept already (two statements ran side by side), in
    /// which case it goes back to the pool.
    pub(super) fn keep(self) {
        let Some(slot) = &self.kept.slot else { return };
        let Ok(mut held) = slot.lock() else { return };
        if held.conn.is_some() {
            return;
        }
        held.conn = Some((self.conn, Instant::now()));
        if !held.returner {
            held.returner = true;
            tokio::spawn(return_when_due(Arc::downgrade(slot)));
        }
    }

    /// `result`, keeping the connection for the next lease statement if it
    /// is `Ok` (see [`Lent::keep`]); otherwise it goes back to the pool.
    pub(super) fn keep_if_ok<T, E>(self, result: Result<T, E>) -> Result<T, E> {
        if result.is_ok() {
            self.keep();
        }
        result
    }
}

/// Hands the kept connection back to the pool once it has gone [`HOLD`]
/// unused; ends when the slot is empty or the store is gone.
async fn return_when_due(slot: Weak<Mutex<Slot>>) {
    loop {
        let wait = {
            let Some(slot) = slot.upgrade() else { return };
            let Ok(mut held) = slot.lock() else { return };
            let due = match &held.conn {
                Some((_, since)) => *since + HOLD,
                None => {
                    held.returner = false;
                    return;
                }
            };
            let now = Instant::now();
            if due <= now {
                held.returner = false;
                let conn = held.conn.take();
                drop(held);
                drop(conn);
                return;
            }
            due - now
        };
        tokio::time::sleep(wait).await;
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let conn = self
            .slot
            .as_ref()
            .and_then(|slot| slot.lock().ok()?.conn.take());
        if let Some((conn, _)) = conn {
            // Handing a connection back to the pool spawns a task; outside a
            // runtime that would panic. Without one, close it here instead.
            if tokio::runtime::Handle::try_current().is_err() {
                drop(conn.detach());
            }
        }
    }
}
