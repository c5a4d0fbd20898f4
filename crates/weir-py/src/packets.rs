//! `weir.packets(source, **options)`: an iterator of packets on the engine's
//! pull reader (`weir::engine::Reader`, what the libpcap library reads).
//!
//! The contract:
//! - Each item is a `weir.Packet`: `ts_ns`, `ts`, `queue`, `wire_len`,
//!   `caplen` (also `len(p)`), stay as they are; `p.data` (a read-only
//!   `memoryview`) and `p.bytes()` may be taken until the next item is
//!   taken, or the iterator ends or is closed. After that they raise
//!   `weir.StalePacketError`, never read freed memory. A view or bytes taken
//!   in time stay valid for as long as they are referenced: they are a copy
//!   made at the first access, so an iteration that only reads metadata
//!   copies nothing.
//! - Python pays per chunk, not per packet: the reader hands out the packets
//!   of the chunk it holds (M of them, 256 by default) with no system call,
//!   no allocation and no clock read; `__next__` writes the packet's fields
//!   into one of two item objects it owns and reuses whichever nobody else
//!   holds (a `for` loop's variable holds the one before, so two alternate).
//!   An item the caller keeps (a list of packets) is never reused: a new
//!   one is made. Only when the reader has nothing ready is the GIL released,
//!   to wait for the next chunk (on a trace read at top speed, looking again
//!   for up to [`SPIN`] before sleeping) in ticks of [`TICK`], looking for
//!   signals between them: Ctrl-C stops the capture and raises
//!   `KeyboardInterrupt`.
//! - The engine counts every packet: `stats()` at any time; packets captured
//!   and never taken (the loop left early, `close()`) are counted `unread`.
//! - The end of input, a packet limit (`packets=`) or a time limit
//!   (`duration=`, checked between chunks and every [`TIME_CHECK`] packets)
//!   end the iteration; a capture that failed (a trace damaged after its
//!   first packets) raises its error after the packets before the damage.

#![allow(unsafe_code)]

use crate::count::queue_dict;
use crate::errors::{run_error, StalePacketError};
use crate::options::{EngineOptions, Kwargs};
use crate::run::TICK;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use sync_wrapper::SyncWrapper;
use weir::engine::{Read, Reader, SourceInfo, StopHandle, StopReason};
use weir::stats::{Snapshot, StatsReader};

/// Why an iteration this iterator ended at its time limit stopped: the
/// engine's words for it.
const TIME_LIMIT: &str = "time limit reached";

/// How long the Python thread looks again for a chunk of a trace read at top
/// speed, yielding the CPU in between, before it sleeps: the next chunk is
/// due within microseconds, and on a busy machine a thread that slept waits
/// for a CPU again (1M packets here: 0.158 s against 0.241 s sleeping at
/// once, median of 9 at a load of 5 on 2 CPUs; 50 µs gave 0.200 s, 1 ms 0.160 s).
/// Live and paced sources sleep at once: their next packet may be far off.
const SPIN: Duration = Duration::from_micros(200);

/// Packets between two looks at the clock for a time limit.
const TIME_CHECK: u32 = 4096;

/// A packet's fields, taken out of the reader's borrow.
#[derive(Copy, Clone)]
struct Fields {
    /// Address of its first captured byte, valid while the reader holds its chunk.
    addr: usize,
    caplen: u32,
    wire_len: u32,
    ts_ns: u64,
    queue: u16,
}

impl Fields {
    fn of(p: &weir::Packet<'_>) -> Fields {
        Fields { addr: p.data().as_ptr() as usize, caplen: p.caplen(), wire_len: p.wire_len(), ts_ns: p.ts_ns(), queue: p.queue().0 }
    }
}

/// A captured packet (see the module doc for how long its data is there).
///
/// Frozen, its fields atomics: the iterator rewrites a reused item through
/// `&self` with plain stores (every access holds the GIL, which orders
/// them; `Relaxed` is enough), and reading a field takes no borrow flag.
#[pyclass(module = "weir", frozen)]
pub struct Packet {
    addr: AtomicUsize,
    caplen: AtomicU32,
    wire_len: AtomicU32,
    ts_ns: AtomicU64,
    queue: AtomicU16,
    /// The hand-out this item holds: its data is readable while it is the
    /// iterator's current one (`now`).
    turn: AtomicU64,
    now: Arc<AtomicU64>,
    /// The copy of its bytes, once asked for, and the hand-out it is of.
    copy: Mutex<Option<(u64, Py<PyBytes>)>>,
}

impl Packet {
    fn new(f: Fields, turn: u64, now: Arc<AtomicU64>) -> Packet {
        Packet {
            addr: AtomicUsize::new(f.addr),
            caplen: AtomicU32::new(f.caplen),
            wire_len: AtomicU32::new(f.wire_len),
            ts_ns: AtomicU64::new(f.ts_ns),
            queue: AtomicU16::new(f.queue),
            turn: AtomicU64::new(turn),
            now,
            copy: Mutex::new(None),
        }
    }

    fn set(&self, f: Fields, turn: u64) {
        self.addr.store(f.addr, Relaxed);
        self.caplen.store(f.caplen, Relaxed);
        self.wire_len.store(f.wire_len, Relaxed);
        self.ts_ns.store(f.ts_ns, Relaxed);
        self.queue.store(f.queue, Relaxed);
        self.turn.store(turn, Relaxed);
    }

    /// Its bytes as a Python `bytes`, copied at the first call.
    fn copied<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let turn = self.turn.load(Relaxed);
        let mut copy = self.copy.lock().map_err(|_| PyRuntimeError::new_err("a packet's copy was poisoned"))?;
        if let Some((t, b)) = &*copy {
            if *t == turn {
                return Ok(b.bind(py).clone());
            }
        }
        if turn != self.now.load(Relaxed) {
            return Err(StalePacketError::new_err(
                "a packet's data can be read until the next packet is taken (or the iterator ends): \
                 take p.bytes() or bytes(p.data) before moving on to keep it",
            ));
        }
        let len = self.caplen.load(Relaxed) as usize;
        // SAFETY: the item is the iterator's current one (`turn == now`):
        // its fields come from the packet `Reader::next` returned last, which
        // stays valid until the reader's next call or its close, and
        // `Packets` moves `now` on (with the GIL held, as here) before either.
        let data = unsafe { std::slice::from_raw_parts(self.addr.load(Relaxed) as *const u8, len) };
        let b = PyBytes::new(py, data);
        *copy = Some((turn, b.clone().unbind()));
        Ok(b)
    }
}

#[pymethods]
impl Packet {
    /// Capture time, nanoseconds since the Unix epoch.
    #[getter]
    fn ts_ns(&self) -> u64 {
        self.ts_ns.load(Relaxed)
    }

    /// Capture time, seconds since the Unix epoch (a float, as dpkt's and scapy's).
    #[getter]
    fn ts(&self) -> f64 {
        self.ts_ns.load(Relaxed) as f64 / 1e9
    }

    /// The queue that captured it.
    #[getter]
    fn queue(&self) -> u16 {
        self.queue.load(Relaxed)
    }

    /// Its length on the wire.
    #[getter]
    fn wire_len(&self) -> u32 {
        self.wire_len.load(Relaxed)
    }

    /// Bytes captured (at most `wire_len`); also `len(p)`.
    #[getter]
    fn caplen(&self) -> u32 {
        self.caplen.load(Relaxed)
    }

    fn __len__(&self) -> usize {
        self.caplen.load(Relaxed) as usize
    }

    /// The captured bytes, a read-only memoryview; take it before the next packet.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(self.copied(py)?.as_any())
    }

    /// The captured bytes as `bytes` (a copy that stays); take it before the next packet.
    fn bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.copied(py)
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.copied(py)
    }

    fn __repr__(&self) -> String {
        format!("weir.Packet(ts_ns={}, queue={}, wire_len={}, caplen={})", self.ts_ns(), self.queue(), self.wire_len(), self.caplen())
    }
}

/// References to an item: 1 when only the iterator holds it, so it may be
/// written again without anyone seeing it change.
fn refcount(p: &Py<Packet>) -> isize {
    // SAFETY: `p` is a strong reference the caller holds (with the GIL, as
    // every method of `Packets` runs), so the object is alive while its
    // count is read.
    unsafe { pyo3::ffi::Py_REFCNT(p.as_ptr()) }
}

/// What one step of the reader gave, outside its borrow.
enum Step {
    Packet(Fields),
    Idle,
    End,
}

/// Waits for the reader's next packet: looks again, giving up the CPU in
/// between, for up to `spin`, then sleeps until one comes or [`TICK`]
/// passes.
fn wait(reader: &mut Reader, spin: Duration) -> Step {
    let until = Instant::now() + spin;
    loop {
        std::thread::yield_now();
        match step(reader, Duration::ZERO) {
            Step::Idle if Instant::now() < until => {}
            Step::Idle => return step(reader, TICK),
            s => return s,
        }
    }
}

fn step(reader: &mut Reader, timeout: Duration) -> Step {
    match reader.next(timeout) {
        Read::Packet(p) => Step::Packet(Fields::of(&p)),
        Read::Idle => Step::Idle,
        Read::End => Step::End,
    }
}

/// The iterator of `weir.packets` (see the module doc).
#[pyclass(module = "weir")]
pub struct Packets {
    /// Only reached through `&mut self`, so the iterator is `Sync` whatever
    /// the reader is.
    reader: Option<SyncWrapper<Reader>>,
    stats: StatsReader,
    stop: StopHandle,
    info: SourceInfo,
    /// The hand-out now current: items of another are stale.
    now: Arc<AtomicU64>,
    /// The item handed out last, and the one before it.
    last: Option<Py<Packet>>,
    spare: Option<Py<Packet>>,
    deadline: Option<Instant>,
    until_time_check: u32,
    /// How long to look again before sleeping (see [`SPIN`]).
    spin: Duration,
    /// Why the iteration ended, once it has.
    ended: Option<String>,
    /// The counters at the end.
    end_stats: Option<Snapshot>,
    started: Instant,
    elapsed: Option<Duration>,
}

impl Packets {
    /// The reader is about to move on (or go): no item may read its data now.
    fn next_turn(&self) -> u64 {
        self.now.fetch_add(1, Relaxed) + 1
    }

    /// Writes `f` into an item nobody else holds, or a new one.
    fn hand_out(&mut self, py: Python<'_>, f: Fields, turn: u64) -> PyResult<Py<Packet>> {
        let item = match self.spare.take() {
            Some(p) if refcount(&p) == 1 => {
                p.get().set(f, turn);
                p
            }
            _ => Py::new(py, Packet::new(f, turn, Arc::clone(&self.now)))?,
        };
        self.spare = self.last.replace(item.clone_ref(py));
        Ok(item)
    }

    /// Ends the iteration: closes the reader (what it did not hand out is
    /// counted unread), keeps its final counters and why it stopped (`ours`
    /// when this iterator stopped it), and gives its error.
    fn end(&mut self, ours: Option<&str>) -> Option<PyErr> {
        self.next_turn();
        self.elapsed.get_or_insert(self.started.elapsed());
        let reader = self.reader.take()?.into_inner();
        let why = ours.map(str::to_string).or_else(|| reader.stop_reason().map(|r| r.to_string()));
        self.ended = why.or(Some(StopReason::Requested.to_string()));
        let report = reader.finish();
        self.end_stats = Some(report.stats);
        report.errors.first().map(run_error)
    }

    fn stats_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let snap = self.end_stats.clone().unwrap_or_else(|| self.stats.read());
        let d = PyDict::new(py);
        d.set_item("source", &self.info.name)?;
        d.set_item("link_type", self.info.link_type.to_string())?;
        let queues = PyList::empty(py);
        for q in &snap.queues {
            queues.append(queue_dict(py, q, Some(q.queue.0))?)?;
        }
        d.set_item("queues", queues)?;
        d.set_item("total", queue_dict(py, &snap.total(), None)?)?;
        d.set_item("elapsed_s", self.elapsed.unwrap_or_else(|| self.started.elapsed()).as_secs_f64())?;
        d.set_item("stop", &self.ended)?;
        d.set_item("notes", self.info.notes.clone())?;
        Ok(d)
    }

    fn time_up(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// What a second reader of one `weir.Packets` is told.
const SHARED: &str = "weir.Packets: this iterator is being read by another thread (or from inside its own iteration); \
                      an iterator hands each packet to one reader: give each thread its own weir.packets(...), \
                      or hand the packets on from one thread";

impl Packets {
    /// The next packet, `None` at the end (see the module doc).
    fn next_packet(&mut self, py: Python<'_>) -> PyResult<Option<Py<Packet>>> {
        let turn = self.next_turn();
        if self.reader.is_none() {
            return Ok(None);
        }
        if self.deadline.is_some() {
            self.until_time_check -= 1;
            if self.until_time_check == 0 {
                self.until_time_check = TIME_CHECK;
                if self.time_up() {
                    self.stop.stop();
                    return self.end(Some(TIME_LIMIT)).map_or(Ok(None), Err);
                }
            }
        }
        let Some(reader) = self.reader.as_mut() else { return Ok(None) };
        let mut s = step(reader.get_mut(), Duration::ZERO);
        loop {
            match s {
                Step::Packet(f) => return self.hand_out(py, f, turn).map(Some),
                Step::End => return self.end(None).map_or(Ok(None), Err),
                Step::Idle => {}
            }
            if self.time_up() {
                self.stop.stop();
                return self.end(Some(TIME_LIMIT)).map_or(Ok(None), Err);
            }
            let Some(reader) = self.reader.as_mut() else { return Ok(None) };
            let reader = reader.get_mut();
            let spin = self.spin;
            s = py.detach(|| wait(reader, spin));
            // A signal that came while waiting is raised here, with the capture
            // stopped, rather than in the caller's loop after the packet the
            // wait brought (a paced or live source spends its time waiting).
            if let Err(e) = py.check_signals() {
                self.stop.stop();
                drop(self.end(None));
                return Err(e);
            }
        }
    }
}

#[pymethods]
impl Packets {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>, py: Python<'_>) -> PyResult<Option<Py<Packet>>> {
        // Two threads reading one iterator: the second finds it borrowed,
        // while the first waits for a packet with the GIL released.
        let mut me = slf.try_borrow_mut().map_err(|_| PyRuntimeError::new_err(SHARED))?;
        me.next_packet(py)
    }

    /// Stops the capture and ends the iteration; what was captured and not
    /// taken is counted `unread`. Called by `with` at its end.
    fn close(&mut self) -> PyResult<()> {
        if self.reader.is_some() {
            self.stop.stop();
            // What failed before the close is not news to a caller who closed.
            drop(self.end(None));
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    /// The counters now (at the end: final) as a `weir.Report`, as
    /// `weir.count` gives them.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("weir")?.getattr("Report")?.call_method1("_from_dict", (self.stats_dict(py)?,))
    }

    /// The source's name as weir opened it (`file:trace.pcap@0-1`).
    #[getter]
    fn source(&self) -> &str {
        &self.info.name
    }

    /// The link type every packet starts with (`EN10MB`, ...).
    #[getter]
    fn link_type(&self) -> String {
        self.info.link_type.to_string()
    }

    /// The link type's number (libpcap's DLT_ value).
    #[getter]
    fn dlt(&self) -> u32 {
        self.info.link_type.dlt()
    }

    /// Most bytes kept of a packet.
    #[getter]
    fn snaplen(&self) -> u32 {
        self.info.snaplen
    }

    /// The queues opened.
    #[getter]
    fn queues(&self) -> Vec<u16> {
        self.info.queues.iter().map(|q| q.0).collect()
    }
}

impl Drop for Packets {
    fn drop(&mut self) {
        // The reader goes with this object: its latest item must not read on.
        self.next_turn();
    }
}

/// `weir.packets`' native half: opens the source and starts the reader.
#[pyfunction]
#[pyo3(signature = (source, options=None))]
pub fn packets<'py>(py: Python<'py>, source: &str, options: Option<&Bound<'py, PyDict>>) -> PyResult<Packets> {
    let k = Kwargs::new(py, "packets", options)?;
    let opts = EngineOptions::take(source, &k)?;
    k.finish()?;
    let deadline_after = opts.duration();
    let spin = if opts.top_speed_trace() { SPIN } else { Duration::ZERO };
    let engine = opts.build(py, weir::memory::Plan::new(), 0)?;
    let info = engine.info().clone();
    let reader = py.detach(move || engine.start_reader()).map_err(|e| run_error(&e))?;
    let started = Instant::now();
    Ok(Packets {
        stats: reader.stats_reader(),
        stop: reader.stop_handle(),
        reader: Some(SyncWrapper::new(reader)),
        info,
        now: Arc::new(AtomicU64::new(0)),
        last: None,
        spare: None,
        deadline: deadline_after.map(|d| started + d),
        until_time_check: TIME_CHECK,
        spin,
        ended: None,
        end_stats: None,
        started,
        elapsed: None,
    })
}
