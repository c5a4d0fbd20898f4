//! weir's engine in virtual time: real pools, buddy links and steering, with
//! the model deciding only *when* things happen.
//!
//! Events, earliest first (ties: cores before flush timers before the
//! controller tick, lower index first, so a run is deterministic):
//!
//! - an arrival: routed by RSS (through the steering in rebalance mode) and
//!   `push_copy`'d into its queue's capture side; a full chunk is published at
//!   once; no cell is a capture drop, counted by the pool;
//! - a core starting packet `i` of the chunk it holds (`t0 + i·cost`), which is
//!   when the order check sees it, and finishing the chunk (`t0 + count·cost`),
//!   when it is recycled and the core takes the next chunk waiting for it;
//! - a flush timer: a partly filled chunk is published `flush_ns` after its
//!   first packet, unless the queue's worker still has chunks waiting (then the
//!   timer starts again: the worker would not get to it sooner, and a chunk
//!   published with a few packets spends all its cells on them);
//! - a controller tick every `tick_ns` in rebalance mode, while work remains.

use super::order::OrderCheck;
use super::{SimConfig, SimError, SimReport, Workload};
use crate::balance::BalanceMode;
use crate::balance::{Route, Steering};
use crate::pool::{link_buddies, work_queue_pair, CaptureSide, ChunkToken, PoolConfig, WorkerSide};
use crate::rss::Rss;
use crate::stats::QueueCounters;
use crate::wire::flow::FlowTuple;
use crate::{LinkType, QueueId};
use std::sync::Arc;

/// What a core is doing.
#[derive(Copy, Clone, Default)]
struct Core {
    held: Option<ChunkToken>,
    t0: u64,
    next: usize,
    count: usize,
}

#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Core(usize),
    Flush(usize),
    Tick,
}

struct Model<'c> {
    cfg: &'c SimConfig,
    link: LinkType,
    rss: Rss,
    cells: usize,
    counters: Vec<Arc<QueueCounters>>,
    caps: Vec<CaptureSide>,
    works: Vec<WorkerSide>,
    cores: Vec<Core>,
    /// Arrival time of the first packet of each queue's attached chunk.
    first_at: Vec<Option<u64>>,
    steering: Option<Steering>,
    next_tick: u64,
    order: OrderCheck,
    arrived: u64,
    per_queue: Vec<u64>,
    end_ns: u64,
}

pub(super) fn run(cfg: &SimConfig, pool: &PoolConfig, mode: BalanceMode, w: &mut dyn Workload) -> Result<SimReport, SimError> {
    let n = usize::from(cfg.queues);
    let counters: Vec<Arc<QueueCounters>> = (0..n).map(|q| Arc::new(QueueCounters::new(QueueId(q as u16)))).collect();
    let pairs = counters
        .iter()
        .enumerate()
        .map(|(q, c)| work_queue_pair(QueueId(q as u16), pool, Arc::clone(c), None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(SimError::Alloc)?;
    let (mut caps, mut works): (Vec<CaptureSide>, Vec<WorkerSide>) = pairs.into_iter().unzip();
    let rss = Rss::new(w.link_type(), cfg.queues);
    if let Some(t) = mode.offload().filter(|_| n > 1) {
        link_buddies(&mut caps, &mut works, t);
    }
    let steering = mode.controller().map(|c| Steering::new(rss.table().clone(), n, c));
    let mut m = Model {
        cfg,
        link: w.link_type(),
        rss,
        cells: pool.cells().get(),
        counters,
        caps,
        works,
        cores: vec![Core::default(); n],
        first_at: vec![None; n],
        steering,
        next_tick: cfg.tick_ns,
        order: OrderCheck::default(),
        arrived: 0,
        per_queue: vec![0; n],
        end_ns: 0,
    };
    while let Some(a) = w.next() {
        m.advance_to(a.t_ns);
        m.arrive(a.t_ns, a.data, a.wire_len);
    }
    m.advance_to(u64::MAX);
    Ok(m.report())
}

impl Model<'_> {
    fn arrive(&mut self, now: u64, data: &[u8], wire_len: u32) {
        let seq = self.arrived;
        self.arrived += 1;
        let q = match &mut self.steering {
            Some(s) => {
                let bucket = self.rss.bucket(data);
                match s.route(bucket) {
                    Route::Queue(q) => q,
                    Route::Park => {
                        s.park(bucket, data, wire_len, seq, &mut self.caps);
                        return;
                    }
                }
            }
            None if self.caps.len() > 1 => usize::from(self.rss.queue(data).0),
            None => 0,
        };
        self.per_queue[q] += 1;
        if self.caps[q].push_copy(data, wire_len, seq).is_err() {
            self.caps[q].drop_capture(wire_len);
        }
        self.after_push(q, now);
        self.start_idle(now);
    }

    /// Keep the flush timer of queue `q` right and publish a full chunk at once.
    fn after_push(&mut self, q: usize, now: u64) {
        match self.caps[q].attached_packets() {
            0 => self.first_at[q] = None,
            k if k >= self.cells => {
                self.caps[q].flush();
                self.first_at[q] = None;
            }
            _ => {
                self.first_at[q].get_or_insert(now);
            }
        }
    }

    /// Every idle core takes a chunk if one waits for it.
    fn start_idle(&mut self, now: u64) {
        for w in 0..self.cores.len() {
            if self.cores[w].held.is_none() {
                self.take(w, now);
            }
        }
    }

    fn take(&mut self, w: usize, now: u64) {
        let Some(token) = self.works[w].take_raw() else { return };
        let count = self.works[w].raw_chunk(token).map_or(0, |c| c.len());
        self.cores[w] = Core { held: Some(token), t0: now, next: 0, count };
    }

    /// True while anything is captured, held or moving.
    fn busy(&self) -> bool {
        // A published chunk is taken by an idle core at once, so chunks can only
        // wait while some core is busy.
        self.cores.iter().any(|c| c.held.is_some())
            || self.first_at.iter().any(Option::is_some)
            || self.steering.as_ref().is_some_and(Steering::busy)
    }

    fn next_event(&self) -> Option<(u64, Event)> {
        let cost = self.cfg.cost_ns;
        let cores = self.cores.iter().enumerate().filter(|(_, c)| c.held.is_some()).map(|(w, c)| {
            let at = c.t0 + cost * c.next.min(c.count) as u64;
            (at, Event::Core(w))
        });
        let flushes =
            self.first_at.iter().enumerate().filter_map(|(q, f)| f.map(|t| (t.saturating_add(self.cfg.flush_ns), Event::Flush(q))));
        let tick = (self.steering.is_some() && self.busy()).then_some((self.next_tick, Event::Tick));
        cores.chain(flushes).chain(tick).min()
    }

    fn advance_to(&mut self, t: u64) {
        while let Some((at, ev)) = self.next_event() {
            if at > t {
                break;
            }
            match ev {
                Event::Core(w) => self.core_step(w, at),
                Event::Flush(q) if self.caps[q].waiting_chunks() > 0 => {
                    // Its worker has chunks to get on with: publishing this one
                    // now would not start it sooner, and would spend a whole
                    // chunk's cells on a few packets. Look again later.
                    self.first_at[q] = Some(at);
                }
                Event::Flush(q) => {
                    self.caps[q].flush();
                    self.first_at[q] = None;
                    self.start_idle(at);
                }
                Event::Tick => {
                    if let Some(s) = &mut self.steering {
                        s.tick(&mut self.caps);
                    }
                    self.next_tick = at + self.cfg.tick_ns;
                    for q in 0..self.caps.len() {
                        self.after_push(q, at);
                    }
                    self.start_idle(at);
                }
            }
        }
    }

    fn core_step(&mut self, w: usize, at: u64) {
        let core = self.cores[w];
        let Some(token) = core.held else { return };
        if core.next < core.count {
            if let Ok(chunk) = self.works[w].raw_chunk(token) {
                if let Some(p) = chunk.get(core.next) {
                    if let Some(flow) = FlowTuple::parse(self.link, p.data()) {
                        self.order.see(flow.canonical(), p.ts_ns(), w as u16);
                    }
                }
            }
            self.cores[w].next += 1;
            return;
        }
        let recycled = self.works[w].recycle_raw(token);
        debug_assert!(recycled.is_ok(), "the model recycles each chunk once: {recycled:?}");
        self.cores[w].held = None;
        self.end_ns = self.end_ns.max(at);
        self.take(w, at);
        // The recycled chunk may free a cell a parked hand-over or a waiting queue needs.
        self.start_idle(at);
    }

    fn report(mut self) -> SimReport {
        for c in &mut self.caps {
            c.flush();
        }
        let mut r = SimReport { arrived: self.arrived, per_queue: self.per_queue, end_ns: self.end_ns, ..SimReport::default() };
        for c in &self.counters {
            let s = c.read();
            r.delivered += s.delivered;
            r.capture_drops += s.capture_drops;
            r.delivery_drops += s.delivery_drops;
            r.offloaded += s.offloaded;
            r.per_queue_drops.push(s.capture_drops + s.delivery_drops);
            debug_assert!(s.balanced() && s.in_flight == 0, "queue {} unbalanced or unfinished: {s:?}", s.queue.0);
        }
        if let Some(s) = &self.steering {
            let st = s.stats();
            r.buckets_moved = st.buckets_moved;
            r.steering_drops = st.park_drops + st.handover_drops;
        }
        r.order = self.order.stats();
        r
    }
}
