//! `weir queues`: packets per queue over time, WireCAP's `queue_profiler`.
//!
//! Contract: every delivered packet is counted once, in the queue it arrived on
//! (`Packet::queue`, so a chunk offloaded to a buddy's worker still counts for
//! its own queue) and in the bin of its timestamp. Bins are `--bin-ms` wide
//! (10 ms by default) of packet time: for trace files the recorded time, for
//! live sources the kernel's receive time, so one rule serves both. They are
//! aligned to the first packet: for a trace file, its first record, read before
//! the run so the bins do not depend on which worker starts first; for live
//! sources and standard input, the first packet any worker saw. The output is
//! two files:
//!
//! - `PREFIX.csv`: header `t_ms,q<id>,...` (one column per queue of the source),
//!   then one row per bin from the earliest packet's bin to the latest's, empty
//!   bins included; `t_ms` is the bin's start in ms after the first row's, so the
//!   rows step by exactly `--bin-ms`. Each queue column sums to that queue's
//!   `delivered` count.
//! - `PREFIX.png`: the same as a line plot, one line per queue, with a title,
//!   axis labels and a legend. Text is drawn with DejaVu Sans, read at run time
//!   from FONT_PATH (Debian package fonts-dejavu-core) or from the file named by
//!   the WEIR_FONT environment variable. If that file cannot be read, weir says so
//!   before capturing and draws the plot without any text rather than failing:
//!   the CSV holds the data, the picture is a convenience.
//!
//! A packet more than MAX_BINS bins before or after the first one (a timestamp
//! years off, say) is not binned; it is counted as out of range and reported, so
//! one wild timestamp cannot exhaust memory.
//!
//! Each worker keeps its own bins (no sharing on the per-packet path); only the
//! origin, which fixes the bin boundaries, is agreed on once through an atomic.
//! The bins are merged after the run.

use crate::count::{finish, print_table};
use crate::exit::bad_input;
use crate::exit::out;
use crate::run::{run_to_end, SourceArgs};
use anyhow::{anyhow, bail, Context};
use clap::Args;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use weir::source::SourceSpec;
use weir::tracefile::{Step, Walker};
use weir::{Handler, Packet, QueueId};

/// Where the plot's font is looked for unless WEIR_FONT names another file.
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The Debian package that provides FONT_PATH.
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// Bins kept on each side of the first packet: 11.6 hours at 10 ms. At most
/// 2·MAX_BINS+1 counters (64 MiB) per queue, allocated only as packets need them.
const MAX_BINS: u64 = 1 << 22;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  weir queues trace.pcap@0-3 -o /tmp/q\n  \
weir queues trace.pcap@0-1 --speed 1 --bin-ms 100 -o /tmp/slow\n  weir queues afpacket:eth1@0-3 -d 30 -o /tmp/eth1\n\n\
Writes PREFIX.csv (t_ms,q0,q1,...: packets per bin and queue, one row per bin, empty bins \
included, t_ms from 0 in steps of --bin-ms) and PREFIX.png (one line per queue). Bins follow \
packet timestamps (the kernel's receive time for live sources) and start at the first packet \
(a trace's first record). \
An uneven split across queues, or bursts that one queue takes alone, show at a glance: the \
load imbalance WireCAP's queue_profiler was made to show.\n\n\
The plot's text uses DejaVu Sans from /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf (Debian \
package fonts-dejavu-core), or the TrueType file named by $WEIR_FONT; without it the plot is \
drawn without text and weir says so.")]
pub struct QueuesArgs {
    // This command's own options come before the flattened source options, whose last
    // group sets the "Live capture" help heading for everything after it.
    /// Write PREFIX.csv and PREFIX.png (replacing them if they exist).
    #[arg(short = 'o', long = "output", value_name = "PREFIX")]
    pub prefix: PathBuf,

    /// Width of a time bin in milliseconds (1 to 3,600,000).
    #[arg(long, value_name = "MS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub bin_ms: u64,

    /// No status lines while running.
    #[arg(short, long)]
    pub quiet: bool,

    #[command(flatten)]
    pub src: SourceArgs,
    #[command(flatten)]
    pub metrics: crate::metrics::MetricsArgs,
}

/// What one queue's packets looked like over time.
#[derive(Clone, Debug)]
struct QueueBins {
    queue: QueueId,
    /// Bin index (relative to the first packet's bin) of `bins[0]`.
    lo: i64,
    bins: Vec<u64>,
    packets: u64,
    bytes: u64,
    out_of_range: u64,
}

impl QueueBins {
    fn new(queue: QueueId) -> QueueBins {
        QueueBins { queue, lo: 0, bins: Vec::new(), packets: 0, bytes: 0, out_of_range: 0 }
    }

    /// The bin index one past the last.
    fn hi(&self) -> i64 {
        self.lo + self.bins.len() as i64
    }

    /// Add `n` packets to bin `idx`, growing the bins either way as needed.
    fn add(&mut self, idx: i64, n: u64) {
        if self.bins.is_empty() {
            self.lo = idx;
        } else if idx < self.lo {
            // Only a timestamp earlier than every one so far lands here (traces out of
            // order, or another queue's worker fixed the origin): rare, so a shift is fine.
            let grow = (self.lo - idx) as usize;
            let mut bins = vec![0; grow + self.bins.len()];
            bins[grow..].copy_from_slice(&self.bins);
            self.bins = bins;
            self.lo = idx;
        }
        let i = (idx - self.lo) as usize;
        if i >= self.bins.len() {
            self.bins.resize(i + 1, 0);
        }
        self.bins[i] += n;
    }

    fn merge(&mut self, other: &QueueBins) {
        for (i, &n) in other.bins.iter().enumerate() {
            if n != 0 {
                self.add(other.lo + i as i64, n);
            }
        }
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.out_of_range += other.out_of_range;
    }

    /// Packets in bin `idx` (0 outside the range held).
    fn get(&self, idx: i64) -> u64 {
        if idx < self.lo {
            return 0;
        }
        self.bins.get((idx - self.lo) as usize).copied().unwrap_or(0)
    }
}

/// `floor((ts - origin) / bin_ns)`, or None when that is more than MAX_BINS away.
fn bin_index(ts: u64, origin: u64, bin_ns: u64) -> Option<i64> {
    let (k, before) = if ts >= origin { ((ts - origin) / bin_ns, false) } else { ((origin - ts).div_ceil(bin_ns), true) };
    if k > MAX_BINS {
        return None;
    }
    // k ≤ MAX_BINS, far inside i64.
    let k = k as i64;
    Some(if before { -k } else { k })
}

/// The timestamp of a trace file's first record, or None when the source is not a
/// named trace file or it has no packet (or cannot be read: the engine reports that).
fn trace_origin(source: &str) -> Option<u64> {
    let Ok(SourceSpec::File { path: Some(path), .. }) = source.parse::<SourceSpec>() else { return None };
    let mut file = File::open(path).ok()?;
    let mut walker = Walker::new();
    // The unread bytes are buf[pos..]; buf[0] is at file offset 0, as only a few blocks precede the first packet.
    let (mut buf, mut pos, mut eof) = (Vec::new(), 0usize, false);
    loop {
        match walker.next(&buf[pos..], pos as u64, eof).ok()? {
            Step::Packet(record) => return Some(record.ts_ns),
            Step::Header { consumed } | Step::Skip { consumed } => pos += consumed,
            Step::Need { need } => {
                let want = (pos + need - buf.len()) as u64;
                let got = (&mut file).take(want).read_to_end(&mut buf).ok()?;
                eof = (got as u64) < want;
            }
            Step::End => return None,
        }
    }
}

/// Sentinel of the shared origin: no packet seen yet.
const NO_ORIGIN: u64 = u64::MAX;

/// One worker's profiler.
struct Profile {
    /// The first packet's timestamp, shared by all workers so their bins line up.
    origin: Arc<AtomicU64>,
    /// This worker's copy of `origin` once known: the per-packet path never touches the atomic.
    origin_ns: Option<u64>,
    bin_ns: u64,
    /// Per arrival queue; the worker's own queue first, so the lookup is one compare
    /// unless a buddy's chunk was offloaded here.
    queues: Vec<QueueBins>,
}

impl Profile {
    fn new(queue: QueueId, origin: Arc<AtomicU64>, bin_ns: u64) -> Profile {
        Profile { origin, origin_ns: None, bin_ns, queues: vec![QueueBins::new(queue)] }
    }

    #[cold]
    fn fix_origin(&mut self, ts: u64) -> u64 {
        // Relaxed: only this one value is shared, and the first writer wins.
        let o = match self.origin.compare_exchange(NO_ORIGIN, ts, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => ts,
            Err(o) => o,
        };
        self.origin_ns = Some(o);
        o
    }

    #[cold]
    fn other_queue(&mut self, q: QueueId) -> &mut QueueBins {
        let i = match self.queues.iter().position(|b| b.queue == q) {
            Some(i) => i,
            None => {
                self.queues.push(QueueBins::new(q));
                self.queues.len() - 1
            }
        };
        &mut self.queues[i]
    }
}

impl Handler for Profile {
    #[inline]
    fn packet(&mut self, p: &Packet<'_>) {
        let ts = p.ts_ns();
        let origin = match self.origin_ns {
            Some(o) => o,
            None => self.fix_origin(ts),
        };
        let idx = bin_index(ts, origin, self.bin_ns);
        let q = p.queue();
        let b = if self.queues[0].queue == q { &mut self.queues[0] } else { self.other_queue(q) };
        b.packets += 1;
        b.bytes += u64::from(p.wire_len());
        match idx {
            Some(i) => b.add(i, 1),
            None => b.out_of_range += 1,
        }
    }
}

/// `PREFIX` + `ext`, keeping any bytes of the prefix that are not UTF-8.
fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = OsString::from(prefix.as_os_str());
    s.push(ext);
    PathBuf::from(s)
}

/// The plot's font, read once and kept for the life of the process (plotters
/// wants `'static` bytes). Err says which file could not be read and why.
fn load_font() -> Result<(), String> {
    let path = std::env::var_os("WEIR_FONT").map_or_else(|| PathBuf::from(FONT_PATH), PathBuf::from);
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, Box::leak(bytes.into_boxed_slice()))
        .map_err(|_| format!("{}: not a TrueType/OpenType font", path.display()))
}

pub fn run(args: QueuesArgs) -> anyhow::Result<ExitCode> {
    if args.bin_ms == 0 || args.bin_ms > 86_400_000 {
        return Err(bad_input(anyhow!("--bin-ms must be between 1 and 86400000 (a day), not {}", args.bin_ms)));
    }
    let csv_path = with_ext(&args.prefix, ".csv");
    let png_path = with_ext(&args.prefix, ".png");
    let text = match load_font() {
        Ok(_) => true,
        Err(why) => {
            eprintln!(
                "weir queues: cannot use the plot font ({why}); {} will have no text. \
                 Install the Debian package {FONT_PACKAGE}, or set WEIR_FONT to a TrueType font file.",
                png_path.display()
            );
            false
        }
    };

    let metrics = args.metrics.bind()?;
    let engine = args.src.engine()?;
    let info = engine.info().clone();
    let pool = *engine.pool_config();
    // Fail on an unwritable output before capturing, not after; but only once the
    // source opened, so a bad source name leaves no empty file behind.
    let csv_file = File::create(&csv_path).with_context(|| format!("cannot create {}", csv_path.display()))?;
    let bin_ns = args.bin_ms * 1_000_000;
    let origin = Arc::new(AtomicU64::new(trace_origin(&args.src.source).unwrap_or(NO_ORIGIN)));
    let report = run_to_end(engine, "queues", &args.src.live, args.quiet, metrics, |q| Profile::new(q, Arc::clone(&origin), bin_ns))?;

    // Merge the workers' bins per arrival queue; every queue of the source gets a column.
    let mut merged: BTreeMap<QueueId, QueueBins> = info.queues.iter().map(|&q| (q, QueueBins::new(q))).collect();
    for (_, p) in &report.handlers {
        for b in &p.queues {
            merged.entry(b.queue).or_insert_with(|| QueueBins::new(b.queue)).merge(b);
        }
    }
    let clean = report.errors.is_empty();
    // A worker that panicked returned no bins; its error is reported below instead.
    let all_workers = report.handlers.len() == report.stats.queues.len();
    for q in report.stats.queues.iter().filter(|_| all_workers) {
        let b = merged.get(&q.queue).ok_or_else(|| anyhow!("internal error: no bins for queue {}", q.queue))?;
        let binned: u64 = b.bins.iter().sum::<u64>() + b.out_of_range;
        if !q.balanced() || (clean && q.in_flight != 0) || b.packets != q.delivered || b.bytes != q.delivered_bytes || binned != b.packets {
            bail!(
                "internal accounting error on queue {}: engine {q:?}, workers counted {} packets {} bytes, {binned} binned",
                q.queue,
                b.packets,
                b.bytes
            );
        }
    }
    let queues: Vec<&QueueBins> = merged.values().collect();
    let table = Table::new(&queues, args.bin_ms);

    let mut w = BufWriter::new(csv_file);
    table.write_csv(&mut w).and_then(|()| w.flush()).with_context(|| format!("cannot write {}", csv_path.display()))?;
    let title = format!("Packets per {} ms and queue: {}", args.bin_ms, info.name);
    plot(&table, &png_path, &title, text).with_context(|| format!("cannot write the plot {}", png_path.display()))?;

    let total = report.stats.total();
    print_table("queues", &report, &format!("{} ({}, pool {pool})", info.name, info.link_type), &total);
    let out_of_range: u64 = queues.iter().map(|b| b.out_of_range).sum();
    if out_of_range > 0 {
        eprintln!(
            "weir queues: {out_of_range} packets had timestamps more than {MAX_BINS} bins from the first packet and are \
             not in the bins; a larger --bin-ms covers a longer span"
        );
    }
    out!("wrote {} ({} bins of {} ms) and {}", csv_path.display(), table.rows(), args.bin_ms, png_path.display());
    finish(&report)
}

/// The merged bins as rows: bin `lo + i` of every queue.
struct Table<'a> {
    queues: &'a [&'a QueueBins],
    lo: i64,
    hi: i64,
    bin_ms: u64,
}

impl<'a> Table<'a> {
    fn new(queues: &'a [&'a QueueBins], bin_ms: u64) -> Table<'a> {
        let held = queues.iter().filter(|b| !b.bins.is_empty());
        let lo = held.clone().map(|b| b.lo).min().unwrap_or(0);
        let hi = held.map(|b| b.hi()).max().unwrap_or(0);
        Table { queues, lo, hi, bin_ms }
    }

    fn rows(&self) -> u64 {
        (self.hi - self.lo) as u64
    }

    /// Start of row `r` in ms after the first row's.
    fn t_ms(&self, r: u64) -> u64 {
        r * self.bin_ms
    }

    /// (queue, packets in each row).
    fn series(&self) -> impl Iterator<Item = (QueueId, Vec<u64>)> + '_ {
        self.queues.iter().map(|b| (b.queue, (self.lo..self.hi).map(|i| b.get(i)).collect()))
    }

    fn write_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        write!(w, "t_ms")?;
        for b in self.queues {
            write!(w, ",q{}", b.queue)?;
        }
        writeln!(w)?;
        for (r, i) in (self.lo..self.hi).enumerate() {
            write!(w, "{}", self.t_ms(r as u64))?;
            for b in self.queues {
                write!(w, ",{}", b.get(i))?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}

/// Draw the table: one line per queue. `text` false draws no text at all (no font).
fn plot(table: &Table<'_>, path: &Path, title: &str, text: bool) -> anyhow::Result<()> {
    use plotters::prelude::*;

    // Any plotters error is a drawing or encoding failure of this one file.
    let err = |e: &dyn std::fmt::Display| anyhow!("{e}");
    let series: Vec<(QueueId, Vec<u64>)> = table.series().collect();
    // Integer axes: times are whole ms and counts whole packets, so the ticks are too.
    let x_max = table.t_ms(table.rows().max(1));
    let top = series.iter().flat_map(|(_, v)| v.iter().copied()).max().unwrap_or(0);
    let y_max = top + top / 20 + 1;

    let root = BitMapBackend::new(path, (1280, 720)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20).x_label_area_size(50).y_label_area_size(80);
    if text {
        builder.caption(title, ("sans-serif", 26));
    }
    let mut chart = builder.build_cartesian_2d(0..x_max, 0..y_max).map_err(|e| err(&e))?;
    if text {
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc(format!("packets per {} ms bin", table.bin_ms))
            .label_style(("sans-serif", 16))
            .draw()
            .map_err(|e| err(&e))?;
    } else {
        // No font: plotters' mesh always draws tick labels, so draw the bare axes instead.
        let axes = PathElement::new(vec![(0, y_max), (0, 0), (x_max, 0)], BLACK.stroke_width(1));
        chart.draw_series(std::iter::once(axes)).map_err(|e| err(&e))?;
    }
    for (i, (q, counts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = counts.iter().enumerate().map(|(r, &n)| (table.t_ms(r as u64), n));
        let drawn = chart.draw_series(LineSeries::new(points, color.stroke_width(2))).map_err(|e| err(&e))?;
        if text {
            drawn.label(format!("queue {q}")).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3)));
        }
    }
    if text && !series.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_floor_of_the_offset() {
        let b = 10_000_000;
        assert_eq!(bin_index(100, 100, b), Some(0));
        assert_eq!(bin_index(100 + b - 1, 100, b), Some(0));
        assert_eq!(bin_index(100 + b, 100, b), Some(1));
        assert_eq!(bin_index(99, 100, b), Some(-1));
        assert_eq!(bin_index(0, 10 * b, b), Some(-10));
        assert_eq!(bin_index(0, 10 * b + 1, b), Some(-11));
        assert_eq!(bin_index(u64::MAX - 1, 0, b), None, "years away: out of range");
    }

    #[test]
    fn bins_grow_both_ways_and_merge() {
        let mut a = QueueBins::new(QueueId(0));
        a.add(3, 1);
        a.add(5, 2);
        a.add(1, 1);
        assert_eq!((a.lo, a.bins.clone()), (1, vec![1, 0, 1, 0, 2]));
        let mut b = QueueBins::new(QueueId(0));
        b.add(-2, 4);
        b.merge(&a);
        assert_eq!((b.lo, b.hi()), (-2, 6));
        assert_eq!((-2..6).map(|i| b.get(i)).collect::<Vec<_>>(), vec![4, 0, 0, 1, 0, 1, 0, 2]);
    }

    #[test]
    fn csv_has_a_row_per_bin_and_a_column_per_queue() {
        let mut q0 = QueueBins::new(QueueId(0));
        q0.add(0, 2);
        q0.add(3, 1);
        let mut q1 = QueueBins::new(QueueId(1));
        q1.add(-1, 5);
        let empty = QueueBins::new(QueueId(2));
        let queues = [&q0, &q1, &empty];
        let t = Table::new(&queues, 10);
        let mut out = Vec::new();
        t.write_csv(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "t_ms,q0,q1,q2\n0,0,5,0\n10,2,0,0\n20,0,0,0\n30,0,0,0\n40,1,0,0\n");
    }

    #[test]
    fn profile_counts_by_arrival_queue() {
        let origin = Arc::new(AtomicU64::new(NO_ORIGIN));
        let mut p = Profile::new(QueueId(1), Arc::clone(&origin), 10);
        let d = [0u8; 60];
        p.packet(&Packet::new(&d, 60, 1_000, QueueId(1)));
        p.packet(&Packet::new(&d, 60, 1_025, QueueId(0)));
        p.packet(&Packet::new(&d, 60, 995, QueueId(1)));
        assert_eq!(origin.load(Ordering::Relaxed), 1_000);
        assert_eq!(p.queues.len(), 2);
        assert_eq!((p.queues[0].queue, p.queues[0].lo, p.queues[0].bins.clone()), (QueueId(1), -1, vec![1, 1]));
        assert_eq!((p.queues[1].queue, p.queues[1].lo, p.queues[1].bins.clone()), (QueueId(0), 2, vec![1]));
    }
}
