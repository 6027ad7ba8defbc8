//! Runs the model check once and prints what it found:
//! `cargo run --release -p tenure-model --example check [max messages in flight]`.
fn main() {
    let mut params = tenure_model::Params::protocol();
    if let Some(n) = std::env::args().nth(1) {
        params.max_in_flight = n.parse().unwrap_or(params.max_in_flight);
    }
    let started = std::time::Instant::now();
    let r = tenure_model::check(params, false);
    println!(
        "{} states ({} unique), depth {}, {:?}; reached {:?}",
        r.states,
        r.unique_states,
        r.max_depth,
        started.elapsed(),
        r.reached
    );
    for (name, trace) in &r.violations {
        println!("VIOLATED: {name}\n{trace}");
    }
}
