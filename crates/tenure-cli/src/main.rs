//! `tenure`: run a command on exactly one replica, show and manage elections.

mod args;
mod candidacy;
mod demo;
mod failure;
mod handover;
mod job;
mod migrate;
mod once;
mod output;
mod run;
mod serve;
mod status;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

/// Logs go to stderr through a writer thread: a log line never blocks the
/// runtime, even when stderr is a pipe nobody reads (lines are then dropped).
/// The returned guard flushes what is queued when `main` returns.
fn init_logging(default: &str) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("tenure-log")
        .finish(std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
    guard
}

fn main() -> ExitCode {
    // The job's guard (see job/guard.rs) is this binary in a hidden mode: it
    // starts before anything else, with no runtime and no logging.
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == job::guard::MODE) {
        return job::guard::main(args.collect());
    }
    let cli = Cli::parse();
    let _log = init_logging(match cli.command {
        Command::Run(_) | Command::Serve(_) => "info",
        _ => "warn",
    });
    // One thread is plenty for a supervisor; the deadline of a supervised job
    // does not depend on it being scheduled (see job/mod.rs).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenure: error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run(a) => run::run(a).await,
            Command::Status(a) => status::status(a).await,
            Command::Resign(a) => handover::resign(a).await,
            Command::Transfer(a) => handover::transfer(a).await,
            Command::Watch(a) => watch::watch(a).await,
            Command::Serve(a) => serve::serve(a).await,
            Command::Migrate(a) => migrate::migrate(a).await,
            Command::Demo(a) => demo::demo(a).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure::Failure::ReaderGone) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tenure: error: {f}");
            ExitCode::from(f.exit_code())
        }
    }
}
