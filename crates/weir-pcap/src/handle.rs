//! What a `pcap_t` is here: a weir engine read by the caller's thread.
//!
//! The contract:
//! - A handle opens its source when it is opened (a file) or activated (an
//!   interface), and starts capture at the first read.
//! - Filters follow libpcap. On an interface, a filter set before reading is
//!   the engine's (the kernel's: rejected packets take no cell and are counted
//!   as filtered). One set while reading replaces it in the engine, and is also
//!   applied here to the packets captured before the engine took it, which
//!   passed the old one; libpcap does the same to the packets already in its
//!   ring. A file's filter is applied here, record by record, so a new one
//!   judges exactly the records not yet read, as in libpcap, and `pcap_file`
//!   positions stay exact. Packets rejected here are counted as filtered in
//!   weir's report, in the queue that captured them.
//! - A packet handed out stays valid until the next read on the handle, as
//!   libpcap promises; the engine's reader holds its chunk until then.
//! - Functions a callback may call on its own handle (`pcap_breakloop`,
//!   `pcap_stats`, `pcap_geterr`, the getters) touch only what reading does
//!   not borrow. Reading from inside a callback is refused with an error.
//! - Every drop is counted by the engine; `pcap_stats` reports its counters.

use crate::env::Settings;
use crate::savefile::{Moved, Savefile, PCAP_HEADER, RECORD_HEADER};
use crate::sys::{self, DeadHandle};
use crate::types::*;
use libc::c_char;
use std::cell::{Cell, OnceCell, RefCell, UnsafeCell};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use weir::engine::{Read, Reader};
use weir::filter::Filter;
use weir::ring::EventFd;
use weir::source::file::format::TraceKind;
use weir::source::{QueueRange, SourceSpec};
use weir::stats::{Snapshot, StatsReader};
use weir::{Engine, LinkType};

/// Longest a read sleeps before looking at the break flag: `pcap_breakloop`
/// from a signal handler may only set a flag, so this bounds how late it acts.
const BREAK_CHECK: Duration = Duration::from_millis(50);

/// How a live handle is set up between `pcap_create` and `pcap_activate`.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub device: String,
    pub snaplen: i32,
    pub promisc: bool,
    pub rfmon: bool,
    pub timeout_ms: i32,
    pub buffer_size: i32,
    pub immediate: bool,
}

enum Stage {
    /// From `pcap_open_dead`: compiles filters, opens dump files, reads nothing.
    Dead,
    /// From `pcap_create`, not activated yet.
    Created(LiveConfig),
    /// Opened (a file) or activated (an interface); capture not started.
    Opened(Box<Engine>),
    Reading(Box<Reader>),
    /// Reading ended (end of file, or an error already reported).
    Ended,
}

struct State {
    stage: Stage,
    /// The last filter `pcap_setfilter` set: an interface's engine starts with it.
    filter: Option<Filter>,
    /// The filter applied here to each packet read: a file's filter, or one
    /// set on an interface while reading (see the module's contract).
    here: Option<Filter>,
    /// The system library's twin of this handle, for compiling and dumping.
    dead: Option<DeadHandle>,
    timeout: Option<Duration>,
    nonblock: bool,
}

/// One `pcap_t`.
pub struct Handle {
    errbuf: UnsafeCell<[c_char; ERRBUF_SIZE]>,
    break_loop: AtomicBool,
    state: RefCell<State>,
    pub dlt: Cell<i32>,
    pub snaplen: Cell<i32>,
    pub precision: Cell<u32>,
    pub offline: bool,
    /// For a pcap (not pcapng) file: whether it stores nanoseconds. libpcap
    /// hands such a file's timestamp fields over as the signed 32-bit values
    /// they are (`struct pcap_timeval`), however odd; weir must too.
    pcap_file_nano: Option<bool>,
    /// The interface, for a live handle.
    pub device: Option<String>,
    /// The file, for an offline handle (`None`: standard input).
    path: Option<PathBuf>,
    /// `pcap_file`'s stream (see [`crate::savefile`]).
    savefile: OnceCell<Savefile>,
    /// Packets read from the engine (for a file, every record, whether the
    /// filter passed it or not), and the logical offset of the next record.
    records: Cell<u64>,
    logical: Cell<i64>,
    pub settings: Settings,
    /// Packets (and their wire bytes) the filter rejected here, by queue number.
    rejected: RefCell<Vec<(u64, u64)>>,
    stats: OnceCell<StatsReader>,
    /// The header of the packet `pcap_next_ex` handed out last.
    hdr: UnsafeCell<PcapPkthdr>,
    /// `pcap_get_selectable_fd`'s eventfd, made on first request; the reader
    /// signals a duplicate of it.
    selectable: OnceCell<EventFd>,
    /// `pcap_get_required_select_timeout`'s answer, which must outlive the call.
    select_tv: OnceCell<Option<libc::timeval>>,
}

/// What one read found.
pub enum Got {
    Packet(PcapPkthdr, *const u8),
    /// Nothing within the timeout (live), or nothing now (nonblocking).
    Idle,
    /// The end of a file.
    End,
    Break,
    Error,
}

impl Handle {
    fn new(stage: Stage, dlt: i32, snaplen: i32, precision: u32, offline: bool, settings: Settings) -> Box<Handle> {
        Box::new(Handle {
            errbuf: UnsafeCell::new([0; ERRBUF_SIZE]),
            break_loop: AtomicBool::new(false),
            state: RefCell::new(State { stage, filter: None, here: None, dead: None, timeout: None, nonblock: false }),
            dlt: Cell::new(dlt),
            snaplen: Cell::new(snaplen),
            precision: Cell::new(precision),
            offline,
            pcap_file_nano: None,
            device: None,
            path: None,
            savefile: OnceCell::new(),
            records: Cell::new(0),
            rejected: RefCell::new(Vec::new()),
            logical: Cell::new(PCAP_HEADER),
            settings,
            stats: OnceCell::new(),
            hdr: UnsafeCell::new(PcapPkthdr { tv_sec: 0, tv_usec: 0, caplen: 0, len: 0 }),
            selectable: OnceCell::new(),
            select_tv: OnceCell::new(),
        })
    }

    pub fn dead(dlt: i32, snaplen: i32, precision: u32) -> Box<Handle> {
        Handle::new(Stage::Dead, dlt, snaplen, precision, false, Settings::default())
    }

    /// `pcap_open_offline` and its variants; `path` None is standard input.
    pub fn open_offline(path: Option<PathBuf>, precision: u32) -> Result<Box<Handle>, String> {
        let settings = Settings::from_env()?;
        let engine = Handle::file_engine(&settings, path.clone())?;
        let info = engine.info();
        let (dlt, snaplen) = (info.link_type.dlt() as i32, info.snaplen as i32);
        let pcap_file_nano = info.trace.as_ref().filter(|t| t.kind == TraceKind::Pcap).map(|t| t.nanosecond);
        let mut h = Handle::new(Stage::Opened(Box::new(engine)), dlt, snaplen, precision, true, settings);
        h.pcap_file_nano = pcap_file_nano;
        h.path = path;
        Ok(h)
    }

    fn file_engine(settings: &Settings, path: Option<PathBuf>) -> Result<Engine, String> {
        let shown = path.as_ref().map_or_else(|| "-".to_string(), |p| p.display().to_string());
        let spec = SourceSpec::File { path, queues: QueueRange::single() };
        settings.builder(spec).build().map_err(|e| format!("{shown}: {e}"))
    }

    /// `pcap_fopen_offline`: the handle closes `fp` at `pcap_close`, as libpcap does.
    pub fn adopt_stream(&self, fp: *mut libc::FILE) {
        let _ = self.savefile.set(Savefile::adopt(fp));
    }

    /// `pcap_file`: the savefile's stream, at the start of the next record;
    /// null for a live or dead handle, as in libpcap.
    pub fn file(&self) -> *mut libc::FILE {
        if !self.offline {
            return std::ptr::null_mut();
        }
        let view = match self.savefile.get() {
            Some(v) => v,
            None => match Savefile::open(self.path.as_deref()) {
                Ok(v) => self.savefile.get_or_init(|| v),
                Err(e) => {
                    self.set_error(&format!("pcap_file: {e}"));
                    return std::ptr::null_mut();
                }
            },
        };
        view.show(self.logical.get(), self.records.get())
    }

    /// Before a read: follow the caller if it moved `pcap_file`'s stream back
    /// (or on) to a record start it was told of.
    fn follow_stream(&self, st: &mut State) -> Result<(), String> {
        let Some(view) = self.savefile.get() else { return Ok(()) };
        let (packets, at) = match view.moved() {
            Moved::Not => return Ok(()),
            Moved::To { packets, at } => (packets, at),
            Moved::Unknown(at) => {
                return Err(format!(
                    "pcap_file's stream was moved to offset {at}, where pcap_file never stood; weir reads again only \
                     from positions the stream had when pcap_file returned it"
                ))
            }
        };
        if let Stage::Reading(r) = std::mem::replace(&mut st.stage, Stage::Ended) {
            // Abandoned, not ended: its counters are not the run's.
            drop(r.finish());
        }
        let mut reader = self.start_reading(Handle::file_engine(&self.settings, self.path.clone())?, st)?;
        // The engine filters nothing of a file: `packets` counts records.
        let mut skipped = 0;
        while skipped < packets {
            match reader.next(BREAK_CHECK) {
                Read::Packet(_) => skipped += 1,
                Read::Idle => {}
                Read::End => break,
            }
        }
        st.stage = Stage::Reading(Box::new(reader));
        self.records.set(packets);
        self.logical.set(at);
        view.settled(at);
        Ok(())
    }

    /// Start capture (an interface with the filter set before reading),
    /// signalling the selectable descriptor if the caller asked for one.
    fn start_reading(&self, mut engine: Engine, st: &State) -> Result<Reader, String> {
        engine.set_filter(if self.offline { None } else { st.filter.clone() });
        let mut r = engine.start_reader().map_err(|e| e.to_string())?;
        if let Some(fd) = self.selectable.get() {
            fd.try_clone().and_then(|dup| r.attach_ready_fd(dup)).map_err(|e| format!("selectable descriptor: {e}"))?;
        }
        Ok(r)
    }

    pub fn create(device: &str) -> Result<Box<Handle>, String> {
        let settings = Settings::from_env()?;
        let cfg = LiveConfig {
            device: device.to_string(),
            snaplen: 262_144,
            promisc: false,
            rfmon: false,
            timeout_ms: 0,
            buffer_size: 0,
            immediate: false,
        };
        let mut h = Handle::new(Stage::Created(cfg), LinkType::ETHERNET.dlt() as i32, 262_144, TSTAMP_PRECISION_MICRO, false, settings);
        h.device = Some(device.to_string());
        Ok(h)
    }

    /// The configuration of a handle not yet activated, for the `pcap_set_*` calls.
    pub fn configure(&self, f: impl FnOnce(&mut LiveConfig)) -> i32 {
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        match &mut st.stage {
            Stage::Created(cfg) => {
                f(cfg);
                0
            }
            _ => PCAP_ERROR_ACTIVATED,
        }
    }

    pub fn is_activated(&self) -> bool {
        self.state.try_borrow().map_or(true, |st| !matches!(st.stage, Stage::Created(_)))
    }

    /// `pcap_activate`: open the interface through the engine.
    pub fn activate(&self) -> i32 {
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        let Stage::Created(cfg) = &st.stage else { return PCAP_ERROR_ACTIVATED };
        let cfg = cfg.clone();
        if cfg.rfmon {
            self.set_error(&format!("{}: monitor mode is not supported by weir", cfg.device));
            return PCAP_ERROR_RFMON_NOTSUP;
        }
        if !std::path::Path::new("/sys/class/net").join(&cfg.device).exists() || cfg.device.contains('/') {
            self.set_error(&format!("{}: No such device exists (weir opens interfaces of this network namespace)", cfg.device));
            return PCAP_ERROR_NO_SUCH_DEVICE;
        }
        let snaplen = if cfg.snaplen <= 0 || cfg.snaplen > 262_144 { 262_144 } else { cfg.snaplen };
        let spec = SourceSpec::Live { kind: self.settings.source, iface: cfg.device.clone(), queues: self.settings.queues };
        let mut live = weir::source::LiveOptions { snaplen: snaplen as u32, promisc: cfg.promisc, ..Default::default() };
        let ring = &mut live.afpacket;
        if cfg.buffer_size > 0 {
            ring.block_count = (cfg.buffer_size as usize / ring.block_bytes).max(4);
        }
        if cfg.immediate {
            ring.block_timeout = Duration::from_millis(1);
        } else if cfg.timeout_ms > 0 {
            ring.block_timeout = ring.block_timeout.min(Duration::from_millis(cfg.timeout_ms as u64));
        }
        let built = self.settings.builder(spec).live(live).build();
        match built {
            Ok(engine) => {
                self.dlt.set(engine.info().link_type.dlt() as i32);
                self.snaplen.set(snaplen);
                st.timeout = (cfg.timeout_ms > 0 && !cfg.immediate).then(|| Duration::from_millis(cfg.timeout_ms as u64));
                st.stage = Stage::Opened(Box::new(engine));
                0
            }
            Err(e) => {
                let msg = e.to_string();
                self.set_error(&format!("{}: {msg}", cfg.device));
                if msg.contains("Operation not permitted") || msg.contains("ermission denied") {
                    PCAP_ERROR_PERM_DENIED
                } else {
                    PCAP_ERROR
                }
            }
        }
    }

    /// The system library's dead twin, made on first use.
    pub fn with_dead<T>(&self, f: impl FnOnce(&DeadHandle) -> T) -> Result<T, String> {
        let mut st = self.state.try_borrow_mut().map_err(|_| "called from inside a packet callback".to_string())?;
        if st.dead.is_none() {
            let sys = sys::system()?;
            st.dead = Some(sys.dead(self.dlt.get(), self.snaplen.get(), self.precision.get())?);
        }
        Ok(f(st.dead.as_ref().expect("made above")))
    }

    /// `pcap_setfilter` with a program the system library compiled.
    pub fn set_filter(&self, insns: &[BpfInsn]) -> i32 {
        let filter = match Filter::from_program(insns) {
            Ok(f) => f,
            Err(e) => {
                self.set_error(&format!("setfilter: {e}"));
                return PCAP_ERROR;
            }
        };
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        if self.offline {
            st.here = Some(filter.clone());
        } else if let Stage::Reading(r) = &st.stage {
            if let Err(e) = r.replace_filter(Some(filter.clone())) {
                self.set_error(&format!("setfilter: {e}"));
                return PCAP_ERROR;
            }
            st.here = Some(filter.clone());
        }
        st.filter = Some(filter);
        0
    }

    pub fn set_nonblock(&self, on: bool) -> i32 {
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        st.nonblock = on;
        0
    }

    pub fn nonblock(&self) -> bool {
        self.state.try_borrow().is_ok_and(|st| st.nonblock)
    }

    pub fn request_break(&self) {
        // Relaxed: a flag the reading thread polls; nothing else is published by it.
        self.break_loop.store(true, Ordering::Relaxed);
    }

    /// Read one packet. `wait` false: a live handle returns `Idle` at once when
    /// nothing is there (for `pcap_dispatch` after its first packet).
    pub fn read(&self, wait: bool) -> Got {
        let Ok(mut st) = self.state.try_borrow_mut() else {
            self.busy();
            return Got::Error;
        };
        if matches!(st.stage, Stage::Opened(_)) {
            let Stage::Opened(engine) = std::mem::replace(&mut st.stage, Stage::Ended) else { unreachable!() };
            match self.start_reading(*engine, &st) {
                Ok(r) => {
                    let _ = self.stats.set(r.stats_reader());
                    st.stage = Stage::Reading(Box::new(r));
                }
                Err(e) => {
                    self.set_error(&e);
                    return Got::Error;
                }
            }
        }
        if let Err(e) = self.follow_stream(&mut st) {
            self.set_error(&e);
            return Got::Error;
        }
        let st = &mut *st;
        let reader = match &mut st.stage {
            Stage::Reading(r) => r,
            Stage::Ended => return Got::End,
            Stage::Dead => {
                self.set_error("this handle was opened with pcap_open_dead and has no packets");
                return Got::Error;
            }
            Stage::Created(_) => {
                self.set_error("the capture has not been activated");
                return Got::Error;
            }
            Stage::Opened(_) => unreachable!("started above"),
        };
        // A file never times out: its reader waits for the next block as long as it takes.
        let limit = if self.offline {
            None
        } else if !wait || st.nonblock {
            Some(Duration::ZERO)
        } else {
            st.timeout
        };
        // The clock is read only once a wait was in vain: a packet that is
        // already there costs no clock read (as in weir's reader).
        let mut until: Option<Instant> = None;
        loop {
            // Relaxed, as in `request_break`. A plain load first: the swap is
            // a locked instruction, paid only when a break was asked for.
            if self.break_loop.load(Ordering::Relaxed) && self.break_loop.swap(false, Ordering::Relaxed) {
                return Got::Break;
            }
            let slice = match (limit, until) {
                (None, _) => BREAK_CHECK,
                (Some(l), None) => l.min(BREAK_CHECK),
                (Some(_), Some(u)) => u.saturating_duration_since(Instant::now()).min(BREAK_CHECK),
            };
            match reader.next(slice) {
                Read::Packet(p) => {
                    self.records.set(self.records.get() + 1);
                    self.logical.set(self.logical.get() + RECORD_HEADER + i64::from(p.caplen()));
                    if st.here.as_ref().is_some_and(|f| !f.matches(p.data(), p.wire_len())) {
                        let mut rejected = self.rejected.borrow_mut();
                        let q = usize::from(p.queue().0);
                        if rejected.len() <= q {
                            rejected.resize(q + 1, (0, 0));
                        }
                        rejected[q].0 += 1;
                        rejected[q].1 += u64::from(p.wire_len());
                        continue;
                    }
                    let (sec, frac) = self.timeval(p.ts_ns(), p.ts_carry());
                    let hdr = PcapPkthdr {
                        tv_sec: sec as libc::time_t,
                        tv_usec: frac as libc::suseconds_t,
                        caplen: p.caplen(),
                        len: p.wire_len(),
                    };
                    return Got::Packet(hdr, p.data().as_ptr());
                }
                Read::Idle => {
                    if let Some(l) = limit {
                        // The first slice was waited already: the limit counts from its start.
                        let u = *until.get_or_insert_with(|| Instant::now() + l.saturating_sub(slice));
                        if Instant::now() >= u {
                            return Got::Idle;
                        }
                    }
                }
                Read::End => {
                    let Stage::Reading(r) = std::mem::replace(&mut st.stage, Stage::Ended) else { unreachable!("reading") };
                    let report = r.finish();
                    self.report(report.stats);
                    return match report.errors.first().map(|e| e.to_string()) {
                        Some(e) => {
                            self.set_error(&e);
                            Got::Error
                        }
                        None => Got::End,
                    };
                }
            }
        }
    }

    /// The timestamp as libpcap would hand it over: the seconds and fraction as
    /// the record wrote them (uncarried, signed for a pcap file), in the
    /// handle's precision.
    fn timeval(&self, ns: u64, carry: u32) -> (i64, i64) {
        const NS: u64 = 1_000_000_000;
        let want_nano = self.precision.get() == TSTAMP_PRECISION_NANO;
        match self.pcap_file_nano {
            Some(file_nano) => {
                // The reader's sum wraps as libpcap's signed fields do: as an i64 it is exact.
                let ts = ns as i64;
                let sec = ts.div_euclid(NS as i64) - i64::from(carry as i32);
                let frac_ns = ts.wrapping_sub(sec.wrapping_mul(NS as i64));
                let raw = if file_nano { frac_ns } else { frac_ns / 1000 };
                // The fields are 32 bits in the file and signed in libpcap.
                let (sec, raw) = (i64::from(sec as u32 as i32), i64::from(raw as u32 as i32));
                let frac = match (file_nano, want_nano) {
                    (false, true) => raw * 1000,
                    (true, false) => raw / 1000,
                    _ => raw,
                };
                (sec, frac)
            }
            None => {
                let (sec, frac_ns) = (ns / NS, ns % NS);
                (sec as i64, if want_nano { frac_ns as i64 } else { (frac_ns / 1000) as i64 })
            }
        }
    }

    /// Keep the header of the packet `pcap_next_ex` hands out until the next read.
    pub fn keep_header(&self, hdr: PcapPkthdr) -> *mut PcapPkthdr {
        let slot = self.hdr.get();
        // SAFETY: only the reading thread writes the slot, between reads; the
        // caller holds the previous pointer only until this read, as libpcap says.
        unsafe { *slot = hdr };
        slot
    }

    /// The engine's counters, once capture started.
    pub fn stats(&self) -> Option<weir::stats::QueueStats> {
        self.stats.get().map(|s| s.read().total())
    }

    /// Close: stop capture, count what was not read, and say so if asked.
    pub fn close(&self) {
        let Ok(mut st) = self.state.try_borrow_mut() else { return };
        let stage = std::mem::replace(&mut st.stage, Stage::Ended);
        if let Stage::Reading(r) = stage {
            let report = r.finish();
            self.report(report.stats);
        }
    }

    /// weir's report, if asked for, with the packets the filter rejected here
    /// moved from delivered (to this handle) to filtered.
    fn report(&self, mut stats: Snapshot) {
        let rejected = self.rejected.borrow();
        for q in &mut stats.queues {
            let (n, bytes) = rejected.get(usize::from(q.queue.0)).copied().unwrap_or_default();
            debug_assert!(n <= q.delivered, "rejected only what was delivered here");
            q.delivered -= n;
            q.delivered_bytes = q.delivered_bytes.saturating_sub(bytes);
            q.filtered += n;
        }
        self.settings.report(&stats);
    }

    /// `pcap_get_selectable_fd`: an eventfd, readable when a read may find a
    /// packet or the end. Before capture starts it is readable, so that a
    /// poller's first read starts capture.
    pub fn selectable_fd(&self) -> i32 {
        if let Some(fd) = self.selectable.get() {
            return fd.as_raw_fd();
        }
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        let tied = EventFd::new().and_then(|fd| {
            match &mut st.stage {
                Stage::Reading(r) => r.attach_ready_fd(fd.try_clone()?)?,
                _ => fd.signal(),
            }
            Ok(fd)
        });
        let fd = match tied {
            Ok(fd) => fd,
            Err(e) => {
                self.set_error(&format!("selectable descriptor: {e}"));
                return PCAP_ERROR;
            }
        };
        self.selectable.get_or_init(|| fd).as_raw_fd()
    }

    /// `pcap_get_required_select_timeout`: with locality buffering, a poller
    /// must read this often, or a batch from a source gone quiet waits.
    pub fn select_timeout(&self) -> Option<&libc::timeval> {
        self.select_tv
            .get_or_init(|| {
                let d = self.settings.locality.filter(|_| !self.offline)?.quiet_after();
                Some(libc::timeval { tv_sec: d.as_secs() as libc::time_t, tv_usec: d.subsec_micros() as libc::suseconds_t })
            })
            .as_ref()
    }

    pub fn set_error(&self, msg: &str) {
        let buf = self.errbuf.get();
        let bytes = msg.as_bytes();
        let n = bytes.len().min(ERRBUF_SIZE - 1);
        // SAFETY: the buffer is ours and ERRBUF_SIZE long; we write n < ERRBUF_SIZE
        // bytes and a NUL. A pointer pcap_geterr returned earlier reads it as a C string.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), (*buf).as_mut_ptr(), n);
            (*buf)[n] = 0;
        }
    }

    pub fn errbuf(&self) -> *mut c_char {
        self.errbuf.get().cast()
    }

    fn busy(&self) -> i32 {
        self.set_error("this pcap_t is being read: the call is not allowed from inside its own packet callback");
        PCAP_ERROR
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.close();
    }
}
