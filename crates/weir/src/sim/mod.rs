//! The simulator: a discrete-event, virtual-time model of a multi-queue NIC
//! and of the cores that serve it, driving weir's own pool, offload and
//! rebalance code through a clock the model owns. It stands beside the
//! sources, not among them: it runs no capture threads and no engine.
//!
//! What is modelled:
//!
//! - **Arrivals** from a [`Workload`]: packets with arrival times in ns
//!   (a burst at line rate, a skewed synthetic mix, or a trace at a rate or a
//!   multiple of its recorded timing).
//! - **RSS**: the symmetric Toeplitz hash and a 512-bucket indirection table
//!   spread packets over `queues` queues, as a NIC does.
//! - **Cores**: one worker per queue, each spending `cost_ns` per packet.
//! - **Capture engines** ([`EngineKind`]): weir's pool (WireCAP-B basic mode,
//!   WireCAP-A advanced mode with offloading, flow-consistent rebalancing, or
//!   both), and for comparison the two engine types WireCAP measured against: a
//!   ring-only engine whose capture buffer is the NIC's descriptor ring, and a
//!   copy-into-buffer engine that copies each packet from the ring into a buffer
//!   of fixed slots.
//!
//! For weir's engine the model owns no queueing logic of its own: arrivals are
//! `push_copy`'d into real `CaptureSide`s, workers
//! take real chunks from real `WorkerSide`s, chunks
//! are offloaded by the pool's buddy links and buckets moved by the real
//! `Steering`. Only time is virtual: the capture
//! thread is taken to be instantaneous (as WireCAP's, which only moves chunk
//! descriptors), a partly filled chunk is published `flush_ns` after its first
//! packet, and a worker takes a chunk as soon as it is free and one waits.
//!
//! [`run`] plays a [`Workload`] through the [`SimConfig`] checked by
//! [`SimConfig::new`] and returns a [`SimReport`]. Every run is a pure function
//! of its configuration and workload: there is no wall clock, no thread and no
//! randomness outside the workload's seed. Times are virtual nanoseconds from
//! the start of the run.
//!
//! The cells carry each packet's arrival index as its timestamp, so the order
//! check (`order.rs`) can tell, as each packet is processed, whether a later
//! packet of its flow was processed first (a reorder event) and whether its flow
//! changed worker. Flows are told apart by their canonical 5-tuple.

mod model;
mod order;
mod peers;
pub mod workload;

use crate::balance::BalanceMode;
use crate::memory::{Budget, MemoryError, Plan};
use crate::pool::PoolConfig;
use crate::{Setting, SettingError};

pub use order::OrderStats;
pub use workload::{Arrival, Workload};

/// The capture engine being modelled.
#[derive(Clone, Debug)]
pub enum EngineKind {
    /// The NIC's descriptor ring is the capture buffer (netmap/DNA type): a
    /// packet is dropped when all `descriptors` hold packets the application has
    /// not finished.
    RingOnly {
        /// Descriptors in each queue's ring.
        descriptors: usize,
    },
    /// Packets are copied from a ring of `descriptors` into a buffer of `slots`
    /// (PF_RING type), `copy_ns` per packet on a core of its own. A full ring is
    /// a capture drop, a full buffer a delivery drop.
    CopyBuffer {
        /// Descriptors in each queue's ring.
        descriptors: usize,
        /// Packets each queue's buffer holds.
        slots: usize,
        /// Time to copy one packet, in ns.
        copy_ns: u64,
    },
    /// weir's pool, in a balancing mode.
    Weir {
        /// Each queue's pool.
        pool: PoolConfig,
        /// Basic, advanced (offloading), rebalancing, or rebalancing with offloading.
        mode: BalanceMode,
    },
}

/// One simulation's setup, checked by [`SimConfig::new`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub(crate) queues: u16,
    /// Processing time of one packet by a worker.
    pub(crate) cost_ns: u64,
    pub(crate) engine: EngineKind,
    /// A partly filled chunk is published this long after its first packet.
    pub(crate) flush_ns: u64,
    /// The rebalancing controller's tick.
    pub(crate) tick_ns: u64,
}

/// Why a simulation could not be set up or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A configuration or workload value out of range.
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// The weir engine's pools are real ones, checked like a capture's.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The weir engine's pools could not be allocated.
    #[error("simulation: cannot allocate the pools: {0}")]
    Alloc(std::io::Error),
}

impl SimConfig {
    /// `queues` queues (1 to 64), each served by a worker spending `cost_ns`
    /// (at least 1) per packet, with `engine`; partly filled chunks are
    /// published after 1 ms and the rebalancing controller ticks every 10 ms.
    /// Errors: a value out of range ([`SimError::Setting`]), or pools of weir's
    /// engine that exceed the memory budget ([`SimError::Memory`]).
    pub fn new(queues: u16, cost_ns: u64, engine: EngineKind) -> Result<Self, SimError> {
        let bad = |problem: String| Err(SettingError::new(Setting::Simulation, problem).into());
        if queues == 0 || queues > 64 {
            return bad(format!("{queues} queues: must be from 1 to 64"));
        }
        if cost_ns == 0 {
            return bad("the per-packet cost must be at least 1 ns".into());
        }
        match &engine {
            EngineKind::RingOnly { descriptors } if *descriptors == 0 => return bad("a ring needs at least one descriptor".into()),
            EngineKind::CopyBuffer { descriptors, slots, copy_ns } if *descriptors == 0 || *slots == 0 || *copy_ns == 0 => {
                return bad("the copy-buffer engine needs descriptors, slots and a copy cost above 0".into())
            }
            _ => {}
        }
        // The weir engine's pools are real ones: they must fit like a capture's.
        if let EngineKind::Weir { pool, .. } = &engine {
            let mut budget = Budget::new(pool.capacity());
            budget.per_queue(
                format!("pools: {} chunks (pool {},{})", pool.chunks().get(), pool.cells().get(), pool.chunks().get()),
                pool.memory_bytes(),
            );
            budget.check(usize::from(queues), Plan::new())?;
        }
        Ok(SimConfig { queues, cost_ns, engine, flush_ns: 1_000_000, tick_ns: 10_000_000 })
    }
}

/// What happened in one simulation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimReport {
    /// Packets that reached the NIC.
    pub arrived: u64,
    /// Packets a worker finished.
    pub delivered: u64,
    /// Packets dropped at capture: no free descriptor or cell (steering drops
    /// included).
    pub capture_drops: u64,
    /// Packets dropped after capture, before a worker had them (a full buffer
    /// of the copy-buffer engine).
    pub delivery_drops: u64,
    /// Packets in chunks handed to a buddy (advanced mode).
    pub offloaded: u64,
    /// Buckets the rebalancing controller moved to another queue.
    pub buckets_moved: u64,
    /// Packets dropped by the steering (parking area full, no cell at hand-over).
    pub steering_drops: u64,
    /// Flow order as the workers saw it (weir's engine only; the others keep it
    /// by construction and report zeros).
    pub order: OrderStats,
    /// Packets each queue received from the NIC's RSS (after steering).
    pub per_queue: Vec<u64>,
    /// Packets each queue dropped (capture and delivery drops).
    pub per_queue_drops: Vec<u64>,
    /// Virtual time when the last packet was finished.
    pub end_ns: u64,
}

impl SimReport {
    /// Packets lost: capture drops plus delivery drops, so that
    /// `arrived == delivered + drops()` once a run has ended.
    pub fn drops(&self) -> u64 {
        self.capture_drops + self.delivery_drops
    }

    /// Dropped packets over arrived packets.
    pub fn drop_rate(&self) -> f64 {
        if self.arrived == 0 {
            0.0
        } else {
            self.drops() as f64 / self.arrived as f64
        }
    }
}

/// Run one simulation of `workload` to the end and until every packet is
/// finished; an error only when the weir engine's pools cannot be allocated.
pub fn run(cfg: &SimConfig, workload: &mut dyn Workload) -> Result<SimReport, SimError> {
    match &cfg.engine {
        EngineKind::RingOnly { descriptors } => Ok(peers::ring_only(cfg, *descriptors, workload)),
        EngineKind::CopyBuffer { descriptors, slots, copy_ns } => Ok(peers::copy_buffer(cfg, *descriptors, *slots, *copy_ns, workload)),
        EngineKind::Weir { pool, mode } => model::run(cfg, pool, *mode, workload),
    }
}

#[cfg(test)]
mod tests;
