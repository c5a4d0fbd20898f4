//! A trace read ahead into blocks and the same trace mapped in place give the
//! packets the file holds, exactly and in order, whatever the block size
//! (records straddling strides, records longer than the headroom), in pcap
//! and pcapng, and walked on a thread of its own (`TraceAccess::Walk`); a
//! mapped trace cut short while it is being read ends the run
//! with an error naming the file, never a crash; and a mapped trace is
//! unmapped behind its walk, so a large one is never mapped whole.

use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::file::{ReadConfig, TraceAccess};
use weir::{Engine, Handler, LinkType, Packet};

mod support;
use support::frames::Rng;

/// One packet as the file holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pkt {
    ts_ns: u64,
    wire_len: u32,
    data: Vec<u8>,
}

#[derive(Default)]
struct Collect(Vec<Pkt>);

impl Handler for Collect {
    fn packet(&mut self, p: &Packet<'_>) {
        self.0.push(Pkt { ts_ns: p.ts_ns(), wire_len: p.wire_len(), data: p.data().to_vec() });
    }
}

/// `n` packets of random sizes (a few longer than any headroom below), written
/// to `path`; returns them as the model of what a reader must deliver, and each
/// record's end offset in the file (pcap only).
fn write(path: &std::path::Path, format: FileFormat, n: u32, seed: u64) -> (Vec<Pkt>, Vec<u64>) {
    let mut rng = Rng(seed);
    let mut w = TraceWriter::new(std::fs::File::create(path).unwrap(), format, LinkType::ETHERNET, 262_144, TsPrecision::Nano).unwrap();
    let mut model = Vec::new();
    let mut ends = Vec::new();
    let mut at = 24u64;
    for i in 0..n {
        let r = rng.next();
        let len = match r % 100 {
            0 => 70_000 + (r >> 8) as usize % 100_000,
            1..=9 => 14 + (r >> 8) as usize % 40,
            _ => 60 + (r >> 8) as usize % 1_450,
        };
        let data: Vec<u8> = (0..len).map(|k| (k as u64 ^ r ^ u64::from(i)) as u8).collect();
        let ts_ns = 1_700_000_000_000_000_000 + u64::from(i) * 1_000 + (r >> 40) % 1_000;
        w.write_packet(ts_ns, &data, len as u32).unwrap();
        at += 16 + len as u64;
        ends.push(at);
        model.push(Pkt { ts_ns, wire_len: len as u32, data });
    }
    w.finish().unwrap();
    (model, ends)
}

fn engine(path: &std::path::Path, reading: ReadConfig) -> Engine {
    Engine::builder().source(&format!("file:{}", path.display())).unwrap().trace_reading(reading).build().unwrap()
}

/// Run `engine` on one queue: what it delivered, and its first error.
fn run(engine: Engine) -> (Vec<Pkt>, Option<String>) {
    let report = engine.run(|_| Collect::default()).unwrap();
    let err = report.errors.first().map(|e| e.to_string());
    (report.handlers.into_iter().flat_map(|(_, c)| c.0).collect(), err)
}

const CONFIGS: [(&str, ReadConfig); 6] = [
    ("read, default blocks", ReadConfig { block_bytes: 256 * 1024, headroom: 64 * 1024 + 64, blocks: 64, access: TraceAccess::Read }),
    ("mapped, default strides", ReadConfig { block_bytes: 256 * 1024, headroom: 64 * 1024 + 64, blocks: 64, access: TraceAccess::Map }),
    ("walked, default strides", ReadConfig { block_bytes: 256 * 1024, headroom: 64 * 1024 + 64, blocks: 64, access: TraceAccess::Walk }),
    ("read, small blocks", ReadConfig { block_bytes: 3_000, headroom: 1_600, blocks: 8, access: TraceAccess::Read }),
    ("mapped, small strides", ReadConfig { block_bytes: 3_000, headroom: 1_600, blocks: 8, access: TraceAccess::Map }),
    ("walked, small strides", ReadConfig { block_bytes: 3_000, headroom: 1_600, blocks: 8, access: TraceAccess::Walk }),
];

#[test]
fn every_way_of_reading_delivers_the_file_as_written() {
    let dir = tempfile::tempdir().unwrap();
    for (format, name) in [(FileFormat::Pcap, "t.pcap"), (FileFormat::PcapNg, "t.pcapng")] {
        let path = dir.path().join(name);
        let (model, _) = write(&path, format, 3_000, 7);
        for (what, reading) in CONFIGS {
            let (got, err) = run(engine(&path, reading));
            assert_eq!(err, None, "{name}, {what}");
            assert_eq!(got.len(), model.len(), "{name}, {what}");
            if let Some(i) = (0..got.len()).find(|&i| got[i] != model[i]) {
                panic!("{name}, {what}: packet {i} differs from the file's");
            }
        }
    }
}

#[test]
fn an_empty_and_a_header_only_trace_read_the_same_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.pcap");
    write(&path, FileFormat::Pcap, 0, 1);
    for (what, reading) in CONFIGS {
        let (got, err) = run(engine(&path, reading));
        assert!(got.is_empty() && err.is_none(), "{what}: {err:?}");
    }
    let empty = dir.path().join("empty.pcap");
    std::fs::File::create(&empty).unwrap();
    for (what, reading) in CONFIGS {
        let e = Engine::builder().source(&format!("file:{}", empty.display())).unwrap().trace_reading(reading).build();
        let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("empty.pcap"), "{what}: an empty file is refused by name, got {msg:?}");
    }
}

/// Cut the trace after the engine opened (and mapped) it, then run: the run
/// ends with an error naming the file and saying it was truncated, and every
/// packet delivered wholly before the cut is the file's.
fn cut_while_mapped(keep: impl Fn(u64) -> u64, what: &str) {
    for access in [TraceAccess::Map, TraceAccess::Walk] {
        cut_while_accessed(&keep, access, &format!("{what}, {access}"));
    }
}

fn cut_while_accessed(keep: &impl Fn(u64) -> u64, access: TraceAccess, what: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pcap");
    let (model, ends) = write(&path, FileFormat::Pcap, 4_000, 11);
    let size = std::fs::metadata(&path).unwrap().len();
    let reading = ReadConfig { access, ..ReadConfig::default() };
    let e = engine(&path, reading);
    let cut = keep(size);
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(cut).unwrap();
    let (got, err) = run(e);
    let err = err.unwrap_or_else(|| panic!("{what}: a trace cut under its mapping must end the run with an error"));
    assert!(err.contains("cut.pcap") && err.contains("truncated"), "{what}: {err}");
    let whole = ends.iter().take_while(|&&end| end <= cut & !4095).count();
    assert!(got.len() >= whole, "{what}: {} packets delivered, {whole} lie wholly before the cut", got.len());
    for i in 0..whole {
        assert_eq!(got[i], model[i], "{what}: packet {i}, wholly before the cut, differs");
    }
    assert!(
        got.len() < model.len() || cut + 4096 > size,
        "{what}: {} packets delivered from a file cut to {cut} of {size} bytes",
        got.len()
    );
}

#[test]
fn a_mapped_trace_cut_in_half_ends_the_run_with_an_error() {
    cut_while_mapped(|size| size / 2, "cut in half");
}

#[test]
fn a_mapped_trace_cut_inside_its_last_page_ends_the_run_with_an_error() {
    // No access faults (the last page is still the file's): the size at the end tells.
    cut_while_mapped(|size| size - 10, "cut by 10 bytes");
}

/// The CPUs a thread named `name` of this process may use, from /proc. A
/// thread of that name that ends while we look (other tests of this binary
/// run engines too) is passed over, not taken for an answer.
fn cpus_of_thread(name: &str) -> Option<String> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        if let Some(cpus) = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")) {
            return Some(cpus.trim().to_string());
        }
    }
    None
}

/// Looks, at its first packet, at where the read-ahead thread may run.
#[derive(Default)]
struct WhereIsReadAhead(Option<Option<String>>);

impl Handler for WhereIsReadAhead {
    fn packet(&mut self, _: &Packet<'_>) {
        if self.0.is_none() {
            self.0 = Some(cpus_of_thread("weir-readahead"));
        }
    }
}

/// With the capture thread pinned to one CPU (`--cpus`), its read-ahead
/// thread may still run on every CPU the process may use, not share the
/// capture thread's: it does the copy the capture thread would wait for.
/// (Where the process may use CPU 0 alone the two sets are the same, and the
/// test checks only that the thread runs, under its name, while packets come.)
#[test]
fn the_read_ahead_thread_is_not_pinned_with_the_capture_thread() {
    let mine = std::fs::read_to_string("/proc/self/status").unwrap();
    let mine = mine.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.pcap");
    write(&path, FileFormat::Pcap, 3_000, 3);
    // Few small blocks: reading waits for the worker, so the thread is alive at its first packet.
    let reading = ReadConfig { block_bytes: 8 * 1024, headroom: 1_600, blocks: 4, access: TraceAccess::Read };
    let engine = Engine::builder()
        .source(&format!("file:{}", path.display()))
        .unwrap()
        .trace_reading(reading)
        .cpus(weir::engine::CpuPlan::List(vec![0, 0]))
        .build()
        .unwrap();
    let report = engine.run(|_| WhereIsReadAhead::default()).unwrap();
    let seen = report.handlers.into_iter().next().unwrap().1 .0.expect("the worker saw a packet");
    assert_eq!(seen.as_deref(), Some(mine.as_str()), "the read-ahead thread may run where the process may");
}

/// The file's pages this process has mapped (RssFile), in bytes.
fn rss_file() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 =
        status.lines().find_map(|l| l.strip_prefix("RssFile:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).unwrap();
    kb * 1024
}

/// Looks at RssFile every few thousand packets, and keeps the largest.
#[derive(Default)]
struct MaxRssFile(u64, u64);

impl Handler for MaxRssFile {
    fn packet(&mut self, _: &Packet<'_>) {
        self.1 += 1;
        if self.1 % 2_000 == 0 {
            self.0 = self.0.max(rss_file());
        }
    }
}

/// A mapped trace's page tables are emptied again behind the walk: a 480 MB
/// trace is walked with at most a few hundred MB of it mapped at once, not the
/// whole file (which for a trace of 100 GB would be 100 GB of RssFile).
#[test]
fn a_mapped_trace_is_unmapped_behind_the_walk() {
    const PACKETS: u32 = 60_000;
    const LEN: usize = 8_000;
    let mut plan = weir::memory::Plan::new();
    plan.add("the 480 MB trace this test writes and maps, with room beside it", 2 << 30);
    plan.check().unwrap_or_else(|e| panic!("this test needs memory the machine does not have: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pcap");
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65_535, TsPrecision::Nano).unwrap();
    let data = vec![0x5a; LEN];
    for i in 0..PACKETS {
        w.write_packet(u64::from(i) * 1_000, &data, LEN as u32).unwrap();
    }
    w.finish().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let reading = ReadConfig { access: TraceAccess::Map, ..ReadConfig::default() };
    let report = engine(&path, reading).run(|_| MaxRssFile::default()).unwrap();
    let (max, seen) = report.handlers.iter().fold((0, 0), |(m, n), (_, h)| (m.max(h.0), n + h.1));
    assert_eq!(seen, u64::from(PACKETS));
    assert!(max > 0 && max < 320 * 1024 * 1024, "RssFile reached {max} bytes walking a {size}-byte trace");
}
