//! A monitoring program on weir in a few lines: the top flows by bytes.
//!
//! Each queue's worker keeps its own flow table (no locks: RSS puts both
//! directions of a flow on one queue, so no flow is split across tables), and
//! the tables are merged when the run ends.
//!
//! ```text
//! cargo run --release --example top_flows -- trace.pcap@0-1 [N]
//! ```

use std::collections::HashMap;
use weir::wire::FlowTuple;
use weir::{Engine, Handler, LinkType, Packet};

/// One queue's view: bytes and packets per flow (direction-independent key).
struct FlowTable {
    link: LinkType,
    flows: HashMap<FlowTuple, (u64, u64)>,
}

impl Handler for FlowTable {
    fn packet(&mut self, p: &Packet<'_>) {
        if let Some(t) = FlowTuple::parse(self.link, p.data()) {
            let e = self.flows.entry(t.canonical()).or_default();
            e.0 += u64::from(p.wire_len());
            e.1 += 1;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let source = args.next().ok_or("usage: top_flows SOURCE [N]")?;
    let top: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(10);

    let engine = Engine::builder().source(&source)?.build()?;
    let link = engine.info().link_type;
    let report = engine.run(|_queue| FlowTable { link, flows: HashMap::new() })?;
    if let Some(e) = report.error() {
        eprintln!("warning: {e}");
    }

    let mut all: Vec<_> = report.handlers.into_iter().flat_map(|(_, t)| t.flows).collect();
    all.sort_by_key(|(_, (bytes, _))| std::cmp::Reverse(*bytes));
    println!("{} flows, {} packets; top {top} by bytes:", all.len(), report.stats.total().delivered);
    for (flow, (bytes, packets)) in all.iter().take(top) {
        println!("{bytes:>12} B {packets:>8} pkts  {flow:?}");
    }
    Ok(())
}
