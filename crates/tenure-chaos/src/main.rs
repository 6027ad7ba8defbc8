//! `tenure-chaos`: fault injection against real stores and a checker for the
//! recorded history. See docs/chaos.md.
//!
//! ```text
//! tenure-chaos --store sqlite --duration 60s           # smoke
//! tenure-chaos --store postgres --duration 30m         # a long run on a private server
//! tenure-chaos --store sqlite --bug whole-seconds      # self-check: must find violations
//! ```

mod candidate;
mod check;
mod harness;
mod history;
mod report;
mod resource;
mod server;
mod shared_clock;
mod sim;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "tenure-chaos", about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    harness: harness::HarnessArgs,
    /// Exit 0 only if violations were found (for the broken-build self-checks).
    #[arg(long)]
    expect_violations: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One candidate process (started by the harness).
    #[command(hide = true)]
    Candidate(candidate::CandidateArgs),
    /// Deterministic simulation of the real elector on the in-memory store
    /// (seeded faults, paused tokio time); a sweep of seeds, or one.
    Sim(sim::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Sim(a)) = cli.cmd {
        // Quiet: the simulated stores fail on purpose all the time.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
                    .unwrap_or_else(|_| "error".into()),
            )
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
        return sim::main(a);
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
                .unwrap_or_else(|_| "warn,sqlx=error".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure-chaos: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.cmd {
        Some(Cmd::Sim(_)) => ExitCode::from(2),
        Some(Cmd::Candidate(a)) => match rt.block_on(candidate::run(a)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("candidate: {e}");
                ExitCode::from(1)
            }
        },
        None => {
            let expect = cli.expect_violations || cli.harness.expects_violations();
            let out_hint = cli.harness.out.clone();
            match rt.block_on(harness::run(cli.harness)) {
                Ok(report) => {
                    report::print(&report);
                    let out = out_hint.unwrap_or_default();
                    if let Err(e) = report::write(&report, &out) {
                        eprintln!("cannot write the report: {e}");
                    } else {
                        println!(
                            "\nreport: {}/report.json, timeline: {}/timeline.svg",
                            out.display(),
                            out.display()
                        );
                    }
                    let found = !report.violations.is_empty();
                    match (expect, found) {
                        (false, false) => {
                            println!("RESULT: ok, no violations");
                            ExitCode::SUCCESS
                        }
                        (true, true) => {
                            println!("RESULT: ok, the expected violations were caught");
                            ExitCode::SUCCESS
                        }
                        (false, true) => {
                            println!("RESULT: FAILED, violations found");
                            ExitCode::from(1)
                        }
                        (true, false) => {
                            println!("RESULT: FAILED, a broken build passed the checker");
                            ExitCode::from(1)
                        }
                    }
                }
                Err(e) => {
                    eprintln!("tenure-chaos: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
