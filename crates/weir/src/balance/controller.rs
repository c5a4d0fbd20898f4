//! The rebalancing controller: from per-tick samples of every queue to bucket
//! moves. Pure and clocked by its caller, so the live engine and the simulator
//! run the same decisions, and a test can drive it tick by tick.
//!
//! A queue is *overloaded* in a tick when it received more than its worker
//! finished and its backlog grew or it dropped packets (a full pool stops
//! growing: it drops). Only after [`ControllerConfig::persist_ticks`]
//! overloaded ticks in a row does the controller act: it moves the queue's
//! busiest buckets, largest first (fewest buckets, so fewest flows, for the
//! load), each to the queue with the most spare capacity that can take it whole,
//! until the queue's expected arrivals fit under [`ControllerConfig::headroom`]
//! of its capacity. A bucket too large for any spare capacity stays. After
//! acting on a queue the controller leaves it alone for
//! [`ControllerConfig::cooldown_ticks`], so the next decision sees the effect of
//! this one.
//!
//! Capacity is learned, not configured: in a tick where a queue's backlog was
//! at least [`ControllerConfig::busy_backlog`] at both ends, its worker was busy
//! throughout, and what it finished is its capacity for that tick. (A backlog of
//! a few packets at both ends says nothing: a worker at 80% load has one most of
//! the time.) Workers are assumed alike (one core each), so
//! a queue never seen saturated is credited with the mean of those that were.

use crate::rss::IndirectionTable;

/// Tuning of the controller, checked by [`ControllerConfig::new`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// Overloaded ticks in a row before a queue's buckets move.
    pub persist_ticks: u32,
    /// Ticks a queue is left alone after buckets moved off it.
    pub cooldown_ticks: u32,
    /// Fraction of a worker's capacity the controller plans to fill, below 1 so
    /// that a backlog drains.
    pub headroom: f64,
    /// Packets waiting at both ends of a tick for it to count as busy throughout.
    pub busy_backlog: u64,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        // With 10 ms ticks: 50 ms of sustained overload, longer than any burst a
        // default pool absorbs at line rate, and 50 ms to see a move's effect.
        // 1024 packets: four default chunks, more than a worker below capacity queues.
        ControllerConfig { persist_ticks: 5, cooldown_ticks: 5, headroom: 0.9, busy_backlog: 1024 }
    }
}

impl ControllerConfig {
    pub fn new(persist_ticks: u32, cooldown_ticks: u32, headroom: f64) -> Result<Self, String> {
        if persist_ticks == 0 {
            return Err("rebalance: persist ticks must be at least 1".into());
        }
        if !(headroom > 0.0 && headroom <= 1.0) {
            return Err(format!("rebalance: headroom {headroom} must be in (0, 1]"));
        }
        Ok(ControllerConfig { persist_ticks, cooldown_ticks, headroom, ..ControllerConfig::default() })
    }
}

/// One queue over one tick.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueSample {
    /// Packets steered to the queue.
    pub arrivals: u64,
    /// Packets its worker(s) finished.
    pub served: u64,
    /// Packets waiting or in progress at the end of the tick.
    pub backlog: u64,
    /// Packets the queue dropped in the tick.
    pub dropped: u64,
}

/// Move `bucket` from queue `from` to queue `to`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub bucket: usize,
    pub from: u16,
    pub to: u16,
}

/// What the controller remembers between ticks.
#[derive(Clone, Debug)]
pub struct Controller {
    cfg: ControllerConfig,
    overloaded_for: Vec<u32>,
    cooldown: Vec<u32>,
    prev_backlog: Vec<u64>,
    /// Packets per tick each worker finishes when busy throughout, smoothed.
    capacity: Vec<Option<f64>>,
}

impl Controller {
    pub fn new(queues: usize, cfg: ControllerConfig) -> Self {
        Controller {
            cfg,
            overloaded_for: vec![0; queues],
            cooldown: vec![0; queues],
            prev_backlog: vec![0; queues],
            capacity: vec![None; queues],
        }
    }

    /// The learned capacity of each queue, in packets per tick.
    pub fn capacity(&self) -> &[Option<f64>] {
        &self.capacity
    }

    /// Take one tick's samples (one per queue) and the packets each bucket
    /// received in it; return the moves to make. `movable(b)` is false for a
    /// bucket that is still moving.
    pub fn tick(&mut self, samples: &[QueueSample], bucket_arrivals: &[u32], table: &IndirectionTable, movable: impl Fn(usize) -> bool) -> Vec<Move> {
        let n = self.capacity.len();
        debug_assert_eq!(samples.len(), n);
        debug_assert_eq!(bucket_arrivals.len(), table.len());
        for (q, s) in samples.iter().enumerate() {
            if self.prev_backlog[q] >= self.cfg.busy_backlog && s.backlog >= self.cfg.busy_backlog && s.served > 0 {
                let seen = s.served as f64;
                self.capacity[q] = Some(self.capacity[q].map_or(seen, |c| 0.75 * c + 0.25 * seen));
            }
            let overloaded = s.arrivals > s.served && (s.backlog > self.prev_backlog[q] || s.dropped > 0);
            self.overloaded_for[q] = if overloaded { self.overloaded_for[q] + 1 } else { 0 };
            self.prev_backlog[q] = s.backlog;
        }
        let known: Vec<f64> = self.capacity.iter().flatten().copied().collect();
        let mut moves = Vec::new();
        if known.is_empty() {
            self.cool_down();
            return moves;
        }
        let mean = known.iter().sum::<f64>() / known.len() as f64;
        let cap = |q: usize| self.capacity[q].unwrap_or(mean) * self.cfg.headroom;
        // Spare capacity of every queue that is not itself overloaded.
        let mut spare: Vec<f64> = (0..n)
            .map(|q| if self.overloaded_for[q] == 0 { cap(q) - samples[q].arrivals as f64 } else { f64::NEG_INFINITY })
            .collect();
        for (hot, sample) in samples.iter().enumerate() {
            if self.overloaded_for[hot] < self.cfg.persist_ticks || self.cooldown[hot] > 0 {
                continue;
            }
            let mut need = sample.arrivals as f64 - cap(hot);
            let mut buckets: Vec<(u32, usize)> = (0..table.len())
                .filter(|&b| usize::from(table.queue_of_bucket(b)) == hot && bucket_arrivals[b] > 0 && movable(b))
                .map(|b| (bucket_arrivals[b], b))
                .collect();
            // Largest first; ties by bucket number, for determinism.
            buckets.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            for (rate, bucket) in buckets {
                if need <= 0.0 {
                    break;
                }
                let Some(to) = (0..n).filter(|&x| x != hot).max_by(|&a, &b| spare[a].total_cmp(&spare[b]).then(b.cmp(&a))) else { break };
                if f64::from(rate) > spare[to] {
                    continue;
                }
                spare[to] -= f64::from(rate);
                need -= f64::from(rate);
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

    #[test]
    fn config_is_checked() {
        assert!(ControllerConfig::new(0, 1, 0.9).is_err());
        assert!(ControllerConfig::new(1, 1, 1.5).is_err());
        assert!(ControllerConfig::new(3, 0, 1.0).is_ok());
    }
}
