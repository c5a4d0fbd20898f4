//! Turning errors into exit codes and messages.
//!
//! Commands return `anyhow::Result<ExitCode>`. An error caused by what the user
//! gave us (arguments, a filter expression, a malformed trace) is wrapped in
//! [`BadInput`] and exits 2, as tcpdump does; everything else exits 1.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;
use weir::engine::BuildError;
use weir::{Setting, SettingError};

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

/// How `weir` names a setting the library's errors are about: by its flag.
fn flag(s: Setting) -> &'static str {
    match s {
        Setting::Pool => "--pool",
        Setting::Cpus => "--cpus",
        Setting::Pacing => "--pps/--mbps/--speed",
        Setting::Fanout => "--fanout",
        Setting::XdpSpread => "--xdp-spread",
        Setting::Locality => "--locality",
        Setting::Balance => "--balance",
        Setting::FlowTable => "--max-flows",
        Setting::Queues => "the source's @queues",
        // No flag of its own: the library's words.
        other => other.name(),
    }
}

/// A refused setting, said with its flag: bad input.
pub fn setting_error(e: &SettingError) -> anyhow::Error {
    bad_input(anyhow::anyhow!("{}: {}", flag(e.setting), e.problem))
}

/// An engine that could not be built: a setting said with its flag, other bad
/// input exits 2, the rest 1.
pub fn build_error(e: BuildError) -> anyhow::Error {
    match e.setting_error() {
        Some(s) => setting_error(s),
        None if e.is_bad_input() => bad_input(e),
        None => anyhow::Error::new(e),
    }
}

pub fn report(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        // Standard output closed by its reader, found by a writer that returns
        // errors rather than `out!`: the same quiet end.
        Err(e) if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) => {
            ExitCode::from(BROKEN_PIPE as u8)
        }
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

/// Exit code of a run whose standard output was closed by its reader: the
/// shell's code for a death by SIGPIPE, as `yes | head -1` reports it.
const BROKEN_PIPE: i32 = 141;

/// Write one line of weir's report to standard output. A reader that went away
/// (`weir count --json t.pcap | head -c 10`) ends weir quietly, as SIGPIPE ends
/// other tools, where `println!` would panic.
pub fn write_line(args: fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.write_all(b"\n")).and_then(|()| o.flush()) {
        stdout_failed(&e);
    }
}

/// Write `lines` (whole lines, each with its newline) to standard output at
/// once, so that lines from several threads never interleave; a reader that
/// went away ends weir as [`write_line`] says.
pub fn write_block(lines: &[u8]) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(lines).and_then(|()| o.flush()) {
        stdout_failed(&e);
    }
}

/// A report's write to standard output failed: end weir, quietly if the
/// reader went away, else saying why, with 1.
fn stdout_failed(e: &std::io::Error) -> ! {
    end_if_reader_gone(e);
    eprintln!("weir: writing to standard output: {e}");
    std::process::exit(1);
}

/// A write to standard output failed: if its reader went away, end weir now,
/// quietly, with [`BROKEN_PIPE`], from whichever thread found it (a worker
/// writing records, an exporter writing messages), as SIGPIPE would. Any
/// other failure (a full device) is left to the caller to report.
pub fn end_if_reader_gone(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(BROKEN_PIPE);
    }
}

/// `println!` through [`write_line`].
macro_rules! out {
    ($($t:tt)*) => {
        $crate::exit::write_line(format_args!($($t)*))
    };
}
pub(crate) use out;
