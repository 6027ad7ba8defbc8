//! Row decoding: the rows the statements return, as lease, member and history
//! records. The column names are those of `statements.rs`.

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::Row;

use crate::store::{
    remaining_from_us, CorruptLease, ElectionKey, EndReason, Handover, HistoryRecord, LeaseRecord,
    MemberRecord, StartReason, StoredLease,
};

/// A stored value that no version of tenure writes, as a decode error.
fn bad_value(what: String) -> sqlx::Error {
    sqlx::Error::Decode(what.into())
}

/// Where a lease record's columns come from: a row of `RECORD_COLUMNS`
/// (`statements.rs`), or MariaDB's packed array of the same values (see
/// [`decode_packed_record`]). One decoding for both, so they cannot differ.
trait Columns {
    fn text(&self, name: &str) -> Result<String, sqlx::Error>;
    fn int(&self, name: &str) -> Result<i64, sqlx::Error>;
}

impl Columns for AnyRow {
    fn text(&self, name: &str) -> Result<String, sqlx::Error> {
        self.try_get(name)
    }
    fn int(&self, name: &str) -> Result<i64, sqlx::Error> {
        self.try_get(name)
    }
}

pub(super) fn decode_record(row: &AnyRow) -> Result<LeaseRecord, sqlx::Error> {
    record_from(row)
}

fn record_from(row: &impl Columns) -> Result<LeaseRecord, sqlx::Error> {
    let key = ElectionKey {
        namespace: row.text("namespace")?,
        election: row.text("election")?,
    };
    let corrupt = |reason: String| {
        sqlx::Error::Decode(Box::new(CorruptLease {
            key: key.clone(),
            reason,
        }))
    };
    // A lease column that does not decode as an integer holds a value
    // tenure never writes (SQLite keeps an overflowed sum as a REAL).
    let int = |name: &str| {
        row.int(name).map_err(|e| match e {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                corrupt(format!("its {name} column is not a 64-bit integer ({e})"))
            }
            other => other,
        })
    };
    let holder: String = row.text("holder")?;
    let expires_at_us: i64 = int("expires_us")?;
    let now_us: i64 = row.int("now_us")?;
    // Values no version of tenure writes (a hand-edited row) are refused
    // before anyone acts on them: a negative term would read as 0 and hand
    // out terms twice.
    crate::store::check_lease(StoredLease {
        term: int("term")?,
        version: int("version")?,
        ttl_us: int("ttl_us")?,
        held: !holder.is_empty(),
        expires_us: expires_at_us,
        now_us,
        handover_until_us: int("handover_until_us")?,
    })
    .map_err(corrupt)?;
    Ok(LeaseRecord {
        key,
        remaining: if holder.is_empty() {
            Duration::ZERO
        } else {
            remaining_from_us(expires_at_us, now_us)
        },
        holder: (!holder.is_empty()).then_some(holder),
        metadata: row.text("metadata")?,
        term: row.int("term")?.max(0) as u64,
        version: row.int("version")?.max(0) as u64,
        ttl: Duration::from_micros(row.int("ttl_us")?.max(0) as u64),
        acquired_at_us: row.int("acquired_us")?,
        renewed_at_us: row.int("renewed_us")?,
        expires_at_us,
        read_at_us: now_us,
        handover: Handover::from_column(&row.text("handover_to")?),
        handover_until_us: row.int("handover_until_us")?,
        start_reason: StartReason::from_column(&row.text("start_reason")?).map_err(bad_value)?,
        previous_holder: Some(row.text("prev_holder")?).filter(|h| !h.is_empty()),
        previous_expires_at_us: row.int("prev_expires_us")?,
    })
}

/// MariaDB's packed lease record: a JSON array of the values of
/// [`RECORD_FIELDS`](super::statements::RECORD_FIELDS), in that order, then
/// the server's now in µs (`Spelling::packed_heartbeat_and_read` in `mysql/dialect.rs`). A SQL
/// `NULL` (no lease row) is `None`, as `read()` finding no row.
#[cfg(feature = "mysql")]
pub(super) fn decode_packed_record(
    packed: Option<&str>,
) -> Result<Option<LeaseRecord>, sqlx::Error> {
    use super::statements::RECORD_FIELDS;
    let Some(packed) = packed else {
        return Ok(None);
    };
    let values: Vec<serde_json::Value> = serde_json::from_str(packed)
        .map_err(|e| bad_value(format!("the packed lease record is not a JSON array: {e}")))?;
    if values.len() != RECORD_FIELDS.len() + 1 {
        return Err(bad_value(format!(
            "the packed lease record has {} values, expected {}",
            values.len(),
            RECORD_FIELDS.len() + 1
        )));
    }
    record_from(&Packed(values)).map(Some)
}

/// The values of a packed record, looked up by column name.
#[cfg(feature = "mysql")]
struct Packed(Vec<serde_json::Value>);

#[cfg(feature = "mysql")]
impl Packed {
    fn get(&self, name: &str) -> Result<&serde_json::Value, sqlx::Error> {
        use super::statements::RECORD_FIELDS;
        let at = if name == "now_us" {
            Some(RECORD_FIELDS.len())
        } else {
            RECORD_FIELDS.iter().position(|f| *f == name)
        };
        at.and_then(|i| self.0.get(i))
            .ok_or_else(|| sqlx::Error::ColumnNotFound(name.to_string()))
    }
}

#[cfg(feature = "mysql")]
impl Columns for Packed {
    fn text(&self, name: &str) -> Result<String, sqlx::Error> {
        match self.get(name)? {
            serde_json::Value::String(s) => Ok(s.clone()),
            other => Err(bad_value(format!("{name} is {other}, not text"))),
        }
    }
    fn int(&self, name: &str) -> Result<i64, sqlx::Error> {
        self.get(name)?
            .as_i64()
            .ok_or_else(|| bad_value(format!("{name} is not a 64-bit integer")))
    }
}

pub(super) fn decode_member(row: &AnyRow) -> Result<MemberRecord, sqlx::Error> {
    let holder: String = row.try_get("holder")?;
    let expires_at_us: i64 = row.try_get("expires_us")?;
    let now_us: i64 = row.try_get("now_us")?;
    let mut m = MemberRecord {
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
    };
    // The lease columns are 0 unless this member holds the lease.
    crate::store::vouch_for_holder(
        &mut m,
        row.try_get("lease_renewed_us")?,
        row.try_get("lease_expires_us")?,
        now_us,
    );
    Ok(m)
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
