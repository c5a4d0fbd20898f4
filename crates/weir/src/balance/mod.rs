//! Flow-consistent rebalancing: moving whole flow buckets between queues
//! without ever running one flow on two workers at once or out of order.
//!
//! Flows map to buckets through an RSS-style indirection table
//! ([`IndirectionTable`](crate::rss::IndirectionTable), 512 entries or more). The
//! [`Controller`] watches, every tick, what each queue received, what its worker
//! finished and how much waits, and moves buckets away from a queue only when it
//! has been overloaded for several ticks in a row: a short burst, which the pool
//! absorbs, never moves anything. [`Steering`] carries a move out in the capture
//! path (trace and simulated sources; afxdp's capture threads): packets of a
//! moving bucket are parked until every chunk the old queue had published is
//! recycled, then handed to the new queue ahead of anything newer. From then on
//! the bucket is the new queue's, and the old worker has nothing of it left.
//!
//! Chunk offloading (`pool::buddy`) is the other answer to imbalance, WireCAP's;
//! it reacts at once but splits flows across workers. The two combine: the
//! controller for lasting imbalance, offloading as the last resort above its
//! threshold.

mod controller;
mod steer;

pub use controller::{Controller, ControllerConfig, Move, QueueSample};
pub use steer::{Route, Steering, SteeringStats};

use crate::pool::OffloadThreshold;

/// How an engine meets imbalance between its queues.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub enum Mode {
    /// Per-queue pools only: WireCAP-B-(M,R).
    #[default]
    Basic,
    /// Offload chunks to the least-loaded buddy above T: WireCAP-A-(M,R,T).
    Advanced(OffloadThreshold),
    /// Flow-consistent rebalancing, optionally with offloading as last resort.
    Rebalance { controller: ControllerConfig, offload: Option<OffloadThreshold> },
}

impl std::str::FromStr for Mode {
    type Err = String;

    /// `basic`, `offload:T`, `rebalance` or `rebalance:T` (T in percent).
    fn from_str(s: &str) -> Result<Self, String> {
        let threshold = |t: &str| {
            t.parse::<u8>().map_err(|_| format!("balance mode {s:?}: {t:?} is not a percentage")).and_then(OffloadThreshold::new)
        };
        match s.split_once(':') {
            None if s == "basic" => Ok(Mode::Basic),
            None if s == "rebalance" => Ok(Mode::Rebalance { controller: ControllerConfig::default(), offload: None }),
            Some(("offload", t)) => Ok(Mode::Advanced(threshold(t)?)),
            Some(("rebalance", t)) => Ok(Mode::Rebalance { controller: ControllerConfig::default(), offload: Some(threshold(t)?) }),
            _ => Err(format!("balance mode {s:?}: use basic, offload:T, rebalance or rebalance:T (T a percentage from 1 to 99)")),
        }
    }
}

impl Mode {
    /// The offload threshold, if chunks are offloaded in this mode.
    pub fn offload(&self) -> Option<OffloadThreshold> {
        match *self {
            Mode::Basic => None,
            Mode::Advanced(t) => Some(t),
            Mode::Rebalance { offload, .. } => offload,
        }
    }

    /// The controller's tuning, if buckets are moved in this mode.
    pub fn controller(&self) -> Option<ControllerConfig> {
        match *self {
            Mode::Rebalance { controller, .. } => Some(controller),
            _ => None,
        }
    }
}
