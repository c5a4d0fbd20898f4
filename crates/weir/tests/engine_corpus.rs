//! Every corpus file through the whole engine (blocks, carries across blocks,
//! oversized records, tiny pools that force waiting, RSS into three queues),
//! read ahead into blocks and mapped in place,
//! against the system libpcap: the same packets, or the same refusal, or the
//! same packets up to the same point of damage.

mod support;

use std::path::Path;
use support::{corpus_root, files_under, libpcap_trace, linux_dlt, looks_like_trace, Pkt, Trace};
use weir::filter::oracle::Oracle;
use weir::source::file::{ReadConfig, TraceAccess};
use weir::{Engine, Handler, Packet, PoolConfig};

#[derive(Default)]
struct Collect(Vec<Pkt>);

impl Handler for Collect {
    fn packet(&mut self, p: &Packet<'_>) {
        self.0.push(Pkt { ts_ns: p.ts_ns(), wire_len: p.wire_len(), data: p.data().to_vec() });
    }
}

/// Packets of about one kind in three, by a program of 20-odd instructions
/// where the link type has IP; what the trace source's batches of judged
/// records must deliver exactly.
const FILTER: &str = "tcp port 80 or udp or icmp";

/// Through the engine with [`FILTER`], a file delivers exactly the packets
/// libpcap's own `bpf_filter` accepts of those it reads (`want`), up to the
/// same end: the trace source judges records a batch at a time, and every
/// verdict must land on its own packet across blocks, non-packet blocks and
/// damage. Link types the expression does not compile for are left out.
fn filtered_as_libpcap(lib: &Oracle, path: &Path, want: &Trace) {
    let Ok(engine) = Engine::builder().source(&format!("file:{}", path.display())).unwrap().build() else { return };
    let Ok(filter) = weir::filter::Filter::compile(FILTER, engine.info().link_type, engine.info().snaplen) else { return };
    let kept = Trace {
        open: want.open.clone(),
        packets: want.packets.iter().filter(|p| lib.offline_filter(filter.program(), &p.data, p.wire_len)).cloned().collect(),
        end: want.end.clone(),
    };
    let mapped = ReadConfig { access: TraceAccess::Map, ..ReadConfig::default() };
    for (what, reading) in
        [("default blocks", ReadConfig::default()), ("tiny blocks", TINY), ("mapped", mapped), ("tiny strides, mapped", TINY_MAPPED)]
    {
        let got = engine_trace_filtered(path, 1, reading, Some(FILTER));
        if let Some(d) = kept.difference(&got) {
            panic!("{} (1 queue, {what}, -f {FILTER:?}): {d}", path.display());
        }
    }
}

/// Blocks so small that most records straddle two, and many outgrow the headroom.
const TINY: ReadConfig = ReadConfig { block_bytes: 700, headroom: 100, blocks: 8, access: TraceAccess::Read };
/// The same strides over a mapping: straddling records lie in the next window's headroom.
const TINY_MAPPED: ReadConfig = ReadConfig { access: TraceAccess::Map, ..TINY };

/// Read `path` through the engine split into `queues` queues; packets of all
/// queues are concatenated (exact order only means something with one queue).
fn engine_trace(path: &Path, queues: u16, reading: ReadConfig) -> Trace {
    engine_trace_filtered(path, queues, reading, None)
}

/// [`engine_trace`] with the engine filtering by `filter`.
fn engine_trace_filtered(path: &Path, queues: u16, reading: ReadConfig, filter: Option<&str>) -> Trace {
    let name = format!("file:{}@0-{}", path.display(), queues - 1);
    let mut builder = Engine::builder().source(&name).unwrap().pool(PoolConfig::new(4, 2).unwrap()).trace_reading(reading);
    if let Some(f) = filter {
        builder = builder.filter(f);
    }
    let engine = builder.build();
    let engine = match engine {
        Ok(e) => e,
        Err(e) => return Trace { open: Err(e.to_string()), packets: Vec::new(), end: Ok(()) },
    };
    let open = Ok(linux_dlt(engine.info().link_type.0));
    let report = engine.run(|_| Collect::default()).unwrap();
    let t = report.stats.total();
    assert!(report.stats.queues.iter().all(|q| q.balanced()) && t.in_flight == 0, "{}: {t:?}", path.display());
    let end = match report.errors.first() {
        None => Ok(()),
        Some(e) => {
            assert!(report.failed_on_bad_input(), "{}: {e}", path.display());
            Err(e.to_string())
        }
    };
    let packets: Vec<Pkt> = report.handlers.into_iter().flat_map(|(_, c)| c.0).collect();
    assert_eq!(packets.len() as u64, t.delivered);
    Trace { open, packets, end }
}

fn sorted(mut t: Trace) -> Trace {
    t.packets.sort_by(|a, b| (a.ts_ns, a.wire_len, &a.data).cmp(&(b.ts_ns, b.wire_len, &b.data)));
    t
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn the_engine_reads_every_corpus_file_as_libpcap_does() {
    let root = corpus_root();
    let lib = Oracle::system().expect("the system libpcap is the oracle");
    let (mut files, mut packets, mut refused, mut damaged) = (0, 0, 0, 0);
    for dir in ["zeek-traces", "tcpdump-4.99.3", "malformed"] {
        for path in files_under(&root.join(dir)) {
            let head = std::fs::read(&path).map(|b| b[..b.len().min(4)].to_vec()).unwrap_or_default();
            if !looks_like_trace(&path, &head) {
                continue;
            }
            let want = libpcap_trace(lib, &path);
            let mapped = ReadConfig { access: TraceAccess::Map, ..ReadConfig::default() };
            let read = ReadConfig { access: TraceAccess::Read, ..ReadConfig::default() };
            let configs = [("default blocks", read), ("tiny blocks", TINY), ("mapped", mapped), ("tiny strides, mapped", TINY_MAPPED)];
            for (what, reading) in configs {
                let one = engine_trace(&path, 1, reading);
                if let Some(d) = want.difference(&one) {
                    panic!("{} (1 queue, {what}): {d}", path.display());
                }
            }
            if want.open.is_ok() {
                for (what, reading) in [("tiny blocks", TINY), ("tiny strides, mapped", TINY_MAPPED)] {
                    let three = sorted(engine_trace(&path, 3, reading));
                    if let Some(d) = sorted(want.clone()).difference(&three) {
                        panic!("{} (3 queues, {what}): {d}", path.display());
                    }
                }
            }
            if want.open.is_ok() {
                filtered_as_libpcap(lib, &path, &want);
            }
            files += 1;
            packets += want.packets.len();
            refused += usize::from(want.open.is_err());
            damaged += usize::from(want.end.is_err());
        }
    }
    println!("engine vs libpcap: {files} files, {packets} packets, {refused} refused, {damaged} stopped by damage");
    assert!(files > 1000 && packets > 80_000, "the corpus looks incomplete: {files} files, {packets} packets");
}
