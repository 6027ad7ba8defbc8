//! The model's state: the store's lease row, the candidates, the network, and
//! ghost variables that only the properties read.
//!
//! The state keeps durations, never instants: how long until the lease
//! expires by the store's clock, how long until a leader's deadline by its
//! own clock, how long ago a call's `t0` was read. A tick of real time
//! shortens each at the rate of the clock it is counted on. Terms are kept
//! by rank (renumbered 1, 2, ... in order after each step; only their order
//! and equality matter). So the state space is finite, and the check covers
//! runs of any length, not only up to a horizon.

use crate::params::CANDIDATES;

/// The lease row, as the store keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Row {
    /// The holding candidate, if any.
    pub holder: Option<u8>,
    /// The term of the last acquisition (0: never acquired).
    pub term: u8,
    /// Store-clock units until expiry, in the frame that decides it: the
    /// store's clock (rule 2), or with that rule off, the writer's wall clock
    /// (0: expired).
    pub left: u16,
    /// Store-clock units until expiry by the store's own clock, whatever
    /// decides it (for the properties).
    pub left_store: u16,
    /// A hand-over reserves the free lease for a candidate for some units.
    pub handover: Option<(u8, u16)>,
}

/// A candidate's belief.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Not leading.
    Follower,
    /// Leading `term`; `left` units of its own clock until its deadline.
    Leader {
        /// The fencing token.
        term: u8,
        /// Own-clock units until the local deadline (0: passed).
        left: u16,
    },
}

/// The call a candidate is waiting for (the campaign makes one at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Call {
    /// What was asked.
    pub op: CallOp,
    /// Tells this call's answer from answers to calls it gave up on.
    pub tag: u8,
    /// Own-clock units since `t0`, read just before the call was sent
    /// (capped where it no longer makes a difference).
    pub age: u16,
}

/// A call that is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallOp {
    /// Acquire the lease.
    Acquire,
    /// Renew the lease of this term.
    Renew(u8),
}

/// One candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Candidate {
    /// What it believes.
    pub role: Role,
    /// The call in flight it still waits for.
    pub call: Option<Call>,
}

/// A message in flight. Delivery in any order models delays; loss is a step
/// of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// A request on its way to the store.
    Request {
        /// Sender.
        from: u8,
        /// The write.
        write: Write,
        /// The call's tag (acquire and renew).
        tag: u8,
    },
    /// The store's answer on its way back.
    Reply {
        /// Recipient.
        to: u8,
        /// The call it answers.
        op: CallOp,
        /// The call's tag.
        tag: u8,
        /// Whether the write matched.
        ok: bool,
        /// The term an acquisition got.
        term: u8,
    },
}

/// A conditional write at the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Write {
    /// Acquire a free or expired lease.
    Acquire,
    /// Renew the lease of this term.
    Renew(u8),
    /// Clear the holder of this term, reserving the lease for a target if any
    /// (hand-over) or for no one (release).
    Release(u8, Option<u8>),
    /// Work fenced by the store (SQL `begin_fenced`): commits only while this
    /// term's lease is live.
    Fenced(u8),
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Whether the store's clock has stepped forward (once).
    pub stepped: bool,
    /// The lease row.
    pub row: Row,
    /// The candidates.
    pub cands: [Candidate; CANDIDATES],
    /// Messages in flight, sorted (a multiset).
    pub msgs: Vec<Msg>,
    /// Ghost: the last acquisition the store granted, as `(term, candidate)`.
    pub last_issued: Option<(u8, u8)>,
    /// Ghost: the store granted a term to a candidate after granting the
    /// same term to another.
    pub term_given_twice: bool,
    /// Ghost: the store granted a term not larger than the one before.
    pub term_not_increased: bool,
    /// Ghost: the store accepted a renewal or fenced write that was not the
    /// newest tenure's, or came after that tenure expired by the store's
    /// clock.
    pub stale_write_accepted: bool,
    /// Ghost: acquisitions so far, counted up to 3 (for non-vacuity).
    pub acquisitions: u8,
}
