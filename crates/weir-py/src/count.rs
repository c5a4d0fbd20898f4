//! `weir.count(source, **options)`: what `weir count` does, for Python.
//! Each queue's worker counts what it is handed, as an application would;
//! the figures returned are the engine's per-queue counters (by the names
//! of `QueueStats::fields`, the names of `weir count --json`), checked
//! against the workers' own counts so a miscount in either is caught.
//!
//! The native function returns a dict that the package's `weir.count`
//! turns into a `weir.Report`; a run that failed part way (a trace
//! damaged after its first packets) carries its exception under "error",
//! which the package raises with the report of what was counted attached.

use crate::errors::{run_error, Error};
use crate::options::{EngineOptions, Kwargs};
use crate::run::run_to_end;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use weir::engine::Report;
use weir::stats::QueueStats;
use weir::{Handler, Packet};

/// What one worker saw: packets and bytes, by the queue that captured each
/// packet (with offloading a worker also gets chunks of other queues).
#[derive(Default)]
struct Count {
    by_queue: Vec<[u64; 2]>,
}

impl Handler for Count {
    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        let q = usize::from(p.queue().0);
        if q >= self.by_queue.len() {
            self.by_queue.resize(q + 1, [0, 0]);
        }
        self.by_queue[q][0] += 1;
        self.by_queue[q][1] += u64::from(p.wire_len());
    }
}

/// One queue's counters as a dict, by `QueueStats::fields`' names.
pub fn queue_dict<'py>(py: Python<'py>, q: &QueueStats, queue: Option<u16>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("queue", queue)?;
    for (k, v) in q.fields() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// The parts of a report every function on the engine shares: the source,
/// the counters per queue and in total, why and when it stopped.
pub fn report_dict<'py, H>(py: Python<'py>, report: &Report<H>, info: &weir::engine::SourceInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("source", &info.name)?;
    d.set_item("link_type", info.link_type.to_string())?;
    let queues = PyList::empty(py);
    for q in &report.stats.queues {
        queues.append(queue_dict(py, q, Some(q.queue.0))?)?;
    }
    d.set_item("queues", queues)?;
    d.set_item("total", queue_dict(py, &report.stats.total(), None)?)?;
    d.set_item("elapsed_s", report.elapsed.as_secs_f64())?;
    d.set_item("stop", report.stop.to_string())?;
    d.set_item("unreached_bytes", report.unreached_bytes)?;
    let rebalance = match &report.balance {
        Some(b) => {
            let r = PyDict::new(py);
            r.set_item("moves_started", b.moves_started)?;
            r.set_item("buckets_moved", b.buckets_moved)?;
            r.set_item("parked", b.parked)?;
            r.set_item("park_drops", b.park_drops)?;
            r.set_item("handover_drops", b.handover_drops)?;
            r.set_item("parked_bytes_peak", b.parked_bytes_peak)?;
            Some(r)
        }
        None => None,
    };
    d.set_item("rebalance", rebalance)?;
    d.set_item("notes", info.notes.clone())?;
    d.set_item("error", report.error().map(run_error).map(|e| e.into_value(py)))?;
    Ok(d)
}

/// `weir.count`'s native half (see the module doc).
#[pyfunction]
#[pyo3(signature = (source, options=None))]
pub fn count<'py>(py: Python<'py>, source: &str, options: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
    let k = Kwargs::new(py, "count", options)?;
    let opts = EngineOptions::take(source, &k)?;
    k.finish()?;
    let engine = opts.build(py, weir::memory::Plan::new(), 0)?;
    let info = engine.info().clone();
    let pool = *engine.pool_config();
    let placements: Vec<String> = engine.placements().iter().filter(|p| p.capture_cpu.is_some()).map(|p| p.to_string()).collect();
    let running = py.detach(move || engine.start(|_| Count::default())).map_err(|e| run_error(&e))?;
    let report = run_to_end(py, running)?;
    let clean = report.errors.is_empty();
    let all_workers = report.handlers.len() == report.stats.queues.len();
    for q in &report.stats.queues {
        let i = usize::from(q.queue.0);
        let (packets, bytes) = report.handlers.iter().filter_map(|(_, c)| c.by_queue.get(i)).fold((0, 0), |(p, b), c| (p + c[0], b + c[1]));
        if !q.balanced() || (clean && q.in_flight != 0) || (all_workers && (packets != q.delivered || bytes != q.delivered_bytes)) {
            return Err(Error::new_err(format!(
                "internal accounting error on queue {}: engine {q:?}, workers counted {packets} packets {bytes} bytes",
                q.queue
            )));
        }
    }
    let d = report_dict(py, &report, &info)?;
    d.set_item("pool", pool.to_string())?;
    d.set_item("placement", placements)?;
    Ok(d)
}
