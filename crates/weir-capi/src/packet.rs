//! The C API of weir's packets (`include/weir_packet.h` is the reference):
//! a `weir_packets_t` names a source and holds the engine options; opened,
//! it is an [`Engine`]; then either [`weir_packets_run`] starts it with a
//! worker thread per queue calling the C callback ([`Engine::start`]), or
//! [`weir_packets_start`] gives each queue a [`Reader`] of its own
//! ([`Engine::start_readers`]) that the application's threads pull from,
//! one thread per queue, with [`weir_packets_next`].
//!
//! Every entry point takes the handle by shared reference (its state is
//! behind locks and atomics), so that [`weir_packets_stop`], the statistics
//! and the pulls of other queues may be called from callbacks and other
//! threads while a run or a pull holds it; checks its pointers; and catches
//! panics, which become -1 and a message.
//!
//! A queue's reader sits in a slot of its own, locked by the one call that
//! pulls from it, so pulls of different queues never wait for each other;
//! the slots are made when the source is first opened, so a pull finds them
//! without taking a lock the other queues' pulls take too.

use super::handler::UserPtr;
use super::{c_string, error_chain, lock, panic_text, text, write_errbuf};
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use weir::engine::{Read, Reader, StopHandle, Watch};
use weir::source::{LiveOptions, SourceSpec};
use weir::stats::QueueStats;
use weir::{Engine, Handler, Packet, PoolConfig, QueueId};

/// `weir_packets_next`'s answer at the end of its queue (`WEIR_END`).
pub const END: c_int = -2;

/// `weir_packets_stats`' queue index for the total of every queue (`WEIR_ALL_QUEUES`).
pub const ALL_QUEUES: c_int = -1;

/// `struct weir_packet`: one packet, as a callback or a pull sees it.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct CPacket {
    pub data: *const u8,
    pub ts_ns: u64,
    pub caplen: u32,
    pub wire_len: u32,
    pub queue: u32,
    pub queue_index: u32,
}

impl Default for CPacket {
    fn default() -> CPacket {
        CPacket { data: std::ptr::null(), ts_ns: 0, caplen: 0, wire_len: 0, queue: 0, queue_index: 0 }
    }
}

impl CPacket {
    fn of(p: &Packet<'_>, queue_index: u32) -> CPacket {
        let d = p.data();
        CPacket {
            data: d.as_ptr(),
            ts_ns: p.ts_ns(),
            caplen: p.caplen(),
            wire_len: p.wire_len(),
            queue: u32::from(p.queue().0),
            queue_index,
        }
    }
}

/// `weir_queue_stats_t`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CQueueStats {
    pub queue: u32,
    pub queue_index: u32,
    pub received: u64,
    pub delivered: u64,
    pub filtered: u64,
    pub capture_drops: u64,
    pub delivery_drops: u64,
    pub unread: u64,
    pub in_flight: u64,
    pub received_bytes: u64,
    pub delivered_bytes: u64,
    pub offloaded: u64,
    pub bad_recycles: u64,
}

impl CQueueStats {
    fn of(s: &QueueStats, queue: u32, queue_index: u32) -> CQueueStats {
        CQueueStats {
            queue,
            queue_index,
            received: s.received,
            delivered: s.delivered,
            filtered: s.filtered,
            capture_drops: s.capture_drops,
            delivery_drops: s.delivery_drops,
            unread: s.unread,
            in_flight: s.in_flight,
            received_bytes: s.received_bytes,
            delivered_bytes: s.delivered_bytes,
            offloaded: s.offloaded,
            bad_recycles: s.bad_recycles,
        }
    }
}

/// `weir_packet_cb`.
pub type PacketCb = unsafe extern "C" fn(*const CPacket, *mut c_void);

/// The engine options `weir_packets_set` takes.
#[derive(Clone, Default)]
struct Options {
    filter: Option<String>,
    live: LiveOptions,
    pool: Option<PoolConfig>,
    count: Option<u64>,
    duration: Option<Duration>,
}

/// What the handle is doing.
enum State {
    /// Nothing open: the options may change.
    Idle,
    /// The source is open and nothing runs yet.
    Opened(Box<Engine>),
    /// `weir_packets_run` runs.
    Running,
    /// A pull is being started or finished (the words say which).
    Changing(&'static str),
    /// The readers are in the slots; `watcher` turns the stop flag (and the
    /// time limit) into a stop until `done` is set; `stopper` stops them all.
    Pulling { done: Arc<AtomicBool>, watcher: JoinHandle<()>, stopper: StopHandle },
}

/// Where the statistics are read from.
enum Counters {
    /// Never opened.
    None,
    /// Opened, not started: each queue at zero.
    Zero(Vec<QueueId>),
    /// Running or pulling: the engine's counters now.
    Live(Vec<Watch>),
    /// The last run's final counters.
    Final(Vec<QueueStats>),
}

impl Counters {
    fn read(&self) -> Vec<QueueStats> {
        match self {
            Counters::None => Vec::new(),
            Counters::Zero(qs) => qs.iter().map(|&queue| QueueStats { queue, ..QueueStats::default() }).collect(),
            Counters::Live(ws) => ws.iter().flat_map(|w| w.stats().queues).collect(),
            Counters::Final(qs) => qs.clone(),
        }
    }
}

/// One queue's reader, for pulls.
enum Slot {
    /// No pull started.
    Unused,
    Reading(Box<Reader>),
    /// The pull was finished: every later pull says the end.
    Finished,
}

/// The texts of the handle's failures, each kept until the handle is
/// destroyed, so that a text handed to one thread is not freed by another
/// thread's failure; the same text is kept once.
#[derive(Default)]
struct Errors {
    texts: Vec<CString>,
    latest: Option<usize>,
}

/// `weir_packets_t`.
pub struct WeirPackets {
    source: String,
    opts: Mutex<Options>,
    callback: Mutex<Option<(PacketCb, UserPtr)>>,
    state: Mutex<State>,
    /// The queues and link type of the source as last opened.
    opened: Mutex<Option<(Vec<QueueId>, u32)>>,
    counters: Mutex<Counters>,
    /// The pull slots, one per queue, made at the first open.
    slots: OnceLock<Box<[Mutex<Slot>]>>,
    /// Asked to stop: a flag, so that a signal handler may set it; shared
    /// with a pull's watcher thread.
    stop: Arc<AtomicBool>,
    errors: Mutex<Errors>,
}

impl WeirPackets {
    fn fail(&self, msg: String) {
        let text = c_string(msg);
        let mut e = lock(&self.errors);
        let at = match e.texts.iter().position(|t| *t == text) {
            Some(i) => i,
            None => {
                e.texts.push(text);
                e.texts.len() - 1
            }
        };
        e.latest = Some(at);
    }
}

/// Runs `f` on the handle behind `h`: its answer, or -1 for a NULL handle,
/// for an error (kept as the handle's error text) and for a panic.
fn call(h: *mut WeirPackets, f: impl FnOnce(&WeirPackets) -> Result<c_int, String>) -> c_int {
    // SAFETY: a non-NULL `h` comes from weir_packets_create and was not
    // destroyed (the header's contract); it is only ever used shared.
    let Some(h) = (unsafe { h.as_ref() }) else { return -1 };
    match catch_unwind(AssertUnwindSafe(|| f(h))) {
        Ok(Ok(n)) => n,
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

/// As [`call`], for functions that answer 0 on success.
fn with(h: *mut WeirPackets, f: impl FnOnce(&WeirPackets) -> Result<(), String>) -> c_int {
    call(h, |h| f(h).map(|()| 0))
}

/// What the source's state forbids, in words, or nothing.
fn busy(s: &State) -> Option<&'static str> {
    match s {
        State::Idle | State::Opened(_) => None,
        State::Running => Some("weir_packets_run runs on this handle"),
        State::Changing(what) => Some(what),
        State::Pulling { .. } => Some("a pull runs on this handle (weir_packets_start): weir_packets_finish ends it"),
    }
}

/// `weir_packets_create`: a handle for `source`, or NULL with the reason in `errbuf`.
///
/// # Safety
/// `source` is NULL or a C string; `errbuf` is NULL or holds ERRBUF_SIZE bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_create(source: *const c_char, errbuf: *mut c_char) -> *mut WeirPackets {
    let made = catch_unwind(|| {
        // SAFETY: the caller's contract.
        let name = unsafe { text(source, "the source") }?;
        name.parse::<SourceSpec>().map_err(|e| error_chain(&e))?;
        Ok::<_, String>(Box::into_raw(Box::new(WeirPackets {
            source: name.to_string(),
            opts: Mutex::new(Options::default()),
            callback: Mutex::new(None),
            state: Mutex::new(State::Idle),
            opened: Mutex::new(None),
            counters: Mutex::new(Counters::None),
            slots: OnceLock::new(),
            stop: Arc::new(AtomicBool::new(false)),
            errors: Mutex::new(Errors::default()),
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

/// `weir_packets_set`: one engine option by name (see the header).
///
/// # Safety
/// `h` is NULL or a live handle; `key` and `value` are NULL or C strings.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_set(h: *mut WeirPackets, key: *const c_char, value: *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    let kv = unsafe { text(key, "the key").and_then(|k| Ok((k, text(value, "the value")?))) };
    with(h, |h| {
        let (k, v) = kv?;
        let state = lock(&h.state);
        if let Some(what) = busy(&state) {
            return Err(format!("{k}: the options cannot change while {what}"));
        }
        if matches!(*state, State::Opened(_)) {
            return Err(format!("{k}: the source is open, with the options it had: set them before weir_packets_open"));
        }
        let mut o = lock(&h.opts);
        let number = |v: &str| v.trim().parse::<u64>().map_err(|_| format!("{k}: {v:?} is not a whole number"));
        match k {
            "filter" => o.filter = Some(v.trim().to_string()).filter(|f| !f.is_empty()),
            "snaplen" => {
                // The default is the largest a live source keeps.
                let max = LiveOptions::default().snaplen;
                o.live.snaplen = match number(v)? {
                    n @ 1.. if n <= u64::from(max) => n as u32,
                    n => return Err(format!("snaplen: {n} is not from 1 to {max}")),
                };
            }
            "promisc" => o.live.promisc = number(v)? != 0,
            "netns" => o.live.netns = Some(v.into()).filter(|p: &std::path::PathBuf| !p.as_os_str().is_empty()),
            "pool" => o.pool = Some(v.parse::<PoolConfig>().map_err(|e| format!("pool: {v:?}: {e}"))?),
            "count" => o.count = Some(number(v)?).filter(|&n| n > 0),
            "duration_ms" => o.duration = Some(Duration::from_millis(number(v)?)).filter(|d| !d.is_zero()),
            _ => return Err(format!("{k:?} is not an option (filter, snaplen, promisc, netns, pool, count, duration_ms)")),
        }
        Ok(())
    })
}

/// Builds the engine from the handle's options: opens the source, compiles
/// the filter; notes the queues and the link type, and makes the pull slots
/// at the first open.
fn build(h: &WeirPackets) -> Result<Engine, String> {
    let o = lock(&h.opts).clone();
    let mut b = Engine::builder().source(&h.source).map_err(|e| error_chain(&e))?.live(o.live);
    if let Some(p) = o.pool {
        b = b.pool(p);
    }
    if let Some(f) = o.filter {
        b = b.filter(f);
    }
    if let Some(n) = o.count {
        b = b.packet_limit(n);
    }
    if let Some(d) = o.duration {
        b = b.time_limit(d);
    }
    let engine = b.build().map_err(|e| error_chain(&e))?;
    let queues = engine.info().queues.clone();
    let slots = h.slots.get_or_init(|| queues.iter().map(|_| Mutex::new(Slot::Unused)).collect());
    if slots.len() != queues.len() {
        return Err(format!(
            "{} has {} queues now and had {} when this handle first opened it: a handle keeps its number of queues; create another",
            h.source,
            queues.len(),
            slots.len()
        ));
    }
    *lock(&h.counters) = Counters::Zero(queues.clone());
    *lock(&h.opened) = Some((queues, engine.info().link_type.0));
    Ok(engine)
}

/// The engine to start: the one opened, or one opened now. The state is
/// then `next` (running or pulling), unless this fails.
fn take_engine(h: &WeirPackets, next: State) -> Result<Engine, String> {
    let mut state = lock(&h.state);
    if let Some(what) = busy(&state) {
        return Err(format!("{what}: one run or pull at a time"));
    }
    let engine = match std::mem::replace(&mut *state, State::Idle) {
        State::Opened(e) => *e,
        _ => build(h)?,
    };
    *state = next;
    Ok(engine)
}

/// `weir_packets_open`: open the source now (it is opened by the run or
/// the start otherwise), to learn its queues.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_open(h: *mut WeirPackets) -> c_int {
    with(h, |h| {
        let mut state = lock(&h.state);
        if let Some(what) = busy(&state) {
            return Err(format!("weir_packets_open: {what}"));
        }
        if matches!(*state, State::Idle) {
            *state = State::Opened(Box::new(build(h)?));
        }
        Ok(())
    })
}

/// `weir_packets_queues`: the number of queues of the source as opened.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_queues(h: *mut WeirPackets) -> c_int {
    call(h, |h| match &*lock(&h.opened) {
        Some((queues, _)) => Ok(queues.len() as c_int),
        None => Err("the source is not open yet: weir_packets_open opens it".into()),
    })
}

/// `weir_packets_linktype`: the source's link type (a LINKTYPE_ number).
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_linktype(h: *mut WeirPackets) -> c_int {
    call(h, |h| match &*lock(&h.opened) {
        Some((_, link)) => c_int::try_from(*link).map_err(|_| format!("link type {link} does not fit an int")),
        None => Err("the source is not open yet: weir_packets_open opens it".into()),
    })
}

/// `weir_packets_on_packet`: the callback of a run (NULL removes it).
///
/// # Safety
/// `h` is NULL or a live handle; `cb` is NULL or a function of the header's
/// type, safe to call on the workers with `user` (see the header's threading).
#[no_mangle]
pub unsafe extern "C" fn weir_packets_on_packet(h: *mut WeirPackets, cb: Option<PacketCb>, user: *mut c_void) -> c_int {
    with(h, |h| {
        if let State::Running = *lock(&h.state) {
            return Err("the callback cannot change while weir_packets_run runs".into());
        }
        *lock(&h.callback) = cb.map(|cb| (cb, UserPtr(user)));
        Ok(())
    })
}

/// One queue's handler in a run: calls the C callback.
struct CHandler {
    cb: PacketCb,
    user: UserPtr,
    index: u32,
}

impl Handler for CHandler {
    fn packet(&mut self, p: &Packet<'_>) {
        let view = CPacket::of(p, self.index);
        // SAFETY: the callback was given as a `weir_packet_cb`; `view` and
        // the `caplen` bytes at its `data` live for the call (the packet is
        // borrowed from the worker's chunk until this returns), and `user`
        // is the application's own pointer, whose use on several workers at
        // once the application answers for (the header's threading).
        unsafe { (self.cb)(&view, self.user.0) }
    }
}

/// How often a run, or a pull's watcher, looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

/// Puts the handle back to idle when a run or a pull ends, even by a
/// panic, and clears the stop flag.
struct Ended<'a>(&'a WeirPackets);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        *lock(&self.0.state) = State::Idle;
        self.0.stop.store(false, Ordering::Release);
    }
}

fn run(h: &WeirPackets) -> Result<(), String> {
    let Some((cb, user)) = *lock(&h.callback) else {
        return Err("no packet callback: set one with weir_packets_on_packet, or pull packets with weir_packets_start".into());
    };
    let engine = take_engine(h, State::Running)?;
    let _end = Ended(h);
    let queues = engine.info().queues.clone();
    let index = |q: QueueId| queues.iter().position(|&x| x == q).unwrap_or(0) as u32;
    // Held while the workers start, so that a callback reading the
    // statistics waits for the run's counters rather than reading zeros.
    let mut counters = lock(&h.counters);
    let running = engine.start(|q| CHandler { cb, user, index: index(q) }).map_err(|e| error_chain(&e))?;
    *counters = Counters::Live(vec![running.watch()]);
    drop(counters);
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
    *lock(&h.counters) = Counters::Final(report.stats.queues.clone());
    match report.error() {
        Some(e) => Err(error_chain(e)),
        None => Ok(()),
    }
}

/// `weir_packets_run`: open the source if need be, and run it to its end
/// (or a stop), calling the callback on each queue's worker.
///
/// # Safety
/// `h` is NULL or a live handle; the callback set on it keeps the header's contract.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_run(h: *mut WeirPackets) -> c_int {
    with(h, run)
}

/// Turns the stop flag, and the time limit, into a stop of a pull, until `done`.
fn watch_pull(stop: &AtomicBool, stopper: StopHandle, limit: Option<Duration>, done: &AtomicBool) {
    let started = Instant::now();
    while !done.load(Ordering::Acquire) {
        if stop.load(Ordering::Acquire) || limit.is_some_and(|l| started.elapsed() >= l) {
            stopper.stop();
            return;
        }
        std::thread::sleep(STOP_POLL);
    }
}

fn start(h: &WeirPackets) -> Result<(), String> {
    let engine = take_engine(h, State::Changing("a pull is starting on this handle"))?;
    // Until the pull is in place, a failure (or a panic) drops the readers,
    // which stops capture, and puts the handle back to idle.
    let undo = Undo(h);
    let readers = engine.start_readers().map_err(|e| error_chain(&e))?;
    let slots = h.slots.get().ok_or("the pull slots are made when the source opens")?;
    *lock(&h.counters) = Counters::Live(readers.iter().map(Reader::watch).collect());
    // Every reader's stop handle stops them all.
    let stopper = readers.first().map(Reader::stop_handle).ok_or("the source has no queue")?;
    for (slot, r) in slots.iter().zip(readers) {
        *lock(slot) = Slot::Reading(Box::new(r));
    }
    let done = Arc::new(AtomicBool::new(false));
    let limit = lock(&h.opts).duration;
    let (flag, stop, s) = (Arc::clone(&done), Arc::clone(&h.stop), stopper.clone());
    let watcher = std::thread::Builder::new()
        .name("weir-packets-stop".into())
        .spawn(move || watch_pull(&stop, s, limit, &flag))
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    std::mem::forget(undo);
    *lock(&h.state) = State::Pulling { done, watcher, stopper };
    Ok(())
}

/// Undoes a pull's start that did not complete (see [`start`]).
struct Undo<'a>(&'a WeirPackets);

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        for slot in self.0.slots.get().into_iter().flatten() {
            *lock(slot) = Slot::Unused;
        }
        *lock(&self.0.state) = State::Idle;
    }
}

/// `weir_packets_start`: open the source if need be and start capture for
/// pulls, each queue's packets held for [`weir_packets_next`].
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_start(h: *mut WeirPackets) -> c_int {
    with(h, start)
}

/// What a pull's thread does with its queue's slot: `f` on the reader, or
/// the answer for a slot without one.
fn pull(h: &WeirPackets, index: u32, f: impl FnOnce(&mut Reader) -> c_int) -> Result<c_int, String> {
    let Some(slots) = h.slots.get() else { return Err("no pull started: weir_packets_start starts one".into()) };
    let Some(slot) = slots.get(index as usize) else {
        return Err(format!("queue index {index} is out of range: the source has {} queues (0 to {})", slots.len(), slots.len() - 1));
    };
    let mut guard = match slot.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            return Err(format!("queue index {index} is being pulled by another thread: one thread at a time per queue"))
        }
    };
    match &mut *guard {
        Slot::Unused => Err("no pull started: weir_packets_start starts one".into()),
        Slot::Finished => Ok(END),
        Slot::Reading(r) => Ok(f(r)),
    }
}

/// A pull's longest single wait, for a caller that waits with no timeout.
const FOREVER_SLICE: Duration = Duration::from_secs(1);

/// `weir_packets_next`: the next packet of queue `index` into `out`: 1, or
/// 0 when none came within `timeout_ms`, `END` at the end of the queue, -1
/// on an error.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_next(h: *mut WeirPackets, index: u32, timeout_ms: c_int, out: *mut CPacket) -> c_int {
    call(h, |h| {
        if out.is_null() {
            return Err("weir_packets_next: `out` is NULL".into());
        }
        pull(h, index, |r| {
            let (wait, forever) = match u64::try_from(timeout_ms) {
                Ok(ms) => (Duration::from_millis(ms), false),
                Err(_) => (FOREVER_SLICE, true),
            };
            let got = loop {
                match r.next(wait) {
                    Read::Packet(p) => break Some(CPacket::of(&p, index)),
                    Read::End => break None,
                    Read::Idle if forever => {}
                    Read::Idle => return 0,
                }
            };
            match got {
                Some(p) => {
                    // SAFETY: `out` is non-NULL and writable (the caller's
                    // contract); the bytes it points to stay held by the
                    // reader until its next call.
                    unsafe { out.write(p) };
                    1
                }
                None => END,
            }
        })
    })
}

/// Ends a pull: stops capture, closes every reader (what was not pulled is
/// counted unread), keeps the final counters, and puts the handle back to idle.
fn finish(h: &WeirPackets) -> Result<(), String> {
    let (done, watcher, stopper) = {
        let mut state = lock(&h.state);
        if !matches!(*state, State::Pulling { .. }) {
            return Err("no pull to finish: weir_packets_start starts one".into());
        }
        match std::mem::replace(&mut *state, State::Changing("a pull is being finished on this handle")) {
            State::Pulling { done, watcher, stopper } => (done, watcher, stopper),
            _ => unreachable!("matched just above"),
        }
    };
    let _end = Ended(h);
    // Stop first, so that a pull still waiting (on its slot's lock) returns.
    stopper.stop();
    done.store(true, Ordering::Release);
    let _ = watcher.join();
    let slots = h.slots.get().map_or(&[][..], |s| &s[..]);
    // The first reader holds the capture threads: it is closed last.
    let mut stats = Vec::new();
    let mut errors = Vec::new();
    for slot in slots.iter().rev() {
        if let Slot::Reading(r) = std::mem::replace(&mut *lock(slot), Slot::Finished) {
            let report = r.finish();
            stats.extend(report.stats.queues);
            errors.extend(report.errors.iter().map(|e| error_chain(e)));
        }
    }
    stats.reverse();
    *lock(&h.counters) = Counters::Final(stats);
    // The first reader's, closed last, are the capture threads' errors.
    match errors.pop() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `weir_packets_finish`: end a pull.
///
/// # Safety
/// `h` is NULL or a live handle; no packet of the pull is used after.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_finish(h: *mut WeirPackets) -> c_int {
    with(h, finish)
}

/// `weir_packets_stop`: sets the stop flag, nothing else (async-signal-safe:
/// an atomic store); the run, or the pull's watcher, sees it within `STOP_POLL`.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_stop(h: *mut WeirPackets) {
    // SAFETY: the caller's contract.
    if let Some(h) = unsafe { h.as_ref() } {
        h.stop.store(true, Ordering::Release);
    }
}

/// `weir_packets_stats`: queue `index`'s counters now, or the total of
/// every queue for `ALL_QUEUES`.
///
/// # Safety
/// `h` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_stats(h: *mut WeirPackets, index: c_int, out: *mut CQueueStats) -> c_int {
    with(h, |h| {
        if out.is_null() {
            return Err("weir_packets_stats: `out` is NULL".into());
        }
        let queues = lock(&h.counters).read();
        if queues.is_empty() {
            return Err("no statistics yet: the source is not open (weir_packets_open opens it)".into());
        }
        let s = if index == ALL_QUEUES {
            let total = weir::Snapshot { queues }.total();
            CQueueStats::of(&total, u32::MAX, u32::MAX)
        } else {
            let i = usize::try_from(index).ok().filter(|&i| i < queues.len()).ok_or_else(|| {
                format!(
                    "queue index {index} is out of range: the source has {} queues (0 to {}, or WEIR_ALL_QUEUES)",
                    queues.len(),
                    queues.len() - 1
                )
            })?;
            CQueueStats::of(&queues[i], u32::from(queues[i].queue.0), i as u32)
        };
        // SAFETY: `out` is non-NULL and writable (the caller's contract).
        unsafe { out.write(s) };
        Ok(())
    })
}

/// `weir_packets_error`: the latest failure's text, "" if none; kept until
/// the handle is destroyed.
///
/// # Safety
/// `h` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_error(h: *mut WeirPackets) -> *const c_char {
    // SAFETY: the caller's contract.
    match unsafe { h.as_ref() } {
        Some(h) => catch_unwind(AssertUnwindSafe(|| {
            let e = lock(&h.errors);
            // The CString's bytes stay where they are, in the handle, until it is freed.
            e.latest.map_or(c"".as_ptr(), |i| e.texts[i].as_ptr())
        }))
        .unwrap_or(c"".as_ptr()),
        None => c"weir_packets_error: the handle is NULL".as_ptr(),
    }
}

/// `weir_packets_destroy`: finishes a pull, frees the handle. A handle
/// whose run still runs is asked to stop and left allocated (freeing it
/// under the run would be a use after free).
///
/// # Safety
/// `h` is NULL or a handle from weir_packets_create, not destroyed before.
#[no_mangle]
pub unsafe extern "C" fn weir_packets_destroy(h: *mut WeirPackets) {
    // SAFETY: the caller's contract; only read here.
    let Some(r) = (unsafe { h.as_ref() }) else { return };
    let running = catch_unwind(AssertUnwindSafe(|| {
        let pulling = match &*lock(&r.state) {
            State::Running | State::Changing(_) => return true,
            State::Pulling { .. } => true,
            State::Idle | State::Opened(_) => false,
        };
        if pulling {
            let _ = finish(r);
        }
        false
    }));
    match running {
        Ok(false) => {
            // SAFETY: `h` came from Box::into_raw in weir_packets_create; no
            // run or pull uses it, and the caller gives it up.
            let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(h) })));
        }
        _ => r.stop.store(true, Ordering::Release),
    }
}
