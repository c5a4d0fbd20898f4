//! Steering in the capture path: the indirection table, moves in progress and
//! the packets parked while a bucket changes queue.
//!
//! A move of bucket b from queue q to queue q' goes through three steps:
//!
//! 1. **Fence.** q's capture side publishes its attached chunk and records every
//!    chunk of its pool not yet recycled ([`CaptureSide::fence`]). Those hold
//!    every packet of b that q has.
//! 2. **Park.** Until the fence is passed, packets of b are copied aside in
//!    arrival order ([`Steering::park`]); they are not yet counted anywhere, as
//!    they have not reached a queue.
//! 3. **Hand over.** Once every fenced chunk has been recycled (checked each
//!    [`Steering::tick`]), the parked packets are pushed into q' in order, and
//!    the table points b at q'. Anything of b that arrives later is behind them.
//!
//! With a [`Handovers`] (a push engine), step 3 waits for one more: q's
//! worker hands the state its handler keeps about b's flows over to q''s
//! (see `handover.rs`) before the parked packets go in.
//!
//! So b's packets are finished by q before q' sees any of them, and q' sees them
//! in arrival order: no flow of b is processed by two workers at once or
//! reordered. Parking copies (into a [`ParkingLot`]), which costs only packets
//! of moving buckets, for about one backlog's drain time. A parking lot full
//! beyond `PARK_LIMIT` bytes drops the packet as a capture
//! drop of q', the queue it was going to.
//!
//! The steering owns the table of a group of queues `0..n` and their capture
//! sides are passed to it by index; callers map their own queue numbers.

use super::controller::{Controller, ControllerConfig, Move, QueueSample};
use super::handover::{Handovers, Ticket};
use super::park::{Parked, ParkingLot};
use crate::pool::{CaptureSide, Fence, NoCell};
use crate::rss::IndirectionTable;
use crate::FlowBucket;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// The controller's tick in a capture thread that steers (a trace's, an
/// `xdp:` source's), and its longest wait for a move to finish.
pub(crate) const STEER_TICK: Duration = Duration::from_millis(10);

/// Where a packet of a bucket goes now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Into this queue's capture side.
    Queue(usize),
    /// Aside: the bucket is moving ([`Steering::park`]).
    Park,
}

/// What rebalancing did, counted from the start of the run
/// ([`Report::balance`](crate::engine::Report::balance)).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SteeringStats {
    /// Moves decided.
    pub moves_started: u64,
    /// Moves handed over.
    pub buckets_moved: u64,
    /// Packets parked while their bucket moved.
    pub parked: u64,
    /// Packets dropped because the parking area was full.
    pub park_drops: u64,
    /// Packets of a handed-over bucket that found no cell in the new queue.
    pub handover_drops: u64,
    /// Most bytes parked at once.
    pub parked_bytes_peak: usize,
}

struct Transit {
    mv: Move,
    fence: Fence,
    parked: VecDeque<Parked>,
    /// The old worker's export of the bucket's state, once the fence is passed.
    ticket: Option<Arc<Ticket>>,
}

/// The table, the moves in progress and the controller of one group of queues.
pub(crate) struct Steering {
    table: IndirectionTable,
    /// Index into `moving` for each bucket in transit.
    in_transit: Vec<Option<usize>>,
    moving: Vec<Transit>,
    /// Parked packets' bytes; emptied when no move parks.
    lot: ParkingLot,
    controller: Controller,
    /// Per bucket and per queue since the last tick.
    bucket_arrivals: Vec<u32>,
    queue_arrivals: Vec<u64>,
    last_served: Vec<u64>,
    last_dropped: Vec<u64>,
    stats: SteeringStats,
    /// The workers' mailboxes, when their handlers hand flow state over.
    handovers: Option<Arc<Handovers>>,
}

impl Steering {
    pub(crate) fn new(table: IndirectionTable, queues: usize, cfg: ControllerConfig) -> Self {
        let buckets = table.len();
        Steering {
            table,
            in_transit: vec![None; buckets],
            moving: Vec::new(),
            lot: ParkingLot::default(),
            controller: Controller::new(queues, cfg),
            bucket_arrivals: vec![0; buckets],
            queue_arrivals: vec![0; queues],
            last_served: vec![0; queues],
            last_dropped: vec![0; queues],
            stats: SteeringStats::default(),
            handovers: None,
        }
    }

    /// Hand each moving bucket's flow state from the old queue's worker to
    /// the new one's before its parked packets (queue positions are the
    /// steering's queue numbers).
    pub(crate) fn with_handovers(mut self, handovers: Option<Arc<Handovers>>) -> Self {
        self.handovers = handovers;
        self
    }

    pub(crate) fn stats(&self) -> SteeringStats {
        SteeringStats { parked_bytes_peak: self.lot.peak(), ..self.stats }
    }

    /// The queue a moving bucket is going to.
    pub(crate) fn destination(&self, bucket: usize) -> Option<usize> {
        self.in_transit[bucket].map(|i| usize::from(self.moving[i].mv.to))
    }

    /// True while any bucket is moving.
    pub(crate) fn busy(&self) -> bool {
        !self.moving.is_empty()
    }

    /// Where a packet of `bucket` goes, counting it for the controller.
    #[inline]
    pub(crate) fn route(&mut self, bucket: usize) -> Route {
        self.bucket_arrivals[bucket] = self.bucket_arrivals[bucket].saturating_add(1);
        match self.in_transit[bucket] {
            Some(_) => Route::Park,
            None => {
                let q = usize::from(self.table.queue_of_bucket(bucket));
                self.queue_arrivals[q] += 1;
                Route::Queue(q)
            }
        }
    }

    /// Take back the count of a packet [`route`](Self::route) sent to queue
    /// `q` that the queue did not take (no cell): it will be routed again.
    #[inline]
    pub(crate) fn unroute(&mut self, bucket: usize, q: usize) {
        self.bucket_arrivals[bucket] = self.bucket_arrivals[bucket].saturating_sub(1);
        self.queue_arrivals[q] = self.queue_arrivals[q].saturating_sub(1);
    }

    /// Keep a packet of a moving bucket until the hand-over. When the parking
    /// area is full the packet is dropped, as a capture drop of the queue it was
    /// going to.
    pub(crate) fn park(&mut self, bucket: usize, data: &[u8], wire_len: u32, ts_ns: u64, sides: &mut [CaptureSide]) {
        let Some(i) = self.in_transit[bucket] else {
            debug_assert!(false, "park called for bucket {bucket}, which is not moving");
            return;
        };
        let to = usize::from(self.moving[i].mv.to);
        self.queue_arrivals[to] += 1;
        match self.lot.park(data, wire_len, ts_ns) {
            Some(p) => {
                self.moving[i].parked.push_back(p);
                self.stats.parked += 1;
            }
            None => {
                sides[to].drop_capture(wire_len);
                self.stats.park_drops += 1;
            }
        }
    }

    /// Once per tick: hand over the moves whose fence is passed, then let the
    /// controller look at the tick's samples and start new moves.
    pub(crate) fn tick(&mut self, sides: &mut [CaptureSide]) {
        sides.iter_mut().for_each(CaptureSide::reclaim);
        self.hand_over(sides);
        let samples: Vec<QueueSample> = sides
            .iter()
            .enumerate()
            .map(|(q, s)| {
                let served = s.served_packets() - self.last_served[q];
                self.last_served[q] = s.served_packets();
                let dropped = s.dropped_packets() - self.last_dropped[q];
                self.last_dropped[q] = s.dropped_packets();
                QueueSample {
                    arrivals: self.queue_arrivals[q],
                    served,
                    backlog: s.backlog_packets() + s.attached_packets() as u64,
                    dropped,
                }
            })
            .collect();
        let in_transit = &self.in_transit;
        let moves = self.controller.tick(&samples, &self.bucket_arrivals, &self.table, |b| in_transit[b].is_none());
        for mv in moves {
            self.start(mv, sides);
        }
        self.bucket_arrivals.iter_mut().for_each(|c| *c = 0);
        self.queue_arrivals.iter_mut().for_each(|c| *c = 0);
    }

    /// Start moving a bucket now (also for a caller's own policy, or tests).
    pub(crate) fn start(&mut self, mv: Move, sides: &mut [CaptureSide]) {
        debug_assert_eq!(self.table.queue_of_bucket(mv.bucket), mv.from);
        if self.in_transit[mv.bucket].is_some() || mv.from == mv.to {
            return;
        }
        let fence = sides[usize::from(mv.from)].fence();
        self.in_transit[mv.bucket] = Some(self.moving.len());
        self.moving.push(Transit { mv, fence, parked: VecDeque::new(), ticket: None });
        self.stats.moves_started += 1;
    }

    /// Give up every move in progress (the capture is stopping and the old
    /// queues will not finish): parked packets are counted as capture drops of
    /// the queues they were going to, and the table keeps the old queues.
    pub(crate) fn abandon(&mut self, sides: &mut [CaptureSide]) {
        for t in self.moving.drain(..) {
            if let Some(ticket) = &t.ticket {
                ticket.cancel();
            }
            for p in &t.parked {
                sides[usize::from(t.mv.to)].drop_capture(p.wire_len);
                self.stats.park_drops += 1;
            }
            self.in_transit[t.mv.bucket] = None;
        }
        self.lot.clear();
    }

    /// At the end of a capture: hand over the moves in progress as their old
    /// queues' workers (still running) pass the fences, until none is left or
    /// `give_up` says to stop waiting; the rest are [abandoned](Self::abandon).
    pub(crate) fn finish(&mut self, sides: &mut [CaptureSide], mut give_up: impl FnMut() -> bool) {
        loop {
            sides.iter_mut().for_each(CaptureSide::flush);
            self.hand_over(sides);
            if !self.busy() {
                return;
            }
            if give_up() {
                self.abandon(sides);
                return;
            }
            if let Some(s) = sides.first_mut() {
                s.wait_recycled(STEER_TICK);
            }
        }
    }

    /// Hand over every move whose fence is passed, in the order they started.
    pub(crate) fn hand_over(&mut self, sides: &mut [CaptureSide]) {
        let mut k = 0;
        while k < self.moving.len() {
            let t = &mut self.moving[k];
            if !sides[usize::from(t.mv.from)].passed(&t.fence) {
                k += 1;
                continue;
            }
            if let Some(h) = &self.handovers {
                let bucket = FlowBucket::new(t.mv.bucket, self.table.len());
                let ticket = t.ticket.get_or_insert_with(|| h.request(usize::from(t.mv.from), usize::from(t.mv.to), bucket));
                if !ticket.done() {
                    k += 1;
                    continue;
                }
            }
            let t = self.moving.remove(k);
            let to = &mut sides[usize::from(t.mv.to)];
            for p in &t.parked {
                if let Err(NoCell) = to.push_copy(self.lot.bytes(p), p.wire_len, p.ts_ns) {
                    to.drop_capture(p.wire_len);
                    self.stats.handover_drops += 1;
                }
            }
            self.table.assign(t.mv.bucket, t.mv.to);
            self.in_transit[t.mv.bucket] = None;
            self.stats.buckets_moved += 1;
        }
        // Indices into `moving` shifted: renumber, and free the parking area when unused.
        for (i, t) in self.moving.iter().enumerate() {
            self.in_transit[t.mv.bucket] = Some(i);
        }
        if self.moving.iter().all(|t| t.parked.is_empty()) {
            self.lot.clear();
        }
    }
}
