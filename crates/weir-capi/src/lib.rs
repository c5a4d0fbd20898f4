//! The C API of weir's stream layer: `libweirstream.so`, declared by
//! `include/weir_stream.h` (the header is the reference: what each function
//! does, the threading, the errors). The same library holds the forwarder's
//! ([`forward`], `include/weir_forward.h`) and the packets' ([`packet`],
//! `include/weir_packet.h`: every queue's packets by callback or by pull).
//!
//! A `weir_streams_t` holds the source's name, the [`StreamConfig`], the
//! engine filter and the C callbacks; [`weir_streams_run`] builds an
//! [`Engine`] from them and runs [`Engine::start_streams`], one handler per
//! queue calling the callbacks on that queue's worker. A `weir_stream_t` is a
//! [`handler::StreamRef`] on the worker's stack, valid during one callback.
//!
//! Every entry point takes the handle by shared reference (its state is
//! behind locks and atomics), so that [`weir_streams_stop`] and the getters
//! may be called from callbacks and other threads while a run holds it;
//! checks its pointers; and catches panics, which become -1 and a message.
//!
//! The crate is the C API, so it may use `unsafe`; every block says why it
//! holds.

#![allow(unsafe_code)]

pub mod forward;
pub mod handler;
pub mod packet;

use handler::{CHandler, CStream, Callbacks, ClosedCb, CreatedCb, DataCb, StreamInfo, StreamRef, UserPtr};
use std::ffi::{c_char, c_int, c_longlong, c_ulonglong, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use weir::stream::{Class, Mode, StreamConfig, StreamStats, MAX_PIECE, PRIORITIES};
use weir::Engine;

/// Size of `weir_streams_create`'s error buffer (`WEIR_ERRBUF_SIZE`).
pub const ERRBUF_SIZE: usize = 256;

/// `weir_streams_t`.
pub struct WeirStreams {
    source: String,
    settings: Mutex<Settings>,
    error: Mutex<CString>,
    stop: AtomicBool,
    running: AtomicBool,
    stats: Mutex<StreamStats>,
}

#[derive(Clone, Default)]
struct Settings {
    cfg: StreamConfig,
    filter: Option<String>,
    cbs: Callbacks,
}

/// `weir_stream_stats_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CStats {
    pub packets: u64,
    pub not_ip: u64,
    pub malformed: u64,
    pub fragments: u64,
    pub untracked: u64,
    pub to_stream: u64,
    pub discarded_packets: u64,
    pub dropped_packets: u64,
    pub streams: u64,
    pub connections: u64,
    pub closed_fin: u64,
    pub closed_rst: u64,
    pub closed_idle: u64,
    pub evicted: u64,
    pub closed_end: u64,
    pub closed_reused: u64,
    pub bytes: u64,
    pub delivered: u64,
    pub gap: u64,
    pub duplicate: u64,
    pub discarded: u64,
    pub dropped: u64,
    pub refused: u64,
    pub pieces: u64,
    pub memory_peak: u64,
}

impl From<&StreamStats> for CStats {
    fn from(s: &StreamStats) -> CStats {
        CStats {
            packets: s.packets,
            not_ip: s.not_ip,
            malformed: s.malformed,
            fragments: s.fragments,
            untracked: s.untracked,
            to_stream: s.to_stream,
            discarded_packets: s.discarded_packets,
            dropped_packets: s.dropped_packets,
            streams: s.streams,
            connections: s.connections,
            closed_fin: s.closed_fin,
            closed_rst: s.closed_rst,
            closed_idle: s.closed_idle,
            evicted: s.evicted,
            closed_end: s.closed_end,
            closed_reused: s.closed_reused,
            bytes: s.bytes,
            delivered: s.delivered,
            gap: s.gap,
            duplicate: s.duplicate,
            discarded: s.discarded,
            dropped: s.dropped,
            refused: s.refused,
            pieces: s.pieces,
            memory_peak: s.memory_peak,
        }
    }
}

/// Locks, ignoring poisoning: every lock here guards plain values that a
/// panic cannot leave half-written.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn c_string(msg: String) -> CString {
    CString::new(msg.replace('\0', " ")).expect("NULs replaced")
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    let what = p.downcast_ref::<&str>().map(|s| (*s).to_string()).or_else(|| p.downcast_ref::<String>().cloned());
    format!("internal error in weir: {}", what.unwrap_or_else(|| "panic".into()))
}

/// An error and its causes, each once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        source = s.source();
    }
    text
}

impl WeirStreams {
    fn fail(&self, msg: String) {
        *lock(&self.error) = c_string(msg);
    }
}

/// Runs `f` on the handle behind `h`: -1 for a NULL handle, for an error
/// (kept as the handle's error text) and for a panic.
fn with_handle(h: *mut WeirStreams, f: impl FnOnce(&WeirStreams) -> Result<(), String>) -> c_int {
    // SAFETY: a non-NULL `h` comes from weir_streams_create and was not
    // destroyed (the header's contract); it is only ever used shared.
    let Some(h) = (unsafe { h.as_ref() }) else { return -1 };
    match catch_unwind(AssertUnwindSafe(|| f(h))) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            h.fail(msg);
            -1
        }
        Err(p) => {
            h.fail(panic_text(p));
            -1
        }
    }
}

/// Changes the settings, unless a run is using them.
fn set(h: *mut WeirStreams, f: impl FnOnce(&mut Settings) -> Result<(), String>) -> c_int {
    with_handle(h, |h| {
        if h.running.load(Ordering::Acquire) {
            return Err("the settings cannot change while weir_streams_run runs".into());
        }
        f(&mut lock(&h.settings))
    })
}

/// A C string argument, or why not.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| format!("{what} is not UTF-8"))
}

fn mode(mode: c_int) -> Result<Mode, String> {
    match mode {
        0 => Ok(Mode::Packets),
        1 => Ok(Mode::TcpFast),
        2 => Ok(Mode::TcpStrict),
        m => Err(format!("{m} is not a mode (WEIR_MODE_PACKETS, WEIR_MODE_TCP_FAST, WEIR_MODE_TCP_STRICT)")),
    }
}

/// A class setting left as the engine's (`WEIR_UNSET`).
pub const UNSET: c_longlong = -2;

fn cutoff(bytes: c_longlong) -> Result<Option<u64>, String> {
    match bytes {
        -1 => Ok(None),
        b if b < 0 => Err(format!("a cutoff is a number of bytes or -1 (none), not {b}")),
        b => Ok(Some(b as u64)),
    }
}

/// Copies `msg` into the C buffer `errbuf` (ERRBUF_SIZE bytes), cut to fit.
///
/// # Safety
/// `errbuf` is NULL or writable for ERRBUF_SIZE bytes.
unsafe fn write_errbuf(errbuf: *mut c_char, msg: &str) {
    if errbuf.is_null() {
        return;
    }
    let mut n = msg.len().min(ERRBUF_SIZE - 1);
    while !msg.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: `n + 1 <= ERRBUF_SIZE` bytes, within the caller's buffer; the
    // message is Rust's, so the two do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), errbuf.cast::<u8>(), n);
        *errbuf.add(n) = 0;
    }
}

/// `weir_streams_create`: a handle for `source`, or NULL with the reason in `errbuf`.
///
/// # Safety
/// `source` is NULL or a C string; `errbuf` is NULL or holds ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_create(source: *const c_char, errbuf: *mut c_char) -> *mut WeirStreams {
    let made = catch_unwind(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { text(source, "the source") }?;
        name.parse::<weir::source::SourceSpec>().map_err(|e| error_chain(&e))?;
        Ok::<_, String>(Box::into_raw(Box::new(WeirStreams {
            source: name.to_string(),
            settings: Mutex::new(Settings::default()),
            error: Mutex::new(CString::default()),
            stop: AtomicBool::new(false),
            running: AtomicBool::new(false),
            stats: Mutex::new(StreamStats::default()),
        })))
    })
    .unwrap_or_else(|p| Err(panic_text(p)));
    match made {
        Ok(h) => h,
        Err(msg) => {
            // SAFETY: the caller's contract.
            unsafe { write_errbuf(errbuf, &msg) };
            std::ptr::null_mut()
        }
    }
}

/// `weir_streams_destroy`. A handle still running is asked to stop and
/// left allocated (freeing it under the run would be a use after free).
///
/// # Safety
/// `h` is NULL or a handle from weir_streams_create, not destroyed before.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_destroy(h: *mut WeirStreams) {
    // SAFETY: the caller's contract; only read here.
    let Some(r) = (unsafe { h.as_ref() }) else { return };
    if r.running.load(Ordering::Acquire) {
        r.stop.store(true, Ordering::Release);
        return;
    }
    // SAFETY: `h` came from Box::into_raw in weir_streams_create and no run
    // uses it; the caller gives it up.
    let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(h) })));
}

/// `weir_streams_error`: the latest failure's text, "" if none.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_error(h: *mut WeirStreams) -> *const c_char {
    // SAFETY: the caller's contract.
    match unsafe { h.as_ref() } {
        // The CString stays in the handle until the next failure replaces it.
        Some(h) => catch_unwind(AssertUnwindSafe(|| lock(&h.error).as_ptr())).unwrap_or(c"".as_ptr()),
        None => c"weir_streams_error: the handle is NULL".as_ptr(),
    }
}

/// `weir_streams_set_mode`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_mode(h: *mut WeirStreams, mode: c_int) -> c_int {
    set(h, |s| {
        s.cfg.mode = self::mode(mode)?;
        Ok(())
    })
}

/// `weir_streams_set_cutoff`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_cutoff(h: *mut WeirStreams, bytes: c_longlong) -> c_int {
    set(h, |s| {
        s.cfg.cutoff = cutoff(bytes)?;
        Ok(())
    })
}

/// `weir_streams_add_cutoff_class`.
///
/// # Safety
/// `h` is NULL or a live handle; `expr` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_add_cutoff_class(h: *mut WeirStreams, expr: *const c_char, bytes: c_longlong) -> c_int {
    set(h, |s| {
        // SAFETY: the caller's contract.
        let e = unsafe { text(expr, "the class's filter expression") }?.trim();
        if e.is_empty() {
            return Err("the class's filter expression is empty".into());
        }
        s.cfg.classes.push(Class { cutoff: Some(cutoff(bytes)?), ..Class::new(e) });
        Ok(())
    })
}

/// `weir_streams_add_class`.
///
/// # Safety
/// `h` is NULL or a live handle; `expr` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_add_class(
    h: *mut WeirStreams,
    expr: *const c_char,
    bytes: c_longlong,
    mode: c_int,
    priority: c_int,
) -> c_int {
    set(h, |s| {
        // SAFETY: the caller's contract.
        let e = unsafe { text(expr, "the class's filter expression") }?.trim();
        if e.is_empty() {
            return Err("the class's filter expression is empty".into());
        }
        let unset = |v: c_int| c_longlong::from(v) == UNSET;
        let class = Class {
            cutoff: match bytes {
                UNSET => None,
                -1 => Some(None),
                b if b >= 0 => Some(Some(b as u64)),
                b => return Err(format!("class `{e}`: a cutoff is a number of bytes, -1 (none) or WEIR_UNSET, not {b}")),
            },
            mode: (!unset(mode)).then(|| self::mode(mode)).transpose().map_err(|m| format!("class `{e}`: {m}, or WEIR_UNSET"))?,
            priority: match priority {
                p if unset(p) => None,
                p if (0..c_int::from(PRIORITIES)).contains(&p) => Some(p as u8),
                p => return Err(format!("class `{e}`: a priority is 0 to {} or WEIR_UNSET, not {p}", PRIORITIES - 1)),
            },
            ..Class::new(e)
        };
        s.cfg.classes.push(class);
        Ok(())
    })
}

/// `weir_streams_set_piece`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_piece(h: *mut WeirStreams, bytes: usize, overlap: usize) -> c_int {
    set(h, |s| {
        if bytes == 0 || bytes > MAX_PIECE {
            return Err(format!("the piece size must be from 1 to {MAX_PIECE} bytes, not {bytes}"));
        }
        if overlap >= bytes {
            return Err(format!("the piece overlap ({overlap}) must be less than the piece size ({bytes})"));
        }
        s.cfg.piece = bytes;
        s.cfg.piece_overlap = overlap;
        Ok(())
    })
}

/// `weir_streams_set_flush_timeout_ms`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_flush_timeout_ms(h: *mut WeirStreams, ms: c_ulonglong) -> c_int {
    set(h, |s| {
        s.cfg.flush_timeout_ns = (ms > 0).then(|| ms.saturating_mul(1_000_000));
        Ok(())
    })
}

/// `weir_streams_set_idle_timeout_ms`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_idle_timeout_ms(h: *mut WeirStreams, ms: c_ulonglong) -> c_int {
    set(h, |s| {
        if ms == 0 {
            return Err("the idle timeout must be more than 0".into());
        }
        s.cfg.idle_timeout_ns = ms.saturating_mul(1_000_000);
        Ok(())
    })
}

/// `weir_streams_set_max_streams`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_max_streams(h: *mut WeirStreams, connections: usize) -> c_int {
    set(h, |s| {
        if connections == 0 || connections >= u32::MAX as usize {
            return Err(format!("the stream table holds 1 to {} connections, not {connections}", u32::MAX - 1));
        }
        s.cfg.max_connections = connections;
        Ok(())
    })
}

/// `weir_streams_set_memory`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_memory(h: *mut WeirStreams, bytes: c_ulonglong) -> c_int {
    set(h, |s| {
        s.cfg.memory = bytes;
        Ok(())
    })
}

/// `weir_streams_set_filter`.
///
/// # Safety
/// `h` is NULL or a live handle; `expr` is NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_set_filter(h: *mut WeirStreams, expr: *const c_char) -> c_int {
    set(h, |s| {
        s.filter = if expr.is_null() {
            None
        } else {
            // SAFETY: the caller's contract.
            let e = unsafe { text(expr, "the filter") }?.trim();
            (!e.is_empty()).then(|| e.to_string())
        };
        Ok(())
    })
}

/// `weir_streams_on_created`.
///
/// # Safety
/// `h` is NULL or a live handle; `cb` is NULL or a function of the header's
/// type, safe to call on the workers with `user` (see the header's threading).
#[no_mangle]
pub unsafe extern "C" fn weir_streams_on_created(h: *mut WeirStreams, cb: Option<CreatedCb>, user: *mut c_void) -> c_int {
    set(h, |s| {
        s.cbs.created = cb.map(|cb| (cb, UserPtr(user)));
        Ok(())
    })
}

/// `weir_streams_on_data`.
///
/// # Safety
/// As [`weir_streams_on_created`].
#[no_mangle]
pub unsafe extern "C" fn weir_streams_on_data(h: *mut WeirStreams, cb: Option<DataCb>, user: *mut c_void) -> c_int {
    set(h, |s| {
        s.cbs.data = cb.map(|cb| (cb, UserPtr(user)));
        Ok(())
    })
}

/// `weir_streams_on_closed`.
///
/// # Safety
/// As [`weir_streams_on_created`].
#[no_mangle]
pub unsafe extern "C" fn weir_streams_on_closed(h: *mut WeirStreams, cb: Option<ClosedCb>, user: *mut c_void) -> c_int {
    set(h, |s| {
        s.cbs.closed = cb.map(|cb| (cb, UserPtr(user)));
        Ok(())
    })
}

/// Clears the running flag (and the stop flag) when a run ends, even by a panic.
struct RunEnd<'a>(&'a WeirStreams);

impl Drop for RunEnd<'_> {
    fn drop(&mut self) {
        self.0.stop.store(false, Ordering::Release);
        self.0.running.store(false, Ordering::Release);
    }
}

/// How often the running call looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

fn run(h: &WeirStreams) -> Result<(), String> {
    if h.running.swap(true, Ordering::AcqRel) {
        return Err("weir_streams_run already runs on this handle".into());
    }
    let _end = RunEnd(h);
    let s = lock(&h.settings).clone();
    s.cfg.check().map_err(|e| error_chain(&e))?;
    let mut b = Engine::builder().application_memory(s.cfg.memory_plan(1)).source(&h.source).map_err(|e| error_chain(&e))?;
    if let Some(f) = &s.filter {
        b = b.filter(f.clone());
    }
    let engine = b.build().map_err(|e| error_chain(&e))?;
    let cbs = s.cbs;
    let running = engine.start_streams(&s.cfg, |_| CHandler { cbs }).map_err(|e| error_chain(&e))?;
    let stopper = running.stop_handle();
    let mut asked = false;
    loop {
        if !asked && h.stop.load(Ordering::Acquire) {
            stopper.stop();
            asked = true;
        }
        if running.wait_for(STOP_POLL) {
            break;
        }
    }
    let report = running.join();
    let mut total = StreamStats::default();
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
    }
    *lock(&h.stats) = total;
    match report.error() {
        Some(e) => Err(error_chain(e)),
        None => Ok(()),
    }
}

/// `weir_streams_run`: opens the source and runs to the end (or a stop).
///
/// # Safety
/// `h` is NULL or a live handle; the callbacks set on it keep the header's contract.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_run(h: *mut WeirStreams) -> c_int {
    with_handle(h, run)
}

/// `weir_streams_stop`: sets the stop flag, nothing else (async-signal-safe:
/// an atomic store).
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_stop(h: *mut WeirStreams) {
    // SAFETY: the caller's contract.
    if let Some(h) = unsafe { h.as_ref() } {
        h.stop.store(true, Ordering::Release);
    }
}

/// `weir_streams_stats`: the latest run's totals.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn weir_streams_stats(h: *mut WeirStreams, out: *mut CStats) -> c_int {
    with_handle(h, |h| {
        if out.is_null() {
            return Err("weir_streams_stats: `out` is NULL".into());
        }
        let stats = CStats::from(&*lock(&h.stats));
        // SAFETY: `out` is non-NULL and writable (the caller's contract).
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// Runs `f` on the stream behind `s`: -1 for a NULL stream, a stream pointer
/// used outside its callback (kept past it, after the run, on another
/// thread), an error or a panic.
fn with_stream(s: *mut CStream, f: impl FnOnce(&mut StreamRef<'_, '_>) -> Result<(), ()>) -> c_int {
    if !handler::is_current(s) {
        return -1;
    }
    // SAFETY: `s` is the pointer the handler handed to the callback running
    // on this thread (checked just above): a StreamRef on this thread's stack
    // that lives until that callback returns, which is after this call.
    let Some(r) = (unsafe { s.cast::<StreamRef<'_, '_>>().as_mut() }) else { return -1 };
    match catch_unwind(AssertUnwindSafe(|| f(r))) {
        Ok(Ok(())) => 0,
        _ => -1,
    }
}

/// `weir_stream_info`.
///
/// # Safety
/// `s` is NULL or the stream of the running callback; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_info(s: *mut CStream, out: *mut StreamInfo) -> c_int {
    with_stream(s, |r| {
        if out.is_null() {
            return Err(());
        }
        let info = StreamInfo::of(r.stream());
        // SAFETY: `out` is non-NULL and writable (the caller's contract).
        unsafe { out.write(info) };
        Ok(())
    })
}

/// `weir_stream_set_cutoff`.
///
/// # Safety
/// `s` is NULL or the stream of the running callback.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_set_cutoff(s: *mut CStream, bytes: c_longlong) -> c_int {
    with_stream(s, |r| {
        let c = cutoff(bytes).map_err(|_| ())?;
        r.ctl().ok_or(())?.set_cutoff(c);
        Ok(())
    })
}

/// `weir_stream_discard`.
///
/// # Safety
/// `s` is NULL or the stream of the running callback.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_discard(s: *mut CStream) -> c_int {
    with_stream(s, |r| {
        r.ctl().ok_or(())?.discard();
        Ok(())
    })
}

/// `weir_stream_set_priority`.
///
/// # Safety
/// `s` is NULL or the stream of the running callback.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_set_priority(s: *mut CStream, priority: c_int) -> c_int {
    with_stream(s, |r| {
        let p = u8::try_from(priority.max(-1)).map_err(|_| ())?;
        r.ctl().ok_or(())?.set_priority(p);
        Ok(())
    })
}

/// `weir_stream_set_user`.
///
/// # Safety
/// `s` is NULL or the stream of the running callback.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_set_user(s: *mut CStream, user: *mut c_void) -> c_int {
    with_stream(s, |r| {
        *r.user = UserPtr(user);
        Ok(())
    })
}

/// `weir_stream_get_user`: the stream's user slot (NULL for a NULL stream).
///
/// # Safety
/// `s` is NULL or the stream of the running callback.
#[no_mangle]
pub unsafe extern "C" fn weir_stream_get_user(s: *mut CStream) -> *mut c_void {
    let mut user = std::ptr::null_mut();
    with_stream(s, |r| {
        user = r.user.0;
        Ok(())
    });
    user
}
