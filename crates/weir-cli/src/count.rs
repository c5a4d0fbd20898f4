//! `weir count`: count packets and bytes per queue, the pfcount of weir.
//!
//! Each queue's worker counts what it is handed, as an application would; the
//! final figures are the workers' own counts, checked against the engine's
//! per-queue `delivered` counter so a miscount in either is caught.

use crate::exit::bad_input;
use crate::exit::out;
use crate::run::{human_rate, run_to_end, SourceArgs};
use anyhow::bail;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use weir::engine::Report;
use weir::stats::QueueStats;
use weir::{Handler, Packet};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir count trace.pcap\n  weir count trace.pcap@0-3 --json\n  \
weir count -f 'tcp and port 443' --pps 100000 trace.pcap\n\n\
Every packet is counted once: received = delivered + filtered + capture_drops + delivery_drops \
+ in_flight, per queue. capture_drops: no free cell when the packet arrived (only when paced). \
delivery_drops: lost by the kernel before weir saw it (live sources).")]
pub struct CountArgs {
    #[command(flatten)]
    pub src: SourceArgs,

    /// Print one JSON object at the end instead of the table (no status lines).
    #[arg(long)]
    pub json: bool,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// What one worker saw, by the queue that captured each packet (with
/// offloading a worker also gets chunks of other queues).
#[derive(Default)]
struct Count {
    /// Packets and bytes, indexed by queue number.
    by_queue: Vec<[u64; 2]>,
}

impl Handler for Count {
    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        let q = usize::from(p.queue().0);
        if q >= self.by_queue.len() {
            self.by_queue.resize(q + 1, [0, 0]);
        }
        self.by_queue[q][0] += 1;
        self.by_queue[q][1] += u64::from(p.wire_len());
    }
}

pub fn run(args: CountArgs) -> anyhow::Result<ExitCode> {
    let metrics = args.metrics.bind()?;
    let engine = args.src.engine()?;
    let info = engine.info().clone();
    let pool = *engine.pool_config();
    let placements: Vec<String> = engine.placements().iter().filter(|p| p.capture_cpu.is_some()).map(|p| p.to_string()).collect();
    if !placements.is_empty() && !args.json {
        eprintln!("weir count: placement {}", placements.join("; "));
    }
    let report = run_to_end(engine, "count", &args.src.live, args.quiet || args.json, metrics, |_q| Count::default())?;
    // The workers' own counts must be what the engine says each queue delivered.
    // A worker that panicked returned no counts; its error is reported below instead.
    let stats = &report.stats;
    let clean = report.errors.is_empty();
    let all_workers = report.handlers.len() == stats.queues.len();
    for q in &stats.queues {
        let i = usize::from(q.queue.0);
        let (packets, bytes) = report.handlers.iter().filter_map(|(_, c)| c.by_queue.get(i)).fold((0, 0), |(p, b), c| (p + c[0], b + c[1]));
        let workers_disagree = all_workers && (packets != q.delivered || bytes != q.delivered_bytes);
        if !q.balanced() || (clean && q.in_flight != 0) || workers_disagree {
            bail!("internal accounting error on queue {}: engine {q:?}, workers counted {packets} packets {bytes} bytes", q.queue);
        }
    }
    let total = stats.total();
    if args.json {
        out!("{}", json_report(&report, &info.name, info.link_type.to_string(), &total, &placements));
    } else {
        print_table("count", &report, &format!("{} ({}, pool {pool})", info.name, info.link_type), &total);
    }
    finish(&report)
}

/// The exit code of a finished run: its first error, as bad input (exit 2) when the
/// trace was malformed. Shared by the commands that print `count`'s report.
pub(crate) fn finish<H>(report: &Report<H>) -> anyhow::Result<ExitCode> {
    match report.error() {
        None => Ok(ExitCode::SUCCESS),
        Some(e) if report.failed_on_bad_input() => Err(bad_input(anyhow::anyhow!("{e}"))),
        Some(e) => bail!("{e}"),
    }
}

/// The per-queue table and the summary line; `cmd` names the command in the heading.
pub(crate) fn print_table<H>(cmd: &str, report: &Report<H>, title: &str, total: &QueueStats) {
    out!("weir {cmd}: {title}");
    out!(
        "{:>6} {:>12} {:>12} {:>10} {:>13} {:>14} {:>9} {:>14}",
        "queue",
        "received",
        "delivered",
        "filtered",
        "capture_drops",
        "delivery_drops",
        "in_flight",
        "bytes"
    );
    let row = |name: String, q: &QueueStats| {
        out!(
            "{name:>6} {:>12} {:>12} {:>10} {:>13} {:>14} {:>9} {:>14}",
            q.received,
            q.delivered,
            q.filtered,
            q.capture_drops,
            q.delivery_drops,
            q.in_flight,
            q.delivered_bytes
        )
    };
    for q in &report.stats.queues {
        row(q.queue.to_string(), q);
    }
    if report.stats.queues.len() > 1 {
        row("total".into(), total);
    }
    if total.offloaded > 0 {
        out!("offloading: {} packets handed to a buddy queue's worker", total.offloaded);
    }
    if let Some(b) = &report.balance {
        out!(
            "rebalancing: {} bucket(s) moved ({} started), {} packets parked while their bucket moved, {} dropped for want of room",
            b.buckets_moved,
            b.moves_started,
            b.parked,
            b.park_drops + b.handover_drops
        );
    }
    if report.unreached_bytes > 0 {
        out!(
            "{} bytes of the input were read but not reached when the run stopped (a partial record or data read ahead): \
             a pipe or socket cannot be read again, so they are lost",
            report.unreached_bytes
        );
    }
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    out!(
        "{} packets, {} bytes in {:.3} s: {}pps, {}bit/s ({})",
        total.delivered,
        total.delivered_bytes,
        secs,
        human_rate(total.delivered as f64 / secs),
        human_rate(total.delivered_bytes as f64 * 8.0 / secs),
        report.stop
    );
}

/// The `--json` object; other commands add their own fields before printing it.
pub(crate) fn json_report<H>(report: &Report<H>, name: &str, link: String, total: &QueueStats, placements: &[String]) -> serde_json::Value {
    let queues: Vec<_> = report
        .stats
        .queues
        .iter()
        .map(|q| {
            let mut o = serde_json::Map::from_iter([("queue".to_string(), json!(q.queue.0))]);
            o.extend(q.fields().map(|(k, v)| (k.to_string(), json!(v))));
            serde_json::Value::Object(o)
        })
        .collect();
    let secs = report.elapsed.as_secs_f64();
    json!({
        "source": name,
        "link_type": link,
        "packets": total.delivered,
        "bytes": total.delivered_bytes,
        "elapsed_s": secs,
        "pps": if secs > 0.0 { total.delivered as f64 / secs } else { 0.0 },
        "received": total.received,
        "filtered": total.filtered,
        "capture_drops": total.capture_drops,
        "delivery_drops": total.delivery_drops,
        "offloaded": total.offloaded,
        "unreached_bytes": report.unreached_bytes,
        "rebalance": report.balance.map(|b| json!({
            "moves_started": b.moves_started,
            "buckets_moved": b.buckets_moved,
            "parked": b.parked,
            "park_drops": b.park_drops,
            "handover_drops": b.handover_drops,
            "parked_bytes_peak": b.parked_bytes_peak,
        })),
        "stop": report.stop.to_string(),
        "placement": placements,
        "error": report.error().map(|e| e.to_string()),
        "queues": queues,
    })
}
