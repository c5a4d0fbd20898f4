//! The C API of `weir forward` (`include/weir_forward.h` is the reference):
//! a `weir_forward_t` holds the interfaces, the options and the verdict
//! callback; [`weir_forward_run`] opens a [`Forwarder`] and runs it, one lane
//! thread per direction and queue calling the callback with each packet the
//! filter passed. The handle is shared by reference, as the stream API's is,
//! so [`weir_forward_stop`] and [`weir_forward_stats`] work from callbacks and
//! other threads while a run holds it; panics become -1 and a message.

use super::{c_string, lock, panic_text, text};
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use weir::forward::{Backend, Direction, ForwardOptions, Forwarder, Judge, LaneStats, StopHandle, Verdict};

/// `weir_verdict_cb`: the packet's bytes, their length and the length on the
/// wire, its timestamp, the lane's direction (0: IN to OUT, 1: back) and
/// queue, and the user pointer. Returns `WEIR_PASS` (0) or `WEIR_DROP` (1).
pub type VerdictCb = unsafe extern "C" fn(*const u8, u32, u32, u64, c_int, c_int, *mut c_void) -> c_int;

/// A user pointer, handed to callbacks on the lane threads (the header
/// says the callback must be safe to call from several threads at once).
#[derive(Copy, Clone)]
struct UserPtr(*mut c_void);
// SAFETY: weir never dereferences it; the header makes the C side
// responsible for what it points to being usable from the lane threads.
unsafe impl Send for UserPtr {}

/// `weir_forward_stats_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CForwardStats {
    pub received: u64,
    pub forwarded: u64,
    pub filtered: u64,
    pub dropped: u64,
    pub tx_failed: u64,
    pub in_flight: u64,
    pub kernel_drops: u64,
}

impl From<&LaneStats> for CForwardStats {
    fn from(s: &LaneStats) -> CForwardStats {
        CForwardStats {
            received: s.received,
            forwarded: s.forwarded,
            filtered: s.filtered,
            dropped: s.dropped,
            tx_failed: s.tx_failed,
            in_flight: s.in_flight,
            kernel_drops: s.kernel_drops,
        }
    }
}

/// `weir_forward_t`.
pub struct WeirForward {
    opts: Mutex<ForwardOptions>,
    verdict: Mutex<Option<(VerdictCb, UserPtr)>>,
    error: Mutex<CString>,
    running: AtomicBool,
    /// Set while a run holds the forwarder, so a stop reaches it.
    stop: Mutex<Option<StopHandle>>,
    /// Asked before the run had its handle: the run stops at once.
    stop_early: AtomicBool,
    stats: Mutex<LaneStats>,
}

fn with(h: *mut WeirForward, f: impl FnOnce(&WeirForward) -> Result<(), String>) -> c_int {
    // SAFETY: a non-NULL `h` comes from weir_forward_create and was not
    // destroyed (the header's contract); it is only ever used shared.
    let Some(h) = (unsafe { h.as_ref() }) else { return -1 };
    match catch_unwind(AssertUnwindSafe(|| f(h))) {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            *lock(&h.error) = c_string(msg);
            -1
        }
        Err(p) => {
            *lock(&h.error) = c_string(panic_text(p));
            -1
        }
    }
}

fn settings(h: *mut WeirForward, f: impl FnOnce(&mut ForwardOptions) -> Result<(), String>) -> c_int {
    with(h, |h| {
        // Acquire: pairs with the run's Release stores of the flag.
        if h.running.load(Ordering::Acquire) {
            return Err("the settings cannot change while weir_forward_run runs".into());
        }
        f(&mut lock(&h.opts))
    })
}

/// `weir_forward_create`: a handle forwarding from `input` to `output`, or
/// NULL with the reason in `errbuf` (of `WEIR_ERRBUF_SIZE` bytes).
///
/// # Safety
/// `input` and `output` are NUL-terminated strings; `errbuf` is NULL or has
/// room for `WEIR_ERRBUF_SIZE` bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_create(input: *const c_char, output: *const c_char, errbuf: *mut c_char) -> *mut WeirForward {
    // SAFETY: the caller's contract.
    let names = unsafe { text(input, "the input interface").and_then(|i| Ok((i, text(output, "the output interface")?))) };
    match names {
        Ok((i, o)) => {
            let opts = ForwardOptions { input: i.to_string(), output: o.to_string(), ..ForwardOptions::default() };
            Box::into_raw(Box::new(WeirForward {
                opts: Mutex::new(opts),
                verdict: Mutex::new(None),
                error: Mutex::new(CString::default()),
                running: AtomicBool::new(false),
                stop: Mutex::new(None),
                stop_early: AtomicBool::new(false),
                stats: Mutex::new(LaneStats::default()),
            }))
        }
        Err(msg) => {
            if !errbuf.is_null() {
                let bytes = msg.as_bytes();
                let n = bytes.len().min(super::ERRBUF_SIZE - 1);
                // SAFETY: `errbuf` has room for ERRBUF_SIZE bytes (the contract); n + 1 fit.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), errbuf, n);
                    *errbuf.add(n) = 0;
                }
            }
            std::ptr::null_mut()
        }
    }
}

/// `weir_forward_set`: one option by name (see the header).
///
/// # Safety
/// `h` is a live handle; `key` and `value` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_set(h: *mut WeirForward, key: *const c_char, value: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    let kv = unsafe { text(key, "the key").and_then(|k| Ok((k, text(value, "the value")?))) };
    settings(h, |o| {
        let (k, v) = kv?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{k}: {v:?} is not a whole number"));
        match k {
            "backend" => o.backend = v.parse::<Backend>().map_err(|e| e.to_string())?,
            "filter" => o.filter = Some(v.to_string()).filter(|f| !f.is_empty()),
            "netns" => o.netns = Some(v.into()).filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty()),
            "bidirectional" => o.bidirectional = number(v)? != 0,
            "count" => o.packet_limit = Some(number(v)?).filter(|&n| n > 0),
            "duration_ms" => o.time_limit = Some(Duration::from_millis(number(v)?)).filter(|d| !d.is_zero()),
            "frames" => o.frames = usize::try_from(number(v)?).map_err(|e| e.to_string())?,
            "promisc" => o.promisc = number(v)? != 0,
            "take_host_traffic" => o.take_host_traffic = number(v)? != 0,
            _ => {
                return Err(format!(
                    "{k:?} is not an option (backend, filter, netns, bidirectional, count, duration_ms, frames, promisc, take_host_traffic)"
                ))
            }
        }
        Ok(())
    })
}

/// `weir_forward_on_verdict`: the callback that judges each packet (NULL: pass all).
///
/// # Safety
/// `h` is a live handle; `cb` and `user` as the header says.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_on_verdict(h: *mut WeirForward, cb: Option<VerdictCb>, user: *mut c_void) -> c_int {
    with(h, |h| {
        // Acquire: as in `settings`.
        if h.running.load(Ordering::Acquire) {
            return Err("the callback cannot change while weir_forward_run runs".into());
        }
        *lock(&h.verdict) = cb.map(|cb| (cb, UserPtr(user)));
        Ok(())
    })
}

/// `weir_forward_run`: open, forward until stopped or a limit, report.
///
/// # Safety
/// `h` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_run(h: *mut WeirForward) -> c_int {
    with(h, |h| {
        // AcqRel: one run at a time; the settings it reads were set before.
        if h.running.swap(true, Ordering::AcqRel) {
            return Err("weir_forward_run is already running on this handle".into());
        }
        let r = run(h);
        // Release: the stats written by the run are visible to whoever sees the flag clear.
        h.running.store(false, Ordering::Release);
        r
    })
}

/// A lane's judge: the C callback, or none (pass all, which the in-kernel
/// backend can run since it needs to see no packet).
struct CJudge {
    cb: Option<(VerdictCb, UserPtr)>,
    lane: c_int,
    queue: c_int,
}

impl Judge for CJudge {
    fn verdict(&mut self, p: &weir::Packet<'_>) -> Verdict {
        let Some((f, user)) = &self.cb else { return Verdict::Pass };
        let d = p.data();
        // SAFETY: the callback's contract (the header): it reads `caplen`
        // bytes at `data` during the call only.
        match unsafe { f(d.as_ptr(), d.len() as u32, p.wire_len(), p.ts_ns(), self.lane, self.queue, user.0) } {
            0 => Verdict::Pass,
            _ => Verdict::Drop,
        }
    }

    fn sees_packets(&self) -> bool {
        self.cb.is_some()
    }
}

fn run(h: &WeirForward) -> Result<(), String> {
    let opts = lock(&h.opts).clone();
    let cb = *lock(&h.verdict);
    let fwd = Forwarder::open(opts).map_err(|e| e.to_string())?;
    let running = fwd
        .start(|dir, q| CJudge { cb, lane: c_int::from(dir == Direction::OutToIn), queue: c_int::from(q) })
        .map_err(|e| e.to_string())?;
    *lock(&h.stop) = Some(running.stop_handle());
    // Relaxed: a flag on its own; a stop asked meanwhile finds the handle above.
    if h.stop_early.swap(false, Ordering::Relaxed) {
        running.stop_handle().stop();
    }
    while !running.finished() {
        std::thread::sleep(Duration::from_millis(20));
        *lock(&h.stats) = LaneStats::sum("total", &running.stats());
    }
    *lock(&h.stop) = None;
    let report = running.join();
    *lock(&h.stats) = LaneStats::sum("total", &report.lanes);
    match report.error {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// `weir_forward_stop`: ask a run to stop (from any thread or callback).
///
/// # Safety
/// `h` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_stop(h: *mut WeirForward) -> c_int {
    with(h, |h| {
        match lock(&h.stop).as_ref() {
            Some(s) => s.stop(),
            // Relaxed: read by the run once it has its handle.
            None => h.stop_early.store(true, Ordering::Relaxed),
        }
        Ok(())
    })
}

/// `weir_forward_stats`: the counters of the run, summed over its lanes.
///
/// # Safety
/// `h` is a live handle; `out` points to a `weir_forward_stats_t`.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_stats(h: *mut WeirForward, out: *mut CForwardStats) -> c_int {
    with(h, |h| {
        let s = CForwardStats::from(&*lock(&h.stats));
        // SAFETY: the caller's contract; checked for NULL.
        match unsafe { out.as_mut() } {
            Some(o) => {
                *o = s;
                Ok(())
            }
            None => Err("the stats pointer is NULL".into()),
        }
    })
}

/// `weir_forward_error`: the last failure's text ("" if none), kept by the handle.
///
/// # Safety
/// `h` is a live handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_error(h: *mut WeirForward) -> *const c_char {
    // SAFETY: as in `with`.
    match unsafe { h.as_ref() } {
        Some(h) => lock(&h.error).as_ptr(),
        None => c"NULL handle".as_ptr(),
    }
}

/// `weir_forward_destroy`: free a handle not running.
///
/// # Safety
/// `h` is a live handle (or NULL), not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_forward_destroy(h: *mut WeirForward) {
    if !h.is_null() {
        // SAFETY: from Box::into_raw in weir_forward_create; the caller gives it up.
        drop(unsafe { Box::from_raw(h) });
    }
}
