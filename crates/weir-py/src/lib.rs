//! The `weir` Python package's native module, `weir._weir`: weir's engine
//! for analysts who work in Python.
//!
//! - `count`: `weir.count`, the per-queue counters of a run (`weir count`).
//! - `packets`: `weir.packets`, an iterator of packets on the pull reader.
//! - `flows`: `weir.flows`, flow records of the stream layer as columns
//!   (numpy arrays), for pandas and Arrow.
//! - `streams`: `weir.streams`, the stream layer's events (stream created,
//!   data, gap, closed) as an iterator or to callbacks.
//! - `options`: keyword arguments into engine settings; `errors`:
//!   weir's errors as Python exceptions; `run`: running with the GIL
//!   released and Ctrl-C stopping the capture.
//!
//! The package around it (crates/weir-py/python/weir) adds the report
//! dataclasses, the DataFrame and Arrow conversions and the type stubs;
//! tests/ holds its pytest suite.

mod count;
mod errors;
mod flows;
mod options;
mod packets;
mod run;
mod streams;

use pyo3::prelude::*;

#[pymodule]
fn _weir(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_function(wrap_pyfunction!(count::count, m)?)?;
    m.add_function(wrap_pyfunction!(packets::packets, m)?)?;
    m.add_class::<packets::Packets>()?;
    m.add_class::<packets::Packet>()?;
    m.add_function(wrap_pyfunction!(flows::flows, m)?)?;
    m.add_function(wrap_pyfunction!(streams::streams, m)?)?;
    m.add_class::<streams::StreamEvents>()?;
    m.add_class::<streams::Event>()?;
    let fields: Vec<&str> = weir::QueueStats::default().fields().iter().map(|(k, _)| *k).collect();
    m.add("QUEUE_FIELDS", fields)?;
    m.add("END_REASONS", flows::END_REASONS.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
