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
//! With BATCH > 0 the filter runs through `Filter::run_batch` on BATCH packets
//! a call (their `BatchInput`s made once, before timing), as weir's trace
//! source calls it; 0 (the default) is one `Filter::run` a packet.
//!
//! ```text
//! cargo run --release -p weir --example filter_cost -- TRACE EXPR jit|interp [PACKETS] [ROUNDS] [BATCH]
//! ```

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;
use weir::filter::oracle::Oracle;
use weir::filter::{BatchInput, Filter, FilterEngine};
use weir::LinkType;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, expr, engine, rest @ ..] = &args[..] else {
        return Err("usage: filter_cost TRACE EXPR jit|interp [PACKETS] [ROUNDS] [BATCH]".into());
    };
    let engine: FilterEngine = engine.parse()?;
    let limit: usize = rest.first().map(|n| n.parse()).transpose()?.unwrap_or(20_000);
    let rounds: usize = rest.get(1).map(|n| n.parse()).transpose()?.unwrap_or(100);
    let batch: usize = rest.get(2).map(|n| n.parse()).transpose()?.unwrap_or(0);

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

    let inputs: Vec<BatchInput<'_>> = packets.iter().map(|(data, wire)| BatchInput::new(data, *wire)).collect();
    let mut verdicts = vec![0u32; batch.max(1)];
    let mut round = |filter: &Filter| {
        if batch == 0 {
            return packets.iter().filter(|(data, wire)| filter.run(data, *wire) != 0).count();
        }
        let mut matched = 0;
        for group in inputs.chunks(batch) {
            let out = &mut verdicts[..group.len()];
            filter.run_batch(group, out);
            matched += out.iter().filter(|&&v| v != 0).count();
        }
        matched
    };
    let matched = round(&filter);
    let t0 = Instant::now();
    for _ in 0..rounds {
        black_box(round(black_box(&filter)));
    }
    let ns = t0.elapsed().as_nanos() as f64 / (rounds * packets.len()).max(1) as f64;
    println!(
        "{{\"engine\": \"{}\", \"batch\": {batch}, \"insns\": {}, \"packets\": {}, \"rounds\": {rounds}, \"matched\": {matched}, \"ns_per_packet\": {ns:.3}}}",
        filter.engine(),
        filter.len(),
        packets.len()
    );
    Ok(())
}
