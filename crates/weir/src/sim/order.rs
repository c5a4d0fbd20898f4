//! Per-flow order and affinity, checked as the workers process packets.
//!
//! Packets are seen in the order the model processes them (virtual time, ties
//! by worker). For each flow the check keeps the arrival index of the latest
//! packet processed and the worker that processed it. A packet whose arrival
//! index is below its flow's latest is a **reorder event**: some later packet of
//! the flow went first. A packet on another worker than its flow's previous one
//! is a **worker change**; a flow with at least one is counted once in
//! `flows_changed_worker`.

use crate::wire::flow::FlowTuple;
use std::collections::HashMap;

/// What the order check found over a run. Flows are canonical 5-tuples;
/// packets without one (not IP, or the IP header cut short) are not counted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderStats {
    pub(crate) packets: u64,
    /// Flows seen.
    pub flows: u64,
    /// Packets processed after a later packet of their flow.
    pub reorder_events: u64,
    /// Times a flow's packet was processed by another worker than its previous one.
    pub worker_changes: u64,
    /// Flows processed by more than one worker.
    pub flows_changed_worker: u64,
}

#[derive(Copy, Clone)]
struct FlowState {
    latest: u64,
    worker: u16,
    changed: bool,
}

#[derive(Default)]
pub(super) struct OrderCheck {
    flows: HashMap<FlowTuple, FlowState>,
    stats: OrderStats,
}

impl OrderCheck {
    /// Packet `index` of flow `flow` is processed by `worker` now.
    pub(super) fn see(&mut self, flow: FlowTuple, index: u64, worker: u16) {
        self.stats.packets += 1;
        let s = &mut self.stats;
        self.flows
            .entry(flow)
            .and_modify(|f| {
                if index < f.latest {
                    s.reorder_events += 1;
                } else {
                    f.latest = index;
                }
                if f.worker != worker {
                    s.worker_changes += 1;
                    if !f.changed {
                        f.changed = true;
                        s.flows_changed_worker += 1;
                    }
                    f.worker = worker;
                }
            })
            .or_insert(FlowState { latest: index, worker, changed: false });
    }

    pub(super) fn stats(&self) -> OrderStats {
        OrderStats { flows: self.flows.len() as u64, ..self.stats }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reorders_and_worker_changes() {
        let flow =
            |n: u8| FlowTuple::parse(crate::LinkType::ETHERNET, &super::super::workload::test_frame(u32::from(n))).unwrap().canonical();
        let mut c = OrderCheck::default();
        c.see(flow(1), 0, 0);
        c.see(flow(1), 2, 1); // flow 1 moves to worker 1
        c.see(flow(1), 1, 0); // an older packet after a newer one, and back on worker 0
        c.see(flow(2), 5, 3);
        c.see(flow(2), 6, 3);
        let s = c.stats();
        assert_eq!(s, OrderStats { packets: 5, flows: 2, reorder_events: 1, worker_changes: 2, flows_changed_worker: 1 });
    }
}
