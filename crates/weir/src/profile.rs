//! Where a run's time goes: the per-stage cost of weir's packet path, measured
//! with the TSC on sampled batches (the WinPcap profiling work, done for weir;
//! `weir profile` shows it).
//!
//! Contract:
//! - A run is profiled only when a [`Profiler`] is given to the engine
//!   ([`EngineBuilder::profile`](crate::engine::EngineBuilder::profile)).
//!   Without one, the capture and worker loops are the ones built without
//!   timing (the loops are generic over whether they time, chosen once per
//!   thread), so an unprofiled run pays nothing.
//! - Each profiled thread keeps its own stage timer: plain counters, no
//!   atomics, handed to the profiler once, when the thread ends. It times
//!   one *window* in [`Profiler::every`] on average (a capture thread's window
//!   is [`WINDOW_PACKETS`] records, a worker's one loop turn: one chunk, or
//!   one wait that found none), at random gaps so that no periodic work (a
//!   block refill every so many packets) is always in or always out of the
//!   sample. Within a window every cycle is charged to a stage: the timer
//!   reads the TSC at each stage boundary and charges the span since the
//!   last one to the stage that ran, so the stages cover the whole loop.
//! - A mark costs time itself (a TSC read and some bookkeeping), which
//!   makes the windows it times slower than the path unprofiled. So timed
//!   windows alternate between *marked* ones (stage marks on) and *plain*
//!   ones (only the thread's CPU clock at both ends): the difference of
//!   their CPU time per packet, over the marks per packet, is what a mark
//!   costs in place, among the path's own work; it is taken off every span
//!   (see [`ThreadProfile::mark_ticks`]). The difference is noisy where
//!   windows differ much (a live source's idle turns against its busy
//!   ones), so it is held under what marks cost back to back, measured when
//!   the profiler is made: in place, a mark can only overlap with the work
//!   around it, never cost more. What profiling costs outside the
//!   marks (the CPU clock's reads) is in the process's total, and so shows
//!   as unaccounted.
//! - Spans are wall time, and the thread may sleep (waiting for a chunk, a
//!   block, a free cell) or be preempted. Each window also reads the thread's
//!   CPU clock at its start and end; the difference between wall and CPU
//!   time is taken first from the stages that may sleep, the rest (time
//!   preempted) from every stage in proportion. Stages are then CPU time;
//!   on a machine busy with other work, how the time preempted is shared
//!   between the stages of one window is an estimate, their sum is not.
//! - A thread's stage cost is estimated as its sampled cycles times its
//!   packets over its sampled packets (a ratio estimate). Threads that are not
//!   broken down (the read-ahead thread of a trace, a capture thread of a
//!   source without stage marks) are charged their exact CPU time instead.
//!   Every thread's exact CPU time is kept beside its estimate, so the
//!   estimate can be checked against it.
//! - Cycles are TSC ticks, where the TSC is invariant (the check
//!   [`TscClock`](crate::clock::TscClock) makes); their rate is measured
//!   against `Instant` over [`CALIBRATION`] when the profiler is made
//!   (a profile needs it to a part in ten thousand, not a timestamp's
//!   precision, and a run should not wait the wall clock's 20 ms for it).
//!   Elsewhere spans are read from [`Instant`] in nanoseconds and no cycles
//!   are given ([`Profiler::clock`] says which).
//! - A thread the engine does not run can time its own stages the same way:
//!   the application's thread pulling packets from a
//!   [`Reader`](crate::engine::Reader) (libpcap's shim, whose stages are the
//!   `Pcap*` ones and [`Stage::Program`]) takes a timer with
//!   [`Profiler::timer`], marks its stages through [`Probe`], counts its
//!   packets with [`Probe::record`] (windows of [`WINDOW_PACKETS`]), and hands
//!   the timer in with [`StageTimer::finish`]. Its estimate covers the packets
//!   it counted; its time outside reading is the caller's to report.

use crate::clock::{invariant_tsc, tsc};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long [`Profiler::new`] watches the TSC against `Instant` for its rate.
pub const CALIBRATION: Duration = Duration::from_millis(2);

/// Records in a capture thread's window.
pub const WINDOW_PACKETS: u32 = 256;

/// One window in this many is timed, by default: measured on `weir count`
/// of a trace (the cheapest path per packet, so the worst case) to cost
/// under 5% (docs/src/benchmarks.md, "What profiling costs").
pub const DEFAULT_EVERY: u32 = 32;

/// How long [`Profiler::threads`] waits for threads still handing in their
/// timers (a trace's read-ahead thread is not joined by the engine).
const HAND_IN_WAIT: Duration = Duration::from_secs(1);

/// A stage of the packet path.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Capture thread: parse the next trace record, or walk the kernel's ring.
    Source,
    /// Capture thread: take the next block of the trace from the read-ahead
    /// thread (and wait for it when it is not there yet).
    NextBlock,
    /// Capture thread: RSS hash of the 5-tuple and the steering to a queue.
    Steer,
    /// Capture thread: the cBPF filter.
    Filter,
    /// Capture thread: fill a cell of the pool, publish full chunks to the
    /// capture queue, take recycled ones back.
    HandOff,
    /// Capture thread: wait for a free cell (the pool is full) or a paced
    /// packet's time.
    CaptureWait,
    /// A capture thread of a source without stage marks, whole.
    CaptureThread,
    /// The trace's read-ahead thread: `read(2)` into blocks, whole.
    ReadAhead,
    /// A mapped trace's populating thread: its page tables filled ahead of
    /// the walk, whole.
    Populate,
    /// A mapped trace's walking thread: its records parsed ahead of the
    /// capture thread, whole.
    PreWalk,
    /// Worker: wait for a chunk when none is ready.
    WorkerWait,
    /// Worker: take a chunk off the capture queue and hand its packets out.
    Delivery,
    /// Worker: the locality stage's batching and port sort.
    Locality,
    /// Worker: the application's handler.
    Application,
    /// Worker: give the chunk back to its pool.
    Recycle,
    /// libpcap's shim, on the program's thread: take the next packet from
    /// the engine's reader (a chunk off a capture queue, the last one back).
    PcapTake,
    /// libpcap's shim: wait for packets (poll on the handle's descriptor).
    PcapWait,
    /// libpcap's shim: run the program's filter on a file's record.
    PcapFilter,
    /// libpcap's shim: deliver a packet to the program: its header
    /// (timestamp, lengths), the call of its callback and the return.
    PcapDeliver,
    /// The program itself: its packet callback, or its code between two
    /// reads (`pcap_next_ex`).
    Program,
}

/// Number of [`Stage`]s.
pub const STAGES: usize = 20;

impl Stage {
    /// Every stage, in the order of the path.
    pub const ALL: [Stage; STAGES] = [
        Stage::Source,
        Stage::NextBlock,
        Stage::Steer,
        Stage::Filter,
        Stage::HandOff,
        Stage::CaptureWait,
        Stage::CaptureThread,
        Stage::ReadAhead,
        Stage::Populate,
        Stage::PreWalk,
        Stage::WorkerWait,
        Stage::Delivery,
        Stage::Locality,
        Stage::Application,
        Stage::Recycle,
        Stage::PcapTake,
        Stage::PcapWait,
        Stage::PcapFilter,
        Stage::PcapDeliver,
        Stage::Program,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// A short name for machine-readable output.
    pub fn key(self) -> &'static str {
        match self {
            Stage::Source => "source",
            Stage::NextBlock => "next_block",
            Stage::Steer => "steer",
            Stage::Filter => "filter",
            Stage::HandOff => "hand_off",
            Stage::CaptureWait => "capture_wait",
            Stage::CaptureThread => "capture_thread",
            Stage::ReadAhead => "read_ahead",
            Stage::Populate => "populate",
            Stage::PreWalk => "prewalk",
            Stage::WorkerWait => "worker_wait",
            Stage::Delivery => "delivery",
            Stage::Locality => "locality",
            Stage::Application => "application",
            Stage::Recycle => "recycle",
            Stage::PcapTake => "pcap_take",
            Stage::PcapWait => "pcap_wait",
            Stage::PcapFilter => "pcap_filter",
            Stage::PcapDeliver => "pcap_deliver",
            Stage::Program => "program",
        }
    }

    /// The stage whose [`key`](Self::key) this is.
    pub fn from_key(key: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.key() == key)
    }

    /// What the stage is, for people.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Source => "capture: source (parse record / walk ring)",
            Stage::NextBlock => "capture: next block of the trace",
            Stage::Steer => "capture: RSS hash and steering",
            Stage::Filter => "capture: filter",
            Stage::HandOff => "capture: hand-off (cell fill, publish)",
            Stage::CaptureWait => "capture: waiting for a cell or pacing",
            Stage::CaptureThread => "capture thread (not broken down)",
            Stage::ReadAhead => "read-ahead thread (read(2) into blocks)",
            Stage::Populate => "populate thread (page tables of the mapped trace)",
            Stage::PreWalk => "walk thread (records of the mapped trace parsed ahead)",
            Stage::WorkerWait => "worker: waiting for a chunk",
            Stage::Delivery => "worker: delivery (take chunk, hand out)",
            Stage::Locality => "worker: locality sort",
            Stage::Application => "worker: application (handler)",
            Stage::Recycle => "worker: recycle",
            Stage::PcapTake => "pcap: take the next packet from the engine",
            Stage::PcapWait => "pcap: waiting for packets (poll)",
            Stage::PcapFilter => "pcap: the program's filter on a record",
            Stage::PcapDeliver => "pcap: delivery (header, callback call)",
            Stage::Program => "program: its callback / own code",
        }
    }

    /// Whether the thread may sleep in this stage: its off-CPU time is
    /// taken from these stages first.
    fn may_sleep(self) -> bool {
        matches!(self, Stage::NextBlock | Stage::CaptureWait | Stage::WorkerWait | Stage::PcapWait)
    }
}

/// Why spans are read from `Instant` ([`Ticks::Instant`]).
pub const NO_TSC: &str = "the TSC is not invariant here (or not an x86-64 CPU): spans are read from Instant, in ns, no cycles";

/// The clock the spans are read from.
#[derive(Copy, Clone, Debug)]
pub enum Ticks {
    /// The invariant TSC, at this many ticks per second (calibrated).
    Tsc {
        /// Ticks per second.
        hz: u64,
    },
    /// `Instant`, in nanoseconds: the TSC was refused, for the reason given.
    Instant {
        /// Why not the TSC.
        why: &'static str,
    },
}

impl Ticks {
    /// Ticks per second.
    pub fn hz(self) -> f64 {
        match self {
            Ticks::Tsc { hz } => hz as f64,
            Ticks::Instant { .. } => 1e9,
        }
    }
}

/// What one thread measured, handed in when it ended.
#[derive(Clone, Debug)]
pub struct ThreadProfile {
    /// The thread, as the engine names it (`capture-trace`, `worker-0`, ...).
    pub name: String,
    /// Packets the thread handled in all (timed or not).
    pub packets: u64,
    /// Windows in all.
    pub windows: u64,
    /// Marked windows: packets, windows, CPU ticks.
    pub marked: Sample,
    /// Plain windows (no stage marks): packets, windows, CPU ticks.
    pub plain: Sample,
    /// The thread's CPU time from its start to its end, exact.
    pub cpu_ns: u64,
    /// Ticks marks cost back to back: the most one costs in place.
    mark_max: f64,
    /// Ticks per stage in the marked windows, CPU time (see the module's
    /// contract), the marks' own cost still in.
    spans: [f64; STAGES],
    /// Marks that ended a span of each stage in the marked windows.
    marks: [u64; STAGES],
    /// A thread not broken down: all its CPU time is this stage's.
    whole: Option<Stage>,
}

/// Timed windows of one kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Packets in them.
    pub packets: u64,
    /// How many.
    pub windows: u64,
    /// The thread's CPU time in them, in ticks.
    pub cpu_ticks: f64,
}

impl Sample {
    fn per_packet(&self) -> Option<f64> {
        (self.packets > 0).then(|| self.cpu_ticks / self.packets as f64)
    }
}

impl ThreadProfile {
    fn whole(name: &str, stage: Stage, cpu_ns: u64) -> ThreadProfile {
        ThreadProfile {
            name: name.to_string(),
            packets: 0,
            windows: 0,
            marked: Sample::default(),
            plain: Sample::default(),
            cpu_ns,
            mark_max: 0.0,
            spans: [0.0; STAGES],
            marks: [0; STAGES],
            whole: Some(stage),
        }
    }

    /// What the timer counted, by the names reports give them: packets, and
    /// windows and packets timed (marked, plain), and the thread's CPU time
    /// in nanoseconds.
    pub fn counts(&self) -> [(&'static str, u64); 7] {
        [
            ("packets", self.packets),
            ("windows", self.windows),
            ("windows_marked", self.marked.windows),
            ("windows_plain", self.plain.windows),
            ("packets_marked", self.marked.packets),
            ("packets_plain", self.plain.packets),
            ("cpu_ns", self.cpu_ns),
        ]
    }

    /// What one mark cost in this thread's marked windows, in ticks: their
    /// CPU time per packet less the plain windows', over the marks per
    /// packet, held between 0 and what marks cost back to back (0 when
    /// either kind saw no packet).
    pub fn mark_ticks(&self) -> f64 {
        let marks: u64 = self.marks.iter().sum();
        match (self.marked.per_packet(), self.plain.per_packet()) {
            (Some(m), Some(p)) if marks > 0 => ((m - p) / (marks as f64 / self.marked.packets as f64)).clamp(0.0, self.mark_max),
            _ => 0.0,
        }
    }

    /// The thread's estimated ticks per stage over the whole run.
    pub fn estimate(&self, ticks: Ticks) -> [f64; STAGES] {
        let mut out = [0.0; STAGES];
        let cpu_ticks = self.cpu_ns as f64 * ticks.hz() / 1e9;
        if let Some(s) = self.whole {
            out[s.index()] = cpu_ticks;
            return out;
        }
        let c = self.mark_ticks();
        let mut spans = [0.0; STAGES];
        for ((s, &t), &m) in spans.iter_mut().zip(&self.spans).zip(&self.marks) {
            *s = (t - m as f64 * c).max(0.0);
        }
        let sampled: f64 = spans.iter().sum();
        if self.marked.packets > 0 {
            let scale = self.packets as f64 / self.marked.packets as f64;
            for (o, s) in out.iter_mut().zip(spans) {
                *o = s * scale;
            }
        } else if sampled > 0.0 {
            // No packet in the sample (a queue that got none): the thread only
            // waited, and its exact CPU time is shared as the sample shares it.
            for (o, s) in out.iter_mut().zip(spans) {
                *o = cpu_ticks * s / sampled;
            }
        }
        out
    }
}

/// Collects the threads' timers of one run; shared by the engine's threads.
pub struct Profiler {
    every: u32,
    ticks: Ticks,
    /// Ticks marks cost back to back.
    mark_max: f64,
    state: Mutex<Hand>,
    handed: Condvar,
    started: Instant,
}

/// Threads that took a timer, and what those that ended handed in.
#[derive(Default)]
struct Hand {
    open: usize,
    threads: Vec<ThreadProfile>,
    packets: Option<u64>,
}

impl Profiler {
    /// A profiler timing one window in `every` (at least 1: every window).
    /// Measures the TSC's rate (over [`CALIBRATION`]), or falls back to
    /// `Instant` where the TSC is not invariant.
    pub fn new(every: u32) -> Profiler {
        let ticks = if invariant_tsc() {
            let (t0, i0) = (tsc(), Instant::now());
            std::thread::sleep(CALIBRATION);
            let (t1, i1) = (tsc(), Instant::now());
            Ticks::Tsc { hz: (t1.wrapping_sub(t0) as f64 / (i1 - i0).as_secs_f64()) as u64 }
        } else {
            Ticks::Instant { why: NO_TSC }
        };
        let mut p = Profiler {
            every: every.max(1),
            ticks,
            mark_max: 0.0,
            state: Mutex::new(Hand::default()),
            handed: Condvar::new(),
            started: Instant::now(),
        };
        p.mark_max = p.measure_mark();
        p
    }

    /// Ticks a [`StageTimer::mark`] costs back to back: the fastest of
    /// several runs (the fastest is the one nothing interrupted).
    fn measure_mark(&self) -> f64 {
        const MARKS: u32 = 2_000;
        let mut t = StageTimer::new(self, "calibration", Stage::Source);
        (0..16)
            .map(|_| {
                t.open(Stage::Source);
                // Every window here is a marked one (open alternates the kinds).
                t.window = Window::Marked;
                t.marking = true;
                let start = t.last;
                for i in 0..MARKS {
                    t.mark(if i % 2 == 0 { Stage::Filter } else { Stage::Source });
                }
                let ticks = t.last.wrapping_sub(start) as f64 / f64::from(MARKS);
                t.window = Window::Off;
                t.marking = false;
                ticks
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// One window in this many is timed.
    pub fn every(&self) -> u32 {
        self.every
    }

    /// The clock spans are read from, and its rate.
    pub fn clock(&self) -> Ticks {
        self.ticks
    }

    /// A timer for the calling thread, named `name`, in `first` stage; hand
    /// it in with [`StageTimer::finish`] when the thread ends (the report
    /// waits for it).
    pub fn timer(&self, name: &str, first: Stage) -> StageTimer {
        self.lock().open += 1;
        StageTimer::new(self, name, first)
    }

    /// The calling thread's whole CPU time, as `stage`, for a thread that is not
    /// broken down and was announced with [`expect_thread`](Self::expect_thread);
    /// call it as the thread ends.
    pub(crate) fn whole_thread(&self, name: &str, stage: Stage) {
        let cpu_ns = thread_cpu_ns();
        self.hand_in(ThreadProfile::whole(name, stage, cpu_ns));
    }

    /// A thread that will call [`whole_thread`](Self::whole_thread) later: the
    /// report waits for it.
    pub(crate) fn expect_thread(&self) {
        self.lock().open += 1;
    }

    /// A thread announced with [`expect_thread`](Self::expect_thread) that
    /// could not be started: the report waits for it no more.
    pub(crate) fn thread_not_started(&self) {
        let mut s = self.lock();
        s.open = s.open.saturating_sub(1);
    }

    fn hand_in(&self, t: ThreadProfile) {
        let mut s = self.lock();
        s.open = s.open.saturating_sub(1);
        s.threads.push(t);
        self.handed.notify_all();
    }

    /// Packets the source received in the run (set by the engine when it joins).
    pub(crate) fn set_packets(&self, n: u64) {
        self.lock().packets = Some(n);
    }

    /// Packets the source received, once the run has been joined.
    pub fn packets(&self) -> Option<u64> {
        self.lock().packets
    }

    /// Time since the profiler was made.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// What every thread handed in, waiting briefly for threads still ending.
    pub fn threads(&self) -> Vec<ThreadProfile> {
        let deadline = Instant::now() + HAND_IN_WAIT;
        let mut s = self.lock();
        while s.open > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self.handed.wait_timeout(s, deadline - now).map_or_else(|e| e.into_inner().0, |r| r.0);
        }
        s.threads.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hand> {
        // A thread that panicked while holding it left whole records behind.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The calling thread's CPU time in nanoseconds (0 if the clock cannot be read).
pub fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0, |t| u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec()).unwrap_or(0))
}

/// Stage marks in a loop that may or may not be timed: the loops are generic
/// over it, and `()`, the untimed probe, compiles every mark away.
pub trait Probe {
    /// See [`StageTimer::mark`].
    fn mark(&mut self, stage: Stage);
    /// See [`StageTimer::begin`].
    fn begin(&mut self, stage: Stage);
    /// See [`StageTimer::end`].
    fn end(&mut self, packets: u64);
    /// See [`StageTimer::record`].
    fn record(&mut self, stage: Stage);
    /// See [`StageTimer::records`].
    fn records(&mut self, n: u32, stage: Stage);
}

impl Probe for () {
    #[inline(always)]
    fn mark(&mut self, _: Stage) {}
    #[inline(always)]
    fn begin(&mut self, _: Stage) {}
    #[inline(always)]
    fn end(&mut self, _: u64) {}
    #[inline(always)]
    fn record(&mut self, _: Stage) {}
    #[inline(always)]
    fn records(&mut self, _: u32, _: Stage) {}
}

impl Probe for StageTimer {
    #[inline]
    fn mark(&mut self, stage: Stage) {
        StageTimer::mark(self, stage);
    }
    #[inline]
    fn begin(&mut self, stage: Stage) {
        StageTimer::begin(self, stage);
    }
    #[inline]
    fn end(&mut self, packets: u64) {
        StageTimer::end(self, packets);
    }
    #[inline]
    fn record(&mut self, stage: Stage) {
        StageTimer::record(self, stage);
    }
    #[inline]
    fn records(&mut self, n: u32, stage: Stage) {
        StageTimer::records(self, n, stage);
    }
}

/// The kind of the window being timed.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Window {
    Off,
    Marked,
    Plain,
}

/// One thread's stage timer (see the module's contract). Not shared: plain fields.
pub struct StageTimer {
    every: u32,
    tsc: bool,
    hz: f64,
    base: Instant,
    /// xorshift state for the gaps between timed windows.
    rng: u64,
    /// Windows until the next one is timed.
    left: u32,
    window: Window,
    /// The window is marked: stage marks read the clock.
    marking: bool,
    /// The kind of the next timed window.
    next_marked: bool,
    stage: Stage,
    last: u64,
    win_cpu: u64,
    win: [u64; STAGES],
    win_marks: [u64; STAGES],
    win_packets: u64,
    /// Records left in the current capture window.
    in_window: u32,
    profile: ThreadProfile,
}

impl StageTimer {
    fn new(p: &Profiler, name: &str, first: Stage) -> StageTimer {
        let mut t = StageTimer {
            every: p.every,
            tsc: matches!(p.ticks, Ticks::Tsc { .. }),
            hz: p.ticks.hz(),
            base: Instant::now(),
            // Any odd seed differing per thread; the thread's name and the TSC will do.
            rng: (tsc() ^ name.bytes().fold(0x9e37_79b9_7f4a_7c15, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))) | 1,
            left: 0,
            window: Window::Off,
            marking: false,
            next_marked: true,
            stage: first,
            last: 0,
            win_cpu: 0,
            win: [0; STAGES],
            win_marks: [0; STAGES],
            win_packets: 0,
            in_window: WINDOW_PACKETS,
            profile: ThreadProfile {
                name: name.to_string(),
                packets: 0,
                windows: 0,
                marked: Sample::default(),
                plain: Sample::default(),
                cpu_ns: 0,
                mark_max: p.mark_max,
                spans: [0.0; STAGES],
                marks: [0; STAGES],
                whole: None,
            },
        };
        t.left = t.gap();
        t
    }

    /// Windows to skip before the next timed one: uniform in 1..=2*every-1,
    /// so one in `every` on average.
    fn gap(&mut self) -> u32 {
        if self.every <= 1 {
            return 1;
        }
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        1 + (self.rng % u64::from(2 * self.every - 1)) as u32
    }

    #[inline]
    fn now(&self) -> u64 {
        if self.tsc {
            tsc()
        } else {
            u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }
    }

    /// The thread enters `stage` (charged from now on), when a marked window is timed.
    #[inline]
    pub fn mark(&mut self, stage: Stage) {
        if self.marking {
            let now = self.now();
            self.win[self.stage.index()] += now.wrapping_sub(self.last);
            self.win_marks[self.stage.index()] += 1;
            self.last = now;
            self.stage = stage;
        }
    }

    /// A worker's loop turn starts, in `stage`: the window may be timed.
    #[inline]
    pub fn begin(&mut self, stage: Stage) {
        self.profile.windows += 1;
        self.left -= 1;
        if self.left == 0 {
            self.left = self.gap();
            self.open(stage);
        }
    }

    /// A worker's loop turn ends, having handled `packets`.
    #[inline]
    pub fn end(&mut self, packets: u64) {
        self.profile.packets += packets;
        if self.window != Window::Off {
            self.win_packets += packets;
            self.close();
        }
    }

    /// A capture thread read one record, and goes on in `stage`: windows are
    /// [`WINDOW_PACKETS`] records long.
    #[inline]
    pub fn record(&mut self, stage: Stage) {
        self.profile.packets += 1;
        self.win_packets += 1;
        self.in_window -= 1;
        if self.in_window == 0 {
            self.next_window(stage);
        }
    }

    /// A capture thread read `n` records at once (a batch of a ring), and goes
    /// on in `stage`: a window ends at the first batch boundary past
    /// [`WINDOW_PACKETS`] records.
    #[inline]
    pub fn records(&mut self, n: u32, stage: Stage) {
        self.profile.packets += u64::from(n);
        self.win_packets += u64::from(n);
        if n >= self.in_window {
            self.next_window(stage);
        } else {
            self.in_window -= n;
        }
    }

    #[cold]
    fn next_window(&mut self, stage: Stage) {
        self.in_window = WINDOW_PACKETS;
        if self.window != Window::Off {
            self.close();
        }
        self.win_packets = 0;
        self.begin(stage);
    }

    fn open(&mut self, stage: Stage) {
        self.window = if self.next_marked { Window::Marked } else { Window::Plain };
        self.next_marked = !self.next_marked;
        self.marking = self.window == Window::Marked;
        self.win_packets = 0;
        self.stage = stage;
        self.win_cpu = thread_cpu_ns();
        self.last = self.now();
    }

    fn close(&mut self) {
        let now = self.now();
        let cpu = thread_cpu_ns().saturating_sub(self.win_cpu) as f64 * self.hz / 1e9;
        let kind = self.window;
        self.window = Window::Off;
        self.marking = false;
        let sample = if kind == Window::Marked { &mut self.profile.marked } else { &mut self.profile.plain };
        sample.packets += self.win_packets;
        sample.windows += 1;
        sample.cpu_ticks += cpu;
        if kind == Window::Plain {
            return;
        }
        self.win[self.stage.index()] += now.wrapping_sub(self.last);
        self.win_marks[self.stage.index()] += 1;
        let mut win = [0.0; STAGES];
        for (w, &t) in win.iter_mut().zip(&self.win) {
            *w = t as f64;
        }
        let wall: f64 = win.iter().sum();
        let mut off = (wall - cpu).max(0.0);
        // Off-CPU time: first the stages that may sleep, in proportion...
        let sleepy: f64 = Stage::ALL.iter().filter(|s| s.may_sleep()).map(|s| win[s.index()]).sum();
        if sleepy > 0.0 {
            let take = off.min(sleepy);
            for s in Stage::ALL.iter().filter(|s| s.may_sleep()) {
                win[s.index()] -= take * win[s.index()] / sleepy;
            }
            off -= take;
        }
        // ...then what is left (preemption) from every stage in proportion.
        let left: f64 = win.iter().sum();
        let keep = if left > 0.0 { ((left - off) / left).max(0.0) } else { 0.0 };
        for (acc, w) in self.profile.spans.iter_mut().zip(win) {
            *acc += w * keep;
        }
        for (acc, m) in self.profile.marks.iter_mut().zip(self.win_marks) {
            *acc += m;
        }
        self.win = [0; STAGES];
        self.win_marks = [0; STAGES];
    }

    /// Hand the timer in to `p` as the thread ends, with its CPU time.
    pub fn finish(mut self, p: &Profiler) {
        if self.window != Window::Off {
            self.close();
        }
        self.profile.cpu_ns = thread_cpu_ns();
        p.hand_in(self.profile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spin for `d` of this thread's CPU time (not wall time: a test run
    /// beside others is preempted, and stages are CPU time).
    fn burn(d: Duration) {
        let until = thread_cpu_ns() + u64::try_from(d.as_nanos()).unwrap();
        while thread_cpu_ns() < until {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn stages_share_a_window_as_spent_and_sleep_is_not_charged() {
        let p = Profiler::new(1);
        let mut t = p.timer("t", Stage::Delivery);
        for _ in 0..20 {
            t.begin(Stage::WorkerWait);
            std::thread::sleep(Duration::from_millis(2));
            t.mark(Stage::Delivery);
            burn(Duration::from_millis(1));
            t.mark(Stage::Application);
            burn(Duration::from_millis(3));
            t.end(10);
        }
        t.finish(&p);
        let threads = p.threads();
        let th = &threads[0];
        assert_eq!((th.packets, th.windows), (200, 20));
        assert_eq!((th.marked.windows, th.plain.windows, th.marked.packets, th.plain.packets), (10, 10, 100, 100));
        let est = th.estimate(p.clock());
        let ms = |s: Stage| est[s.index()] / p.clock().hz() * 1e3;
        // 20 windows: 20 ms delivery, 60 ms application, the 40 ms asleep not
        // charged. Time preempted is taken from the stages in proportion, so on
        // a busy machine the split is only roughly 1:3; the order stays.
        let (d, a) = (ms(Stage::Delivery), ms(Stage::Application));
        assert!(d > 2.0 && a > 1.5 * d, "delivery {d} ms, application {a} ms");
        assert!((d + a - 80.0).abs() < 12.0, "delivery {d} ms and application {a} ms");
        assert!(ms(Stage::WorkerWait) < 5.0, "waiting {} ms", ms(Stage::WorkerWait));
        let total: f64 = est.iter().sum::<f64>() / p.clock().hz() * 1e9;
        assert!((total - th.cpu_ns as f64).abs() < 0.15 * th.cpu_ns as f64, "stages {total} ns, thread CPU {} ns", th.cpu_ns);
    }

    #[test]
    fn sampled_windows_estimate_the_whole() {
        let p = Profiler::new(4);
        let mut t = p.timer("t", Stage::Source);
        for _ in 0..(WINDOW_PACKETS * 64) {
            t.mark(Stage::Source);
            burn(Duration::from_micros(2));
            t.mark(Stage::Filter);
            burn(Duration::from_micros(1));
            t.record(Stage::Source);
        }
        t.finish(&p);
        let th = &p.threads()[0];
        assert_eq!(th.packets, u64::from(WINDOW_PACKETS) * 64);
        let timed = th.marked.windows + th.plain.windows;
        assert!(timed > 4 && timed < 40, "{timed} windows timed of 64");
        // Each mark costs something, and far less than the microseconds between them.
        let mark_ns = th.mark_ticks() / p.clock().hz() * 1e9;
        assert!(mark_ns < 500.0, "a mark costs {mark_ns} ns");
        let est = th.estimate(p.clock());
        // Both stages are there; their split (2:1 as spent) is the other test's
        // business: spans of microseconds against the scheduler's slices of
        // milliseconds make it too noisy on a busy machine to hold here.
        assert!(est[Stage::Source.index()] > 0.0 && est[Stage::Filter.index()] > 0.0, "{est:?}");
        let total = est.iter().sum::<f64>() / p.clock().hz() * 1e9;
        assert!((total - th.cpu_ns as f64).abs() < 0.2 * th.cpu_ns as f64, "estimate {total} ns, thread CPU {} ns", th.cpu_ns);
    }
}
