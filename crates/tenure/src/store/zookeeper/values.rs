//! The JSON values stored in the znodes.

use serde::{Deserialize, Serialize};

/// The ephemeral `leader` znode: who holds the election, under which term.
/// Its `ctime` is the acquisition and its `mtime` the last renewal, both by
/// the ZooKeeper leader's clock.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct LeaderValue {
    pub(super) holder: String,
    pub(super) term: u64,
    pub(super) metadata: String,
    pub(super) ttl_ms: u64,
    /// A hand-over request (`tenure resign`/`transfer`) marked on the live lease.
    pub(super) handover: Option<HandoverValue>,
}

/// A hand-over request (on the leader znode) or window (the `handover` znode,
/// open until its `ctime` plus `window_ms`, by the ZooKeeper leader's clock).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct HandoverValue {
    pub(super) to: String,
    pub(super) reason: String,
    pub(super) window_ms: u64,
}

/// The persistent `state` znode: what the last term was and how it ended.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    pub(super) term: u64,
    /// The holder while the term lasts; `None` once it ended by release or hand-over.
    pub(super) holder: Option<String>,
    pub(super) metadata: String,
    pub(super) ttl_ms: u64,
    pub(super) start_reason: String,
    pub(super) previous_holder: Option<String>,
    pub(super) previous_expires_at_us: i64,
    /// Why the term ended (`released` or a hand-over reason); empty while held.
    pub(super) end_reason: String,
    pub(super) ended_at_us: i64,
}

/// An ephemeral member znode; `ctime` is the join, `mtime` the last heartbeat.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct MemberValue {
    pub(super) metadata: String,
    pub(super) priority: u32,
    pub(super) ttl_ms: u64,
}

/// A persistent `history/<term>` znode.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct HistoryValue {
    pub(super) holder: String,
    pub(super) start_reason: String,
    pub(super) start_at_us: i64,
    pub(super) end_reason: String,
    pub(super) end_at_us: Option<i64>,
}

/// A run record's znode (`runs.rs`): its `mtime` is when it was written,
/// its data version + 1 the record's version.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct RunValue {
    pub(super) value: String,
    /// Kept at least this long after the write (the znode's `mtime`).
    pub(super) keep_ms: u64,
}
