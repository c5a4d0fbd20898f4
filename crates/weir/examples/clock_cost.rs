//! What a timestamp costs: nanoseconds per read of each clock a source can
//! stamp packets with, as `bench/clock.py` reports them (issue 22).
//!
//!     cargo run --release -p weir --example clock_cost [READS]
//!
//! Prints one JSON object: for each clock, the median over 9 rounds of READS
//! reads (default 5,000,000) of the time per read, each read's value summed
//! so none is optimised away. The TSC clock is weir's per-packet stamp
//! (`weir::clock::TscClock::now_ns`, resynced as a capture thread does);
//! `clock_gettime` is CLOCK_REALTIME through the vDSO (`weir::clock::realtime_ns`),
//! what afxdp reads once per batch with `--timestamps clock`; `rdtsc` is the
//! bare instruction under both.
use std::hint::black_box;
use std::time::Instant;
use weir::clock::{realtime_ns, tsc, TscClock};

fn per_read(reads: u64, mut f: impl FnMut() -> u64) -> f64 {
    let mut rounds: Vec<f64> = (0..9)
        .map(|_| {
            let t0 = Instant::now();
            let mut sum = 0u64;
            for _ in 0..reads {
                sum = sum.wrapping_add(f());
            }
            black_box(sum);
            t0.elapsed().as_nanos() as f64 / reads as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn main() {
    let reads: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    let mut clock = match TscClock::new() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("clock_cost: no TSC clock: {e}");
            None
        }
    };
    let realtime = per_read(reads, realtime_ns);
    let raw = per_read(reads, tsc);
    let tsc_clock = clock.as_mut().map(|c| {
        let mut n = 0u32;
        per_read(reads, || {
            n = n.wrapping_add(1);
            // A capture thread checks for a resync once per batch of up to 64.
            if n % 64 == 0 {
                c.resync_if_due();
            }
            c.now_ns()
        })
    });
    let hz = clock.map_or(0, |c| c.hz());
    let tsc_json = tsc_clock.map_or("null".to_string(), |v| format!("{v:.2}"));
    println!(
        "{{\"reads\": {reads}, \"tsc_hz\": {hz}, \"ns_per_read\": {{\"tsc_clock\": {tsc_json}, \"clock_gettime_realtime\": {realtime:.2}, \"rdtsc\": {raw:.2}}}}}"
    );
}
