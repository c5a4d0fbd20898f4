//! `weir handle --flow-order`: how the workers processed each flow, checked
//! packet by packet across all of them.
//!
//! Contract: for every packet whose flow weir parses (IPv4 or IPv6 with TCP,
//! UDP or another protocol; both directions are one flow), a worker calls
//! [`FlowOrder::begin`] before its work and [`FlowOrder::end`] after it. One
//! table, shared by the workers under one lock, counts:
//! - `worker_changes`: packets processed by another worker than the previous
//!   packet of their flow, and `flows_changed_worker`: flows with at least one;
//! - `reorder_events`: packets whose timestamp is earlier than that of a packet
//!   of their flow already processed, so a later packet overtook them;
//! - `concurrent`: packets whose work began while another packet of their flow
//!   was still being worked on by another worker.
//!
//! Under basic mode and flow-consistent rebalancing all three reorder and
//! concurrency counts must be 0; chunk offloading makes them grow. The lock
//! makes this a checker, not a fast path: it adds a few hundred ns per packet
//! and serializes the workers' bookkeeping, so leave it off when measuring cost.

use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use weir::wire::FlowTuple;
use weir::{LinkType, Packet, QueueId};

/// The shared record of every flow.
pub struct FlowOrder {
    link: LinkType,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    flows: HashMap<FlowTuple, Flow>,
    counts: OrderCounts,
}

struct Flow {
    latest_ts: u64,
    worker: QueueId,
    busy: bool,
    changed_worker: bool,
}

/// What the workers did to flows, over the whole run.
#[derive(Copy, Clone, Debug, Default, Serialize)]
pub struct OrderCounts {
    pub flows: u64,
    pub flows_changed_worker: u64,
    pub worker_changes: u64,
    pub reorder_events: u64,
    pub concurrent: u64,
}

impl FlowOrder {
    pub fn new(link: LinkType) -> FlowOrder {
        FlowOrder { link, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A worker that panicked mid-update leaves counts, not broken invariants.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `worker` starts on `p`; returns the flow to hand to [`end`](Self::end).
    pub fn begin(&self, worker: QueueId, p: &Packet<'_>) -> Option<FlowTuple> {
        let key = FlowTuple::parse(self.link, p.data())?.canonical();
        let ts = p.ts_ns();
        let mut st = self.state();
        let State { flows, counts } = &mut *st;
        match flows.get_mut(&key) {
            None => {
                counts.flows += 1;
                flows.insert(key, Flow { latest_ts: ts, worker, busy: true, changed_worker: false });
            }
            Some(f) => {
                counts.concurrent += u64::from(f.busy);
                counts.reorder_events += u64::from(ts < f.latest_ts);
                if f.worker != worker {
                    counts.worker_changes += 1;
                    if !f.changed_worker {
                        f.changed_worker = true;
                        counts.flows_changed_worker += 1;
                    }
                }
                f.latest_ts = f.latest_ts.max(ts);
                f.worker = worker;
                f.busy = true;
            }
        }
        Some(key)
    }

    /// The work on the packet `begin` returned `key` for is done.
    pub fn end(&self, key: FlowTuple) {
        if let Some(f) = self.state().flows.get_mut(&key) {
            f.busy = false;
        }
    }

    pub fn counts(&self) -> OrderCounts {
        self.state().counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::sim::workload::{Skewed, Workload};

    #[test]
    fn order_changes_of_worker_and_overlap_are_counted_per_flow() {
        // Two packets of one flow (a mix of a single flow).
        let mut w = Skewed::new(2, 1, 1.0, 1000.0, 7).unwrap();
        let a = w.next().map(|p| (p.data.to_vec(), p.wire_len)).unwrap();
        let b = w.next().map(|p| (p.data.to_vec(), p.wire_len)).unwrap();
        let order = FlowOrder::new(LinkType::ETHERNET);
        let k = order.begin(QueueId(0), &Packet::new(&a.0, a.1, 200, QueueId(0))).unwrap();
        // Another worker starts on an older packet of the flow before the first is done.
        let k2 = order.begin(QueueId(1), &Packet::new(&b.0, b.1, 100, QueueId(1))).unwrap();
        order.end(k);
        order.end(k2);
        let c = order.counts();
        assert_eq!((c.flows, c.flows_changed_worker, c.worker_changes, c.reorder_events, c.concurrent), (1, 1, 1, 1, 1));
        // The same worker again, in order and after the others finished: nothing new.
        let k3 = order.begin(QueueId(1), &Packet::new(&a.0, a.1, 300, QueueId(1))).unwrap();
        order.end(k3);
        let c = order.counts();
        assert_eq!((c.worker_changes, c.reorder_events, c.concurrent), (1, 1, 1));
        assert!(order.begin(QueueId(0), &Packet::new(&[0u8; 14], 14, 0, QueueId(0))).is_none(), "a frame with no flow is not tracked");
    }
}
