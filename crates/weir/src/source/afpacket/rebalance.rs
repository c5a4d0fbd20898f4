//! Flow-consistent rebalancing of an AF_PACKET capture: the bucket table is in
//! the kernel (weir's fanout program, see [`steer`](super::steer)), the
//! controller runs on a thread of its own, and each queue's capture thread does
//! its queue's part of a move.
//!
//! The contract is rebalancing's (see [`crate::balance`]): no flow is processed
//! by two workers at once, and none is reordered. A move of bucket b from queue
//! q to queue q' goes through four stages, each ended by one thread:
//!
//! 1. **Parking** (controller). The move is published; q' parks packets of b
//!    from the next block it adopts on. Then the kernel table is changed to q',
//!    and the controller waits until no packet steered by the old entry is still
//!    on its way into q's ring ([`sys::wait_for_steered_packets`]).
//! 2. **Fencing** (q). q notes how far the kernel has filled its ring
//!    ([`Ring::fill_point`]): every packet of b it will ever get is in a block
//!    below that point. Once it has walked those blocks it fences its pool
//!    ([`CaptureSide::fence`]), and once every fenced chunk is recycled its
//!    worker has finished every packet of b.
//! 3. **Fenced** (q'). q' pushes b's parked packets into its pool, in arrival
//!    order, ahead of anything of b it adopts later, and stops parking b once
//!    they are all in (packets that find no cell wait, still parked, for the
//!    next try; b's newer packets queue behind them).
//! 4. **Done** (controller). The bucket may move again.
//!
//! Why q' sees the move before it sees any packet of b: the controller publishes
//! the move and then (after a full fence) changes the table in a system call;
//! the kernel steers a packet of b to q' only after that, writes it, and hands
//! its block over with a release store; q' reads the block status with acquire
//! and only then looks for moves. Barrier cumulativity carries the publication
//! along that chain on every architecture Linux supports.
//!
//! Parking copies, and only packets of moving buckets for about one fence's
//! time (a block timeout at most, plus the old worker's backlog). A parking lot
//! full beyond [`PARK_LIMIT`](crate::balance::PARK_LIMIT) drops the packet as a
//! capture drop of q'; when the capture stops with moves unfinished, their
//! parked packets are capture drops of q' too (q's worker may still hold
//! packets of b, so handing them over would break the contract).
//!
//! The controller's inputs each tick ([`TICK`]): packets per bucket from the
//! kernel's hit counters (one bpf(2) call per bucket), and per queue what its
//! worker finished, what waits (in the pool and in ring blocks not yet walked)
//! and what it dropped, published by the queue's capture thread.

use super::steer::{BucketSteering, BUCKETS};
use super::sys::{self, Frame, ReadyBlock, Ring};
use crate::balance::{BalanceCounters, Controller, ControllerConfig, Move, Parked, ParkingLot, QueueSample, SteeringStats};
use crate::engine::{CaptureUnit, Control, SourceError};
use crate::pool::{CaptureSide, Fence, NoCell};
use crate::rss::{BucketCount, IndirectionTable, Rss};
use crate::{LinkType, QueueId};
use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The controller's tick: the queues' capture threads look for moves at least
/// this often, too.
pub(super) const TICK: Duration = Duration::from_millis(10);

/// Stages of a move (see the module doc).
const PARKING: u8 = 0;
const FENCING: u8 = 1;
const FENCED: u8 = 2;
const DONE: u8 = 3;

struct Transit {
    /// `from` and `to` are positions in [`Rebalance::queues`].
    mv: Move,
    stage: AtomicU8,
}

impl Transit {
    /// Acquire: a stage is advanced (with release) after the work that ends the
    /// previous one, and the next thread builds on that work.
    fn stage(&self) -> u8 {
        self.stage.load(Ordering::Acquire)
    }

    fn advance(&self, to: u8) {
        debug_assert_eq!(self.stage.load(Ordering::Relaxed) + 1, to, "stages advance one at a time");
        self.stage.store(to, Ordering::Release);
    }
}

/// One queue's figures for the controller, written by its capture thread.
/// Relaxed: each is a count read on its own; a tick that reads one a little
/// stale only sees the next tick's value early or late.
#[derive(Default)]
struct Published {
    served: AtomicU64,
    backlog: AtomicU64,
    dropped: AtomicU64,
}

/// What the controller and the queues' capture threads share.
pub(super) struct Rebalance {
    steering: BucketSteering,
    /// The capture's queues, in fanout member order.
    queues: Vec<QueueId>,
    cfg: ControllerConfig,
    moves: Mutex<Vec<Arc<Transit>>>,
    /// Moves in `moves`, so a capture thread looks at the list only when there are any.
    active: AtomicUsize,
    published: Vec<Published>,
    /// Queue units alive: the controller ends with the last of them.
    units: AtomicUsize,
    counters: Arc<BalanceCounters>,
}

impl Rebalance {
    pub(super) fn new(steering: BucketSteering, queues: Vec<QueueId>, cfg: ControllerConfig, counters: Arc<BalanceCounters>) -> Arc<Self> {
        let published = queues.iter().map(|_| Published::default()).collect();
        Arc::new(Rebalance {
            steering,
            queues,
            cfg,
            moves: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
            published,
            units: AtomicUsize::new(0),
            counters,
        })
    }

    fn moves(&self) -> MutexGuard<'_, Vec<Arc<Transit>>> {
        // A panic elsewhere cannot leave the list half-changed: every change is one push or retain.
        self.moves.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The controller's thread, a capture unit that fills no queue.
pub(super) struct ControllerUnit {
    shared: Arc<Rebalance>,
    name: String,
}

impl ControllerUnit {
    pub(super) fn new(shared: Arc<Rebalance>, iface: &str) -> Self {
        ControllerUnit { shared, name: format!("afpacket:{iface} rebalancer") }
    }
}

impl CaptureUnit for ControllerUnit {
    fn queues(&self) -> Vec<QueueId> {
        Vec::new()
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(self: Box<Self>, _sides: Vec<CaptureSide>, ctl: &Control) -> Result<(), SourceError> {
        let s = &self.shared;
        let n = s.queues.len();
        let steer_error = |e: super::SteerError| SourceError::Io {
            what: "rebalancing (a process that dropped root with -Z can no longer use the bucket table)".into(),
            source: std::io::Error::other(e.to_string()),
        };
        let mut controller = Controller::new(n, s.cfg);
        // The table `bind` filled in the kernel: bucket b -> member b mod n.
        let mut table = IndirectionTable::new(BucketCount::DEFAULT, n as u16);
        let mut in_transit = vec![false; BUCKETS];
        let mut last_hits = s.steering.hits().map_err(steer_error)?;
        let mut last = vec![(0u64, 0u64); n];
        let mut next = Instant::now() + TICK;
        while !ctl.stop_requested() && s.units.load(Ordering::Acquire) > 0 {
            let now = Instant::now();
            if now < next {
                std::thread::sleep(next - now);
                continue;
            }
            next = (next + TICK).max(now);
            let mut moved = 0;
            s.moves().retain(|t| {
                let done = t.stage() == DONE;
                if done {
                    in_transit[t.mv.bucket] = false;
                    moved += 1;
                }
                !done
            });
            s.active.fetch_sub(moved as usize, Ordering::Relaxed);
            let hits = s.steering.hits().map_err(steer_error)?;
            let per_bucket: Vec<u32> =
                hits.iter().zip(&last_hits).map(|(h, l)| u32::try_from(h.saturating_sub(*l)).unwrap_or(u32::MAX)).collect();
            last_hits = hits;
            let mut samples = vec![QueueSample::default(); n];
            for (b, &c) in per_bucket.iter().enumerate() {
                samples[usize::from(table.queue_of_bucket(b))].arrivals += u64::from(c);
            }
            for (q, p) in s.published.iter().enumerate() {
                let (served, dropped) = (p.served.load(Ordering::Relaxed), p.dropped.load(Ordering::Relaxed));
                samples[q].served = served.saturating_sub(last[q].0);
                samples[q].dropped = dropped.saturating_sub(last[q].1);
                samples[q].backlog = p.backlog.load(Ordering::Relaxed);
                last[q] = (served, dropped);
            }
            let moves = controller.tick(&samples, &per_bucket, &table, |b| !in_transit[b]);
            for m in &moves {
                in_transit[m.bucket] = true;
                table.assign(m.bucket, m.to);
            }
            start(s, &moves).map_err(steer_error)?;
            s.counters.add(&SteeringStats { moves_started: moves.len() as u64, buckets_moved: moved, ..SteeringStats::default() });
        }
        Ok(())
    }
}

/// Stage 1 of every move of a tick (see the module doc).
fn start(s: &Rebalance, moves: &[Move]) -> Result<(), super::SteerError> {
    if moves.is_empty() {
        return Ok(());
    }
    let transits: Vec<Arc<Transit>> = moves.iter().map(|&mv| Arc::new(Transit { mv, stage: AtomicU8::new(PARKING) })).collect();
    s.moves().extend(transits.iter().cloned());
    // Release: a capture thread that sees the count sees the moves pushed before it.
    s.active.fetch_add(transits.len(), Ordering::Release);
    // The publication must be visible before the table change, which the kernel makes
    // in the system call below: a full fence orders our stores before its stores.
    fence(Ordering::SeqCst);
    for t in &transits {
        s.steering.move_bucket(t.mv.bucket, s.queues[usize::from(t.mv.to)])?;
    }
    sys::wait_for_steered_packets();
    for t in &transits {
        t.advance(FENCING);
    }
    Ok(())
}

/// A move into this queue: the bucket's packets parked meanwhile, oldest first.
struct Incoming {
    transit: Arc<Transit>,
    parked: VecDeque<Parked>,
}

/// A move out of this queue, and how far its fence is.
struct Outgoing {
    transit: Arc<Transit>,
    /// Blocks to walk first ([`Ring::fill_point`] when the move was seen).
    blocks: u64,
    fence: Option<Fence>,
}

/// One queue's part in rebalancing, kept by its capture thread.
pub(super) struct QueueRole {
    shared: Arc<Rebalance>,
    /// This queue's position in the capture.
    me: u16,
    rss: Rss,
    /// Per bucket: true while its packets are parked here.
    parking: Vec<bool>,
    incoming: Vec<Incoming>,
    outgoing: Vec<Outgoing>,
    lot: ParkingLot,
    /// Counts not yet added to the shared counters.
    unpublished: SteeringStats,
}

impl QueueRole {
    pub(super) fn new(shared: Arc<Rebalance>, me: u16) -> QueueRole {
        shared.units.fetch_add(1, Ordering::AcqRel);
        QueueRole {
            shared,
            me,
            rss: Rss::new(LinkType::ETHERNET, 1),
            parking: vec![false; BUCKETS],
            incoming: Vec::new(),
            outgoing: Vec::new(),
            lot: ParkingLot::default(),
            unpublished: SteeringStats::default(),
        }
    }

    /// True while some bucket moves into this queue: packets must then be looked at.
    #[inline]
    pub(super) fn parks(&self) -> bool {
        !self.incoming.is_empty()
    }

    /// Park the packet if its bucket is moving here; false if it is not.
    pub(super) fn park(&mut self, ring: &Ring, block: &ReadyBlock, f: &Frame, side: &mut CaptureSide) -> bool {
        let data = ring.packet_bytes(block, f);
        let bucket = self.rss.bucket(data);
        if !self.parking[bucket] {
            return false;
        }
        let Some(inc) = self.incoming.iter_mut().find(|i| i.transit.mv.bucket == bucket) else {
            debug_assert!(false, "bucket {bucket} parks with no move in");
            return false;
        };
        match self.lot.park(data, f.wire_len, f.ts_ns) {
            Some(p) => {
                inc.parked.push_back(p);
                self.unpublished.parked += 1;
            }
            None => {
                side.drop_capture(f.wire_len);
                self.unpublished.park_drops += 1;
            }
        }
        true
    }

    /// Publish this queue's figures and advance its moves. Call after adopting a
    /// block and before walking it, and whenever the capture thread is between
    /// blocks. `walking` is the packets of the adopted block not pushed yet, if a
    /// block is being walked: every block adopted before it was walked to the end.
    pub(super) fn sync(&mut self, ring: &Ring, walking: Option<u32>, side: &mut CaptureSide) {
        let walked = ring.adopted() - u64::from(walking.is_some());
        let unwalked = u64::from(walking.unwrap_or(0));
        let p = &self.shared.published[usize::from(self.me)];
        p.served.store(side.served_packets(), Ordering::Relaxed);
        p.dropped.store(side.dropped_packets(), Ordering::Relaxed);
        let waiting = side.backlog_packets() + side.attached_packets() as u64 + ring.waiting_packets() + unwalked;
        p.backlog.store(waiting, Ordering::Relaxed);
        if self.shared.active.load(Ordering::Acquire) > 0 {
            self.see_moves(ring);
        }
        self.fence_outgoing(walked, side);
        self.hand_over(side);
        self.unpublished.parked_bytes_peak = self.lot.peak();
        if self.unpublished != SteeringStats::default() {
            self.shared.counters.add(&std::mem::take(&mut self.unpublished));
        }
    }

    fn see_moves(&mut self, ring: &Ring) {
        for t in self.shared.moves().iter() {
            let stage = t.stage();
            if t.mv.to == self.me && stage < DONE && !self.incoming.iter().any(|i| Arc::ptr_eq(&i.transit, t)) {
                self.parking[t.mv.bucket] = true;
                self.incoming.push(Incoming { transit: Arc::clone(t), parked: VecDeque::new() });
            }
            if t.mv.from == self.me && stage == FENCING && !self.outgoing.iter().any(|o| Arc::ptr_eq(&o.transit, t)) {
                self.outgoing.push(Outgoing { transit: Arc::clone(t), blocks: ring.fill_point(), fence: None });
            }
        }
    }

    fn fence_outgoing(&mut self, walked: u64, side: &mut CaptureSide) {
        self.outgoing.retain_mut(|o| {
            if o.fence.is_none() && walked >= o.blocks {
                o.fence = Some(side.fence());
            }
            let passed = o.fence.as_ref().is_some_and(|f| side.passed(f));
            if passed {
                o.transit.advance(FENCED);
            }
            !passed
        });
    }

    /// Push the parked packets of every move whose old queue is done with it. A
    /// move whose packets do not all find a cell keeps parking (so nothing of its
    /// bucket overtakes them) and goes on at the next call.
    fn hand_over(&mut self, side: &mut CaptureSide) {
        let mut k = 0;
        while k < self.incoming.len() {
            let inc = &mut self.incoming[k];
            if inc.transit.stage() != FENCED {
                k += 1;
                continue;
            }
            while let Some(p) = inc.parked.front() {
                if let Err(NoCell) = side.push_copy(self.lot.bytes(p), p.wire_len, p.ts_ns) {
                    break;
                }
                inc.parked.pop_front();
            }
            if !inc.parked.is_empty() {
                k += 1;
                continue;
            }
            let inc = self.incoming.swap_remove(k);
            self.parking[inc.transit.mv.bucket] = false;
            inc.transit.advance(DONE);
        }
        if self.incoming.iter().all(|i| i.parked.is_empty()) {
            self.lot.clear();
        }
    }

    /// The capture is ending: finish what can finish, and count what was parked
    /// for moves that cannot as capture drops of this queue.
    pub(super) fn end(&mut self, ring: &Ring, walking: Option<u32>, side: &mut CaptureSide) {
        side.flush();
        side.reclaim();
        self.sync(ring, walking, side);
        for inc in self.incoming.drain(..) {
            for p in &inc.parked {
                side.drop_capture(p.wire_len);
                self.unpublished.park_drops += 1;
            }
            self.parking[inc.transit.mv.bucket] = false;
        }
        self.lot.clear();
        self.unpublished.parked_bytes_peak = self.lot.peak();
        self.shared.counters.add(&std::mem::take(&mut self.unpublished));
    }
}

impl Drop for QueueRole {
    fn drop(&mut self) {
        self.shared.units.fetch_sub(1, Ordering::AcqRel);
    }
}
