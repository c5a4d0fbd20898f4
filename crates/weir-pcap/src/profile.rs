//! Profiling the program this library runs in, for `weir profile -- run`:
//! the engines' stages and the shim's own, written as JSON when the program
//! exits, for `weir profile` to show.
//!
//! The contract:
//! - Profiling is on when `WEIR_PROFILE_FILE` names a file (`env.rs`). The
//!   first handle opened or created makes the process's one [`Profiler`] and
//!   opens the file, before a program gives up its privileges; every engine
//!   this library builds gets that profiler. Without the variable nothing
//!   here runs, and the reading functions take their untimed path.
//! - Each thread that reads gets one stage timer at its first read
//!   ([`weir::profile`]'s windows of records): [`Stage::PcapTake`],
//!   [`Stage::PcapWait`], [`Stage::PcapFilter`], [`Stage::PcapDeliver`] and
//!   [`Stage::Program`], which is the program's callback or, between two
//!   `pcap_next_ex` calls, its own code. A read from inside a callback is not
//!   timed apart: it is the callback's time.
//! - A thread's reads end, and its timer is handed in, when a read reaches
//!   the end of its handle's packets, when the thread ends, or at the
//!   program's exit, whichever comes first; a later read starts a new timer.
//!   The CPU time the thread spent from its first read to then is its
//!   reading time.
//! - At exit (`atexit`) the file gets one JSON object: the clock, every
//!   thread's counts and estimate by stage (keys of [`Stage::key`]), the
//!   packets the engines received (counted as each handle's reading ends:
//!   at the end of its packets, or at `pcap_close`; a handle the program
//!   never closed counts none), the exiting thread's CPU time outside its
//!   reads (start-up, opening, closing, exit: `outside_ns`) and the process's
//!   read and write system calls. Nothing is written when no handle was
//!   opened, nor by a child the program forked. What runs after the handler
//!   (other exit handlers, the kernel tearing the process down), and threads
//!   of the program other than the exiting one outside their reads, are in
//!   the process's CPU time and in no stage. A thread still reading at exit
//!   (another than the exiting one, or the exiting one when the program
//!   exits from inside its callback) cannot hand its timer in: the profile
//!   waits a second for it, then leaves it out.

use serde_json::{json, Map, Value};
use std::cell::{Cell, RefCell};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use weir::profile::{thread_cpu_ns, Profiler, Stage, StageTimer, Ticks};

/// Profiling asked for through the environment (`WEIR_PROFILE_FILE`,
/// `WEIR_PROFILE_EVERY`, read by `env.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileRequest {
    /// Where the profile is written at exit.
    pub path: PathBuf,
    /// One window in this many is timed.
    pub every: u32,
}

/// The process's profile, once a handle asked for one.
struct Shim {
    profiler: Arc<Profiler>,
    file: File,
    /// Packets the engines received, counted as each reader ends.
    packets: AtomicU64,
    /// Reading threads so far, to name their timers.
    threads: AtomicUsize,
    /// The process that started profiling: a child it forks without
    /// exec'ing inherits the exit handler, and must not write its own view.
    pid: u32,
    /// `/proc/self/io`, opened before a program gives up its privileges:
    /// then the file turns root's, but an open one still reads (it is the
    /// process's own).
    io: Option<File>,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// A thread's reads: its timer, and its CPU time when they started.
struct Reads {
    timer: StageTimer,
    cpu_at_start: u64,
}

/// The thread's reads, handed in when the thread ends.
struct Slot(RefCell<Option<Reads>>);

impl Drop for Slot {
    fn drop(&mut self) {
        // Borrowed still when the program calls exit() from inside its
        // callback: glibc runs the thread's destructors then, under the read.
        if let Ok(mut r) = self.0.try_borrow_mut() {
            hand_in(r.take());
        }
    }
}

thread_local! {
    static READS: Slot = const { Slot(RefCell::new(None)) };
    /// CPU time of this thread's reads already handed in. No destructor, so
    /// it can still be read at exit, after `READS` is gone.
    static READ_NS: Cell<u64> = const { Cell::new(0) };
}

/// Start profiling the process as `req` asks, unless it is started already.
pub fn start(req: &ProfileRequest) -> Result<(), String> {
    if SHIM.get().is_some() {
        return Ok(());
    }
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&req.path)
        .map_err(|e| format!("WEIR_PROFILE_FILE={}: {e}", req.path.display()))?;
    let shim = Shim {
        profiler: Arc::new(Profiler::new(req.every)),
        file,
        packets: AtomicU64::new(0),
        threads: AtomicUsize::new(0),
        pid: std::process::id(),
        io: File::open("/proc/self/io").ok(),
    };
    // Two handles opened at once on two threads: one profiler wins, once.
    if SHIM.set(shim).is_ok() {
        // SAFETY: registers a function of this library that takes no
        // arguments and does not unwind; it runs at exit, or when the library
        // is unloaded (it is registered with the library's own handle).
        unsafe { libc::atexit(write_at_exit) };
    }
    Ok(())
}

/// The process's profiler, if it is profiled.
pub fn profiler() -> Option<Arc<Profiler>> {
    SHIM.get().map(|s| Arc::clone(&s.profiler))
}

/// A reader ended having received `n` packets.
pub fn received(n: u64) {
    if let Some(s) = SHIM.get() {
        s.packets.fetch_add(n, Ordering::Relaxed);
    }
}

/// Run `f` with the calling thread's stage timer, made at its first read.
/// `None`, without running `f`, when the process is not profiled or the
/// timer is in use (a read from inside a callback): the caller reads untimed.
pub fn with_timer<R>(f: impl FnOnce(&mut StageTimer) -> R) -> Option<R> {
    let shim = SHIM.get()?;
    READS
        .try_with(|slot| {
            let mut reads = slot.0.try_borrow_mut().ok()?;
            let r = reads.get_or_insert_with(|| {
                let n = shim.threads.fetch_add(1, Ordering::Relaxed);
                Reads { cpu_at_start: thread_cpu_ns(), timer: shim.profiler.timer(&format!("program-{n}"), Stage::PcapTake) }
            });
            Some(f(&mut r.timer))
        })
        .ok()
        .flatten()
}

/// The calling thread's reads reached the end of a handle's packets: hand its
/// timer in now, so that what the program does next is in none of its windows.
pub fn end_reads() {
    if let Ok(r) = READS.try_with(|slot| slot.0.try_borrow_mut().ok().and_then(|mut r| r.take())) {
        hand_in(r);
    }
}

fn hand_in(reads: Option<Reads>) {
    let (Some(r), Some(shim)) = (reads, SHIM.get()) else { return };
    r.timer.finish(&shim.profiler);
    let spent = thread_cpu_ns().saturating_sub(r.cpu_at_start);
    let _ = READ_NS.try_with(|c| c.set(c.get() + spent));
}

/// The process's read and write system calls so far, from its `/proc/self/io`.
fn syscalls(io: &File) -> Option<u64> {
    let mut s = String::new();
    (&*io).read_to_string(&mut s).ok()?;
    let field = |name: &str| s.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    Some(field("syscr:")? + field("syscw:")?)
}

/// One thread's counts and estimate by stage, as `weir profile` reads them.
fn thread_json(t: &weir::profile::ThreadProfile, ticks: Ticks) -> Value {
    let mut o = Map::new();
    o.insert("thread".into(), json!(t.name));
    for (k, v) in t.counts() {
        o.insert(k.into(), json!(v));
    }
    o.insert("mark_ticks".into(), json!(t.mark_ticks()));
    let stages: Map<String, Value> =
        Stage::ALL.iter().zip(t.estimate(ticks)).filter(|(_, e)| *e > 0.0).map(|(s, e)| (s.key().to_string(), json!(e))).collect();
    o.insert("stages".into(), Value::Object(stages));
    Value::Object(o)
}

extern "C" fn write_at_exit() {
    let Some(shim) = SHIM.get().filter(|s| s.pid == std::process::id()) else { return };
    end_reads();
    let read_ns = READ_NS.try_with(Cell::get).unwrap_or(0);
    let outside_ns = thread_cpu_ns().saturating_sub(read_ns);
    let ticks = shim.profiler.clock();
    let clock = match ticks {
        Ticks::Tsc { hz } => json!({ "source": "tsc", "hz": hz }),
        Ticks::Instant { .. } => json!({ "source": "instant" }),
    };
    let threads: Vec<Value> = shim.profiler.threads().iter().map(|t| thread_json(t, ticks)).collect();
    let doc = json!({
        "clock": clock,
        "every": shim.profiler.every(),
        "packets": shim.packets.load(Ordering::Relaxed),
        "outside_ns": outside_ns,
        "syscalls": shim.io.as_ref().and_then(syscalls),
        "threads": threads,
    });
    // Nothing to tell a program at its exit: weir profile says the profile is missing.
    let _ = (&shim.file).write_all(format!("{doc}\n").as_bytes());
}
