//! The rebalancing controller: from per-tick samples of every queue to bucket
//! moves. Pure and clocked by its caller, so the live engine and the simulator
//! run the same decisions, and a test can drive it tick by tick.
//!
//! A queue is *overloaded* in a tick when packets wait for its worker (at least
//! [`ControllerConfig::busy_backlog`]) or it dropped some, and it received more
//! than its worker finishes. What a worker finishes is an average over ticks
//! (exponentially decayed, about the last twenty): workers give back whole
//! chunks, so at a few thousand packets per second a tick sees one chunk or
//! none, and the raw count would break every streak. A tick's arrivals are
//! taken as they are, so a burst stops counting the tick it ends. Only after
//! [`ControllerConfig::persist_ticks`] overloaded ticks in a row does the
//! controller act: it moves the queue's busiest buckets (by their average
//! rate), largest first (fewest buckets, so fewest flows, for the load), each
//! to the queue with the most spare capacity that can take it whole, until the
//! queue's load (the sum of its buckets' rates) fits under
//! [`ControllerConfig::headroom`] of its capacity. A bucket too large for any spare capacity stays. After
//! acting on a queue the controller leaves it alone for
//! [`ControllerConfig::cooldown_ticks`], so the next decision sees the effect of
//! this one.
//!
//! Capacity is learned, not configured: in a tick where a queue's backlog was
//! at least [`ControllerConfig::busy_backlog`] at both ends, its worker was busy
//! throughout, and what it finished (averaged the same way) is its capacity.
//! (A backlog of a few packets at both ends says nothing: a worker at 80% load
//! has one most of the time.) Workers are assumed alike (one core each), so
//! a queue never seen saturated is credited with the mean of those that were.

use crate::rss::IndirectionTable;

/// Tuning of the rebalancing controller: how long an overload must last before
/// buckets move, how long a queue is left alone after, and how full the
/// controller fills a worker. Only the default is offered.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// Overloaded ticks in a row before a queue's buckets move.
    persist_ticks: u32,
    /// Ticks a queue is left alone after buckets moved off it.
    cooldown_ticks: u32,
    /// Fraction of a worker's capacity the controller plans to fill, below 1 so
    /// that a backlog drains.
    headroom: f64,
    /// Packets waiting at both ends of a tick for it to count as busy throughout.
    busy_backlog: u64,
    /// Tests: every this many ticks, move the busiest bucket to the next
    /// queue whatever the load, so moves happen without contriving one.
    #[cfg(test)]
    churn: Option<u32>,
}

impl ControllerConfig {
    /// Tests: move a bucket every `ticks` ticks (see `churn`).
    #[cfg(test)]
    pub(crate) fn churning(ticks: u32) -> ControllerConfig {
        ControllerConfig { churn: Some(ticks.max(1)), ..ControllerConfig::default() }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        // With 10 ms ticks: 50 ms of sustained overload, longer than any burst a
        // default pool absorbs at line rate, and 50 ms to see a move's effect.
        // 1024 packets: four default chunks, more than a worker below capacity queues.
        ControllerConfig {
            persist_ticks: 5,
            cooldown_ticks: 5,
            headroom: 0.9,
            busy_backlog: 1024,
            #[cfg(test)]
            churn: None,
        }
    }
}

/// One queue over one tick.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueSample {
    /// Packets steered to the queue.
    pub(crate) arrivals: u64,
    /// Packets its worker(s) finished.
    pub(crate) served: u64,
    /// Packets waiting or in progress at the end of the tick.
    pub(crate) backlog: u64,
    /// Packets the queue dropped in the tick.
    pub(crate) dropped: u64,
}

/// Move `bucket` from queue `from` to queue `to`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub(crate) bucket: usize,
    pub(crate) from: u16,
    pub(crate) to: u16,
}

/// What the controller remembers between ticks.
#[derive(Clone, Debug)]
pub(crate) struct Controller {
    cfg: ControllerConfig,
    overloaded_for: Vec<u32>,
    cooldown: Vec<u32>,
    prev_backlog: Vec<u64>,
    /// Packets per tick each worker finished.
    served: Vec<Average>,
    /// Packets per tick each worker finishes when busy throughout.
    capacity: Vec<Average>,
    /// Packets per tick each bucket received; a queue's load is the sum over
    /// the buckets the table gives it, so a move shifts load at once.
    bucket_rate: Vec<f64>,
    /// The weight `bucket_rate`'s sums carry (all buckets share it).
    bucket_weight: f64,
    /// Ticks so far, for `churn`.
    #[cfg(test)]
    ticks: u32,
}

/// Weight of the newest tick in every average: the last twenty or so ticks
/// count. Workers give back whole chunks, so a tick sees a chunk's worth of
/// finished packets or none, and only an average over many chunks says what a
/// worker does.
const DECAY: f64 = 0.05;

/// An exponentially decayed average that is unbiased from its first sample
/// (the sum and its weight decay together).
#[derive(Copy, Clone, Debug, Default)]
struct Average {
    sum: f64,
    weight: f64,
}

impl Average {
    fn add(&mut self, x: f64) {
        self.sum = self.sum * (1.0 - DECAY) + x;
        self.weight = self.weight * (1.0 - DECAY) + 1.0;
    }

    fn get(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }
}

impl Controller {
    pub(crate) fn new(queues: usize, cfg: ControllerConfig) -> Self {
        Controller {
            cfg,
            overloaded_for: vec![0; queues],
            cooldown: vec![0; queues],
            prev_backlog: vec![0; queues],
            served: vec![Average::default(); queues],
            capacity: vec![Average::default(); queues],
            bucket_rate: Vec::new(),
            bucket_weight: 0.0,
            #[cfg(test)]
            ticks: 0,
        }
    }

    /// Take one tick's samples (one per queue) and the packets each bucket
    /// received in it; return the moves to make. `movable(b)` is false for a
    /// bucket that is still moving.
    pub(crate) fn tick(
        &mut self,
        samples: &[QueueSample],
        bucket_arrivals: &[u32],
        table: &IndirectionTable,
        movable: impl Fn(usize) -> bool,
    ) -> Vec<Move> {
        let n = self.capacity.len();
        debug_assert_eq!(samples.len(), n);
        debug_assert_eq!(bucket_arrivals.len(), table.len());
        self.bucket_rate.resize(table.len(), 0.0);
        for (r, &a) in self.bucket_rate.iter_mut().zip(bucket_arrivals) {
            *r = *r * (1.0 - DECAY) + f64::from(a);
        }
        self.bucket_weight = self.bucket_weight * (1.0 - DECAY) + 1.0;
        #[cfg(test)]
        if let Some(every) = self.cfg.churn {
            self.ticks += 1;
            let busiest = (0..table.len())
                .filter(|&b| self.bucket_rate[b] > 0.0 && movable(b))
                .max_by(|&a, &b| self.bucket_rate[a].total_cmp(&self.bucket_rate[b]).then(b.cmp(&a)));
            return match busiest.filter(|_| self.ticks % every == 0) {
                Some(bucket) => {
                    let from = table.queue_of_bucket(bucket);
                    vec![Move { bucket, from, to: (from + 1) % n as u16 }]
                }
                None => Vec::new(),
            };
        }
        for (q, s) in samples.iter().enumerate() {
            self.served[q].add(s.served as f64);
            let busy = s.backlog >= self.cfg.busy_backlog;
            if busy && self.prev_backlog[q] >= self.cfg.busy_backlog {
                self.capacity[q].add(s.served as f64);
            }
            let served = self.served[q].get().unwrap_or(0.0);
            let overloaded = (busy || s.dropped > 0) && s.arrivals as f64 > served;
            self.overloaded_for[q] = if overloaded { self.overloaded_for[q] + 1 } else { 0 };
            self.prev_backlog[q] = s.backlog;
        }
        let known: Vec<f64> = self.capacity.iter().filter_map(Average::get).collect();
        let mut moves = Vec::new();
        if known.is_empty() {
            self.cool_down();
            return moves;
        }
        let mean = known.iter().sum::<f64>() / known.len() as f64;
        let cap = |q: usize| self.capacity[q].get().unwrap_or(mean) * self.cfg.headroom;
        let rate = |b: usize| self.bucket_rate[b] / self.bucket_weight;
        let mut load = vec![0.0; n];
        for b in 0..table.len() {
            load[usize::from(table.queue_of_bucket(b))] += rate(b);
        }
        // Spare capacity of every queue that is not itself overloaded.
        let mut spare: Vec<f64> = (0..n).map(|q| if self.overloaded_for[q] == 0 { cap(q) - load[q] } else { f64::NEG_INFINITY }).collect();
        for (hot, &hot_load) in load.iter().enumerate() {
            if self.overloaded_for[hot] < self.cfg.persist_ticks || self.cooldown[hot] > 0 {
                continue;
            }
            let mut need = hot_load - cap(hot);
            let mut buckets: Vec<(f64, usize)> = (0..table.len())
                .filter(|&b| usize::from(table.queue_of_bucket(b)) == hot && rate(b) > 0.0 && movable(b))
                .map(|b| (rate(b), b))
                .collect();
            // Largest first; ties by bucket number, for determinism.
            buckets.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (r, bucket) in buckets {
                if need <= 0.0 {
                    break;
                }
                let Some(to) = (0..n).filter(|&x| x != hot).max_by(|&a, &b| spare[a].total_cmp(&spare[b]).then(b.cmp(&a))) else { break };
                if r > spare[to] {
                    continue;
                }
                spare[to] -= r;
                need -= r;
                moves.push(Move { bucket, from: hot as u16, to: to as u16 });
            }
            if moves.iter().any(|m| usize::from(m.from) == hot) {
                self.cooldown[hot] = self.cfg.cooldown_ticks + 1;
                self.overloaded_for[hot] = 0;
            }
        }
        self.cool_down();
        moves
    }

    fn cool_down(&mut self) {
        for c in &mut self.cooldown {
            *c = c.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rss::BucketCount;

    fn table(n: u16) -> IndirectionTable {
        IndirectionTable::new(BucketCount::DEFAULT, n)
    }

    /// Two queues; queue 0 gets `hot` packets per tick spread over its buckets,
    /// queue 1 gets `cold`; both workers finish up to `cap` per tick.
    fn run(ticks: u32, hot: u32, cold: u32, cap: u64, c: &mut Controller, t: &mut IndirectionTable) -> Vec<(u32, Move)> {
        let mut backlog = [0u64; 2];
        let mut all = Vec::new();
        for tick in 0..ticks {
            let mut per_bucket = vec![0u32; t.len()];
            let mut arrivals = [0u64; 2];
            // Bucket b (even = queue 0 initially) carries load proportional to its rank.
            for b in 0..t.len() {
                let load = (if b % 2 == 0 { hot } else { cold }) / 256;
                per_bucket[b] = load;
                arrivals[usize::from(t.queue_of_bucket(b))] += u64::from(load);
            }
            let mut samples = [QueueSample::default(); 2];
            for q in 0..2 {
                let work = backlog[q] + arrivals[q];
                let served = work.min(cap);
                backlog[q] = work - served;
                samples[q] = QueueSample { arrivals: arrivals[q], served, backlog: backlog[q], dropped: 0 };
            }
            for m in c.tick(&samples, &per_bucket, t, |_| true) {
                t.assign(m.bucket, m.to);
                all.push((tick, m));
            }
        }
        all
    }

    #[test]
    fn lasting_overload_moves_buckets_to_the_idle_queue() {
        let mut c = Controller::new(2, ControllerConfig::default());
        let mut t = table(2);
        // 3072 packets per tick in all fit two workers of 2000; queue 0's 2560 do not.
        let moves = run(40, 256 * 10, 256 * 2, 2000, &mut c, &mut t);
        assert!(!moves.is_empty(), "queue 0 at 2560/tick against 2000 must shed buckets");
        assert!(moves.iter().all(|(_, m)| m.from == 0 && m.to == 1));
        // Ticks count from 0: the first move may come in the persist_ticks-th overloaded tick.
        let first = moves[0].0 + 1;
        assert!(first >= ControllerConfig::default().persist_ticks, "moved in tick {first}: before the overload persisted");
        // Afterwards queue 0's arrivals fit its capacity.
        let on0: u32 = (0..t.len()).filter(|&b| t.queue_of_bucket(b) == 0).map(|b| if b % 2 == 0 { 10 } else { 2 }).sum();
        assert!(on0 <= 2000, "queue 0 still gets {on0} per tick");
    }

    #[test]
    fn a_short_burst_moves_nothing() {
        let mut c = Controller::new(2, ControllerConfig::default());
        let mut t = table(2);
        // Three ticks of overload, then calm: the backlog drains without a move.
        let mut moves = run(3, 256 * 15, 256 * 2, 2000, &mut c, &mut t);
        moves.extend(run(40, 256 * 2, 256 * 2, 2000, &mut c, &mut t));
        assert!(moves.is_empty(), "{moves:?}");
    }

    #[test]
    fn nothing_moves_when_every_queue_is_full() {
        let mut c = Controller::new(2, ControllerConfig::default());
        let mut t = table(2);
        let moves = run(40, 256 * 15, 256 * 15, 2000, &mut c, &mut t);
        assert!(moves.is_empty(), "{moves:?}");
    }
}
