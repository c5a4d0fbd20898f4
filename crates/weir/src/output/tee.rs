//! One capture, many consumers: a [`Tee`] is the handler of one queue's
//! worker that hands every packet to several branches (a packet recorder,
//! a flow exporter's stream layer, a reassembling stream layer, ...), each
//! behind its own optional libpcap filter, as Suricata's and Arkime's
//! per-output conditions are.
//!
//! Contract:
//! - every packet the worker delivers is, for each branch, either handed to
//!   it or counted as filtered out by that branch's filter: per branch,
//!   `packets = passed + filtered` ([`BranchCounts`]), readable while the
//!   run goes on;
//! - a branch sees its packets in the worker's order, in runs
//!   ([`Handler::packets`]) where the worker delivered runs, so a stream
//!   layer still starts its table lookups ahead;
//! - the branches' filters can be replaced while the capture runs
//!   ([`Filters::replace`]): each worker takes the new set between two runs
//!   of packets, so every packet is judged by exactly one set, old or new,
//!   never both and never neither (the switch is counted in
//!   [`BranchCounts::reloads`]);
//! - `idle`, `finish`, and the rebalancing hand-over reach every branch;
//!   the hand-over of a bucket carries each branch's part.
//!
//! Adding a consumer is adding a branch: nothing in the engine changes.

use crate::filter::Filter;
use crate::{FlowBucket, Handler, Handover, Packet, PACKETS_PER_RUN};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A branch's handler, kept so that the caller can take it back by its
/// type at the end ([`Tee::into_branches`]).
pub trait Branch: Handler {
    /// The handler as `Any`, to downcast to its own type.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

impl<H: Handler> Branch for H {
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// What one branch of one queue counted, live.
#[derive(Debug, Default)]
pub struct BranchCounts {
    /// Packets handed to the branch.
    pub passed: AtomicU64,
    /// Packets its filter turned away.
    pub filtered: AtomicU64,
    /// Filter sets this queue took after the first.
    pub reloads: AtomicU64,
}

impl BranchCounts {
    /// `(passed, filtered)` now. Relaxed loads: each counter is written by
    /// one worker only, and a reader wants a recent value, not an order
    /// between counters.
    pub fn get(&self) -> (u64, u64) {
        (self.passed.load(Ordering::Relaxed), self.filtered.load(Ordering::Relaxed))
    }
}

/// The branches' filters, shared by every queue's [`Tee`], and replaceable
/// while the capture runs.
#[derive(Debug, Default)]
pub struct Filters {
    set: Mutex<Vec<Option<Filter>>>,
    /// Bumped by each [`replace`](Self::replace); the workers compare it
    /// with the generation they hold.
    generation: AtomicU64,
}

impl Filters {
    /// One filter (or none) per branch, in branch order.
    pub fn new(set: Vec<Option<Filter>>) -> Arc<Filters> {
        Arc::new(Filters { set: Mutex::new(set), generation: AtomicU64::new(0) })
    }

    /// Replaces every branch's filter; each worker takes the new set before
    /// its next run of packets.
    pub fn replace(&self, set: Vec<Option<Filter>>) {
        *self.set.lock().unwrap_or_else(PoisonError::into_inner) = set;
        // Release: a worker that sees the new generation (Acquire) finds the
        // set stored before it when it takes the lock; the lock orders that
        // too, the bump only has to be seen after the store.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Replacements so far.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn snapshot(&self) -> (u64, Vec<Option<Filter>>) {
        let set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        (self.generation.load(Ordering::Acquire), set.clone())
    }
}

struct Arm {
    handler: Box<dyn Branch>,
    filter: Option<Filter>,
    counts: Arc<BranchCounts>,
}

/// One queue's fan-out to its branches.
pub struct Tee {
    arms: Vec<Arm>,
    filters: Arc<Filters>,
    generation: u64,
}

impl Tee {
    /// A tee over `branches` (handler and counts, in the order of
    /// `filters`' sets).
    pub fn new(branches: Vec<(Box<dyn Branch>, Arc<BranchCounts>)>, filters: Arc<Filters>) -> Tee {
        let (generation, set) = filters.snapshot();
        let arms = branches
            .into_iter()
            .zip(set.into_iter().chain(std::iter::repeat(None)))
            .map(|((handler, counts), filter)| Arm { handler, filter, counts })
            .collect();
        Tee { arms, filters, generation }
    }

    /// The branches' handlers, in order, for the caller to downcast.
    pub fn into_branches(self) -> Vec<Box<dyn Any + Send>> {
        self.arms.into_iter().map(|a| a.handler.into_any()).collect()
    }

    /// Takes a new filter set if one was given since the last run.
    fn refresh(&mut self) {
        if self.filters.generation() == self.generation {
            return;
        }
        let (generation, set) = self.filters.snapshot();
        for (arm, filter) in self.arms.iter_mut().zip(set.into_iter().chain(std::iter::repeat(None))) {
            arm.filter = filter;
            // Relaxed: a counter this worker alone writes.
            arm.counts.reloads.fetch_add(1, Ordering::Relaxed);
        }
        self.generation = generation;
    }
}

impl Handler for Tee {
    fn packet(&mut self, packet: &Packet<'_>) {
        self.packets(std::slice::from_ref(packet));
    }

    fn packets(&mut self, packets: &[Packet<'_>]) {
        self.refresh();
        let mut kept = [Packet::NONE; PACKETS_PER_RUN];
        for arm in &mut self.arms {
            let Some(f) = &arm.filter else {
                arm.handler.packets(packets);
                // Relaxed: this worker's own counter, read by monitors only.
                arm.counts.passed.fetch_add(packets.len() as u64, Ordering::Relaxed);
                continue;
            };
            // A run is at most PACKETS_PER_RUN long (the worker's contract);
            // a longer slice from another caller goes in parts.
            for part in packets.chunks(PACKETS_PER_RUN) {
                let mut n = 0;
                for p in part {
                    if f.matches(p.data(), p.wire_len()) {
                        kept[n] = *p;
                        n += 1;
                    }
                }
                if n > 0 {
                    arm.handler.packets(&kept[..n]);
                }
                // Relaxed: as above.
                arm.counts.passed.fetch_add(n as u64, Ordering::Relaxed);
                arm.counts.filtered.fetch_add((part.len() - n) as u64, Ordering::Relaxed);
            }
        }
    }

    fn idle(&mut self) {
        self.refresh();
        self.arms.iter_mut().for_each(|a| a.handler.idle());
    }

    fn finish(&mut self) {
        self.arms.iter_mut().for_each(|a| a.handler.finish());
    }

    fn export(&mut self, bucket: &FlowBucket) -> Option<Handover> {
        let parts: Vec<Option<Handover>> = self.arms.iter_mut().map(|a| a.handler.export(bucket)).collect();
        parts.iter().any(Option::is_some).then(|| Box::new(parts) as Handover)
    }

    fn import(&mut self, state: Handover) {
        let Ok(parts) = state.downcast::<Vec<Option<Handover>>>() else { return };
        for (arm, part) in self.arms.iter_mut().zip(*parts) {
            if let Some(p) = part {
                arm.handler.import(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinkType, QueueId};

    /// Counts what it got.
    struct Got(Vec<u8>);

    impl Handler for Got {
        fn packet(&mut self, p: &Packet<'_>) {
            self.0.push(p.data()[23]);
        }
    }

    fn frame(proto: u8) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&50u16.to_be_bytes());
        f[22] = 64;
        f[23] = proto;
        f
    }

    #[test]
    fn each_branch_gets_what_its_filter_passes_and_a_reload_switches_between_runs() {
        let frames: Vec<Vec<u8>> = (0..300).map(|i| frame(if i % 3 == 0 { 6 } else { 17 })).collect();
        let packets: Vec<Packet<'_>> = frames.iter().map(|f| Packet::new(f, f.len() as u32, 0, QueueId(0))).collect();
        let tcp = Filter::compile("tcp", LinkType::ETHERNET, 65535).unwrap();
        let udp = Filter::compile("udp", LinkType::ETHERNET, 65535).unwrap();
        let filters = Filters::new(vec![None, Some(tcp.clone())]);
        let counts = [Arc::new(BranchCounts::default()), Arc::new(BranchCounts::default())];
        let mut tee =
            Tee::new(vec![(Box::new(Got(Vec::new())), counts[0].clone()), (Box::new(Got(Vec::new())), counts[1].clone())], filters.clone());
        for run in packets.chunks(PACKETS_PER_RUN) {
            tee.packets(run);
        }
        filters.replace(vec![Some(udp), Some(tcp)]);
        for run in packets.chunks(PACKETS_PER_RUN) {
            tee.packets(run);
        }
        assert_eq!(counts[0].get(), (300 + 200, 100));
        assert_eq!(counts[1].get(), (200, 400));
        assert_eq!(counts[0].reloads.load(Ordering::Relaxed), 1);
        let got: Vec<Vec<u8>> = tee.into_branches().into_iter().map(|b| b.downcast::<Got>().unwrap().0).collect();
        assert_eq!(got[0].len(), 500);
        assert!(got[0][300..].iter().all(|&p| p == 17));
        assert!(got[1].iter().all(|&p| p == 6));
    }
}
