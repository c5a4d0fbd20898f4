//! `weir sim`: the virtual-time model of a multi-queue NIC and its cores
//! (`weir::sim`), and the two WireCAP experiments built on it.
//!
//! - `weir sim run`: one engine, one workload, one report (text or JSON).
//! - `weir sim burst`: WireCAP's burst experiment: one queue, bursts of P
//!   64-byte packets at 14.88 Mpps, a light and a heavy application, for each
//!   engine; the drop rate against P as CSV.
//! - `weir sim imbalance`: WireCAP's long-term imbalance experiment: 6 queues
//!   and 6 heavy workers under a skewed flow mix (or a trace) whose total load
//!   fits the workers but whose hottest queue's does not, for ring-only, basic,
//!   advanced and rebalancing modes; drops, offloads, moves, flows that changed
//!   worker and reorder events as CSV.
//!
//! Engines are named as in the reports: `ring-only[:D]`, `copy-buffer[:D:S]`,
//! `B-M,R` (WireCAP-B-(M,R), basic), `A-M,R,T` (WireCAP-A-(M,R,T), advanced),
//! `rebalance-M,R` and `rebalance-M,R,T` (flow-consistent rebalancing, alone or
//! with offloading above T). The experiments run their engines on the machine's
//! cores in parallel; every run is deterministic.

use crate::exit::bad_input;
use crate::exit::out;
use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use weir::sim::workload::{Burst, Skewed, Timing, Trace, LINE_RATE_64B_10G};
use weir::sim::{self, EngineKind, SimConfig, SimReport, Workload};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::{BalanceMode, ControllerConfig, OffloadThreshold, PoolConfig, Rss};

/// WireCAP's heavy application: about 38,800 packets/s per core.
const HEAVY_NS: u64 = 25_773;
/// A light application: 10 Mpps per core, below line rate as WireCAP's light
/// pkt_handler was; `weir handle -x 0` measures the real figure on a machine.
const LIGHT_NS: u64 = 100;
/// Copy cost of the copy-into-buffer engine: fast enough for line rate, so its
/// buffer, not its copy, is what is compared.
const COPY_NS: u64 = 60;

#[derive(Args)]
#[command(after_long_help = "Examples:\n  weir sim run --engine B-256,500 --burst 100000 --cost-ns 25773\n  \
weir sim burst -o bench/results/sim-burst\n  weir sim imbalance -o bench/results/sim-imbalance\n  \
weir sim imbalance --trace /tmp/t.pcap -o /tmp/imb")]
pub struct SimArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// One engine on one workload.
    Run(RunArgs),
    /// WireCAP's burst experiment (its Figures 7 to 9): drop rate against burst size.
    Burst(BurstArgs),
    /// WireCAP's long-term imbalance experiment (its Table 1 and Figure 10).
    Imbalance(ImbalanceArgs),
}

/// An engine as named in reports.
#[derive(Clone, Debug)]
pub struct EngineSpec {
    name: String,
    kind: EngineKind,
}

impl FromStr for EngineSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let nums = |t: &str| -> Result<Vec<usize>, String> {
            t.split([',', ':'])
                .filter(|x| !x.is_empty())
                .map(|x| x.parse::<usize>().map_err(|_| format!("engine {s:?}: {x:?} is not a number")))
                .collect()
        };
        let pool = |v: &[usize]| PoolConfig::new(v[0], v[1]).map_err(|e| format!("engine {s:?}: {e}"));
        let threshold = |t: usize| OffloadThreshold::new(u8::try_from(t).unwrap_or(0)).map_err(|e| format!("engine {s:?}: {e}"));
        let kind = if let Some(rest) = s.strip_prefix("ring-only") {
            let v = nums(rest)?;
            EngineKind::RingOnly { descriptors: v.first().copied().unwrap_or(1024) }
        } else if let Some(rest) = s.strip_prefix("copy-buffer") {
            let v = nums(rest)?;
            EngineKind::CopyBuffer {
                descriptors: v.first().copied().unwrap_or(1024),
                slots: v.get(1).copied().unwrap_or(10_240),
                copy_ns: COPY_NS,
            }
        } else if let Some(rest) = s.strip_prefix("B-") {
            let v = nums(rest)?;
            if v.len() != 2 {
                return Err(format!("engine {s:?}: basic mode is B-M,R"));
            }
            EngineKind::Weir { pool: pool(&v)?, mode: BalanceMode::Basic }
        } else if let Some(rest) = s.strip_prefix("A-") {
            let v = nums(rest)?;
            if v.len() != 3 {
                return Err(format!("engine {s:?}: advanced mode is A-M,R,T"));
            }
            EngineKind::Weir { pool: pool(&v)?, mode: BalanceMode::Advanced(threshold(v[2])?) }
        } else if let Some(rest) = s.strip_prefix("rebalance-") {
            let v = nums(rest)?;
            let offload = match v.len() {
                2 => None,
                3 => Some(threshold(v[2])?),
                _ => return Err(format!("engine {s:?}: rebalancing is rebalance-M,R or rebalance-M,R,T")),
            };
            EngineKind::Weir { pool: pool(&v)?, mode: BalanceMode::Rebalance { controller: ControllerConfig::default(), offload } }
        } else {
            return Err(format!("unknown engine {s:?}: use ring-only[:D], copy-buffer[:D:S], B-M,R, A-M,R,T, rebalance-M,R[,T]"));
        };
        Ok(EngineSpec { name: s.to_string(), kind })
    }
}

/// The ranges of the simulator's numbers: as many queues as its model has, at
/// most a second per packet, and workloads a run finishes in minutes.
fn queues() -> clap::builder::RangedI64ValueParser<u16> {
    clap::value_parser!(u16).range(1..=64)
}
fn cost_ns() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=1_000_000_000)
}
fn packets() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=100_000_000)
}
fn handle_times() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(0..=1_000_000)
}

#[derive(Args)]
struct RunArgs {
    /// The engine (see `weir sim --help`).
    #[arg(long, value_name = "ENGINE")]
    engine: EngineSpec,
    /// Queues (one worker core each; 1 to 64).
    #[arg(long, default_value_t = 1, value_parser = queues())]
    queues: u16,
    /// Processing time per packet per core, in ns (25773 = WireCAP's heavy application;
    /// 1 to 10^9).
    #[arg(long, value_name = "NS", default_value_t = HEAVY_NS, value_parser = cost_ns())]
    cost_ns: u64,
    /// Instead of --cost-ns: time `weir handle -x N` on this machine, over packets
    /// of the workload, and use what one packet costs a worker (N: 0 to 1,000,000).
    #[arg(long, value_name = "N", conflicts_with = "cost_ns", value_parser = handle_times())]
    cost_from_handle: Option<u32>,
    /// Workload: a burst of P 64-byte packets at 14.88 Mpps (P: 1 to 10^8).
    #[arg(long, value_name = "P", conflicts_with_all = ["trace", "skewed"], value_parser = packets())]
    burst: Option<u64>,
    /// Workload: a skewed mix of this many packets (see `weir sim imbalance`; 1 to 10^8).
    #[arg(long, value_name = "PACKETS", conflicts_with = "trace", value_parser = packets())]
    skewed: Option<u64>,
    /// Workload: the packets of a trace file.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Offered load as a fraction of all workers' capacity (skewed mix and traces;
    /// 0.001 to 100).
    #[arg(long, default_value_t = 0.8, value_parser = crate::args::float_in(0.001, 100.0))]
    load: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BurstArgs {
    /// Output prefix: writes PREFIX.csv.
    #[arg(short = 'o', long, value_name = "PREFIX")]
    output: PathBuf,
    /// Burst sizes P (each 1 to 10^8).
    #[arg(long, value_delimiter = ',', default_values_t = default_bursts(), value_parser = packets())]
    bursts: Vec<u64>,
    /// Engines to compare.
    #[arg(long, num_args = 1.., default_values_t = ["ring-only:1024", "copy-buffer:1024:10240", "B-256,100", "B-256,500", "B-64,400", "B-128,200"].map(String::from).to_vec())]
    engines: Vec<String>,
    /// Per-packet cost of the light application, ns (1 to 10^9).
    #[arg(long, default_value_t = LIGHT_NS, value_parser = cost_ns())]
    light_ns: u64,
    /// Per-packet cost of the heavy application, ns (1 to 10^9).
    #[arg(long, default_value_t = HEAVY_NS, value_parser = cost_ns())]
    heavy_ns: u64,
}

fn default_bursts() -> Vec<u64> {
    vec![1_000, 2_000, 4_000, 6_000, 8_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000]
}

#[derive(Args)]
struct ImbalanceArgs {
    /// Output prefix: writes PREFIX.csv.
    #[arg(short = 'o', long, value_name = "PREFIX")]
    output: PathBuf,
    /// Queues (one worker core each; 1 to 64).
    #[arg(long, default_value_t = 6, value_parser = queues())]
    queues: u16,
    /// Per-packet cost of the (heavy) workers, ns (1 to 10^9).
    #[arg(long, default_value_t = HEAVY_NS, value_parser = cost_ns())]
    cost_ns: u64,
    /// Instead of --cost-ns: time `weir handle -x N` on this machine, over packets
    /// of the workload, and use what one packet costs a worker (N: 0 to 1,000,000).
    #[arg(long, value_name = "N", conflicts_with = "cost_ns", value_parser = handle_times())]
    cost_from_handle: Option<u32>,
    /// Packets of the skewed mix (1 to 10^8).
    #[arg(long, default_value_t = 2_000_000, value_parser = packets())]
    packets: u64,
    /// Flows of the skewed mix (1 to 10^7).
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    flows: u32,
    /// Zipf exponent of the flow sizes (0 to 10).
    #[arg(long, default_value_t = 1.1, value_parser = crate::args::float_in(0.0, 10.0))]
    zipf: f64,
    /// Use this trace instead of the skewed mix, at its recorded timing scaled to --load.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Total offered load as a fraction of all workers' capacity (0.001 to 100).
    #[arg(long, default_value_t = 0.85, value_parser = crate::args::float_in(0.001, 100.0))]
    load: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pool of every weir engine: M,R.
    #[arg(long, default_value = "256,100")]
    pool: String,
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Run(a) => run_one(a),
        What::Burst(a) => burst(a),
        What::Imbalance(a) => imbalance(a),
    }
}

/// The workload of `weir sim run` or `imbalance`: offered at `load` of `queues` workers of `cost_ns`.
fn workload(
    burst: Option<u64>,
    skewed: Option<(u64, u32, f64)>,
    trace: Option<&PathBuf>,
    queues: u16,
    cost_ns: u64,
    load: f64,
    seed: u64,
) -> anyhow::Result<Box<dyn Workload>> {
    let pps = load * f64::from(queues) * 1e9 / cost_ns as f64;
    if let Some(p) = burst {
        return Ok(Box::new(Burst::new(p, LINE_RATE_64B_10G, 1024).map_err(|e| bad_input(anyhow::anyhow!(e)))?));
    }
    if let Some(path) = trace {
        let mut t = Trace::load(path, Timing::Speed(1.0)).map_err(bad_input)?;
        if t.is_empty() {
            return Err(bad_input(anyhow::anyhow!("{}: no packets", path.display())));
        }
        let recorded = t.recorded_pps();
        t.set_timing(if recorded > 0.0 { Timing::Speed(pps / recorded) } else { Timing::Pps(pps) });
        return Ok(Box::new(t));
    }
    let (packets, flows, zipf) = skewed.unwrap_or((1_000_000, 20_000, 1.0));
    Ok(Box::new(Skewed::new(packets, flows, zipf, pps, seed).map_err(|e| bad_input(anyhow::anyhow!(e)))?))
}

/// Packets of the workload a calibration times: enough for a stable figure
/// (thousands of chunks), few enough to take about a second at WireCAP's heavy cost.
const CALIBRATION_PACKETS: usize = 40_000;

/// The per-packet cost of `weir handle -x times` here, measured over the first
/// packets of `w` written to a temporary trace; said on stderr.
fn calibrate(times: u32, w: &mut dyn Workload) -> anyhow::Result<u64> {
    let file = tempfile::Builder::new().prefix("weir-calibration").suffix(".pcap").tempfile().context("creating the calibration trace")?;
    let mut out = TraceWriter::new(std::io::BufWriter::new(file.as_file()), FileFormat::Pcap, w.link_type(), 65535, TsPrecision::Nano)
        .context("writing the calibration trace")?;
    let mut n = 0;
    while let Some(a) = w.next().filter(|_| n < CALIBRATION_PACKETS) {
        out.write_packet(a.t_ns, a.data, a.wire_len).context("writing the calibration trace")?;
        n += 1;
    }
    out.finish().context("writing the calibration trace")?;
    let ns = crate::handle::measure_cost(file.path(), times)?;
    let cost = (ns.round() as u64).max(1);
    eprintln!("weir sim: weir handle -x {times} costs {ns:.1} ns of worker CPU per packet here ({n} packets of the workload); using --cost-ns {cost}");
    Ok(cost)
}

/// `--cost-ns`, or the calibrated cost when `--cost-from-handle` is given.
fn cost(cost_ns: u64, from_handle: Option<u32>, sample: impl FnOnce() -> anyhow::Result<Box<dyn Workload>>) -> anyhow::Result<u64> {
    match from_handle {
        None => Ok(cost_ns),
        Some(times) => calibrate(times, sample()?.as_mut()),
    }
}

fn config(queues: u16, cost_ns: u64, engine: &EngineSpec) -> anyhow::Result<SimConfig> {
    SimConfig::new(queues, cost_ns, engine.kind.clone()).map_err(|e| bad_input(anyhow::anyhow!(e)))
}

/// A report as JSON and CSV rows.
#[derive(Serialize)]
struct Row {
    engine: String,
    arrived: u64,
    delivered: u64,
    capture_drops: u64,
    delivery_drops: u64,
    drop_rate: f64,
    offloaded: u64,
    buckets_moved: u64,
    steering_drops: u64,
    flows: u64,
    flows_changed_worker: u64,
    worker_changes: u64,
    reorder_events: u64,
    hottest_queue_share: f64,
    end_ms: f64,
    drops_per_queue: String,
}

impl Row {
    fn new(engine: &str, r: &SimReport) -> Row {
        let hottest = r.per_queue.iter().copied().max().unwrap_or(0);
        Row {
            engine: engine.to_string(),
            arrived: r.arrived,
            delivered: r.delivered,
            capture_drops: r.capture_drops,
            delivery_drops: r.delivery_drops,
            drop_rate: r.drop_rate(),
            offloaded: r.offloaded,
            buckets_moved: r.buckets_moved,
            steering_drops: r.steering_drops,
            flows: r.order.flows,
            flows_changed_worker: r.order.flows_changed_worker,
            worker_changes: r.order.worker_changes,
            reorder_events: r.order.reorder_events,
            hottest_queue_share: if r.arrived == 0 { 0.0 } else { hottest as f64 / r.arrived as f64 },
            end_ms: r.end_ns as f64 / 1e6,
            drops_per_queue: r.per_queue_drops.iter().map(u64::to_string).collect::<Vec<_>>().join(" "),
        }
    }

    const HEADER: &'static str = "engine,arrived,delivered,capture_drops,delivery_drops,drop_rate,offloaded,buckets_moved,steering_drops,flows,flows_changed_worker,worker_changes,reorder_events,hottest_queue_share,end_ms,drops_per_queue";

    fn csv(&self) -> String {
        format!(
            "\"{}\",{},{},{},{},{:.6},{},{},{},{},{},{},{},{:.4},{:.3},{}",
            self.engine,
            self.arrived,
            self.delivered,
            self.capture_drops,
            self.delivery_drops,
            self.drop_rate,
            self.offloaded,
            self.buckets_moved,
            self.steering_drops,
            self.flows,
            self.flows_changed_worker,
            self.worker_changes,
            self.reorder_events,
            self.hottest_queue_share,
            self.end_ms,
            self.drops_per_queue
        )
    }
}

fn run_one(mut a: RunArgs) -> anyhow::Result<ExitCode> {
    let skewed = a.skewed.map(|p| (p, 20_000, 1.0));
    a.cost_ns = cost(a.cost_ns, a.cost_from_handle, || workload(a.burst, skewed, a.trace.as_ref(), a.queues, a.cost_ns, a.load, a.seed))?;
    let cfg = config(a.queues, a.cost_ns, &a.engine)?;
    let mut w = workload(a.burst, skewed, a.trace.as_ref(), a.queues, a.cost_ns, a.load, a.seed)?;
    let r = sim::run(&cfg, w.as_mut()).map_err(|x| anyhow::anyhow!(x))?;
    let row = Row::new(&a.engine.name, &r);
    if a.json {
        out!("{}", serde_json::to_string(&row)?);
    } else {
        out!(
            "{}: {} arrived, {} delivered, {} capture drops, {} delivery drops ({:.2}%), {} offloaded, {} buckets moved, {} of {} flows changed worker, {} reorder events",
            row.engine,
            row.arrived,
            row.delivered,
            row.capture_drops,
            row.delivery_drops,
            row.drop_rate * 100.0,
            row.offloaded,
            row.buckets_moved,
            row.flows_changed_worker,
            row.flows,
            row.reorder_events
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `jobs` on the machine's cores, results in the order of `jobs`.
fn parallel<T: Send, R: Send>(jobs: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let out = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some((i, job)) = queue.lock().ok().and_then(|mut q| q.pop()) else { break };
                let r = f(job);
                if let Ok(mut o) = out.lock() {
                    o.push((i, r));
                }
            });
        }
    });
    let mut out = out.into_inner().unwrap_or_default();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

fn write_csv(prefix: &std::path::Path, text: &str) -> anyhow::Result<PathBuf> {
    let path = prefix.with_extension("csv");
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn burst(a: BurstArgs) -> anyhow::Result<ExitCode> {
    let engines: Vec<EngineSpec> =
        a.engines.iter().map(|e| e.parse().map_err(|e: String| bad_input(anyhow::anyhow!(e)))).collect::<anyhow::Result<_>>()?;
    if a.bursts.is_empty() || a.bursts.contains(&0) {
        return Err(bad_input(anyhow::anyhow!("--bursts: give burst sizes above 0")));
    }
    let apps = [("light", a.light_ns), ("heavy", a.heavy_ns)];
    let mut jobs = Vec::new();
    for (app, cost) in apps {
        for e in &engines {
            for &p in &a.bursts {
                jobs.push((app, cost, e.clone(), p));
            }
        }
    }
    eprintln!("weir sim burst: {} runs ({} engines x 2 applications x {} burst sizes)", jobs.len(), engines.len(), a.bursts.len());
    let rows = parallel(jobs, |(app, cost, e, p)| {
        let cfg = SimConfig::new(1, cost, e.kind.clone()).map_err(|x| anyhow::anyhow!(x))?;
        let mut w = Burst::new(p, LINE_RATE_64B_10G, 1024).map_err(|x| anyhow::anyhow!(x))?;
        let r = sim::run(&cfg, &mut w).map_err(|x| anyhow::anyhow!(x))?;
        // Engine names contain commas: quoted, as CSV readers expect.
        Ok::<_, anyhow::Error>(format!("{app},{cost},\"{}\",{p},{},{}\n", e.name, r.drops(), r.drop_rate()))
    });
    let mut csv = String::from("app,cost_ns,engine,burst,dropped,drop_rate\n");
    for r in rows {
        csv.push_str(&r?);
    }
    let path = write_csv(&a.output, &csv)?;
    eprintln!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

fn imbalance(mut a: ImbalanceArgs) -> anyhow::Result<ExitCode> {
    let mix = Some((a.packets, a.flows, a.zipf));
    a.cost_ns = cost(a.cost_ns, a.cost_from_handle, || workload(None, mix, a.trace.as_ref(), a.queues, a.cost_ns, a.load, a.seed))?;
    let pool = &a.pool;
    let t50 = format!("A-{pool},50");
    let t80 = format!("A-{pool},80");
    let names = [
        "ring-only:1024".to_string(),
        format!("B-{pool}"),
        t50,
        t80,
        format!("rebalance-{pool}"),
        format!("rebalance-{pool},50"),
        format!("rebalance-{pool},80"),
    ];
    let engines: Vec<EngineSpec> =
        names.iter().map(|e| e.parse().map_err(|e: String| bad_input(anyhow::anyhow!(e)))).collect::<anyhow::Result<_>>()?;
    // Check the inputs once, and say how skewed the offered load is.
    let mut probe = workload(None, Some((a.packets, a.flows, a.zipf)), a.trace.as_ref(), a.queues, a.cost_ns, a.load, a.seed)?;
    let rss = Rss::new(probe.link_type(), a.queues);
    let mut per_queue = vec![0u64; usize::from(a.queues)];
    let (mut first, mut last) = (None, 0);
    while let Some(p) = probe.next() {
        per_queue[usize::from(rss.queue(p.data).0)] += 1;
        first.get_or_insert(p.t_ns);
        last = p.t_ns;
    }
    let total: u64 = per_queue.iter().sum();
    let seconds = (last - first.unwrap_or(0)) as f64 / 1e9;
    let capacity = 1e9 / a.cost_ns as f64;
    let mut summary = String::new();
    for (q, n) in per_queue.iter().enumerate() {
        let _ = write!(summary, " q{q} {:.2}", *n as f64 / seconds.max(1e-9) / capacity);
    }
    eprintln!(
        "weir sim imbalance: {total} packets over {seconds:.1} s of virtual time; offered load per queue as a fraction of one worker:{summary}"
    );
    let rows = parallel(engines, |e| {
        let cfg = SimConfig::new(a.queues, a.cost_ns, e.kind.clone()).map_err(|x| anyhow::anyhow!(x))?;
        let mut w = workload(None, Some((a.packets, a.flows, a.zipf)), a.trace.as_ref(), a.queues, a.cost_ns, a.load, a.seed)?;
        let r = sim::run(&cfg, w.as_mut()).map_err(|x| anyhow::anyhow!(x))?;
        Ok::<_, anyhow::Error>(Row::new(&e.name, &r))
    });
    let mut csv = format!("{}\n", Row::HEADER);
    for r in rows {
        let r = r?;
        eprintln!(
            "  {:24} drop rate {:>7.3}%  offloaded {:>8}  buckets moved {:>4}  flows changed worker {:>6}  reorder events {:>7}  drops per queue {}",
            r.engine,
            r.drop_rate * 100.0,
            r.offloaded,
            r.buckets_moved,
            r.flows_changed_worker,
            r.reorder_events,
            r.drops_per_queue
        );
        csv.push_str(&r.csv());
        csv.push('\n');
    }
    let path = write_csv(&a.output, &csv)?;
    eprintln!("wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}
