//! `weir forward IN OUT`: packets from one interface out of another (or back
//! out of the same one), inline, with a filter deciding what passes; with
//! `--bidirectional` both ways at once, as a bump in the wire. The data path
//! and its counting are the library's ([`weir::forward`]); this module parses
//! the options, runs it until Ctrl-C or a limit, and reports.

use crate::args;
use crate::exit::{bad_input, out};
use crate::run::human_rate;
use anyhow::anyhow;
use clap::Args;
use serde_json::json;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use weir::forward::{Backend, ForwardOptions, ForwardReport, Forwarder, LaneStats, PassAll};
use weir::source::ZeroCopy;

#[derive(Args, Debug)]
#[command(
    long_about = "Forward packets received on IN out of OUT (IN and OUT may be the same interface: packets go back \
out where they came in), inline: each packet passes the -f filter or is dropped. With --bidirectional, packets \
received on OUT go out of IN as well, so weir sits between two segments as a bump in the wire. One thread per \
direction and RX queue (a lane): queue q of IN is forwarded to queue q of OUT.",
    after_help = "Backends:\n  afxdp     AF_XDP sockets on both interfaces over one shared UMEM: a received frame is put on the \
TX ring by its address, with no copy in weir, and goes back to the fill ring once the kernel completes it. weir's XDP \
program is attached to IN (and OUT with --bidirectional) and takes every packet of it from the host's stack. On a \
veth pair, the peer of an interface that receives must send with XDP only if that interface has an XDP program \
(weir's does), and the peer of OUT receives ordinary frames; a veth whose peer has no XDP program drops frames \
redirected to it with XDP (XDP_TX or a redirect), which is why the generator's interface needs one. Zero-copy where \
the driver has it; copy mode (veth) has the kernel copy in and out of the UMEM.\n  afpacket  a TPACKET_V3 RX ring on \
IN and a PACKET_TX_RING on OUT: each packet is copied once, from the RX block into a TX slot.\n  xdp       in the \
kernel: weir's XDP program on IN runs the filter (translated to eBPF) and redirects what it passes to OUT through a \
device map; no packet reaches weir, no copy, no system call per packet. The fastest, where nothing but the filter \
decides. Needs native XDP on IN (and on OUT with --bidirectional) and a filter the kernel can run (not protochain); \
OUT must take XDP frames (a veth's peer needs an XDP program or GRO on: ethtool -K PEER gro on). What OUT gives back \
is counted in tx_failed from the kernel's XDP tracepoints; a frame longer than OUT's MTU allows is counted in \
tx_failed and dropped by the program, as on the other backends.\n\n\
Counters, per lane: received (taken off the RX ring) = forwarded (the device took it) + filtered (the -f filter \
rejected it: dropped by policy) + dropped (the application's verdict) + tx_failed (OUT cannot carry it: longer \
than its MTU plus 14 bytes, 18 with a VLAN tag, or shorter than an Ethernet header, on every backend; or the kernel \
or device gave up sending it) + in_flight (handed to TX, not completed when weir stopped); weir checks that sum. kernel_drops: packets \
the kernel lost before the RX ring (no free frame or ring slot: weir fell behind), not in received.\n\n\
Interfaces should carry no IP address (a bump in the wire has none): with afxdp the host no longer sees their \
traffic. Errors: a missing or down interface, an MTU whose frames do not fit a UMEM frame (afxdp: 2048-byte frames \
hold 1792 bytes; --frame-size 4096), IN with more queues than OUT, --bidirectional with IN = OUT, and no root \
(CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF) are refused before anything is attached.\n\n\
Examples:\n  weir forward eth1 eth2\n  weir forward eth1 eth2 -f 'not port 22' --bidirectional\n  \
weir forward --backend afpacket eth1 eth2 -d 60 --json\n  weir forward eth1 eth1 -f 'udp'   (back out of eth1)\n  \
weir forward --backend xdp eth1 eth2 -f 'not udp port 53'   (in the kernel)"
)]
pub struct ForwardArgs {
    /// The interface packets come in on.
    #[arg(value_name = "IN")]
    pub input: String,

    /// The interface they go out of (IN itself sends them back out).
    #[arg(value_name = "OUT")]
    pub output: String,

    /// Forward OUT to IN too, at the same time (a bump in the wire).
    #[arg(long)]
    pub bidirectional: bool,

    /// afxdp (no copy in weir), afpacket (one copy) or xdp (in the kernel, no packet reaches weir).
    #[arg(long, value_name = "afxdp|afpacket|xdp", default_value = "afxdp")]
    pub backend: Backend,

    /// Forward only packets matching this libpcap filter expression (as in tcpdump); the rest are
    /// dropped and counted as filtered.
    #[arg(short = 'f', long = "filter", value_name = "EXPR")]
    pub filter: Option<String>,

    /// What runs the filter: jit or interp (as for the capturing commands).
    #[arg(long, value_name = "jit|interp", default_value = "jit")]
    pub filter_engine: weir::filter::FilterEngine,

    /// Stop after N packets received (all lanes together).
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Stop after this many seconds (fractions allowed; at most ten years).
    #[arg(short = 'd', long = "duration", value_name = "SECS", value_parser = args::seconds(0.001))]
    pub duration: Option<Duration>,

    /// Open the interfaces inside this network namespace (a name from `ip netns`, or a path).
    #[arg(long, value_name = "NS")]
    pub netns: Option<std::path::PathBuf>,

    /// Do not put the receiving interfaces in promiscuous mode.
    #[arg(short = 'p', long = "no-promisc")]
    pub no_promisc: bool,

    /// afxdp: UMEM frame size, 2048 or 4096.
    #[arg(long, value_name = "BYTES", default_value_t = 2048, value_parser = clap::value_parser!(u16).range(2048..=4096))]
    pub frame_size: u16,

    /// afxdp: UMEM frames per lane, a power of two (64 to 1048576); every ring of the lane has as many
    /// entries. afpacket: TX ring slots, and the RX ring holds about as many full frames.
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(64..=1 << 20))]
    pub frames: u32,

    /// afxdp: zero-copy: auto (where the driver supports it), on, off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub zero_copy: String,

    /// afxdp: replace an XDP program on the interfaces that weir did not load.
    #[arg(long)]
    pub replace_xdp: bool,

    /// afxdp: forward from an interface that has an IP address. What weir's XDP program takes from an
    /// interface never reaches the host's stack (an SSH session over it would hang), so such an interface
    /// is refused unless told; a bump in the wire has no addresses.
    #[arg(long)]
    pub take_host_traffic: bool,

    /// Print one JSON object at the end instead of the table (no status lines).
    #[arg(long)]
    pub json: bool,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

pub fn run(a: ForwardArgs) -> anyhow::Result<ExitCode> {
    let metrics = a.metrics.bind()?;
    let zero_copy = match a.zero_copy.as_str() {
        "auto" => ZeroCopy::Auto,
        "on" => ZeroCopy::On,
        "off" => ZeroCopy::Off,
        z => return Err(bad_input(anyhow!("--zero-copy {z:?}: expected auto, on or off"))),
    };
    let opts = ForwardOptions {
        input: a.input.clone(),
        output: a.output.clone(),
        bidirectional: a.bidirectional,
        backend: a.backend,
        filter: a.filter.clone(),
        filter_engine: a.filter_engine,
        netns: a.netns.clone(),
        packet_limit: a.count,
        time_limit: a.duration,
        promisc: !a.no_promisc,
        frame_size: usize::from(a.frame_size),
        frames: a.frames as usize,
        zero_copy,
        replace_foreign: a.replace_xdp,
        take_host_traffic: a.take_host_traffic,
    };
    let fwd = Forwarder::open(opts).map_err(|e| {
        let bad = matches!(e.kind(), weir::SourceErrorKind::BadInput | weir::SourceErrorKind::NoSuchDevice | weir::SourceErrorKind::Memory);
        let e = anyhow::Error::new(e).context(format!("weir forward {} {}", a.input, a.output));
        if bad {
            bad_input(e)
        } else {
            e
        }
    })?;
    for note in fwd.notes() {
        eprintln!("weir: {note}");
    }
    let lanes = fwd.lanes();
    let running = fwd.start(|_, _| PassAll)?;
    let stop = running.stop_handle();
    crate::run::on_signal(move || stop.stop())?;
    eprintln!("weir forward: listening on {} lane(s): {} ({})", lanes.len(), lanes.join(", "), a.backend);
    crate::metrics::serve(metrics, weir_metrics::ForwardMetrics::new(running.watch()))?;
    crate::notify::ready(&format!("weir forward: forwarding on {} lane(s)", lanes.len()));
    let mut last = LaneStats::sum("total", &running.stats());
    let mut last_at = Instant::now();
    while !running.finished() {
        std::thread::sleep(Duration::from_millis(100));
        if !(a.quiet || a.json) && last_at.elapsed() >= Duration::from_secs(1) {
            let now = LaneStats::sum("total", &running.stats());
            let dt = last_at.elapsed().as_secs_f64();
            let pps = |n: u64, m: u64| human_rate(n.saturating_sub(m) as f64 / dt);
            eprintln!(
                "[{:>6.1}s] received {}pps forwarded {}pps filtered {} dropped {} tx_failed {} kernel_drops {}",
                running.elapsed().as_secs_f64(),
                pps(now.received, last.received),
                pps(now.forwarded, last.forwarded),
                now.filtered,
                now.dropped,
                now.tx_failed,
                now.kernel_drops
            );
            (last, last_at) = (now, Instant::now());
        }
    }
    crate::notify::stopping();
    let report = running.join();
    print_report(&report, &a);
    let total = LaneStats::sum("total", &report.lanes);
    if let Some(bad) = report.lanes.iter().find(|l| !l.balanced()) {
        anyhow::bail!("internal accounting error: {bad:?}");
    }
    match report.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(anyhow::Error::new(e).context(format!("weir forward: stopped after {} packets", total.received))),
    }
}

fn lane_json(l: &LaneStats) -> serde_json::Value {
    json!({
        "lane": l.lane, "received": l.received, "received_bytes": l.received_bytes, "forwarded": l.forwarded,
        "forwarded_bytes": l.forwarded_bytes, "filtered": l.filtered, "dropped": l.dropped, "tx_failed": l.tx_failed,
        "in_flight": l.in_flight, "kernel_drops": l.kernel_drops, "balanced": l.balanced(),
    })
}

fn print_report(r: &ForwardReport, a: &ForwardArgs) {
    let total = LaneStats::sum("total", &r.lanes);
    if a.json {
        let mut v = lane_json(&total);
        v["backend"] = json!(a.backend.to_string());
        v["lanes"] = json!(r.lanes.iter().map(lane_json).collect::<Vec<_>>());
        v["elapsed_s"] = json!(r.elapsed.as_secs_f64());
        v["error"] = json!(r.error.as_ref().map(ToString::to_string));
        out!("{v}");
        return;
    }
    out!(
        "weir forward: {} -> {}{} ({}), {:.1} s",
        a.input,
        a.output,
        if a.bidirectional { " and back" } else { "" },
        a.backend,
        r.elapsed.as_secs_f64()
    );
    out!(
        "{:>28} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>13}",
        "lane",
        "received",
        "forwarded",
        "filtered",
        "dropped",
        "tx_failed",
        "in_flight",
        "kernel_drops"
    );
    let row = |l: &LaneStats| {
        out!(
            "{:>28} {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>13}",
            l.lane,
            l.received,
            l.forwarded,
            l.filtered,
            l.dropped,
            l.tx_failed,
            l.in_flight,
            l.kernel_drops
        )
    };
    r.lanes.iter().for_each(row);
    if r.lanes.len() > 1 {
        row(&total);
    }
    out!(
        "received {} = forwarded {} + filtered {} + dropped {} + tx_failed {} + in_flight {}: {}",
        total.received,
        total.forwarded,
        total.filtered,
        total.dropped,
        total.tx_failed,
        total.in_flight,
        if total.balanced() { "balanced" } else { "NOT BALANCED" }
    );
}
