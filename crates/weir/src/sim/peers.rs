//! The two engine types WireCAP measured against, modelled per queue with the
//! same arrivals, RSS and per-packet cost as weir's model. Each queue is one
//! FIFO (or two in tandem) served by one worker, so flow order is kept by
//! construction and not checked.

use super::{SimConfig, SimReport, Workload};
use crate::rss::Rss;
use std::collections::VecDeque;

/// A FIFO of packets (by the time each became ready) served by one core.
#[derive(Default)]
struct Stage {
    ready: VecDeque<u64>,
    free_at: u64,
}

impl Stage {
    /// When the head packet will be finished, if there is one.
    fn next_done(&self, cost: u64) -> Option<u64> {
        self.ready.front().map(|&r| r.max(self.free_at) + cost)
    }

    fn finish_head(&mut self, cost: u64) -> u64 {
        let done = self.next_done(cost).unwrap_or(self.free_at);
        self.ready.pop_front();
        self.free_at = done;
        done
    }
}

fn queue_of(rss: &Option<Rss>, data: &[u8]) -> usize {
    rss.as_ref().map_or(0, |r| usize::from(r.queue(data).0))
}

/// The descriptor ring is the buffer: a slot frees when the application is done.
pub(super) fn ring_only(cfg: &SimConfig, descriptors: usize, w: &mut dyn Workload) -> SimReport {
    let n = usize::from(cfg.queues);
    let rss = (n > 1).then(|| Rss::new(w.link_type(), cfg.queues));
    let mut app: Vec<Stage> = (0..n).map(|_| Stage::default()).collect();
    let mut r = SimReport { per_queue: vec![0; n], ..SimReport::default() };
    let c = cfg.cost_ns;
    while let Some(a) = w.next() {
        let q = queue_of(&rss, a.data);
        r.arrived += 1;
        r.per_queue[q] += 1;
        let s = &mut app[q];
        while s.next_done(c).is_some_and(|d| d <= a.t_ns) {
            s.finish_head(c);
            r.delivered += 1;
        }
        if s.ready.len() >= descriptors {
            r.capture_drops += 1;
        } else {
            s.ready.push_back(a.t_ns);
        }
    }
    for s in &mut app {
        while !s.ready.is_empty() {
            r.end_ns = r.end_ns.max(s.finish_head(c));
            r.delivered += 1;
        }
    }
    r
}

/// A ring of `descriptors` emptied by a copying core into a buffer of `slots`,
/// which the application empties.
pub(super) fn copy_buffer(cfg: &SimConfig, descriptors: usize, slots: usize, copy_ns: u64, w: &mut dyn Workload) -> SimReport {
    let n = usize::from(cfg.queues);
    let rss = (n > 1).then(|| Rss::new(w.link_type(), cfg.queues));
    let mut ring: Vec<Stage> = (0..n).map(|_| Stage::default()).collect();
    let mut buf: Vec<Stage> = (0..n).map(|_| Stage::default()).collect();
    let mut r = SimReport { per_queue: vec![0; n], ..SimReport::default() };
    let c = cfg.cost_ns;
    // Run queue q's two stages up to time t, events in time order (the
    // application first on a tie, so a slot it frees is there for the copy).
    let advance = |q: usize, t: u64, ring: &mut [Stage], buf: &mut [Stage], r: &mut SimReport| loop {
        let copy = ring[q].next_done(copy_ns).filter(|&d| d <= t);
        let done = buf[q].next_done(c).filter(|&d| d <= t);
        match (copy, done) {
            (_, Some(d)) if copy.is_none_or(|cp| d <= cp) => {
                buf[q].finish_head(c);
                r.delivered += 1;
                r.end_ns = r.end_ns.max(d);
            }
            (Some(cp), _) => {
                ring[q].finish_head(copy_ns);
                if buf[q].ready.len() >= slots {
                    r.delivery_drops += 1;
                } else {
                    buf[q].ready.push_back(cp);
                }
            }
            _ => break,
        }
    };
    while let Some(a) = w.next() {
        let q = queue_of(&rss, a.data);
        r.arrived += 1;
        r.per_queue[q] += 1;
        advance(q, a.t_ns, &mut ring, &mut buf, &mut r);
        if ring[q].ready.len() >= descriptors {
            r.capture_drops += 1;
        } else {
            ring[q].ready.push_back(a.t_ns);
        }
    }
    for q in 0..n {
        advance(q, u64::MAX, &mut ring, &mut buf, &mut r);
    }
    r
}
