//! The exhaustive model check of the protocol (docs/SAFETY.md), and one check
//! per rule and per assumption showing that without it a property fails.
//!
//! Each mutation prints the shortest counterexample (breadth-first), one line
//! per step: real time in ticks, the store's clock and every candidate's
//! clock after the step, what happened, the lease row and who believes it
//! leads.

use std::time::Instant;

use tenure_model::{
    check, Params, Report, Rules, BELIEF_BACKED, ONE_BELIEVER, ONE_HOLDER_PER_TERM, SAFETY,
    STALE_REFUSED, TERMS_INCREASE, TWO_TAKEOVERS,
};

fn run(what: &str, params: Params, stop_at_first: bool) -> Report {
    let started = Instant::now();
    let report = check(params, stop_at_first);
    println!(
        "{what}: {} states ({} distinct), depth {}, {:.1?}",
        report.states,
        report.unique_states,
        report.max_depth,
        started.elapsed()
    );
    report
}

#[test]
fn the_protocol_keeps_every_property_in_every_reachable_state() {
    let report = run("protocol", Params::protocol(), false);
    for (name, trace) in &report.violations {
        println!("VIOLATED: {name}\n{trace}");
    }
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // Not vacuous: runs with leaders taking over from each other are in it.
    assert_eq!(report.reached, vec![TWO_TAKEOVERS]);
    assert!(report.unique_states > 100_000);
}

/// Checks a broken variant: the checker must find a counterexample to one of
/// `expected`, and prints the shortest one.
fn must_fail(what: &str, params: Params, expected: &[&str]) {
    let report = run(what, params, true);
    let (name, trace) = report
        .violations
        .first()
        .unwrap_or_else(|| panic!("{what}: no counterexample found; the check is too weak"));
    println!("{what}: counterexample to \"{name}\":\n{trace}");
    assert!(
        expected.contains(name),
        "{what}: expected a counterexample to one of {expected:?}, got {name}"
    );
    assert!(SAFETY.contains(name));
}

fn without(change: impl FnOnce(&mut Rules)) -> Params {
    let mut params = Params::protocol();
    change(&mut params.rules);
    params
}

#[test]
fn without_store_clock_expiry_a_leader_believes_without_a_live_lease() {
    must_fail(
        "client-clock expiry",
        without(|r| r.store_clock_expiry = false),
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}

#[test]
fn without_a_deadline_counted_from_before_the_write_a_leader_believes_without_a_live_lease() {
    must_fail(
        "deadline counted from the reply",
        without(|r| r.deadline_from_t0 = false),
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}

#[test]
fn without_the_renewal_condition_a_stale_renewal_is_accepted() {
    must_fail(
        "unconditional renew",
        without(|r| r.checked_renew = false),
        &[STALE_REFUSED, ONE_BELIEVER, BELIEF_BACKED],
    );
}

#[test]
fn without_a_new_term_per_acquisition_a_term_has_two_holders() {
    must_fail(
        "term kept on acquisition",
        without(|r| r.term_increment = false),
        &[ONE_HOLDER_PER_TERM, TERMS_INCREASE],
    );
}

#[test]
fn without_loss_at_the_deadline_a_leader_believes_without_a_live_lease() {
    must_fail(
        "loss only on a failed renewal",
        without(|r| r.loss_at_deadline = false),
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}

#[test]
fn a_clock_slower_than_the_drift_bound_lets_a_leader_outlive_its_lease() {
    let mut params = Params::protocol();
    // 0.8 of the store's rate, beyond the model's 10 % bound.
    params.rates[0] = 8;
    must_fail(
        "clock rate beyond the bound",
        params,
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}

#[test]
fn a_store_clock_stepping_forward_lets_a_leader_outlive_its_lease() {
    let mut params = Params::protocol();
    // A forward step of a whole tick, far beyond the margin.
    params.store_step = params.store_rate;
    must_fail(
        "store clock stepped forward",
        params,
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}

/// At the protocol's scale a tick is a quarter of the TTL, so clock steps
/// smaller than a tick cannot show. Here the TTL is 8 ticks and the margin a
/// whole tick (one message in flight, to keep it small): a forward step of the
/// store's clock by the margin is safe, by twice the margin it is not.
fn fine_scale(step: u16) -> Params {
    let mut params = Params::protocol();
    params.ttl = 80;
    params.margin = 10;
    params.handover_window = 10;
    params.max_in_flight = 1;
    params.store_step = step;
    params
}

#[test]
fn a_store_clock_step_within_the_margin_is_safe() {
    let report = run("store clock stepped by the margin", fine_scale(10), false);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[test]
fn a_store_clock_step_beyond_the_margin_lets_a_leader_outlive_its_lease() {
    must_fail(
        "store clock stepped by twice the margin",
        fine_scale(20),
        &[ONE_BELIEVER, BELIEF_BACKED],
    );
}
