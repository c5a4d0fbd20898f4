//! AF_XDP capture end to end: real sockets on a veth pair between two network
//! namespaces, real traffic replayed by tcpreplay from a trace each test writes,
//! and the kernel's XDP state read back with `ip`.
//!
//! Needs root (namespaces, XDP, AF_XDP), iproute2, and for some tests
//! tcpreplay, clang or setpriv: the tests are ignored by a plain `cargo test`
//! and run by `make test`'s privileged step; asked for without what they need,
//! they fail and say what is missing. Some tests re-run themselves in this
//! binary as a capturing child process, to kill it with SIGKILL or run it with
//! fewer capabilities, and check both how the child ended and what it said.
//!
//! How veth spreads packets over RX queues: with an XDP program on the receiving
//! end, a packet sent on TX queue q of one end arrives on RX queue q of the
//! other. tcpreplay's packets take the queue the kernel's flow hash picks
//! (no XPS on veth), and that hash is symmetric, so both directions of a flow
//! arrive on one RX queue, and many flows use every queue. The first test
//! asserts exactly that.

mod support;

use support::frames::{Frame, Rng};

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use testbed::TestBed;
use weir::engine::{Report, Running, StopReason};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::{AfXdpOptions, LiveOptions, ZeroCopy};
use weir::stats::QueueStats;
use weir::wire::FlowTuple;
use weir::{Engine, Handler, LinkType, Packet, PoolConfig, QueueId};

/// A rate a debug build keeps up with on a busy 2-core machine, for the tests
/// that expect no loss (at top speed the workers, not the capture, fall behind,
/// and the pool rightly drops).
const NO_LOSS_PPS: u32 = 50_000;

/// Marks the test's packets: the payload starts with it, then the sequence number.
const MAGIC: &[u8; 4] = b"WEIR";

/// One packet sent: its flow (canonical, so both directions are equal) and protocol.
#[derive(Clone, Copy)]
struct Sent {
    flow: FlowTuple,
    udp: bool,
}

/// A trace written for a test and what is in it, by sequence number.
struct Traffic {
    path: PathBuf,
    sent: Vec<Sent>,
}

impl Traffic {
    fn udp(&self) -> HashSet<u32> {
        (0..self.sent.len() as u32).filter(|&s| self.sent[s as usize].udp).collect()
    }
}

/// An Ethernet/IPv4/TCP-or-UDP frame to `dst_mac` carrying MAGIC and `seq`.
#[allow(clippy::too_many_arguments)]
fn frame(dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, udp: bool, seq: u32, payload: usize) -> Vec<u8> {
    Frame { dst_mac, src_mac: [0x02, 0, 0, 0, 0, 1], src, dst, sport, dport, udp }.build(MAGIC, seq, payload)
}

/// The sequence number of one of the test's frames, or `None` for anything else.
fn seq_of(data: &[u8]) -> Option<u32> {
    if data.len() < 14 + 20 + 8 + 8 || data[12..14] != [0x08, 0x00] {
        return None;
    }
    let at = 14 + 20 + if data[23] == 17 { 8 } else { 20 };
    (data.get(at..at + 4)? == MAGIC).then(|| u32::from_be_bytes(data[at + 4..at + 8].try_into().unwrap()))
}

/// `packets` frames of `flows` flows, each packet in either direction at random,
/// TCP and UDP, 64 to about 1,400 bytes, all to `dst_mac`.
fn write_traffic(dir: &Path, dst_mac: [u8; 6], packets: u32, flows: usize, seed: u64) -> Traffic {
    let mut rng = Rng(seed);
    let tuples: Vec<_> = (0..flows)
        .map(|_| {
            let r = rng.next();
            let client = [198, 18, (r >> 8) as u8, r as u8];
            let server = [198, 19, (r >> 16) as u8, (r >> 24) as u8];
            (client, server, 1024 + (r >> 32) as u16 % 60000, [80, 443, 53, 123][(r >> 50) as usize % 4], r >> 62 == 0)
        })
        .collect();
    let path = dir.join(format!("traffic-{seed}.pcap"));
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    let mut sent = Vec::new();
    for seq in 0..packets {
        let r = rng.next();
        let (a, b, sp, dp, udp) = tuples[(r >> 8) as usize % flows];
        let size = (r >> 20) as usize % 1350;
        let f =
            if (r >> 40) & 1 == 1 { frame(dst_mac, b, a, dp, sp, udp, seq, size) } else { frame(dst_mac, a, b, sp, dp, udp, seq, size) };
        sent.push(Sent { flow: FlowTuple::parse(LinkType::ETHERNET, &f).unwrap().canonical(), udp });
        w.write_packet(1_700_000_000_000_000_000 + u64::from(seq) * 1000, &f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
    Traffic { path, sent }
}

/// Output of `ip ARGS`, which must succeed.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The MAC address of the capturing end.
fn rx_mac(tb: &TestBed) -> [u8; 6] {
    let json = ip(&["-n", &tb.rx_ns, "-j", "link", "show", &tb.rx_if]);
    let at = json.find("\"address\":\"").expect("no address in ip -j link") + 11;
    let mut mac = [0u8; 6];
    for (m, hex) in mac.iter_mut().zip(json[at..at + 17].split(':')) {
        *m = u8::from_str_radix(hex, 16).unwrap();
    }
    mac
}

/// The XDP program on the capturing end, as `ip -d link` shows it ("prog/xdp id N ..."), if any.
fn xdp_on(tb: &TestBed) -> Option<String> {
    let out = ip(&["-n", &tb.rx_ns, "-d", "link", "show", &tb.rx_if]);
    out.lines().map(str::trim).find(|l| l.starts_with("prog/xdp")).map(str::to_string)
}

/// Wait up to `limit` for `cond`, polling.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Replay `traffic` from the sending end, at top speed or `pps` packets per second.
fn replay(tb: &TestBed, traffic: &Traffic, pps: Option<u32>) {
    let mut cmd = tb.in_tx("tcpreplay");
    cmd.args(["-q", "-i", &tb.tx_if]);
    match pps {
        Some(p) => cmd.arg(format!("--pps={p}")),
        None => cmd.arg("-t"),
    };
    let out = cmd.arg(&traffic.path).output().unwrap();
    assert!(out.status.success(), "tcpreplay: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Live options to capture in the test bed's receiving namespace. Its
/// interface has an address, which nothing on the host needs: its traffic may be taken.
fn live(tb: &TestBed, afxdp: AfXdpOptions) -> LiveOptions {
    LiveOptions { netns: Some(tb.rx_ns.clone().into()), afxdp: AfXdpOptions { take_host_traffic: true, ..afxdp }, ..LiveOptions::default() }
}

/// What one queue's worker saw, in order; it can be held back until `go` is set.
#[derive(Default)]
struct Seen {
    seqs: Vec<u32>,
    others: u64,
    queue: Option<QueueId>,
    go: Option<Arc<AtomicBool>>,
}

impl Handler for Seen {
    fn packet(&mut self, p: &Packet<'_>) {
        if let Some(go) = &self.go {
            let until = Instant::now() + Duration::from_secs(20);
            while !go.load(Ordering::Relaxed) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(self.queue.is_none_or(|q| q == p.queue()), "a worker got another queue's packet");
        self.queue = Some(p.queue());
        assert!(p.caplen() <= p.wire_len());
        assert!(p.ts_ns() > 1_600_000_000_000_000_000, "a packet without a wall-clock timestamp");
        match seq_of(p.data()) {
            Some(s) => self.seqs.push(s),
            None => self.others += 1,
        }
    }
}

/// Wait until every sent packet is accounted for (or 10 s), then stop and report.
fn finish(running: Running<Seen>, sent: usize) -> Report<Seen> {
    let total = |r: &Running<Seen>| {
        let t = r.stats().total();
        t.delivered + t.filtered + t.capture_drops + t.delivery_drops
    };
    eventually(Duration::from_secs(10), || total(&running) >= sent as u64);
    running.stop_handle().stop();
    let report = running.join();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    report
}

/// The identity on every queue, nothing left in flight, and each queue's delivered
/// count equal to what its worker saw.
fn check_books(report: &Report<Seen>) -> QueueStats {
    for ((queue, seen), stats) in report.handlers.iter().zip(&report.stats.queues) {
        assert_eq!(stats.queue, *queue);
        assert!(stats.balanced(), "{stats:?}");
        assert_eq!(stats.in_flight, 0, "{stats:?}");
        assert_eq!(stats.delivered, seen.seqs.len() as u64 + seen.others, "queue {queue}: {stats:?}");
        assert_eq!(stats.bad_recycles, 0);
    }
    report.stats.total()
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with tcpreplay"]
fn every_packet_once_with_both_directions_of_a_flow_on_one_queue() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let traffic = write_traffic(dir.path(), rx_mac(&tb), 20_000, 300, 11);
    // The second shape is the one before the rings held the whole pool: an
    // RX ring of 2,048 (`--ring-size`). At 50,000 packets/s it covers 40 ms of
    // the capture thread off its CPU; 512 covered 10 ms, and CI, running this
    // beside another live test on 2 CPUs, once lost 155 packets to it.
    let configs = [
        AfXdpOptions::default(),
        AfXdpOptions { zero_copy: ZeroCopy::Off, need_wakeup: false, ring_size: Some(2048), frame_size: 4096, ..AfXdpOptions::default() },
    ];
    for afxdp in configs {
        let engine = Engine::builder()
            .source(&format!("afxdp:{}@0-1", tb.rx_if))
            .unwrap()
            .live(live(&tb, afxdp.clone()))
            .pool(PoolConfig::new(64, 64).unwrap())
            .build()
            .unwrap();
        assert_eq!(engine.info().queues, vec![QueueId(0), QueueId(1)]);
        assert_eq!(engine.info().iface.as_deref(), Some(tb.rx_if.as_str()));
        let prog = xdp_on(&tb).expect("no XDP program attached after open");
        assert!(prog.contains("name weir_xdp"), "{prog}");
        let running = engine.start(|_| Seen::default()).unwrap();
        replay(&tb, &traffic, Some(NO_LOSS_PPS));
        let report = finish(running, traffic.sent.len());
        let total = check_books(&report);

        assert_eq!((total.received, total.capture_drops, total.delivery_drops), (traffic.sent.len() as u64, 0, 0), "{afxdp:?}: {total:?}");
        let mut seen = HashSet::new();
        let mut queue_of_flow: HashMap<FlowTuple, QueueId> = HashMap::new();
        for (queue, s) in &report.handlers {
            assert_eq!(s.others, 0, "queue {queue} saw packets nobody sent");
            assert!(!s.seqs.is_empty(), "queue {queue} saw nothing: the flows were not spread");
            for &seq in &s.seqs {
                assert!(seen.insert(seq), "packet {seq} delivered twice");
                let q = *queue_of_flow.entry(traffic.sent[seq as usize].flow).or_insert(*queue);
                assert_eq!(q, *queue, "a flow arrived on two queues");
            }
            assert!(s.seqs.windows(2).all(|w| w[0] < w[1]), "queue {queue} reordered packets");
        }
        assert_eq!(seen.len(), traffic.sent.len());
        assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()), "XDP program left after the engine stopped");
    }
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with tcpreplay"]
fn a_udp_filter_delivers_exactly_the_udp_packets() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let traffic = write_traffic(dir.path(), rx_mac(&tb), 10_000, 200, 12);
    let running = Engine::builder()
        .source(&format!("afxdp:{}@0-1", tb.rx_if))
        .unwrap()
        .live(live(&tb, AfXdpOptions::default()))
        .pool(PoolConfig::new(64, 64).unwrap())
        .filter("udp")
        .build()
        .unwrap()
        .start(|_| Seen::default())
        .unwrap();
    replay(&tb, &traffic, Some(NO_LOSS_PPS));
    let report = finish(running, traffic.sent.len());
    let total = check_books(&report);
    let udp = traffic.udp();
    assert!(!udp.is_empty() && udp.len() < traffic.sent.len());
    let delivered: HashSet<u32> = report.handlers.iter().flat_map(|(_, s)| s.seqs.iter().copied()).collect();
    assert_eq!(delivered, udp);
    assert_eq!(total.delivered, udp.len() as u64);
    assert_eq!(total.filtered, (traffic.sent.len() - udp.len()) as u64);
    assert_eq!(total.received, traffic.sent.len() as u64);
}

/// Capture with a tiny pool while the application is stalled until the sender is
/// done; returns the totals after everything drained.
fn overload(tb: &TestBed, traffic: &Traffic, pool: PoolConfig, ring_size: u32, pps: Option<u32>) -> QueueStats {
    let go = Arc::new(AtomicBool::new(false));
    let afxdp = AfXdpOptions { ring_size: Some(ring_size), ..AfXdpOptions::default() };
    let running = Engine::builder()
        .source(&format!("afxdp:{}@0-1", tb.rx_if))
        .unwrap()
        .live(live(tb, afxdp))
        .pool(pool)
        .build()
        .unwrap()
        .start(|_| Seen { go: Some(Arc::clone(&go)), ..Seen::default() })
        .unwrap();
    replay(tb, traffic, pps);
    go.store(true, Ordering::Relaxed);
    let report = finish(running, traffic.sent.len());
    let total = check_books(&report);
    let delivered: HashSet<u32> = report.handlers.iter().flat_map(|(_, s)| s.seqs.iter().copied()).collect();
    assert_eq!(delivered.len() as u64, total.delivered, "a packet delivered twice");
    assert_eq!(total.received, traffic.sent.len() as u64, "{total:?}");
    assert_eq!(total.delivered + total.capture_drops + total.delivery_drops, traffic.sent.len() as u64, "{total:?}");
    total
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with tcpreplay"]
fn a_depleted_pool_is_a_capture_drop_and_a_full_rx_ring_a_delivery_drop() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let traffic = write_traffic(dir.path(), rx_mac(&tb), 5_000, 100, 13);

    // Chunks of one cell are never published part full, so once the stalled
    // worker holds all 64 chunks it holds all 64 frames: the fill ring runs dry.
    // (The RX ring may also overflow before that, while the unit catches up.)
    let depleted = overload(&tb, &traffic, PoolConfig::new(1, 64).unwrap(), 32, None);
    assert!(depleted.capture_drops > 0, "{depleted:?}");

    // Slowly, each chunk is published (on idle) with a packet or two: a few packets
    // take both chunks of 64 cells, then the RX ring fills up while the fill ring
    // still has frames, and never runs dry.
    let slow = write_traffic(dir.path(), rx_mac(&tb), 300, 20, 14);
    let full = overload(&tb, &slow, PoolConfig::new(64, 2).unwrap(), 32, Some(3000));
    assert!(full.delivery_drops > 0, "{full:?}");
    assert_eq!(full.capture_drops, 0, "{full:?}");
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with tcpreplay"]
fn a_packet_limit_delivers_exactly_that_many() {
    let tb = TestBed::new(2);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let traffic = write_traffic(dir.path(), rx_mac(&tb), 2_000, 50, 15);
    let running = Engine::builder()
        .source(&format!("afxdp:{}@0-1", tb.rx_if))
        .unwrap()
        .live(live(&tb, AfXdpOptions::default()))
        .pool(PoolConfig::new(64, 64).unwrap())
        .packet_limit(500)
        .build()
        .unwrap()
        .start(|_| Seen::default())
        .unwrap();
    replay(&tb, &traffic, Some(NO_LOSS_PPS));
    assert!(running.wait_for(Duration::from_secs(10)), "the limit did not stop the capture");
    let report = running.join();
    assert_eq!(report.stop, StopReason::PacketLimit);
    let total = check_books(&report);
    assert_eq!(total.delivered, 500, "{total:?}");
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed"]
fn pacing_zero_copy_on_veth_and_a_pool_no_larger_than_the_rx_ring_are_refused() {
    let tb = TestBed::new(1);
    let start = |pool: PoolConfig, pacing: weir::source::Pacing| {
        Engine::builder()
            .source(&format!("afxdp:{}", tb.rx_if))
            .unwrap()
            .live(live(&tb, AfXdpOptions { ring_size: Some(64), ..AfXdpOptions::default() }))
            .pool(pool)
            .pacing(pacing)
            .build()
            .unwrap()
            .start(|_| Seen::default())
            .err()
            .expect("started")
            .to_string()
    };
    let e = start(PoolConfig::new(8, 8).unwrap(), weir::source::Pacing::default());
    assert!(e.contains("raise R or M"), "{e}");
    let e = start(PoolConfig::new(64, 8).unwrap(), weir::source::Pacing::Pps(1000.0));
    assert!(e.contains("not live interfaces"), "{e}");
    // veth has native XDP but no AF_XDP zero-copy.
    let zc = AfXdpOptions { zero_copy: ZeroCopy::On, ..AfXdpOptions::default() };
    let e = Engine::builder()
        .source(&format!("afxdp:{}", tb.rx_if))
        .unwrap()
        .live(live(&tb, zc))
        .build()
        .unwrap()
        .start(|_| Seen::default())
        .err()
        .expect("zero-copy on veth")
        .to_string();
    assert!(e.contains("no AF_XDP zero-copy support"), "{e}");
    let e = Engine::builder()
        .source(&format!("afxdp:{}@0-3", tb.rx_if))
        .unwrap()
        .live(live(&tb, AfXdpOptions::default()))
        .build()
        .err()
        .expect("queue 3 of 1")
        .to_string();
    assert!(e.contains("there is no queue 3"), "{e}");
    assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()), "XDP program left after a refused start");
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed"]
fn generic_xdp_where_the_driver_has_no_native_xdp() {
    let tb = TestBed::new(1);
    // The namespace's loopback has no native XDP: weir falls back to generic mode
    // and copy-mode sockets, unless zero-copy is demanded.
    let opts = |zero_copy| live(&tb, AfXdpOptions { zero_copy, ..AfXdpOptions::default() });
    let running =
        Engine::builder().source("afxdp:lo").unwrap().live(opts(ZeroCopy::Auto)).build().unwrap().start(|_| Seen::default()).unwrap();
    let link = ip(&["-n", &tb.rx_ns, "-d", "link", "show", "lo"]);
    assert!(link.contains("xdpgeneric") && link.contains("name weir_xdp"), "{link}");
    running.stop_handle().stop();
    assert!(running.join().errors.is_empty());
    assert!(!ip(&["-n", &tb.rx_ns, "link", "show", "lo"]).contains("xdp"));
    let e =
        Engine::builder().source("afxdp:lo").unwrap().live(opts(ZeroCopy::On)).build().err().expect("zero-copy on loopback").to_string();
    assert!(e.contains("no native XDP"), "{e}");
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed"]
fn a_second_capture_of_the_interface_is_refused() {
    let tb = TestBed::new(2);
    let open = || Engine::builder().source(&format!("afxdp:{}", tb.rx_if)).unwrap().live(live(&tb, AfXdpOptions::default())).build();
    let first = open().unwrap();
    let e = open().err().expect("two captures of one interface").to_string();
    assert!(e.contains("another weir capture"), "{e}");
    drop(first);
    assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()));
}

/// Compile an XDP program with clang into `dir`: weir's own, or a foreign one.
fn compile_xdp(dir: &Path, name: &str, source: Option<&str>) -> PathBuf {
    testbed::require_tools(&["clang"]);
    let src = match source {
        Some(text) => {
            let p = dir.join(format!("{name}.c"));
            std::fs::write(&p, text).unwrap();
            p
        }
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ebpf/weir_xdp.c"),
    };
    let obj = dir.join(format!("{name}.o"));
    let multiarch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    // -mcpu=v3 as build.rs builds weir's: its kernel cutoff's counters need the atomic OR.
    let out = Command::new("clang")
        .args(["-O2", "-g", "-mcpu=v3", "-target", "bpf", "-I", &multiarch, "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap();
    assert!(out.status.success(), "clang: {}", String::from_utf8_lossy(&out.stderr));
    obj
}

/// Attach `obj` to the capturing end by netlink, as an older tool (or a crashed
/// run that attached that way) would.
fn attach_by_netlink(tb: &TestBed, obj: &Path) {
    ip(&["-n", &tb.rx_ns, "link", "set", "dev", &tb.rx_if, "xdpdrv", "obj", obj.to_str().unwrap(), "sec", "xdp"]);
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with clang"]
fn a_foreign_program_is_an_error_unless_replacing_it_was_asked() {
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let pass = "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n\
                SEC(\"xdp\") int foreign_pass(struct xdp_md *ctx) { return XDP_PASS; }\n\
                char LICENSE[] SEC(\"license\") = \"GPL\";\n";
    let obj = compile_xdp(dir.path(), "foreign", Some(pass));
    attach_by_netlink(&tb, &obj);
    let open = |replace_foreign| {
        let afxdp = AfXdpOptions { replace_foreign, ..AfXdpOptions::default() };
        Engine::builder().source(&format!("afxdp:{}", tb.rx_if)).unwrap().live(live(&tb, afxdp)).build()
    };
    let e = open(false).err().expect("opened over a foreign XDP program").to_string();
    assert!(e.contains("\"foreign_pass\"") && e.contains("did not load"), "{e}");
    assert!(xdp_on(&tb).is_some_and(|p| p.contains("name foreign_pass")), "the foreign program was touched");

    let engine = open(true).unwrap();
    assert!(xdp_on(&tb).is_some_and(|p| p.contains("name weir_xdp")), "{:?}", xdp_on(&tb));
    drop(engine);
    assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()), "{:?}", xdp_on(&tb));
}

/// The environment variable that turns a test of this binary into a capturing child.
const CHILD_ENV: &str = "WEIR_AFXDP_TEST_CHILD";

/// The body of the child process that [`capture_in_child_then_kill`] starts:
/// the test that started it, re-run with [`CHILD_ENV`] set. It says which
/// capabilities it holds (CAPS, in hex), captures `NAMESPACE IFACE` (from
/// [`CHILD_ENV`]; `-` for the namespace it runs in), says READY, and waits to be
/// killed (at most 30 s, so a lost child does not live on). When the capture
/// cannot start it says FAILED and why instead, and ends. Returns whether this
/// process is such a child: the test then returns at once.
fn capture_if_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return false };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    println!("CAPS {}", status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("no CapEff in /proc/self/status").trim());
    let (ns, iface) = spec.split_once(' ').unwrap();
    let afxdp = AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() };
    let opts = LiveOptions { netns: (ns != "-").then(|| ns.into()), afxdp, ..LiveOptions::default() };
    let engine = Engine::builder().source(&format!("afxdp:{iface}")).unwrap().live(opts).pool(PoolConfig::new(64, 64).unwrap()).build();
    let running = match engine.map(|e| e.start(|_| Seen::default())) {
        Ok(Ok(running)) => running,
        Ok(Err(e)) => {
            println!("FAILED: {e}");
            return true;
        }
        Err(e) => {
            println!("FAILED: {e}");
            return true;
        }
    };
    // As the CLI does: the library reports, the program prints.
    for note in &running.info().notes {
        eprintln!("weir: {note}");
    }
    println!("READY");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(30));
    running.stop_handle().stop();
    running.join();
    true
}

/// How a child of [`capture_in_child_then_kill`] went.
struct ChildRun {
    /// Its READY or FAILED line.
    said: String,
    /// The capabilities it held (CapEff).
    caps: u64,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl ChildRun {
    /// The child started capturing, and was still capturing when SIGKILL ended it.
    fn assert_killed_while_capturing(&self) {
        assert_eq!(self.said, "READY", "the child did not capture: {self}");
        assert_eq!(self.status.signal(), Some(libc::SIGKILL), "the child did not end by the SIGKILL: {self}");
    }

    /// The child ran its test, could not start the capture, said why naming
    /// `named`, and ended on its own, with success.
    fn assert_refused_naming(&self, named: &str) {
        assert!(self.said.starts_with("FAILED: ") && self.said.contains(named), "the child did not fail naming {named}: {self}");
        assert!(self.status.success(), "the child ended with {}: {self}", self.status);
        assert!(self.stdout.contains("test result: ok. 1 passed"), "the child did not run its test: {self}");
    }
}

impl std::fmt::Display for ChildRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "said {:?}, CapEff {:x}, {}\nstdout: {}\nstderr: {}", self.said, self.caps, self.status, self.stdout, self.stderr)
    }
}

/// Run `wrapper` (a command that ends by running its arguments, or nothing) with
/// this test binary as a capturing child on the test bed: the child runs `test`
/// (the caller, which begins with [`capture_if_child`]). When the child is
/// ready, call `while_running`, then SIGKILL it; when it says it failed, wait
/// (at most 10 s) for it to end. Fails the test if the child says neither, or
/// does not report its capabilities.
fn capture_in_child_then_kill(tb: &TestBed, test: &str, wrapper: &[&str], ns: &str, while_running: impl FnOnce()) -> ChildRun {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = cmd
        .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{ns} {}", tb.rx_if))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest may have printed the test's name on the same line first.
            if let Some(at) = line.find("READY").or_else(|| line.find("FAILED: ")) {
                let _ = tx.send(line[at..].to_string());
            }
            all += &line;
            all.push('\n');
        }
        all
    });
    let err_reader = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut all);
        all
    });
    let said = rx.recv_timeout(Duration::from_secs(20)).ok();
    let mut while_running_failed = None;
    match said.as_deref() {
        Some("READY") => {
            while_running_failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(while_running)).err();
            child.kill().unwrap();
        }
        Some(_) => {
            if !eventually(Duration::from_secs(10), || child.try_wait().unwrap().is_some()) {
                child.kill().unwrap();
            }
        }
        None => child.kill().unwrap(),
    }
    let status = child.wait().unwrap();
    let (stdout, stderr) = (reader.join().unwrap(), err_reader.join().unwrap());
    if let Some(panic) = while_running_failed {
        std::panic::resume_unwind(panic);
    }
    let said = said.unwrap_or_else(|| panic!("the child said neither READY nor FAILED ({status})\nstdout: {stdout}\nstderr: {stderr}"));
    let caps = stdout.lines().find_map(|l| l.find("CAPS ").map(|at| l[at + 5..].trim().to_string()));
    let caps = caps.and_then(|c| u64::from_str_radix(&c, 16).ok());
    let caps = caps.unwrap_or_else(|| panic!("the child did not report its capabilities\nstdout: {stdout}\nstderr: {stderr}"));
    ChildRun { said, caps, status, stdout, stderr }
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed"]
fn sigkill_leaves_no_program_behind() {
    if capture_if_child() {
        return;
    }
    let tb = TestBed::new(2);
    let run = capture_in_child_then_kill(&tb, "sigkill_leaves_no_program_behind", &[], &tb.rx_ns, || {
        assert!(xdp_on(&tb).is_some_and(|p| p.contains("name weir_xdp")), "{:?}", xdp_on(&tb));
    });
    run.assert_killed_while_capturing();
    assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()), "XDP program left after SIGKILL: {:?}", xdp_on(&tb));
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with clang"]
fn a_stale_weir_program_is_replaced_with_a_message() {
    if capture_if_child() {
        return;
    }
    let tb = TestBed::new(2);
    let dir = tempfile::tempdir().unwrap();
    let obj = compile_xdp(dir.path(), "weir_xdp", None);
    attach_by_netlink(&tb, &obj);
    let stale = xdp_on(&tb).expect("ip did not attach the stale program");
    let run = capture_in_child_then_kill(&tb, "a_stale_weir_program_is_replaced_with_a_message", &[], &tb.rx_ns, || {
        let now = xdp_on(&tb).expect("no program while capturing");
        assert!(now.contains("name weir_xdp") && now != stale, "the stale program is still there: {now}");
    });
    run.assert_killed_while_capturing();
    assert!(run.stderr.contains("replaced weir's XDP program"), "no message: {run}");
    assert!(eventually(Duration::from_secs(5), || xdp_on(&tb).is_none()), "{:?}", xdp_on(&tb));
}

#[test]
#[ignore = "needs root: AF_XDP capture and XDP on a veth test bed, with setpriv"]
fn a_missing_capability_is_named() {
    if capture_if_child() {
        return;
    }
    let tb = TestBed::new(1);
    testbed::require_tools(&["setpriv"]);
    // The child starts inside the namespace, so it needs no CAP_SYS_ADMIN to enter it.
    // CAP_NET_ADMIN is bit 12, CAP_NET_RAW 13, CAP_SYS_ADMIN 21.
    for (drop, bits, named) in [("net_raw", 1 << 13, "CAP_NET_RAW"), ("net_admin,-sys_admin", 1 << 12 | 1 << 21, "CAP_NET_ADMIN")] {
        let caps = format!("-{drop}");
        let wrapper = ["ip", "netns", "exec", &tb.rx_ns, "setpriv", "--bounding-set", &caps, "--inh-caps", &caps];
        let run = capture_in_child_then_kill(&tb, "a_missing_capability_is_named", &wrapper, "-", || {});
        assert_eq!(run.caps & bits, 0, "without {drop}, the child still held {:x}: the check proves nothing", run.caps & bits);
        run.assert_refused_naming(named);
    }
    assert!(xdp_on(&tb).is_none());
}
