//! Filters on what the kernel knows of a packet (`inbound`, `outbound`,
//! `ifindex`, the packet type), held to the kernel's own socket filter.
//!
//! afpacket attaches the filter to its socket, where the kernel gives those
//! loads their values; afxdp and xdp run it where no socket filter is, bound
//! to the capturing interface (`Filter::bind`). The same frames, to the
//! interface's own address, to broadcast, to a multicast group and to another
//! host, are replayed once per backend and filter, and every backend must
//! deliver exactly the frames the model says, which must also be afpacket's.
//!
//! Needs root (namespaces, XDP, AF_XDP) and tcpreplay: ignored by a plain
//! `cargo test`, run by `make test`'s privileged step.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use support::frames::Frame;
use testbed::TestBed;
use weir::filter::{BpfInsn, Filter};
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::source::{AfXdpOptions, LiveOptions, XdpOptions};
use weir::{Engine, Handler, LinkType, Packet, PoolConfig};

const MAGIC: &[u8; 4] = b"LINK";
/// Frames of each destination.
const EACH: u32 = 50;

/// The packet types of `<linux/if_packet.h>`, in the order the frames cycle through.
const HOST: u32 = 0;
const BROADCAST: u32 = 1;
const MULTICAST: u32 = 2;
const OTHERHOST: u32 = 3;

/// The frames, each destination in turn; frame `seq` has packet type `seq % 4`.
fn write_trace(path: &Path, own: [u8; 6]) {
    let destinations = [own, [0xff; 6], [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb], [0x02, 0x99, 0x99, 0x99, 0x99, 0x99]];
    let mut w =
        TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    for seq in 0..EACH * 4 {
        let f = Frame {
            dst_mac: destinations[seq as usize % 4],
            src_mac: [0x02, 0, 0, 0, 0, 1],
            src: [198, 18, 200, 1],
            dst: [198, 18, 200, 2],
            sport: 4000 + seq as u16,
            dport: 9,
            udp: true,
        }
        .build(MAGIC, seq, 32);
        w.write_packet(1_700_000_000_000_000_000 + u64::from(seq) * 1000, &f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

#[derive(Default)]
struct Seqs(Vec<u32>);

impl Handler for Seqs {
    fn packet(&mut self, p: &Packet<'_>) {
        let d = p.data();
        let at = 14 + 20 + 8;
        if d.len() >= at + 8 && &d[at..at + 4] == MAGIC {
            self.0.push(u32::from_be_bytes(d[at + 4..at + 8].try_into().unwrap()));
        }
    }
}

/// What `source` delivers of the replayed frames through `filter`, of which
/// the model expects `want`.
fn delivered(tb: &TestBed, source: &str, filter: &Filter, trace: &Path, want: u64) -> BTreeSet<u32> {
    let live = LiveOptions {
        netns: Some(tb.rx_ns.clone().into()),
        afxdp: AfXdpOptions { take_host_traffic: true, ..AfXdpOptions::default() },
        xdp: XdpOptions::default(),
        ..LiveOptions::default()
    };
    let mut engine =
        Engine::builder().source(source).unwrap().live(live).pool(PoolConfig::new(64, 64).unwrap()).build().unwrap_or_else(|e| {
            panic!("{source}: {e}");
        });
    engine.set_filter(Some(filter.clone())).unwrap();
    let running = engine.start(|_| Seqs::default()).unwrap();
    let out = tb.in_tx("tcpreplay").args(["-q", "-i", &tb.tx_if, "--pps=20000"]).arg(trace).output().unwrap();
    assert!(out.status.success(), "tcpreplay: {}", String::from_utf8_lossy(&out.stderr));
    // A socket filter's rejects are not seen by weir, so wait for what the
    // model expects, then long enough for anything more to show.
    let until = Instant::now() + Duration::from_secs(10);
    while running.stats().total().delivered < want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    running.stop_handle().stop();
    let report = running.join();
    assert!(report.errors.is_empty(), "{source}: {:?}", report.errors);
    let t = report.stats.total();
    assert_eq!(t.capture_drops + t.delivery_drops, 0, "{source}: {t:?}");
    report.handlers.iter().flat_map(|(_, s)| s.0.iter().copied()).collect()
}

fn program(insns: &[(u16, u8, u8, u32)]) -> Filter {
    let insns: Vec<BpfInsn> = insns.iter().map(|&(code, jt, jf, k)| BpfInsn { code, jt, jf, k }).collect();
    Filter::from_program(&insns).unwrap()
}

#[test]
#[ignore = "needs root: afpacket, AF_XDP and XDP on a veth test bed, with tcpreplay"]
fn inbound_ifindex_and_the_packet_type_select_on_afxdp_and_xdp_what_the_kernel_selects() {
    let tb = TestBed::new(1);
    testbed::require_tools(&["tcpreplay"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("destinations.pcap");
    let (ifindex, mac) = tb.rx_link();
    write_trace(&trace, mac);
    let all: BTreeSet<u32> = (0..EACH * 4).collect();
    let of_type = |t: u32| all.iter().copied().filter(|s| s % 4 == t).collect::<BTreeSet<u32>>();
    // ld [pkttype] (the kernel's ancillary offset); jeq #t; accept; reject.
    let type_is = |t: u32| program(&[(0x28, 0, 0, 0xffff_f004), (0x15, 0, 1, t), (0x06, 0, 0, 65535), (0x06, 0, 0, 0)]);
    let compiled = |e: &str| Filter::compile(e, LinkType::ETHERNET, 65535).unwrap();
    let cases: Vec<(String, Filter, BTreeSet<u32>)> = vec![
        ("packet type host".into(), type_is(HOST), of_type(HOST)),
        ("packet type broadcast".into(), type_is(BROADCAST), of_type(BROADCAST)),
        ("packet type multicast".into(), type_is(MULTICAST), of_type(MULTICAST)),
        ("packet type otherhost".into(), type_is(OTHERHOST), of_type(OTHERHOST)),
        ("inbound and udp".into(), compiled("inbound and udp"), all.clone()),
        ("outbound".into(), compiled("outbound"), BTreeSet::new()),
        (format!("ifindex {ifindex}"), compiled(&format!("ifindex {ifindex}")), all.clone()),
        (format!("ifindex {}", ifindex + 1), compiled(&format!("ifindex {}", ifindex + 1)), BTreeSet::new()),
    ];
    let mut failures = Vec::new();
    for (name, filter, model) in &cases {
        let kernel = delivered(&tb, &format!("afpacket:{}", tb.rx_if), filter, &trace, model.len() as u64);
        if kernel != *model {
            failures.push(format!("{name}: afpacket's socket filter took {} frames, the model {}", kernel.len(), model.len()));
        }
        for source in [format!("afxdp:{}", tb.rx_if), format!("xdp:{}", tb.rx_if)] {
            let got = delivered(&tb, &source, filter, &trace, model.len() as u64);
            if got != kernel {
                let missing = kernel.difference(&got).count();
                let extra = got.difference(&kernel).count();
                failures.push(format!("{name}: {source} took {} frames ({missing} of the kernel's missing, {extra} more)", got.len()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
