//! Running an engine to its end from Python: the GIL is released while weir
//! works, and the waiting thread looks for signals every [`TICK`], so Ctrl-C
//! (SIGINT, which Python turns into `KeyboardInterrupt`) stops the capture
//! cleanly: the engine is asked to stop, its threads are joined, and the
//! `KeyboardInterrupt` is raised with nothing left running.

use pyo3::prelude::*;
use std::time::Duration;
use weir::engine::{Report, Running};

/// How often the waiting thread looks for signals.
pub const TICK: Duration = Duration::from_millis(100);

/// Waits for `running` to end and reports, or stops it on a signal's
/// exception (raised by its Python handler: `KeyboardInterrupt` for SIGINT)
/// and raises that once every thread has ended.
pub fn run_to_end<H: Send>(py: Python<'_>, running: Running<H>) -> PyResult<Report<H>> {
    loop {
        if py.detach(|| running.wait_for(TICK)) {
            return Ok(py.detach(move || running.join()));
        }
        if let Err(e) = py.check_signals() {
            running.stop_handle().stop();
            py.detach(move || drop(running.join()));
            return Err(e);
        }
    }
}
