//! Row decoding: the rows the statements return, as lease, member and history
//! records. The column names are those of `statements.rs`.

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::store::{
    remaining_from_us, ElectionKey, EndReason, Handover, HistoryRecord, LeaseRecord, MemberRecord,
    StartReason,
};

/// A stored value that no version of tenure writes, as a decode error.
fn bad_value(what: String) -> sqlx::Error {
    sqlx::Error::Decode(what.into())
}

pub(super) fn decode_record(row: &AnyRow) -> Result<LeaseRecord, sqlx::Error> {
    let holder: String = row.try_get("holder")?;
    let expires_at_us: i64 = row.try_get("expires_us")?;
    let now_us: i64 = row.try_get("now_us")?;
    Ok(LeaseRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        remaining: if holder.is_empty() {
            Duration::ZERO
        } else {
            remaining_from_us(expires_at_us, now_us)
        },
        holder: (!holder.is_empty()).then_some(holder),
        metadata: row.try_get("metadata")?,
        term: row.try_get::<i64, _>("term")?.max(0) as u64,
        version: row.try_get::<i64, _>("version")?.max(0) as u64,
        ttl: Duration::from_micros(row.try_get::<i64, _>("ttl_us")?.max(0) as u64),
        acquired_at_us: row.try_get("acquired_us")?,
        renewed_at_us: row.try_get("renewed_us")?,
        expires_at_us,
        read_at_us: now_us,
        handover: Handover::from_column(&row.try_get::<String, _>("handover_to")?),
        handover_until_us: row.try_get("handover_until_us")?,
        start_reason: StartReason::from_column(&row.try_get::<String, _>("start_reason")?)
            .map_err(bad_value)?,
        previous_holder: Some(row.try_get::<String, _>("prev_holder")?).filter(|h| !h.is_empty()),
        previous_expires_at_us: row.try_get("prev_expires_us")?,
    })
}

pub(super) fn decode_member(row: &AnyRow) -> Result<MemberRecord, sqlx::Error> {
    let holder: String = row.try_get("holder")?;
    let expires_at_us: i64 = row.try_get("expires_us")?;
    let now_us: i64 = row.try_get("now_us")?;
    Ok(MemberRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        identity: row.try_get("identity")?,
        holder,
        metadata: row.try_get("metadata")?,
        priority: row.try_get::<i64, _>("priority")?.clamp(0, u32::MAX as i64) as u32,
        joined_at_us: row.try_get("joined_us")?,
        heartbeat_at_us: row.try_get("heartbeat_us")?,
        expires_at_us,
        live: expires_at_us > now_us,
    })
}

pub(super) fn decode_history(row: &AnyRow) -> Result<HistoryRecord, sqlx::Error> {
    let end_us: i64 = row.try_get("end_us")?;
    Ok(HistoryRecord {
        key: ElectionKey {
            namespace: row.try_get("namespace")?,
            election: row.try_get("election")?,
        },
        term: row.try_get::<i64, _>("term")?.max(0) as u64,
        holder: row.try_get("holder")?,
        start_reason: StartReason::required(&row.try_get::<String, _>("start_reason")?)
            .map_err(bad_value)?,
        start_at_us: row.try_get("start_us")?,
        end_reason: EndReason::from_column(&row.try_get::<String, _>("end_reason")?)
            .map_err(bad_value)?,
        end_at_us: (end_us != 0).then_some(end_us),
    })
}
