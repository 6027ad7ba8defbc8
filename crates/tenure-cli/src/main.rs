//! `tenure`: run a command on exactly one replica, show and manage elections.

mod args;
mod demo;
mod failure;
mod handover;
mod migrate;
mod run;
mod status;
mod supervise;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENURE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(match cli.command {
        Command::Run(_) => "info",
        _ => "warn",
    });
    // One thread: the child is forked from the thread that lives as long as the
    // process, which is what PR_SET_PDEATHSIG is tied to (see supervise.rs).
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
            Command::Migrate(a) => migrate::migrate(a).await,
            Command::Demo(a) => demo::demo(a).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("tenure: error: {f}");
            ExitCode::from(f.exit_code())
        }
    }
}
