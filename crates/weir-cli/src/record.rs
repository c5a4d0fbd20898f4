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
//!
//! `--budget` and `--max-age` make the files a rolling buffer: the writer
//! deletes the oldest (of this run and of earlier ones in the directory) to
//! keep them, and every deletion is said on standard error as it happens,
//! with the totals in the summary. On a live source the wall clock ages the
//! files too, four times a second, so a quiet link does not keep them.

use crate::exit::bad_input;
use crate::run::{announce, drop_privileges, stop_on_signal, Monitor, SourceArgs};
use anyhow::{anyhow, bail, Context};
use clap::{Args, ValueEnum};
use std::fs::File;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir::sink::rotate::{Deletion, DeletionTotals, FileSpec, RotateError, RotatingWriter, RotationPolicy};
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
            budget_bytes: None,
            max_age: None,
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir record trace.pcap@0-1 -f 'tcp port 80' -w /tmp/http.pcap\n  \
weir record big.pcap -w '/tmp/cap-%Y%m%d-%H%M%S.pcapng' -G 60 -W 10\n  weir record big.pcap -w /tmp/part.pcap -C 100\n  \
weir record eth1 -w - | tshark -r - -c 10\n  \
weir record eth1 -w /var/lib/weir/cap.pcap -C 100 --budget 200000 --max-age 7d\n\n\
Names: OUT is expanded with strftime conversions (UTC, from the first packet in each file) and \
{seq} (the file's number in this run). When rotating with a name that has neither, weir inserts \
.N before the extension (out.0.pcap, out.1.pcap, ...). Time rotation (-G) follows packet \
timestamps, aligned to multiples of the period. `-w -` writes one pcap (or --format pcapng) stream \
to standard output; it cannot rotate, and status lines go to standard error as always. Pipes, FIFOs \
and devices such as /dev/null are written like files, but not synced.\n\n\
The output is opened before capture starts (with -Z, as USER), so a file that cannot be written \
is an error before anything is recorded. A name with strftime conversions is named by its first \
packet, so only its directory is checked then.\n\n\
The rolling buffer: --budget keeps all files, the open one included, within SIZE million bytes, \
deleting the oldest first; it needs -C, and at least twice it, because room for a whole new file \
is made before the file is opened, so the budget is never exceeded, not even for a moment (-C must \
also hold a header and one packet of the snapshot length). --max-age deletes the files whose newest \
packet is older than DURATION (90s, 30m, 12h, 7d): packet time, as -G; on a live source the clock \
ages them too. With either, files that earlier runs left in OUT's directory under names OUT could \
have produced (its text, with digits for each conversion, {seq} and the inserted .N) count as well \
and go first, oldest first, so a restarted service keeps its budget; numbering goes on after the \
highest number found, so none is overwritten. No other file is touched. Each deletion is said on \
standard error (\"weir record: budget: deleted FILE (N bytes)\"), a deletion that fails too, and \
the totals in the summary. If files that cannot be deleted fill the budget, recording stops with \
an error.\n\n\
What survives a kill: a file appears under its name with its header already written (weir writes \
it under a hidden name, .NAME.weir-new, and renames it), and a file \
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

    /// Keep all files within SIZE million bytes in total, deleting the oldest (see below; needs -C,
    /// at most half the budget; 0.001 to 10^9).
    #[arg(long = "budget", value_name = "SIZE", help_heading = "Output", value_parser = crate::args::float_in(0.001, 1e9))]
    pub budget: Option<f64>,

    /// Delete files whose newest packet is older than DURATION: 90s, 30m, 12h, 7d (see below;
    /// needs -C, -G or --file-packets).
    #[arg(long = "max-age", value_name = "DURATION", help_heading = "Output", value_parser = crate::args::duration)]
    pub max_age: Option<Duration>,

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
        self.packets(std::slice::from_ref(p));
    }

    /// The lock is taken once per run of packets, not per packet: the
    /// queues' workers share the writer.
    fn packets(&mut self, run: &[Packet<'_>]) {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        for p in run {
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
    let mut policy = args.rotation.policy(args.file_packets);
    policy.budget_bytes = args.budget.map(|mb| (mb * 1e6) as u64);
    policy.max_age = args.max_age;
    if to_stdout && (policy.rotates() || policy.max_files.is_some() || args.budget.is_some() || args.max_age.is_some()) {
        return Err(bad_input(anyhow!(
            "-w - writes one stream to standard output, which cannot be rotated: leave out -C, -G, --file-packets, -W, \
             --budget and --max-age, or write to files (-w NAME)"
        )));
    }
    check_rolling(args, &policy)?;
    let snaplen = if info.snaplen == 0 { weir::MAX_CAPLEN as u32 } else { info.snaplen };
    let spec = FileSpec { format, link: info.link_type, snaplen, precision };
    if to_stdout {
        // A duplicate of descriptor 1 as a File the writer owns and buffers
        // itself, instead of Rust's locked, line-buffered stdout.
        let fd = std::io::stdout().as_fd().try_clone_to_owned().context("cannot use standard output")?;
        RotatingWriter::stream(File::from(fd), STDOUT, spec).map_err(|e| anyhow!(e))
    } else {
        RotatingWriter::new(&args.out, spec, policy).map_err(|e| match e {
            // The library's reason, with the options that set the numbers.
            RotateError::Budget(_) => anyhow!(e).context("--budget with -C"),
            e => anyhow!(e),
        })
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
    let (earlier_files, earlier_bytes) = gate.writer.as_ref().map_or((0, 0), RotatingWriter::earlier_run);
    let early_deletions = gate.writer.as_mut().map(RotatingWriter::take_deletions).unwrap_or_default();
    drop(gate);
    if earlier_files > 0 {
        eprintln!(
            "weir record: {earlier_files} file{} ({earlier_bytes} bytes) left by earlier runs count toward --budget and --max-age; \
             the oldest go first",
            if earlier_files == 1 { "" } else { "s" }
        );
    }
    log_deletions(&early_deletions);
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
    crate::run::notify_ready("record", &running);
    // On a live source packet time is the clock's: it ages the files on
    // through quiet periods (a trace's time is its own, and stands still).
    let wall_clock_ages = args.max_age.is_some() && info.iface.is_some();
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
        let deletions = match s.writer.as_mut() {
            Some(w) => {
                if wall_clock_ages {
                    w.expire(wall_clock_ns());
                }
                w.take_deletions()
            }
            None => Vec::new(),
        };
        // Said outside the lock: the workers wait on it.
        drop(s);
        log_deletions(&deletions);
    });
    crate::notify::stopping();
    let report = running.join();

    let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = s.error.take() {
        return Err(e).context("writing the capture");
    }
    let mut writer = s.writer.take().ok_or_else(|| anyhow!("internal error: the capture's writer was taken twice"))?;
    log_deletions(&writer.take_deletions());
    let done = writer.finish_with_deletions().context("closing the capture file")?;
    log_deletions(&done.deletions);
    let files = done.files;
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
    if args.budget.is_some() || args.max_age.is_some() || args.rotation.max_files.is_some() {
        eprintln!("weir record: {}", deletion_summary(&done.totals));
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

/// `--budget` and `--max-age` against the other options, in the options'
/// own words (the library checks the same, in its words, and the rest).
fn check_rolling(args: &RecordArgs, policy: &RotationPolicy) -> anyhow::Result<()> {
    if let Some(budget) = args.budget {
        let Some(size) = args.rotation.file_size else {
            return Err(bad_input(anyhow!(
                "--budget {budget} needs -C (--file-size): the size limit bounds the open file, which counts toward the budget"
            )));
        };
        if budget < 2.0 * size {
            return Err(bad_input(anyhow!(
                "--budget {budget} with -C {size}: the budget must hold at least two files (one closed, one being \
                 written), so at least {}: lower -C or raise --budget",
                2.0 * size
            )));
        }
    }
    if args.max_age.is_some() && !policy.rotates() {
        return Err(bad_input(anyhow!(
            "--max-age needs rotation (-C, -G or --file-packets): without it the only file is the one being written, \
             which is never deleted"
        )));
    }
    Ok(())
}

/// Say each deletion, as it happened, on standard error.
pub(crate) fn log_deletions(deletions: &[Deletion]) {
    for d in deletions {
        let earlier = if d.earlier_run { ", from an earlier run" } else { "" };
        match &d.error {
            None => eprintln!("weir record: {}: deleted {} ({} bytes{earlier})", d.reason, d.path.display(), d.bytes),
            Some(e) => eprintln!(
                "weir record: {}: cannot delete {} ({} bytes{earlier}): {e}; it stays on disk and counts toward the budget",
                d.reason,
                d.path.display(),
                d.bytes
            ),
        }
    }
}

/// The summary's line of deletions.
pub(crate) fn deletion_summary(t: &DeletionTotals) -> String {
    let mut line = format!("deleted {} file{} ({} bytes)", t.files, if t.files == 1 { "" } else { "s" }, t.bytes);
    if t.failed > 0 {
        line += &format!("; {} deletion{} failed ({} bytes still on disk)", t.failed, if t.failed == 1 { "" } else { "s" }, t.failed_bytes);
    }
    if t.unlisted > 0 {
        line += &format!("; {} not listed above (too many at once)", t.unlisted);
    }
    line
}

/// Now, in ns since the Unix epoch, as packet timestamps are.
pub(crate) fn wall_clock_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
