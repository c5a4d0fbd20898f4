//! A trace file as a multi-queue source.
//!
//! One capture unit reads the file sequentially and plays the NIC: a symmetric
//! Toeplitz RSS hash picks each packet's queue, the filter runs, and the packet
//! goes into a cell of that queue's pool. Queues outside the opened range are
//! not received, as when only some of a NIC's queues are opened.
//!
//! The file is `read()` ahead into blocks, or, where the process has one CPU,
//! mapped and walked in place (see [`super::input`] and
//! [`TraceAccess`](super::TraceAccess)). At top speed cells point into those
//! blocks, so the kernel's copy is the only one (none, mapped); a read block is
//! reused once every chunk holding its packets is recycled, and the reader
//! waits for that rather than drop. Paced, the reader behaves like a NIC: packets are copied into the
//! queue's own cells, so a stalled queue can never hold memory another queue
//! needs, and a packet that finds no free cell when it is due is a capture drop.
//!
//! A malformed record ends the run with an error naming the file and byte
//! offset, after every packet before it was captured.
//!
//! A stream's header is waited for until the run's stop or time limit (see
//! [`HeaderWait`]), and so is a FIFO's first writer: stopped first, the
//! source has no units, so its run ends at once with no packet, and a note
//! says why.

use super::input::{Input, ReadConfig};
use super::prewalk::PreWalk;
use super::HeaderWait;
use crate::balance::{Route, Steering, STEER_TICK};
use crate::capture::{CaptureUnit, Control, Progress, SourceError, SourceInfo, StopReason};
use crate::filter::{BatchInput, Filter, FilterWatch};
use crate::memory::{Budget, Bytes, Plan};
use crate::packet::LinkType;
use crate::pool::{BlockRef, CaptureSide, NoCell};
use crate::profile::{Probe, Profiler, Stage};
use crate::rss::Rss;
use crate::source::pacing::{self, Pacer};
use crate::source::{CaptureOptions, QueueRange, Source};
use crate::tracefile::{FormatError, Record, Step, TraceHeader, Walker};
use crate::QueueId;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Chunks a trace's capture thread publishes before it wakes a sleeping
/// worker (at most half the pool; see `CaptureSide::wake_in_batches_of`).
const TRACE_WAKE_BATCH: usize = 64;
/// Chunks a trace's capture thread, out of memory, waits to get back before
/// it goes on (at most a quarter of the pool; see
/// `CaptureSide::refill_in_batches_of`).
const TRACE_REFILL_BATCH: usize = 32;
/// Longest a waiting reader goes without checking for a stop request.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// Packets between looks at the clock for a controller tick.
const TICK_CHECK_EVERY: u32 = 64;
/// Records read and judged by the filter in one call (see `TraceUnit::judge_ahead`).
const FILTER_BATCH: usize = 32;
/// A paced wait longer than this publishes partly filled chunks first, so the
/// worker is not left waiting for packets that already arrived.
const FLUSH_BEFORE_WAIT: Duration = Duration::from_millis(1);

fn malformed(label: &str, error: FormatError) -> SourceError {
    SourceError::Malformed { file: label.to_string(), error }
}

/// A trace opened and its header read (or the wait for it stopped), not yet capturing.
struct TraceSource {
    /// `None` when a stop came before a FIFO's writer sent anything.
    input: Option<Input>,
    walker: Walker,
    /// False when a stop came before the header: nothing is read then.
    header: bool,
    info: SourceInfo,
    queues: QueueRange,
    progress: Arc<Progress>,
}

impl TraceSource {
    /// Open a trace (`None` = standard input) and read its header, or, from a
    /// FIFO or another stream, wait for it until a stop or the time limit
    /// `wait` gives (the wait for a FIFO's writer included).
    pub(crate) fn open(
        path: Option<&Path>,
        queues: QueueRange,
        name: String,
        cfg: ReadConfig,
        wait: &HeaderWait<'_>,
    ) -> Result<TraceSource, SourceError> {
        let deadline = wait.limit.map(|l| Instant::now() + l);
        let walker = Walker::new();
        let Some((input, size)) = Input::open(path, cfg, wait.ctl, deadline)? else {
            let label = path.map_or_else(|| "stdin".to_string(), |p| p.display().to_string());
            let why = wait.ctl.reason().unwrap_or(StopReason::Requested);
            let note = format!(
                "{label}: {why} before the trace's header arrived: no writer opened the FIFO, or one did and sent \
                 nothing; nothing was read, so no packet is counted (the link type shown, {}, is a stand-in)",
                LinkType::ETHERNET
            );
            let info = source_info(name, None, &queues, vec![note]);
            return Ok(TraceSource { input: None, walker, header: false, info, queues, progress: Progress::new(None) });
        };
        Self::read_header(input, size, walker, queues, name, deadline, wait)
    }

    /// Read the opened trace's header (see [`open`](Self::open)).
    fn read_header(
        mut input: Input,
        size: Option<u64>,
        mut walker: Walker,
        queues: QueueRange,
        name: String,
        deadline: Option<Instant>,
        wait: &HeaderWait<'_>,
    ) -> Result<TraceSource, SourceError> {
        if input.is_stream() {
            // A regular file's header is there to read; a stream's may never come.
            input.start_read_ahead(wait.profiler.clone())?;
            input.wait_until(deadline);
        }
        let header: Option<TraceHeader> = loop {
            match walker.next(input.unread(), input.offset(), input.eof).map_err(|e| malformed(&input.label, e))? {
                Step::Header { consumed } => {
                    input.advance(consumed);
                    // The walker sets the header before it says Header.
                    break Some(
                        walker
                            .header()
                            .cloned()
                            .ok_or_else(|| SourceError::Invalid(format!("{}: no header after the header step", input.label)))?,
                    );
                }
                Step::Need { need } => {
                    if !input.refill(need, &mut [], wait.ctl)? {
                        break None;
                    }
                }
                Step::Skip { consumed } => input.advance(consumed),
                // The walker reads the file header before any packet or the end.
                Step::Packet(_) | Step::End => {
                    return Err(SourceError::Invalid(format!("{}: no file header before the first packet or the end", input.label)))
                }
            }
        };
        // The run enforces its own time limit from here.
        input.wait_until(None);
        let mut notes: Vec<String> = input.note().into_iter().collect();
        if header.is_none() {
            let why = wait.ctl.reason().unwrap_or(StopReason::Requested);
            notes.push(format!(
                "{}: {why} before the trace's header arrived: nothing was read, so no packet is counted \
                 (the link type shown, {}, is a stand-in)",
                input.label,
                LinkType::ETHERNET
            ));
        }
        let info = source_info(name, header, &queues, notes);
        Ok(TraceSource { input: Some(input), walker, header: info.trace.is_some(), info, queues, progress: Progress::new(size) })
    }
}

/// What a trace source says of itself; without a header, Ethernet and the
/// largest snapshot length stand in.
fn source_info(name: String, header: Option<TraceHeader>, queues: &QueueRange, notes: Vec<String>) -> SourceInfo {
    SourceInfo {
        name,
        link_type: header.as_ref().map_or(LinkType::ETHERNET, |h| h.link_type),
        snaplen: header.as_ref().map_or(crate::pool::MAX_CAPLEN as u32, |h| h.snaplen),
        queues: queues.iter().map(QueueId).collect(),
        iface: None,
        trace: header,
        notes,
        link: None,
    }
}

impl Source for TraceSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn progress(&self) -> Option<Arc<Progress>> {
        Some(Arc::clone(&self.progress))
    }

    fn into_units(self: Box<Self>, opts: CaptureOptions) -> Result<Vec<Box<dyn CaptureUnit>>, SourceError> {
        let input = match self.input {
            Some(input) if self.header => input,
            input => {
                // Stopped before the header: the bytes of it that came are lost with the pipe.
                self.progress.set_unreached(input.as_ref().map_or(0, Input::unreached));
                return Ok(Vec::new());
            }
        };
        let total = self.queues.total();
        let rss = (total > 1).then(|| Rss::new(self.info.link_type, total));
        let steering = match (opts.balance.controller(), &rss) {
            (Some(_), _) if self.queues.iter().count() != usize::from(total) => {
                return Err(SourceError::Invalid(format!(
                    "{}: rebalancing moves flows between every queue of the split, so it needs all of them opened (e.g. @0-{})",
                    self.info.name,
                    total - 1
                )))
            }
            // Every queue is opened, so positions are queue numbers, as the steering's.
            (Some(c), Some(rss)) => Some(Steering::new(rss.table().clone(), usize::from(total), c).with_handovers(opts.handovers)),
            _ => None,
        };
        let unit = TraceUnit {
            steering,
            balance: opts.balance_counters,
            input,
            walker: self.walker,
            prewalk: None,
            queues: self.queues,
            rss,
            filter: opts.filter.watch(),
            pacer: Pacer::new(opts.pacing),
            progress: self.progress,
            next_tick: Instant::now() + STEER_TICK,
            profiler: opts.profiler,
        };
        Ok(vec![Box::new(unit)])
    }
}

/// The capture unit of a trace: reads it once and fills every opened queue.
struct TraceUnit {
    /// Rebalancing: the table through which packets reach queues, when on.
    steering: Option<Steering>,
    /// Where the steering's counts are published, each tick and at the end.
    balance: Arc<crate::balance::BalanceCounters>,
    input: Input,
    walker: Walker,
    /// The records walked on a thread of their own, once started: the
    /// walker above is then not used again.
    prewalk: Option<PreWalk>,
    queues: QueueRange,
    rss: Option<Rss>,
    filter: FilterWatch,
    pacer: Pacer,
    progress: Arc<Progress>,
    next_tick: Instant,
    /// Stage timing, when the run is profiled.
    profiler: Option<Arc<Profiler>>,
}

/// What became of one packet.
enum Fate {
    Done,
    Stop,
}

impl CaptureUnit for TraceUnit {
    fn queues(&self) -> Vec<QueueId> {
        self.queues.iter().map(QueueId).collect()
    }

    fn name(&self) -> String {
        "trace".into()
    }

    fn profiled(&self) -> bool {
        self.profiler.is_some()
    }

    fn run(mut self: Box<Self>, mut sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        // slot[q] = index in `sides` of queue q, for every queue of the split.
        let mut slot = vec![None; usize::from(self.queues.total())];
        for (i, s) in sides.iter().enumerate() {
            slot[usize::from(s.queue().0)] = Some(i);
        }
        if self.steering.is_some() {
            // The steering addresses queues by number: every queue is here (checked when opened).
            sides.sort_by_key(|s| s.queue().0);
            slot = (0..sides.len()).map(Some).collect();
        }
        // Every packet of a trace is there already: waking the worker every
        // few chunks cost the capture thread a futex wake-up each (about a
        // tenth of its samples on the main job), a later start costs nothing.
        // One queue only: with several, how full a queue is steers offloading
        // and rebalancing, which a worker left asleep longer would mislead.
        if let [side] = &mut sides[..] {
            side.wake_in_batches_of(TRACE_WAKE_BATCH);
        }
        self.input.start_read_ahead(self.profiler.clone())?;
        if !self.pacer.is_paced() {
            // The other way, the same: a worker slower than this thread
            // handed back a chunk at a time, a sleep here and a wake-up there
            // for each. Not when paced: a paced trace drops rather than wait.
            sides.iter_mut().for_each(|s| s.refill_in_batches_of(TRACE_REFILL_BATCH));
            self.start_prewalk();
        }
        // Chosen once: the untimed loop carries no marks at all.
        let result = match self.profiler.clone() {
            Some(p) => self.capture_profiled(&mut sides, &slot, ctl, &p),
            None => self.capture(&mut sides, &slot, ctl, &mut ()),
        };
        self.finish_moves(&mut sides, ctl);
        for s in &mut sides {
            s.flush();
        }
        self.progress.set_done(self.input.offset());
        self.progress.set_unreached(self.input.unreached());
        result
    }
}

impl TraceUnit {
    /// Walk a mapped trace's records on a thread of their own where there is
    /// a CPU for it (see `prewalk.rs`), from where the walker stands.
    fn start_prewalk(&mut self) {
        let Some((file, cpus)) = self.input.hand_to_a_walker() else { return };
        match PreWalk::start(self.walker.clone(), file, self.input.offset(), cpus, self.profiler.clone()) {
            Ok(p) => self.prewalk = Some(p),
            // No thread: the capture thread walks, as on one CPU.
            Err(_) => self.input.walk_here(),
        }
    }

    /// Let every bucket move in progress finish (its old queue's workers are
    /// still running), or give them up if a stop was requested.
    fn finish_moves(&mut self, sides: &mut [CaptureSide], ctl: &Control) {
        let Some(st) = &mut self.steering else { return };
        st.finish(sides, || ctl.stop_requested());
        self.balance.publish(&st.stats());
    }

    /// A controller tick when one is due.
    #[inline]
    fn steer_tick(&mut self, sides: &mut [CaptureSide]) {
        if let Some(st) = &mut self.steering {
            let now = Instant::now();
            if now >= self.next_tick {
                self.next_tick = now + STEER_TICK;
                st.tick(sides);
                self.balance.publish(&st.stats());
            }
        }
    }

    /// [`capture`](Self::capture) with a stage timer handed to `p` at the end.
    #[inline(never)]
    fn capture_profiled(
        &mut self,
        sides: &mut [CaptureSide],
        slot: &[Option<usize>],
        ctl: &Control,
        p: &Profiler,
    ) -> Result<(), SourceError> {
        let mut timer = p.timer("capture-trace", Stage::Source);
        let r = self.capture(sides, slot, ctl, &mut timer);
        timer.finish(p);
        r
    }

    /// Read, steer, filter and capture every record, with stage marks on `probe`.
    /// With a timed copy of this loop beside the untimed one, the compiler
    /// laid the untimed one out worse: 9 more instructions a packet than
    /// before there were two (cachegrind: the packet's fields went through
    /// memory). Each copy on its own (never inlined), with `capture_one`
    /// always inlined into it, the untimed loop takes what it took.
    #[inline(never)]
    fn capture(
        &mut self,
        sides: &mut [CaptureSide],
        slot: &[Option<usize>],
        ctl: &Control,
        probe: &mut impl Probe,
    ) -> Result<(), SourceError> {
        let paced = self.pacer.is_paced();
        let mut since_tick = 0u32;
        // With a filter, records are read FILTER_BATCH at a time and judged in
        // one call (see `judge_ahead`): `batch[next..]` are read, judged and
        // not yet captured, `pending` the step that ended the batch.
        let mut batch: Vec<(Record, u32)> = Vec::with_capacity(FILTER_BATCH);
        let mut next = 0;
        let mut pending: Option<Result<Step, FormatError>> = None;
        loop {
            if ctl.stop_requested() {
                return Ok(());
            }
            let (step, verdict) = if let Some((rec, v)) = batch.get(next) {
                next += 1;
                (Ok(Step::Packet(rec.clone())), Some(*v))
            } else if let Some(step) = pending.take() {
                (step, None)
            } else {
                // One load per batch or unfiltered record, like the stop check: a
                // replaced filter judges the next batch on (FilterWatch's contract).
                self.filter.changed();
                let step = next_step(&mut self.walker, &mut self.prewalk, self.input.unread(), self.input.offset(), self.input.eof);
                match (step, self.filter.get()) {
                    (Ok(Step::Packet(rec)), Some(f)) => {
                        pending = judge_ahead(&mut self.walker, &mut self.prewalk, &self.input, rec, f, &mut batch, probe);
                        next = 1;
                        let (rec, v) = batch[0].clone();
                        (Ok(Step::Packet(rec)), Some(v))
                    }
                    (step, _) => (step, None),
                }
            };
            // A mapped file cut under us reads as zeros past the cut: say so, not that it is malformed.
            let step = step.map_err(|e| self.input.changed(true).unwrap_or_else(|| malformed(&self.input.label, e)))?;
            match step {
                Step::Packet(rec) => {
                    if self.input.cut_before(self.input.offset() + rec.consumed as u64) {
                        return Err(self.input.changed(true).expect("a cut is a change"));
                    }
                    probe.record(Stage::Source);
                    let start = self.input.pos;
                    self.input.advance(rec.consumed);
                    let range = start + rec.data.start..start + rec.data.end;
                    let data = &self.input.buffer()[range.clone()];
                    // Every packet of the trace advances the schedule, ours or not.
                    // At top speed there is none: no call (the profiled and
                    // unprofiled loops made the compiler stop inlining it).
                    let due = if paced { self.pacer.due(rec.ts_ns, rec.wire_len) } else { None };
                    probe.mark(Stage::Steer);
                    let (queue, bucket) = match (&self.rss, &self.steering) {
                        (Some(rss), Some(_)) => (0, Some(rss.bucket(data))),
                        (Some(rss), None) => (usize::from(rss.queue(data).0), None),
                        _ => (usize::from(self.queues.first()), None),
                    };
                    let Some(mut i) = slot[queue] else {
                        probe.mark(Stage::Source);
                        continue;
                    };
                    if let Some(due) = due {
                        probe.mark(Stage::CaptureWait);
                        if pacing::until(due) > FLUSH_BEFORE_WAIT {
                            sides.iter_mut().for_each(CaptureSide::flush);
                        }
                        if !wait_or_stop(due, ctl) {
                            return Ok(());
                        }
                        probe.mark(Stage::Steer);
                    }
                    let pkt = Pkt { data, range, wire_len: rec.wire_len, ts_ns: rec.ts_ns, ts_carry: rec.ts_carry, paced };
                    let judged = Judged { verdict, filter: self.filter.get() };
                    if let (Some(st), Some(b)) = (&mut self.steering, bucket) {
                        since_tick += 1;
                        match st.route(b) {
                            Route::Queue(q) => i = q,
                            Route::Park => {
                                probe.mark(Stage::HandOff);
                                if let Fate::Stop = park_one(st, b, sides, &pkt, judged, ctl) {
                                    return Ok(());
                                }
                                probe.mark(Stage::Source);
                                continue;
                            }
                        }
                    }
                    let block = if paced { None } else { self.input.block() };
                    if let Fate::Stop = capture_one(&mut sides[i], &pkt, block, judged, ctl, probe) {
                        return Ok(());
                    }
                    if since_tick >= TICK_CHECK_EVERY {
                        probe.mark(Stage::Steer);
                        since_tick = 0;
                        self.steer_tick(sides);
                    }
                    probe.mark(Stage::Source);
                }
                Step::Skip { consumed } | Step::Header { consumed } => self.input.advance(consumed),
                Step::Need { need } => {
                    probe.mark(Stage::NextBlock);
                    self.steer_tick(sides);
                    for s in sides.iter_mut() {
                        s.publish_stats();
                    }
                    self.progress.set_done(self.input.offset());
                    if !self.input.refill(need, sides, ctl)? {
                        return Ok(());
                    }
                    probe.mark(Stage::Source);
                }
                Step::End => return Ok(()),
            }
        }
    }
}

/// The next step of the trace at `offset`, where `buf` is what the input
/// holds from there: from the walking thread when one runs, else parsed here.
#[inline]
fn next_step(walker: &mut Walker, prewalk: &mut Option<PreWalk>, buf: &[u8], offset: u64, eof: bool) -> Result<Step, FormatError> {
    match prewalk {
        Some(p) => p.next(buf.len(), eof),
        None => walker.next(buf, offset, eof),
    }
}

/// Read the records after `first` that the buffer holds, up to
/// [`FILTER_BATCH`] in all, and judge them with `filter` in one call:
/// `batch` gets each with its verdict, in file order. Returns the step that
/// ended the batch early (a block or record without a packet, the need for
/// more bytes, the end, or an error), which the caller must act on after
/// the batch's packets, as if it had just read it. Reading ahead does not
/// move the input: the caller advances it record by record as it captures.
///
/// Why: a short program costs little more than its call, and a batch pays
/// the call once ([`Filter::run_batch`]). A record read before a mapped
/// file was cut is still the file's; one after it is caught by the
/// caller's check of where the cut is.
#[inline]
fn judge_ahead(
    walker: &mut Walker,
    prewalk: &mut Option<PreWalk>,
    input: &Input,
    first: Record,
    filter: &Filter,
    batch: &mut Vec<(Record, u32)>,
    probe: &mut impl Probe,
) -> Option<Result<Step, FormatError>> {
    batch.clear();
    let mut ahead = first.consumed;
    batch.push((first, 0));
    let mut stopped = None;
    while batch.len() < FILTER_BATCH {
        let unread = &input.unread()[ahead..];
        match next_step(walker, prewalk, unread, input.offset() + ahead as u64, input.eof) {
            Ok(Step::Packet(rec)) => {
                ahead += rec.consumed;
                batch.push((rec, 0));
            }
            other => {
                stopped = Some(other);
                break;
            }
        }
    }
    probe.mark(Stage::Filter);
    let unread = input.unread();
    let mut inputs = [BatchInput::new(&[], 0); FILTER_BATCH];
    let mut at = 0;
    for (slot, (rec, _)) in inputs.iter_mut().zip(batch.iter()) {
        *slot = BatchInput::new(&unread[at + rec.data.start..at + rec.data.end], rec.wire_len);
        at += rec.consumed;
    }
    let mut verdicts = [0u32; FILTER_BATCH];
    let n = batch.len();
    filter.run_batch(&inputs[..n], &mut verdicts[..n]);
    for ((_, v), verdict) in batch.iter_mut().zip(verdicts) {
        *v = verdict;
    }
    debug_assert_eq!(at, ahead, "the batch's records end where reading ahead stopped");
    probe.mark(Stage::Source);
    stopped
}

/// Wait until `due`, waking every [`WAIT_SLICE`] to see a stop request.
/// Returns false if a stop was requested.
fn wait_or_stop(due: std::time::Instant, ctl: &Control) -> bool {
    loop {
        if ctl.stop_requested() {
            return false;
        }
        let left = pacing::until(due);
        if left <= WAIT_SLICE {
            pacing::wait_until(due);
            return true;
        }
        std::thread::sleep(WAIT_SLICE);
    }
}

/// How a packet is judged: by the verdict its batch was given, or by the
/// filter now (a record read alone), or not at all (no filter).
#[derive(Copy, Clone)]
struct Judged<'f> {
    verdict: Option<u32>,
    filter: Option<&'f Filter>,
}

impl Judged<'_> {
    /// Whether the packet is filtered out; `mark` runs first when the filter must run now.
    #[inline(always)]
    fn rejects(self, p: &Pkt<'_>, mark: impl FnOnce()) -> bool {
        match (self.verdict, self.filter) {
            (Some(v), _) => v == 0,
            (None, Some(f)) => {
                mark();
                !f.matches(p.data, p.wire_len)
            }
            (None, None) => false,
        }
    }
}

/// Filter and take from the budget a packet of a moving bucket, then park it.
fn park_one(st: &mut Steering, bucket: usize, sides: &mut [CaptureSide], p: &Pkt<'_>, judged: Judged<'_>, ctl: &Control) -> Fate {
    if judged.rejects(p, || {}) {
        // Counted where the bucket is going; it reaches no queue either way.
        let to = st.destination(bucket).unwrap_or(0);
        sides[to].drop_filtered(p.wire_len);
        return Fate::Done;
    }
    if !ctl.take_budget() {
        ctl.request_stop(StopReason::PacketLimit);
        return Fate::Stop;
    }
    st.park(bucket, p.data, p.wire_len, p.ts_ns, sides);
    Fate::Done
}

/// One packet: its bytes, where they are in the input buffer, and whether it
/// arrived on a schedule (then it is dropped, not waited for, without a cell).
struct Pkt<'a> {
    data: &'a [u8],
    range: std::ops::Range<usize>,
    wire_len: u32,
    ts_ns: u64,
    ts_carry: u32,
    paced: bool,
}

/// Filter, take from the packet budget and capture one packet into `side`:
/// by reference into `block` when given, by copy otherwise. Always inlined
/// (see [`TraceUnit::capture`]).
#[inline(always)]
fn capture_one(
    side: &mut CaptureSide,
    p: &Pkt<'_>,
    block: Option<&BlockRef>,
    judged: Judged<'_>,
    ctl: &Control,
    probe: &mut impl Probe,
) -> Fate {
    if judged.rejects(p, || probe.mark(Stage::Filter)) {
        side.drop_filtered(p.wire_len);
        return Fate::Done;
    }
    probe.mark(Stage::HandOff);
    if !ctl.take_budget() {
        ctl.request_stop(StopReason::PacketLimit);
        return Fate::Stop;
    }
    loop {
        let pushed = match block {
            Some(b) => side.push_ref_carried(b, p.range.clone(), p.wire_len, p.ts_ns, p.ts_carry),
            None => side.push_copy_carried(p.data, p.wire_len, p.ts_ns, p.ts_carry),
        };
        match pushed {
            Ok(()) => return Fate::Done,
            Err(NoCell) if p.paced => {
                side.drop_capture(p.wire_len);
                return Fate::Done;
            }
            Err(NoCell) => {
                if ctl.stop_requested() {
                    return Fate::Stop;
                }
                probe.mark(Stage::CaptureWait);
                side.wait_for_cell(WAIT_SLICE);
                probe.mark(Stage::HandOff);
            }
        }
    }
}

/// Open a trace source by path (`None` = stdin).
/// Open a trace once its memory and the engine's for `queues` fit the budget.
pub(crate) fn open(
    path: Option<&PathBuf>,
    queues: QueueRange,
    name: String,
    cfg: ReadConfig,
    budget: &Budget,
    wait: &HeaderWait<'_>,
) -> Result<Box<dyn Source>, SourceError> {
    let mut plan = Plan::new();
    plan.add(
        format!("trace reading: {} blocks of {} with headroom", cfg.blocks, Bytes((cfg.headroom + cfg.block_bytes) as u64)),
        cfg.memory_bytes(),
    );
    budget.check(queues.len(), plan)?;
    Ok(Box::new(TraceSource::open(path.map(PathBuf::as_path), queues, name, cfg, wait)?))
}
