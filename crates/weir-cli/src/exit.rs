//! Turning errors into exit codes and messages.
//!
//! Commands return `anyhow::Result<ExitCode>`. An error caused by what the user
//! gave us (arguments, a filter expression, a malformed trace) is wrapped in
//! [`BadInput`] and exits 2, as tcpdump does; everything else exits 1.

use std::fmt;
use std::process::ExitCode;

/// Marks an error as the user's input being wrong: exit code 2.
#[derive(Debug)]
pub struct BadInput(pub anyhow::Error);

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for BadInput {}

/// Wrap an error as bad input.
pub fn bad_input(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.into()))
}

pub const BAD_INPUT: u8 = 2;

pub fn report(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("weir: {e:#}");
            if e.downcast_ref::<BadInput>().is_some() {
                ExitCode::from(BAD_INPUT)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
