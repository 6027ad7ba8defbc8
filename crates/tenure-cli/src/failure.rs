//! How a command fails: usage errors exit 2, everything else 1.

use std::fmt;

/// A failed command.
#[derive(Debug)]
pub enum Failure {
    /// Bad input: fix the command line (exit 2).
    Usage(String),
    /// The command was fine but could not be carried out (exit 1).
    Runtime(String),
    /// Whoever read stdout went away (`tenure status | head -1`): stop
    /// quietly, exit 0.
    ReaderGone,
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Runtime(_) => 1,
            Failure::ReaderGone => 0,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Runtime(m) => f.write_str(m),
            Failure::ReaderGone => f.write_str("standard output was closed"),
        }
    }
}

impl From<tenure::Error> for Failure {
    fn from(e: tenure::Error) -> Self {
        if e.is_usage() {
            Failure::Usage(e.to_string())
        } else {
            Failure::Runtime(e.to_string())
        }
    }
}
