//! The capture unit of one AF_XDP queue.
//!
//! The loop: top the fill ring up with free frames (waking the driver when it
//! asks), take up to [`BATCH`] descriptors off the RX ring, and for each run the
//! filter in user space and put the packet in a cell of the pool that points
//! into its UMEM frame (no copy). A rejected packet is counted as filtered and
//! its frame is free again at once. When the pool has no cell, consuming stops
//! with the rest of the batch left on the RX ring, the unit waits for the worker
//! to recycle a chunk, and resumes; if the RX ring fills meanwhile the kernel
//! drops and counts it.
//!
//! Wake-ups: while packets flow, the unit does not poll. A batch that empties
//! the RX ring is followed by a timed sleep ([`Gather`]) long enough for many
//! packets to gather on the ring but short enough that it cannot fill a quarter
//! of it, so each wake-up takes a batch whatever the rate, and the system calls
//! and context switches per packet fall as the rate rises. poll(2) would
//! return for every packet or two instead: in copy mode the kernel signals the
//! socket at the end of every NAPI poll. Only when a look after a gather finds
//! the ring empty does the unit publish its partly filled chunk, take back recycled
//! frames and sleep in poll(2) until the next packet, for at most
//! [`IDLE_WAIT`], so a stop request is seen within that. A partly filled chunk
//! is published once its oldest packet is [`PUBLISH_DELAY`] old, flowing or not.
//! The fill ring is woken (a system call) only when the kernel asks for it
//! (XDP_USE_NEED_WAKEUP; in copy mode it never does).
//!
//! Timestamps: AF_XDP gives none. Each packet is stamped with the TSC clock
//! ([`crate::clock`]) as it is taken off the ring, resynced between batches;
//! without one (`--timestamps clock`, or a TSC that is not invariant) each
//! batch is stamped with CLOCK_REALTIME and its packets share it.
//!
//! Under rebalancing the unit also steers each packet by its bucket (see the
//! `rebalance` module): into its own pool, to another queue's, or parked. Between
//! batches it does its queue's part of bucket moves and takes in what other
//! queues handed it, and it sleeps at most [`BALANCE_WAIT`], since packets
//! handed to it do not wake its socket.
//!
//! At a stop that keeps what was captured, the unit first takes what the RX
//! ring held when it saw the stop (see `live::drain`).
//!
//! Kernel drops come from XDP_STATISTICS, which is cumulative, so the unit
//! accounts the differences since its last read, at least every
//! [`STATS_INTERVAL`] and once more before it returns.

use super::kfilter::{FilterCounts, KernelFilter};
use super::program::XdpProgram;
use super::rebalance::{QueueRole, Received};
use super::xsk::Xsk;
use crate::capture::{CaptureUnit, Control, SourceError, StopReason};
use crate::clock::{realtime_ns, TscClock};
use crate::filter::FilterWatch;
use crate::pool::{CaptureSide, FrameArena, NoCell};
use crate::profile::{Probe, Profiler, Stage};
use crate::source::live::drain::{Drain, PATIENCE};
use crate::source::live::gather::Gather;
use crate::sys::bpf::Filtered;
use crate::sys::packet::Promiscuous;
use crate::sys::xsk::XdpStatistics;
use crate::QueueId;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Descriptors taken off the RX ring at once.
const BATCH: u32 = 64;
/// How long a partly filled chunk waits for more packets before it is published.
const PUBLISH_DELAY: Duration = Duration::from_millis(1);
/// Longest sleep without looking at the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// Longest wait for a recycled chunk without looking at the stop flag.
const CELL_WAIT: Duration = Duration::from_millis(50);
/// Longest sleep under rebalancing, where packets handed by other queues wait
/// for this unit without waking it.
const BALANCE_WAIT: Duration = Duration::from_millis(2);
/// Kernel counters are read at least this often while packets flow.
const STATS_INTERVAL: Duration = Duration::from_millis(10);

/// What every queue's unit shares and keeps alive until the last one ends:
/// the attached program, its filter slot (whose filter lives as long as the
/// slot's descriptor) and the promiscuous membership. Nothing reads them;
/// holding them is the point.
pub(crate) struct Attachment {
    _program: XdpProgram,
    _filter: Option<Arc<KernelFilter>>,
    _promiscuous: Option<Promiscuous>,
}

impl Attachment {
    pub(crate) fn new(program: XdpProgram, filter: Option<Arc<KernelFilter>>, promiscuous: Option<Promiscuous>) -> Attachment {
        Attachment { _program: program, _filter: filter, _promiscuous: promiscuous }
    }
}

/// Captures one queue.
pub(crate) struct XskUnit {
    /// Declared first so the socket closes (and leaves the XSKMAP) before the
    /// program may be detached.
    xsk: Xsk,
    umem: Arc<FrameArena>,
    _attachment: Arc<Attachment>,
    filter: FilterWatch,
    /// What the filter in the XDP program passed to the stack, and how much
    /// of it this unit has counted.
    kernel_filtered: Option<(Arc<FilterCounts>, Filtered)>,
    snaplen: usize,
    drops: KernelDrops,
    balance: Option<QueueRole>,
    /// `afxdp:IF@Q`, for error messages.
    label: String,
    /// Stamps each packet; `None`: CLOCK_REALTIME per batch.
    clock: Option<TscClock>,
    /// Stage timing, when the run is profiled.
    profiler: Option<Arc<Profiler>>,
}

impl XskUnit {
    pub(crate) fn new(
        xsk: Xsk,
        attachment: Arc<Attachment>,
        filter: FilterWatch,
        snaplen: u32,
        balance: Option<QueueRole>,
        iface: &str,
        clock: Option<TscClock>,
    ) -> XskUnit {
        let zero_copy = xsk.is_zero_copy();
        let umem = Arc::clone(xsk.umem());
        let label = format!("afxdp:{iface}@{}", xsk.queue().0);
        XskUnit {
            xsk,
            umem,
            _attachment: attachment,
            filter,
            kernel_filtered: None,
            snaplen: snaplen as usize,
            drops: KernelDrops::new(zero_copy),
            balance,
            label,
            clock,
            profiler: None,
        }
    }

    /// Account what the filter in the XDP program passes to the stack from
    /// this queue, as read from `counts`.
    pub(crate) fn kernel_filtered(mut self, counts: Option<Arc<FilterCounts>>) -> XskUnit {
        // From zero: what the kernel filtered before the unit ran belongs to this capture.
        self.kernel_filtered = counts.map(|c| (c, Filtered::default()));
        self
    }

    /// Time the unit's stages for `profiler`, when the run is profiled.
    pub(crate) fn profiled_by(mut self, profiler: Option<Arc<Profiler>>) -> XskUnit {
        self.profiler = profiler;
        self
    }

    /// Take back the frames of recycled chunks and top the fill ring up.
    #[inline]
    fn refill(&mut self, side: &mut CaptureSide) {
        match &mut self.balance {
            Some(b) => b.refill(&mut self.xsk, side),
            None => self.xsk.refill(side),
        }
    }

    /// Rebalancing's part between batches, when on.
    #[inline]
    fn sync(&mut self, side: &mut CaptureSide) {
        if let Some(b) = &mut self.balance {
            b.sync(&mut self.xsk, &self.umem, side);
        }
    }

    /// Account what the kernel dropped and what its filter passed to the
    /// stack since the last time.
    fn account(&mut self, side: &mut CaptureSide) -> Result<(), SourceError> {
        self.drops.account(self.xsk.statistics()?, side);
        if let Some((counts, seen)) = &mut self.kernel_filtered {
            let now = counts.read(self.xsk.queue().0).map_err(|error| SourceError::Io {
                what: format!("{}: reading what the kernel filter passed to the stack", self.label),
                error,
            })?;
            let packets = now.packets.saturating_sub(seen.packets);
            if packets > 0 {
                side.add_filtered(packets, now.bytes.saturating_sub(seen.bytes));
                side.publish_stats();
            }
            *seen = now;
        }
        Ok(())
    }

    /// The longest sleep: `wait`, or less under rebalancing.
    fn at_most(&self, wait: Duration) -> Duration {
        if self.balance.is_some() {
            wait.min(BALANCE_WAIT)
        } else {
            wait
        }
    }
}

/// How a batch ended.
enum Batch {
    /// Every descriptor was consumed.
    Done,
    /// The pool had no cell: the rest stays on the RX ring.
    NoCell,
    /// The packet limit was reached.
    Limit,
}

impl CaptureUnit for XskUnit {
    fn queues(&self) -> Vec<QueueId> {
        vec![self.xsk.queue()]
    }

    fn name(&self) -> String {
        self.label.clone()
    }

    fn profiled(&self) -> bool {
        self.profiler.is_some()
    }

    fn run(mut self: Box<Self>, sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        let mut sides = sides.into_iter();
        let (Some(mut side), None) = (sides.next(), sides.next()) else {
            return Err(SourceError::Invalid("an AF_XDP unit captures exactly one queue".into()));
        };
        // Chosen once: the untimed loop carries no marks at all.
        let result = match self.profiler.clone() {
            Some(p) => {
                let mut timer = p.timer(&format!("capture-{}", self.label), Stage::Source);
                let r = self.capture(&mut side, ctl, &mut timer);
                timer.finish(&p);
                r
            }
            None => self.capture(&mut side, ctl, &mut ()),
        };
        // Drops the kernel counted up to now belong to this run, even after a failure.
        let last = self.account(&mut side);
        if let Some(b) = &mut self.balance {
            b.end(&mut self.xsk, &self.umem, &mut side);
        }
        side.flush();
        result.and(last)
    }
}

impl XskUnit {
    /// Take the RX ring's packets into the pool, with stage marks on `probe`.
    fn capture(&mut self, side: &mut CaptureSide, ctl: &Control, probe: &mut impl Probe) -> Result<(), SourceError> {
        let mut stats_at = Instant::now();
        // When the oldest packet not yet visible to the worker was captured.
        let mut unpublished_since: Option<Instant> = None;
        let mut gather = Gather::new(u64::from(self.xsk.rx_entries()));
        loop {
            if ctl.stop_requested() {
                return self.stopping(side, ctl, probe);
            }
            self.sync(side);
            self.refill(side);
            if let Some(c) = &mut self.clock {
                c.resync_if_due();
            }
            // A filter replaced meanwhile judges the next batch on.
            self.filter.changed();
            let n = self.xsk.peek(BATCH);
            // Empty after packets were taken since the last sleep (a batch ended
            // exactly at the ring's end): still flowing, so gather below.
            if n == 0 && !gather.flowing() {
                // A partly filled chunk waits up to PUBLISH_DELAY for more packets
                // before it is published, so at moderate rates chunks fill up
                // instead of taking a packet or two each (every cell of a
                // published chunk is spent until it is recycled).
                let left = unpublished_since.map_or(Duration::ZERO, |t| PUBLISH_DELAY.saturating_sub(t.elapsed()));
                probe.mark(Stage::CaptureWait);
                if !left.is_zero() && self.xsk.wait(self.at_most(left))? {
                    probe.mark(Stage::Source);
                    continue;
                }
                probe.mark(Stage::HandOff);
                side.flush();
                probe.mark(Stage::Source);
                unpublished_since = None;
                self.account(side)?;
                stats_at = Instant::now();
                // What the worker recycled meanwhile goes on the fill ring before we
                // sleep, or the kernel might have nowhere to put packets.
                self.refill(side);
                probe.mark(Stage::CaptureWait);
                if !self.xsk.wait(self.at_most(IDLE_WAIT))? {
                    // Quiet for a whole wait: is there still an interface to wait on?
                    self.xsk.check_bound()?;
                }
                probe.mark(Stage::Source);
                gather.restart();
                continue;
            }
            let outcome = match n {
                0 => Batch::Done,
                _ => {
                    unpublished_since.get_or_insert_with(Instant::now);
                    let (outcome, done) = self.consume(n, side, ctl, probe);
                    probe.records(done, Stage::Source);
                    gather.took(u64::from(done));
                    outcome
                }
            };
            match outcome {
                Batch::Done if n < BATCH => {
                    // The ring is empty: publish a chunk that has waited long enough,
                    // then let packets gather.
                    let now = Instant::now();
                    if unpublished_since.is_some_and(|t| now.duration_since(t) >= PUBLISH_DELAY) {
                        probe.mark(Stage::HandOff);
                        side.flush();
                        unpublished_since = None;
                    }
                    probe.mark(Stage::CaptureWait);
                    std::thread::sleep(self.at_most(gather.next(now)));
                    probe.mark(Stage::Source);
                }
                Batch::Done => {}
                Batch::NoCell => {
                    // Waiting publishes the partly filled chunk.
                    probe.mark(Stage::CaptureWait);
                    side.wait_for_cell(self.at_most(CELL_WAIT));
                    probe.mark(Stage::Source);
                    unpublished_since = None;
                }
                Batch::Limit => return Ok(()),
            }
            if stats_at.elapsed() >= STATS_INTERVAL {
                self.account(side)?;
                stats_at = Instant::now();
            }
        }
    }

    /// At a stop: what the RX ring holds now came before it. Take it when the
    /// stop keeps what was captured (see `live::drain`), counting as delivery
    /// drops what no cell could be had for; under rebalancing count it at once.
    fn stopping(&mut self, side: &mut CaptureSide, ctl: &Control, probe: &mut impl Probe) -> Result<(), SourceError> {
        if !ctl.keeps_captured() {
            return Ok(());
        }
        let mut left = self.xsk.peek(u32::MAX);
        if self.balance.is_none() {
            let mut drain = Drain::new(PATIENCE);
            while left > 0 {
                self.refill(side);
                // Never 0: the kernel does not take back descriptors it produced.
                let n = self.xsk.peek(BATCH.min(left));
                let (outcome, done) = self.consume(n, side, ctl, probe);
                probe.records(done, Stage::Source);
                left -= done;
                drain.took(u64::from(done));
                match outcome {
                    Batch::Done if n > 0 => {}
                    Batch::Limit => return Ok(()),
                    Batch::NoCell if !drain.stalled() => {
                        side.wait_for_cell(CELL_WAIT);
                    }
                    Batch::Done | Batch::NoCell => break,
                }
            }
        }
        if left > 0 {
            side.add_delivery_drops(u64::from(left));
            side.publish_stats();
        }
        Ok(())
    }

    /// Consume up to `n` peeked descriptors and release those consumed; returns
    /// how it ended and how many it consumed.
    #[inline]
    fn consume(&mut self, n: u32, side: &mut CaptureSide, ctl: &Control, probe: &mut impl Probe) -> (Batch, u32) {
        let batch_ns = if self.clock.is_none() { realtime_ns() } else { 0 };
        let mut done = 0;
        let mut outcome = Batch::Done;
        while done < n {
            let ts_ns = self.clock.as_mut().map_or(batch_ns, TscClock::now_ns);
            let (desc, data) = self.xsk.packet(done, &self.umem, self.snaplen);
            let caplen = data.len();
            if let Some(f) = self.filter.get() {
                probe.mark(Stage::Filter);
                // The filter reads the packet in place, in its frame.
                if !f.matches(data, desc.len) {
                    side.drop_filtered(desc.len);
                    self.xsk.free_frame(desc.addr);
                    probe.mark(Stage::Source);
                    done += 1;
                    continue;
                }
            }
            probe.mark(Stage::Steer);
            let place = self.balance.as_ref().map(|b| b.place(data));
            if !ctl.take_budget() {
                ctl.request_stop(StopReason::PacketLimit);
                outcome = Batch::Limit;
                break;
            }
            if let (Some(b), Some(p)) = (&mut self.balance, place) {
                if !b.is_here(p) {
                    let r = Received { addr: desc.addr, len: caplen as u32, wire_len: desc.len, ts_ns };
                    b.send(p, r, &mut self.xsk, side);
                    probe.mark(Stage::Source);
                    done += 1;
                    continue;
                }
            }
            probe.mark(Stage::HandOff);
            let pushed = side.push_frame(&self.umem, desc.addr, caplen, desc.len, ts_ns);
            probe.mark(Stage::Source);
            match pushed {
                Ok(()) => {
                    if let (Some(b), Some(p)) = (&mut self.balance, place) {
                        b.took_cell(p);
                    }
                    done += 1;
                    if ctl.budget_spent() {
                        // The limit's last packet: stop now, not at the next one.
                        ctl.request_stop(StopReason::PacketLimit);
                        outcome = Batch::Limit;
                        break;
                    }
                }
                Err(NoCell) => {
                    outcome = Batch::NoCell;
                    break;
                }
            }
        }
        self.xsk.release(done);
        (outcome, done)
    }
}

/// Turns the socket's cumulative XDP_STATISTICS into weir's drop categories.
///
/// - `rx_ring_full`: the kernel had the packet in a frame but the RX ring was
///   full because we did not consume fast enough: a **delivery drop**.
/// - `rx_dropped`: the kernel could not put the packet in a frame: the fill ring
///   was empty (the pool was depleted: every frame held by cells or waiting on
///   the RX ring), or the packet was larger than a frame. Either way no cell
///   could take it: a **capture drop**. In copy mode the kernel counts an empty
///   fill ring in both `rx_dropped` and `rx_fill_ring_empty_descs` for the same
///   packet, so only `rx_dropped` is taken there.
/// - `rx_fill_ring_empty_descs`: in zero-copy mode the driver counts here the
///   times it found the fill ring empty while refilling its own descriptors; the
///   NIC then drops for want of a buffer. It is the closest count the socket
///   has of those drops, so it is a **capture drop** too (added to `rx_dropped`,
///   which zero-copy raises only for oversized packets).
/// - `rx_invalid_descs`: descriptors the kernel refused on a ring we produce. No
///   kernel raises it for an RX socket today (a bad fill address is skipped and
///   counted elsewhere); if one ever does, each is a frame the kernel could not
///   use for a packet, so it is counted as a **capture drop** rather than lost.
struct KernelDrops {
    zero_copy: bool,
    seen: XdpStatistics,
}

impl KernelDrops {
    fn new(zero_copy: bool) -> KernelDrops {
        // From zero, not from a first reading: drops before the unit ran (between
        // bind and the thread's start) belong to this capture too.
        KernelDrops { zero_copy, seen: XdpStatistics::default() }
    }

    fn account(&mut self, now: XdpStatistics, side: &mut CaptureSide) {
        let d = |now: u64, seen: u64| now.saturating_sub(seen);
        let dropped = d(now.rx_dropped, self.seen.rx_dropped);
        let fill_empty = d(now.rx_fill_ring_empty_descs, self.seen.rx_fill_ring_empty_descs);
        let invalid = d(now.rx_invalid_descs, self.seen.rx_invalid_descs);
        let capture = dropped + invalid + if self.zero_copy { fill_empty } else { 0 };
        let delivery = d(now.rx_ring_full, self.seen.rx_ring_full);
        self.seen = now;
        if capture > 0 {
            side.add_capture_drops(capture);
        }
        if delivery > 0 {
            side.add_delivery_drops(delivery);
        }
        if capture + delivery > 0 {
            side.publish_stats();
        }
    }
}
