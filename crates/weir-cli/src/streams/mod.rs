//! `weir streams`: the stream layer as a tool. Reassembles every TCP stream
//! (and tracks UDP and other datagram streams) on the workers, and writes
//! what the user asks for: each TCP stream's bytes in a directory laid out as
//! tcpflow lays it out (`-o`), one JSON record per closed stream (`--json`),
//! the totals (`--stats`). Without an output the data is still read, byte by
//! byte, so a timing measures the whole delivery.
//!
//! Files are written as the pieces come, at their stream offsets: a gap is a
//! hole (zeros), as tcpflow leaves it. A write that fails (a full disk) stops
//! that file, is counted, and the first such error is reported at the end
//! with exit status 1; nothing is lost silently.

mod json;
pub mod tcpflow;

use crate::exit::{bad_input, setting_error};
use crate::kafka::Kafka;
use crate::run::{human_rate, run_started, KernelCutoffArgs, SourceArgs};
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use weir::engine::RunError;
use weir::stream::{Class, Mode, Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};
use weir::Packet;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir streams trace.pcap -o /tmp/flows\n  \
weir streams trace.pcap@0-1 --json > streams.jsonl\n  \
weir streams trace.pcap --cutoff 0 --stats /tmp/s.json          # flow statistics only\n  \
weir streams trace.pcap --cutoff 10240 --cutoff-class 'port 25=0' -o /tmp/f\n  \
weir streams afpacket:eth0 --class 'udp;mode=packets' --class 'tcp port 22;cutoff=0' --class 'tcp port 80;cutoff=none,priority=3'\n\n\
A class is EXPR;KEY=VALUE,...: the last `;` ends the filter expression (libpcap's language has none), and any of \
cutoff=BYTES|none, mode=packets|tcp-fast|tcp-strict and priority=0..3 follow, comma-separated. Under memory pressure \
(above half the reassembly memory) streams of priority 0 lose held out-of-order bytes first, those of priority 3 last.\n\n\
Every packet that reaches the stream layer is counted once: not IP, malformed, a fragment held for \
reassembly, untracked (a bare ACK/FIN/RST of no open stream), taken by its stream, discarded (all its \
bytes past the cutoff) or dropped (bytes refused for lack of memory). Every payload byte of a stream is \
delivered, a duplicate, discarded (past the cutoff, or in packets mode), dropped for memory, or refused (not stream data).\n\n\
Balance: --balance rebalance moves whole streams with their bucket (the old worker hands them to the new one \
before the bucket's next packet, which waits, parked, until they are handed over), on traces and afpacket \
captures. Refused: offload:T and rebalance:T (a buddy worker would handle a stream's packets away from its \
state), and rebalancing an afxdp capture (its moving entries are one RX queue's share of a bucket, and a \
packet does not say which RX queue it came in on, so a worker cannot pick out the streams that move).\n\n\
Overlapping retransmissions with different bytes: the first copy wins (tcpflow keeps the last).")]
pub struct StreamsArgs {
    #[command(flatten)]
    pub src: SourceArgs,

    #[command(flatten)]
    pub kernel: KernelCutoffArgs,

    /// Write each TCP stream's bytes to DIR, one file per direction with payload, named as tcpflow names them.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Print one JSON line per closed stream (TCP, UDP and others) on stdout.
    #[arg(long)]
    pub json: bool,

    /// Write the totals as one JSON object to FILE at the end (created before the run: a name that cannot be written is refused first).
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,

    #[command(flatten)]
    pub stream: StreamOptions,

    /// Bytes of the previous piece repeated at the start of the next.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub piece_overlap: usize,

    /// Close a stream after this long without a packet (packet time, seconds; moving on with the wall clock on a quiet link).
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub idle_timeout: u64,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
    /// `--kafka`: every closed stream as a `stream` record.
    #[command(flatten)]
    pub kafka: crate::kafka::KafkaArgs,
}

/// The stream layer's options that `weir streams` and `weir inspect --streams` share.
#[derive(Args, Debug)]
pub struct StreamOptions {
    /// Reassembly: packets (track streams, no payload), tcp-fast, tcp-strict.
    #[arg(long, default_value = "tcp-fast", value_parser = parse_mode)]
    pub mode: Mode,

    /// tcp-strict: also pick up streams whose handshake was not seen.
    #[arg(long)]
    pub midstream: bool,

    /// tcp-strict: accept data past the receiver's advertised window, which is refused by default as the receiving TCP
    /// refuses it (the window's scale is read from the handshake; without one, the largest scale is assumed).
    #[arg(long)]
    pub ignore_window: bool,

    /// Bytes of each stream delivered before the rest is discarded (0: statistics only). Default: no cutoff.
    #[arg(long, value_name = "BYTES")]
    pub cutoff: Option<u64>,

    /// A class of streams with its own settings: EXPR;KEY=VALUE,... where EXPR is a libpcap filter expression run on a
    /// stream's first packet and the keys (any of them, comma-separated) are cutoff=BYTES|none, mode=packets|tcp-fast|tcp-strict,
    /// priority=0..3 (who loses data last under memory pressure). EXPR=BYTES is short for EXPR;cutoff=BYTES. Repeatable; classes
    /// are tried in the order given, --class and --cutoff-class alike, and the first match wins.
    #[arg(long = "class", visible_alias = "cutoff-class", value_name = "EXPR;KEY=VALUE,...", value_parser = Class::parse)]
    pub classes: Vec<Class>,

    /// Bytes of one stream held out of order before its first hole is given up as a gap (at most 1 GiB).
    #[arg(long, value_name = "BYTES", default_value_t = 262_144)]
    pub hold_limit: u64,

    /// Bytes per piece of data handed to the application.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    pub piece: usize,

    /// Deliver a partial piece once its oldest byte waited this long (packet time, ms). On a quiet link packet
    /// time moves on with the wall clock, so the piece comes within about 0.1 s of the timeout.
    #[arg(long, value_name = "MS")]
    pub flush_timeout: Option<u64>,

    /// Most connections tracked at once (all queues together); the least recently seen is evicted past it.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_streams: usize,

    /// Connections (all queues together) whose memory is made and written at start, before the first packet, and
    /// reused as connections close: a new connection then costs no page fault while traffic flows (each queue's
    /// share, at most --max-streams). Memory is checked with the rest before anything is allocated.
    #[arg(long, value_name = "N", default_value_t = weir::stream::PREALLOC_CONNECTIONS)]
    pub prealloc: usize,

    /// Reassembly memory, all queues together (held out-of-order bytes and partial pieces), in MiB. Past half of it
    /// partial pieces are delivered early instead of held, and held out-of-order bytes are admitted by priority.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub memory: u64,
}

fn parse_mode(s: &str) -> Result<Mode, weir::stream::ParseModeError> {
    s.parse()
}

impl StreamOptions {
    /// The stream layer's configuration, with the idle timeout and piece
    /// overlap each command sets its own way.
    pub fn config(&self, idle_timeout_ns: u64, piece_overlap: usize) -> anyhow::Result<StreamConfig> {
        let hold_limit = weir::stream::reassembly::HoldLimit::new(self.hold_limit).map_err(|e| setting_error(&e))?;
        Ok(StreamConfig {
            hold_limit,
            mode: self.mode,
            midstream: self.midstream,
            receive_window: !self.ignore_window,
            cutoff: self.cutoff,
            classes: self.classes.clone(),
            piece: self.piece,
            piece_overlap,
            flush_timeout_ns: self.flush_timeout.map(|ms| ms.saturating_mul(1_000_000)),
            idle_timeout_ns,
            max_connections: self.max_streams,
            prealloc_connections: self.prealloc,
            memory: self.memory.saturating_mul(1 << 20),
            ..StreamConfig::default()
        })
    }
}

/// One queue's writer.
pub(crate) struct Writer {
    dir: Option<Arc<PathBuf>>,
    /// tcpflow names files after a VLAN tag only on Ethernet links.
    ethernet: bool,
    json: bool,
    /// `--json` lines not yet written: out at the end of each run of packets.
    lines: Vec<u8>,
    /// `--kafka`: each closed stream as a record.
    kafka: Option<Kafka>,
    /// A running sum of every delivered byte, so the data is read.
    sum: u64,
    pub(crate) files: u64,
    pub(crate) write_errors: u64,
    pub(crate) first_error: Option<String>,
}

/// Per stream: its file once it has data, and the VLAN tag of its first packet.
#[derive(Default)]
pub(crate) struct Out {
    file: Option<File>,
    name: String,
    vlan: Option<u16>,
    failed: bool,
}

impl Writer {
    /// Writes each TCP stream's bytes into `dir` (tcpflow's layout), with
    /// `json` a line per closed stream on standard output, with `kafka` a
    /// record per closed stream to Kafka.
    pub(crate) fn new(dir: Option<Arc<PathBuf>>, ethernet: bool, json: bool, kafka: Option<Kafka>) -> Writer {
        Writer { dir, ethernet, json, lines: Vec::new(), kafka, sum: 0, files: 0, write_errors: 0, first_error: None }
    }

    fn open(&mut self, dir: &Path, s: &Stream, vlan: Option<u16>) -> Option<(File, String)> {
        for c in 0u32.. {
            let name = tcpflow::file_name(s.src, s.sport, s.dst, s.dport, vlan, c);
            match OpenOptions::new().write(true).create_new(true).open(dir.join(&name)) {
                Ok(f) => {
                    self.files += 1;
                    return Some((f, name));
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    self.fail(format!("{}: {e}", dir.join(&name).display()));
                    return None;
                }
            }
        }
        None
    }

    fn fail(&mut self, msg: String) {
        self.write_errors += 1;
        self.first_error.get_or_insert(msg);
    }
}

impl StreamHandler for Writer {
    type State = Out;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Out {
        // tcpflow names a file after the VLAN tag of the direction's first
        // packet: ask for that packet only.
        if self.dir.is_some() && self.ethernet && ctl.stream().proto == 6 {
            ctl.want_packets(true);
        }
        Out::default()
    }

    fn packet(&mut self, ctl: &mut StreamCtl<'_>, out: &mut Out, p: &Packet<'_>) {
        // The outer EtherType only: tcpflow reads no other tag (0x88a8 gives no VLAN part).
        let d = p.data();
        if d.len() >= 16 && d[12..14] == [0x81, 0x00] {
            out.vlan = Some(u16::from_be_bytes([d[14], d[15]]));
        }
        ctl.want_packets(false);
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, out: &mut Out, piece: &Piece<'_>) {
        self.sum = piece.data.iter().fold(self.sum, |s, &b| s.wrapping_add(u64::from(b)));
        let Some(dir) = self.dir.clone() else { return };
        if ctl.stream().proto != 6 || out.failed {
            return;
        }
        if out.file.is_none() {
            match self.open(&dir, ctl.stream(), out.vlan) {
                Some((f, name)) => {
                    out.file = Some(f);
                    out.name = name;
                }
                None => {
                    out.failed = true;
                    return;
                }
            }
        }
        let file = out.file.as_ref().expect("opened above");
        if let Err(e) = file.write_all_at(piece.data, piece.offset) {
            out.failed = true;
            self.fail(format!("{}: {e}", dir.join(&out.name).display()));
        }
    }

    fn closed(&mut self, s: &Stream, out: Out) {
        if let (Some(f), Some(dir)) = (out.file, &self.dir) {
            // A file whose last bytes were a gap ends with a hole, as tcpflow's.
            let end = s.delivered + s.gap;
            if let Err(e) = f.set_len(end) {
                self.fail(format!("{}: {e}", dir.join(&out.name).display()));
            }
        }
        if self.json {
            json::line(&mut self.lines, s);
            // The end of the capture closes every open stream at once:
            // written in blocks, not held until the run is done.
            if self.lines.len() >= LINES_BLOCK {
                self.write_lines();
            }
        }
        if let Some(k) = &self.kafka {
            k.stream(s);
        }
    }

    fn run_done(&mut self) {
        self.write_lines();
    }
}

/// Bytes of `--json` lines written at once, at most (and a line more).
const LINES_BLOCK: usize = 64 << 10;

impl Writer {
    /// The `--json` lines so far, whole, in one write.
    fn write_lines(&mut self) {
        if !self.lines.is_empty() {
            crate::exit::write_block(&self.lines);
            self.lines.clear();
        }
    }
}

/// `--stats FILE` of `weir streams` and `weir flows`: created before the run,
/// as `-o` is, so a name that cannot be written is refused (exit 2) before
/// anything is captured rather than after; written once at the end.
pub struct StatsFile {
    file: File,
    path: PathBuf,
}

impl StatsFile {
    pub fn create(path: Option<&Path>) -> anyhow::Result<Option<StatsFile>> {
        let Some(path) = path else { return Ok(None) };
        let file = File::create(path).map_err(|e| bad_input(anyhow::anyhow!("--stats {}: {e}", path.display())))?;
        Ok(Some(StatsFile { file, path: path.to_path_buf() }))
    }

    /// The totals, as one JSON object on a line.
    pub fn write(mut self, totals: &serde_json::Value) -> anyhow::Result<()> {
        writeln!(self.file, "{totals}").map_err(|e| anyhow::anyhow!("--stats {}: {e}", self.path.display()))
    }
}

/// The stream layer's settings `args` give.
pub(crate) fn config(args: &StreamsArgs) -> anyhow::Result<StreamConfig> {
    let cfg = StreamConfig {
        kernel_install_after: args.kernel.kernel_install_after,
        filter_engine: args.src.filter_engine,
        ..args.stream.config(args.idle_timeout.saturating_mul(1_000_000_000), args.piece_overlap)?
    };
    cfg.check().map_err(|e| setting_error(&e))?;
    Ok(cfg)
}

pub fn run(args: StreamsArgs) -> anyhow::Result<ExitCode> {
    let cfg = config(&args)?;
    if let Some(dir) = &args.output {
        std::fs::create_dir_all(dir).with_context(|| format!("-o {}: cannot create the directory", dir.display())).map_err(bad_input)?;
    }
    let stats = StatsFile::create(args.stats.as_deref())?;
    // Without a cutoff no stream is ever installed: no flow map then.
    let cut = cfg.cutoff.is_some() || cfg.classes.iter().any(|c| matches!(c.cutoff, Some(Some(_))));
    let metrics = args.metrics.bind()?;
    let kafka = crate::kafka::start_for(&args.kafka, &["stream"])?;
    let engine = args.src.engine_with(cfg.memory_plan(1), if cut { args.kernel.entries() } else { 0 })?;
    let dir = args.output.clone().map(Arc::new);
    let ethernet = engine.info().link_type == weir::LinkType::ETHERNET;
    let running = engine.start_streams(&cfg, |_| Writer::new(dir.clone(), ethernet, args.json, kafka.clone())).map_err(|e| match e {
        RunError::Setting(s) => setting_error(&s),
        other => anyhow::Error::new(other),
    })?;
    let report = run_started(running, "streams", &args.src.live, args.quiet || args.json, metrics)?;
    let mut total = StreamStats::default();
    let (mut sum, mut files, mut write_errors, mut first_error) = (0u64, 0u64, 0u64, None);
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
        let w = layer.handler();
        sum = sum.wrapping_add(w.sum);
        files += w.files;
        write_errors += w.write_errors;
        if first_error.is_none() {
            first_error.clone_from(&w.first_error);
        }
    }
    check_packets(&report, &total)?;
    let elapsed = report.elapsed;
    // The workers' clones of the producer went with their handlers' last use;
    // the acknowledgements of what is in flight are waited for here.
    let kafka =
        kafka.as_ref().map(|k| (k.wants("stream"), crate::kafka::finish_and_report("streams", k))).map(|(wants, (k, ok))| (k, ok, wants));
    if let Some((k, _, true)) = &kafka {
        if k.made.get("stream").copied().unwrap_or(0) != total.streams {
            eprintln!("weir streams: internal accounting error: {} streams closed, {} handed to Kafka", total.streams, k.made_total());
        }
    }
    if let Some(stats) = stats {
        let mut j = stats_json(&total);
        for (k, v) in [
            ("files", json!(files)),
            ("write_errors", json!(write_errors)),
            ("sum", json!(sum)),
            (
                "rebalance",
                json!(report.balance.map(|b| json!({"buckets_moved": b.buckets_moved, "parked": b.parked,
                                                     "park_drops": b.park_drops, "handover_drops": b.handover_drops}))),
            ),
            ("elapsed_s", json!(elapsed.as_secs_f64())),
            ("kafka", json!(kafka.as_ref().map(|(k, _, _)| k))),
        ] {
            j[k] = v;
        }
        stats.write(&j)?;
    }
    if !args.json {
        let pps = total.packets as f64 / elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "weir streams: {} packets ({}) in {:.2} s: {} streams in {} connections; {} bytes delivered, {} gap, {} discarded past the cutoff, {} dropped for memory, {} duplicate; {} files",
            total.packets,
            human_rate(pps),
            elapsed.as_secs_f64(),
            total.streams,
            total.connections,
            total.delivered,
            total.gap,
            total.discarded,
            total.dropped,
            total.duplicate,
            files
        );
        eprintln!("weir streams: {}", packet_line(&total));
        if let Some(line) = kernel_line(&total) {
            eprintln!("weir streams: {line}");
        }
    }
    for e in &report.errors {
        eprintln!("weir streams: {e}");
    }
    if let Some(e) = first_error {
        eprintln!("weir streams: {write_errors} write error(s), the first: {e}");
        return Ok(ExitCode::FAILURE);
    }
    if report.failed_on_bad_input() {
        return Ok(ExitCode::from(crate::exit::BAD_INPUT));
    }
    Ok(if report.errors.is_empty() && kafka.is_none_or(|(_, ok, _)| ok) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The stream layer's totals as JSON: every packet and byte category, the
/// close reasons and IP fragment reassembly.
pub fn stats_json(total: &StreamStats) -> serde_json::Value {
    let (f, k) = (&total.fragment, &total.kernel);
    json!({
        "packets": total.packets, "stream_packets": total.to_stream + total.discarded_packets + total.dropped_packets,
        "not_stream": total.not_ip + total.malformed, "not_ip": total.not_ip, "malformed": total.malformed,
        "fragments": total.fragments, "untracked": total.untracked, "to_stream": total.to_stream,
        "discarded_packets": total.discarded_packets, "dropped_packets": total.dropped_packets,
        "streams": total.streams, "connections": total.connections, "handed_in": total.handed_in, "evicted": total.evicted,
        "closed": {"fin": total.closed_fin, "rst": total.closed_rst, "idle": total.closed_idle, "evicted": total.evicted,
                   "end_of_input": total.closed_end, "reused": total.closed_reused},
        "bytes": total.bytes, "delivered_bytes": total.delivered, "gap_bytes": total.gap, "duplicate_bytes": total.duplicate,
        "discarded_bytes": total.discarded, "dropped_bytes": total.dropped, "refused_bytes": total.refused,
        "pieces": total.pieces, "memory_peak": total.memory_peak,
        "ip_fragments": {"fragments": f.fragments, "fragments_reassembled": f.fragments_reassembled, "datagrams_reassembled": f.datagrams_reassembled,
                         "timed_out": f.datagrams_timed_out, "evicted": f.datagrams_evicted, "over_memory": f.datagrams_over_memory,
                         "too_big": f.datagrams_too_big, "overlapping": f.datagrams_overlapping,
                         "malformed": f.malformed, "inconsistent": f.inconsistent},
        "kernel_cutoff": {"installed": k.installed, "full": k.full, "failed": k.failed, "taken": k.taken, "evicted": k.evicted, "displaced": k.displaced,
                          "lost": k.lost, "refreshed": k.refreshed, "in_map": k.in_map(), "packets": k.packets, "after_end": k.after_end, "octets": k.octets},
    })
}

/// What the kernel cutoff did, in one line (`None` when it installed nothing).
pub fn kernel_line(total: &StreamStats) -> Option<String> {
    let k = &total.kernel;
    (k.installed + k.full + k.failed > 0).then(|| {
        format!(
            "kernel cutoff: {} packets ({} IP bytes) dropped in the kernel and added to their records; {} stream directions installed, {} taken back ({} of evicted connections, {} to make room in the full map), {} still in the map, {} idle connections kept alive by the kernel's counts; {} installs found the map full, {} refused; {} entries lost",
            k.packets, k.octets, k.installed, k.taken, k.evicted, k.displaced, k.in_map(), k.refreshed, k.full, k.failed, k.lost
        )
    })
}

/// Where the stream layer's packets went and why its streams closed, in one line.
pub fn packet_line(total: &StreamStats) -> String {
    format!(
        "packets: {} to streams, {} discarded, {} dropped, {} untracked, {} fragments, {} not IP, {} malformed; closed: {} fin, {} rst, {} idle, {} evicted, {} at the end, {} reused",
        total.to_stream,
        total.discarded_packets,
        total.dropped_packets,
        total.untracked,
        total.fragments,
        total.not_ip,
        total.malformed,
        total.closed_fin,
        total.closed_rst,
        total.closed_idle,
        total.evicted,
        total.closed_end,
        total.closed_reused
    )
}

/// Every packet the engine delivered reached the stream layer and is in one
/// of its categories (when no queue's handler was lost to a panic).
pub fn check_packets<H>(report: &weir::engine::Report<H>, total: &StreamStats) -> anyhow::Result<()> {
    let delivered = report.stats.total().delivered;
    if report.handlers.len() == report.stats.queues.len() && (total.packets != delivered || !total.packets_add_up()) {
        anyhow::bail!("internal accounting error: the engine delivered {delivered} packets, the stream layer counted {total:?}");
    }
    Ok(())
}
