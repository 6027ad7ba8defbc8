//! Counterexamples in readable form: one line per step, with real time, the
//! store's clock and every candidate's clock.

use std::fmt::Write as _;

use stateright::Path;

use crate::params::CANDIDATES;
use crate::protocol::{Action, Protocol};
use crate::state::{CallOp, Msg, Role, State, Write};

/// The clocks at real time `now` (ticks since the start):
/// `t=3 store=30 c0=27 c1=37 c2=56`.
pub fn clocks(m: &Protocol, now: u32, s: &State) -> String {
    let p = &m.params;
    let store = u32::from(p.store_rate) * now
        + if s.stepped {
            u32::from(p.store_step)
        } else {
            0
        };
    let mut out = format!("t={now:<2} store={store:<3}");
    for i in 0..CANDIDATES {
        let _ = write!(out, " c{i}={:<3}", p.clock(i, now));
    }
    out
}

fn write_name(w: Write) -> String {
    match w {
        Write::Acquire => "acquire".into(),
        Write::Renew(t) => format!("renew(term {t})"),
        Write::Release(t, None) => format!("release(term {t})"),
        Write::Release(t, Some(j)) => format!("hand-over(term {t} to c{j})"),
        Write::Fenced(t) => format!("fenced write(term {t})"),
    }
}

fn msg_name(m: Msg) -> String {
    match m {
        Msg::Request { from, write, .. } => format!("c{from}'s {}", write_name(write)),
        Msg::Reply {
            to, op, ok, term, ..
        } => {
            let what = match op {
                CallOp::Acquire if ok => format!("acquire: granted term {term}"),
                CallOp::Acquire => "acquire: refused".into(),
                CallOp::Renew(t) if ok => format!("renew(term {t}): ok"),
                CallOp::Renew(t) => format!("renew(term {t}): refused"),
            };
            format!("reply to c{to} [{what}]")
        }
    }
}

fn action_name(a: Action) -> String {
    match a {
        Action::Tick => "time passes".into(),
        Action::StoreStep => "store clock steps forward".into(),
        Action::SendAcquire(i) => format!("c{i} sends acquire"),
        Action::SendRenew(i) => format!("c{i} sends renew"),
        Action::Deadline(i) => format!("c{i} reaches its deadline: steps down, releases"),
        Action::StepDown(i, None) => format!("c{i} steps down, releases"),
        Action::StepDown(i, Some(j)) => format!("c{i} steps down, hands over to c{j}"),
        Action::SendFenced(i) => format!("c{i} sends a fenced write"),
        Action::GiveUp(i) => format!("c{i} stops waiting for its acquire"),
        Action::RenewError(i) => format!("c{i}'s renew fails with an error"),
        Action::Deliver(m @ Msg::Request { .. }) => format!("store applies {}", msg_name(m)),
        Action::Deliver(m) => format!("delivered: {}", msg_name(m)),
        Action::Lose(m) => format!("LOST: {}", msg_name(m)),
    }
}

/// What the row and the candidates' beliefs are after a step.
pub fn summary(m: &Protocol, s: &State) -> String {
    let row = &s.row;
    let mut out = match row.holder {
        Some(h) if row.left_store > 0 => {
            format!("row: c{h} term {} live {} more", row.term, row.left_store)
        }
        Some(h) => format!("row: c{h} term {} expired", row.term),
        None => format!("row: free, term {}", row.term),
    };
    if !m.params.rules.store_clock_expiry && row.left != row.left_store {
        let _ = write!(out, " ({} by the writer's clock)", row.left);
    }
    if let Some((j, left)) = row.handover {
        let _ = write!(out, ", reserved for c{j} {left} more");
    }
    out.push_str(" | leading:");
    let mut any = false;
    for i in 0..CANDIDATES {
        if let Role::Leader { term, left } = s.cands[i].role {
            if let Some(t) = m.believes(s, i) {
                let _ = write!(out, " c{i}(term {t}, deadline in {left})");
                any = true;
            } else {
                let _ = write!(out, " [c{i} term {term} past its deadline]");
            }
        }
    }
    if !any {
        out.push_str(" nobody");
    }
    out
}

/// One line for one step: the clocks after it, what happened, and the result.
pub fn step_line(m: &Protocol, now: u32, action: Action, next: &State) -> String {
    format!(
        "{} | {:<52} | {}",
        clocks(m, now, next),
        action_name(action),
        summary(m, next)
    )
}

/// A whole path, one line per step, with real time counted in ticks from the
/// start. Terms are ranks (the model renumbers them by order).
pub fn explain(m: &Protocol, path: &Path<State, Action>) -> String {
    let mut out = String::new();
    let steps = path.clone().into_vec();
    let mut now = 0u32;
    if let Some((first, _)) = steps.first() {
        let _ = writeln!(out, "  0. {} | start", clocks(m, now, first));
    }
    for (n, (_, action)) in steps.iter().enumerate() {
        let (Some(a), Some((next, _))) = (action, steps.get(n + 1)) else {
            continue;
        };
        if *a == Action::Tick {
            now += 1;
        }
        let _ = writeln!(out, "{:>3}. {}", n + 1, step_line(m, now, *a, next));
    }
    out
}
