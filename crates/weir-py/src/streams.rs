//! `weir.streams(source, **options)`: the stream layer's events as an
//! iterator: a stream (one direction of a TCP connection or UDP flow) was
//! created, a piece of its data arrived (in stream order, each offset
//! once), offsets were never seen (a gap), it closed. The package's
//! `StreamEvents.run(on_created=..., on_data=..., on_gap=..., on_closed=...)`
//! hands the same events to callbacks.
//!
//! Each queue's worker runs its stream layer (reassembly, cutoffs, the
//! memory arena) as `weir streams` does and sends its events over one
//! bounded channel to the Python thread: a worker that finds it full waits
//! (a trace is read no faster than Python takes its events; a live source
//! drops what finds no room in its pool, counted as capture drops). The
//! Python thread takes what is there with the GIL held and releases it
//! only to wait, in ticks, looking for signals in between: Ctrl-C stops the
//! capture, joins every thread and raises `KeyboardInterrupt`. Leaving the
//! loop early (or `close()`) stops the capture the same way.
//!
//! Events carry a stream id, the same for all the events of one stream,
//! unique within the run; `created` and `closed` carry the stream's record
//! (addresses, ports, protocol, direction, queue, and at the close its
//! packets, byte categories and why it closed).

use crate::count::report_dict;
use crate::errors::{run_error, setting_error, Error};
use crate::options::{kernel_cutoff, EngineOptions, Kwargs};
use crate::run::TICK;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::time::Duration;
use weir::engine::{RunError, Running, SourceInfo};
use weir::stream::community_id::CommunityId;
use weir::stream::{Class, Direction, Mode, Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats, Streams};

/// Events waiting between the workers and Python, at most.
const CHANNEL_EVENTS: usize = 1024;

/// Bits of a stream id below its queue number.
const ID_QUEUE_SHIFT: u32 = 40;

/// What a worker sends.
enum Ev {
    Created(u64, Stream),
    Data { id: u64, offset: u64, data: Vec<u8>, overlap: usize },
    Gap { id: u64, offset: u64, len: u64 },
    Closed(u64, Stream),
}

/// One queue's handler: every event onto the channel.
struct ToEvents {
    tx: SyncSender<Ev>,
    next_id: u64,
}

impl ToEvents {
    fn send(&mut self, e: Ev) {
        // The receiver is gone only when the run is being stopped: what is
        // left is not wanted.
        let _ = self.tx.send(e);
    }
}

impl StreamHandler for ToEvents {
    type State = u64;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(Ev::Created(id, *ctl.stream()));
        id
    }

    fn data(&mut self, _: &mut StreamCtl<'_>, id: &mut u64, piece: &Piece<'_>) {
        self.send(Ev::Data { id: *id, offset: piece.offset, data: piece.data.to_vec(), overlap: piece.overlap });
    }

    fn gap(&mut self, _: &mut StreamCtl<'_>, id: &mut u64, offset: u64, len: u64) {
        self.send(Ev::Gap { id: *id, offset, len });
    }

    fn closed(&mut self, s: &Stream, id: u64) {
        self.send(Ev::Closed(id, *s));
    }
}

/// A stream's record as a dict (the names of `weir streams --json`).
fn stream_dict<'py>(py: Python<'py>, s: &Stream) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("src", s.src.to_string())?;
    d.set_item("sport", s.sport)?;
    d.set_item("dst", s.dst.to_string())?;
    d.set_item("dport", s.dport)?;
    d.set_item("proto", s.proto)?;
    // As `weir streams --json`: None for ICMP, which streams key by their addresses.
    d.set_item("community_id", CommunityId::default().of_key(s.src, s.dst, s.proto, s.sport, s.dport, false))?;
    d.set_item("queue", s.queue.0)?;
    d.set_item("direction", if s.direction == Direction::Initiator { "initiator" } else { "responder" })?;
    for (k, v) in [
        ("first_ns", s.first_ns),
        ("last_ns", s.last_ns),
        ("packets", s.packets),
        ("bytes", s.bytes),
        ("octets", s.octets),
        ("delivered", s.delivered),
        ("gap", s.gap),
        ("duplicate", s.duplicate),
        ("discarded", s.discarded),
        ("dropped", s.dropped),
        ("refused", s.refused),
    ] {
        d.set_item(k, v)?;
    }
    d.set_item("tcp_flags", s.tcp_flags)?;
    d.set_item("cutoff", s.cutoff)?;
    d.set_item("mode", s.mode.name())?;
    d.set_item("priority", s.priority)?;
    d.set_item("close", s.closed.map(|c| c.name()))?;
    Ok(d)
}

/// The stream layer's totals as a dict, by the names of `weir streams
/// --stats` and `weir flows --stats`.
pub fn stats_dict<'py>(py: Python<'py>, t: &StreamStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let (f, k) = (&t.fragment, &t.kernel);
    for (key, v) in [
        ("packets", t.packets),
        ("stream_packets", t.to_stream + t.discarded_packets + t.dropped_packets),
        ("not_stream", t.not_ip + t.malformed),
        ("not_ip", t.not_ip),
        ("malformed", t.malformed),
        ("fragments", t.fragments),
        ("untracked", t.untracked),
        ("to_stream", t.to_stream),
        ("discarded_packets", t.discarded_packets),
        ("dropped_packets", t.dropped_packets),
        ("streams", t.streams),
        ("connections", t.connections),
        ("handed_in", t.handed_in),
        ("evicted", t.evicted),
        ("active_records", t.active_records),
        ("bytes", t.bytes),
        ("delivered_bytes", t.delivered),
        ("gap_bytes", t.gap),
        ("duplicate_bytes", t.duplicate),
        ("discarded_bytes", t.discarded),
        ("dropped_bytes", t.dropped),
        ("refused_bytes", t.refused),
        ("pieces", t.pieces),
        ("memory_peak", t.memory_peak),
    ] {
        d.set_item(key, v)?;
    }
    let sub = |pairs: &[(&str, u64)]| -> PyResult<Bound<'py, PyDict>> {
        let s = PyDict::new(py);
        for (key, v) in pairs {
            s.set_item(key, v)?;
        }
        Ok(s)
    };
    d.set_item(
        "closed",
        sub(&[
            ("fin", t.closed_fin),
            ("rst", t.closed_rst),
            ("idle", t.closed_idle),
            ("evicted", t.evicted),
            ("end_of_input", t.closed_end),
            ("reused", t.closed_reused),
        ])?,
    )?;
    d.set_item(
        "ip_fragments",
        sub(&[
            ("fragments", f.fragments),
            ("fragments_reassembled", f.fragments_reassembled),
            ("datagrams_reassembled", f.datagrams_reassembled),
            ("timed_out", f.datagrams_timed_out),
            ("evicted", f.datagrams_evicted),
            ("over_memory", f.datagrams_over_memory),
            ("too_big", f.datagrams_too_big),
            ("overlapping", f.datagrams_overlapping),
            ("malformed", f.malformed),
            ("inconsistent", f.inconsistent),
        ])?,
    )?;
    d.set_item(
        "kernel_cutoff",
        sub(&[
            ("installed", k.installed),
            ("full", k.full),
            ("failed", k.failed),
            ("taken", k.taken),
            ("evicted", k.evicted),
            ("displaced", k.displaced),
            ("lost", k.lost),
            ("refreshed", k.refreshed),
            ("in_map", k.in_map()),
            ("packets", k.packets),
            ("after_end", k.after_end),
            ("octets", k.octets),
        ])?,
    )?;
    Ok(d)
}

/// One event of the stream layer.
#[pyclass(module = "weir", frozen)]
pub struct Event {
    /// `created`, `data`, `gap` or `closed`.
    #[pyo3(get)]
    kind: &'static str,
    /// The stream's id, unique within the run.
    #[pyo3(get)]
    id: u64,
    /// `data`: the stream offset of its first byte; `gap`: of the first byte never seen.
    #[pyo3(get)]
    offset: Option<u64>,
    /// `data`: the bytes.
    #[pyo3(get)]
    data: Option<Py<PyBytes>>,
    /// `data`: bytes at its start repeating the end of the previous piece.
    #[pyo3(get)]
    overlap: Option<usize>,
    /// `gap`: how many offsets were never seen.
    #[pyo3(get)]
    length: Option<u64>,
    /// `created`, `closed`: the stream's record.
    #[pyo3(get)]
    stream: Option<Py<PyDict>>,
}

#[pymethods]
impl Event {
    fn __repr__(&self, py: Python<'_>) -> String {
        match self.kind {
            "data" => format!(
                "weir.Event(data, id={}, offset={}, {} bytes)",
                self.id,
                self.offset.unwrap_or(0),
                self.data.as_ref().map_or(0, |d| d.bind(py).as_bytes().len())
            ),
            "gap" => format!("weir.Event(gap, id={}, offset={}, length={})", self.id, self.offset.unwrap_or(0), self.length.unwrap_or(0)),
            kind => {
                format!("weir.Event({kind}, id={}, {})", self.id, self.stream.as_ref().map_or(String::new(), |s| s.bind(py).to_string()))
            }
        }
    }
}

impl Event {
    fn of(py: Python<'_>, e: Ev) -> PyResult<Event> {
        let blank = |kind, id| Event { kind, id, offset: None, data: None, overlap: None, length: None, stream: None };
        Ok(match e {
            Ev::Created(id, s) => Event { stream: Some(stream_dict(py, &s)?.unbind()), ..blank("created", id) },
            Ev::Closed(id, s) => Event { stream: Some(stream_dict(py, &s)?.unbind()), ..blank("closed", id) },
            Ev::Data { id, offset, data, overlap } => {
                Event { offset: Some(offset), data: Some(PyBytes::new(py, &data).unbind()), overlap: Some(overlap), ..blank("data", id) }
            }
            Ev::Gap { id, offset, len } => Event { offset: Some(offset), length: Some(len), ..blank("gap", id) },
        })
    }
}

/// The iterator of `weir.streams`.
#[pyclass(module = "weir", unsendable)]
pub struct StreamEvents {
    running: Option<Running<Streams<ToEvents>>>,
    rx: Option<Receiver<Ev>>,
    info: SourceInfo,
    /// The end's report, as the package's `weir.Report` takes it, and the
    /// stream layer's totals.
    end: Option<(Py<PyDict>, Py<PyDict>)>,
}

impl StreamEvents {
    /// Joins the run (asking it to stop first unless it ended by itself),
    /// keeps its report and totals, and gives its error.
    fn finish(&mut self, py: Python<'_>, stop: bool) -> PyResult<Option<PyErr>> {
        let Some(running) = self.running.take() else { return Ok(None) };
        if stop {
            running.stop_handle().stop();
        }
        // Workers waiting on a full channel find it gone and go on.
        self.rx = None;
        let report = py.detach(move || running.join());
        let mut total = StreamStats::default();
        for (_, layer) in &report.handlers {
            total.add(&layer.stats());
        }
        let delivered = report.stats.total().delivered;
        if !stop && report.handlers.len() == report.stats.queues.len() && (total.packets != delivered || !total.packets_add_up()) {
            return Err(Error::new_err(format!(
                "internal accounting error: the engine delivered {delivered} packets, the stream layer counted {total:?}"
            )));
        }
        let r = report_dict(py, &report, &self.info)?;
        self.end = Some((r.unbind(), stats_dict(py, &total)?.unbind()));
        Ok(report.error().map(run_error))
    }
}

#[pymethods]
impl StreamEvents {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Event>> {
        loop {
            let Some(rx) = self.rx.take() else { return Ok(None) };
            // Asked before the channel: threads that have ended sent all they
            // will, so an empty channel then is the end.
            let ended = self.running.as_ref().is_none_or(|r| r.wait_for(Duration::ZERO));
            match rx.try_recv() {
                Ok(e) => {
                    self.rx = Some(rx);
                    return Event::of(py, e).map(Some);
                }
                Err(_) if ended => {
                    self.rx = Some(rx);
                    return self.finish(py, false)?.map_or(Ok(None), Err);
                }
                Err(_) => {}
            }
            // The receiver goes with the waiting thread and comes back.
            let (rx, got) = py.detach(move || {
                let got = rx.recv_timeout(TICK);
                (rx, got)
            });
            self.rx = Some(rx);
            // A signal that came while waiting is raised here, with the run
            // stopped, rather than in the caller's loop after the event.
            if let Err(e) = py.check_signals() {
                self.finish(py, true)?;
                return Err(e);
            }
            match got {
                Ok(e) => return Event::of(py, e).map(Some),
                Err(RecvTimeoutError::Timeout) => {}
                // Every worker is gone (their handlers panicked): wait for the rest to end.
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some(r) = &self.running {
                        py.detach(|| r.wait_for(TICK));
                    }
                }
            }
        }
    }

    /// Stops the capture and ends the iteration.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, true).map(drop)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// (report, stream-layer totals) once the iteration has ended.
    fn _end<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        match &self.end {
            Some((r, s)) => Ok((r.bind(py).clone(), s.bind(py).clone())),
            None => Err(PyRuntimeError::new_err("the stream events are not all taken yet: the report comes at the end")),
        }
    }
}

impl Drop for StreamEvents {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop_handle().stop();
            self.rx = None;
            drop(running.join());
        }
    }
}

/// `weir.streams`' native half: starts the stream layer, returns the iterator.
#[pyfunction]
#[pyo3(signature = (source, options=None))]
pub fn streams<'py>(py: Python<'py>, source: &str, options: Option<&Bound<'py, PyDict>>) -> PyResult<StreamEvents> {
    let k = Kwargs::new(py, "streams", options)?;
    let opts = EngineOptions::take(source, &k)?;
    let mode: Mode = match k.string("mode")? {
        Some(s) => s.parse().map_err(|e| crate::errors::bad_option("mode", e))?,
        None => Mode::TcpFast,
    };
    let classes: Vec<Class> = match k.take_list("classes")? {
        Some(list) => list.iter().map(|c| Class::parse(c).map_err(|e| crate::errors::bad_option("classes", e))).collect::<PyResult<_>>()?,
        None => Vec::new(),
    };
    let hold = k.int("hold_limit", 0, weir::stream::reassembly::HoldLimit::MAX)?.unwrap_or(262_144);
    let piece = k.int("piece", 1, weir::stream::MAX_PIECE as u64)?.unwrap_or(16_384) as usize;
    let cfg = StreamConfig {
        mode,
        midstream: k.flag("midstream", false)?,
        receive_window: !k.flag("ignore_window", false)?,
        cutoff: k.int("cutoff", 0, u64::MAX)?,
        classes,
        hold_limit: weir::stream::reassembly::HoldLimit::new(hold).map_err(|e| setting_error(&e))?,
        piece,
        piece_overlap: k.int("piece_overlap", 0, weir::stream::MAX_PIECE as u64)?.unwrap_or(0) as usize,
        flush_timeout_ns: k.int("flush_timeout_ms", 1, 10 * 366 * 86_400_000)?.map(|ms| ms * 1_000_000),
        idle_timeout_ns: k.int("idle_timeout", 1, 10 * 366 * 86_400)?.unwrap_or(300) * 1_000_000_000,
        max_connections: k.int("max_streams", 1, u64::from(u32::MAX - 1))?.map_or(1_000_000, |n| n as usize),
        prealloc_connections: k.int("prealloc", 0, u64::from(u32::MAX))?.map_or(weir::stream::PREALLOC_CONNECTIONS, |n| n as usize),
        memory: k.int("memory", 0, 1 << 40)?.unwrap_or(256 << 20),
        ..StreamConfig::default()
    };
    let (kernel_flows, install_after) = kernel_cutoff(&k)?;
    k.finish()?;
    let cfg = StreamConfig { kernel_install_after: install_after, filter_engine: opts.filter_engine(), ..cfg };
    cfg.check().map_err(|e| setting_error(&e))?;
    let mut plan = cfg.memory_plan(1);
    plan.add(format!("Python's event queue ({CHANNEL_EVENTS} pieces of {piece} bytes)"), (CHANNEL_EVENTS * piece) as u64);
    // Without a cutoff no stream is ever installed: no flow map then.
    let cut = cfg.cutoff.is_some() || cfg.classes.iter().any(|c| matches!(c.cutoff, Some(Some(_))));
    let engine = opts.build(py, plan, if cut { kernel_flows } else { 0 })?;
    let info = engine.info().clone();
    let (tx, rx) = sync_channel(CHANNEL_EVENTS);
    let running = py
        .detach(|| engine.start_streams(&cfg, |q| ToEvents { tx: tx.clone(), next_id: u64::from(q.0) << ID_QUEUE_SHIFT }))
        .map_err(|e| match e {
            RunError::Setting(s) => setting_error(&s),
            other => run_error(&other),
        })?;
    Ok(StreamEvents { running: Some(running), rx: Some(rx), info, end: None })
}
