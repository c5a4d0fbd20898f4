//! `weir flows`: a flow exporter on the stream layer. Each worker's stream
//! layer runs in flows mode at cutoff 0 (statistics only: no payload is
//! kept), and every record it hands out (a direction of a connection at its
//! close or its active timeout) travels over a channel to one exporter
//! thread, which sends IPFIX, NetFlow v9 or v5 messages to the collectors.
//!
//! Nothing is lost silently: every record the layer hands out is exported,
//! counted as one the format cannot carry (IPv6 in v5), or counted as lost
//! to send errors; the packets that are in no record (not IP, malformed, IP
//! fragments of a datagram that never completed) are the stream layer's
//! counts, printed with the rest.

mod encode;
mod export;

use crate::exit::{bad_input, setting_error};
use crate::run::{human_rate, run_started, KernelCutoffArgs, SourceArgs};
use crate::streams::{check_packets, kernel_line, packet_line, stats_json};
use clap::Args;
use encode::{EndReason, FlowRecord, Format};
use export::{ExportStats, Exporter};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::time::Duration;
use weir::engine::RunError;
use weir::stream::{CloseReason, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
weir flows trace.pcap -n 127.0.0.1:9995                          # IPFIX to nfcapd -p 9995\n  \
weir flows trace.pcap@0-1 -n 10.0.0.5:2055 --format v9 --domain 7\n  \
weir flows afpacket:eth0@0-3 -n collector:4739 -n backup:4739 --active-timeout 60 --inactive-timeout 15\n\n\
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
A fleet of sensors into one collector: give each weir its own --domain (IPFIX's observation domain, v9's source \
id, v5's engine type and id as the high and low byte): nfcapd keeps exporters apart by address and domain, and \
sequence numbers count per domain. Every queue of one weir shares its domain and one exporter thread, so the \
collector sees one ordered sequence.\n\n\
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
    #[arg(short = 'n', long = "collector", value_name = "HOST:PORT", required = true)]
    pub collectors: Vec<String>,

    /// Export format: ipfix (RFC 7011), v9 (NetFlow 9, RFC 3954) or v5 (NetFlow 5, IPv4 only).
    #[arg(long, default_value = "ipfix", value_parser = parse_format)]
    pub format: Format,

    /// Observation domain: IPFIX's observation domain id, v9's source id, v5's engine type and id (at most 65535).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub domain: u32,

    /// Export a record of a flow still going after this long (seconds, packet time); it goes on in a next record.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub active_timeout: u64,

    /// Export a flow's records after this long without a packet of its connection (seconds, packet time).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub inactive_timeout: u64,

    /// Send the templates (IPFIX, v9) again this often (wall-clock seconds), so a collector started later
    /// learns them; they always go in the first message.
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub template_refresh: u64,

    /// Most connections tracked at once (all queues together); past it the least recently seen is exported early.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub max_flows: usize,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

/// Records waiting between the workers and the exporter, at most: a worker
/// that finds the channel full waits (no record is dropped).
const CHANNEL_RECORDS: usize = 1 << 16;

/// One queue's handler: turns each handed-out stream record into a flow
/// record for the exporter.
struct ToExporter {
    tx: SyncSender<FlowRecord>,
    /// Records the exporter thread was gone for (it panicked): counted.
    orphaned: u64,
}

impl ToExporter {
    fn send(&mut self, s: &Stream, end: EndReason) {
        let r = FlowRecord {
            src: s.src,
            dst: s.dst,
            sport: s.sport,
            dport: s.dport,
            proto: s.proto,
            tcp_flags: s.tcp_flags,
            packets: s.packets,
            octets: s.octets,
            start_ms: s.first_ns / 1_000_000,
            end_ms: s.last_ns / 1_000_000,
            ingress: s.queue.0 as u32 + 1,
            end,
        };
        if self.tx.send(r).is_err() {
            self.orphaned += 1;
        }
    }
}

impl StreamHandler for ToExporter {
    type State = ();

    fn created(&mut self, _: &mut StreamCtl<'_>) {}

    fn data(&mut self, _: &mut StreamCtl<'_>, _: &mut (), _: &weir::stream::Piece<'_>) {}

    fn active(&mut self, s: &Stream, _: &mut ()) {
        self.send(s, EndReason::Active);
    }

    fn closed(&mut self, s: &Stream, _: ()) {
        let end = match s.closed {
            Some(CloseReason::Fin | CloseReason::Rst | CloseReason::Reused) => EndReason::EndOfFlow,
            Some(CloseReason::Idle) => EndReason::Idle,
            Some(CloseReason::Evicted) => EndReason::LackOfResources,
            Some(CloseReason::EndOfInput) | None => EndReason::Forced,
        };
        self.send(s, end);
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

pub fn run(args: FlowsArgs) -> anyhow::Result<ExitCode> {
    let exporter = Exporter {
        format: args.format,
        domain: args.domain,
        collectors: collectors(&args.collectors)?,
        template_refresh: Duration::from_secs(args.template_refresh),
    };
    let cfg = StreamConfig {
        mode: weir::stream::Mode::Packets,
        cutoff: Some(0),
        flows: true,
        idle_timeout_ns: args.inactive_timeout.saturating_mul(1_000_000_000),
        active_timeout_ns: Some(args.active_timeout.saturating_mul(1_000_000_000)),
        max_connections: args.max_flows,
        // No payload is kept: no reassembly memory is needed.
        memory: 0,
        ..StreamConfig::default()
    };
    cfg.check().map_err(|e| setting_error(&e))?;
    let export = exporter.open()?;
    let engine = args.src.engine_with(cfg.memory_plan(1), args.kernel.entries())?;
    let (tx, rx) = sync_channel(CHANNEL_RECORDS);
    let thread = std::thread::Builder::new().name("weir-export".into()).spawn(move || export.run(&rx))?;
    let running = engine.start_streams(&cfg, |_| ToExporter { tx: tx.clone(), orphaned: 0 }).map_err(|e| match e {
        RunError::Setting(s) => setting_error(&s),
        other => anyhow::Error::new(other),
    });
    drop(tx);
    let report = run_started(running?, "flows", &args.src.live, args.quiet)?;
    let mut total = StreamStats::default();
    let mut orphaned = 0;
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
        orphaned += layer.handler().orphaned;
    }
    check_packets(&report, &total)?;
    let (elapsed, errors, bad) =
        (report.elapsed, report.errors.iter().map(ToString::to_string).collect::<Vec<_>>(), report.failed_on_bad_input());
    // The handlers hold the channel's senders: the exporter ends once they go.
    drop(report);
    let st = thread.join().map_err(|_| anyhow::anyhow!("the exporter thread panicked"))?;
    let adds_up = print_stats(&args, &total, &st, orphaned, elapsed);
    if let Some(path) = &args.stats {
        let mut j = stats_json(&total);
        j["export"] = serde_json::json!({"exported": st.exported, "messages": st.messages, "datagrams": st.datagrams,
                                         "not_carried": st.not_carried, "lost_to_send_errors": st.lost_to_send_errors, "orphaned": orphaned});
        j["elapsed_s"] = serde_json::json!(elapsed.as_secs_f64());
        std::fs::write(path, format!("{j}\n")).map_err(|e| anyhow::anyhow!("--stats {}: {e}", path.display()))?;
    }
    for e in &errors {
        eprintln!("weir flows: {e}");
    }
    if bad {
        return Ok(ExitCode::from(crate::exit::BAD_INPUT));
    }
    let lost = st.lost_to_send_errors + orphaned;
    Ok(if errors.is_empty() && lost == 0 && adds_up { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Prints the statistics; false if the records do not add up (a bug).
fn print_stats(args: &FlowsArgs, total: &StreamStats, st: &ExportStats, orphaned: u64, elapsed: Duration) -> bool {
    let handed_out = total.streams + total.active_records;
    let pps = total.packets as f64 / elapsed.as_secs_f64().max(1e-9);
    let reasons: Vec<String> = EndReason::ALL.iter().zip(st.by_reason).map(|(r, n)| format!("{n} {}", r.name())).collect();
    eprintln!(
        "weir flows: {} packets ({}) in {:.2} s: {} records ({} connections, {} by the active timeout); {} exported as {} ({}), {} {} messages, {} datagrams to {} collector(s), {} with templates",
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
        st.datagrams,
        args.collectors.len(),
        st.template_messages
    );
    eprintln!("weir flows: {}", packet_line(total));
    if let Some(line) = kernel_line(total) {
        eprintln!("weir flows: {line}");
    }
    let f = &total.fragment;
    let unrecorded = f.fragments - f.fragments_reassembled;
    if unrecorded > 0 {
        eprintln!(
            "weir flows: {unrecorded} IP fragments in no record: their datagram never completed ({} timed out, {} evicted, {} over memory, {} too big; {} malformed, {} inconsistent fragments)",
            f.datagrams_timed_out, f.datagrams_evicted, f.datagrams_over_memory, f.datagrams_too_big, f.malformed, f.inconsistent
        );
    }
    if st.not_carried > 0 {
        eprintln!(
            "weir flows: {} IPv6 records not exported: NetFlow v5 carries IPv4 only (--format ipfix or v9 carries them)",
            st.not_carried
        );
    }
    if st.v5_saturated > 0 {
        eprintln!("weir flows: {} records had more packets or octets than v5's 32 bits hold: sent as 4294967295", st.v5_saturated);
    }
    if st.send_errors > 0 {
        eprintln!(
            "weir flows: {} send errors ({} records reached no collector); the first: {}",
            st.send_errors,
            st.lost_to_send_errors,
            st.first_send_error.as_deref().unwrap_or("?")
        );
    }
    if orphaned > 0 {
        eprintln!("weir flows: {orphaned} records not exported: the exporter thread had stopped");
    }
    let accounted = st.exported + st.not_carried + st.lost_to_send_errors + orphaned;
    if accounted != handed_out {
        eprintln!("weir flows: internal accounting error: {handed_out} records handed out, {accounted} exported or counted");
    }
    accounted == handed_out
}
