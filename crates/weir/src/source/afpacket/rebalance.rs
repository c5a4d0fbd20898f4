//! Flow-consistent rebalancing of an AF_PACKET capture: the bucket table is in
//! the kernel (weir's fanout program, see [`steer`](super::steer)), the
//! controller runs on a thread of its own, and each queue's capture thread does
//! its queue's part of a move.
//!
//! The contract is rebalancing's (see [`crate::balance`]), and a move goes
//! through the stages of [`crate::balance::threaded`]. Here:
//!
//! 1. **Parking** (controller): q' parks packets of b from the next block it
//!    adopts on. The kernel table is changed to q', and the controller waits
//!    until no packet steered by the old entry is still on its way into q's
//!    ring ([`wait_for_steered_packets`]).
//! 2. **Fencing** (q): q notes how far the kernel has filled its ring
//!    ([`Ring::fill_point`]): every packet of b it will ever get is in a block
//!    below that point. Once it has walked those blocks it fences its pool.
//!    Once the fence is passed, q's worker has handled every packet of b: q
//!    asks it for the state its handler keeps about b's flows (the stream
//!    layer's streams) and ends the stage when the worker has posted that to
//!    q''s worker ([`Rebalance::exported`](crate::balance::threaded::Rebalance::exported)).
//!    A table entry here is a flow bucket ([`KernelTable::flow_bucket`]): the
//!    kernel computes the bucket exactly as the stream layer does, from the
//!    same hash, so the handler gives up exactly the flows that move.
//! 3. **Fenced** (q'): parked packets that find no cell wait, still parked, for
//!    the next try; b's newer packets queue behind them. q''s worker took the
//!    state in before it sees the first of them (see
//!    [`crate::balance::threaded`] for why).
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
//! full beyond `PARK_LIMIT` drops the packet as a
//! capture drop of q'; when the capture stops with moves unfinished, their
//! parked packets are capture drops of q' too (q's worker may still hold
//! packets of b, so handing them over would break the contract), and their
//! exports are cancelled ([`Transit::abandon`]) before q' closes its capture
//! queue, so b's flow state is on exactly one worker when the run ends.
//!
//! The controller's inputs each tick ([`TICK`]): packets per bucket from the
//! kernel's hit counters (one bpf(2) call per bucket), and per queue what its
//! worker finished, what waits (in the pool and in ring blocks not yet walked)
//! and what it dropped, published by the queue's capture thread.

use super::ring::{Frame, ReadyBlock, Ring};
use super::steer::{BucketSteering, BUCKETS};
use crate::balance::threaded::{hand_over, BucketTable, Incoming, Rebalance, Transit, DONE, FENCED, FENCING};
use crate::balance::{Parked, ParkingLot, SteeringStats};
use crate::capture::SourceError;
use crate::pool::{CaptureSide, Fence};
use crate::rss::{BucketCount, IndirectionTable, Rss};
use crate::sys::packet::wait_for_steered_packets;
use crate::{FlowBucket, LinkType, QueueId};
use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

pub(super) use crate::balance::threaded::TICK;

/// The kernel's bucket table, as the controller sees it.
pub(super) struct KernelTable {
    pub(crate) steering: BucketSteering,
    /// The capture's queues, in fanout member order.
    pub(crate) queues: Vec<QueueId>,
}

fn steer_error(e: super::SteerError) -> SourceError {
    SourceError::Io {
        what: "rebalancing (a process that dropped root with -Z can no longer use the bucket table)".into(),
        error: std::io::Error::other(e.to_string()),
    }
}

impl BucketTable for KernelTable {
    fn hits(&self) -> Result<Vec<u64>, SourceError> {
        self.steering.hits().map_err(steer_error)
    }

    /// What `bind` filled in the kernel: bucket b -> member b mod n.
    fn initial(&self, queues: u16) -> IndirectionTable {
        IndirectionTable::new(BucketCount::DEFAULT, queues)
    }

    fn switch(&self, moves: &[Arc<Transit>]) -> Result<(), SourceError> {
        // The publication must be visible before the table change, which the kernel makes
        // in the system call below: a full fence orders our stores before its stores.
        fence(Ordering::SeqCst);
        for t in moves {
            self.steering.move_bucket(t.mv.bucket, self.queues[usize::from(t.mv.to)]).map_err(steer_error)?;
        }
        wait_for_steered_packets();
        for t in moves {
            t.advance(FENCING);
        }
        Ok(())
    }

    /// Entry b is bucket b of [`BUCKETS`]: the flows whose symmetric hash
    /// has b in its low bits, which the fanout program and
    /// [`Rss::bucket`](crate::Rss::bucket) compute alike.
    fn flow_bucket(&self, entry: usize) -> Option<FlowBucket> {
        Some(FlowBucket::new(entry, BUCKETS))
    }
}

pub(super) type Shared = Rebalance<KernelTable>;

/// A move out of this queue, and how far its fence is.
struct Outgoing {
    transit: Arc<Transit>,
    /// Blocks to walk first ([`Ring::fill_point`] when the move was seen).
    blocks: u64,
    fence: Option<Fence>,
    /// The worker was asked for the bucket's flow state.
    asked: bool,
}

/// One queue's part in rebalancing, kept by its capture thread.
pub(super) struct QueueRole {
    shared: Arc<Shared>,
    /// This queue's position in the capture.
    me: u16,
    rss: Rss,
    /// Per bucket: true while its packets are parked here.
    parking: Vec<bool>,
    incoming: Vec<Incoming<Parked>>,
    outgoing: Vec<Outgoing>,
    lot: ParkingLot,
    /// Counts not yet added to the shared counters.
    unpublished: SteeringStats,
}

impl QueueRole {
    pub(super) fn new(shared: Arc<Shared>, me: u16) -> QueueRole {
        shared.join();
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
        let waiting = side.backlog_packets() + side.attached_packets() as u64 + ring.waiting_packets() + unwalked;
        self.shared.publish(usize::from(self.me), side, waiting);
        if self.shared.any_moves() {
            self.see_moves(ring);
        }
        self.fence_outgoing(walked, side);
        self.hand_over(side);
        self.unpublished.parked_bytes_peak = self.lot.peak();
        self.shared.count(&std::mem::take(&mut self.unpublished));
    }

    fn see_moves(&mut self, ring: &Ring) {
        for t in self.shared.moves().iter() {
            let stage = t.stage();
            if t.mv.to == self.me && stage < DONE && !self.incoming.iter().any(|i| Arc::ptr_eq(&i.transit, t)) {
                self.parking[t.mv.bucket] = true;
                self.incoming.push(Incoming { transit: Arc::clone(t), parked: VecDeque::new() });
            }
            if t.mv.from == self.me && stage == FENCING && !self.outgoing.iter().any(|o| Arc::ptr_eq(&o.transit, t)) {
                self.outgoing.push(Outgoing { transit: Arc::clone(t), blocks: ring.fill_point(), fence: None, asked: false });
            }
        }
    }

    fn fence_outgoing(&mut self, walked: u64, side: &mut CaptureSide) {
        let shared = &self.shared;
        self.outgoing.retain_mut(|o| {
            if o.fence.is_none() && walked >= o.blocks {
                o.fence = Some(side.fence());
            }
            let done = o.fence.as_ref().is_some_and(|f| side.passed(f)) && shared.exported(&o.transit, &mut o.asked);
            if done {
                o.transit.advance(FENCED);
            }
            !done
        });
    }

    fn hand_over(&mut self, side: &mut CaptureSide) {
        hand_over(&mut self.incoming, &mut self.parking, |p| side.push_copy(self.lot.bytes(p), p.wire_len, p.ts_ns).is_ok());
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
            inc.transit.abandon();
            for p in &inc.parked {
                side.drop_capture(p.wire_len);
                self.unpublished.park_drops += 1;
            }
            self.parking[inc.transit.mv.bucket] = false;
        }
        self.lot.clear();
        self.unpublished.parked_bytes_peak = self.lot.peak();
        self.shared.count(&std::mem::take(&mut self.unpublished));
    }
}

impl Drop for QueueRole {
    fn drop(&mut self) {
        self.shared.leave();
    }
}
