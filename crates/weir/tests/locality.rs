//! Locality buffering through the engine, from a trace: every packet delivered
//! once with its timestamp untouched, every flow in order, each batch in port
//! order, on every balance mode; and configurations that cannot work refused.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::frames::{Frame, Rng};
use weir::engine::Read;
use weir::locality::{BatchSize, LocalityConfig};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::wire::sort_key;
use weir::{BalanceMode, Engine, LinkType, Packet, PoolConfig, QueueId};

const PACKETS: u32 = 6_000;
const FLOWS: usize = 400;

fn seq_of(data: &[u8]) -> u32 {
    let l4 = if data[23] == 17 { 8 } else { 20 };
    u32::from_be_bytes(data[34 + l4..38 + l4].try_into().unwrap())
}

/// Flows over a realistic spread of server ports, in both directions, and some
/// frames that are not IP; timestamps 1 µs apart with a seq-dependent jitter.
fn write_trace(path: &Path) -> (Vec<usize>, Vec<u64>) {
    let mut rng = Rng(7);
    let services = [22u16, 25, 53, 80, 123, 443, 993, 3306, 5060, 8080];
    let flows: Vec<Frame> = (0..FLOWS)
        .map(|i| {
            let r = rng.next();
            Frame {
                dst_mac: [2, 0, 0, 0, 0, 1],
                src_mac: [2, 0, 0, 0, 0, 2],
                src: [198, 18, (i / 250) as u8, (i % 250) as u8 + 1],
                dst: [198, 19, 0, (r % 200) as u8 + 1],
                sport: 1024 + (r >> 8) as u16 % 60000,
                dport: services[(r >> 32) as usize % services.len()],
                udp: r & 1 == 0,
            }
        })
        .collect();
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(file, FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    let (mut flow_of, mut ts_of) = (Vec::new(), Vec::new());
    for seq in 0..PACKETS {
        let r = rng.next();
        let i = r as usize % FLOWS;
        let f = if r >> 40 & 1 == 0 { flows[i] } else { flows[i].reply() };
        let mut frame = f.build(&[], seq, 40);
        if seq % 50 == 0 {
            // Not IP (a local experimental EtherType): the keyless list.
            frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        }
        let ts = 1_700_000_000_000_000_000 + u64::from(seq) * 1000 + (r >> 50);
        w.write_packet(ts, &frame, frame.len() as u32).unwrap();
        flow_of.push(if seq % 50 == 0 { FLOWS + seq as usize } else { i });
        ts_of.push(ts);
    }
    w.finish().unwrap();
    (flow_of, ts_of)
}

/// What each worker was handed, in order: (seq, key, timestamp).
type PerWorker = HashMap<QueueId, Vec<(u32, Option<u16>, u64)>>;
type Seen = Arc<Mutex<PerWorker>>;

fn run(path: &Path, queues: &str, balance: BalanceMode, locality: Option<LocalityConfig>, pool: PoolConfig) -> PerWorker {
    let seen: Seen = Arc::default();
    let engine = Engine::builder()
        .source(&format!("{}{queues}", path.display()))
        .unwrap()
        .pool(pool)
        .balance(balance)
        .locality(locality)
        .build()
        .unwrap();
    let report = engine
        .run(|worker| {
            let seen = Arc::clone(&seen);
            let mut mine = Vec::with_capacity(1);
            move |p: &Packet<'_>| {
                mine.push((seq_of(p.data()), sort_key(LinkType::ETHERNET, p.data()), p.ts_ns()));
                seen.lock().unwrap().entry(worker).or_default().append(&mut mine);
            }
        })
        .unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    drop(report);
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

fn check_once_in_flow_order(seen: &PerWorker, flow_of: &[usize], ts_of: &[u64]) {
    let mut count = vec![0u32; PACKETS as usize];
    // Order is each worker's: the stage runs on one worker over what it holds
    // (offloading may split a flow between workers; rebalancing hands it over whole).
    for list in seen.values() {
        let mut last_in_flow: HashMap<usize, u32> = HashMap::new();
        for &(seq, _, ts) in list {
            count[seq as usize] += 1;
            assert_eq!(ts, ts_of[seq as usize], "packet {seq}: its timestamp changed");
            if let Some(prev) = last_in_flow.insert(flow_of[seq as usize], seq) {
                assert!(prev < seq, "flow {} reordered: {seq} after {prev}", flow_of[seq as usize]);
            }
        }
    }
    assert!(count.iter().all(|&c| c == 1), "every packet exactly once");
}

/// Places in a delivery where the key goes down (ports ascending, the keyless
/// after them). Within a batch keys ascend, so they come only between batches.
fn descents(keys: impl IntoIterator<Item = Option<u16>>) -> usize {
    let rank = |k: Option<u16>| k.map_or(1 << 16, u32::from);
    let mut keys = keys.into_iter().map(rank);
    let Some(mut last) = keys.next() else { return 0 };
    keys.filter(|&k| std::mem::replace(&mut last, k) > k).count()
}

/// Runs of a test that wants whole batches. A batch is also cut, rightly,
/// when no chunk comes for `QUIET` (10 ms): on a loaded machine the trace's
/// reader can be off its CPU that long (CI saw it once while a build ran
/// beside it). So such a test tries up to this many runs for one whose
/// batches are whole; a stage that cuts batches for any other reason cuts
/// them in every run.
const WHOLE_BATCH_TRIES: usize = 3;

fn locality(batch: u32, double_buffer: bool) -> LocalityConfig {
    LocalityConfig { batch: BatchSize::new(batch).unwrap(), timeout: Duration::from_secs(30), double_buffer }
}

#[test]
fn one_batch_of_the_whole_trace_comes_out_sorted_by_port_with_flows_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    let (flow_of, ts_of) = write_trace(&path);
    // A pool of 64 chunks of 128 cells holds the whole trace with a chunk to spare.
    let pool = PoolConfig::new(128, 64).unwrap();
    for double_buffer in [false, true] {
        // One batch, so keys never go down, keyless last; unless the reader
        // was off its CPU for QUIET and the batch was cut (see
        // WHOLE_BATCH_TRIES). Every run must deliver each packet once, in
        // flow order.
        let one_batch = (0..WHOLE_BATCH_TRIES).any(|_| {
            let seen = run(&path, "", BalanceMode::Basic, Some(locality(PACKETS, double_buffer)), pool);
            check_once_in_flow_order(&seen, &flow_of, &ts_of);
            descents(seen[&QueueId(0)].iter().map(|&(_, k, _)| k)) == 0
        });
        assert!(one_batch, "{WHOLE_BATCH_TRIES} runs each cut the trace into more than one batch");
        // Without the stage the same trace is delivered in arrival order.
        let plain = run(&path, "", BalanceMode::Basic, None, pool);
        let seqs: Vec<u32> = plain[&QueueId(0)].iter().map(|&(s, _, _)| s).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    }
}

#[test]
fn small_batches_on_every_mode_deliver_every_flow_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    let (flow_of, ts_of) = write_trace(&path);
    let pool = PoolConfig::new(32, 16).unwrap();
    let rebalance: BalanceMode = "rebalance".parse().unwrap();
    let offload: BalanceMode = "offload:50".parse().unwrap();
    for (mode, batch, double_buffer) in [
        (BalanceMode::Basic, 100, false),
        (offload, 200, false),
        (offload, 200, true),
        (rebalance, 300, false),
        (BalanceMode::Basic, 1, true),
    ] {
        let seen = run(&path, "@0-2", mode, Some(locality(batch, double_buffer)), pool);
        check_once_in_flow_order(&seen, &flow_of, &ts_of);
        // Within a batch keys ascend, so descents come only between batches: far
        // fewer than in arrival order.
        let descents: usize = seen.values().map(|l| descents(l.iter().map(|&(_, k, _)| k))).sum();
        let delivered: usize = seen.values().map(Vec::len).sum();
        if batch > 1 {
            assert!(descents <= delivered / 32 + 3, "{mode:?} B={batch}: {descents} key descents in {delivered} packets");
        }
    }
}

#[test]
fn a_batch_the_pool_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path);
    let e = Engine::builder()
        .source(path.to_str().unwrap())
        .unwrap()
        .pool(PoolConfig::new(32, 16).unwrap())
        .locality(Some(LocalityConfig::new(BatchSize::new(481).unwrap())))
        .build()
        .err()
        .expect("refused");
    assert!(e.is_bad_input(), "{e}");
    assert_eq!(e.setting_error().map(|s| s.setting), Some(weir::Setting::Locality), "{e}");
    assert!(e.to_string().contains("a pool of 32,"), "{e}");
}

/// A pool the caller did not give is raised to hold two batches and a chunk, so
/// the capture side fills the next batch while one is delivered; a pool the
/// caller gave is used as given, as long as it holds one batch.
#[test]
fn an_unset_pool_is_raised_to_hold_two_batches_and_a_given_one_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    write_trace(&path);
    let chunks = |pool: Option<PoolConfig>, batch: Option<u32>| {
        let mut b = Engine::builder().source(path.to_str().unwrap()).unwrap();
        if let Some(p) = pool {
            b = b.pool(p);
        }
        let l = batch.map(|n| LocalityConfig::new(BatchSize::new(n).unwrap()));
        b.locality(l).build().unwrap().pool_config().chunks().get()
    };
    assert_eq!(chunks(None, None), 128, "the default, WireCAP-B-(256,128)");
    assert_eq!(chunks(None, Some(8000)), 128, "two batches of 8,000 fit the default");
    assert_eq!(chunks(None, Some(32000)), 2 * 125 + 1);
    assert_eq!(chunks(Some(PoolConfig::new(256, 127).unwrap()), Some(32000)), 127);
    // ... with a note that says what it costs.
    let notes = |r| {
        let l = LocalityConfig::new(BatchSize::new(32000).unwrap());
        let b = Engine::builder().source(path.to_str().unwrap()).unwrap().pool(PoolConfig::new(256, r).unwrap());
        b.locality(Some(l)).build().unwrap().info().notes.clone()
    };
    assert!(notes(127).iter().any(|n| n.contains("a pool of 256,251")), "{:?}", notes(127));
    assert!(notes(251).is_empty(), "{:?}", notes(251));
}

/// A trace of `packets` UDP frames with `payload` bytes, their service ports
/// cycling through 10 values so that every batch delivered shows as one run of
/// ascending keys.
fn write_big_trace(path: &Path, packets: u32, payload: usize) {
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Nano).unwrap();
    for seq in 0..packets {
        let f = Frame {
            dst_mac: [2, 0, 0, 0, 0, 1],
            src_mac: [2, 0, 0, 0, 0, 2],
            src: [198, 18, 0, 1],
            dst: [198, 19, 0, 1],
            sport: 40000,
            dport: 1000 + (seq % 10) as u16,
            udp: true,
        };
        let frame = f.build(&[], seq, payload);
        w.write_packet(u64::from(seq), &frame, frame.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

/// Run `engine` to its end on another thread; (packets delivered, batches
/// seen), or a failure if it has not ended within a minute.
fn batches_of(engine: Engine) -> (u64, usize) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let keys = Arc::new(Mutex::new(Vec::new()));
        let k = Arc::clone(&keys);
        let report = engine.run(move |_| {
            let k = Arc::clone(&k);
            move |p: &Packet<'_>| k.lock().unwrap().push(sort_key(LinkType::ETHERNET, p.data()))
        });
        let batches = 1 + descents(keys.lock().unwrap().iter().copied());
        let _ = tx.send((report.unwrap().stats.total().delivered, batches));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the capture never ended: a batch waited for memory it held")
}

/// A batch larger than the trace reader's blocks with a timeout that never
/// comes: the reader runs out of blocks the batch holds, and the stage must
/// deliver what it has, not wait forever.
#[test]
fn a_batch_that_holds_the_sources_memory_is_delivered_when_the_source_stalls() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pcap");
    let packets = 6_000u32;
    write_big_trace(&path, packets, 1000);
    let cfg = LocalityConfig { batch: BatchSize::new(packets).unwrap(), timeout: Duration::from_secs(3600), double_buffer: false };
    // 16 blocks of 64 KiB read ahead: a tenth of the 6 MB the batch would
    // hold (a mapped file's blocks are the whole file).
    let reading = weir::source::file::ReadConfig {
        block_bytes: 64 * 1024,
        headroom: 64 * 1024 + 64,
        blocks: 16,
        access: weir::source::file::TraceAccess::Read,
    };
    let engine = Engine::builder()
        .source(path.to_str().unwrap())
        .unwrap()
        .pool(PoolConfig::new(256, 128).unwrap())
        .locality(Some(cfg))
        .trace_reading(reading)
        .build()
        .unwrap();
    let (delivered, batches) = batches_of(engine);
    assert_eq!(delivered, u64::from(packets));
    assert!(batches > 1, "the reading given was used as given, so the batch could not be whole");
}

/// With the default reading, a trace read ahead has its blocks raised to hold
/// two batches of full-size frames, so a batch larger than the default arena
/// (64 × 256 KiB; here 20,000 frames of about 1 KB, 21 MB) is delivered whole
/// rather than cut each time the reader runs short. (A mapped trace's blocks
/// are the whole file.)
/// Tried up to [`WHOLE_BATCH_TRIES`] times: blocks too small for two batches
/// cut every run, as the test above shows.
#[test]
fn the_trace_reader_holds_two_batches_so_large_batches_are_delivered_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pcap");
    let batch = 20_000u32;
    write_big_trace(&path, 2 * batch, 1000);
    let cfg = LocalityConfig { batch: BatchSize::new(batch).unwrap(), timeout: Duration::from_secs(3600), double_buffer: false };
    let mut seen = Vec::new();
    for _ in 0..WHOLE_BATCH_TRIES {
        let engine = Engine::builder()
            .source(path.to_str().unwrap())
            .unwrap()
            .pool(PoolConfig::new(256, 128).unwrap())
            .locality(Some(cfg))
            .trace_access(weir::source::file::TraceAccess::Read)
            .build()
            .unwrap();
        let (delivered, batches) = batches_of(engine);
        assert_eq!(delivered, u64::from(2 * batch));
        if batches == 2 {
            return;
        }
        seen.push(batches);
    }
    panic!("each batch should be whole (at least B packets, whole chunks), so two in all; the runs made {seen:?}");
}

/// What one pulling reader was handed, in order, under the same key as `run`'s
/// single worker so the same checks apply.
fn pull(path: &Path, queues: &str, locality: Option<LocalityConfig>, pool: PoolConfig) -> PerWorker {
    let engine = Engine::builder().source(&format!("{}{queues}", path.display())).unwrap().pool(pool).locality(locality).build().unwrap();
    let mut reader = engine.start_reader().unwrap();
    let mut seen = Vec::new();
    loop {
        match reader.next(Duration::from_secs(10)) {
            Read::Packet(p) => seen.push((seq_of(p.data()), sort_key(LinkType::ETHERNET, p.data()), p.ts_ns())),
            Read::Idle => panic!("a trace never idles for 10 s"),
            Read::End => break,
        }
    }
    let report = reader.finish();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let t = report.stats.total();
    assert!(t.balanced() && t.in_flight == 0 && t.unread == 0, "{t:?}");
    assert_eq!(t.delivered as usize, seen.len());
    HashMap::from([(QueueId(0), seen)])
}

#[test]
fn a_pulling_reader_gets_batches_across_its_queues_in_port_order_with_flows_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pcap");
    let (flow_of, ts_of) = write_trace(&path);
    let whole = PoolConfig::new(128, 64).unwrap();
    let seen = pull(&path, "", Some(locality(PACKETS, false)), whole);
    check_once_in_flow_order(&seen, &flow_of, &ts_of);
    let keys: Vec<u32> = seen[&QueueId(0)].iter().map(|&(_, k, _)| k.map_or(1 << 16, u32::from)).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "one batch, so keys never go down; keyless last");
    // Three queues read by one thread: a flow stays on its queue (RSS), so its
    // order holds across the reader's turns.
    for batch in [1, 100, 500] {
        let seen = pull(&path, "@0-2", Some(locality(batch, false)), PoolConfig::new(32, 40).unwrap());
        check_once_in_flow_order(&seen, &flow_of, &ts_of);
        let list = &seen[&QueueId(0)];
        let descents = descents(list.iter().map(|&(_, k, _)| k));
        if batch > 1 {
            assert!(descents <= list.len() / 32 + 3, "B={batch}: {descents} key descents in {}", list.len());
        }
    }
    // Without the stage, one queue comes out in capture order.
    let plain = pull(&path, "", None, whole);
    let seqs: Vec<u32> = plain[&QueueId(0)].iter().map(|&(s, _, _)| s).collect();
    assert_eq!(seqs, (0..PACKETS).collect::<Vec<_>>());
}
