//! The protocol's steps ([`Action`]) and its rules ([`Protocol`]): what a
//! step does to the state. The checker's view of it is in `model.rs`, and
//! how a step reads in a trace in `trace.rs`.

use crate::params::Params;
use crate::state::{Call, CallOp, Msg, Role, Row, State, Write};

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time advances one tick; every clock advances at its rate.
    Tick,
    /// The store's clock steps forward (once, by `Params::store_step`).
    StoreStep,
    /// A follower reads `t0`, then sends an acquisition.
    SendAcquire(u8),
    /// A leader reads `t0`, then sends a renewal.
    SendRenew(u8),
    /// A leader's timer fires at its deadline: it steps down and releases.
    Deadline(u8),
    /// A leader steps down locally, then releases (`None`) or hands over.
    StepDown(u8, Option<u8>),
    /// A leader sends fenced work (it may arrive at any later time: a pause).
    SendFenced(u8),
    /// A follower stops waiting for its acquisition's answer (time-out).
    GiveUp(u8),
    /// A leader's renewal fails with an error (a reset connection); the
    /// request may still land. The leader retries.
    RenewError(u8),
    /// A message arrives.
    Deliver(Msg),
    /// A message is lost.
    Lose(Msg),
}

/// The model: parameters and nothing else (the state is [`State`]).
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Time scale, clocks, bounds, rules.
    pub params: Params,
}

impl Protocol {
    /// The term candidate `i` believes it leads, if it does: what its
    /// `is_leader()` would answer at this real instant.
    pub fn believes(&self, s: &State, i: usize) -> Option<u8> {
        match s.cands[i].role {
            Role::Leader { term, left } => {
                (!self.params.rules.loss_at_deadline || left > 0).then_some(term)
            }
            Role::Follower => None,
        }
    }

    /// Own-clock units from now until the deadline a successful write, whose
    /// `t0` was read `age` units ago, grants (0: already passed).
    pub(crate) fn deadline_left(&self, age: u16) -> u16 {
        let lease = self.params.local_lease();
        if self.params.rules.deadline_from_t0 {
            lease.saturating_sub(age)
        } else {
            lease
        }
    }

    /// Whether candidate `i`'s read of the lease would show it free.
    pub(crate) fn looks_free(&self, s: &State, i: usize) -> bool {
        let skew = if self.params.rules.store_clock_expiry {
            0
        } else {
            self.params.wall_skew[i]
        };
        s.row.holder.is_none() || s.row.left <= skew
    }

    pub(crate) fn room(&self, s: &State) -> bool {
        s.msgs.len() < self.params.max_in_flight
    }

    pub(crate) fn send(s: &mut State, m: Msg) {
        s.msgs.push(m);
        s.msgs.sort();
    }

    /// Sends a release of `term` if the network has room (else it is as if
    /// the release were lost, which the model allows anyway).
    pub(crate) fn release(&self, s: &mut State, i: usize, term: u8, to: Option<u8>) {
        if self.room(s) {
            let write = Write::Release(term, to);
            Self::send(
                s,
                Msg::Request {
                    from: i as u8,
                    write,
                    tag: 0,
                },
            );
        }
    }

    /// A tag no request of candidate `i` in flight has.
    pub(crate) fn free_tag(s: &State, i: u8) -> u8 {
        (0..)
            .find(|t| {
                !s.msgs.iter().any(|m| {
                    matches!(m, Msg::Request { from, tag, write: Write::Acquire | Write::Renew(_) } if *from == i && tag == t)
                })
            })
            .unwrap_or(0)
    }

    /// The store applies one request: each write is one conditional write.
    pub(crate) fn apply(&self, s: &mut State, from: u8, write: Write, tag: u8) -> Option<Msg> {
        let p = &self.params;
        // With rule 2, expiry is judged by the store's clock; without it, by
        // the sender's wall clock, `skew` units ahead of the store's.
        let skew = if p.rules.store_clock_expiry {
            0
        } else {
            p.wall_skew[usize::from(from)]
        };
        let row = &mut s.row;
        let live = row.left > skew;
        let store_live = row.left_store > 0;
        match write {
            Write::Acquire => {
                let free = row.holder.is_none() || !live;
                let admitted = match row.handover {
                    Some((target, left)) => target == from || left <= skew,
                    None => true,
                };
                let ok = free && admitted;
                let mut term = 0;
                if ok {
                    term = if p.rules.term_increment {
                        row.term + 1
                    } else {
                        row.term.max(1)
                    };
                    *row = Row {
                        holder: Some(from),
                        term,
                        left: p.ttl + skew,
                        left_store: p.ttl,
                        handover: None,
                    };
                    if let Some((last_term, last_holder)) = s.last_issued {
                        s.term_given_twice |= term == last_term && from != last_holder;
                        s.term_not_increased |= term <= last_term;
                    }
                    s.last_issued = Some((term, from));
                    s.acquisitions = (s.acquisitions + 1).min(3);
                }
                let op = CallOp::Acquire;
                Some(Msg::Reply {
                    to: from,
                    op,
                    tag,
                    ok,
                    term,
                })
            }
            Write::Renew(term) => {
                let ok = !p.rules.checked_renew
                    || (row.holder == Some(from) && row.term == term && live);
                if ok {
                    let current = s.last_issued == Some((term, from));
                    if !current || !store_live {
                        s.stale_write_accepted = true;
                    }
                    row.left = p.ttl + skew;
                    row.left_store = p.ttl;
                }
                let op = CallOp::Renew(term);
                Some(Msg::Reply {
                    to: from,
                    op,
                    tag,
                    ok,
                    term,
                })
            }
            Write::Release(term, to) => {
                if row.holder == Some(from) && row.term == term {
                    row.holder = None;
                    row.left = 0;
                    row.left_store = 0;
                    row.handover = to.map(|target| (target, p.handover_window + skew));
                }
                None
            }
            Write::Fenced(term) => {
                if row.holder == Some(from) && row.term == term && live {
                    let current = s.last_issued == Some((term, from));
                    if !current || !store_live {
                        s.stale_write_accepted = true;
                    }
                }
                None
            }
        }
    }

    /// Candidate `i` reads the store's answer to its call.
    pub(crate) fn answer(&self, s: &mut State, i: usize, op: CallOp, tag: u8, ok: bool, term: u8) {
        let Some(call) = s.cands[i].call.filter(|c| c.op == op && c.tag == tag) else {
            return; // an answer it no longer waits for
        };
        s.cands[i].call = None;
        let at_deadline = self.params.rules.loss_at_deadline;
        let left = self.deadline_left(call.age);
        match op {
            CallOp::Acquire if ok => {
                if at_deadline && left == 0 {
                    // Too late to act on: give it back (campaign/acquire.rs
                    // `release_stale`).
                    self.release(s, i, term, None);
                } else {
                    s.cands[i].role = Role::Leader { term, left };
                }
            }
            CallOp::Acquire => {}
            CallOp::Renew(term) => {
                let Role::Leader { left: now_left, .. } = s.cands[i].role else {
                    return;
                };
                if ok && !(at_deadline && now_left == 0) {
                    s.cands[i].role = Role::Leader { term, left };
                } else {
                    s.cands[i].role = Role::Follower;
                    if ok {
                        // Answered only at the deadline: lost(), which
                        // releases (the release names our term).
                        self.release(s, i, term, None);
                    }
                }
            }
        }
    }

    /// One tick of real time: every duration shrinks at its clock's rate.
    pub(crate) fn tick(&self, s: &mut State) {
        let p = &self.params;
        let cap = p.local_lease().max(p.ttl / 2);
        for (i, c) in s.cands.iter_mut().enumerate() {
            let r = p.rates[i];
            if let Role::Leader { left, .. } = &mut c.role {
                *left = left.saturating_sub(r);
            }
            if let Some(call) = &mut c.call {
                call.age = (call.age + r).min(cap);
            }
        }
        Self::store_time_passes(s, p.store_rate);
    }

    pub(crate) fn store_time_passes(s: &mut State, units: u16) {
        s.row.left = s.row.left.saturating_sub(units);
        s.row.left_store = s.row.left_store.saturating_sub(units);
        if let Some((target, left)) = s.row.handover {
            s.row.handover = (left > units).then(|| (target, left - units));
        }
    }

    /// Renumbers terms 1, 2, ... by order (0 stays 0: never acquired), so
    /// that states differing only in term numbers are one state.
    pub(crate) fn renumber_terms(s: &mut State) {
        let mut terms = vec![s.row.term];
        for c in &s.cands {
            if let Role::Leader { term, .. } = c.role {
                terms.push(term);
            }
            if let Some(Call {
                op: CallOp::Renew(t),
                ..
            }) = c.call
            {
                terms.push(t);
            }
        }
        for m in &s.msgs {
            match *m {
                Msg::Request {
                    write: Write::Renew(t) | Write::Release(t, _) | Write::Fenced(t),
                    ..
                } => terms.push(t),
                Msg::Request { .. } => {}
                Msg::Reply { op, term, .. } => {
                    terms.push(term);
                    if let CallOp::Renew(t) = op {
                        terms.push(t);
                    }
                }
            }
        }
        if let Some((t, _)) = s.last_issued {
            terms.push(t);
        }
        terms.retain(|&t| t != 0);
        terms.sort_unstable();
        terms.dedup();
        let rank = |t: u8| -> u8 {
            if t == 0 {
                0
            } else {
                terms
                    .iter()
                    .position(|&x| x == t)
                    .map_or(0, |k| k as u8 + 1)
            }
        };
        s.row.term = rank(s.row.term);
        for c in &mut s.cands {
            if let Role::Leader { term, .. } = &mut c.role {
                *term = rank(*term);
            }
            if let Some(Call {
                op: CallOp::Renew(t),
                ..
            }) = &mut c.call
            {
                *t = rank(*t);
            }
        }
        for m in &mut s.msgs {
            match m {
                Msg::Request {
                    write: Write::Renew(t) | Write::Release(t, _) | Write::Fenced(t),
                    ..
                } => *t = rank(*t),
                Msg::Request { .. } => {}
                Msg::Reply { op, term, .. } => {
                    *term = rank(*term);
                    if let CallOp::Renew(t) = op {
                        *t = rank(*t);
                    }
                }
            }
        }
        s.msgs.sort();
        if let Some((t, _)) = &mut s.last_issued {
            *t = rank(*t);
        }
    }
}
