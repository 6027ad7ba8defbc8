//! Why a term began and why it ended, as types; and who may take over during
//! a hand-over. The stores keep them as short strings (`first`, `expiry`, `*`
//! for "anyone", ...); these are the only place those strings are spelled.

use std::fmt;

use serde::Serialize;

/// Why a term began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StartReason {
    /// The first term of the election.
    First,
    /// The previous holder released the lease (shutdown, `tenure run` exiting).
    Release,
    /// The previous holder's lease expired (it crashed or was cut off).
    Expiry,
    /// The previous holder resigned.
    Resign,
    /// The previous holder transferred leadership to this holder's identity.
    Transfer,
    /// The previous holder handed over to this member of higher priority.
    Preempt,
}

/// Why a term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EndReason {
    /// The holder released the lease.
    Released,
    /// The lease expired (the holder crashed, was cut off, or abandoned it).
    Expired,
    /// The holder resigned.
    Resign,
    /// The holder transferred leadership.
    Transfer,
    /// The holder handed over to a member of higher priority.
    Preempt,
}

/// Why a leader hands over: the end of its term and the start of the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandoverReason {
    /// A resignation (anyone may take over).
    Resign,
    /// A transfer to a named identity.
    Transfer,
    /// Preemption by a member of higher priority.
    Preempt,
}

/// A request to hand leadership over; see [`LeaseStore::request_handover`](super::LeaseStore::request_handover).
/// In JSON: `"anyone"` or `{"to": "<identity>"}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Handover {
    /// The leader steps down and anyone may take over (a resignation).
    Anyone,
    /// The leader steps down and only this identity may acquire during the
    /// hand-over window; after it, anyone.
    To(String),
}

/// The column value that means "anyone may take over".
const ANYONE: &str = "*";

/// The value the stores keep for a hand-over to anyone ([`Handover::Anyone`]):
/// never an identity, so never a transfer target or a candidate's identity.
pub const HANDOVER_ANYONE: &str = ANYONE;

impl Handover {
    /// The value the stores keep: `*` for anyone, else the identity.
    pub(crate) fn column(&self) -> &str {
        match self {
            Handover::Anyone => ANYONE,
            Handover::To(identity) => identity,
        }
    }

    /// Reads a stored value back; empty means no hand-over.
    pub(crate) fn from_column(value: &str) -> Option<Self> {
        match value {
            "" => None,
            ANYONE => Some(Handover::Anyone),
            identity => Some(Handover::To(identity.to_string())),
        }
    }

    /// The identity that alone may take over, if the hand-over names one.
    pub fn target(&self) -> Option<&str> {
        match self {
            Handover::Anyone => None,
            Handover::To(identity) => Some(identity),
        }
    }
}

impl StartReason {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StartReason::First => "first",
            StartReason::Release => "release",
            StartReason::Expiry => "expiry",
            StartReason::Resign => "resign",
            StartReason::Transfer => "transfer",
            StartReason::Preempt => "preempt",
        }
    }

    /// Reads a stored value back: `Ok(None)` for an empty one (a lease never
    /// acquired), `Err` naming a value no version of tenure writes.
    pub(crate) fn from_column(value: &str) -> Result<Option<Self>, String> {
        Ok(Some(match value {
            "" => return Ok(None),
            "first" => StartReason::First,
            "release" => StartReason::Release,
            "expiry" => StartReason::Expiry,
            "resign" => StartReason::Resign,
            "transfer" => StartReason::Transfer,
            "preempt" => StartReason::Preempt,
            other => return Err(format!("an unknown start reason {other:?}")),
        }))
    }

    /// Reads a stored value that must be present (a history entry's).
    pub(crate) fn required(value: &str) -> Result<Self, String> {
        Self::from_column(value)?.ok_or_else(|| "an empty start reason".to_string())
    }
}

impl EndReason {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Expired => "expired",
            EndReason::Resign => "resign",
            EndReason::Transfer => "transfer",
            EndReason::Preempt => "preempt",
        }
    }

    /// Reads a stored value back: `Ok(None)` while the term lasts (empty).
    pub(crate) fn from_column(value: &str) -> Result<Option<Self>, String> {
        Ok(Some(match value {
            "" => return Ok(None),
            "released" => EndReason::Released,
            "expired" => EndReason::Expired,
            "resign" => EndReason::Resign,
            "transfer" => EndReason::Transfer,
            "preempt" => EndReason::Preempt,
            other => return Err(format!("an unknown end reason {other:?}")),
        }))
    }
}

impl HandoverReason {
    /// The stored spelling (the same for the end of one term and the start of the next).
    pub fn as_str(self) -> &'static str {
        StartReason::from(self).as_str()
    }
}

impl From<HandoverReason> for StartReason {
    fn from(r: HandoverReason) -> Self {
        match r {
            HandoverReason::Resign => StartReason::Resign,
            HandoverReason::Transfer => StartReason::Transfer,
            HandoverReason::Preempt => StartReason::Preempt,
        }
    }
}

impl From<HandoverReason> for EndReason {
    fn from(r: HandoverReason) -> Self {
        match r {
            HandoverReason::Resign => EndReason::Resign,
            HandoverReason::Transfer => EndReason::Transfer,
            HandoverReason::Preempt => EndReason::Preempt,
        }
    }
}

impl fmt::Display for StartReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for HandoverReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_reads_back() {
        use StartReason as S;
        for r in [
            S::First,
            S::Release,
            S::Expiry,
            S::Resign,
            S::Transfer,
            S::Preempt,
        ] {
            assert_eq!(S::from_column(r.as_str()), Ok(Some(r)));
        }
        use EndReason as E;
        for r in [E::Released, E::Expired, E::Resign, E::Transfer, E::Preempt] {
            assert_eq!(E::from_column(r.as_str()), Ok(Some(r)));
        }
        assert_eq!(S::from_column(""), Ok(None));
        assert!(S::from_column("bogus").unwrap_err().contains("bogus"));
        assert_eq!(Handover::from_column(""), None);
        assert_eq!(Handover::from_column("*"), Some(Handover::Anyone));
        assert_eq!(
            Handover::from_column("b").and_then(|h| h.target().map(String::from)),
            Some("b".into())
        );
    }
}
