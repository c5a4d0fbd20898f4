//! Flow-consistent rebalancing: moving whole flow buckets between queues
//! without ever running one flow on two workers at once or out of order.
//!
//! Flows map to buckets through an RSS-style indirection table
//! (`IndirectionTable`, 512 entries or more). The
//! controller watches, every tick, what each queue received, what its worker
//! finished and how much waits, and moves buckets away from a queue only when it
//! has been overloaded for several ticks in a row: a short burst, which the pool
//! absorbs, never moves anything. The steering carries a move out in the capture
//! path of trace and simulated sources, where one thread fills every queue: packets of a
//! moving bucket are parked until every chunk the old queue had published is
//! recycled, then handed to the new queue ahead of anything newer. From then on
//! the bucket is the new queue's, and the old worker has nothing of it left:
//! what its handler kept about the bucket's flows (the stream layer's
//! streams) was handed to the new worker's handler before the first parked
//! packet (`handover.rs`).
//! Live captures, with a capture thread per queue, run the same controller and
//! the same fence split across those threads (`threaded.rs`): AF_PACKET keeps
//! the table in the kernel (`source::afpacket`'s `rebalance` module), AF_XDP in
//! the capture threads (`source::afxdp`'s). AF_PACKET hands the handlers'
//! state over as traces do, the new queue parking the bucket's packets until
//! the old worker's export is posted; AF_XDP cannot (its entries are buckets
//! of one RX queue's flows, which a handler cannot pick out), so the stream
//! layer refuses to rebalance it.
//!
//! Chunk offloading (`pool::buddy`) is the other answer to imbalance, WireCAP's;
//! it reacts at once but splits flows across workers. The two combine: the
//! controller for lasting imbalance, offloading as the last resort above its
//! threshold.

mod controller;
mod handover;
mod park;
mod steer;
pub(crate) mod threaded;

pub use controller::ControllerConfig;
pub(crate) use controller::{Controller, Move, QueueSample};
pub(crate) use handover::{Desk, Handovers};
pub(crate) use park::{Parked, ParkingLot};
pub use steer::SteeringStats;
pub(crate) use steer::{Route, Steering, STEER_TICK};

use crate::pool::OffloadThreshold;
use crate::{Setting, SettingError};
use std::sync::atomic::{AtomicU64, Ordering};

/// How an engine meets imbalance between its queues; parsed from `basic`,
/// `offload:T`, `rebalance` or `rebalance:T`. Offloading needs two queues or
/// more to act; the engine's buddy group is all of its queues.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum BalanceMode {
    /// Per-queue pools only: WireCAP-B-(M,R).
    #[default]
    Basic,
    /// Chunks of a queue whose capture queue is fuller than T percent go to the
    /// least-loaded other queue's worker: WireCAP-A-(M,R,T). It reacts at
    /// once but splits flows across workers.
    Advanced(OffloadThreshold),
    /// Flow-consistent rebalancing: whole flow buckets move between queues
    /// after a lasting overload. A trace must be opened with every queue of
    /// its split; an afpacket source uses buckets fanout (the engine turns
    /// the default hash fanout into it, and refuses any other).
    Rebalance {
        /// When buckets move.
        controller: ControllerConfig,
        /// Offloading above this threshold as well, as the last resort; `None`
        /// keeps every flow on one worker at a time.
        offload: Option<OffloadThreshold>,
    },
}

impl std::str::FromStr for BalanceMode {
    type Err = SettingError;

    /// `basic`, `offload:T`, `rebalance` or `rebalance:T` (T in percent).
    fn from_str(s: &str) -> Result<Self, SettingError> {
        let threshold = |t: &str| {
            t.parse::<u8>()
                .map_err(|_| SettingError::new(Setting::Balance, format!("{s:?}: {t:?} is not a percentage")))
                .and_then(OffloadThreshold::new)
        };
        match s.split_once(':') {
            None if s == "basic" => Ok(BalanceMode::Basic),
            None if s == "rebalance" => Ok(BalanceMode::Rebalance { controller: ControllerConfig::default(), offload: None }),
            Some(("offload", t)) => Ok(BalanceMode::Advanced(threshold(t)?)),
            Some(("rebalance", t)) => Ok(BalanceMode::Rebalance { controller: ControllerConfig::default(), offload: Some(threshold(t)?) }),
            _ => Err(SettingError::new(
                Setting::Balance,
                format!("{s:?}: use basic, offload:T, rebalance or rebalance:T (T a percentage from 1 to 99)"),
            )),
        }
    }
}

impl BalanceMode {
    /// The offload threshold, if chunks are offloaded in this mode.
    pub(crate) fn offload(&self) -> Option<OffloadThreshold> {
        match *self {
            BalanceMode::Basic => None,
            BalanceMode::Advanced(t) => Some(t),
            BalanceMode::Rebalance { offload, .. } => offload,
        }
    }

    /// The controller's tuning, if buckets are moved in this mode.
    pub fn controller(&self) -> Option<ControllerConfig> {
        match *self {
            BalanceMode::Rebalance { controller, .. } => Some(controller),
            _ => None,
        }
    }
}

/// What rebalancing did, shared between the threads that steer and whoever
/// reports it while the capture runs. Each field is a count on its own, read
/// and written Relaxed: no other memory is published through them.
#[derive(Debug, Default)]
pub(crate) struct BalanceCounters {
    moves_started: AtomicU64,
    buckets_moved: AtomicU64,
    parked: AtomicU64,
    park_drops: AtomicU64,
    handover_drops: AtomicU64,
    parked_bytes_peak: AtomicU64,
}

impl BalanceCounters {
    /// Replace the counts with a single steerer's own running totals.
    pub(crate) fn publish(&self, s: &SteeringStats) {
        self.moves_started.store(s.moves_started, Ordering::Relaxed);
        self.buckets_moved.store(s.buckets_moved, Ordering::Relaxed);
        self.parked.store(s.parked, Ordering::Relaxed);
        self.park_drops.store(s.park_drops, Ordering::Relaxed);
        self.handover_drops.store(s.handover_drops, Ordering::Relaxed);
        self.parked_bytes_peak.store(s.parked_bytes_peak as u64, Ordering::Relaxed);
    }

    /// Add one steerer's share, where several threads steer together.
    pub(crate) fn add(&self, s: &SteeringStats) {
        self.moves_started.fetch_add(s.moves_started, Ordering::Relaxed);
        self.buckets_moved.fetch_add(s.buckets_moved, Ordering::Relaxed);
        self.parked.fetch_add(s.parked, Ordering::Relaxed);
        self.park_drops.fetch_add(s.park_drops, Ordering::Relaxed);
        self.handover_drops.fetch_add(s.handover_drops, Ordering::Relaxed);
        self.parked_bytes_peak.fetch_max(s.parked_bytes_peak as u64, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> SteeringStats {
        SteeringStats {
            moves_started: self.moves_started.load(Ordering::Relaxed),
            buckets_moved: self.buckets_moved.load(Ordering::Relaxed),
            parked: self.parked.load(Ordering::Relaxed),
            park_drops: self.park_drops.load(Ordering::Relaxed),
            handover_drops: self.handover_drops.load(Ordering::Relaxed),
            parked_bytes_peak: self.parked_bytes_peak.load(Ordering::Relaxed) as usize,
        }
    }
}
