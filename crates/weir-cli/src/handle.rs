//! `weir handle`: a heavy application of known weight, WireCAP's `pkt_handler`.
//!
//! Contract: every packet the source delivers reaches a worker, which runs a
//! libpcap filter program on it `-x N` times with the engine `--filter-engine`
//! names (the JIT by default, or weir's interpreter) and then discards it. The filter given with `-f/--filter` is therefore the
//! application's work, not a capture filter: the engine runs without one, so
//! `delivered` counts every packet and `filtered` stays 0. With no `-f`, the
//! work is `tcp or udp` (DEFAULT_FILTER), which walks the link and IP headers
//! of every packet as a real classifier would.
//!
//! At the end it prints `weir count`'s per-queue table, then what the work cost:
//! the workers' CPU time per packet (CLOCK_THREAD_CPUTIME_ID of each worker
//! thread, from its first packet to its last sample, summed over workers and
//! divided by the packets in those spans) and the packets per second delivered.
//! The CPU figure includes weir's own per-packet delivery work on the worker, so
//! it is the whole cost of a core per packet: the number `weir sim run --cost-ns`
//! takes. `--json` prints count's object with these fields added.
//!
//! The workers' own counts are checked against the engine's: together they must
//! have seen exactly the packets and bytes the engine says it delivered.
//!
//! `--wait-us U` adds a wait per packet, slept to a schedule (packet n of a
//! backlog is done U after packet n-1), as an application blocked on I/O per
//! packet: it makes workers slow without taking the cores, so imbalance can be
//! studied with real threads on a machine with few cores. `--flow-order` checks,
//! packet by packet across workers, that flows are processed whole and in order
//! (see [`crate::flow_order`]) and reports it.

use crate::count::{finish, json_report, print_table};
use crate::exit::bad_input;
use crate::exit::out;
use crate::flow_order::FlowOrder;
use crate::run::{human_rate, run_to_end, SourceArgs};
use anyhow::bail;
use clap::Args;
use nix::time::{clock_gettime, ClockId};
use serde_json::json;
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir::filter::{BatchInput, Filter, FilterEngine, FilterError};
use weir::{Handler, Packet, QueueId};

/// The work when no `-f` is given: cheap enough to be a realistic unit of work,
/// and it reads the headers of every packet (link type, IP version, protocol).
pub const DEFAULT_FILTER: &str = "tcp or udp";

#[derive(Args, Debug)]
#[command(
    // Here the filter is the application's work, not a capture filter: say so in --help.
    mut_arg("filter", |a| a.help(
        "The work: the libpcap filter expression each worker runs -x times on every packet \
         [default: 'tcp or udp']. Packets are not dropped by it; all of them are delivered"
    )),
    mut_arg("count", |a| a.help("Stop after N packets (all queues together)")),
    after_help = "What -x means: each worker runs the filter program N times on every packet it is handed, \
then discards the packet, as WireCAP's pkt_handler does. N sets how heavy the application is: -x 0 \
measures weir's delivery alone, and each step of N adds one run of the filter (with the default \
'tcp or udp' in a release build, some 4 ns per packet compiled by the JIT and 12 ns with \
--filter-engine interp; WireCAP's heavy application, 25,773 ns per packet, is about -x 1700 \
interpreted, the engine `weir sim --cost-from-handle` times).\n\n\
Examples:\n  weir handle -x 10 trace.pcap@0-1\n  weir handle -x 50 -f 'tcp port 443 or udp port 53' --pps 200000 trace.pcap@0-3\n  \
weir handle -x 0 --json trace.pcap\n\n\
The summary gives the workers' CPU time per packet (thread CPU time of the worker threads \
divided by the packets they handled; weir's own delivery work included). That is the \
per-packet cost of one core running this application: pass it to the simulator to see how the \
same application fares at 10 Gbit/s and more cores, e.g. `weir sim run --engine B-256,128 --burst 100000 --cost-ns 850`."
)]
pub struct HandleArgs {
    // This command's own options come before the flattened source options, whose last
    // group sets the "Live capture" help heading for everything after it.
    /// How many times each worker runs the filter on every packet before discarding it
    /// (0: not at all; at most 1,000,000, about a second per packet).
    #[arg(short = 'x', long = "times", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub times: u32,

    /// After the filter runs, wait this many microseconds per packet, to a schedule:
    /// an application blocked on I/O, slow without taking a core (at most 1,000,000).
    #[arg(long, value_name = "U", value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub wait_us: Option<u64>,

    /// Check across workers that every flow is processed by one worker at a time
    /// and in order, and report flows that changed worker, reorder events and
    /// overlaps (a shared lock per packet: a checker, not for timing).
    #[arg(long)]
    pub flow_order: bool,

    /// Print one JSON object at the end instead of the table (no status lines).
    #[arg(long)]
    pub json: bool,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub src: SourceArgs,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// Sample the CPU clock after these many packets and at the powers of two below,
/// so short runs get a figure too. A sample is one system call (a few hundred ns),
/// so this keeps the measurement's own cost well under 0.1 ns per packet.
const SAMPLE_EVERY: u64 = 4096;

/// The CPU time the calling thread has used, in ns; None where the clock is unavailable.
fn thread_cpu_ns() -> Option<u64> {
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).ok()?;
    let secs = u64::try_from(t.tv_sec()).ok()?;
    let nanos = u64::try_from(t.tv_nsec()).ok()?;
    Some(secs * 1_000_000_000 + nanos)
}

/// Runs of the filter handed to its batch entry at once.
const RUNS_A_CALL: usize = 32;

/// One queue's worker: the filter, how often to run it, and what it saw.
struct Work {
    filter: Filter,
    times: u32,
    packets: u64,
    bytes: u64,
    /// Packets the filter accepted (counted once per packet, on the runs' agreed verdict).
    matched: u64,
    /// Packets whose runs disagreed: a deterministic filter never does, so any is a bug.
    inconsistent: u64,
    /// Sum of every run's return value, kept so no run is dead code.
    verdicts: u64,
    /// Thread CPU time at the first packet, and (CPU time, packets) at the latest sample.
    cpu_start: Option<u64>,
    cpu_last: Option<(u64, u64)>,
    /// `--wait-us`, and when the last packet's wait ended.
    wait: Option<Duration>,
    waited_until: Option<Instant>,
    /// `--flow-order`: the shared record, and this worker's queue.
    order: Option<(Arc<FlowOrder>, QueueId)>,
}

impl Work {
    fn new(filter: Filter, times: u32) -> Work {
        Work {
            filter,
            times,
            packets: 0,
            bytes: 0,
            matched: 0,
            inconsistent: 0,
            verdicts: 0,
            cpu_start: None,
            cpu_last: None,
            wait: None,
            waited_until: None,
            order: None,
        }
    }

    /// Sleep until `wait` after the previous packet's end, or after now if the
    /// worker was idle meanwhile (behind by more than a millisecond).
    fn wait(&mut self, wait: Duration) {
        let now = Instant::now();
        let start = match self.waited_until {
            Some(d) if now.saturating_duration_since(d) < Duration::from_millis(1) => d,
            _ => now,
        };
        let until = start + wait;
        std::thread::sleep(until.saturating_duration_since(now));
        self.waited_until = Some(until);
    }

    /// CPU time and packets of the measured span, if there was one.
    fn measured(&self) -> Option<(u64, u64)> {
        let start = self.cpu_start?;
        let (end, packets) = self.cpu_last?;
        Some((end.saturating_sub(start), packets))
    }

    #[cold]
    #[inline(never)]
    fn sample(&mut self) {
        if let Some(now) = thread_cpu_ns() {
            self.cpu_last = Some((now, self.packets));
        }
    }
}

impl Handler for Work {
    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        if self.packets == 0 {
            self.cpu_start = thread_cpu_ns();
        }
        let flow = self.order.as_ref().and_then(|(o, q)| o.begin(*q, p));
        let mut accepted = 0u32;
        // The runs go through the filter's batch entry, RUNS_A_CALL at a time, as
        // the trace source judges records: the program runs `times` times all
        // the same, without a call around each run. The entry is opaque to the
        // optimizer (machine code, or the interpreter behind black_box), so no
        // two runs are folded into one; the verdicts are summed below.
        let input = BatchInput::new(black_box(p.data()), black_box(p.wire_len()));
        let inputs = [input; RUNS_A_CALL];
        let mut verdicts = [0u32; RUNS_A_CALL];
        let mut left = self.times as usize;
        while left > 0 {
            let n = left.min(RUNS_A_CALL);
            self.filter.run_batch(black_box(&inputs[..n]), &mut verdicts[..n]);
            for &v in black_box(&verdicts[..n]) {
                self.verdicts = self.verdicts.wrapping_add(u64::from(v));
                accepted += u32::from(v != 0);
            }
            left -= n;
        }
        if let Some(w) = self.wait {
            self.wait(w);
        }
        if let (Some((o, _)), Some(k)) = (&self.order, flow) {
            o.end(k);
        }
        self.matched += u64::from(accepted != 0);
        self.inconsistent += u64::from(accepted != 0 && accepted != self.times);
        self.packets += 1;
        self.bytes += u64::from(p.wire_len());
        let n = self.packets;
        if n % SAMPLE_EVERY == 0 || (n < SAMPLE_EVERY && n.is_power_of_two()) {
            self.sample();
        }
    }
}

/// Worker CPU ns per packet over the measured spans of all workers.
fn ns_per_packet(spans: impl Iterator<Item = (u64, u64)>) -> Option<f64> {
    let (ns, packets) = spans.fold((0u64, 0u64), |(a, b), (ns, p)| (a + ns, b + p));
    (packets > 0).then(|| ns as f64 / packets as f64)
}

pub fn run(mut args: HandleArgs) -> anyhow::Result<ExitCode> {
    let metrics = args.metrics.bind()?;
    // The filter is the work: take it away from the engine so every packet is delivered.
    let expr = args.src.filter.take().unwrap_or_else(|| DEFAULT_FILTER.to_owned());
    let engine = args.src.engine()?;
    let info = engine.info().clone();
    let pool = *engine.pool_config();
    let filter = Filter::compile(&expr, info.link_type, info.snaplen)
        .map_err(|e| match e {
            FilterError::Library(_) => anyhow::Error::new(e),
            e => bad_input(anyhow::anyhow!("-f/--filter: {e}")),
        })?
        .with_engine(args.src.filter_engine);
    if let Some(why) = filter.jit_unavailable() {
        eprintln!("weir handle: the filter runs on the interpreter: {why}");
    }
    let placements: Vec<String> = engine.placements().iter().filter(|p| p.capture_cpu.is_some()).map(|p| p.to_string()).collect();
    if !placements.is_empty() && !args.json {
        eprintln!("weir handle: placement {}", placements.join("; "));
    }
    let times = args.times;
    let wait = args.wait_us.map(Duration::from_micros);
    let order = args.flow_order.then(|| Arc::new(FlowOrder::new(info.link_type)));
    let report = run_to_end(engine, "handle", &args.src.live, args.quiet || args.json, metrics, |q| Work {
        wait,
        order: order.as_ref().map(|o| (Arc::clone(o), q)),
        ..Work::new(filter.clone(), times)
    })?;

    let stats = &report.stats;
    let total = stats.total();
    let clean = report.errors.is_empty();
    for q in &stats.queues {
        if !q.balanced() || (clean && q.in_flight != 0) {
            bail!("internal accounting error on queue {}: {q:?}", q.queue);
        }
    }
    // Totals, not per queue: an offloaded chunk is handled by a buddy queue's worker.
    // A worker that panicked returned no handler; its error is reported below instead.
    let all_workers = report.handlers.len() == stats.queues.len();
    let (packets, bytes) = report.handlers.iter().fold((0, 0), |(p, b), (_, w)| (p + w.packets, b + w.bytes));
    if all_workers && (packets != total.delivered || bytes != total.delivered_bytes) {
        bail!(
            "internal accounting error: the engine delivered {} packets ({} bytes), the workers handled {packets} ({bytes} bytes)",
            total.delivered,
            total.delivered_bytes
        );
    }
    if let Some((q, w)) = report.handlers.iter().find(|(_, w)| w.inconsistent != 0) {
        bail!("the filter gave different verdicts on the same packet {} times on queue {q}", w.inconsistent);
    }
    let matched: u64 = report.handlers.iter().map(|(_, w)| w.matched).sum();
    let cost = ns_per_packet(report.handlers.iter().filter_map(|(_, w)| w.measured()));
    let secs = report.elapsed.as_secs_f64();
    let pps = if secs > 0.0 { total.delivered as f64 / secs } else { 0.0 };

    if args.json {
        let mut v = json_report(&report, &info.name, info.link_type.to_string(), &total, &placements);
        v["filter_expr"] = json!(expr);
        v["filter_insns"] = json!(filter.len());
        v["filter_engine"] = json!(filter.engine().name());
        v["times"] = json!(times);
        v["matched"] = json!(if times > 0 { Some(matched) } else { None });
        v["ns_per_packet"] = json!(cost);
        v["workers"] = json!(report.handlers.iter().map(|(q, w)| worker_json(*q, w)).collect::<Vec<_>>());
        v["flow_order"] = json!(order.as_ref().map(|o| o.counts()));
        out!("{v}");
    } else {
        print_table("handle", &report, &format!("{} ({}, pool {pool})", info.name, info.link_type), &total);
        print_work(&report.handlers, &expr, &filter, times);
        if let Some(o) = &order {
            let c = o.counts();
            out!(
                "flow order: {} flows, {} changed worker ({} packets on another worker than their flow's previous one), \
                 {} reorder events, {} packets begun while their flow was on another worker",
                c.flows,
                c.flows_changed_worker,
                c.worker_changes,
                c.reorder_events,
                c.concurrent
            );
        }
        match cost {
            Some(ns) => out!(
                "handler: {ns:.1} ns/packet of worker CPU (one worker keeps up with {}pps), {}pps delivered; \
                 simulate it with --cost-ns {cost}, e.g. weir sim run --engine B-256,128 --burst 100000 --cost-ns {cost}",
                human_rate(1e9 / ns.max(1e-3)),
                human_rate(pps),
                cost = (ns.round() as u64).max(1)
            ),
            None => out!("handler: no CPU time measured (no packets handled, or the thread CPU clock is unavailable)"),
        }
    }
    // Keeps the sum of every verdict observable, so no filter run is dead code.
    black_box(report.handlers.iter().fold(0u64, |a, (_, w)| a.wrapping_add(w.verdicts)));
    finish(&report)
}

/// What `weir handle -x TIMES --filter-engine interp` (the default work,
/// interpreted) costs per packet on this machine, in worker CPU ns: the same
/// engine and workers, one queue, over the trace at `path`. `weir sim
/// --cost-from-handle` calibrates its model with it. The interpreter, not the
/// JIT, so that a given TIMES keeps the weight it was documented with (`-x
/// 1700` is about WireCAP's heavy application).
pub fn measure_cost(path: &std::path::Path, times: u32) -> anyhow::Result<f64> {
    let spec = weir::source::SourceSpec::File { path: Some(path.to_path_buf()), queues: weir::source::QueueRange::single() };
    let engine = weir::Engine::builder().source_spec(spec).build().map_err(crate::exit::build_error)?;
    let info = engine.info().clone();
    let filter = Filter::compile(DEFAULT_FILTER, info.link_type, info.snaplen)?.with_engine(FilterEngine::Interp);
    let report = engine.run(|_q| Work::new(filter.clone(), times))?;
    if let Some(e) = report.error() {
        bail!("timing weir handle -x {times} on {}: {e}", path.display());
    }
    ns_per_packet(report.handlers.iter().filter_map(|(_, w)| w.measured()))
        .ok_or_else(|| anyhow::anyhow!("timing weir handle -x {times}: no packets handled, or the thread CPU clock is unavailable"))
}

fn worker_json(q: QueueId, w: &Work) -> serde_json::Value {
    let m = w.measured();
    json!({
        "queue": q.0,
        "packets": w.packets,
        "matched": if w.times > 0 { Some(w.matched) } else { None },
        "cpu_ns": m.map(|(ns, _)| ns),
        "measured_packets": m.map(|(_, p)| p),
        "ns_per_packet": m.filter(|&(_, p)| p > 0).map(|(ns, p)| ns as f64 / p as f64),
    })
}

fn print_work(workers: &[(QueueId, Work)], expr: &str, filter: &Filter, times: u32) {
    out!(
        "work: filter '{expr}' ({} BPF instructions, {}) run {times} time(s) on every packet",
        filter.len(),
        match filter.engine() {
            FilterEngine::Jit => "compiled by the JIT",
            FilterEngine::Interp => "interpreted",
        }
    );
    out!("{:>6} {:>12} {:>12} {:>12} {:>12}", "worker", "packets", "matched", "cpu_ms", "ns/packet");
    for (q, w) in workers {
        let matched = if times > 0 { w.matched.to_string() } else { "-".into() };
        let (cpu, per) = match w.measured() {
            Some((ns, p)) if p > 0 => (format!("{:.3}", ns as f64 / 1e6), format!("{:.1}", ns as f64 / p as f64)),
            _ => ("-".into(), "-".into()),
        };
        out!("{:>6} {:>12} {matched:>12} {cpu:>12} {per:>12}", q.0, w.packets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir::LinkType;

    /// An Ethernet/IPv4 frame with the given IP protocol.
    fn frame(proto: u8) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
        f.extend_from_slice(&[0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 19, 0, 1]);
        f.extend_from_slice(&[0x04, 0x00, 0x01, 0xbb]);
        f.resize(60, 0);
        f
    }

    #[test]
    fn runs_the_filter_the_given_number_of_times_and_counts_matches() {
        let filter = Filter::compile(DEFAULT_FILTER, LinkType::ETHERNET, 65535).expect("libpcap compiles the default");
        for times in [0, 1, 7] {
            let mut w = Work::new(filter.clone(), times);
            let (tcp, icmp) = (frame(6), frame(1));
            for _ in 0..5 {
                w.packet(&Packet::new(&tcp, 60, 0, QueueId(0)));
            }
            w.packet(&Packet::new(&icmp, 60, 0, QueueId(0)));
            assert_eq!(w.packets, 6);
            assert_eq!(w.bytes, 360);
            assert_eq!(w.matched, if times > 0 { 5 } else { 0 });
            assert_eq!(w.inconsistent, 0);
            // Each accepting run returns the snap length, 65535 here: the sum shows how many runs there were.
            assert_eq!(w.verdicts, 5 * u64::from(times) * 65535, "times {times}");
            let (_, measured) = w.measured().expect("thread CPU clock");
            assert_eq!(measured, 4, "last sample at the largest power of two");
        }
    }

    #[test]
    fn cost_is_total_cpu_over_total_packets() {
        assert_eq!(ns_per_packet([(1000, 10), (3000, 10)].into_iter()), Some(200.0));
        assert_eq!(ns_per_packet(std::iter::empty()), None);
    }
}
