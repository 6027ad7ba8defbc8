//! Resignation and transfer requested from any process (`tenure resign`,
//! `tenure transfer`), without talking to the leader directly: the request is
//! written on the lease, the store pushes it to the leader's process (or, if
//! that push is lost, the leader's next renewal fails), and the leader steps
//! down in favour of the named member (or anyone).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::{DynStore, ElectionKey, Handover, HandoverReason, LeaseRecord, LeaseStoreExt};

/// Asks whoever leads `key` to step down; the next candidate takes over as
/// soon as it has. Errors with [`Error::NoLeader`] if nobody leads.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> tenure::Result<()> {
/// use tenure::store::{connect, ElectionKey};
/// let store = connect("memory://", &Default::default()).await?;
/// let err = tenure::handover::resign(&store, &ElectionKey::new("default", "x")).await.unwrap_err();
/// assert!(matches!(err, tenure::Error::NoLeader { .. }));
/// # Ok(()) }
/// ```
pub async fn resign(store: &DynStore, key: &ElectionKey) -> Result<LeaseRecord> {
    let window = store
        .read(key)
        .await?
        .map(|r| r.ttl)
        .unwrap_or(Duration::from_secs(10));
    store
        .request_handover(key, &Handover::Anyone, window, HandoverReason::Resign)
        .await?
        .ok_or_else(|| Error::NoLeader {
            election: key.to_string(),
        })
}

/// The longest window a transfer may ask for. The leader writes a shorter
/// one when it steps down: no longer than a live target needs to take over
/// (see [`transfer`]).
pub const MAX_TRANSFER_WINDOW: Duration = Duration::from_secs(3600);

/// Checks a transfer window: above zero and at most [`MAX_TRANSFER_WINDOW`].
pub fn check_transfer_window(window: Duration) -> Result<()> {
    if window.is_zero() || window > MAX_TRANSFER_WINDOW {
        return Err(Error::config(
            "transfer window",
            format!(
                "{window:?} is out of range; use more than 0s and at most {}s \
                 (only the target may take over during it; the default is 10s)",
                MAX_TRANSFER_WINDOW.as_secs()
            ),
        ));
    }
    Ok(())
}

/// Checks a transfer target: a valid identity, and not `*`, which the stores
/// keep for a hand-over to anyone (a resignation): a transfer "to `*`"
/// would silently resign. Use [`resign`] for that.
///
/// ```
/// assert!(tenure::handover::check_transfer_target("web-2").is_ok());
/// let err = tenure::handover::check_transfer_target("*").unwrap_err();
/// assert!(err.is_usage());
/// ```
pub fn check_transfer_target(identity: &str) -> Result<()> {
    if identity == crate::store::HANDOVER_ANYONE {
        return Err(Error::config(
            "transfer target",
            format!(
                "{identity:?} is not an identity: the stores use it to mark a hand-over to \
                 anyone; to step down for anyone use resign (`tenure resign`), or name a \
                 member's identity (`tenure status` lists them)"
            ),
        ));
    }
    crate::names::validate_identity(identity).map_err(|e| match e {
        Error::InvalidConfig { reason, .. } => Error::config("transfer target", reason),
        other => other,
    })
}

/// Asks whoever leads `key` to hand over to `identity`, a live member with a
/// fresh heartbeat, which alone may acquire for `window` (at most
/// [`MAX_TRANSFER_WINDOW`]) after the leader stepped down.
///
/// The leader ends the window sooner: when it steps down it writes a window
/// no longer than a live target needs to hear of the free lease and take
/// it (a tenth of a TTL and a second where every follower hears the store's
/// pushes; a TTL and a quarter plus half a second on PostgreSQL and MySQL,
/// where a follower out of line reads only at the lease's expiry). A target
/// that died after it was last heard from then holds the election
/// leaderless that long at most, and succession goes on as after a release.
pub async fn transfer(
    store: &DynStore,
    key: &ElectionKey,
    identity: &str,
    window: Duration,
) -> Result<LeaseRecord> {
    check_transfer_window(window)?;
    let current = Some(check_target(store, key, identity).await?).filter(|r| r.is_held());
    if let Some(holder) = current.as_ref().and_then(|r| r.holder.as_deref()) {
        if crate::store::identity_of(holder) == identity {
            return Err(Error::config(
                "transfer target",
                format!("{identity:?} already leads {key}"),
            ));
        }
    }
    // The leader needs up to a renew period to notice; the window starts then.
    let ttl = current.map(|r| r.ttl).unwrap_or_default();
    store
        .request_handover(
            key,
            &Handover::To(identity.to_string()),
            window + ttl,
            HandoverReason::Transfer,
        )
        .await?
        .ok_or_else(|| Error::NoLeader {
            election: key.to_string(),
        })
}

/// Checks that `identity` is a live member of `key` with a fresh heartbeat
/// (the rule succession uses: [`MemberRecord::is_fresh`](crate::store::MemberRecord::is_fresh)).
/// Returns the lease as read for the check.
pub(crate) async fn check_target(
    store: &DynStore,
    key: &ElectionKey,
    identity: &str,
) -> Result<LeaseRecord> {
    check_transfer_target(identity)?;
    // The lease gives the store's clock and the election's TTL.
    let lease = store.read(key).await?.ok_or_else(|| Error::NoLeader {
        election: key.to_string(),
    })?;
    let (now_us, ttl) = (lease.read_at_us, lease.ttl);
    let members = store.members(key).await?;
    if members
        .iter()
        .any(|m| m.identity == identity && m.is_fresh(now_us, ttl))
    {
        return Ok(lease);
    }
    if let Some(stale) = members.iter().find(|m| m.identity == identity) {
        return Err(Error::config(
            "transfer target",
            format!(
                "{identity:?} is registered in {key} but not heard from for {} ms \
                 (more than twice the TTL of {ttl:?}): it may have crashed; \
                 pick a live member (`tenure status` lists them)",
                now_us.saturating_sub(stale.heartbeat_at_us) / 1000
            ),
        ));
    }
    let live: Vec<&str> = members
        .iter()
        .filter(|m| m.is_fresh(now_us, ttl))
        .map(|m| m.identity.as_str())
        .collect();
    Err(Error::config(
        "transfer target",
        format!(
            "no live member of {key} has identity {identity:?}; live members: {}",
            if live.is_empty() {
                "none".to_string()
            } else {
                live.join(", ")
            }
        ),
    ))
}
