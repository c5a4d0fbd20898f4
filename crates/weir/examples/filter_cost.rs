//! What one run of a filter costs, per packet, on each of weir's engines: the
//! harness of `bench/jit.py` (whose libpcap side is `bench/peers/libpcap_filter_cost.c`).
//!
//! Reads the first PACKETS packets of a trace into memory with the system
//! libpcap (as the C peer does, so both judge the same bytes), compiles EXPR
//! with libpcap for the trace's link type, then runs the filter ROUNDS times
//! over all of them, after one round to warm the caches. Prints one JSON
//! object: the engine that ran, the program's length, the packets matched in
//! one round, and the wall-clock ns per filter run.
//!
//! ```text
//! cargo run --release -p weir --example filter_cost -- TRACE EXPR jit|interp [PACKETS] [ROUNDS]
//! ```

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;
use weir::filter::oracle::Oracle;
use weir::filter::{Filter, FilterEngine};
use weir::LinkType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, expr, engine, rest @ ..] = &args[..] else {
        return Err("usage: filter_cost TRACE EXPR jit|interp [PACKETS] [ROUNDS]".into());
    };
    let engine: FilterEngine = engine.parse()?;
    let limit: usize = rest.first().map(|n| n.parse()).transpose()?.unwrap_or(20_000);
    let rounds: usize = rest.get(1).map(|n| n.parse()).transpose()?.unwrap_or(100);

    let mut handle = Oracle::system()?.open_offline(Path::new(trace))?;
    // The trace's DLT_ value; the benchmark's traces are Ethernet, where it is also the LINKTYPE_ one.
    let link = LinkType(handle.link_type());
    let mut packets = Vec::with_capacity(limit);
    while packets.len() < limit {
        match handle.next_packet()? {
            Some(p) => packets.push((p.data, p.wire_len)),
            None => break,
        }
    }
    let filter = Filter::compile(expr, link, 262_144)?.with_engine(engine);
    if let Some(why) = filter.jit_unavailable() {
        return Err(format!("the JIT was asked for and is not available: {why}").into());
    }

    let round = |filter: &Filter| packets.iter().filter(|(data, wire)| filter.run(data, *wire) != 0).count();
    let matched = round(&filter);
    let t0 = Instant::now();
    for _ in 0..rounds {
        black_box(round(black_box(&filter)));
    }
    let ns = t0.elapsed().as_nanos() as f64 / (rounds * packets.len()).max(1) as f64;
    println!(
        "{{\"engine\": \"{}\", \"insns\": {}, \"packets\": {}, \"rounds\": {rounds}, \"matched\": {matched}, \"ns_per_packet\": {ns:.3}}}",
        filter.engine(),
        filter.len(),
        packets.len()
    );
    Ok(())
}
