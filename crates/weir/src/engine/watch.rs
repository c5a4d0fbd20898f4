//! What a running engine counts, for a reader on another thread: an
//! exporter's scrape (`weir --metrics`), a dashboard, a test.
//!
//! The contract: a [`Watch`] reads only what the engine's threads publish for
//! readers anyway, without a lock and without making any of them wait:
//! - the queues' counters, as [`Running::stats`](super::Running::stats) reads
//!   them (each queue consistent, [`QueueStats::balanced`](crate::stats::QueueStats::balanced) at every read);
//! - each pool's chunks in use, one load of each chunk's state word;
//! - the locality batches delivered, counted once per batch;
//! - what rebalancing moved, as the steering publishes it;
//! - the stream layers' counters, which each worker publishes when asked
//!   (`stream/board.rs`): the one read that waits, on the reader's thread,
//!   a bounded time, for the workers' answer.
//!
//! A watch stays valid after the run: it then reads the final counts (the
//! pools read as empty once the engine has freed them).

use crate::balance::{BalanceCounters, SteeringStats};
use crate::pool::{PoolGauge, PoolUsage};
use crate::stats::{BatchSizeCounts, BatchSizes, QueueCounters, Snapshot};
use crate::stream::{Board, StreamsNow};
use crate::QueueId;
use std::sync::Arc;
use std::time::Duration;

/// Where the locality batch sizes are counted.
#[derive(Clone)]
pub(crate) enum Batches {
    /// No locality buffering.
    Off,
    /// By each queue's worker, in its counters.
    PerQueue,
    /// By one reader over every queue.
    Reader(Arc<BatchSizes>),
}

/// A running engine's counters, readable from any thread: from
/// [`Running::watch`](super::Running::watch) or [`Reader::watch`](super::Reader::watch).
/// `Clone`, `Send` and `Sync`.
#[derive(Clone)]
pub struct Watch {
    pub(crate) source: String,
    pub(crate) counters: Vec<Arc<QueueCounters>>,
    pub(crate) pools: Vec<PoolGauge>,
    pub(crate) batches: Batches,
    pub(crate) balance: Option<Arc<BalanceCounters>>,
    pub(crate) streams: Vec<(QueueId, Arc<Board>)>,
}

impl Watch {
    /// The source's name, as [`SourceInfo::name`](super::SourceInfo::name) says it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Every queue's counters now.
    pub fn stats(&self) -> Snapshot {
        Snapshot { queues: self.counters.iter().map(|c| c.read()).collect() }
    }

    /// How full each queue's pool is now, in queue order.
    pub fn pools(&self) -> Vec<PoolUsage> {
        self.pools.iter().map(PoolGauge::read).collect()
    }

    /// The locality batches delivered so far, by size: one entry per queue
    /// (`Some(queue)`) when workers deliver, one for all queues (`None`)
    /// when one reader does; empty without locality buffering.
    pub fn locality(&self) -> Vec<(Option<QueueId>, BatchSizeCounts)> {
        match &self.batches {
            Batches::Off => Vec::new(),
            Batches::PerQueue => self.counters.iter().map(|c| (Some(c.queue()), c.batches())).collect(),
            Batches::Reader(sizes) => vec![(None, sizes.read())],
        }
    }

    /// What rebalancing did so far, when the engine moves buckets.
    pub fn balance(&self) -> Option<SteeringStats> {
        self.balance.as_ref().map(|b| b.read())
    }

    /// Each queue's stream layer, when the engine runs one: asks every worker
    /// for its counters and waits up to `wait` for the answers (a busy worker
    /// answers after its current run of packets, a quiet one within its idle
    /// tick, about 0.1 s); a worker that has not answered by then is read as
    /// it last published. Empty when no stream layer runs.
    pub fn streams(&self, wait: Duration) -> Vec<(QueueId, StreamsNow)> {
        let boards: Vec<Arc<Board>> = self.streams.iter().map(|(_, b)| Arc::clone(b)).collect();
        let now = crate::stream::read_boards(&boards, wait);
        self.streams.iter().map(|(q, _)| *q).zip(now).collect()
    }
}
