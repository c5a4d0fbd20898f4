//! `weir record`: write what a source delivers to pcap or pcapng files, with
//! rotation by size, time or packet count, or to standard output (`-w -`).
//!
//! All queues write into one rotating output. With one queue the packets keep
//! their capture order; with several, each queue's packets keep theirs and the
//! queues interleave as their workers run.
//!
//! The output is opened before the first packet is written, after root is
//! dropped (`-Z`), as tcpdump does: the workers wait for it, so an output the
//! user cannot write is an error before anything is recorded, and files are
//! created by the user the capture runs as. Four times a second the open file's
//! buffer is handed to the kernel, so a kill loses at most that much; what
//! survives a kill or a power loss is in [`weir::sink::rotate`] and `--help`.

use crate::exit::bad_input;
use crate::run::{announce, drop_privileges, stop_on_signal, Monitor, SourceArgs};
use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use std::fs::File;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir::sink::rotate::{FileSpec, RotatingWriter, RotationPolicy};
use weir::sink::{FileFormat, TsPrecision};
use weir::{Handler, Packet};

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    Pcap,
    Pcapng,
}

/// The rotation options `weir record` and `weir flows -w` share.
#[derive(Args, Debug)]
pub struct RotationArgs {
    /// Start a new file before one would exceed SIZE million bytes (as tcpdump -C;
    /// 0.001 to 10^9).
    #[arg(short = 'C', long = "file-size", value_name = "SIZE", help_heading = "Output", value_parser = crate::args::float_in(0.001, 1e9))]
    pub file_size: Option<f64>,

    /// Start a new file every SECS seconds of packet time (as tcpdump -G; at most ten years).
    #[arg(short = 'G', long = "rotate-seconds", value_name = "SECS", help_heading = "Output",
          value_parser = clap::value_parser!(u64).range(1..=crate::args::MAX_SECONDS as u64))]
    pub rotate_seconds: Option<u64>,

    /// Keep at most N files, deleting the oldest (as tcpdump -W; 1 to 1,000,000).
    #[arg(short = 'W', long = "max-files", value_name = "N", help_heading = "Output", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_files: Option<u32>,
}

impl RotationArgs {
    /// The policy, with `max_packets` (records) from the command's own option.
    pub fn policy(&self, max_packets: Option<u64>) -> RotationPolicy {
        RotationPolicy {
            max_bytes: self.file_size.map(|mb| (mb * 1e6) as u64),
            max_seconds: self.rotate_seconds,
            max_packets,
            max_files: self.max_files.map(|n| n as usize),
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir record trace.pcap@0-1 -f 'tcp port 80' -w /tmp/http.pcap\n  \
weir record big.pcap -w '/tmp/cap-%Y%m%d-%H%M%S.pcapng' -G 60 -W 10\n  weir record big.pcap -w /tmp/part.pcap -C 100\n  \
weir record eth1 -w - | tshark -r - -c 10\n\n\
Names: OUT is expanded with strftime conversions (UTC, from the first packet in each file) and \
{seq} (the file's number in this run). When rotating with a name that has neither, weir inserts \
.N before the extension (out.0.pcap, out.1.pcap, ...). Time rotation (-G) follows packet \
timestamps, aligned to multiples of the period. `-w -` writes one pcap (or --format pcapng) stream \
to standard output; it cannot rotate, and status lines go to standard error as always. Pipes, FIFOs \
and devices such as /dev/null are written like files, but not synced.\n\n\
The output is opened before capture starts (with -Z, as USER), so a file that cannot be written \
is an error before anything is recorded. A name with strftime conversions is named by its first \
packet, so only its directory is checked then.\n\n\
What survives a kill: every file has its header on disk from the moment it is opened, and a file \
is closed (written out and synced) before the next one is opened. After SIGKILL, every closed file \
is complete, and the open one holds everything up to the last hand-over to the kernel, which \
weir makes four times a second (or when 1 MiB is buffered): the packets of the last quarter second \
or so are lost, and its last packet may be cut short (readers report it truncated). After a power \
loss or a kernel crash, closed files are complete (synced with their directory entry); the open \
file keeps what the kernel had written back (by default within about 30 s), possibly less.")]
pub struct RecordArgs {
    #[command(flatten)]
    pub src: SourceArgs,

    /// Output file name pattern (see below), or `-` for standard output.
    #[arg(short = 'w', long = "write", value_name = "OUT", help_heading = "Output")]
    pub out: String,

    /// File format; by default pcapng if OUT ends in .pcapng, else pcap.
    #[arg(long, value_enum, help_heading = "Output")]
    pub format: Option<Format>,

    /// Write nanosecond timestamps (default: microseconds for pcap, nanoseconds for pcapng).
    #[arg(long, conflicts_with = "micro", help_heading = "Output")]
    pub nano: bool,

    /// Write microsecond timestamps.
    #[arg(long, help_heading = "Output")]
    pub micro: bool,

    #[command(flatten)]
    pub rotation: RotationArgs,

    /// Start a new file after N packets.
    #[arg(long = "file-packets", value_name = "N", help_heading = "Output", value_parser = clap::value_parser!(u64).range(1..))]
    pub file_packets: Option<u64>,

    /// No status lines while running.
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// The rotating writer shared by the queues' workers, and its first error.
pub(crate) struct Shared {
    pub(crate) writer: Option<RotatingWriter>,
    pub(crate) error: Option<anyhow::Error>,
    pub(crate) packets: u64,
}

/// One queue's handler: each packet into the shared writer.
pub(crate) struct Recorder {
    pub(crate) shared: Arc<Mutex<Shared>>,
}

impl Handler for Recorder {
    fn packet(&mut self, p: &Packet<'_>) {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.error.is_some() {
            return;
        }
        let written = match s.writer.as_mut() {
            Some(w) => w.write_packet(p.ts_ns(), p.data(), p.wire_len()),
            None => return,
        };
        match written {
            Ok(()) => s.packets += 1,
            Err(e) => s.error = Some(anyhow!(e)),
        }
    }
}

/// Standard output's name in messages.
const STDOUT: &str = "standard output";

/// The output `args` names, for a source of `info`, not yet opened
/// ([`RotatingWriter::prepare`] opens it, after root is dropped).
pub(crate) fn writer(args: &RecordArgs, info: &weir::engine::SourceInfo) -> anyhow::Result<RotatingWriter> {
    let to_stdout = args.out == "-";
    let format = match args.format {
        Some(Format::Pcap) => FileFormat::Pcap,
        Some(Format::Pcapng) => FileFormat::PcapNg,
        None if args.out.ends_with(".pcapng") => FileFormat::PcapNg,
        None => FileFormat::Pcap,
    };
    let precision = match (args.nano, args.micro, format) {
        (true, _, _) => TsPrecision::Nano,
        (_, true, _) => TsPrecision::Micro,
        (_, _, FileFormat::PcapNg) => TsPrecision::Nano,
        _ => TsPrecision::Micro,
    };
    let policy = args.rotation.policy(args.file_packets);
    if to_stdout && (policy.rotates() || policy.max_files.is_some()) {
        return Err(bad_input(anyhow!(
            "-w - writes one stream to standard output, which cannot be rotated: leave out -C, -G, --file-packets and -W, \
             or write to files (-w NAME)"
        )));
    }
    let snaplen = if info.snaplen == 0 { weir::pool::MAX_CAPLEN as u32 } else { info.snaplen };
    let spec = FileSpec { format, link: info.link_type, snaplen, precision };
    if to_stdout {
        // A duplicate of descriptor 1 as a File the writer owns and buffers
        // itself, instead of Rust's locked, line-buffered stdout.
        let fd = std::io::stdout().as_fd().try_clone_to_owned().context("cannot use standard output")?;
        RotatingWriter::stream(File::from(fd), STDOUT, spec)
    } else {
        RotatingWriter::new(&args.out, spec, policy)
    }
    .map_err(bad_input)
}

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let metrics = args.metrics.bind()?;
    let engine = args.src.engine()?;
    let info = engine.info().clone();
    let writer = writer(&args, &info)?;
    let shared = Arc::new(Mutex::new(Shared { writer: Some(writer), error: None, packets: 0 }));

    // The workers wait on this lock until the output is open, so nothing is
    // written before root is dropped and the output was found writable.
    let mut gate = shared.lock().unwrap_or_else(|e| e.into_inner());
    let running = engine.start(|_q| Recorder { shared: Arc::clone(&shared) })?;
    let ready = drop_privileges(&args.src.live).and_then(|()| {
        let writer = gate.writer.as_mut().expect("the writer is only taken at the end");
        writer.prepare().map_err(|e| {
            let who = match &args.src.live.user {
                Some(user) => format!(" as user {user}"),
                None => String::new(),
            };
            let bad = e.is_bad_input();
            let e = anyhow!(e).context(format!("cannot write the capture{who}"));
            if bad {
                bad_input(e)
            } else {
                e
            }
        })
    });
    if let Err(e) = &ready {
        gate.error = Some(anyhow!("{e:#}"));
    }
    drop(gate);
    let stop = running.stop_handle();
    if let Err(e) = ready {
        stop.stop();
        // A source blocked in a read (a quiet pipe) ends only with its next
        // packet; the process exits with the error without waiting for it.
        if running.wait_for(Duration::from_secs(1)) {
            running.join();
        }
        return Err(e);
    }
    stop_on_signal(stop.clone())?;
    announce("record", &running);
    crate::metrics::serve(metrics, weir_metrics::EngineMetrics::new(running.watch()))?;
    // A write error stops the capture: there is no point capturing what cannot be kept.
    Monitor::new(&running, args.quiet).watch(&running, || {
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.error.is_none() {
            if let Some(Err(e)) = s.writer.as_mut().map(RotatingWriter::flush) {
                s.error = Some(anyhow!(e));
            }
        }
        if s.error.is_some() {
            stop.stop();
        }
    });
    let report = running.join();

    let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = s.error.take() {
        return Err(e).context("writing the capture");
    }
    let writer = s.writer.take().expect("the writer is only taken here");
    let files = writer.finish().context("closing the capture file")?;
    let total = report.stats.total();
    eprintln!(
        "weir record: {} packets from {} written to {} file{}: {}",
        s.packets,
        info.name,
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    if total.filtered + total.capture_drops + total.delivery_drops > 0 {
        eprintln!(
            "weir record: {} received, {} filtered, {} capture drops, {} delivery drops",
            total.received, total.filtered, total.capture_drops, total.delivery_drops
        );
    }
    if s.packets != total.delivered {
        bail!("internal accounting error: {} delivered but {} written", total.delivered, s.packets);
    }
    match report.error() {
        None => Ok(ExitCode::SUCCESS),
        Some(e) if report.failed_on_bad_input() => Err(bad_input(anyhow!("{e}"))),
        Some(e) => bail!("{e}"),
    }
}
