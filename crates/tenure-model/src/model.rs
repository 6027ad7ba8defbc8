//! The protocol as a stateright [`Model`]: its steps and its properties.

use stateright::{Model, Property};

use crate::params::CANDIDATES;
use crate::protocol::{Action, Protocol};
use crate::state::{Call, CallOp, Candidate, Msg, Role, Row, State, Write};

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            stepped: false,
            row: Row::default(),
            cands: [Candidate {
                role: Role::Follower,
                call: None,
            }; CANDIDATES],
            msgs: Vec::new(),
            last_issued: None,
            term_given_twice: false,
            term_not_increased: false,
            stale_write_accepted: false,
            acquisitions: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let p = &self.params;
        actions.push(Action::Tick);
        if p.store_step > 0 && !s.stepped {
            actions.push(Action::StoreStep);
        }
        let room = self.room(s);
        for i in 0..CANDIDATES {
            let c = &s.cands[i];
            let me = i as u8;
            match c.role {
                Role::Follower => {
                    // A follower tries only a lease it read as free or
                    // expired (by the clock that judges expiry); its read
                    // may be stale by the time the write lands.
                    if c.call.is_none() && room && self.looks_free(s, i) {
                        actions.push(Action::SendAcquire(me));
                    }
                    // A follower's call is bounded by ttl/2 (campaign/follow.rs
                    // `finishing_call`); its request may still land later.
                    if c.call.is_some_and(|call| call.age >= p.ttl / 2) {
                        actions.push(Action::GiveUp(me));
                    }
                }
                Role::Leader { left, .. } => {
                    if self.believes(s, i).is_some() {
                        // Renewals come a renew period (ttl/3) after the
                        // last `t0`, or later (retries, a slow scheduler).
                        if c.call.is_none() && room && left + p.ttl / 3 <= p.local_lease() {
                            actions.push(Action::SendRenew(me));
                        }
                        if c.call.is_some() {
                            actions.push(Action::RenewError(me));
                        }
                        if room {
                            actions.push(Action::StepDown(me, None));
                            // Hand-over to the next candidate (one target
                            // stands for any: the rule admits only it).
                            let next = (me + 1) % CANDIDATES as u8;
                            actions.push(Action::StepDown(me, Some(next)));
                            let fencing = s.msgs.iter().any(|m| {
                                matches!(m, Msg::Request { from, write: Write::Fenced(_), .. } if *from == me)
                            });
                            if !fencing {
                                actions.push(Action::SendFenced(me));
                            }
                        }
                    } else if p.rules.loss_at_deadline {
                        actions.push(Action::Deadline(me));
                    }
                }
            }
        }
        let mut last = None;
        for m in &s.msgs {
            if last == Some(m) {
                continue; // the same message twice: one choice, not two
            }
            last = Some(m);
            actions.push(Action::Deliver(*m));
            actions.push(Action::Lose(*m));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let p = &self.params;
        match action {
            Action::Tick => self.tick(&mut s),
            Action::StoreStep => {
                s.stepped = true;
                Self::store_time_passes(&mut s, p.store_step);
            }
            Action::SendAcquire(i) => {
                let tag = Self::free_tag(&s, i);
                let op = CallOp::Acquire;
                s.cands[usize::from(i)].call = Some(Call { op, tag, age: 0 });
                let write = Write::Acquire;
                Self::send(
                    &mut s,
                    Msg::Request {
                        from: i,
                        write,
                        tag,
                    },
                );
            }
            Action::SendRenew(i) => {
                let Role::Leader { term, .. } = s.cands[usize::from(i)].role else {
                    return None;
                };
                let tag = Self::free_tag(&s, i);
                let op = CallOp::Renew(term);
                s.cands[usize::from(i)].call = Some(Call { op, tag, age: 0 });
                let write = Write::Renew(term);
                Self::send(
                    &mut s,
                    Msg::Request {
                        from: i,
                        write,
                        tag,
                    },
                );
            }
            Action::Deadline(i) | Action::StepDown(i, _) => {
                let Role::Leader { term, .. } = s.cands[usize::from(i)].role else {
                    return None;
                };
                // Local step-down first: nobody acts as leader after this.
                s.cands[usize::from(i)] = Candidate {
                    role: Role::Follower,
                    call: None,
                };
                let to = match action {
                    Action::StepDown(_, to) => to,
                    _ => None,
                };
                self.release(&mut s, i.into(), term, to);
            }
            Action::SendFenced(i) => {
                let term = self.believes(&s, i.into())?;
                let write = Write::Fenced(term);
                Self::send(
                    &mut s,
                    Msg::Request {
                        from: i,
                        write,
                        tag: 0,
                    },
                );
            }
            Action::GiveUp(i) | Action::RenewError(i) => s.cands[usize::from(i)].call = None,
            Action::Deliver(m) | Action::Lose(m) => {
                let k = s.msgs.iter().position(|x| *x == m)?;
                s.msgs.remove(k);
                match m {
                    _ if matches!(action, Action::Lose(_)) => {}
                    Msg::Request { from, write, tag } => {
                        if let Some(reply) = self.apply(&mut s, from, write, tag) {
                            Self::send(&mut s, reply);
                        }
                    }
                    Msg::Reply {
                        to,
                        op,
                        tag,
                        ok,
                        term,
                    } => self.answer(&mut s, to.into(), op, tag, ok, term),
                }
            }
        }
        // An answer nobody waits for any more changes nothing when it
        // arrives: drop it now, so that states differing only in such
        // answers are one state.
        let cands = s.cands;
        s.msgs.retain(|m| match *m {
            Msg::Reply { to, op, tag, .. } => cands[usize::from(to)]
                .call
                .is_some_and(|c| c.op == op && c.tag == tag),
            Msg::Request { .. } => true,
        });
        Self::renumber_terms(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER_PER_TERM, |_, s: &State| !s.term_given_twice),
            Property::always(TERMS_INCREASE, |_, s: &State| !s.term_not_increased),
            Property::always(ONE_BELIEVER, |m: &Protocol, s: &State| {
                (0..CANDIDATES)
                    .filter(|&i| m.believes(s, i).is_some())
                    .count()
                    <= 1
            }),
            Property::always(BELIEF_BACKED, |m: &Protocol, s: &State| {
                (0..CANDIDATES).all(|i| match m.believes(s, i) {
                    Some(term) => {
                        s.row.holder == Some(i as u8) && s.row.term == term && s.row.left_store > 0
                    }
                    None => true,
                })
            }),
            Property::always(STALE_REFUSED, |_, s: &State| !s.stale_write_accepted),
            Property::sometimes(TWO_TAKEOVERS, |_, s: &State| s.acquisitions >= 3),
        ]
    }

    fn format_step(&self, last: &State, action: Action) -> Option<String>
    where
        State: std::fmt::Debug,
    {
        let next = self.next_state(last, action)?;
        Some(crate::trace::step_line(self, 0, action, &next))
    }
}

/// No term is ever granted to two candidates.
pub const ONE_HOLDER_PER_TERM: &str = "one holder per term";
/// Every acquisition gets a larger term than all before it.
pub const TERMS_INCREASE: &str = "terms strictly increase";
/// At no real instant do two candidates believe they lead.
pub const ONE_BELIEVER: &str = "at most one candidate believes it leads";
/// A candidate believes it leads only while the store holds its lease, live
/// by the store's clock (so a job stopped at the deadline never outlives it).
pub const BELIEF_BACKED: &str = "belief is backed by a live lease in the store";
/// The store refuses renewals and fenced writes of a term that is not the
/// newest, or whose lease expired.
pub const STALE_REFUSED: &str = "a stale term's writes are refused";
/// Non-vacuity: the model reaches three acquisitions (two changes of leader).
pub const TWO_TAKEOVERS: &str = "three acquisitions happen";

/// The safety properties (every `always` property of the model).
pub const SAFETY: [&str; 5] = [
    ONE_HOLDER_PER_TERM,
    TERMS_INCREASE,
    ONE_BELIEVER,
    BELIEF_BACKED,
    STALE_REFUSED,
];
