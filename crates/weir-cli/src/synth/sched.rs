//! Interleaving open flows in time order at a fixed concurrency.
//!
//! There are always C slots. Each holds one open flow; a binary heap keyed by
//! (next packet time, slot) picks the next packet across all of them, so the output
//! is in non-decreasing time order and ties break the same way on every run. When a
//! flow sends its last packet, the slot opens a new flow at that same instant, which
//! keeps concurrency at C after the initial flows have started (spread over a short
//! ramp so the trace does not open with C simultaneous SYNs). Memory is the C open
//! flows and the heap, whatever the number of packets.
//!
//! Concurrency is measured as the trace shows it: a flow is open from its first to
//! its last packet. The peak and the time-weighted mean are reported.

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
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub packets: u64,
    pub flows: u64,
    pub peak_concurrency: usize,
    pub mean_concurrency: f64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Sum of wire lengths.
    pub wire_bytes: u64,
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
        slots.push((f, false));
    }
    let mut out = Outcome { flows: concurrency as u64, ..Outcome::default() };
    let mut buf = Vec::with_capacity(2048);
    let mut open = 0usize;
    let mut open_time = 0u128;
    let mut prev_ts = None;
    while out.packets < packets {
        let Reverse((_, slot)) = heap.pop().expect("every slot always holds a flow");
        let (flow, started) = &mut slots[slot];
        let (ts, wire_len) = opener.emit(flow, &mut buf);
        match prev_ts {
            None => out.first_ns = ts,
            Some(p) => {
                debug_assert!(ts >= p, "time went backwards: {p} then {ts}");
                open_time += open as u128 * u128::from(ts - p);
            }
        }
        prev_ts = Some(ts);
        if !*started {
            *started = true;
            open += 1;
            out.peak_concurrency = out.peak_concurrency.max(open);
        }
        sink(ts, &buf, wire_len)?;
        out.packets += 1;
        out.wire_bytes += u64::from(wire_len);
        out.last_ns = ts;
        match O::next_ts(flow) {
            Some(next) => heap.push(Reverse((next, slot))),
            None => {
                open -= 1;
                opener.closed(slot, flow);
                let fresh = opener.open(slot, ts);
                let first = O::next_ts(&fresh).expect("a new flow has a first packet");
                slots[slot] = (fresh, false);
                out.flows += 1;
                heap.push(Reverse((first, slot)));
            }
        }
    }
    // Flows that never sent a packet before the end were never open in the trace.
    out.flows -= slots.iter().filter(|(_, started)| !started).count() as u64;
    let span = out.last_ns.saturating_sub(out.first_ns);
    out.mean_concurrency = if span == 0 { open as f64 } else { open_time as f64 / span as f64 };
    Ok(out)
}
