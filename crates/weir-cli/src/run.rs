//! What every capturing command shares: the source options, building the engine,
//! Ctrl-C, the once-a-second status and the progress bar.

use crate::args;
use crate::exit::{bad_input, build_error, setting_error};
use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use weir::engine::CpuPlan;
use weir::engine::{Report, Running, StopHandle};
use weir::source::{AfPacketOptions, AfXdpOptions, Fanout, LiveOptions, Pacing, XdpOptions, ZeroCopy};
use weir::stats::{QueueStats, Snapshot};
use weir::{Engine, Handler, PoolConfig};
use weir_metrics::{EngineMetrics, Listener};

/// Options of every command that captures from a source.
#[derive(Args, Clone, Debug)]
pub struct SourceArgs {
    /// Where packets come from: `trace.pcap`, `trace.pcap@0-3` (split into 4 queues by a
    /// symmetric RSS hash, both directions of a flow on one queue), `trace.pcap@2` (only
    /// queue 2 of 3), `file:PATH[@RANGE]`, or `-` for a trace on standard input.
    #[arg(value_name = "SOURCE")]
    pub source: String,

    /// Keep only packets matching this libpcap filter expression (as in tcpdump), e.g.
    /// 'tcp port 443' or 'udp and not port 53'. Rejected packets are counted as filtered.
    #[arg(short = 'f', long = "filter", value_name = "EXPR")]
    pub filter: Option<String>,

    /// What runs the -f filter (and the stream classes' filters) on each packet where weir
    /// filters in user space (traces, and afxdp after its XDP program's filter; afpacket filters
    /// in the kernel): `jit` compiles
    /// the BPF program libpcap makes of the expression to x86-64 machine code once, then runs
    /// it natively, several times faster than `interp`, weir's interpreter of the same
    /// program, which gives the same answer on every packet. Where the JIT cannot be had
    /// (another architecture, or no executable memory), weir says so and interprets.
    #[arg(long, value_name = "jit|interp", default_value = "jit")]
    pub filter_engine: weir::filter::FilterEngine,

    /// Stop after N packets have passed the filter (all queues together).
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,

    /// Stop after this many seconds (fractions allowed; at most ten years). From a pipe or
    /// FIFO, counted from the start of the wait for its header (and for a FIFO's first writer),
    /// which it ends too, as Ctrl-C does.
    #[arg(short = 'd', long = "duration", value_name = "SECS", value_parser = args::seconds(0.001))]
    pub duration: Option<Duration>,

    /// Replay at N packets per second instead of top speed (0.001 to 10^9). A paced source
    /// drops what finds no free cell (a capture drop), like a NIC; at top speed it waits instead.
    #[arg(long, value_name = "N", group = "pace", value_parser = args::float_in(0.001, 1e9))]
    pub pps: Option<f64>,

    /// Replay at N Mbit/s of wire bytes (0.001 to 10^7).
    #[arg(long, value_name = "N", group = "pace", value_parser = args::float_in(0.001, 1e7))]
    pub mbps: Option<f64>,

    /// Replay at X times the recorded timing (2 = twice as fast), as tcpreplay does
    /// (0.000001 to 10^6).
    #[arg(long, value_name = "X", group = "pace", value_parser = args::float_in(1e-6, 1e6))]
    pub speed: Option<f64>,

    /// Pool per queue as M,R: R chunks of M cells (default 256,128 = WireCAP-B-(256,128),
    /// which absorbs a burst of 32,768 packets per queue).
    #[arg(long, value_name = "M,R")]
    pub pool: Option<String>,

    /// How a trace file is read: `map` maps it and walks it in place with no copy, its page
    /// tables filled ahead (on a thread of its own where there is a second CPU); `walk` maps it
    /// and parses its records on a thread of their own ahead of the capture thread; `read`
    /// copies it ahead into blocks with read(2) on a thread of its own. `auto` maps a regular
    /// file (here 0.5-0.87x the time of reading, on one CPU or two), walks it on its own thread
    /// where there is a second CPU and the page cache holds it in large folios (0.91x the time
    /// of `map` on the main job), and reads anything else. A pipe or standard input is always
    /// read. A mapped trace's cached pages count in the process's resident memory (RssFile), as
    /// any mapped file's do; they are the page cache's, not weir's.
    #[arg(long, value_name = "auto|map|walk|read", default_value = "auto")]
    pub trace_access: weir::source::file::TraceAccess,

    /// Run each queue's work on the thread that reads the trace, with no worker threads: the
    /// reading and the work take turns on one thread, after each chunk of packets, with no
    /// hand-off between CPUs. A trace of one queue then runs on one thread (beside the trace
    /// reader's helpers): on a machine whose other CPUs are busy, or to count the work alone.
    /// Traces only; not with --locality or a --balance other than basic.
    #[arg(long)]
    pub inline: bool,

    /// Pin each queue's capture thread and worker: `auto` (where the NIC serves the
    /// queue's interrupt when known, else spread), or a CPU list taken two per queue
    /// (capture, worker), e.g. 0,1,2,3.
    #[arg(long, value_name = "auto|LIST")]
    pub cpus: Option<String>,

    /// How queues share load. `basic`: each queue keeps its own pool. `offload:T`:
    /// WireCAP's advanced mode, a queue more than T% full hands chunks to the
    /// least-loaded queue (no copy; flows may then run on two workers). `rebalance`:
    /// flow buckets move away from a lastingly overloaded queue, each flow whole and
    /// in order (every source; on afpacket it implies --fanout buckets).
    /// `rebalance:T`: both, offloading as last resort.
    #[arg(long, value_name = "MODE", default_value = "basic")]
    pub balance: String,

    /// Locality buffering: each worker gathers at least B packets (whole chunks)
    /// and delivers them sorted by the smaller of their two ports, so the
    /// application handles one service at a time and its caches stay warm.
    /// Packets of one flow keep their order; timestamps are untouched, so they
    /// are no longer monotonic across flows. Off by default (strict order).
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u32).range(1..=i64::from(weir::locality::MAX_BATCH)))]
    pub locality: Option<u32>,

    /// With --locality: longest a packet waits for its batch to fill (1 to 3,600,000).
    #[arg(long, value_name = "MS", default_value_t = 50, requires = "locality", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub locality_timeout_ms: u64,

    /// With --locality: gather the next batch while one is delivered (the
    /// double-buffered variant).
    #[arg(long, requires = "locality")]
    pub locality_double: bool,

    #[command(flatten)]
    pub live: LiveArgs,
}

/// Options of live interfaces (`afpacket:IF`, `afxdp:IF`, `xdp:IF`, or a bare interface name).
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Live capture")]
pub struct LiveArgs {
    /// Bytes kept of each packet (as tcpdump -s; 1 to 262144).
    #[arg(short = 's', long, value_name = "BYTES", default_value_t = 262_144,
          value_parser = clap::value_parser!(u32).range(1..=weir::MAX_CAPLEN as i64))]
    pub snaplen: u32,

    /// Do not put the interface in promiscuous mode (as tcpdump -p).
    #[arg(short = 'p', long = "no-promisc")]
    pub no_promisc: bool,

    /// Open the interface inside this network namespace (a name from `ip netns`, or
    /// a path like /proc/PID/ns/net).
    #[arg(long, value_name = "NS")]
    pub netns: Option<std::path::PathBuf>,

    /// afpacket: how the queues' sockets share traffic: hash (the kernel's symmetric
    /// flow hash: both directions of a flow on one queue), cpu, qm (by RX queue), lb,
    /// or buckets (weir's eBPF fanout program: weir's own symmetric RSS hash into 512
    /// buckets and a table of bucket -> queue; `ebpf` is an alias).
    #[arg(long, value_name = "MODE", default_value = "hash")]
    pub fanout: String,

    /// afpacket: a full socket's packets go to the next one (PACKET_FANOUT_FLAG_ROLLOVER).
    #[arg(long)]
    pub rollover: bool,

    /// afpacket: ring block size in KiB (a power of two, 4 to 1048576).
    #[arg(long, value_name = "KIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(4..=1 << 20))]
    pub block_kib: u64,

    /// afpacket: ring blocks per queue (default 64: 64 MiB per queue, 32 times libpcap's
    /// default). Rings and pools together must fit in 80% of the memory available, checked
    /// before anything is allocated: the kernel allocates rings whole, outside any process limit.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub blocks: u32,

    /// afpacket: the kernel hands a block over when full or this many milliseconds old
    /// (1 to 3,600,000). Longer lets a stalled reader's ring fill by size (more burst
    /// absorbed); shorter shows a quiet queue's packets sooner.
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub block_timeout: u64,

    /// afxdp: UMEM frame size, 2048 or 4096.
    #[arg(long, value_name = "BYTES", default_value_t = 2048, value_parser = clap::value_parser!(u16).range(2048..=4096))]
    pub frame_size: u16,

    /// afxdp: RX ring entries (a power of two up to 16777216; the pool's R×M frames must
    /// exceed it), the fill ring twice as many. By default both hold the whole pool (R×M
    /// rounded up to a power of two), so the kernel can fill every frame of the pool while
    /// weir's threads do not run: a paused reader loses nothing until the pool is full.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1 << 24))]
    pub ring_size: Option<u32>,

    /// afxdp: zero-copy: auto (where the driver supports it), on, off.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub zero_copy: String,

    /// xdp: bytes of the ring buffer the XDP program copies packets into, in MiB (a power of two, 1 to
    /// 2048), one ring for all the captured queues. By default 64 MiB per queue, afpacket's default,
    /// rounded up to a power of two. A 64-byte frame takes 88 bytes of it (afpacket's ring: 160), and the
    /// kernel fills it while weir is paused: a stalled reader loses nothing until it is full. Checked
    /// against the memory available before anything is allocated.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=2048))]
    pub xdp_ring: Option<u64>,

    /// xdp: how the capture thread spreads packets over the queues: hash (weir's symmetric RSS hash, as a
    /// trace is split: both directions of a flow on one queue, and the queues share the work even when the
    /// NIC puts every flow on one RX queue; rebalancing moves its buckets) or queue (by the RX queue the NIC
    /// chose, as afxdp).
    #[arg(long, value_name = "hash|queue", default_value = "hash")]
    pub xdp_spread: weir::source::XdpSpread,

    /// afxdp, xdp: replace an XDP program on the interface that weir did not load.
    #[arg(long)]
    pub replace_xdp: bool,

    /// afxdp: capture an interface that has an IP address. AF_XDP takes the packets it captures away from
    /// the host's network stack (an SSH session over the interface would hang, ARP would stop answering), so
    /// weir refuses such an interface unless told to take them. The filter (-f) runs in the kernel, and what
    /// it rejects still reaches the host: `-f 'not port 22'` keeps a session alive. afpacket copies packets
    /// and never needs this. xdp copies packets and lets them go on to the host; with this it drops what it
    /// stored, so the host's stack spends nothing on the captured traffic.
    #[arg(long)]
    pub take_host_traffic: bool,

    /// What stamps live packets. afxdp gets no timestamp from the kernel: tsc (the default where the CPU's
    /// time-stamp counter is invariant) reads the TSC for each packet, about 10 ns, calibrated against
    /// CLOCK_REALTIME and kept within microseconds of it; clock reads CLOCK_REALTIME once per batch of up to 64
    /// packets, which then share it. afpacket: kernel only, the time the kernel received each packet. Trace
    /// files keep the times they hold.
    #[arg(long, value_name = "kernel|tsc|clock")]
    pub timestamps: Option<weir::clock::Timestamps>,

    /// Drop root for this user once the capture sockets are open (as tcpdump -Z).
    #[arg(short = 'Z', long = "user", value_name = "USER")]
    pub user: Option<String>,
}

impl LiveArgs {
    pub fn options(&self) -> anyhow::Result<LiveOptions> {
        let fanout: Fanout = self.fanout.parse().map_err(|e| setting_error(&e))?;
        let zero_copy = match self.zero_copy.as_str() {
            "auto" => ZeroCopy::Auto,
            "on" => ZeroCopy::On,
            "off" => ZeroCopy::Off,
            z => return Err(bad_input(anyhow::anyhow!("--zero-copy {z:?}: expected auto, on or off"))),
        };
        Ok(LiveOptions {
            snaplen: self.snaplen,
            promisc: !self.no_promisc,
            netns: self.netns.clone(),
            afpacket: AfPacketOptions {
                block_bytes: (self.block_kib * 1024) as usize,
                block_count: self.blocks as usize,
                block_timeout: Duration::from_millis(self.block_timeout),
                fanout,
                rollover: self.rollover,
            },
            afxdp: AfXdpOptions {
                frame_size: usize::from(self.frame_size),
                ring_size: self.ring_size,
                zero_copy,
                need_wakeup: true,
                replace_foreign: self.replace_xdp,
                take_host_traffic: self.take_host_traffic,
            },
            xdp: XdpOptions {
                ring_bytes: self.xdp_ring.map(|m| m << 20),
                spread: self.xdp_spread,
                replace_foreign: self.replace_xdp,
                take_host_traffic: self.take_host_traffic,
            },
            kernel_flows: 0,
            timestamps: self.timestamps,
        })
    }
}

/// The kernel cutoff's options, for the commands on the stream layer.
#[derive(Args, Debug)]
pub struct KernelCutoffArgs {
    /// Drop a stream's packets in the kernel once it is past its cutoff, and count them there (on by default): on a
    /// live source (afxdp, afpacket), once a stream passed its cutoff (--cutoff; flows: at once) weir installs it
    /// in an eBPF flow map, and the kernel drops its packets before
    /// they reach weir (in the XDP program for afxdp, a socket filter for afpacket), all but TCP SYN, FIN and
    /// RST, counting them in the map; weir adds the counts to the stream's record, so records and statistics
    /// are the same as with off, the cutoff in user space only. Trace files have no kernel to do it in: there
    /// it is off whatever is said. With --filter it is off too: a filter may tell apart packets of one
    /// stream, which the kernel's counts could not (and an afpacket socket holds one filter).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub kernel_cutoff: bool,

    /// Most stream directions in the kernel cutoff's flow map at once (each about 160 bytes of kernel memory,
    /// checked against what is available). When it is full, the installed connection whose inactive timeout
    /// would end first, of those seen least recently, makes room (its counts read into its records), or else
    /// the stream stays with the user-space cutoff: exact either way.
    #[arg(long, value_name = "N", default_value_t = 65_536, value_parser = clap::value_parser!(u32).range(1..=1 << 24))]
    pub kernel_flows: u32,

    /// Packets of a stream direction that reach weir before it is installed in the kernel cutoff's flow map, once
    /// past its cutoff (1: at once). An install and the read of its counts at the end cost a system call each, a
    /// few microseconds: more than weir spends on a few packets, so short directions cost less left in user space,
    /// and the map keeps its room for the long ones that carry most packets.
    #[arg(long, value_name = "N", default_value_t = weir::stream::KERNEL_INSTALL_AFTER,
          value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub kernel_install_after: u64,
}

impl KernelCutoffArgs {
    /// Entries of the flow map to ask the source for (0: no kernel cutoff).
    pub fn entries(&self) -> u32 {
        if self.kernel_cutoff {
            self.kernel_flows
        } else {
            0
        }
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: on or off")),
    }
}

impl SourceArgs {
    pub fn pacing(&self) -> anyhow::Result<Pacing> {
        let p = match (self.pps, self.mbps, self.speed) {
            (Some(v), _, _) => Pacing::Pps(v),
            (_, Some(v), _) => Pacing::Mbps(v),
            (_, _, Some(v)) => Pacing::Speed(v),
            _ => Pacing::TopSpeed,
        };
        p.checked().map_err(|e| setting_error(&e))
    }

    /// `--pool` when given: without it the engine picks (and raises the default
    /// for locality buffering).
    pub fn pool_config(&self) -> anyhow::Result<Option<PoolConfig>> {
        let Some(s) = &self.pool else { return Ok(None) };
        s.parse().map(Some).map_err(|e| bad_input(anyhow::anyhow!("--pool {s:?}: {e}")))
    }

    fn locality_config(&self) -> anyhow::Result<Option<weir::locality::LocalityConfig>> {
        let Some(b) = self.locality else { return Ok(None) };
        let batch = weir::locality::BatchSize::new(b).map_err(|e| setting_error(&e))?;
        let timeout = Duration::from_millis(self.locality_timeout_ms);
        Ok(Some(weir::locality::LocalityConfig { batch, timeout, double_buffer: self.locality_double }))
    }

    /// Build the engine: parse the source, open it, compile the filter.
    pub fn engine(&self) -> anyhow::Result<Engine> {
        self.engine_with_memory(weir::memory::Plan::new())
    }

    /// [`engine`](Self::engine) for an application that will allocate `app`
    /// beside the engine: checked with the engine's memory, before either is allocated.
    pub fn engine_with_memory(&self, app: weir::memory::Plan) -> anyhow::Result<Engine> {
        self.engine_with(app, 0)
    }

    /// [`engine_with_memory`](Self::engine_with_memory) with the kernel
    /// cutoff's flow map of `kernel_flows` entries on a live source (0: none).
    pub fn engine_with(&self, app: weir::memory::Plan, kernel_flows: u32) -> anyhow::Result<Engine> {
        let balance: weir::BalanceMode = self.balance.parse().map_err(|e| setting_error(&e))?;
        let spec: weir::source::SourceSpec = self.source.parse().map_err(|e| spec_error(&self.source, e))?;
        let kernel_table = matches!(spec, weir::source::SourceSpec::Live { kind: weir::source::LiveKind::AfPacket, .. });
        if let (Some(t), weir::source::SourceSpec::File { .. }) = (self.live.timestamps, &spec) {
            return Err(bad_input(anyhow::anyhow!("--timestamps {t}: {} is a trace, whose packets keep the times it holds", self.source)));
        }
        if let (Some(user), Some(_), true) = (&self.live.user, balance.controller(), kernel_table) {
            // Moving a bucket is a bpf(2) call on every controller tick, which Debian's
            // default kernel.unprivileged_bpf_disabled refuses to anyone but root.
            // (afxdp steers buckets in its own threads and needs nothing after the start.)
            return Err(bad_input(anyhow::anyhow!(
                "-Z {user} with --balance {}: an afpacket capture that rebalances keeps changing the kernel's bucket table, \
                 which needs root (CAP_BPF) for the whole run; leave out -Z, use afxdp, or use --balance offload:T",
                self.balance
            )));
        }
        let mut b = Engine::builder()
            .application_memory(app)
            .source_spec(spec)
            .pacing(self.pacing()?)
            .balance(balance)
            .locality(self.locality_config()?)
            // With a filter the engine gives the stream layer no kernel cutoff: no map either.
            .live(LiveOptions { kernel_flows: if self.filter.is_some() { 0 } else { kernel_flows }, ..self.live.options()? });
        if let Some(p) = self.pool_config()? {
            b = b.pool(p);
        }
        b = b.trace_access(self.trace_access).inline(self.inline);
        if let Some(c) = &self.cpus {
            b = b.cpus(c.parse::<CpuPlan>().map_err(|e| setting_error(&e))?);
        }
        if let Some(f) = &self.filter {
            b = b.filter(f.clone()).filter_engine(self.filter_engine);
        }
        if let Some(n) = self.count {
            b = b.packet_limit(n);
        }
        if let Some(d) = self.duration {
            b = b.time_limit(d);
        }
        if let Some(p) = crate::profile::profiler() {
            b = b.profile(p);
        }
        // Ctrl-C must also end the wait for a pipe's header (or a FIFO's first
        // writer), which the build does.
        stop_building_on_signal(b.stop_handle())?;
        let engine = b.build().map_err(build_error)?;
        for note in &engine.info().notes {
            eprintln!("weir: {note}");
        }
        Ok(engine)
    }
}

/// A source name that does not parse, said once: the library's message names
/// the source itself when it can, and is prefixed with it otherwise.
pub fn spec_error(source: &str, e: weir::source::SpecError) -> anyhow::Error {
    let quoted = format!("{source:?}");
    let msg = e.to_string();
    if msg.contains(&quoted) {
        bad_input(anyhow::anyhow!(msg))
    } else {
        bad_input(anyhow::anyhow!("source {quoted}: {msg}"))
    }
}

/// Run the engine to its end as every capturing command does: one handler per
/// queue from `make`, root dropped (`-Z`) once the sockets are open, Ctrl-C
/// stopping it, "listening on" for live sources, status lines unless `quiet`.
/// Metrics are served on `metrics` (bound by `--metrics`) once the engine runs.
pub fn run_to_end<H: Handler>(
    engine: Engine,
    cmd: &str,
    live: &LiveArgs,
    quiet: bool,
    metrics: Option<Listener>,
    make: impl FnMut(weir::QueueId) -> H,
) -> anyhow::Result<Report<H>> {
    run_started(engine.start(make)?, cmd, live, quiet, metrics)
}

/// [`run_to_end`] for an engine its caller started (the stream layer's).
pub fn run_started<H: Handler>(
    running: Running<H>,
    cmd: &str,
    live: &LiveArgs,
    quiet: bool,
    metrics: Option<Listener>,
) -> anyhow::Result<Report<H>> {
    drop_privileges(live)?;
    watch_started(running, cmd, quiet, metrics)
}

/// [`run_started`] for a command that dropped privileges itself (to open
/// its output as the user it runs as, in between).
pub fn watch_started<H: Handler>(running: Running<H>, cmd: &str, quiet: bool, metrics: Option<Listener>) -> anyhow::Result<Report<H>> {
    stop_on_signal(running.stop_handle())?;
    announce(cmd, &running);
    crate::metrics::serve(metrics, EngineMetrics::new(running.watch()))?;
    notify_ready(cmd, &running);
    Monitor::new(&running, quiet).watch(&running, || {});
    crate::notify::stopping();
    Ok(running.join())
}

/// Tell systemd the command is up (`READY=1`, with a status line), for units
/// of `Type=notify`: called once the capture runs, root is dropped and every
/// output is open (files, collectors, the metrics endpoint), as the command
/// settles into watching. Nothing happens without `$NOTIFY_SOCKET`.
pub fn notify_ready<H: Handler>(cmd: &str, running: &Running<H>) {
    let info = running.info();
    crate::notify::ready(&format!("weir {cmd}: capturing from {}, {} queue(s)", info.name, info.queues.len()));
}

/// Say that a live capture is listening, as tcpdump does, once its sockets are open.
pub fn announce<H: Handler>(cmd: &str, running: &Running<H>) {
    let info = running.info();
    if info.iface.is_some() {
        eprintln!("weir {cmd}: listening on {}, link-type {}, {} queue(s)", info.name, info.link_type, info.queues.len());
    }
}

/// `-Z USER`: once the capture sockets are open (after `Engine::start`), become USER.
pub fn drop_privileges(live: &LiveArgs) -> anyhow::Result<()> {
    if let Some(user) = &live.user {
        weir::privileges::drop_to(user).map_err(|e| if e.is_bad_input() { bad_input(e) } else { anyhow::Error::new(e) })?;
    }
    Ok(())
}

/// What the first Ctrl-C (or SIGTERM) does: the command's own action, and
/// stopping the engine being built (whose build may wait for a pipe's header,
/// or a FIFO's first writer).
#[derive(Default)]
struct OnSignal {
    action: Option<Box<dyn Fn() + Send>>,
    building: Option<StopHandle>,
}

/// The process's one Ctrl-C handler (ctrlc takes one), installed by the first
/// command that asks for it, and what it does.
static ON_SIGNAL: Mutex<Option<OnSignal>> = Mutex::new(None);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// Set by a command that takes the signals itself (the sensor, for which
/// SIGHUP reopens files rather than stopping): no Ctrl-C handler is
/// installed then.
static SIGNALS_OWNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The command takes SIGINT, SIGTERM and SIGHUP itself: [`on_signal`] only
/// records its action from now on. Call before building the engine.
pub fn own_signals() {
    // Relaxed: set and read on the main thread, before any handler exists.
    SIGNALS_OWNED.store(true, Ordering::Relaxed);
}

/// Set what the first Ctrl-C (or SIGTERM) does, in place of any action set
/// before; a second one exits at once.
pub fn on_signal(action: impl Fn() + Send + 'static) -> anyhow::Result<()> {
    set_on_signal(|s| s.action = Some(Box::new(action)))
}

fn set_on_signal(set: impl FnOnce(&mut OnSignal)) -> anyhow::Result<()> {
    set(ON_SIGNAL.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(OnSignal::default));
    // Relaxed: see own_signals.
    if SIGNALS_OWNED.load(Ordering::Relaxed) {
        return Ok(());
    }
    INSTALLED
        .get_or_init(|| {
            let hits = AtomicU32::new(0);
            ctrlc::set_handler(move || {
                // Relaxed: a counter only this handler touches.
                if hits.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("\nweir: stopping (press Ctrl-C again to quit at once)");
                    crate::notify::stopping();
                    if let Some(s) = ON_SIGNAL.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                        s.building.iter().for_each(StopHandle::stop);
                        s.action.iter().for_each(|a| a());
                    }
                } else {
                    std::process::exit(130);
                }
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
        .context("cannot install the Ctrl-C handler")
}

/// First Ctrl-C (or SIGTERM) stops the engine cleanly; a second one exits at once.
pub fn stop_on_signal(stop: StopHandle) -> anyhow::Result<()> {
    on_signal(move || stop.stop())
}

/// Ctrl-C (or SIGTERM) stops the engine being built: its build may wait for
/// the header of a trace from a pipe whose writer stays silent, or for a
/// FIFO's first writer. Kept beside the command's own action (`replay` halts
/// its sending too).
fn stop_building_on_signal(stop: StopHandle) -> anyhow::Result<()> {
    set_on_signal(|s| s.building = Some(stop))
}

/// Once a second, a status line per queue and for the total; with a progress bar
/// for finite inputs when stderr is a terminal.
pub struct Monitor {
    bar: Option<ProgressBar>,
    last: Snapshot,
    last_at: Instant,
    quiet: bool,
}

const INTERVAL: Duration = Duration::from_secs(1);

impl Monitor {
    pub fn new<H: Handler>(running: &Running<H>, quiet: bool) -> Monitor {
        let tty = std::io::stderr().is_terminal();
        let bar = match running.progress() {
            Some((_, total)) if total > 0 && tty && !quiet => {
                let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr_with_hz(4));
                b.set_style(
                    ProgressStyle::with_template("{bar:40.cyan/blue} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                Some(b)
            }
            _ => None,
        };
        Monitor { bar, last: running.stats(), last_at: Instant::now(), quiet }
    }

    /// Run until the engine finishes, printing status each second and calling
    /// `tick` four times a second (to stop on an application error, say).
    pub fn watch<H: Handler>(&mut self, running: &Running<H>, mut tick: impl FnMut()) {
        while !running.wait_for(Duration::from_millis(250)) {
            tick();
            if let (Some(bar), Some((done, _))) = (&self.bar, running.progress()) {
                bar.set_position(done);
            }
            if self.last_at.elapsed() >= INTERVAL {
                let now = running.stats();
                let dt = self.last_at.elapsed().as_secs_f64();
                if !self.quiet {
                    let line = status_line(running.elapsed(), &self.last, &now, dt);
                    match &self.bar {
                        Some(bar) => bar.println(line),
                        None => eprintln!("{line}"),
                    }
                }
                self.last = now;
                self.last_at = Instant::now();
            }
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

fn rate(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2}G", n / 1e9),
        n if n >= 1e6 => format!("{:.2}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}k", n / 1e3),
        n => format!("{n:.0}"),
    }
}

fn queue_status(name: &str, a: &QueueStats, b: &QueueStats, dt: f64) -> String {
    let pps = (b.delivered - a.delivered) as f64 / dt;
    let bps = (b.delivered_bytes - a.delivered_bytes) as f64 * 8.0 / dt;
    format!("{name}: {}pps {}bit/s drops {}+{}", rate(pps), rate(bps), b.capture_drops, b.delivery_drops)
}

fn status_line(elapsed: Duration, a: &Snapshot, b: &Snapshot, dt: f64) -> String {
    let mut parts: Vec<String> = Vec::new();
    if b.queues.len() > 1 {
        for (qa, qb) in a.queues.iter().zip(&b.queues) {
            parts.push(queue_status(&format!("q{}", qb.queue), qa, qb, dt));
        }
    }
    parts.push(queue_status("total", &a.total(), &b.total(), dt));
    format!("[{:>6.1}s] {}", elapsed.as_secs_f64(), parts.join(" | "))
}

/// Human rate formatting for summaries.
pub fn human_rate(n: f64) -> String {
    rate(n)
}
