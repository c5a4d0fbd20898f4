//! `weir.flows(source, **options)`: the flow records of the stream layer,
//! as `weir flows` makes them (the same layer,
//! [`weir::output::flow::FlowSettings`]: flows mode at cutoff 0, statistics
//! only, every IP datagram in a flow, packet-time timeouts), as columns.
//!
//! Each queue's worker turns the records its layer hands out (a direction
//! at its close or its active timeout) into rows, pairing the two directions
//! of a connection with [`weir::stream::biflow::Pairer`] as `weir flows
//! --biflow` does (`biflow=False`: a row per direction). A worker appends to
//! its own column vectors, no lock and no Python; at the end the queues'
//! columns are joined, and each becomes a numpy array that owns its vector
//! (no copy), which pandas and Arrow take as they are. Addresses become
//! Python strings, each distinct address made once.
//!
//! Columns (the package's `weir.FLOW_COLUMNS` documents each):
//! `src_ip`, `dst_ip` (object: str), `src_port`, `dst_port` (uint16),
//! `protocol`, `ip_version` (uint8), `community_id` (object: str, Community
//! ID v1 with seed 0, or None), `queue` (uint16), `first_seen`,
//! `last_seen` (datetime64[ns]), `duration` (timedelta64[ns]),
//! `src2dst_packets`, `src2dst_bytes`, `src2dst_payload_bytes`,
//! `dst2src_packets`, `dst2src_bytes`, `dst2src_payload_bytes`,
//! `bidirectional_packets`, `bidirectional_bytes` (uint64),
//! `src2dst_tcp_flags`, `dst2src_tcp_flags` (uint8), `end_reason`
//! (uint8 codes into [`END_REASONS`]).

use crate::count::report_dict;
use crate::errors::{run_error, setting_error, Error};
use crate::options::{kernel_cutoff, EngineOptions, Kwargs};
use crate::run::run_to_end;
use crate::streams::stats_dict;
use numpy::datetime::{units::Nanoseconds, Datetime, Timedelta};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;
use weir::engine::RunError;
use weir::output::flow::FlowSettings;
use weir::stream::biflow::{Biflow, Pairer};
use weir::stream::community_id::{CommunityId, L4};
use weir::stream::{CloseReason, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};

/// Why a record was handed out: `end_reason`'s categories, by code. Finer
/// than IPFIX's flowEndReason, which folds fin, rst and reused into one
/// (`weir::output::flow::EndReason::of_close`): a DataFrame keeps them apart.
pub const END_REASONS: [&str; 7] = ["active", "fin", "rst", "idle", "evicted", "end-of-input", "reused"];

fn end_code(closed: Option<CloseReason>) -> u8 {
    match closed {
        None => 0,
        Some(CloseReason::Fin) => 1,
        Some(CloseReason::Rst) => 2,
        Some(CloseReason::Idle) => 3,
        Some(CloseReason::Evicted) => 4,
        Some(CloseReason::EndOfInput) => 5,
        Some(CloseReason::Reused) => 6,
    }
}

/// One direction's record and why it was handed out.
type Rec = (Stream, u8);

/// One queue's rows, column by column.
#[derive(Default)]
struct Columns {
    src: Vec<IpAddr>,
    dst: Vec<IpAddr>,
    src_port: Vec<u16>,
    dst_port: Vec<u16>,
    protocol: Vec<u8>,
    ip_version: Vec<u8>,
    /// Made by the worker (the hash is the cost); rendered as text at the end.
    community_id: Vec<Option<[u8; 20]>>,
    queue: Vec<u16>,
    first: Vec<i64>,
    last: Vec<i64>,
    fwd: [Vec<u64>; 3],
    rev: [Vec<u64>; 3],
    fwd_flags: Vec<u8>,
    rev_flags: Vec<u8>,
    end: Vec<u8>,
}

impl Columns {
    /// A row of `fwd`'s direction, with `rev` (the other direction) if
    /// paired, ended as `end` says.
    fn push(&mut self, fwd: &Stream, rev: Option<&Stream>, end: u8) {
        self.src.push(fwd.src);
        self.dst.push(fwd.dst);
        self.src_port.push(fwd.sport);
        self.dst_port.push(fwd.dport);
        self.protocol.push(fwd.proto);
        self.ip_version.push(if fwd.src.is_ipv4() { 4 } else { 6 });
        // Flows mode keys ICMP by type and code, so every record has an ID.
        let l4 = L4::of_key(fwd.proto, fwd.sport, fwd.dport, true);
        self.community_id.push(l4.and_then(|l4| CommunityId::default().digest(fwd.src, fwd.dst, fwd.proto, l4)));
        self.queue.push(fwd.queue.0);
        let (first, last) = match rev {
            Some(r) => (fwd.first_ns.min(r.first_ns), fwd.last_ns.max(r.last_ns)),
            None => (fwd.first_ns, fwd.last_ns),
        };
        self.first.push(first as i64);
        self.last.push(last as i64);
        for (col, v) in self.fwd.iter_mut().zip([fwd.packets, fwd.octets, fwd.bytes]) {
            col.push(v);
        }
        for (col, v) in self.rev.iter_mut().zip(rev.map_or([0; 3], |r| [r.packets, r.octets, r.bytes])) {
            col.push(v);
        }
        self.fwd_flags.push(fwd.tcp_flags);
        self.rev_flags.push(rev.map_or(0, |r| r.tcp_flags));
        self.end.push(end);
    }

    fn append(&mut self, mut o: Columns) {
        macro_rules! cat { ($($f:ident),*) => { $(self.$f.append(&mut o.$f);)* } }
        cat!(src, dst, src_port, dst_port, protocol, ip_version, community_id, queue, first, last, fwd_flags, rev_flags, end);
        for (a, b) in self.fwd.iter_mut().zip(o.fwd.iter_mut()).chain(self.rev.iter_mut().zip(o.rev.iter_mut())) {
            a.append(b);
        }
    }
}

/// One queue's handler: records into rows.
struct ToRows {
    pairer: Option<Pairer<Rec>>,
    cols: Columns,
}

impl ToRows {
    fn add(&mut self, s: &Stream, end: u8, last: bool) {
        let Some(pairer) = self.pairer.as_mut() else { return self.cols.push(s, None, end) };
        for b in pairer.record(s, (*s, end), last).into_iter().flatten() {
            match b {
                Biflow::Alone((r, e)) => self.cols.push(&r, None, e),
                Biflow::Pair { initiator, responder, last } => {
                    let end = if last == weir::stream::Direction::Initiator { initiator.1 } else { responder.1 };
                    self.cols.push(&initiator.0, Some(&responder.0), end);
                }
            }
        }
    }

    /// After the layer closed every stream: what still waits goes alone.
    fn finish(mut self) -> Columns {
        let waiting: Vec<Rec> = self.pairer.as_mut().map(|p| p.drain().collect()).unwrap_or_default();
        for (r, e) in waiting {
            self.cols.push(&r, None, e);
        }
        self.cols
    }
}

impl StreamHandler for ToRows {
    type State = ();

    fn created(&mut self, ctl: &mut StreamCtl<'_>) {
        if let (Some(p), Some(_)) = (self.pairer.as_mut(), ctl.opposite()) {
            p.both_directions(ctl.stream());
        }
    }

    fn data(&mut self, _: &mut StreamCtl<'_>, _: &mut (), _: &weir::stream::Piece<'_>) {}

    fn active(&mut self, s: &Stream, _: &mut ()) {
        self.add(s, 0, false);
    }

    fn closed(&mut self, s: &Stream, _: ()) {
        self.add(s, end_code(s.closed), true);
    }
}

/// Addresses as Python strings, each distinct one made once.
fn addresses<'py>(py: Python<'py>, ips: &[IpAddr], made: &mut HashMap<IpAddr, Py<PyAny>>) -> Bound<'py, PyArray1<Py<PyAny>>> {
    let v: Vec<Py<PyAny>> = ips
        .iter()
        .map(|ip| made.entry(*ip).or_insert_with(|| PyString::new(py, &ip.to_string()).into_any().unbind()).clone_ref(py))
        .collect();
    PyArray1::from_vec(py, v)
}

/// The columns as numpy arrays, by name, in the documented order.
fn arrays<'py>(py: Python<'py>, c: Columns) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let mut made = HashMap::new();
    d.set_item("src_ip", addresses(py, &c.src, &mut made))?;
    d.set_item("src_port", PyArray1::from_vec(py, c.src_port))?;
    d.set_item("dst_ip", addresses(py, &c.dst, &mut made))?;
    d.set_item("dst_port", PyArray1::from_vec(py, c.dst_port))?;
    d.set_item("protocol", PyArray1::from_vec(py, c.protocol))?;
    d.set_item("ip_version", PyArray1::from_vec(py, c.ip_version))?;
    let ids: Vec<Py<PyAny>> = c
        .community_id
        .iter()
        .map(|d| match d {
            Some(d) => PyString::new(py, &CommunityId::render(d)).into_any().unbind(),
            None => py.None(),
        })
        .collect();
    d.set_item("community_id", PyArray1::from_vec(py, ids))?;
    d.set_item("queue", PyArray1::from_vec(py, c.queue))?;
    let duration: Vec<Timedelta<Nanoseconds>> = c.first.iter().zip(&c.last).map(|(f, l)| Timedelta::from(l - f)).collect();
    let stamps = |v: Vec<i64>| PyArray1::from_vec(py, v.into_iter().map(Datetime::<Nanoseconds>::from).collect());
    d.set_item("first_seen", stamps(c.first))?;
    d.set_item("last_seen", stamps(c.last))?;
    d.set_item("duration", PyArray1::from_vec(py, duration))?;
    let [fp, fb, fpl] = c.fwd;
    let [rp, rb, rpl] = c.rev;
    let sum = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<u64>>();
    let (bp, bb) = (sum(&fp, &rp), sum(&fb, &rb));
    d.set_item("src2dst_packets", PyArray1::from_vec(py, fp))?;
    d.set_item("src2dst_bytes", PyArray1::from_vec(py, fb))?;
    d.set_item("src2dst_payload_bytes", PyArray1::from_vec(py, fpl))?;
    d.set_item("src2dst_tcp_flags", PyArray1::from_vec(py, c.fwd_flags))?;
    d.set_item("dst2src_packets", PyArray1::from_vec(py, rp))?;
    d.set_item("dst2src_bytes", PyArray1::from_vec(py, rb))?;
    d.set_item("dst2src_payload_bytes", PyArray1::from_vec(py, rpl))?;
    d.set_item("dst2src_tcp_flags", PyArray1::from_vec(py, c.rev_flags))?;
    d.set_item("bidirectional_packets", PyArray1::from_vec(py, bp))?;
    d.set_item("bidirectional_bytes", PyArray1::from_vec(py, bb))?;
    d.set_item("end_reason", PyArray1::from_vec(py, c.end))?;
    Ok(d)
}

/// `weir.flows`' native half: runs the stream layer in flows mode and
/// returns {"columns", "stats", "report", "error"} (see the module doc).
#[pyfunction]
#[pyo3(signature = (source, options=None))]
pub fn flows<'py>(py: Python<'py>, source: &str, options: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
    let k = Kwargs::new(py, "flows", options)?;
    let opts = EngineOptions::take(source, &k)?;
    let biflow = k.flag("biflow", true)?;
    let secs =
        |key: &str, default: Duration| -> PyResult<Duration> { Ok(k.int(key, 1, 10 * 366 * 86_400)?.map_or(default, Duration::from_secs)) };
    let d = FlowSettings::DEFAULT;
    let settings = FlowSettings {
        inactive_timeout: secs("idle_timeout", d.inactive_timeout)?,
        active_timeout: secs("active_timeout", d.active_timeout)?,
        max_flows: k.int("max_flows", 1, u64::from(u32::MAX - 1))?.map_or(d.max_flows, |n| n as usize),
        prealloc: k.int("prealloc", 0, u64::from(u32::MAX))?.map_or(d.prealloc, |n| n as usize),
    };
    let (kernel_flows, install_after) = kernel_cutoff(&k)?;
    k.finish()?;
    let cfg = StreamConfig { kernel_install_after: install_after, ..settings.stream_config() };
    cfg.check().map_err(|e| setting_error(&e))?;
    let engine = opts.build(py, cfg.memory_plan(1), kernel_flows)?;
    let info = engine.info().clone();
    let running = py
        .detach(|| engine.start_streams(&cfg, |_| ToRows { pairer: biflow.then(Pairer::default), cols: Columns::default() }))
        .map_err(|e| match e {
        RunError::Setting(s) => setting_error(&s),
        other => run_error(&other),
    })?;
    let mut report = run_to_end(py, running)?;
    let mut total = StreamStats::default();
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
    }
    let delivered = report.stats.total().delivered;
    if report.handlers.len() == report.stats.queues.len() && (total.packets != delivered || !total.packets_add_up()) {
        return Err(Error::new_err(format!(
            "internal accounting error: the engine delivered {delivered} packets, the stream layer counted {total:?}"
        )));
    }
    let handlers = std::mem::take(&mut report.handlers);
    let cols = py.detach(move || {
        let mut all = Columns::default();
        for (_, layer) in handlers {
            all.append(layer.into_handler().finish());
        }
        all
    });
    let d = PyDict::new(py);
    d.set_item("columns", arrays(py, cols)?)?;
    d.set_item("end_reasons", END_REASONS.to_vec())?;
    d.set_item("stats", stats_dict(py, &total)?)?;
    let r = report_dict(py, &report, &info)?;
    d.set_item("error", r.get_item("error")?)?;
    d.set_item("report", r)?;
    Ok(d)
}
