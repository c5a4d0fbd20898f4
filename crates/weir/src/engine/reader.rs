//! Pull delivery: the application's own thread takes packets one at a time
//! from every queue, instead of one worker thread per queue calling a
//! [`Handler`](super::Handler). This is what libpcap's `pcap_next_ex`,
//! `pcap_dispatch` and `pcap_loop` promise their callers.
//!
//! The contract is stated on [`Reader`].

use super::watch::{Batches, Watch};
use super::{Control, Launched, RunError, SourceInfo, StopHandle, StopReason};
use crate::balance::BalanceCounters;
use crate::filter::{Filter, FilterSwitch};
use crate::locality::{Batch, LocalityConfig};
use crate::pool::{self, ChunkToken, Kept, PoolGauge, WorkerSide};
use crate::ring::{EventFd, ReadyFd};
use crate::stats::{BatchSizes, QueueCounters, Snapshot, StatsReader};
use crate::{LinkType, Packet};
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long closing waits for the capture threads to end before leaving them.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What [`Reader::next`] found.
pub enum Read<'r> {
    /// The next packet; it borrows the reader until the next call.
    Packet(Packet<'r>),
    /// Nothing to hand out within the timeout.
    Idle,
    /// Capture is over and every packet was handed out; [`Reader::error`]
    /// says whether a failure ended it. Every later call returns `End` too.
    End,
}

/// The outcome of a pulled run, from [`Reader::finish`].
#[derive(Debug)]
pub struct ReaderReport {
    /// Final counters: nothing in flight.
    pub stats: Snapshot,
    /// Everything that went wrong; a malformed trace shows up here, after the
    /// packets before the damage were handed out.
    pub errors: Vec<RunError>,
}

/// A chunk being handed out in capture order.
struct Held {
    side: usize,
    token: ChunkToken,
    next: usize,
    len: usize,
    /// Packets of it the caller turned away, and their wire bytes.
    rejected: (usize, u64),
}

/// Where the packet handed out last is, for [`Reader::reject_last`].
#[derive(Copy, Clone)]
enum Last {
    /// In the chunk held in capture order.
    InOrder { wire_len: u32 },
    /// In the locality batch's chunk of this slot.
    Sorted { slot: u32, wire_len: u32 },
}

/// Locality buffering on the reader: the batch (chunks of every queue, held
/// by (worker side, token)), gathered and handed out by the same rule as the
/// push workers' ([`crate::locality`]).
struct Sorted {
    cfg: LocalityConfig,
    link: LinkType,
    batch: Batch<(usize, ChunkToken)>,
    /// Next entry of the delivery order to hand out, while handing out.
    pos: Option<usize>,
    /// Per chunk of the batch: packets the caller turned away, and their bytes.
    rejected: Vec<(usize, u64)>,
    /// The batches handed out, by size, for a [`Watch`].
    sizes: Arc<BatchSizes>,
}

/// Every queue's packets, pulled on the caller's thread, from
/// [`Engine::start_reader`](super::Engine::start_reader); or one queue's, from
/// [`Engine::start_readers`](super::Engine::start_readers), which gives each
/// queue a reader of its own. `Send`, not `Sync`.
///
/// - The capture threads run as in [`Engine::start`](super::Engine::start);
///   the reader holds every queue's worker side (or its one queue's), and
///   its counters, [`watch`](Self::watch) and report are of those queues.
/// - A packet returned by [`Reader::next`] borrows the reader: it stays valid
///   until the next call, and the chunk that holds it is recycled only once
///   every packet of it has been handed out.
/// - Queues are read in turn, a chunk at a time, so a busy queue cannot starve
///   the others. Within a queue, capture order is kept.
/// - With locality buffering, batches are gathered across all queues and
///   handed out in port order as the worker-side stage does
///   ([`crate::locality`]); a batch still gathering when the caller's timeout
///   passes stays held, and `next` returns [`Read::Idle`].
/// - [`Reader::ready_fd`] gives a descriptor for poll/select/epoll: readable
///   once something may be read (a chunk, a starved source, the end), cleared
///   by the next `next` that finds nothing. A locality batch that waits for
///   more is handed out after [`Reader::select_timeout`] without a chunk, so a
///   poller must wake at least that often.
/// - A caller that judges packets itself (libpcap's library applies a
///   savefile's filter record by record) says so with
///   [`Reader::reject_last`]: the packet is counted filtered, not delivered,
///   in the queue that captured it. The engine keeps the one tally.
/// - Closing ([`Reader::finish`], or dropping the reader) stops capture.
///   Every packet captured and not handed out is counted `unread`, so the
///   stats identity holds with nothing in flight.
pub struct Reader {
    ctl: Arc<Control>,
    counters: Vec<Arc<QueueCounters>>,
    pools: Vec<PoolGauge>,
    balance: Option<Arc<BalanceCounters>>,
    captures: Vec<(String, JoinHandle<Result<(), RunError>>)>,
    sides: Vec<WorkerSide>,
    info: SourceInfo,
    held: Option<Held>,
    batch: Option<Sorted>,
    /// The side the next look for a chunk starts at.
    turn: usize,
    errors: Vec<RunError>,
    closed: bool,
    ready: Option<ReadyFd>,
    filter: FilterSwitch,
    last: Option<Last>,
    /// The last `next` found nothing to hand out or hold while the ready
    /// descriptor said there was something.
    woken_for_nothing: bool,
}

/// How long a call to `next` may still wait. The clock is read only once a
/// wait is due: a packet that is already there costs no clock read (about
/// 30 ns each on the test machine, more than the rest of taking a packet).
struct Deadline {
    timeout: Duration,
    at: Option<Instant>,
}

impl Deadline {
    fn left(&mut self) -> Duration {
        if self.timeout.is_zero() {
            return Duration::ZERO;
        }
        match self.at {
            Some(at) => at.saturating_duration_since(Instant::now()),
            None => {
                self.at = Some(Instant::now() + self.timeout);
                self.timeout
            }
        }
    }
}

impl Reader {
    /// The one reader of every queue.
    pub(super) fn new(mut l: Launched) -> Reader {
        let sides: Vec<WorkerSide> = std::mem::take(&mut l.worker_sides).into_iter().map(|(_, s)| s).collect();
        let captures = std::mem::take(&mut l.captures);
        Reader::of(&l, sides, l.counters.clone(), l.pools.clone(), captures)
    }

    /// A reader per queue, in queue order; the first holds the capture threads.
    pub(super) fn per_queue(mut l: Launched) -> Vec<Reader> {
        let sides = std::mem::take(&mut l.worker_sides);
        let mut captures = std::mem::take(&mut l.captures);
        let per_queue = sides.into_iter().zip(l.counters.iter().zip(&l.pools));
        per_queue
            .map(|((_, side), (c, p))| Reader::of(&l, vec![side], vec![Arc::clone(c)], vec![p.clone()], std::mem::take(&mut captures)))
            .collect()
    }

    /// A reader of `sides`, whose counters and pools are `counters` and `pools`.
    fn of(
        l: &Launched,
        sides: Vec<WorkerSide>,
        counters: Vec<Arc<QueueCounters>>,
        pools: Vec<PoolGauge>,
        captures: Vec<(String, JoinHandle<Result<(), RunError>>)>,
    ) -> Reader {
        let batch = l.locality.map(|cfg| Sorted {
            cfg,
            link: l.info.link_type,
            batch: Batch::new(),
            pos: None,
            rejected: Vec::new(),
            sizes: Arc::default(),
        });
        Reader {
            ctl: Arc::clone(&l.ctl),
            counters,
            pools,
            balance: l.balance.clone(),
            captures,
            sides,
            info: l.info.clone(),
            held: None,
            batch,
            turn: 0,
            errors: Vec::new(),
            closed: false,
            ready: None,
            filter: l.filter.clone(),
            last: None,
            woken_for_nothing: false,
        }
    }

    /// What the source is, as [`Engine::info`](super::Engine::info) said.
    pub fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// A consistent snapshot of every queue's counters.
    pub(crate) fn stats(&self) -> Snapshot {
        Snapshot { queues: self.counters.iter().map(|c| c.read()).collect() }
    }

    /// Counters readable from anywhere, while packets are borrowed from the reader.
    pub fn stats_reader(&self) -> StatsReader {
        StatsReader(self.counters.clone())
    }

    /// A handle that reads this reader's counters from any thread (see [`Watch`]).
    pub fn watch(&self) -> Watch {
        Watch {
            source: self.info.name.clone(),
            counters: self.counters.clone(),
            pools: self.pools.clone(),
            batches: match &self.batch {
                Some(s) => Batches::Reader(Arc::clone(&s.sizes)),
                None => Batches::Off,
            },
            balance: self.balance.clone(),
            streams: Vec::new(),
        }
    }

    /// A handle that stops capture from any thread; the reader then hands out
    /// what was captured before and returns [`Read::End`].
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.ctl))
    }

    /// A descriptor that turns readable when [`next`](Self::next) may find
    /// something, for poll/select/epoll; the reader owns it (do not close it).
    /// Made on first call.
    pub fn ready_fd(&mut self) -> io::Result<RawFd> {
        self.tie_ready_fd(None)
    }

    /// As [`ready_fd`](Self::ready_fd), signalling the caller's `fd`: it may
    /// keep a holder of the same descriptor ([`EventFd::share`]) that outlives the reader (a
    /// libpcap handle's descriptor is valid from before capture starts to its
    /// close). The reader's end leaves it readable.
    pub fn attach_ready_fd(&mut self, fd: EventFd) -> io::Result<()> {
        self.tie_ready_fd(Some(fd)).map(drop)
    }

    fn tie_ready_fd(&mut self, fd: Option<EventFd>) -> io::Result<RawFd> {
        if self.ready.is_none() {
            let first = self.sides.first().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the reader has no queue"))?;
            let ready = ReadyFd::new(&first.wake_handle(), fd)?;
            // Readable until the first `next` finds nothing: the caller may not
            // have read what came before it asked.
            ready.signal();
            self.ready = Some(ready);
        }
        Ok(self.ready.as_ref().map_or(-1, ReadyFd::raw_fd))
    }

    /// Replace the filter while capture runs. A kernel filter (afpacket) is
    /// swapped before this returns; a capture thread that filters in user
    /// space (afxdp, files) takes it before its next batch or record. Packets
    /// captured before were judged by the old filter and are delivered as they
    /// are: a caller wanting libpcap's semantics (the new filter applies to
    /// everything read from now on) judges those again itself. The filter must
    /// be compiled for this source's link type.
    pub fn replace_filter(&self, filter: Option<Filter>) -> io::Result<()> {
        self.filter.replace(filter)
    }

    /// The last [`next`](Self::next) returned [`Read::Idle`] although the
    /// ready descriptor was readable, and the reader holds nothing: a poller
    /// woken by it was woken for nothing. A ring follows the chunk it
    /// announces, so it can come after the chunk was already handed out; a
    /// caller that promises its own callers "readable means a read will not
    /// block" (libpcap's library, to a program that polls and then calls a
    /// blocking `pcap_dispatch`) returns at once instead of waiting.
    pub fn woken_for_nothing(&self) -> bool {
        self.woken_for_nothing
    }

    /// The longest a poller may sleep on [`ready_fd`](Self::ready_fd) before
    /// calling [`next`](Self::next) again: with locality buffering, a batch
    /// gathering from a source gone quiet is handed out only by a call.
    pub fn select_timeout(&self) -> Option<Duration> {
        self.batch.as_ref().map(|s| s.cfg.quiet_after())
    }

    /// The packet [`next`](Self::next) handed out last was turned away by the
    /// caller's own filter: count it as filtered, not delivered. Once per
    /// packet; a call with no packet handed out since does nothing.
    pub fn reject_last(&mut self) {
        match self.last.take() {
            Some(Last::InOrder { wire_len }) => {
                if let Some(h) = &mut self.held {
                    h.rejected.0 += 1;
                    h.rejected.1 += u64::from(wire_len);
                }
            }
            Some(Last::Sorted { slot, wire_len }) => {
                if let Some(r) = self.batch.as_mut().and_then(|s| s.rejected.get_mut(slot as usize)) {
                    r.0 += 1;
                    r.1 += u64::from(wire_len);
                }
            }
            None => {}
        }
    }

    /// The next packet, waiting up to `timeout` for one (a zero timeout never
    /// waits). Capture order within a queue, or port order with locality buffering.
    pub fn next(&mut self, timeout: Duration) -> Read<'_> {
        self.last = None;
        self.woken_for_nothing = false;
        let mut deadline = Deadline { timeout, at: None };
        let found = if self.batch.is_some() { self.next_sorted(&mut deadline) } else { self.next_in_order(&mut deadline) };
        if let (Some(ready), Err(r)) = (&self.ready, &found) {
            match r {
                Read::End => ready.signal(),
                _ => {
                    // What the reader's own waits wake for; the starved mark
                    // matters only to a batch that is gathering.
                    let gathering = self.batch.as_ref().is_some_and(|b| b.batch.is_gathering());
                    let was_readable = ready.rearm(|| pool::any_ready(&self.sides, gathering));
                    self.woken_for_nothing = was_readable && self.held.is_none() && !gathering;
                }
            }
        }
        match found {
            Ok((side, token, cell, slot)) => match self.sides[side].raw_chunk(token).ok().and_then(|c| c.get(cell)) {
                Some(p) => {
                    let wire_len = p.wire_len();
                    self.last = Some(match slot {
                        Some(slot) => Last::Sorted { slot, wire_len },
                        None => Last::InOrder { wire_len },
                    });
                    Read::Packet(p)
                }
                // The reader holds the chunk by this token; nothing else recycles it.
                None => unreachable!("a held chunk lost its packet {cell}"),
            },
            Err(r) => r,
        }
    }

    /// Where the next packet in capture order is (side, chunk, cell, no
    /// batch slot), or what to say instead.
    fn next_in_order(&mut self, deadline: &mut Deadline) -> Result<(usize, ChunkToken, usize, Option<u32>), Read<'static>> {
        loop {
            if let Some(h) = &mut self.held {
                if h.next < h.len {
                    h.next += 1;
                    return Ok((h.side, h.token, h.next - 1, None));
                }
                let Held { side, token, rejected, .. } = *h;
                self.held = None;
                let _ = self.sides[side].recycle_raw_kept(token, Kept { rejected, ..Kept::default() });
            }
            if let Some((side, token, len)) = self.take_any() {
                self.held = Some(Held { side, token, next: 0, len, rejected: (0, 0) });
                continue;
            }
            self.wait_or_end(deadline)?;
        }
    }

    /// Where the next packet of the locality batch is (side, chunk, cell, its
    /// chunk's slot in the batch), gathering a batch first when none is being
    /// handed out.
    fn next_sorted(&mut self, deadline: &mut Deadline) -> Result<(usize, ChunkToken, usize, Option<u32>), Read<'static>> {
        loop {
            let s = self.batch.as_mut().expect("next_sorted runs with a batch");
            if let Some(pos) = s.pos {
                let (order, held) = s.batch.order();
                if let Some(&(slot, cell)) = order.get(pos) {
                    s.pos = Some(pos + 1);
                    let (side, token) = held[slot as usize];
                    return Ok((side, token, cell as usize, Some(slot)));
                }
                // Every packet of the batch is out: only now may its chunks go back.
                s.pos = None;
                for ((side, token), rejected) in s.batch.release().zip(s.rejected.drain(..)) {
                    let _ = self.sides[side].recycle_raw_kept(token, Kept { rejected, ..Kept::default() });
                }
                continue;
            }
            if s.batch.is_due(&s.cfg) {
                self.hand_out_batch();
                continue;
            }
            if let Some((side, token, _)) = self.take_any() {
                self.add_to_batch(side, token);
                continue;
            }
            let s = self.batch.as_ref().expect("batch");
            if s.batch.is_gathering() && s.batch.is_quiet() {
                // Quiet since its last chunk, e.g. while a nonblocking caller polled.
                self.hand_out_batch();
                continue;
            }
            if !s.batch.is_gathering() {
                // Nothing held: wait for a first chunk as in capture order.
                self.wait_or_end(deadline)?;
                continue;
            }
            if self.sides.iter().all(WorkerSide::is_closed) {
                self.hand_out_batch();
                continue;
            }
            // Held packets wait for more at most until the batch times out, QUIET
            // passes without a chunk, or a source says it waits for their memory.
            let batch_left = s.batch.wait_left(&s.cfg);
            let caller_left = deadline.left();
            pool::wait_any(&self.sides, batch_left.min(caller_left), true);
            if self.sides.iter().any(|s| s.backlog() > 0) {
                continue;
            }
            if self.sides.iter().any(WorkerSide::take_starved) || batch_left <= caller_left {
                self.hand_out_batch();
                continue;
            }
            return Err(Read::Idle);
        }
    }

    fn add_to_batch(&mut self, side: usize, token: ChunkToken) {
        let s = self.batch.as_mut().expect("batch");
        let Ok(chunk) = self.sides[side].raw_chunk(token) else { return };
        if !s.batch.is_gathering() {
            // A mark from before this batch is about memory since recycled.
            self.sides.iter().for_each(|w| {
                w.take_starved();
            });
        }
        let link = s.link;
        s.batch.add((side, token), chunk.len(), |_, index, slot| chunk.for_each_sort_key(link, |cell, key| index.push(key, (slot, cell))));
        s.rejected.push((0, 0));
    }

    fn hand_out_batch(&mut self) {
        let s = self.batch.as_mut().expect("batch");
        s.sizes.record(s.batch.hand_out().len());
        s.pos = Some(0);
    }

    /// Take a chunk from the next queue that has one: (side, token, packets).
    fn take_any(&mut self) -> Option<(usize, ChunkToken, usize)> {
        let n = self.sides.len();
        for k in 0..n {
            let i = (self.turn + k) % n;
            if let Some(c) = self.sides[i].try_next() {
                let len = c.len();
                self.turn = (i + 1) % n;
                return Some((i, c.into_token(), len));
            }
        }
        None
    }

    /// Sleep until a chunk may be waiting, or say why not to: `End` when every
    /// queue is closed and drained, `Idle` when the deadline has passed.
    fn wait_or_end(&mut self, deadline: &mut Deadline) -> Result<(), Read<'static>> {
        if self.sides.iter().all(WorkerSide::is_closed) {
            self.end_of_capture();
            return Err(Read::End);
        }
        let left = deadline.left();
        if left.is_zero() {
            return Err(Read::Idle);
        }
        pool::wait_any(&self.sides, left, false);
        Ok(())
    }

    /// Every capture thread has ended: collect their errors.
    fn end_of_capture(&mut self) {
        for (unit, h) in self.captures.drain(..) {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.errors.push(e),
                Err(p) => self.errors.push(RunError::CapturePanicked { unit, message: super::panic_message(p) }),
            }
        }
    }

    /// Why capture ended (the first reason given wins), once it has been
    /// asked to or has: the end of input when it ended by itself.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.ctl.reason().or_else(|| self.sides.iter().all(WorkerSide::is_closed).then_some(StopReason::EndOfInput))
    }

    /// The first error of the capture threads, once [`Read::End`] was returned.
    pub fn error(&self) -> Option<&RunError> {
        self.errors.first()
    }

    /// Stop capture, count what was not handed out as unread, and report.
    pub fn finish(mut self) -> ReaderReport {
        self.close();
        ReaderReport { stats: self.stats(), errors: std::mem::take(&mut self.errors) }
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if !self.sides.iter().all(WorkerSide::is_closed) {
            self.ctl.request_stop(StopReason::Requested);
        }
        if let Some(h) = self.held.take() {
            self.release_unread(h.side, h.token, h.next..h.len, h.rejected);
        }
        if let Some(mut s) = self.batch.take() {
            // Handing out: what is left of the sorted order is unread. Gathering:
            // nothing of the batch was handed out.
            let (order, held) = s.batch.order();
            let mut unread = vec![Vec::new(); held.len()];
            match s.pos {
                Some(out) => {
                    for &(slot, cell) in &order[out..] {
                        unread[slot as usize].push(cell as usize);
                    }
                }
                None => {
                    for (cells, &(side, token)) in unread.iter_mut().zip(held) {
                        cells.extend(0..self.sides[side].raw_chunk(token).map_or(0, |c| c.len()));
                    }
                }
            }
            let held: Vec<(usize, ChunkToken)> = s.batch.release().collect();
            for (((side, token), cells), rejected) in held.into_iter().zip(unread).zip(s.rejected) {
                self.release_cells_unread(side, token, &cells, rejected);
            }
        }
        // Drain what the capture threads still publish as they stop.
        let until = Instant::now() + CLOSE_WAIT;
        while !self.sides.iter().all(WorkerSide::is_closed) && Instant::now() < until {
            match self.take_any() {
                Some((side, token, len)) => self.release_unread(side, token, 0..len, (0, 0)),
                None => pool::wait_any(&self.sides, Duration::from_millis(10), false),
            }
        }
        while let Some((side, token, len)) = self.take_any() {
            self.release_unread(side, token, 0..len, (0, 0));
        }
        // Capture threads that closed their sides are returning: wait for
        // them (within the same bound), so that a closed reader leaves no
        // thread of its own behind.
        while !self.captures.iter().all(|(_, h)| h.is_finished()) && self.sides.iter().all(WorkerSide::is_closed) && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.captures.iter().all(|(_, h)| h.is_finished()) {
            self.end_of_capture();
        }
    }

    /// Recycle a chunk whose `cells` were never handed out, and of which
    /// `rejected` packets (and bytes) were turned away by the caller.
    fn release_unread(&mut self, side: usize, token: ChunkToken, cells: std::ops::Range<usize>, rejected: (usize, u64)) {
        let cells: Vec<usize> = cells.collect();
        self.release_cells_unread(side, token, &cells, rejected);
    }

    fn release_cells_unread(&mut self, side: usize, token: ChunkToken, cells: &[usize], rejected: (usize, u64)) {
        let bytes = match self.sides[side].raw_chunk(token) {
            Ok(c) => cells.iter().filter_map(|&i| c.get(i)).map(|p| u64::from(p.wire_len())).sum(),
            Err(_) => 0,
        };
        let _ = self.sides[side].recycle_raw_kept(token, Kept { unread: (cells.len(), bytes), rejected });
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.close();
    }
}
