//! The JSON values stored under the state, hand-over, member and history keys.

use serde::{Deserialize, Serialize};

/// The lease key's companion record (no lease; survives expiry and release).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    /// The term; `None` when written by the acquiring transaction (whose
    /// revision, this key's `mod_revision`, is the term).
    pub(super) term: Option<u64>,
    /// The holder while the term lasts (by this record); `None` once released.
    pub(super) holder: Option<String>,
    pub(super) metadata: String,
    pub(super) ttl_ms: u64,
    pub(super) acquired_at_us: i64,
    pub(super) renewed_at_us: i64,
    /// Estimated expiry (client clock): informational.
    pub(super) expires_at_us: i64,
    pub(super) start_reason: String,
    pub(super) previous_holder: Option<String>,
    pub(super) previous_expires_at_us: i64,
    /// Why the term ended (`released` or a hand-over reason); empty while held.
    pub(super) end_reason: String,
    pub(super) ended_at_us: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct HandoverValue {
    pub(super) to: String,
    pub(super) reason: String,
    pub(super) window_ms: u64,
    /// True for a request on a live lease (attached to the holder's lease).
    pub(super) requested: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct MemberValue {
    pub(super) metadata: String,
    pub(super) priority: u32,
    pub(super) joined_at_us: i64,
    pub(super) heartbeat_at_us: i64,
    pub(super) ttl_ms: u64,
    pub(super) lease: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct HistoryValue {
    pub(super) holder: String,
    pub(super) start_reason: String,
    pub(super) start_at_us: i64,
    pub(super) end_reason: String,
    pub(super) end_at_us: Option<i64>,
}

/// A run record's value (`runs.rs`); its version is the key's own.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct RunValue {
    pub(super) value: String,
    /// The writer's clock: etcd has none to give.
    pub(super) updated_at_us: i64,
}
