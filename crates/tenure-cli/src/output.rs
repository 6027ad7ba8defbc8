//! A command's answer on standard output.
//!
//! `println!` panics when stdout is gone (`tenure status | head -1`, exit
//! 101) and cannot report a full disk. Commands print through [`out!`]
//! instead: a reader that went away ends the command quietly with exit 0
//! (as `grep` or `ripgrep` do), any other write error is a one-line error
//! and exit 1. The process keeps ignoring SIGPIPE (Rust's default): `tenure
//! run` must outlive a closed log pipe to stop its job in order.

use std::io::{self, Write};

use crate::failure::Failure;

/// Writes `text` to stdout and flushes it.
pub fn write(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(failure)
}

/// What a failed write to stdout means for the command.
pub fn failure(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::ReaderGone
    } else {
        Failure::Runtime(format!("cannot write to standard output: {e}"))
    }
}

/// `println!` that returns a [`Failure`] from the enclosing function when
/// stdout cannot take the line.
macro_rules! out {
    () => {
        $crate::output::write("\n")?
    };
    ($($arg:tt)*) => {
        $crate::output::write(&format!("{}\n", format_args!($($arg)*)))?
    };
}
pub(crate) use out;
