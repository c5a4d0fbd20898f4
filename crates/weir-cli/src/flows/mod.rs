//! `weir flows`: a flow exporter on the stream layer. Each worker's stream
//! layer runs in flows mode at cutoff 0 (statistics only: no payload is
//! kept), and every record it hands out (a direction of a connection at its
//! close or its active timeout; with `--biflow` joined to the other
//! direction's first, see [`weir::stream::biflow`]) travels over a channel,
//! in a batch with the others of its run of packets, to an exporter thread
//! (one for all queues, or with `--export per-queue` one per queue under
//! its own observation domain), which sends IPFIX, NetFlow v9 or v5
//! messages to the collectors and writes IPFIX files (`-w`, RFC 5655,
//! rotated as `weir record`'s). The exporter is the library's
//! ([`weir::output::flow`]); this module holds the options, the words and
//! the hooks (`--events`, the messages of a failed file).
//!
//! Nothing is lost silently: every record the layer hands out is exported
//! (alone or as a biflow's reverse direction), counted as one the format
//! cannot carry (IPv6 in v5), or counted as lost to send errors or not
//! written to files; the packets that are in no record (not IP, malformed,
//! IP fragments of a datagram that never completed) are the stream layer's
//! counts, printed with the rest.

use crate::events::Events;
use crate::exit::{bad_input, setting_error};
use crate::record::RotationArgs;
use crate::run::{drop_privileges, human_rate, watch_started, KernelCutoffArgs, SourceArgs};
use crate::streams::{check_packets, kernel_line, packet_line, stats_json, StatsFile};
use clap::Args;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::time::Duration;
use weir::engine::RunError;
use weir::output::flow::encode::EncoderError;
use weir::output::flow::export::{ExportHooks, OpenError};
pub(crate) use weir::output::flow::FlowRecord;
use weir::output::flow::{EndReason, ExportStats, Exporter, FlowFiles, FlowSettings, Format, NextFile, Pacer, Pacing, Ready};
use weir::stream::biflow::{Biflow, Pairer};
use weir::stream::{Direction, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};
use weir::QueueId;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
weir flows trace.pcap -n 127.0.0.1:9995                          # IPFIX to nfcapd -p 9995\n  \
weir flows trace.pcap@0-1 -n 10.0.0.5:2055 --format v9 --domain 7\n  \
weir flows afpacket:eth0@0-3 -n collector:4739 -n backup:4739 --active-timeout 60 --inactive-timeout 15\n  \
weir flows eth0 -w '/var/flows/%Y%m%d-%H%M.ipfix' -G 300 -W 288   # 5-minute files, a day\n  \
weir flows trace.pcap -w flows.ipfix && ipfixDump --in flows.ipfix   # libfixbuf-tools\n\n\
IPFIX files (-w, RFC 5655): the IPFIX messages the collectors get, the same bytes, each file opening with \
the templates so it can be read alone; sequence numbers run on from file to file. They rotate as `weir record`'s \
do: -C by size, -G by packet time (aligned, a file per period), -W to keep the newest N, names with strftime \
conversions (UTC, the file's first export time) or {seq}, else .N before the extension when rotating. A file \
that cannot be written (a full disk) stops the writing of files: the error names it, the records not written are \
counted, the run stops if there is no collector either, and the exit status is 1. -w and -n go together (both get every record); at least one is needed.\n\n\
Records: one per direction of a connection (TCP, UDP, any IP protocol), with addresses, ports (0 for protocols \
without), protocol, the TCP flags of its packets OR'ed, packets, octets (IP bytes, headers included, as IPFIX's octetDeltaCount counts them; softflowd adds Ethernet padding), \
first and last packet time in ms, the ingress queue plus one as the interface \
index, and (IPFIX) why it ended. ICMP flows are keyed by type and code (the destination port, as nfdump shows it). IP fragments count as sent, each a packet with its IP bytes, in the flow of their datagram (rebuilt to find its \
ports); the fragments of a datagram that never completes are in no record and are counted apart at the end. A FIN or RST does not end a record at once: the packets that close the \
connection (the last ACK) belong to it, and it is exported when the connection has been quiet for the inactive \
timeout, or at the end of input.\n\n\
Timeouts follow nfdump's exporter, nfpcapd (active 300 s, inactive 60 s): the active timeout matches nfcapd's \
default file rotation of 5 minutes, so a long flow shows in every file it lasts through. Both are packet time \
(moving on with the wall clock on a quiet link).\n\n\
Biflows (--biflow, RFC 5103, IPFIX only; v9 and v5 refuse it): one record per connection, the initiator's \
direction with the responder's packets, octets and TCP flags as reverse elements (enterprise 29305), \
and the first and last packet of either direction as its times. The two directions of a connection pair up on its queue's worker; a record with no partner \
(a connection seen one way only, or an active-timeout record the other direction has no match for) goes out \
alone with reverse counters 0. Every uniflow record is in exactly one biflow, so the counts are \
those of a uniflow run. ipfixDump shows the reverse elements; nfdump 1.7 reads the reverse counters as the \
flow's out packets and out bytes (%opkt, %obyt) and keeps the forward TCP flags.\n\n\
A fleet of sensors into one collector: give each weir its own --domain (IPFIX's observation domain, v9's source \
id, v5's engine type and id as the high and low byte): nfcapd keeps exporters apart by address and domain (nfdump -E \
FILE lists them with their sequence failures), and sequence numbers count per domain: IPFIX's and v5's the data \
records before each message, v9's the messages. By default (--export single) every queue of one weir shares its \
domain and one exporter thread, so the collector sees one ordered sequence. With --export per-queue each queue \
has its own exporter thread under the domain --domain plus its queue number (leave room between sensors: \
sensor A --domain 100, sensor B --domain 200), each domain's sequence in order; -w then needs {queue} in its \
name, each queue writing its own files:\n  \
a$ weir flows eth1@0-3 -n collector:9995 --domain 100 --export per-queue   # domains 100-103\n  \
b$ weir flows eth1@0-3 -n collector:9995 --domain 200 --export per-queue   # domains 200-203\n  \
collector$ nfcapd -l /var/flows -p 9995         # nfdump -E FILE lists the 8\n\n\
NetFlow v5 carries IPv4 only: IPv6 records are counted as not exported and reported at the end (exit status \
0; use ipfix or v9 to keep them). Its counters have 32 bits: larger counts are sent as 4294967295 and counted.")]
pub struct FlowsArgs {
    #[command(flatten)]
    pub src: SourceArgs,

    #[command(flatten)]
    pub kernel: KernelCutoffArgs,

    /// Write the totals as one JSON object to FILE at the end (the stream layer's, as `weir streams --stats`,
    /// with the export's under "export").
    #[arg(long, value_name = "FILE")]
    pub stats: Option<std::path::PathBuf>,

    /// A collector to send to, HOST:PORT over UDP (nfcapd's default port is 9995, IPFIX's 4739). Repeatable:
    /// every collector gets every message.
    #[arg(short = 'n', long = "collector", value_name = "HOST:PORT")]
    pub collectors: Vec<String>,

    /// Also write every record as an EVE `flow` event, one JSON line each (Suricata's eve.json shape, with
    /// community_id; schema/eve.schema.json), to the file OUT or standard output (`-`). With --biflow each
    /// event holds both directions (toserver, toclient), else one each.
    #[arg(long, value_name = "OUT", help_heading = "Output")]
    pub events: Option<String>,

    /// Datagrams a second to each collector at most (a token bucket, bursts of 32), so that a collector
    /// keeps up: UDP has no flow control, and a collector's kernel drops what its socket buffer cannot hold,
    /// telling nobody. The default, 10000 (about 300000 records a second), is what nfcapd on the same host
    /// stores without a loss at its default buffer. 0: no pacing.
    #[arg(long, value_name = "DATAGRAMS_PER_S", default_value_t = Pacing::DEFAULT_RATE)]
    pub export_rate: u32,

    /// Write IPFIX files (RFC 5655) named from the pattern OUT (see below), with or without collectors; `-w -`
    /// writes the messages to standard output, as one file that is never rotated (no -C, -G, -W or --export per-queue).
    #[arg(short = 'w', long = "write", value_name = "OUT", help_heading = "Output")]
    pub write: Option<String>,

    #[command(flatten)]
    pub rotation: RotationArgs,

    /// Export format: ipfix (RFC 7011), v9 (NetFlow 9, RFC 3954) or v5 (NetFlow 5, IPv4 only).
    #[arg(long, default_value = "ipfix", value_parser = parse_format)]
    pub format: Format,

    /// One exporter thread for all queues (`single`: one observation domain, its sequence numbers in
    /// order), or one per queue (`per-queue`: each under the domain --domain plus its queue number, so each
    /// domain's sequence numbers stay in order without the queues meeting in one thread).
    #[arg(long = "export", value_enum, default_value = "single", value_name = "MODE")]
    pub export: ExportMode,

    /// Observation domain: IPFIX's observation domain id, v9's source id, v5's engine type and id (at most 65535).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub domain: u32,

    /// One record per connection (RFC 5103 biflows, IPFIX only): the initiator's direction, with the
    /// responder's as reverse elements (enterprise 29305); see below.
    #[arg(long)]
    pub biflow: bool,

    /// Export a record of a flow still going after this long (seconds, packet time); it goes on in a next record.
    #[arg(long, value_name = "SECONDS", default_value_t = FlowSettings::DEFAULT.active_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub active_timeout: u64,

    /// Export a flow's records after this long without a packet of its connection (seconds, packet time).
    #[arg(long, value_name = "SECONDS", default_value_t = FlowSettings::DEFAULT.inactive_timeout.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub inactive_timeout: u64,

    /// Send the templates (IPFIX, v9) again this often (wall-clock seconds), so a collector started later
    /// learns them; they always go in the first message.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub template_refresh: u64,

    /// Most connections tracked at once (all queues together); past it the least recently seen is exported early.
    #[arg(long, value_name = "N", default_value_t = FlowSettings::DEFAULT.max_flows)]
    pub max_flows: usize,

    /// Connections (all queues together) whose memory is made and written at start, before the first packet, and
    /// reused as connections close: a new connection then costs no page fault while traffic flows (each queue's
    /// share, at most --max-flows). Memory is checked with the rest before anything is allocated.
    #[arg(long, value_name = "N", default_value_t = FlowSettings::DEFAULT.prealloc)]
    pub prealloc: usize,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
    #[command(flatten)]
    pub kafka: crate::kafka::KafkaArgs,
}

/// How the queues' records reach the collectors.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportMode {
    Single,
    PerQueue,
}

fn parse_format(s: &str) -> Result<Format, weir::output::flow::ParseFormatError> {
    s.parse()
}

/// Records waiting between the workers and the exporter, at most: a worker
/// that finds the channel full waits (no record is dropped).
const CHANNEL_RECORDS: usize = 1 << 16;

/// Most records in one batch: a run of packets that hands out more (a
/// burst of idle flows ending) sends them in several, so the channel's
/// `CHANNEL_RECORDS / BATCH_RECORDS` batches hold at most
/// `CHANNEL_RECORDS` records.
const BATCH_RECORDS: usize = 1 << 10;

/// The records a worker hands its exporter at once (see [`ToExporter`]).
type Batch = Vec<FlowRecord>;

/// How long a worker that finds the channel full waits before it tries
/// again: a few hundred records' worth of the exporter's time.
const FULL_BACKOFF: Duration = Duration::from_micros(500);

/// One queue's handler: turns each handed-out stream record into a flow
/// record for the exporter (with `--biflow`, joins the two directions
/// first), and sends them when the layer is done with a run of packets.
///
/// Why batches: a send a record passed each of the demo trace's 307,000
/// records through the channel's shared state alone, a cache line moving
/// between the worker's CPU and the exporter's every time, and woke a
/// sleeping exporter more often. Sending a run's records at once took
/// `weir flows -w /dev/null` 0.85× the CPU with one queue, 0.90× inline
/// and 0.95× with two (paired medians of 7, 2026-12-04).
pub(crate) struct ToExporter {
    tx: SyncSender<Batch>,
    /// Records of the run so far, not yet sent.
    batch: Batch,
    /// Records its exporter thread was gone for (it panicked): counted.
    orphaned: u64,
    /// With `--biflow`.
    pairer: Option<Pairer<FlowRecord>>,
    /// Records sent as another's reverse direction, not by themselves.
    folded: u64,
}

impl ToExporter {
    fn new(tx: SyncSender<Batch>, biflow: bool) -> ToExporter {
        ToExporter { tx, batch: Vec::new(), orphaned: 0, pairer: biflow.then(Pairer::default), folded: 0 }
    }

    fn forward(&mut self, r: FlowRecord) {
        self.batch.push(r);
        if self.batch.len() == BATCH_RECORDS {
            self.send_batch();
        }
    }

    /// Sends the run's records, if any. A full channel makes the worker
    /// wait, but not in `send`: a sender blocked there is woken by each
    /// batch the exporter takes, one slot at a time, two context switches a
    /// batch whenever the exporter is the slower side (as it is when it
    /// publishes to Kafka). Sleeping a short while instead lets the
    /// exporter take several batches between the worker's attempts.
    fn send_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        // The next batch is likely the size of this one.
        let next = Vec::with_capacity(self.batch.len());
        let mut b = std::mem::replace(&mut self.batch, next);
        loop {
            match self.tx.try_send(b) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) => {
                    b = back;
                    std::thread::sleep(FULL_BACKOFF);
                }
                Err(TrySendError::Disconnected(back)) => {
                    self.orphaned += back.len() as u64;
                    return;
                }
            }
        }
    }

    /// `last`: the stream closed with this record.
    fn send(&mut self, s: &Stream, end: EndReason, last: bool) {
        let r = FlowRecord::of(s, end);
        let Some(pairer) = self.pairer.as_mut() else { return self.forward(r) };
        for b in pairer.record(s, r, last).into_iter().flatten() {
            match b {
                Biflow::Alone(r) => self.forward(r),
                Biflow::Pair { initiator, responder, last } => {
                    self.folded += 1;
                    let end = if last == Direction::Initiator { initiator.end } else { responder.end };
                    self.forward(initiator.joined(&responder, end));
                }
            }
        }
    }

    /// After the layer closed every stream: the records still waiting for a
    /// partner go out alone.
    fn finish(&mut self) {
        let waiting: Vec<FlowRecord> = self.pairer.as_mut().map(|p| p.drain().collect()).unwrap_or_default();
        for r in waiting {
            self.forward(r);
        }
        self.send_batch();
    }
}

impl StreamHandler for ToExporter {
    type State = ();

    fn created(&mut self, ctl: &mut StreamCtl<'_>) {
        if let (Some(p), Some(_)) = (self.pairer.as_mut(), ctl.opposite()) {
            p.both_directions(ctl.stream());
        }
    }

    fn data(&mut self, _: &mut StreamCtl<'_>, _: &mut (), _: &weir::stream::Piece<'_>) {}

    fn active(&mut self, s: &Stream, _: &mut ()) {
        self.send(s, EndReason::Active, false);
    }

    fn closed(&mut self, s: &Stream, _: ()) {
        self.send(s, EndReason::of_close(s.closed), true);
    }

    fn run_done(&mut self) {
        self.send_batch();
    }
}

/// Resolves each `-n HOST:PORT`, naming the one that fails.
fn collectors(specs: &[String]) -> anyhow::Result<Vec<SocketAddr>> {
    specs
        .iter()
        .map(|spec| {
            let mut addrs = spec.to_socket_addrs().map_err(|e| bad_input(anyhow::anyhow!("-n {spec}: not a collector HOST:PORT ({e})")))?;
            addrs.next().ok_or_else(|| bad_input(anyhow::anyhow!("-n {spec}: the host has no address")))
        })
        .collect()
}

/// The rotating files of `-w` for the exporter of `queue` (`None`: the one
/// exporter of all queues), checked against the other options.
fn flow_files(args: &FlowsArgs, queue: Option<QueueId>, templates: Vec<u8>) -> anyhow::Result<Option<FlowFiles>> {
    let Some(pattern) = &args.write else {
        let r = &args.rotation;
        if r.file_size.is_some() || r.rotate_seconds.is_some() || r.max_files.is_some() {
            return Err(bad_input(anyhow::anyhow!("-C, -G and -W rotate the IPFIX files of -w: give -w OUT too")));
        }
        return Ok(None);
    };
    if args.format != Format::Ipfix {
        return Err(bad_input(anyhow::anyhow!(
            "-w writes IPFIX files (RFC 5655); NetFlow {} has no file format: leave out --format {} (or send it with -n only)",
            args.format.name(),
            args.format.name()
        )));
    }
    if pattern == "-" {
        let r = &args.rotation;
        if r.file_size.is_some() || r.rotate_seconds.is_some() || r.max_files.is_some() || queue.is_some() {
            return Err(bad_input(anyhow::anyhow!(
                "-w - writes one stream of IPFIX messages to standard output, which cannot be rotated or shared by \
                 exporters: leave out -C, -G, -W and --export per-queue, or write to files (-w NAME)"
            )));
        }
        let files = FlowFiles::stdout(templates, crate::exit::end_if_reader_gone);
        return Ok(Some(files.map_err(|e| anyhow::anyhow!("-w -: cannot use standard output: {e}"))?));
    }
    let name = match queue {
        Some(q) if pattern.contains(QUEUE) => pattern.replace(QUEUE, &q.0.to_string()),
        Some(_) => {
            return Err(bad_input(anyhow::anyhow!(
                "-w {pattern}: with --export per-queue each queue writes its own files: put {QUEUE} in the name (flows-{QUEUE}.ipfix)"
            )))
        }
        None if pattern.contains(QUEUE) => {
            return Err(bad_input(anyhow::anyhow!(
                "-w {pattern}: {QUEUE} names each queue's files with --export per-queue; one exporter writes one series of files"
            )))
        }
        None => pattern.clone(),
    };
    let files =
        FlowFiles::new(&name, args.rotation.policy(None), templates).map_err(|e| bad_input(anyhow::anyhow!("-w {pattern}: {e}")))?;
    Ok(Some(files))
}

/// In a `-w` name, the queue number of `--export per-queue`.
const QUEUE: &str = "{queue}";

/// One exporter of the run: its encoder and sockets, its files, and the
/// channel its queues' records come over (the senders are the handlers').
struct Lane {
    ready: Ready,
    files: Option<FlowFiles>,
    rx: Receiver<Batch>,
    /// Its queue with `--export per-queue`.
    queue: Option<QueueId>,
}

/// The exporters: one for all queues, or one per queue under the domain
/// `--domain` plus the queue number; and the senders of their channels.
fn lanes(args: &FlowsArgs, queues: &[QueueId]) -> anyhow::Result<(Vec<Lane>, Vec<SyncSender<Batch>>)> {
    // One pacer a collector, shared by every exporter that sends to it.
    let collectors: Vec<(SocketAddr, Pacer)> =
        collectors(&args.collectors)?.into_iter().map(|a| (a, Pacer::new(Pacing::new(args.export_rate)))).collect();
    let each: Vec<Option<QueueId>> = match args.export {
        ExportMode::Single => vec![None],
        ExportMode::PerQueue => queues.iter().copied().map(Some).collect(),
    };
    each.into_iter()
        .map(|queue| {
            let domain = match queue {
                Some(q) => args
                    .domain
                    .checked_add(u32::from(q.0))
                    .ok_or_else(|| bad_input(anyhow::anyhow!("--domain {} plus queue {} is past 4294967295", args.domain, q.0)))?,
                None => args.domain,
            };
            let exporter = Exporter {
                format: args.format,
                domain,
                biflow: args.biflow,
                collectors: collectors.clone(),
                template_refresh: Duration::from_secs(args.template_refresh),
            };
            let ready = exporter.open().map_err(open_error)?;
            let files = flow_files(args, queue, ready.templates_message())?;
            let (tx, rx) = sync_channel(CHANNEL_RECORDS / BATCH_RECORDS);
            Ok((Lane { ready, files, rx, queue }, tx))
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .map(|v| v.into_iter().unzip())
}

/// An exporter that could not open, in `weir flows`' words.
fn open_error(e: OpenError) -> anyhow::Error {
    match e {
        OpenError::Encoder(e @ EncoderError::BiflowNotIpfix(_)) => {
            bad_input(anyhow::anyhow!("--biflow: {e} (use --format ipfix, or leave out --biflow)"))
        }
        OpenError::Encoder(e @ EncoderError::V5Domain(_)) => bad_input(anyhow::anyhow!("--domain: {e}")),
        OpenError::Socket { addr, source } => anyhow::anyhow!("-n {addr}: cannot open a UDP socket to export to it: {source}"),
        // A kind the library adds later: its own words.
        e => anyhow::Error::new(e),
    }
}

/// What an exporter thread tells `weir flows` (and the sensor): each record
/// as an EVE `flow` event (`--events`), and a file that could not be written.
struct Hooks {
    events: Option<Events>,
}

impl ExportHooks for Hooks {
    fn record(&mut self, r: &FlowRecord) {
        if let Some(events) = &self.events {
            events.record(r);
        }
    }

    fn files_failed(&mut self, error: &str, stopping: bool) {
        eprintln!("weir flows: cannot write {error}: no more records are written to files");
        if stopping {
            eprintln!("weir flows: no collector either: stopping");
        }
    }
}

/// The flow exporter as an output: its stream-layer settings, its
/// exporters (one for all queues, or one per queue) and their channels.
/// `weir flows` runs it alone; `weir sensor` beside other outputs.
pub(crate) struct FlowOutput {
    /// The flows-mode stream layer's settings.
    pub(crate) cfg: StreamConfig,
    lanes: Vec<Lane>,
    senders: Vec<SyncSender<Batch>>,
    queues: Vec<QueueId>,
    export: ExportMode,
    biflow: bool,
}

/// The exporter threads, running.
pub(crate) struct Exporting {
    threads: Vec<std::thread::JoinHandle<ExportStats>>,
}

/// What the output did, for the summary and the exit status.
pub(crate) struct FlowSummary {
    /// Totals as `--stats` writes them under "export".
    pub(crate) json: serde_json::Value,
    /// Records the output made and did not get out (send errors, files not
    /// written, exporters gone), and whether the counts add up.
    pub(crate) lost: u64,
    pub(crate) bounced: bool,
    pub(crate) file_error: bool,
    pub(crate) adds_up: bool,
}

impl FlowOutput {
    /// Checks `args` and opens the exporters' sockets and (not yet written)
    /// files for the engine's `queues`.
    pub(crate) fn open(args: &FlowsArgs, queues: &[QueueId]) -> anyhow::Result<FlowOutput> {
        let settings = FlowSettings {
            active_timeout: Duration::from_secs(args.active_timeout),
            inactive_timeout: Duration::from_secs(args.inactive_timeout),
            max_flows: args.max_flows,
            prealloc: args.prealloc,
        };
        let cfg = StreamConfig { kernel_install_after: args.kernel.kernel_install_after, ..settings.stream_config() };
        cfg.check().map_err(|e| setting_error(&e))?;
        let (lanes, senders) = if queues.is_empty() { (Vec::new(), Vec::new()) } else { lanes(args, queues)? };
        Ok(FlowOutput { cfg, lanes, senders, queues: queues.to_vec(), export: args.export, biflow: args.biflow })
    }

    /// Handles by which the sensor's SIGHUP starts the next IPFIX file of
    /// each exporter.
    pub(crate) fn next_files(&self) -> Vec<NextFile> {
        self.lanes.iter().filter_map(|l| l.files.as_ref().map(FlowFiles::next_file)).collect()
    }

    /// Queue `q`'s handler, on its stream layer.
    pub(crate) fn handler(&self, q: QueueId) -> ToExporter {
        let lane = match self.export {
            ExportMode::Single => 0,
            ExportMode::PerQueue => self.queues.iter().position(|&x| x == q).expect("the engine's own queue"),
        };
        ToExporter::new(self.senders[lane].clone(), self.biflow)
    }

    /// Opens the first files, as the user the run now is (-Z), before
    /// anything is exported, so a name that cannot be written stops the
    /// run at once; then starts the exporter threads. The handlers hold the
    /// only channel senders from here: each exporter ends once its queues'
    /// handlers let go of them.
    pub(crate) fn start(mut self, stop: &weir::engine::StopHandle, events: Option<&Events>) -> anyhow::Result<Exporting> {
        drop(std::mem::take(&mut self.senders));
        for lane in &mut self.lanes {
            if let Some(Err(e)) = lane.files.as_mut().map(FlowFiles::prepare) {
                let bad = e.is_bad_input();
                let e = anyhow::anyhow!("cannot write the IPFIX files of -w: {:#}", anyhow::Error::new(e));
                return Err(if bad { bad_input(e) } else { e });
            }
        }
        let threads = self
            .lanes
            .into_iter()
            .map(|Lane { ready, files, rx, queue }| {
                let name = queue.map_or("weir-export".to_string(), |q| format!("weir-export-{}", q.0));
                let (stop, events) = (stop.clone(), events.cloned());
                std::thread::Builder::new().name(name).spawn(move || ready.run(&rx, files, Hooks { events }, stop))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Exporting { threads })
    }
}

impl Exporting {
    /// Once the handlers are back (and given up: their senders with them),
    /// waits for the exporters, prints what they did as `cmd`, and says
    /// whether anything was lost.
    pub(crate) fn finish(
        self,
        args: &FlowsArgs,
        handlers: Vec<ToExporter>,
        total: &StreamStats,
        elapsed: Duration,
        events: Option<&Events>,
        say: &dyn Fn(String),
    ) -> anyhow::Result<FlowSummary> {
        let exporters = self.threads.len();
        let (mut orphaned, mut folded) = (0, 0);
        for mut h in handlers {
            h.finish();
            (orphaned, folded) = (orphaned + h.orphaned, folded + h.folded);
        }
        let mut st = ExportStats::default();
        for t in self.threads {
            st.add(t.join().map_err(|_| anyhow::anyhow!("an exporter thread panicked"))?);
        }
        let adds_up = print_stats(args, total, &st, Handed { orphaned, folded }, exporters, elapsed, say);
        let bounced = report_collectors(&st, say);
        let collectors: Vec<serde_json::Value> = st
            .collectors
            .iter()
            .map(|c| {
                serde_json::json!({"collector": c.addr.map(|a| a.to_string()), "datagrams": c.datagrams, "bounced": c.bounced,
                                   "bounced_records": c.bounced_records, "send_errors": c.send_errors,
                                   "nothing_listens": c.nothing_listens})
            })
            .collect();
        let made = handed_out_to_exporters(orphaned, folded, total);
        let json = serde_json::json!({"records": total.streams + total.active_records, "exported": st.exported,
                                      "messages": st.messages, "datagrams": st.datagrams(),
                                      "not_carried": st.not_carried, "lost_to_send_errors": st.lost_to_send_errors,
                                      "unwritten": st.unwritten, "orphaned": orphaned, "folded": folded,
                                      "export_rate_datagrams_per_s": args.export_rate, "paced_s": paced_s(&st),
                                      "collectors": collectors, "to_events": made});
        if let Some(ev) = events.filter(|e| e.file_takes("flow")) {
            let flow_events = ev.counts().0.made[0];
            if flow_events != made {
                say(format!("internal accounting error: {made} records handed to the exporters, {flow_events} flow events"));
            }
        }
        if let Some(k) = events.and_then(Events::kafka).filter(|k| k.wants("flow")) {
            let published = k.counts().made.get("flow").copied().unwrap_or(0);
            if published != made {
                say(format!("internal accounting error: {made} records handed to the exporters, {published} to Kafka"));
            }
        }
        Ok(FlowSummary {
            json,
            lost: st.lost_to_send_errors + st.unwritten + orphaned,
            bounced,
            file_error: st.file_error.is_some(),
            adds_up,
        })
    }
}

pub fn run(args: FlowsArgs) -> anyhow::Result<ExitCode> {
    if args.collectors.is_empty() && args.write.is_none() && args.events.is_none() && args.kafka.brokers.is_none() {
        return Err(bad_input(anyhow::anyhow!(
            "nowhere to export to: give a collector (-n HOST:PORT), IPFIX files (-w OUT), events (--events OUT), Kafka brokers \
             (--kafka BROKERS), or several"
        )));
    }
    let cfg = FlowOutput::open(&args, &[])?.cfg;
    let stats = StatsFile::create(args.stats.as_deref())?;
    let events = match &args.events {
        Some(out) if out == "-" && args.write.as_deref() == Some("-") => {
            return Err(bad_input(anyhow::anyhow!("--events - and -w - would both write to standard output: send one to a file")))
        }
        Some(out) => Some(Events::create(out, false).map_err(|e| bad_input(anyhow::anyhow!("--events {out}: {e}")))?),
        None => None,
    };
    let kafka = crate::kafka::start_for(&args.kafka, &["flow"])?;
    let events = match events {
        Some(ev) => Some(ev.with_kafka(kafka.clone())),
        None => kafka.clone().map(Events::kafka_only),
    };
    let metrics = args.metrics.bind()?;
    let engine = args.src.engine_with(cfg.memory_plan(1), args.kernel.entries())?;
    let queues = engine.info().queues.clone();
    let output = FlowOutput::open(&args, &queues)?;
    let running = engine.start_streams(&cfg, |q| output.handler(q)).map_err(|e| match e {
        RunError::Setting(s) => setting_error(&s),
        other => anyhow::Error::new(other),
    });
    let running = running?;
    let exporting = match drop_privileges(&args.src.live).and_then(|()| output.start(&running.stop_handle(), events.as_ref())) {
        Ok(x) => x,
        Err(e) => {
            // Workers sending now find the exporters gone instead of waiting.
            running.stop_handle().stop();
            if running.wait_for(Duration::from_secs(1)) {
                running.join();
            }
            return Err(e);
        }
    };
    let mut report = watch_started(running, "flows", args.quiet, metrics)?;
    let mut total = StreamStats::default();
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
    }
    check_packets(&report, &total)?;
    let (elapsed, errors, bad) =
        (report.elapsed, report.errors.iter().map(ToString::to_string).collect::<Vec<_>>(), report.failed_on_bad_input());
    let handlers: Vec<ToExporter> = std::mem::take(&mut report.handlers).into_iter().map(|(_, l)| l.into_handler()).collect();
    drop(report);
    let say = |m: String| eprintln!("weir flows: {m}");
    let summary = exporting.finish(&args, handlers, &total, elapsed, events.as_ref(), &say)?;
    let ev = events.as_ref().filter(|e| e.has_file()).map(Events::finish);
    let kafka = kafka.as_ref().map(|k| crate::kafka::finish_and_report("flows", k));
    if let Some(ev) = &ev {
        say(format!("{} flow events written to {}", ev.written, args.events.as_deref().unwrap_or("?")));
        if let Some(e) = &ev.error {
            say(format!("cannot write events to {e}: {} events were not written", ev.unwritten));
        }
    }
    if let Some(stats) = stats {
        let mut j = stats_json(&total);
        j["export"] = summary.json.clone();
        if let Some(ev) = &ev {
            j["events"] = serde_json::json!({"written": ev.written, "unwritten": ev.unwritten, "error": ev.error});
        }
        if let Some((k, _)) = &kafka {
            j["kafka"] = serde_json::json!(k);
        }
        j["elapsed_s"] = serde_json::json!(elapsed.as_secs_f64());
        stats.write(&j)?;
    }
    for e in &errors {
        say(e.clone());
    }
    if bad {
        return Ok(ExitCode::from(crate::exit::BAD_INPUT));
    }
    let events_ok = ev.is_none_or(|ev| ev.error.is_none()) && kafka.as_ref().is_none_or(|(_, ok)| *ok);
    Ok(if errors.is_empty() && summary.lost == 0 && !summary.bounced && events_ok && !summary.file_error && summary.adds_up {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Records the exporter threads were handed (each is one event): those
/// the layer handed out, less those folded into a biflow and those that
/// never reached an exporter.
fn handed_out_to_exporters(orphaned: u64, folded: u64, total: &StreamStats) -> u64 {
    total.streams + total.active_records - folded - orphaned
}

/// Words for the summary: "paced at 10000 datagrams/s per collector".
fn describe(p: Pacing) -> String {
    match p.rate {
        Some(r) => format!("paced at {r} datagrams/s per collector"),
        None => "not paced (--export-rate 0)".to_string(),
    }
}

/// Time the exporters waited on the collectors' pacers, the longest of them.
fn paced_s(st: &ExportStats) -> f64 {
    st.collectors.iter().map(|c| c.paced.as_secs_f64()).fold(0.0, f64::max)
}

/// Says what came back from each collector: true if any datagram bounced
/// (came back port unreachable), which fails the run.
fn report_collectors(st: &ExportStats, say: &dyn Fn(String)) -> bool {
    let mut bounced = false;
    for c in st.collectors.iter().filter(|c| c.bounced > 0) {
        bounced = true;
        let addr = c.addr.map_or_else(String::new, |a| a.to_string());
        if c.nothing_listens {
            say(format!(
                "error: nothing listens at {addr}: its port answered the first datagram and the last ones with ICMP port \
                 unreachable ({} of {} datagrams reported bounced; the kernel limits how many it reports): the records sent there are lost",
                c.bounced, c.datagrams
            ));
        } else {
            say(format!(
                "{addr}: {} of {} datagrams came back port unreachable, with {} records (at least: the kernel limits how \
                 many ICMP errors it reports): the collector was not listening for part of the run",
                c.bounced, c.datagrams, c.bounced_records
            ));
        }
    }
    bounced
}

/// What the queues' handlers counted at their end.
struct Handed {
    /// Records not exported: the exporter thread had stopped.
    orphaned: u64,
    /// Records sent as the reverse half of a biflow.
    folded: u64,
}

/// Prints the statistics; false if the records do not add up (a bug).
fn print_stats(
    args: &FlowsArgs,
    total: &StreamStats,
    st: &ExportStats,
    handlers: Handed,
    exporters: usize,
    elapsed: Duration,
    say: &dyn Fn(String),
) -> bool {
    let Handed { orphaned, folded } = handlers;
    let handed_out = total.streams + total.active_records;
    let pps = total.packets as f64 / elapsed.as_secs_f64().max(1e-9);
    let reasons: Vec<String> = EndReason::ALL.iter().zip(st.by_reason).map(|(r, n)| format!("{n} {}", r.name())).collect();
    say(format!(
        "{} packets ({}) in {:.2} s: {} records ({} connections, {} by the active timeout); {} exported as {} ({}), {} {} messages, {} datagrams to {} collector(s) ({}), {} with templates{}; exported: handed to a collector's socket or written to a file",
        total.packets,
        human_rate(pps),
        elapsed.as_secs_f64(),
        handed_out,
        total.connections,
        total.active_records,
        st.exported,
        args.format.name(),
        reasons.join(", "),
        st.messages,
        args.format.name(),
        st.datagrams(),
        args.collectors.len(),
        if args.collectors.is_empty() {
            "none".to_string()
        } else {
            format!("{}, {:.2} s waited", describe(Pacing::new(args.export_rate)), paced_s(st))
        },
        st.template_messages,
        match &args.write {
            Some(_) => format!(
                "; {} records written to {} file(s): {}",
                st.written,
                st.files.len(),
                st.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
            None => String::new(),
        }
    ));
    if exporters > 1 {
        say(format!(
            "{exporters} exporters, one per queue, as observation domains {} to {}",
            args.domain,
            u64::from(args.domain) + exporters as u64 - 1
        ));
    }
    if args.biflow {
        say(format!(
            "biflows: {} of the {handed_out} records went out as the reverse direction of another, in {} biflow records",
            folded, st.exported
        ));
    }
    say(packet_line(total));
    if let Some(line) = kernel_line(total) {
        say(line);
    }
    let f = &total.fragment;
    let unrecorded = f.fragments - f.fragments_reassembled;
    if unrecorded > 0 {
        say(format!(
            "{unrecorded} IP fragments in no record: their datagram never completed ({} timed out, {} evicted, {} over memory, {} too big, {} overlapping IPv6; {} malformed, {} inconsistent fragments)",
            f.datagrams_timed_out, f.datagrams_evicted, f.datagrams_over_memory, f.datagrams_too_big, f.datagrams_overlapping, f.malformed, f.inconsistent
        ));
    }
    if st.not_carried > 0 {
        say(format!("{} IPv6 records not exported: NetFlow v5 carries IPv4 only (--format ipfix or v9 carries them)", st.not_carried));
    }
    if st.v5_saturated > 0 {
        say(format!("{} records had more packets or octets than v5's 32 bits hold: sent as 4294967295", st.v5_saturated));
    }
    if st.send_errors() > 0 {
        say(format!(
            "{} send errors ({} records reached no collector); the first: {}",
            st.send_errors(),
            st.lost_to_send_errors,
            st.first_send_error().as_deref().unwrap_or("?")
        ));
    }
    if let Some(e) = &st.file_error {
        say(format!("cannot write {e}: {} records were not written to files", st.unwritten));
    }
    if orphaned > 0 {
        say(format!("{orphaned} records not exported: the exporter thread had stopped"));
    }
    let accounted = st.exported + st.not_carried + st.lost + orphaned + folded;
    if accounted != handed_out {
        say(format!("internal accounting error: {handed_out} records handed out, {accounted} exported or counted"));
    }
    accounted == handed_out
}
