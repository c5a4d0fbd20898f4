//! Interleaving open flows in time order at a fixed concurrency.
//!
//! There are always C slots. Each holds one open flow; a binary heap keyed by
//! (next packet time, slot) picks the next packet across all of them, so the output
//! is in non-decreasing time order and ties break the same way on every run. When a
//! flow sends its last packet, the slot opens a new flow at that same instant, which
//! keeps C flows open once the initial flows have started (spread over a short ramp
//! so the trace does not open with C simultaneous SYNs). Memory is the C open
//! flows and the heap, whatever the number of packets.
//!
//! What is reported is what the trace shows, as a reader counts it: a flow
//! exists if it has a packet in the trace, and is open from its first packet to
//! its last one in the trace (a flow the end of the trace cut off is open only
//! up to its last packet there). [`Outcome`] has the flows, the slots that ever
//! started one (fewer than C when the trace ends during the ramp), the peak of
//! flows open at one packet, and the time-weighted mean.
use super::rng::FlowRng;
use rand::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;

/// What the scheduler needs from a kind of flow: open one, emit its packets, learn it ended.
pub trait Opener {
    type Flow;
    /// Open a flow in `slot` whose first packet is at `at_ns` or later.
    fn open(&mut self, slot: usize, at_ns: u64) -> Self::Flow;
    /// Time of the flow's next packet, `None` once it has sent its last.
    fn next_ts(flow: &Self::Flow) -> Option<u64>;
    /// Write the flow's next packet into `out` (cleared first); returns its time and wire length.
    fn emit(&mut self, flow: &mut Self::Flow, out: &mut Vec<u8>) -> (u64, u32);
    /// The flow in `slot` has sent its last packet; the slot opens its successor next.
    fn closed(&mut self, slot: usize, flow: &Self::Flow);
    /// The trace ended before this flow sent a packet: it is not in the trace.
    fn unused(&mut self, flow: &Self::Flow);
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub packets: u64,
    /// Flows with at least one packet in the trace.
    pub flows: u64,
    /// Slots whose first flow sent a packet: C unless the trace ended during the ramp.
    pub slots_started: usize,
    /// Most flows open at one packet, each from its first to its last packet in the trace.
    pub peak_concurrency: usize,
    /// The same count, averaged over the trace's time span.
    pub mean_concurrency: f64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Sum of wire lengths.
    pub wire_bytes: u64,
}

/// A slot's flow as the trace shows it so far.
#[derive(Copy, Clone, Debug, Default)]
struct Shown {
    /// The slot's current flow has sent a packet.
    started: bool,
    /// The slot has started a flow at some point.
    ever: bool,
    first_ts: u64,
    last_ts: u64,
    /// Index in the trace of the current flow's latest packet.
    last_index: u64,
}

/// Emit `packets` packets from `concurrency` slots of `opener`'s flows into `sink(ts, frame, wire_len)`.
pub fn run<O: Opener>(
    opener: &mut O,
    concurrency: usize,
    packets: u64,
    start_ns: u64,
    ramp_ns: u64,
    seed: u64,
    mut sink: impl FnMut(u64, &[u8], u32) -> io::Result<()>,
) -> io::Result<Outcome> {
    let mut rng = FlowRng::new(seed, 0x5c4ed);
    let mut slots = Vec::with_capacity(concurrency);
    let mut heap = BinaryHeap::with_capacity(concurrency);
    for slot in 0..concurrency {
        let at = start_ns + if ramp_ns > 0 { rng.gen_range(0..ramp_ns) } else { 0 };
        let f = opener.open(slot, at);
        heap.push(Reverse((O::next_ts(&f).expect("a new flow has a first packet"), slot)));
        slots.push((f, Shown::default()));
    }
    let mut out = Outcome::default();
    let mut buf = Vec::with_capacity(2048);
    // Flows that have sent their first packet and not yet their last: the count a
    // reader sees, except for flows the end of the trace will cut off, which stop
    // being open at their last packet in the trace. The packet index at which it
    // first reached each height is kept: a peak is always at one of those, and the
    // cut-off flows are subtracted there at the end.
    let mut open = 0usize;
    let mut first_reach: Vec<u64> = Vec::new();
    let mut open_ns = 0u128;
    while out.packets < packets {
        let Reverse((_, slot)) = heap.pop().expect("every slot always holds a flow");
        let (flow, shown) = &mut slots[slot];
        let (ts, wire_len) = opener.emit(flow, &mut buf);
        if out.packets == 0 {
            out.first_ns = ts;
        }
        debug_assert!(ts >= out.last_ns, "time went backwards: {} then {ts}", out.last_ns);
        let index = out.packets;
        if !shown.started {
            out.slots_started += usize::from(!shown.ever);
            *shown = Shown { started: true, ever: true, first_ts: ts, last_ts: ts, last_index: index };
            out.flows += 1;
            open += 1;
            if open > first_reach.len() {
                first_reach.push(index);
            }
        }
        shown.last_ts = ts;
        shown.last_index = index;
        sink(ts, &buf, wire_len)?;
        out.packets += 1;
        out.wire_bytes += u64::from(wire_len);
        out.last_ns = ts;
        match O::next_ts(flow) {
            Some(next) => heap.push(Reverse((next, slot))),
            None => {
                open -= 1;
                open_ns += u128::from(ts - shown.first_ts);
                opener.closed(slot, flow);
                let fresh = opener.open(slot, ts);
                let first = O::next_ts(&fresh).expect("a new flow has a first packet");
                let ever = shown.ever;
                slots[slot] = (fresh, Shown { ever, ..Shown::default() });
                heap.push(Reverse((first, slot)));
            }
        }
    }
    let mut cut: Vec<u64> = Vec::new();
    for (flow, shown) in &slots {
        if shown.started {
            cut.push(shown.last_index);
            open_ns += u128::from(shown.last_ts - shown.first_ts);
        } else {
            opener.unused(flow);
        }
    }
    // At the packet where `h` flows first were open, those cut off before it are not.
    cut.sort_unstable();
    let mut before = 0;
    for (h, &at) in first_reach.iter().enumerate() {
        while before < cut.len() && cut[before] < at {
            before += 1;
        }
        out.peak_concurrency = out.peak_concurrency.max(h + 1 - before);
    }
    let span = out.last_ns.saturating_sub(out.first_ns);
    out.mean_concurrency = if span == 0 { out.peak_concurrency as f64 } else { open_ns as f64 / span as f64 };
    Ok(out)
}
