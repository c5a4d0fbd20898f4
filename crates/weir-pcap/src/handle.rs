//! What a `pcap_t` is here: a weir engine read by the caller's thread.
//!
//! The contract:
//! - A handle is one of libpcap's three kinds ([`Kind`]): dead (compiles
//!   filters, opens dump files), a savefile, or a live capture, created and
//!   then activated. Each call answers as libpcap 1.10.3 answers it on that
//!   kind of handle (the getters are in [`crate::getters`]).
//! - A handle opens its source when it is opened (a file) or activated (an
//!   interface), and starts capture at the first read.
//! - Filters follow libpcap. On an interface, a filter set before reading is
//!   the engine's (the kernel's: rejected packets take no cell and are counted
//!   as filtered). One set while reading replaces it in the engine, and is also
//!   applied here to the packets captured before the engine took it, which
//!   passed the old one; libpcap does the same to the packets already in its
//!   ring. A file's filter is applied here, record by record, so a new one
//!   judges exactly the records not yet read, as in libpcap, and `pcap_file`
//!   positions stay exact. Packets rejected here are told to the engine's
//!   reader ([`weir::engine::Reader::reject_last`]), which counts them as
//!   filtered in the queue that captured them: one tally, the engine's.
//! - A packet handed out stays valid until the next read on the handle, as
//!   libpcap promises; the engine's reader holds its chunk until then.
//! - Functions a callback may call on its own handle (`pcap_breakloop`,
//!   `pcap_stats`, `pcap_geterr`, the getters) touch only what reading does
//!   not borrow. `pcap_close` during a read (from the callback, or from a
//!   signal handler that interrupted the read) is carried out when the read
//!   returns ([`crate::read`]).
//! - Every drop is counted by the engine; `pcap_stats` reports its counters.

use crate::env::Settings;
use crate::errors;
use crate::savefile::{Layout, Moved, Savefile};
use crate::sys::{self, DeadHandle};
use crate::types::*;
use libc::c_char;
use std::cell::{Cell, OnceCell, RefCell, UnsafeCell};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32};
use weir::engine::{Read, Reader};
use weir::filter::Filter;
use weir::source::{QueueRange, SourceSpec};
use weir::stats::StatsReader;
use weir::tracefile::{TraceHeader, TraceKind};
use weir::{Engine, EventFd, LinkType};

/// Longest a read sleeps before looking at the break flag again. The flag is
/// also signalled on the descriptor the read sleeps on, so this only bounds a
/// break whose signal was drained when the reader re-armed the descriptor
/// just before the read looked at the flag.
pub const BREAK_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// `DLT_DOCSIS`: libpcap offers it on every Ethernet interface besides
/// `DLT_EN10MB` (see [`Handle::datalinks`]).
const DLT_DOCSIS: i32 = 143;
/// libpcap's largest snapshot length, and the frame size of its TPACKET_V3
/// ring, which `pcap_bufsize` reports for a live handle.
pub const MAXIMUM_SNAPLEN: i32 = 262_144;

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
    /// `pcap_set_protocol_linux`: 0 (libpcap's default) is every protocol.
    pub protocol: i32,
}

/// libpcap's kinds of `pcap_t`, which answer the same calls differently.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// From `pcap_open_dead`: activated from the start, reads nothing.
    Dead,
    Savefile,
    /// From `pcap_create`: not activated until `pcap_activate` succeeds.
    Live,
}

pub(crate) enum Stage {
    Dead,
    /// From `pcap_create`, not activated yet.
    Created(LiveConfig),
    /// Opened (a file) or activated (an interface); capture not started.
    Opened(Box<Engine>),
    Reading(Box<Reader>),
    /// Reading ended (end of file, or an error already reported).
    Ended,
}

pub(crate) struct State {
    pub stage: Stage,
    /// The last filter `pcap_setfilter` set: an interface's engine starts with it.
    pub filter: Option<Filter>,
    /// The filter applied here to each packet read: a file's filter, or one
    /// set on an interface while reading (see the module's contract).
    pub here: Option<Filter>,
    /// The system library's twin of this handle, for compiling and dumping.
    dead: Option<DeadHandle>,
    pub timeout: Option<std::time::Duration>,
    pub nonblock: bool,
    /// The reader that reached its end, kept to `pcap_close` (see `Read::End`
    /// in [`crate::read`]).
    pub retired: Option<Box<Reader>>,
}

/// One `pcap_t`.
pub struct Handle {
    errbuf: UnsafeCell<[c_char; ERRBUF_SIZE]>,
    pub(crate) break_loop: AtomicBool,
    /// Calls of the reading functions in progress ([`crate::read::ReadCall`]).
    pub(crate) reading: AtomicU32,
    /// `pcap_close` was called during a read: the read closes the handle when it returns.
    pub(crate) close_pending: AtomicBool,
    pub(crate) state: RefCell<State>,
    pub kind: Kind,
    activated: Cell<bool>,
    /// Activated in immediate mode (libpcap then sizes its buffer otherwise).
    pub immediate: Cell<bool>,
    pub dlt: Cell<i32>,
    pub snaplen: Cell<i32>,
    pub precision: Cell<u32>,
    /// A savefile's header, as libpcap reports it (version, byte order, ...).
    pub trace: Option<TraceHeader>,
    /// The interface, for a live handle.
    pub device: Option<String>,
    /// The file, for a savefile (`None`: standard input).
    pub(crate) path: Option<PathBuf>,
    /// `pcap_file`'s stream (see [`crate::savefile`]).
    savefile: OnceCell<Savefile>,
    /// Where records end in the file; `None` inside for input read only once.
    layout: OnceCell<RefCell<Option<Layout>>>,
    /// Packets read from the engine (for a file, every record, whether the
    /// filter passed it or not).
    pub(crate) records: Cell<u64>,
    pub settings: Settings,
    pub(crate) stats: OnceCell<StatsReader>,
    /// The header of the packet `pcap_next_ex` handed out last.
    pub(crate) hdr: UnsafeCell<PcapPkthdr>,
    /// The descriptor that turns readable when a read may find something:
    /// a live handle's `pcap_get_selectable_fd`, and the one a read itself
    /// sleeps on. The reader's bell signals this very descriptor (shared, not
    /// duplicated).
    ///
    /// Descriptors a handle holds, against libpcap's one (the socket, or the
    /// savefile's stream): this eventfd, made at the first read, and kept to
    /// `pcap_close`: weir reads on threads of its own, so a read that finds
    /// nothing yet must sleep until they ring, in ppoll (a cancellation
    /// point, as libpcap's wait is) on a descriptor `pcap_breakloop` can
    /// signal from any thread or signal handler; closing it sooner would let
    /// a late `pcap_breakloop` write to a reused number. A savefile's stream
    /// (`pcap_file`, the selectable descriptor, and what [`Layout`] reads) is
    /// opened when first asked for, and the engine holds the trace open only
    /// until it is mapped (for the whole read when it reads with read(2)). A
    /// live handle also holds the engine's sockets, one per queue.
    ready: OnceCell<EventFd>,
    /// `pcap_get_required_select_timeout`'s answer, which must outlive the call.
    select_tv: OnceCell<Option<libc::timeval>>,
    /// The program was given the ready descriptor (`pcap_get_selectable_fd`,
    /// `pcap_fileno`): it may poll it, so a read it makes after a wake-up
    /// that found nothing returns at once ([`crate::read`]). A program that
    /// never asked cannot have polled, and its reads wait as libpcap's do.
    pub(crate) fd_given: Cell<bool>,
}

impl Handle {
    fn new(kind: Kind, stage: Stage, dlt: i32, snaplen: i32, precision: u32, settings: Settings) -> Box<Handle> {
        Box::new(Handle {
            errbuf: UnsafeCell::new([0; ERRBUF_SIZE]),
            break_loop: AtomicBool::new(false),
            reading: AtomicU32::new(0),
            close_pending: AtomicBool::new(false),
            state: RefCell::new(State { stage, filter: None, here: None, dead: None, timeout: None, nonblock: false, retired: None }),
            kind,
            activated: Cell::new(kind != Kind::Live),
            immediate: Cell::new(false),
            dlt: Cell::new(dlt),
            snaplen: Cell::new(snaplen),
            precision: Cell::new(precision),
            trace: None,
            device: None,
            path: None,
            savefile: OnceCell::new(),
            layout: OnceCell::new(),
            records: Cell::new(0),
            settings,
            stats: OnceCell::new(),
            hdr: UnsafeCell::new(PcapPkthdr { tv_sec: 0, tv_usec: 0, caplen: 0, len: 0 }),
            ready: OnceCell::new(),
            select_tv: OnceCell::new(),
            fd_given: Cell::new(false),
        })
    }

    pub fn dead(dlt: i32, snaplen: i32, precision: u32) -> Box<Handle> {
        Handle::new(Kind::Dead, Stage::Dead, dlt, snaplen, precision, Settings::default())
    }

    /// `pcap_open_offline` and its variants; `path` None is standard input.
    /// Errors are in libpcap's words ([`crate::errors`]).
    pub fn open_offline(path: Option<PathBuf>, precision: u32) -> Result<Box<Handle>, String> {
        let settings = Settings::from_env()?;
        if let Some(msg) = path.as_deref().and_then(|p| errors::unopenable(p, &p.to_string_lossy())) {
            return Err(msg);
        }
        let spec = SourceSpec::File { path: path.clone(), queues: QueueRange::single() };
        let engine = settings.builder(spec).build().map_err(|e| errors::open_error(&e))?;
        let info = engine.info();
        let trace = info.trace.clone().ok_or("the file source gave no file header")?;
        let (dlt, snapshot) = (info.link_type.dlt() as i32, trace.snapshot as i32);
        let mut h = Handle::new(Kind::Savefile, Stage::Opened(Box::new(engine)), dlt, snapshot, precision, settings);
        h.trace = Some(trace);
        h.path = path;
        Ok(h)
    }

    /// The file's engine again, to read it anew from the start.
    fn file_engine(&self) -> Result<Engine, String> {
        let spec = SourceSpec::File { path: self.path.clone(), queues: QueueRange::single() };
        self.settings.builder(spec).build().map_err(|e| errors::open_error(&e))
    }

    /// `pcap_fopen_offline`: the handle closes `fp` at `pcap_close`, as libpcap does.
    pub fn adopt_stream(&self, fp: *mut libc::FILE) {
        let _ = self.savefile.set(Savefile::adopt(fp));
    }

    /// For a pcap (not pcapng) file: whether it stores nanoseconds. libpcap
    /// hands such a file's timestamp fields over as the signed 32-bit values
    /// they are (`struct pcap_timeval`), however odd; weir must too.
    pub(crate) fn pcap_file_nano(&self) -> Option<bool> {
        self.trace.as_ref().filter(|t| t.kind == TraceKind::Pcap).map(|t| t.nanosecond)
    }

    /// Where libpcap's stream would stand now, and its buffer size, for a
    /// savefile; `None` for input read only once.
    fn layout_now(&self) -> Option<Result<(i64, u32), String>> {
        let trace = self.trace.as_ref()?;
        // The layout reads the stream's descriptor: no second one on the file.
        let fd = match self.stream() {
            Ok(view) => view.fd(),
            Err(e) => return Some(Err(e)),
        };
        let cell = self.layout.get_or_init(|| RefCell::new(Layout::open(fd, trace)));
        let mut layout = cell.borrow_mut();
        Some(layout.as_mut()?.after(self.records.get()))
    }

    /// `pcap_file`: the savefile's stream, where libpcap's would stand; null
    /// for a live or dead handle, as in libpcap.
    pub fn file(&self) -> *mut libc::FILE {
        if self.kind != Kind::Savefile {
            return std::ptr::null_mut();
        }
        let view = match self.stream() {
            Ok(v) => v,
            Err(e) => {
                self.set_error(&format!("pcap_file: {e}"));
                return std::ptr::null_mut();
            }
        };
        let at = match self.layout_now() {
            None => None,
            Some(Ok((at, _))) => Some(at),
            Some(Err(e)) => {
                self.set_error(&format!("pcap_file: {e}"));
                return std::ptr::null_mut();
            }
        };
        view.show(at, self.records.get())
    }

    /// A savefile's stream (opened on first use; the caller's from
    /// `pcap_fopen_offline`).
    fn stream(&self) -> Result<&Savefile, String> {
        if let Some(v) = self.savefile.get() {
            return Ok(v);
        }
        let v = Savefile::open(self.path.as_deref())?;
        Ok(self.savefile.get_or_init(|| v))
    }

    /// `pcap_bufsize` of a savefile: the buffer libpcap would have grown to
    /// by the records read so far.
    pub fn savefile_bufsize(&self) -> i32 {
        let Some(trace) = &self.trace else { return 0 };
        match self.layout_now() {
            Some(Ok((_, bufsize))) => bufsize as i32,
            _ => Layout::first_bufsize(trace) as i32,
        }
    }

    /// Before a read: follow the caller if it moved `pcap_file`'s stream back
    /// (or on) to a record start it was told of.
    pub(crate) fn follow_stream(&self, st: &mut State) -> Result<(), String> {
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
        st.retired = None;
        let mut reader = self.start_reading(self.file_engine()?, st)?;
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
        view.settled(at);
        Ok(())
    }

    /// Start capture (an interface with the filter set before reading), tied
    /// to the handle's ready descriptor.
    pub(crate) fn start_reading(&self, mut engine: Engine, st: &State) -> Result<Reader, String> {
        engine.set_filter(if self.kind == Kind::Savefile { None } else { st.filter.clone() }).map_err(|e| e.to_string())?;
        let mut r = engine.start_reader().map_err(|e| e.to_string())?;
        // The reader signals the handle's own descriptor, shared, not a duplicate:
        // one descriptor fewer, and it stays open as long as either holds it.
        let tied = self.ready_fd().and_then(|fd| r.attach_ready_fd(fd.share()));
        tied.map_err(|e| format!("the descriptor reads wait on: {e}"))?;
        Ok(r)
    }

    /// The ready descriptor, made on first use.
    pub(crate) fn ready_fd(&self) -> std::io::Result<&EventFd> {
        if let Some(fd) = self.ready.get() {
            return Ok(fd);
        }
        let fd = EventFd::new()?;
        Ok(self.ready.get_or_init(|| fd))
    }

    pub fn create(device: &str) -> Result<Box<Handle>, String> {
        let settings = Settings::from_env()?;
        let cfg = LiveConfig {
            device: device.to_string(),
            snaplen: MAXIMUM_SNAPLEN,
            promisc: false,
            rfmon: false,
            timeout_ms: 0,
            buffer_size: 0,
            immediate: false,
            protocol: 0,
        };
        // libpcap's link type is 0 until activation (its handle is zeroed).
        let mut h = Handle::new(Kind::Live, Stage::Created(cfg), 0, MAXIMUM_SNAPLEN, TSTAMP_PRECISION_MICRO, settings);
        h.device = Some(device.to_string());
        Ok(h)
    }

    /// The configuration of a handle not yet activated, for the `pcap_set_*`
    /// calls; on another, libpcap's refusal.
    pub fn configure(&self, f: impl FnOnce(&mut LiveConfig)) -> i32 {
        if self.refuse_if_activated() {
            return PCAP_ERROR_ACTIVATED;
        }
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
        self.activated.get()
    }

    /// libpcap's `pcap_check_activated`: true, with its message, on an activated handle.
    pub fn refuse_if_activated(&self) -> bool {
        if self.activated.get() {
            self.set_error("can't perform  operation on activated capture");
        }
        self.activated.get()
    }

    /// libpcap's message for calls that need an activated handle.
    pub fn not_activated(&self) -> i32 {
        self.set_error("This handle hasn't been activated yet");
        PCAP_ERROR_NOT_ACTIVATED
    }

    /// `pcap_activate`: open the interface through the engine.
    pub fn activate(&self) -> i32 {
        if self.refuse_if_activated() {
            return PCAP_ERROR_ACTIVATED;
        }
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        let Stage::Created(cfg) = &st.stage else { return PCAP_ERROR_ACTIVATED };
        let cfg = cfg.clone();
        if cfg.rfmon {
            self.set_error(&format!("{}: monitor mode is not supported by weir", cfg.device));
            return PCAP_ERROR_RFMON_NOTSUP;
        }
        if cfg.protocol != 0 && cfg.protocol != libc::ETH_P_ALL {
            self.set_error(&format!(
                "{}: weir captures every protocol (ETH_P_ALL); pcap_set_protocol_linux({:#06x}) is not supported, use a filter",
                cfg.device, cfg.protocol
            ));
            return PCAP_ERROR;
        }
        let snaplen = if cfg.snaplen <= 0 || cfg.snaplen > MAXIMUM_SNAPLEN { MAXIMUM_SNAPLEN } else { cfg.snaplen };
        let spec = SourceSpec::Live { kind: self.settings.source, iface: cfg.device.clone(), queues: self.settings.queues };
        let mut live = weir::source::LiveOptions { snaplen: snaplen as u32, promisc: cfg.promisc, ..Default::default() };
        live.afxdp.take_host_traffic = self.settings.take_host_traffic;
        live.xdp.take_host_traffic = self.settings.take_host_traffic;
        // pcap_set_buffer_size: the ring the kernel fills, for xdp as for afpacket.
        if cfg.buffer_size > 0 {
            live.xdp.ring_bytes = Some((cfg.buffer_size as u64).next_power_of_two().clamp(1 << 20, 1 << 31));
        }
        let ring = &mut live.afpacket;
        if cfg.buffer_size > 0 {
            ring.block_count = (cfg.buffer_size as usize / ring.block_bytes).max(4);
        }
        if cfg.immediate {
            ring.block_timeout = std::time::Duration::from_millis(1);
        } else if cfg.timeout_ms > 0 {
            ring.block_timeout = ring.block_timeout.min(std::time::Duration::from_millis(cfg.timeout_ms as u64));
        }
        let built = self.settings.builder(spec).live(live).build();
        match built {
            Ok(engine) => {
                self.dlt.set(engine.info().link_type.dlt() as i32);
                self.snaplen.set(snaplen);
                st.timeout = (cfg.timeout_ms > 0 && !cfg.immediate).then(|| std::time::Duration::from_millis(cfg.timeout_ms as u64));
                st.stage = Stage::Opened(Box::new(engine));
                self.activated.set(true);
                self.immediate.set(cfg.immediate);
                0
            }
            Err(e) => {
                let (message, code) = errors::activate_error(&e);
                self.set_error(&format!("{}: {message}", cfg.device));
                code
            }
        }
    }

    /// The link types `pcap_list_datalinks` offers: libpcap's list for a
    /// Linux interface adds DOCSIS to Ethernet (the same frames, for a link
    /// to a cable modem termination system); every other handle offers its own.
    pub fn datalinks(&self) -> Vec<i32> {
        let own = self.dlt.get();
        let ethernet = LinkType::ETHERNET.dlt() as i32;
        if self.kind == Kind::Live && (own == ethernet || own == DLT_DOCSIS) {
            vec![ethernet, DLT_DOCSIS]
        } else {
            vec![own]
        }
    }

    /// `pcap_set_datalink` to one of [`datalinks`](Self::datalinks): only the
    /// number changes, as in libpcap, and filters compiled from now on are
    /// compiled for it.
    pub fn switch_datalink(&self, dlt: i32) -> Result<(), String> {
        let mut st = self.state.try_borrow_mut().map_err(|_| "called from inside a packet callback".to_string())?;
        if self.dlt.replace(dlt) != dlt {
            st.dead = None;
        }
        Ok(())
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
            Ok(f) => f.with_engine(self.settings.filter_engine),
            Err(e) => {
                self.set_error(&format!("setfilter: {e}"));
                return PCAP_ERROR;
            }
        };
        let Ok(mut st) = self.state.try_borrow_mut() else { return self.busy() };
        if self.kind == Kind::Savefile {
            st.here = Some(filter.clone());
        } else if let Stage::Reading(r) = &st.stage {
            // What the reader already holds is judged here by what the engine
            // runs: the filter bound to the interface, where it has one.
            let engine_runs = match filter.clone().bind_where_known(r.info().link) {
                Ok(bound) => bound,
                Err(e) => {
                    self.set_error(&format!("setfilter: {e}"));
                    return PCAP_ERROR;
                }
            };
            if let Err(e) = r.replace_filter(Some(engine_runs.clone())) {
                self.set_error(&format!("setfilter: {e}"));
                return PCAP_ERROR;
            }
            st.here = Some(engine_runs);
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
            self.settings.report(&report.stats);
        }
        // Reported when it ended; only its memory and descriptors go now.
        st.retired = None;
    }

    /// `pcap_get_selectable_fd` of a savefile: the file's descriptor, as in
    /// libpcap (that of `pcap_file`'s stream, always readable; a read from a
    /// file waits for weir's capture thread itself).
    pub fn savefile_fd(&self) -> i32 {
        match self.stream() {
            Ok(view) => view.fd(),
            Err(e) => {
                self.set_error(&format!("selectable descriptor: {e}"));
                PCAP_ERROR
            }
        }
    }

    /// `pcap_get_selectable_fd` of an activated live handle:
    /// the ready descriptor, readable when a read may find a packet or the
    /// end. Before capture starts it is readable, so that a poller's first
    /// read starts capture.
    pub fn selectable_fd(&self) -> i32 {
        let Ok(st) = self.state.try_borrow() else { return self.busy() };
        let reading = matches!(st.stage, Stage::Reading(_));
        match self.ready_fd() {
            Ok(fd) => {
                self.fd_given.set(true);
                if !reading {
                    fd.signal();
                }
                fd.as_raw_fd()
            }
            Err(e) => {
                self.set_error(&format!("selectable descriptor: {e}"));
                PCAP_ERROR
            }
        }
    }

    /// `pcap_get_required_select_timeout`: with locality buffering, a poller
    /// must read this often, or a batch from a source gone quiet waits.
    pub fn select_timeout(&self) -> Option<&libc::timeval> {
        self.select_tv
            .get_or_init(|| {
                let d = self.settings.locality.filter(|_| self.kind == Kind::Live)?.quiet_after();
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

    pub(crate) fn busy(&self) -> i32 {
        self.set_error("this pcap_t is being read: the call is not allowed from inside its own packet callback");
        PCAP_ERROR
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.close();
    }
}
