//! A model of tenure's election protocol, checked exhaustively with
//! [stateright](https://docs.rs/stateright).
//!
//! One store with its own clock holds one lease row; three candidates with
//! clocks of different rates and origins acquire, renew, release and hand over
//! the lease, each as one conditional write; messages are delayed (delivered
//! in any order), lost, or answered after the caller gave up; a leader's
//! fenced work may arrive at the store at any later time (a pause). The
//! leader's belief follows tenure's local deadline rule. The checker visits
//! every state within the horizon and checks the properties of
//! `docs/SAFETY.md` in each; [`Rules`] switches single rules off, and the
//! checker must then find a counterexample.
//!
//! ```
//! use tenure_model::{check, Params};
//! let mut params = Params::protocol();
//! params.max_in_flight = 1; // a small model for the example
//! let report = check(params, false);
//! assert!(report.violations.is_empty());
//! ```

mod model;
mod params;
mod protocol;
mod state;
mod trace;

pub use model::{
    BELIEF_BACKED, ONE_BELIEVER, ONE_HOLDER_PER_TERM, SAFETY, STALE_REFUSED, TERMS_INCREASE,
    TWO_TAKEOVERS,
};
pub use params::{Params, Rules, CANDIDATES};
pub use protocol::{Action, Protocol};
pub use state::{Call, CallOp, Candidate, Msg, Role, Row, State, Write};
pub use trace::{clocks, explain, summary};

use stateright::{Checker, HasDiscoveries, Model};

/// What one exhaustive check found.
#[derive(Debug)]
pub struct Report {
    /// States visited.
    pub states: usize,
    /// Distinct states.
    pub unique_states: usize,
    /// The longest path explored, in steps.
    pub max_depth: usize,
    /// Violated safety properties, each with its shortest counterexample
    /// (breadth-first search), one line per step.
    pub violations: Vec<(&'static str, String)>,
    /// `sometimes` properties that were reached (non-vacuity).
    pub reached: Vec<&'static str>,
}

/// Checks `params` breadth-first over every state within the horizon. With
/// `stop_at_first`, stops at the first violation (the shortest of all).
pub fn check(params: Params, stop_at_first: bool) -> Report {
    let model = Protocol { params };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let mut builder = model.clone().checker().threads(threads);
    if stop_at_first {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = builder.spawn_bfs().join();
    let mut violations = Vec::new();
    let mut reached = Vec::new();
    for (name, path) in checker.discoveries() {
        if SAFETY.contains(&name) {
            violations.push((name, explain(&model, &path)));
        } else {
            reached.push(name);
        }
    }
    violations.sort();
    reached.sort();
    Report {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        violations,
        reached,
    }
}
