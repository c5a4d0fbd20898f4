//! The capture loop of one AF_PACKET queue.
//!
//! The unit walks the ring's blocks in the order the kernel fills them. For each
//! packet it reads the `tpacket3_hdr` and pushes a cell that points into the
//! block (`push_ref`): no copy, no system call and no allocation per packet. A
//! walked block is kept in a FIFO until no chunk holds it any more, then given
//! back to the kernel; blocks are given back in whatever order the workers let
//! go of them, and the kernel fills them again in ring order.
//!
//! When no cell is free the unit neither drops nor skips: it stops at that
//! packet, waits for the worker to recycle a chunk (giving back blocks meanwhile)
//! and resumes at the same packet. The kernel keeps filling the rest of the ring;
//! if it overflows, the kernel's own drop counter records it, and the unit reads
//! PACKET_STATISTICS every [`STATS_EVERY`] and at exit and counts those drops as
//! delivery drops of its queue.
//!
//! When nothing is ready the unit publishes its partly filled chunk (so workers
//! see packets within about one block timeout), takes back recycled chunks,
//! gives back blocks, and sleeps: in poll(2) on the socket if it holds no walked
//! block, otherwise on the recycle queue for [`HELD_WAIT`]. The kernel's poll
//! reports "readable" as long as the block before its current one is not its own
//! (`packet_poll`), which is the case while a worker still holds the block just
//! walked: poll returns at once and the unit would spin. (Measured with a worker
//! spending 50 µs per packet at 5,000 packets/s: always polling doubled the
//! process's CPU time, the capture thread spinning for half a core.) And poll
//! cannot see what does end the wait, a recycled chunk letting a block go back.
//! Every sleep is bounded by [`WAIT_SLICE`], so a stop request is seen within it.
//!
//! At a stop that keeps what was captured, the unit first walks every block
//! the ring held when it saw the stop (see `live::drain`).
//!
//! Under rebalancing the unit also does its queue's part of bucket moves (see
//! the `rebalance` module): it parks packets of buckets moving in, fences its
//! pool for buckets moving out, and sleeps at most one controller tick.

use super::rebalance::{QueueRole, TICK};
use super::ring::{BadFrame, ReadyBlock, Ring, Walked};
use super::Shared;
use crate::capture::{CaptureUnit, Control, SourceError, StopReason};
use crate::pool::CaptureSide;
use crate::profile::{Probe, Profiler, Stage};
use crate::source::live::drain::{Drain, PATIENCE};
use crate::sys::packet::PacketSocket;
use crate::QueueId;
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest the unit sleeps without looking at a stop request.
const WAIT_SLICE: Duration = Duration::from_millis(50);
/// Sleep on the recycle queue while a walked block is outstanding: short against
/// the block timeout (100 ms by default), so a block the kernel hands over meanwhile
/// is seen nearly as soon as poll would have seen it.
const HELD_WAIT: Duration = Duration::from_millis(1);
/// How often the kernel's drop counter is read.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// Capture of one queue: its socket and ring.
pub(super) struct QueueUnit {
    queue: QueueId,
    label: String,
    socket: Arc<PacketSocket>,
    ring: Ring,
    /// What the capture's units share (qm placeholders, the buckets program), kept
    /// while this unit runs.
    _shared: Arc<Shared>,
    /// The block being walked.
    walk: Option<Walk>,
    /// Blocks walked but not yet given back, oldest first.
    held: VecDeque<Walked>,
    /// This queue's part in rebalancing, when the capture rebalances.
    balance: Option<QueueRole>,
    next_stats: Instant,
    /// Stage timing, when the run is profiled.
    profiler: Option<Arc<Profiler>>,
}

/// Where the walk of a block stands.
struct Walk {
    block: ReadyBlock,
    /// Packets not yet pushed.
    left: u32,
    /// Offset of the next packet's header.
    at: usize,
    /// The next packet already took its share of the packet limit (and waits for a cell).
    budgeted: bool,
}

/// A drain at a stop: the ring's fill point when it was seen, where the walk
/// stood at the last look (blocks adopted, packets left in the block), and
/// when that last moved.
struct DrainTo {
    point: u64,
    at: (u64, u32),
    drain: Drain,
}

/// How a walk ended.
enum Step {
    /// Every packet of the block is in a cell.
    Done,
    /// No free cell: resume at the same packet.
    NoCell,
    /// The packet limit was reached.
    Limit,
}

impl QueueUnit {
    pub(super) fn new(
        queue: QueueId,
        label: String,
        socket: Arc<PacketSocket>,
        ring: Ring,
        shared: Arc<Shared>,
        balance: Option<QueueRole>,
        profiler: Option<Arc<Profiler>>,
    ) -> QueueUnit {
        QueueUnit {
            queue,
            label,
            socket,
            ring,
            _shared: shared,
            walk: None,
            held: VecDeque::new(),
            balance,
            next_stats: Instant::now(),
            profiler,
        }
    }

    /// Longest sleep: a stop request is seen within it, and under rebalancing a move too.
    fn slice(&self) -> Duration {
        if self.balance.is_some() {
            TICK
        } else {
            WAIT_SLICE
        }
    }

    /// Rebalancing's look at this queue, when on.
    fn sync(&mut self, side: &mut CaptureSide) {
        if let Some(b) = &mut self.balance {
            b.sync(&self.ring, self.walk.as_ref().map(|w| w.left), side);
        }
    }

    /// Walk the ring's blocks into the pool, with stage marks on `probe`.
    fn capture(&mut self, side: &mut CaptureSide, ctl: &Control, probe: &mut impl Probe) -> Result<(), SourceError> {
        let mut drain: Option<DrainTo> = None;
        loop {
            if ctl.stop_requested() && self.stopped(&mut drain, side, ctl) {
                return Ok(());
            }
            if let Some(w) = &mut self.walk {
                match walk(&self.ring, w, side, ctl, self.balance.as_mut(), probe).map_err(bad_ring)? {
                    Step::Done => {
                        if let Some(w) = self.walk.take() {
                            self.held.push_back(self.ring.done(w.block));
                        }
                    }
                    Step::NoCell => {
                        probe.mark(Stage::CaptureWait);
                        side.wait_for_cell(self.slice());
                        probe.mark(Stage::Source);
                        self.give_back();
                        self.sync(side);
                        self.stats_if_due(side)?;
                        continue;
                    }
                    Step::Limit => {
                        ctl.request_stop(StopReason::PacketLimit);
                        return Ok(());
                    }
                }
            }
            // Between blocks: chunks come back and blocks go back while traffic flows.
            side.reclaim();
            self.give_back();
            self.stats_if_due(side)?;
            if let Some(block) = self.ring.next_block().map_err(bad_ring)? {
                let (left, at) = (block.packets(), block.first());
                self.walk = Some(Walk { block, left, at, budgeted: false });
                // After adopting and before walking: a bucket moving here is parked
                // from its first packet on (see the `rebalance` module).
                self.sync(side);
                continue;
            }
            probe.mark(Stage::HandOff);
            side.flush();
            side.reclaim();
            probe.mark(Stage::Source);
            self.give_back();
            self.sync(side);
            probe.mark(Stage::CaptureWait);
            if self.held.is_empty() {
                let until_stats = self.next_stats.saturating_duration_since(Instant::now());
                self.socket.wait_readable(self.slice().min(until_stats)).map_err(socket_error)?;
            } else {
                side.wait_recycled(HELD_WAIT);
            }
            probe.mark(Stage::Source);
        }
    }

    /// Whether the unit is done at a stop. A stop that keeps what was captured
    /// (see `live::drain`) is done once every block below the ring's fill point
    /// at the stop is walked: the block the kernel was filling then is handed
    /// over within the block timeout. What no cell could be had for, or all of
    /// it under rebalancing, is counted as delivery drops.
    fn stopped(&mut self, drain: &mut Option<DrainTo>, side: &mut CaptureSide, ctl: &Control) -> bool {
        let at = (self.ring.adopted(), self.walk.as_ref().map_or(0, |w| w.left));
        let d = match drain {
            Some(d) => d,
            None if !ctl.keeps_captured() => return true,
            None => drain.insert(DrainTo { point: self.ring.fill_point(), at, drain: Drain::new(PATIENCE + self.ring.block_timeout()) }),
        };
        if at != d.at {
            d.drain.took(1);
            d.at = at;
        }
        if self.walk.is_none() && self.ring.adopted() >= d.point {
            return true;
        }
        if self.balance.is_some() || d.drain.stalled() {
            let left = u64::from(at.1) + self.ring.packets_before(d.point);
            side.add_delivery_drops(left);
            side.publish_stats();
            return true;
        }
        false
    }

    /// Give back every walked block no chunk holds any more, keeping the others in order.
    fn give_back(&mut self) {
        for _ in 0..self.held.len() {
            if let Some(w) = self.held.pop_front() {
                if let Err(w) = self.ring.give_back(w) {
                    self.held.push_back(w);
                }
            }
        }
    }

    fn stats_if_due(&mut self, side: &mut CaptureSide) -> Result<(), SourceError> {
        let now = Instant::now();
        if now < self.next_stats {
            return Ok(());
        }
        self.next_stats = now + STATS_EVERY;
        self.count_kernel_drops(side)
    }

    /// Count what the kernel dropped since the last read (reading resets its counter).
    fn count_kernel_drops(&self, side: &mut CaptureSide) -> Result<(), SourceError> {
        let drops = self.socket.take_drops().map_err(socket_error)?;
        if drops > 0 {
            side.add_delivery_drops(u64::from(drops));
            side.publish_stats();
        }
        Ok(())
    }
}

/// A failure of the socket while capturing. The engine puts the unit's name in front.
fn socket_error(e: io::Error) -> SourceError {
    let what = if e.raw_os_error() == Some(libc::ENETDOWN) { "the interface went down or away" } else { "capture socket" };
    SourceError::Io { what: what.into(), error: e }
}

fn bad_ring(e: BadFrame) -> SourceError {
    SourceError::Io { what: "the kernel's ring is inconsistent".into(), error: io::Error::new(io::ErrorKind::InvalidData, e.0) }
}

/// Push the rest of the block's packets, until a cell is missing or the limit is
/// hit; packets of a bucket moving to this queue are parked instead.
#[inline]
fn walk(
    ring: &Ring,
    w: &mut Walk,
    side: &mut CaptureSide,
    ctl: &Control,
    mut balance: Option<&mut QueueRole>,
    probe: &mut impl Probe,
) -> Result<Step, BadFrame> {
    while w.left > 0 {
        let f = ring.frame(&w.block, w.at)?;
        if !w.budgeted {
            if !ctl.take_budget() {
                return Ok(Step::Limit);
            }
            w.budgeted = true;
        }
        let parked = match balance.as_deref_mut() {
            Some(b) if b.parks() => {
                probe.mark(Stage::Steer);
                b.park(ring, &w.block, &f, side)
            }
            _ => false,
        };
        probe.mark(Stage::HandOff);
        if !parked && side.push_ref(w.block.block(), f.data, f.wire_len, f.ts_ns).is_err() {
            probe.mark(Stage::Source);
            return Ok(Step::NoCell);
        }
        probe.mark(Stage::Source);
        probe.record(Stage::Source);
        w.budgeted = false;
        w.left -= 1;
        if w.left > 0 && f.next == 0 {
            return Err(BadFrame(format!("block {}: {} packets missing after offset {}", w.block.block().id(), w.left, w.at)));
        }
        w.at += f.next;
        if ctl.budget_spent() {
            return Ok(Step::Limit);
        }
    }
    Ok(Step::Done)
}

impl CaptureUnit for QueueUnit {
    fn queues(&self) -> Vec<QueueId> {
        vec![self.queue]
    }

    fn name(&self) -> String {
        self.label.clone()
    }

    fn profiled(&self) -> bool {
        self.profiler.is_some()
    }

    fn run(mut self: Box<Self>, sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        let n = sides.len();
        let Ok([mut side]) = <[CaptureSide; 1]>::try_from(sides) else {
            return Err(SourceError::Invalid(format!("{}: given {n} queues, serves one", self.label)));
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
        // However the run ended: the kernel's last drops, moves, then the attached chunk.
        let drops = self.count_kernel_drops(&mut side);
        if let Some(b) = &mut self.balance {
            b.end(&self.ring, self.walk.as_ref().map(|w| w.left), &mut side);
        }
        side.flush();
        result.and(drops)
    }
}
