//! `weir inspect --streams`: the rules matched on the stream layer's data
//! ([`weir::stream`]) instead of on packets.
//!
//! Contract: each direction of a connection is scanned as the stream layer
//! delivers it, piece by piece, in stream order: a TCP stream's bytes
//! reassembled (a content split across segments is found), a UDP stream's
//! datagrams one after the other. A stream of a TCP or UDP service port is
//! scanned with the automata of that port, as a packet of it would be;
//! other protocols are not scanned. Every match is an alert (Scap counts
//! matches): the rule, the stream (its tuple as sent, its direction and the
//! time of its first packet) and the stream offset of the match's first
//! byte. The same content twice in a stream is two alerts; overlapping
//! matches each count.
//!
//! A match that straddles two pieces is found exactly once: every piece
//! repeats the last `longest content − 1` bytes of the one before
//! ([`StreamConfig::piece_overlap`]), so the second piece holds the whole
//! match, and a match that ends inside those repeated bytes was already
//! reported with the first piece, so it is skipped. After a gap nothing is
//! repeated (the bytes are not adjacent) and no match spans it.
//!
//! With a cutoff, the bytes of a direction past it are discarded by the
//! stream layer (counted, never scanned), so matches there are not found:
//! what the cutoff saves and costs is what `bench/streams.py` part 4
//! measures. The summary gives the bytes scanned and discarded, the alerts
//! and the stream layer's counts.
//!
//! Alerts are written sorted ([`StreamAlert`]'s order), through the same
//! bounded spill as packet alerts, so the output is the same bytes with the
//! locality buffer on or off and on one queue or several, as long as the
//! stream layer closes streams alike: no eviction from a full table and no
//! bytes dropped for memory (both counted in the summary).

use super::records::StreamAlert;
use super::spill::{self, Spill};
use super::{community_id, flow_text, mib, InspectArgs, Matcher, SPILL_RECORDS};
use crate::count::finish;
use crate::exit::{bad_input, out, setting_error};
use crate::kafka::Kafka;
use crate::run::{human_rate, run_started};
use crate::streams::{check_packets, kernel_line, packet_line, stats_json};
use anyhow::{anyhow, Context};
use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::Arc;
use weir::engine::RunError;
use weir::stream::{Direction, Mode, Piece, Stream, StreamConfig, StreamCtl, StreamHandler, StreamStats};
use weir::wire::{ip_proto, FlowTuple, L4Ports};
use weir::Engine;

/// The stream layer's settings for `args`: its stream options, the
/// inspector's idle timeout, and pieces that repeat the longest content less
/// one byte.
pub(super) fn config(args: &InspectArgs, rules: &[super::rules::Rule]) -> anyhow::Result<StreamConfig> {
    let overlap = rules.iter().map(|r| r.content.len()).max().unwrap_or(1) - 1;
    let piece = args.stream.piece;
    if piece > 0 && overlap >= piece {
        return Err(bad_input(anyhow!(
            "--piece {piece}: each piece repeats the last {overlap} bytes of the one before (the longest rule content less one) \
             so that a match across two pieces is found, and must be longer than that"
        )));
    }
    let idle_timeout_ns = u64::try_from(args.idle_timeout.as_nanos()).unwrap_or(u64::MAX);
    let cfg = StreamConfig {
        kernel_install_after: args.kernel.kernel_install_after,
        filter_engine: args.src.filter_engine,
        ..args.stream.config(idle_timeout_ns, overlap)?
    };
    cfg.check().map_err(|e| setting_error(&e))?;
    Ok(cfg)
}

/// One queue's matcher of stream data.
struct StreamInspector {
    matcher: Arc<Matcher>,
    alerts: Spill<StreamAlert>,
    /// The first failure to write a spill file: reported at the end, and the run fails.
    error: Option<std::io::Error>,
    /// `--kafka`: each match as an alert record, as it is found.
    kafka: Option<Kafka>,
}

/// The stream's tuple from its sender to its receiver.
fn tuple(s: &Stream) -> FlowTuple {
    let ports = Some(L4Ports { src: s.sport, dst: s.dport });
    let v6 = |a: IpAddr| match a {
        IpAddr::V4(x) => x.to_ipv6_mapped().octets(),
        IpAddr::V6(x) => x.octets(),
    };
    match (s.src, s.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => FlowTuple::V4 { src: src.octets(), dst: dst.octets(), proto: s.proto, ports },
        (src, dst) => FlowTuple::V6 { src: v6(src), dst: v6(dst), proto: s.proto, ports },
    }
}

impl StreamHandler for StreamInspector {
    /// The service port whose rules the stream is matched with; `None`: not TCP or UDP.
    type State = Option<u16>;

    fn created(&mut self, ctl: &mut StreamCtl<'_>) -> Option<u16> {
        let s = ctl.stream();
        matches!(s.proto, ip_proto::TCP | ip_proto::UDP).then(|| s.sport.min(s.dport))
    }

    fn data(&mut self, ctl: &mut StreamCtl<'_>, port: &mut Option<u16>, piece: &Piece<'_>) {
        let Some(port) = *port else { return };
        let s = ctl.stream();
        let (alerts, error, kafka) = (&mut self.alerts, &mut self.error, &self.kafka);
        self.matcher.each_match(port, piece.data, |rule, m| {
            // Ends in the bytes repeated from the previous piece: reported with it.
            if m.end() <= piece.overlap {
                return;
            }
            let a = StreamAlert {
                first_ns: s.first_ns,
                stream: tuple(s),
                responder: s.direction == Direction::Responder,
                offset: piece.offset + m.start() as u64,
                rule,
            };
            if let Some(k) = kafka {
                k.alert(s, rule, a.offset);
            }
            if let Err(e) = alerts.push(a) {
                error.get_or_insert(e);
            }
        });
    }

    fn closed(&mut self, _: &Stream, _: Option<u16>) {}
}

/// Runs the engine's stream layer with a matcher per queue and writes the
/// sorted alerts to `out` and the summary.
pub(super) fn run(
    engine: Engine,
    cfg: &StreamConfig,
    matcher: Arc<Matcher>,
    mut out: Box<dyn Write>,
    args: &InspectArgs,
    metrics: Option<weir_metrics::Listener>,
    kafka: Option<Kafka>,
) -> anyhow::Result<ExitCode> {
    let queues = engine.info().queues.len().max(1);
    let mut workers: Vec<StreamInspector> = (0..queues)
        .map(|_| StreamInspector { matcher: matcher.clone(), alerts: Spill::new(SPILL_RECORDS), error: None, kafka: kafka.clone() })
        .collect();
    let spill_bytes: usize = workers.iter().map(|w| w.alerts.memory_bytes()).sum();
    if !args.quiet {
        eprintln!(
            "weir inspect: on streams ({}), {}, pieces of {} bytes repeating {}; at most {} connections, {:.0} MiB of reassembly memory, \
             idle timeout {} s of packet time; {:.1} MiB for alerts waiting to be written",
            match cfg.mode {
                Mode::Packets => "packets",
                Mode::TcpFast => "tcp-fast",
                Mode::TcpStrict => "tcp-strict",
            },
            cfg.cutoff.map_or("no cutoff".to_string(), |c| format!("cutoff {c} bytes")),
            cfg.piece,
            cfg.piece_overlap,
            cfg.max_connections,
            mib(usize::try_from(cfg.memory).unwrap_or(usize::MAX)),
            args.idle_timeout.as_secs_f64(),
            mib(spill_bytes)
        );
    }
    let running = engine.start_streams(cfg, |_| workers.pop().expect("one inspector was made per queue")).map_err(|e| match e {
        RunError::Setting(s) => setting_error(&s),
        other => anyhow::Error::new(other),
    })?;
    let mut report = run_started(running, "inspect", &args.src.live, args.quiet || args.json, metrics)?;
    let secs = report.elapsed.as_secs_f64();

    let mut total = StreamStats::default();
    for (_, layer) in &report.handlers {
        total.add(&layer.stats());
    }
    check_packets(&report, &total)?;
    let mut spills = Vec::new();
    for (_, layer) in std::mem::take(&mut report.handlers) {
        let w = layer.into_handler();
        if let Some(e) = w.error {
            return Err(anyhow!(e).context("writing alerts to a temporary file"));
        }
        spills.push(w.alerts);
    }
    let spilled: u64 = spills.iter().map(Spill::spilled).sum();

    let mut w = std::io::BufWriter::new(&mut out);
    let mut alerts = 0u64;
    for a in spill::merge(spills).context("reading back spilled alerts")? {
        let a = a.context("reading back spilled alerts")?;
        let direction = if a.responder { "responder" } else { "initiator" };
        writeln!(
            w,
            "{}",
            serde_json::json!({"alert": a.rule, "stream": flow_text(&a.stream), "community_id": community_id(&a.stream), "direction": direction, "first_ns": a.first_ns, "offset": a.offset})
        )?;
        alerts += 1;
    }
    w.flush()?;
    drop(w);
    let kafka = kafka.as_ref().map(|k| crate::kafka::finish_and_report("inspect", k));
    if let Some((k, _)) = &kafka {
        if k.made_total() != alerts && args.kafka.types.iter().all(|t| t == "alert") {
            eprintln!("weir inspect: internal accounting error: {alerts} alerts, {} handed to Kafka", k.made_total());
        }
    }
    let packets = report.stats.total();
    if args.json {
        let summary = serde_json::json!({
            "mode": "streams",
            "packets": packets.delivered,
            "elapsed_s": secs,
            "alerts": alerts,
            "cutoff": cfg.cutoff,
            "piece": cfg.piece,
            "piece_overlap": cfg.piece_overlap,
            "stream_bytes": total.bytes,
            "delivered_bytes": total.delivered,
            "discarded_bytes": total.discarded,
            "stream_layer": stats_json(&total),
            "spill_buffer_bytes": spill_bytes,
            "records_spilled_to_disk": spilled,
            "capture_drops": packets.capture_drops,
            "delivery_drops": packets.delivery_drops,
            "kafka": kafka.as_ref().map(|(k, _)| k),
        });
        out!("{summary}");
    } else {
        let share = |n: u64| if total.bytes == 0 { 0.0 } else { 100.0 * n as f64 / total.bytes as f64 };
        eprintln!(
            "weir inspect: {} packets in {secs:.2} s ({}pps), {alerts} alerts on {} streams in {} connections; \
             stream bytes: {} scanned, {} discarded past the cutoff ({:.1}%), {} dropped for memory, {} gap{}; drops {}+{}",
            packets.delivered,
            human_rate(packets.delivered as f64 / secs.max(1e-9)),
            total.streams,
            total.connections,
            total.delivered,
            total.discarded,
            share(total.discarded),
            total.dropped,
            total.gap,
            if spilled > 0 { format!(", {spilled} alerts spilled to disk") } else { String::new() },
            packets.capture_drops,
            packets.delivery_drops
        );
        eprintln!("weir inspect: {}", packet_line(&total));
        if let Some(line) = kernel_line(&total) {
            eprintln!("weir inspect: {line}");
        }
    }
    let code = finish(&report)?;
    Ok(if kafka.is_some_and(|(_, ok)| !ok) { ExitCode::FAILURE } else { code })
}
