//! Flow-consistent rebalancing of an AF_XDP capture: the bucket table is in
//! the capture threads.
//!
//! An XDP program can hand a packet only to the socket of the RX queue it
//! arrived on (the kernel refuses any other), so buckets are steered in user
//! space, after the NIC's RSS chose the RX queue. Each queue's capture thread
//! has a table of [`BUCKETS`] entries for the packets *it* receives, and every
//! entry starts on itself: until something moves, nothing crosses threads. The
//! controller sees one table of n × [`BUCKETS`] entries (entry r·BUCKETS + b is
//! bucket b of RX queue r), so it moves exactly the traffic that overloads a
//! queue, and a bucket's packets only ever come from one thread, its *steerer*.
//!
//! The capture's sockets share one UMEM ([`UmemOf::Group`](super::xsk::UmemOf)),
//! so a packet steered to another queue is handed over by its frame address,
//! through a single-producer ring per pair of queues ([`Handed`]): no copy. The
//! pool that takes it holds the frame until its chunk is recycled, and then
//! sends the frame back to the queue whose fill ring it came from, through
//! another ring per pair, so no queue runs short of frames because others hold
//! them.
//!
//! A move of entry k (steered by r) from q to q' follows the stages of
//! [`crate::balance::threaded`]:
//!
//! 1. **Parking** ends in r: at its next look at the moves, r points k at q',
//!    notes how many packets it had handed to q so far (the *cut*, when r ≠ q)
//!    and ends the stage. Every packet of k that r steered before that is in
//!    q's pool or in the ring from r to q below the cut; every later one goes to q'.
//! 2. **Fencing** (q): once q has taken packets from r's ring up to the cut, it
//!    fences its pool, and ends the stage when the fence is passed. No flow
//!    state is handed over here ([`ThreadTables::flow_bucket`] says why), so
//!    the stream layer refuses to rebalance an AF_XDP capture.
//! 3. **Fenced** (q'): q' has parked every packet of k it got (the frames, not
//!    copies), and pushes them into its pool in order.
//!
//! Why q' parks k's packets from the first: r ends the parking stage (release)
//! before it hands q' any packet of k; q' notes how much each incoming ring
//! holds (acquire) *before* it looks at the moves, and takes only that much, so
//! a packet of k it takes was handed after a stage change it has seen.
//!
//! When the capture stops, each queue keeps taking in what the others hand it
//! until all of them have stopped steering; packets it then has no cell for,
//! and packets parked for moves that cannot finish, are capture drops of it.
//! A packet whose ring to its queue is full (that queue's pool and ring are
//! both full) is a capture drop of that queue too.

use super::xsk::Xsk;
use crate::balance::threaded::{hand_over, BucketTable, Incoming, Rebalance, Transit, DONE, FENCED, FENCING, PARKING, TICK};
use crate::balance::SteeringStats;
use crate::capture::SourceError;
use crate::pool::{CaptureSide, Fence, FrameArena};
use crate::ring::{channel, Capacity, Consumer, Producer};
use crate::rss::{BucketCount, IndirectionTable, Rss};
use crate::{FlowBucket, LinkType};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub(crate) use crate::rss::BUCKETS;

/// Most queues one capture can rebalance: the controller's table must fit
/// [`BucketCount`].
pub(crate) const MAX_QUEUES: usize = (1 << 16) / BUCKETS;

/// A packet handed from the queue that received it to the queue its bucket is on.
#[derive(Copy, Clone, Debug)]
struct Handed {
    addr: u64,
    len: u32,
    wire_len: u32,
    ts_ns: u64,
    /// The entry of the controller's table.
    key: u32,
}

/// A packet this queue received, in its frame.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Received {
    pub(crate) addr: u64,
    /// Bytes captured.
    pub(crate) len: u32,
    pub(crate) wire_len: u32,
    pub(crate) ts_ns: u64,
}

/// The controller's view of the capture threads' tables, and what the threads
/// count for each other.
pub(crate) struct ThreadTables {
    queues: usize,
    /// Packets per entry, from the start; entry k is written only by its steerer.
    hits: Box<[AtomicU64]>,
    /// Per queue: packets steered to it that found its incoming ring full.
    lost: Box<[AtomicU64]>,
    /// Queues that have stopped steering.
    stopped: AtomicUsize,
}

impl ThreadTables {
    pub(crate) fn new(queues: usize) -> Self {
        ThreadTables {
            queues,
            hits: (0..queues * BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            lost: (0..queues).map(|_| AtomicU64::new(0)).collect(),
            stopped: AtomicUsize::new(0),
        }
    }

    fn entries(&self) -> usize {
        (self.queues * BUCKETS).next_power_of_two()
    }
}

impl BucketTable for ThreadTables {
    fn hits(&self) -> Result<Vec<u64>, SourceError> {
        // Relaxed: counts, each read on its own (see `Published` in the controller).
        let mut h: Vec<u64> = self.hits.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        h.resize(self.entries(), 0);
        Ok(h)
    }

    /// Entry r·BUCKETS + b on queue r. Entries past the last queue's (the table
    /// is a power of two) never see a packet, so never move.
    fn initial(&self, _queues: u16) -> IndirectionTable {
        let size = BucketCount::new(self.entries().max(BUCKETS)).unwrap_or(BucketCount::DEFAULT);
        let mut t = IndirectionTable::new(size, 1);
        for k in 0..self.queues * BUCKETS {
            t.assign(k, (k / BUCKETS) as u16);
        }
        t
    }

    /// Nothing: each steering thread switches its own entries and ends their
    /// parking stage.
    fn switch(&self, _moves: &[Arc<Transit>]) -> Result<(), SourceError> {
        Ok(())
    }

    /// None: entry r·BUCKETS + b is the flows of bucket b *that the NIC put on
    /// RX queue r*, and a worker holds flows of bucket b from several RX
    /// queues (its own, and any entry moved to it). Which RX queue a packet
    /// came in on is not in the packet, so a handler cannot give up exactly
    /// the entry's flows: it would give up flows that stay, split them.
    fn flow_bucket(&self, _entry: usize) -> Option<FlowBucket> {
        None
    }
}

pub(crate) type Shared = Rebalance<ThreadTables>;

/// One queue's ends of the rings between the capture's queues.
pub(crate) struct Links {
    /// Indexed by queue position; `None` at our own.
    to: Vec<Option<Producer<Handed>>>,
    from: Vec<Option<Consumer<Handed>>>,
    frames_to: Vec<Option<Producer<u64>>>,
    frames_from: Vec<Option<Consumer<u64>>>,
}

/// The rings between `n` queues: a packet ring holds a pool's worth of
/// packets (`cells`), and a frame ring every frame of a queue's share, so
/// giving a frame back never fails.
pub(crate) fn links(n: usize, cells: usize, frames: usize) -> Vec<Links> {
    let mut all: Vec<Links> = (0..n)
        .map(|_| Links {
            to: (0..n).map(|_| None).collect(),
            from: (0..n).map(|_| None).collect(),
            frames_to: (0..n).map(|_| None).collect(),
            frames_from: (0..n).map(|_| None).collect(),
        })
        .collect();
    for a in 0..n {
        for b in (0..n).filter(|&b| b != a) {
            let (p, c) = channel(Capacity::at_least(cells));
            all[a].to[b] = Some(p);
            all[b].from[a] = Some(c);
            let (p, c) = channel(Capacity::at_least(frames));
            all[a].frames_to[b] = Some(p);
            all[b].frames_from[a] = Some(c);
        }
    }
    all
}

/// A move out of this queue, and how far its fence is.
struct Outgoing {
    transit: Arc<Transit>,
    fence: Option<Fence>,
    /// The worker was asked for the entry's flow state (never, here: see
    /// [`ThreadTables::flow_bucket`]; kept so the stage ends as the shared
    /// protocol says).
    asked: bool,
}

/// Where a packet this queue received goes: its bucket here and its queue.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Place {
    bucket: u16,
    to: u16,
}

/// One queue's part in rebalancing, kept by its capture thread.
pub(crate) struct QueueRole {
    shared: Arc<Shared>,
    me: usize,
    links: Links,
    rss: Rss,
    /// Where each of our buckets goes (queue positions).
    route: Vec<u16>,
    /// Packets per bucket of ours, published to the controller every tick.
    hits: Vec<u64>,
    hits_published: Instant,
    /// Per queue: packets handed to it, and taken from it.
    handed: Vec<u64>,
    taken: Vec<u64>,
    /// Per entry of the controller's table: true while its packets park here.
    parking: Vec<bool>,
    incoming: Vec<Incoming<Handed>>,
    outgoing: Vec<Outgoing>,
    /// Frames parked here, and the most that may be (half a queue's share).
    parked: usize,
    park_limit: usize,
    parked_peak: usize,
    frame_size: usize,
    /// Bytes of one queue's share of the UMEM: a frame's home is its address over this.
    share_bytes: u64,
    /// Scratch lists, kept so the capture loop does not allocate.
    frames_back: Vec<u64>,
    ready: Vec<usize>,
    lost_seen: u64,
    stopped: bool,
    unpublished: SteeringStats,
}

impl QueueRole {
    pub(crate) fn new(shared: Arc<Shared>, me: usize, links: Links, frames: usize, frame_size: usize) -> QueueRole {
        shared.join();
        let n = shared.table().queues;
        QueueRole {
            shared,
            me,
            links,
            rss: Rss::new(LinkType::ETHERNET, 1),
            route: vec![me as u16; BUCKETS],
            hits: vec![0; BUCKETS],
            hits_published: Instant::now(),
            handed: vec![0; n],
            taken: vec![0; n],
            parking: vec![false; n * BUCKETS],
            incoming: Vec::new(),
            outgoing: Vec::new(),
            parked: 0,
            park_limit: frames / 2,
            parked_peak: 0,
            frame_size,
            share_bytes: (frames * frame_size) as u64,
            frames_back: Vec::new(),
            ready: Vec::with_capacity(n),
            lost_seen: 0,
            stopped: false,
            unpublished: SteeringStats::default(),
        }
    }

    /// Where a packet this queue received goes.
    #[inline]
    pub(crate) fn place(&self, data: &[u8]) -> Place {
        let bucket = self.rss.bucket(data);
        Place { bucket: bucket as u16, to: self.route[bucket] }
    }

    /// True if the packet goes into this queue's own pool now.
    #[inline]
    pub(crate) fn is_here(&self, p: Place) -> bool {
        usize::from(p.to) == self.me && !self.parking[self.me * BUCKETS + usize::from(p.bucket)]
    }

    /// Count a packet that took a cell here. Counted then, not when placed: a
    /// packet left on the RX ring for want of a cell is placed again later.
    #[inline]
    pub(crate) fn took_cell(&mut self, p: Place) {
        self.hits[usize::from(p.bucket)] += 1;
    }

    /// Send a packet that is not [`is_here`](Self::is_here) on: parked here, or
    /// handed to its queue.
    #[inline]
    pub(crate) fn send(&mut self, p: Place, r: Received, xsk: &mut Xsk, side: &mut CaptureSide) {
        self.hits[usize::from(p.bucket)] += 1;
        let key = self.me * BUCKETS + usize::from(p.bucket);
        let (addr, wire_len) = (r.addr, r.wire_len);
        let h = Handed { addr, len: r.len, wire_len, ts_ns: r.ts_ns, key: key as u32 };
        let to = usize::from(p.to);
        if to == self.me {
            self.park(h, xsk, side);
            return;
        }
        let Some(ring) = self.links.to[to].as_mut() else {
            debug_assert!(false, "no ring from queue {} to {to}", self.me);
            side.drop_capture(wire_len);
            xsk.free_frame(addr);
            return;
        };
        match ring.push(h) {
            Ok(()) => self.handed[to] += 1,
            Err(h) => {
                // Relaxed: a count, added by its queue at its next sync.
                self.shared.table().lost[to].fetch_add(1, Ordering::Relaxed);
                xsk.free_frame(h.addr);
            }
        }
    }

    fn park(&mut self, h: Handed, xsk: &mut Xsk, side: &mut CaptureSide) {
        let inc = self.incoming.iter_mut().find(|i| i.transit.mv.bucket == h.key as usize);
        match inc {
            Some(inc) if self.parked < self.park_limit => {
                inc.parked.push_back(h);
                self.parked += 1;
                self.parked_peak = self.parked_peak.max(self.parked);
                self.unpublished.parked += 1;
            }
            _ => {
                debug_assert!(self.parking[h.key as usize], "entry {} parks with no move in", h.key);
                side.drop_capture(h.wire_len);
                self.unpublished.park_drops += 1;
                self.give_frame(h.addr, xsk);
            }
        }
    }

    /// A frame is free again: to our fill ring if it is ours, or back to its queue.
    fn give_frame(&mut self, addr: u64, xsk: &mut Xsk) {
        let home = (addr / self.share_bytes) as usize;
        match self.links.frames_to.get_mut(home).and_then(Option::as_mut) {
            // The ring holds a whole share, so it is never full; if it were, the frame
            // would serve our fill ring as well as its own (the UMEM is one).
            Some(ring) => {
                if let Err(a) = ring.push(addr) {
                    xsk.free_frame(a);
                }
            }
            None => xsk.free_frame(addr),
        }
    }

    /// Send the frames of recycled chunks home (ours to our free list), take in
    /// ours that others gave back, and top the fill ring up.
    pub(crate) fn refill(&mut self, xsk: &mut Xsk, side: &mut CaptureSide) {
        let mut back = std::mem::take(&mut self.frames_back);
        side.take_frames(&mut back);
        for addr in back.drain(..) {
            self.give_frame(addr, xsk);
        }
        for ring in self.links.frames_from.iter_mut().flatten() {
            while let Some(addr) = ring.pop() {
                back.push(addr);
            }
        }
        xsk.refill_with(&mut back);
        self.frames_back = back;
    }

    /// Publish this queue's figures, do its part of every move, and take in
    /// what the other queues handed it. Call between batches.
    pub(crate) fn sync(&mut self, xsk: &mut Xsk, umem: &Arc<FrameArena>, side: &mut CaptureSide) {
        // How much each ring holds, before looking at the moves (see the module doc).
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.links.from.iter().map(|r| r.as_ref().map_or(0, Consumer::len)));
        if self.shared.any_moves() {
            self.see_moves();
        }
        self.fence_outgoing(side);
        self.hand_over(umem, side);
        self.take_in(&ready, xsk, umem, side);
        self.ready = ready;
        let lost = self.shared.table().lost[self.me].load(Ordering::Relaxed);
        if lost > self.lost_seen {
            side.add_capture_drops(lost - self.lost_seen);
            self.lost_seen = lost;
        }
        let waiting = side.backlog_packets()
            + side.attached_packets() as u64
            + self.parked as u64
            + self.links.from.iter().flatten().map(|r| r.len() as u64).sum::<u64>();
        self.shared.publish(self.me, side, waiting);
        // What parking holds is frames: their memory is the peak's bytes.
        self.unpublished.parked_bytes_peak = self.parked_peak * self.frame_size;
        if self.hits_published.elapsed() >= TICK {
            self.hits_published = Instant::now();
            let shared = &self.shared.table().hits[self.me * BUCKETS..(self.me + 1) * BUCKETS];
            for (c, &h) in shared.iter().zip(&self.hits) {
                // Relaxed: see `ThreadTables::hits`; only this thread writes these.
                c.store(h, Ordering::Relaxed);
            }
        }
        self.shared.count(&std::mem::take(&mut self.unpublished));
    }

    fn see_moves(&mut self) {
        let shared = Arc::clone(&self.shared);
        for t in shared.moves().iter() {
            let (stage, key) = (t.stage(), t.mv.bucket);
            let (from, to) = (usize::from(t.mv.from), usize::from(t.mv.to));
            if to == self.me && stage < DONE && !self.incoming.iter().any(|i| Arc::ptr_eq(&i.transit, t)) {
                self.parking[key] = true;
                self.incoming.push(Incoming { transit: Arc::clone(t), parked: VecDeque::new() });
            }
            if stage == PARKING && key / BUCKETS == self.me {
                self.route[key % BUCKETS] = to as u16;
                if from != self.me {
                    t.set_cut(self.handed[from]);
                }
                t.advance(FENCING);
            }
            if from == self.me && t.stage() == FENCING && !self.outgoing.iter().any(|o| Arc::ptr_eq(&o.transit, t)) {
                self.outgoing.push(Outgoing { transit: Arc::clone(t), fence: None, asked: false });
            }
        }
    }

    fn fence_outgoing(&mut self, side: &mut CaptureSide) {
        let me = self.me;
        let (taken, shared) = (&self.taken, &self.shared);
        self.outgoing.retain_mut(|o| {
            let steerer = o.transit.mv.bucket / BUCKETS;
            if o.fence.is_none() && (steerer == me || taken[steerer] >= o.transit.cut()) {
                o.fence = Some(side.fence());
            }
            let done = o.fence.as_ref().is_some_and(|f| side.passed(f)) && shared.exported(&o.transit, &mut o.asked);
            if done {
                o.transit.advance(FENCED);
            }
            !done
        });
    }

    fn hand_over(&mut self, umem: &Arc<FrameArena>, side: &mut CaptureSide) {
        let pushed = hand_over(&mut self.incoming, &mut self.parking, |h| {
            side.has_cell() && side.push_frame(umem, h.addr, h.len as usize, h.wire_len, h.ts_ns).is_ok()
        });
        self.parked -= pushed;
    }

    /// Take up to `ready[s]` packets from each queue s's ring: into the pool, or
    /// parked if their entry is moving here. Stops at a ring when no cell is free.
    fn take_in(&mut self, ready: &[usize], xsk: &mut Xsk, umem: &Arc<FrameArena>, side: &mut CaptureSide) {
        for (s, &n) in ready.iter().enumerate() {
            for _ in 0..n {
                let Some(ring) = self.links.from[s].as_mut() else {
                    break;
                };
                let Some(key) = ring.peek().map(|h| h.key as usize) else {
                    break;
                };
                if !self.parking[key] && !side.has_cell() {
                    break;
                }
                let Some(h) = ring.pop() else { break };
                self.taken[s] += 1;
                if self.parking[key] {
                    self.park(h, xsk, side);
                } else if side.push_frame(umem, h.addr, h.len as usize, h.wire_len, h.ts_ns).is_err() {
                    side.drop_capture(h.wire_len);
                    self.give_frame(h.addr, xsk);
                }
            }
        }
    }

    /// The capture is ending: stop steering, keep taking in what the others
    /// hand over until they have all stopped too, then count what is left
    /// (without a cell, or parked for a move that cannot finish) as capture drops.
    pub(crate) fn end(&mut self, xsk: &mut Xsk, umem: &Arc<FrameArena>, side: &mut CaptureSide) {
        self.stop_steering();
        let n = self.shared.table().queues;
        loop {
            // Acquire: pairs with the AcqRel increments, so what a stopped queue
            // handed us is in its ring when we see its count.
            let all = self.shared.table().stopped.load(Ordering::Acquire) == n;
            side.flush();
            side.reclaim();
            self.sync(xsk, umem, side);
            if all {
                break;
            }
            side.wait_recycled(TICK / 10);
        }
        for s in 0..n {
            while let Some(h) = self.links.from[s].as_mut().and_then(Consumer::pop) {
                side.drop_capture(h.wire_len);
            }
        }
        for inc in self.incoming.drain(..) {
            inc.transit.abandon();
            for h in &inc.parked {
                side.drop_capture(h.wire_len);
                self.unpublished.park_drops += 1;
            }
            self.parking[inc.transit.mv.bucket] = false;
        }
        self.parked = 0;
        self.shared.count(&std::mem::take(&mut self.unpublished));
    }

    fn stop_steering(&mut self) {
        if !self.stopped {
            self.stopped = true;
            self.shared.table().stopped.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Drop for QueueRole {
    fn drop(&mut self) {
        // A unit that failed never ran `end`: the others must not wait for it.
        self.stop_steering();
        self.shared.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller's table covers every queue's buckets, each on its own
    /// queue, padded to a power of two with entries no packet can reach.
    #[test]
    fn each_queue_starts_with_its_own_buckets() {
        for n in [1usize, 2, 3, 6] {
            let t = ThreadTables::new(n);
            let table = t.initial(n as u16);
            let hits = t.hits().unwrap();
            assert_eq!(table.len(), (n * BUCKETS).next_power_of_two().max(BUCKETS), "{n} queues");
            assert_eq!(hits.len(), table.len(), "{n} queues: one count per entry");
            for k in 0..n * BUCKETS {
                assert_eq!(usize::from(table.queue_of_bucket(k)), k / BUCKETS, "{n} queues, entry {k}");
            }
            assert!(hits.iter().all(|&h| h == 0));
        }
    }

    /// Every pair of queues has a packet ring and a frame ring each way, and
    /// none from a queue to itself.
    #[test]
    fn links_join_every_pair_both_ways() {
        let mut all = links(3, 100, 300);
        for (a, l) in all.iter().enumerate() {
            for b in 0..3 {
                assert_eq!(l.to[b].is_some(), a != b);
                assert_eq!(l.from[b].is_some(), a != b);
                assert_eq!(l.frames_to[b].as_ref().map(|p| p.capacity() >= 300), (a != b).then_some(true));
            }
        }
        let h = Handed { addr: 4096, len: 60, wire_len: 60, ts_ns: 1, key: 7 };
        all[0].to[2].as_mut().unwrap().push(h).unwrap();
        assert_eq!(all[2].from[0].as_mut().unwrap().pop().map(|h| (h.addr, h.key)), Some((4096, 7)));
        assert!(all[2].from[1].as_mut().unwrap().pop().is_none());
    }
}
