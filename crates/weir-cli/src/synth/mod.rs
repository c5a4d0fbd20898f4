//! `weir synth`: build large, realistic traces for benchmarks.
//!
//! Two sources of flows, one way of interleaving them. The built-in model
//! ([`model`], [`flow`], [`payload`]) invents flows of a realistic service mix with
//! realistic payloads; `--from DIR` ([`from_traces`]) replays the IPv4 TCP and UDP
//! flows of real traces under new addresses. Either way [`sched`] keeps
//! `--flows` flows open, interleaves their packets in time order and stops after
//! `--packets` packets. Every address is in the benchmark range 198.18.0.0/15
//! (clients in 198.18/16, servers in 198.19/16) and the output is a pure function
//! of the arguments: the same seed writes the same bytes. Memory grows with the
//! concurrency (and with the `--from` corpus), not with the number of packets.
//!
//! The summary is what the trace shows, as a reader counting 5-tuples in the
//! file would find it: flows with a packet in it, the service mix of those, and
//! concurrency with each flow open from its first to its last packet in the
//! file. What cannot be done is refused with exit 2 and no file: more flows than
//! packets (each flow needs one) before anything is written, and, after, a trace
//! that ended before all `--flows` flows had started.
//!
//! `-o -` writes the trace to standard output, as `record -w -` does (the
//! summary goes to standard error as always); a terminal is refused, and the
//! disk-space check is skipped. A trace refused after it was written cannot be
//! taken back there: the run still exits 2, and says the bytes sent are that
//! refused trace.

mod flow;
mod from_traces;
mod model;
mod packet;
mod payload;
mod rng;
mod sched;
#[cfg(test)]
mod tests;

use crate::exit::bad_input;
use anyhow::Context;
use clap::ValueEnum;
use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};

/// Capture time of the first packet: 2024-01-01T00:00:00Z, fixed so output is reproducible.
const START_NS: u64 = 1_704_067_200_000_000_000;
/// The built-in model's initial flows start spread over the time the link needs for
/// this many bytes per flow, so the trace does not open with every flow's first packet
/// at one instant.
const RAMP_BYTES_PER_FLOW: f64 = 2048.0;
/// Most flows open at once.
const MAX_FLOWS: usize = 10_000_000;
/// Memory per open flow, with the scheduler's share: 1.86 GB of peak RSS at
/// 1.5 million flows (`--packets 3000000 --flows 1500000`), rounded up.
const BYTES_PER_OPEN_FLOW: u64 = 1280;
/// Largest snapshot length libpcap accepts.
const MAX_SNAPLEN: u32 = 262_144;
const DEFAULT_MBPS: f64 = 1000.0;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Classic pcap (libpcap 2.4).
    Pcap,
    /// pcapng, one section and one Ethernet interface.
    Pcapng,
}

macro_rules! examples {
    () => {
        "Examples:\n  weir synth -o /tmp/t.pcap --packets 5000000 --flows 100000\n  \
weir synth -o /tmp/t.pcapng --format pcapng --nanos --mbps 10000 --seed 7\n  \
weir synth -o /tmp/real.pcap --from ../shared/corpus/zeek-traces --flows 2000\n  \
weir synth -o - --packets 10000 --flows 100 | weir count -"
    };
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = examples!(),
    after_long_help = concat!(
        "Without --from, flows come from a built-in model of a service mix (HTTPS, HTTP, QUIC, DNS, SSH, mail, \
SMB, RDP, databases and a few dozen more, plus unregistered high ports) with heavy-tailed sizes, complete \
TCP handshakes and teardowns with consistent sequence numbers, delayed ACKs, round-trip times of 2 to 220 ms, \
and the payloads each service really sends (HTTP headers and bodies, TLS ClientHello with SNI, DNS in wire \
format, SMTP dialogues, SSH banners and key exchange, ...). With --from DIR, the IPv4 TCP and UDP flows of \
every trace under DIR are replayed instead, each copy under fresh addresses with incrementally adjusted \
checksums, keeping packet sizes, payloads and timing.\n\n\
--flows flows are kept open: they start over a short ramp (the time the link needs for 2 KiB per flow; \
with --from, one typical flow's duration) and each one that ends is replaced at once by a new one. A reader \
of the trace sees a flow open from its first packet to its last one in the file, so the trace shows --flows \
open at once only when it is long enough for every flow to have started and to send again: at the default \
rate that takes tens of packets per flow (2,000,000 packets with --flows 100000 peak at about 98,000). The \
summary reports what the file shows: its flows (as a count of 5-tuples finds them), their service mix, and \
the peak and mean concurrency. Refused (exit 2, no file): more flows than packets, and a trace that ends \
before all --flows flows have started (the message says how many did).\n\n\
Clients are in 198.18.0.0/16 and servers in 198.19.0.0/16, never anything else. The same arguments \
always produce the same bytes. A summary goes to standard error, with a progress bar when it is a terminal.\n\n\
-o - writes the trace to standard output (not to a terminal, which is refused; -o ./- names a file called -). \
A trace refused after it was written (too few packets for --flows) has then already gone out: weir still exits 2 \
and says so.\n\n",
        examples!()
    )
)]
pub struct SynthArgs {
    /// Write the trace to this file, replacing it if it exists; `-` writes it to standard
    /// output.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,

    /// Number of packets to write (at least 1; what they take must fit on the disk).
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub packets: u64,

    /// Concurrency: how many flows are kept open (started and not yet finished) at once,
    /// from 1 to --packets; see below for what the trace shows.
    #[arg(short = 'c', long, value_name = "C", default_value_t = 10_000)]
    pub flows: usize,

    /// Seed of every random choice; the same seed gives the same file.
    #[arg(short = 's', long, value_name = "S", default_value_t = 1)]
    pub seed: u64,

    /// File format to write.
    #[arg(long, value_enum, default_value_t = Format::Pcap)]
    pub format: Format,

    /// Write nanosecond timestamps (default: microseconds).
    #[arg(long)]
    pub nanos: bool,

    /// Average aggregate rate of the built-in model in Mbit/s [default: 1000]: each
    /// flow's share (rate / flows) is spread over pacing of bulk data and idle time
    /// between transactions. Not with --from, whose flows keep their recorded timing.
    #[arg(long, value_name = "R", conflicts_with = "from", value_parser = crate::args::float_in(0.001, 1e7))]
    pub mbps: Option<f64>,

    /// Replay the IPv4 TCP and UDP flows of every pcap/pcapng file under DIR (searched
    /// recursively) instead of using the built-in model; unreadable files are skipped
    /// and counted.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,

    /// Keep at most this many bytes of each frame (the wire length is recorded in full;
    /// 1 to 262144).
    #[arg(long, value_name = "N", default_value_t = MAX_SNAPLEN, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SNAPLEN)))]
    pub snaplen: u32,
}

/// Refuse a trace that cannot fit on the disk it goes to: every record takes
/// at least its header and a minimum frame (60 bytes, or the snaplen), so
/// below that no trace of `--packets` fits, whatever the model writes.
fn check_room(args: &SynthArgs) -> anyhow::Result<()> {
    if to_stdout(args) {
        // Whatever reads standard output decides where the bytes go.
        return Ok(());
    }
    let record = match args.format {
        Format::Pcap => 16,
        Format::Pcapng => 32,
    };
    let least = args.packets.saturating_mul(record + u64::from(args.snaplen.min(60)));
    let dir = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    // No answer (a path that does not exist yet) leaves the check to creating the file.
    let Ok(fs) = nix::sys::statvfs::statvfs(dir) else { return Ok(()) };
    let free = fs.blocks_available().saturating_mul(fs.fragment_size());
    if least > free {
        return Err(bad_input(anyhow::anyhow!(
            "--packets {} takes at least {} on disk ({record} bytes of record header and {} of frame each), \
             but {} has {} free",
            args.packets,
            weir::memory::Bytes(least),
            args.snaplen.min(60),
            dir.display(),
            weir::memory::Bytes(free)
        )));
    }
    Ok(())
}

/// `-o -`: the trace goes to standard output.
fn to_stdout(args: &SynthArgs) -> bool {
    args.output.as_os_str() == "-"
}

/// Standard output's name in messages.
const STDOUT: &str = "standard output";

pub fn run(args: SynthArgs) -> anyhow::Result<ExitCode> {
    let stdout = to_stdout(&args);
    if stdout && io::stdout().is_terminal() {
        return Err(bad_input(anyhow::anyhow!(
            "-o - writes a binary trace to standard output, which is a terminal: redirect it to a file or pipe it \
             to a reader (weir synth -o - ... | weir count -), or name a file with -o"
        )));
    }
    let out_name = if stdout { STDOUT.to_string() } else { args.output.display().to_string() };
    check_room(&args)?;
    if args.flows == 0 || args.flows > MAX_FLOWS {
        return Err(bad_input(anyhow::anyhow!("--flows must be between 1 and {MAX_FLOWS}, not {}", args.flows)));
    }
    if args.flows as u64 > args.packets {
        return Err(bad_input(anyhow::anyhow!(
            "--flows {} cannot be open in --packets {}: every flow needs at least one packet (two to be open at once), \
             so {} packets hold at most {} flows; ask for fewer flows or more packets",
            args.flows,
            args.packets,
            args.packets,
            args.packets
        )));
    }
    let mut memory = weir::memory::Plan::new();
    memory.add(
        format!("open flows: {} (--flows) of about {BYTES_PER_OPEN_FLOW} bytes", args.flows),
        (args.flows as u64).saturating_mul(BYTES_PER_OPEN_FLOW),
    );
    memory.check().map_err(bad_input)?;
    let started = Instant::now();
    let corpus = match &args.from {
        Some(dir) => {
            let c = from_traces::Corpus::load(dir).map_err(bad_input)?;
            eprintln!("{}", c.stats);
            if c.is_empty() {
                return Err(bad_input(anyhow::anyhow!("no IPv4 TCP or UDP flows found under {}", dir.display())));
            }
            Some(c)
        }
        None => None,
    };
    let rate_bps = args.mbps.unwrap_or(DEFAULT_MBPS) * 1e6;
    let (file, temp) = if stdout {
        // A duplicate of descriptor 1 as a File the writer owns and buffers
        // itself, instead of Rust's locked, line-buffered stdout (as record does).
        let fd = io::stdout().as_fd().try_clone_to_owned().context("-o -: cannot use standard output")?;
        (File::from(fd), None)
    } else {
        open_output(&args.output).with_context(|| format!("cannot create {out_name}"))?
    };
    let format = match args.format {
        Format::Pcap => FileFormat::Pcap,
        Format::Pcapng => FileFormat::PcapNg,
    };
    let precision = if args.nanos { TsPrecision::Nano } else { TsPrecision::Micro };
    let mut writer = TraceWriter::new(file, format, weir::LinkType::ETHERNET, args.snaplen, precision)
        .with_context(|| format!("cannot write {out_name}"))?;
    let progress = progress_bar(args.packets);
    let snaplen = args.snaplen as usize;
    let ramp_ns = match &corpus {
        // Recorded flows set their own pace: start the copies over one typical flow's life.
        Some(c) => c.typical_duration_ns(),
        None => (RAMP_BYTES_PER_FLOW * 8e9 * args.flows as f64 / rate_bps) as u64,
    };
    let mut sink = |ts: u64, frame: &[u8], wire_len: u32| -> io::Result<()> {
        writer.write_packet(ts, &frame[..frame.len().min(snaplen)], wire_len)?;
        let n = writer.packets_written();
        if n % 65_536 == 0 {
            progress.set_position(n);
        }
        Ok(())
    };
    let mut mix = None;
    let outcome = match corpus {
        Some(c) => {
            let mut opener = from_traces::Replayer::new(&c, args.seed);
            sched::run(&mut opener, args.flows, args.packets, START_NS, ramp_ns, args.seed, &mut sink)
        }
        None => {
            let mut opener = flow::Generator::new(args.seed, args.flows, rate_bps);
            let outcome = sched::run(&mut opener, args.flows, args.packets, START_NS, ramp_ns, args.seed, &mut sink);
            mix = service_mix(opener.per_service());
            outcome
        }
    }
    .with_context(|| format!("cannot write {out_name}"))?;
    let bytes = writer.bytes_written();
    writer.finish().with_context(|| format!("cannot write {out_name}"))?;
    progress.finish_and_clear();
    if outcome.slots_started < args.flows {
        // Flows start evenly over the ramp, and the packet rate grows with the flows
        // started, so the packets by time t grow as t²: covering the whole ramp takes
        // (ramp / span)² times these packets, and these packets cover the ramp of
        // (span / ramp)² times these flows (whose ramp is that much shorter).
        let span_ns = outcome.last_ns.saturating_sub(outcome.first_ns).max(1) as f64;
        let short = (span_ns / ramp_ns.max(1) as f64).powi(2);
        return Err(bad_input(anyhow::anyhow!(
            "--flows {} needs more packets: the {} flows start over {:.3} s of traffic, but {} packets cover {:.3} s, \
             in which only {} of them started. Ask for about {} flows or fewer, or for more packets (about {} cover \
             the start of all {}).{}",
            args.flows,
            args.flows,
            ramp_ns as f64 / 1e9,
            args.packets,
            span_ns / 1e9,
            outcome.slots_started,
            (args.flows as f64 * short) as u64,
            (args.packets as f64 / short).ceil() as u64,
            args.flows,
            if stdout {
                // Standard output cannot be taken back: say what its reader got.
                " What went to standard output is that trace: discard it."
            } else {
                " Nothing was written."
            }
        )));
    }
    if let Some(temp) = temp {
        temp.persist(&args.output).with_context(|| format!("cannot write {out_name}"))?;
    }
    let span_s = outcome.last_ns.saturating_sub(outcome.first_ns) as f64 / 1e9;
    let rate = if span_s > 0.0 { outcome.wire_bytes as f64 * 8.0 / span_s / 1e6 } else { 0.0 };
    if let Some(m) = mix {
        eprintln!("{m}");
    }
    eprintln!(
        "concurrency as the trace shows it (a flow open from its first packet to its last): peak {}, mean {:.0}; \
         {span_s:.3} s of traffic at {rate:.1} Mbit/s on average",
        outcome.peak_concurrency, outcome.mean_concurrency
    );
    if outcome.peak_concurrency < args.flows {
        eprintln!(
            "note: the trace shows at most {} of the {} flows kept open at once: it ends before every flow has started \
             and sent again (more packets per flow reach --flows)",
            outcome.peak_concurrency, args.flows
        );
    }
    eprintln!(
        "wrote {} packets, {} flows (peak concurrency {}), {} bytes to {} in {:.2} s",
        outcome.packets,
        outcome.flows,
        outcome.peak_concurrency,
        bytes,
        out_name,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the trace is written. A new or regular file is written beside its name
/// and renamed over it at the end (the temporary file is returned too), so a
/// refused or failed run leaves nothing, and an older file in its place
/// untouched. Anything else (a FIFO, /dev/stdout, a symbolic link) is written in
/// place.
fn open_output(path: &Path) -> io::Result<(File, Option<tempfile::NamedTempFile>)> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => return Ok((File::create(path)?, None)),
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let temp = tempfile::Builder::new()
        .prefix(".weir-synth-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)?;
    Ok((temp.reopen()?, Some(temp)))
}

/// The most common services among the trace's flows, as "services: https 45.2%, ...".
fn service_mix(counts: &[u64]) -> Option<String> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let mut by_count: Vec<(u64, &str)> = counts.iter().zip(model::SERVICES).map(|(n, s)| (*n, s.name)).collect();
    by_count.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let top: Vec<String> = by_count.iter().take(8).map(|(n, name)| format!("{name} {:.1}%", *n as f64 * 100.0 / total as f64)).collect();
    Some(format!("services: {}, ... ({} flows)", top.join(", "), total))
}

fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} packets, {per_sec}, eta {eta}")
            .expect("the template is valid"),
    );
    bar
}
