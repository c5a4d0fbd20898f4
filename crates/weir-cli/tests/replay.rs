//! `weir replay` on a real veth pair between two network namespaces: frames
//! written to a pcap are sent from one namespace with `--netns`, captured by
//! tcpdump in the other, and compared byte for byte and in order. Also pacing,
//! --loop, filters, skipped frames, -Z, and the errors for a missing interface
//! and a non-Ethernet trace. Root only: the tests are `#[ignore]`d (`make test` runs
//! them as root with `cargo test -- --ignored`), and fail saying why without root.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use testbed::TestBed;
use weir::filter::oracle::Oracle;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;

const NOBODY: u64 = 65534;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A test bed with one queue, and what the tests need to know about it.
struct Bed {
    tb: TestBed,
    dir: tempfile::TempDir,
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
}

fn mac(ns: &str, iface: &str) -> [u8; 6] {
    let out = Command::new("ip").args(["-n", ns, "-j", "link", "show", iface]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut m = [0; 6];
    for (d, h) in m.iter_mut().zip(v[0]["address"].as_str().unwrap().split(':')) {
        *d = u8::from_str_radix(h, 16).unwrap();
    }
    m
}

fn ipv4(s: &str) -> [u8; 4] {
    s.parse::<std::net::Ipv4Addr>().unwrap().octets()
}

impl Bed {
    /// Fails the test, saying why, where live tests cannot run.
    fn new() -> Bed {
        let tb = TestBed::new(1);
        let dst_mac = mac(&tb.rx_ns, &tb.rx_if);
        let src_mac = mac(&tb.tx_ns, &tb.tx_if);
        Bed { tb, dir: tempfile::tempdir().unwrap(), dst_mac, src_mac }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// An Ethernet/IPv4/UDP frame of `len` bytes to the capturing end, with
    /// `seq` at the start of its payload.
    fn udp(&self, seq: u32, dport: u16, len: usize) -> Vec<u8> {
        let mut f = Vec::with_capacity(len);
        f.extend_from_slice(&self.dst_mac);
        f.extend_from_slice(&self.src_mac);
        f.extend_from_slice(&[0x08, 0x00]);
        let ip_len = (len - 14) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&ipv4(&self.tb.tx_ip));
        ip[16..20].copy_from_slice(&ipv4(&self.tb.rx_ip));
        let sum: u32 = ip.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&(ip_len - 20).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(&seq.to_be_bytes());
        f.resize(len, (seq % 251) as u8);
        f
    }

    /// `weir replay TRACE -o <tx_if> --netns <tx_ns> ARGS --json`.
    fn replay(&self, trace: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
        c.args(["replay", trace.to_str().unwrap(), "-o", &self.tb.tx_if, "--netns", &self.tb.tx_ns, "--json"]).args(args);
        c.stdin(Stdio::null());
        c
    }

    /// tcpdump on the capturing end, incoming UDP only, until `n` packets; returns
    /// once it is listening.
    fn capture(&self, out: &Path, n: usize) -> Capture {
        let mut child = self
            .tb
            .in_rx("tcpdump")
            .args([
                "-i",
                &self.tb.rx_if,
                "-Z",
                "root",
                "-Q",
                "in",
                "-n",
                "-U",
                "-B",
                "16384",
                "-c",
                &n.to_string(),
                "-w",
                out.to_str().unwrap(),
                "udp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump runs");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "tcpdump ended before listening");
            if line.contains("listening on") {
                break;
            }
        }
        Capture { child, out: out.to_path_buf() }
    }
}

/// A pcap of `frames`, one millisecond apart.
fn write_trace(path: &Path, link: LinkType, frames: &[Vec<u8>]) {
    let mut w = TraceWriter::new(std::fs::File::create(path).unwrap(), FileFormat::Pcap, link, 65535, TsPrecision::Micro).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(1_700_000_000_000_000_000 + i as u64 * 1_000_000, f, f.len() as u32).unwrap();
    }
    w.finish().unwrap();
}

struct Capture {
    child: Child,
    out: PathBuf,
}

impl Capture {
    /// Wait for tcpdump to have its packets (or fail after `limit`), and read them.
    fn packets(self, limit: Duration) -> Vec<Vec<u8>> {
        self.timed(limit).into_iter().map(|(_, data)| data).collect()
    }

    /// As [`packets`](Self::packets), with each packet's capture time in ns.
    fn timed(mut self, limit: Duration) -> Vec<(u64, Vec<u8>)> {
        let until = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let lib = Oracle::system().unwrap();
        let mut h = lib.open_offline(&self.out).unwrap();
        let mut v = Vec::new();
        while let Some(p) = h.next_packet().unwrap() {
            v.push((p.ts_ns, p.data));
        }
        v
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "weir replay failed: {}\n{}", text(&out.stderr), text(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn seq(frame: &[u8]) -> u32 {
    u32::from_be_bytes(frame[42..46].try_into().unwrap())
}

#[test]
#[ignore = "needs root: weir replay on a veth test bed, captured by tcpdump"]
fn sends_exactly_the_frames_in_order_and_skips_what_cannot_go() {
    let bed = Bed::new();
    let mut frames: Vec<Vec<u8>> = (0..500).map(|i| bed.udp(i, 9, 60 + (i as usize * 7) % 1400)).collect();
    // Full-MTU frames go; one byte more cannot, nor can a runt.
    frames.push(bed.udp(500, 9, 1514));
    let mut trace = frames.clone();
    trace.insert(100, bed.udp(9999, 9, 1515));
    trace.insert(300, vec![0xff; 10]);
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &trace);

    let cap = bed.capture(&bed.path("out.pcap"), frames.len());
    let v = json(&bed.replay(&t, &[]).output().unwrap());
    let got = cap.packets(Duration::from_secs(10));
    assert_eq!(got.len(), frames.len(), "captured {} of {}", got.len(), frames.len());
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        assert!(g == f, "frame {i} differs: seq {} vs {}", seq(g), seq(f));
    }
    assert_eq!(v["packets"], frames.len());
    assert_eq!(v["bytes"], frames.iter().map(|f| f.len() as u64).sum::<u64>());
    assert_eq!(v["read"], trace.len());
    assert_eq!((v["skipped"].as_u64(), v["skipped_above_mtu"].as_u64(), v["skipped_too_short"].as_u64()), (Some(2), Some(1), Some(1)));
    assert_eq!((v["queued"].as_u64(), v["unsent"].as_u64(), v["halted"].as_u64()), (Some(0), Some(0), Some(0)));
    assert_eq!(v["mtu"], 1500);
    assert_eq!(v["stop"], "end of input");
    assert!(v["error"].is_null());
}

/// An interface of MTU 1000: `--xdp` skips and counts the frames it cannot
/// carry as `-o` (AF_PACKET) does, and sends the rest, where it used to stop
/// with exit 2 at the first.
#[test]
#[ignore = "needs root: weir replay and weir replay --xdp on a veth test bed"]
fn xdp_skips_and_counts_what_the_mtu_refuses_as_afpacket_does() {
    let bed = Bed::new();
    let st = bed.tb.in_tx("ip").args(["link", "set", &bed.tb.tx_if, "mtu", "1000"]).status().unwrap();
    assert!(st.success());
    let mut trace: Vec<Vec<u8>> = (0..300).map(|i| bed.udp(i, 9, 60 + (i as usize * 13) % 1400)).collect();
    trace.push(bed.udp(300, 9, 1014));
    trace.push(bed.udp(301, 9, 1015));
    trace.insert(10, vec![0xff; 10]);
    let over = trace.iter().filter(|f| f.len() > 1014).count() as u64;
    let fit: Vec<&Vec<u8>> = trace.iter().filter(|f| (14..=1014).contains(&f.len())).collect();
    assert!(over > 50 && fit.len() > 50);
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &trace);
    let afpacket = json(&bed.replay(&t, &[]).output().unwrap());
    let xdp = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["replay", t.to_str().unwrap(), "--xdp", &bed.tb.tx_if, "--netns", &bed.tb.tx_ns, "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let xdp = json(&xdp);
    for (what, v) in [("afpacket", &afpacket), ("xdp", &xdp)] {
        assert_eq!(v["mtu"], 1000, "{what}: {v}");
        assert_eq!(v["packets"], fit.len(), "{what}: {v}");
        assert_eq!(v["bytes"], fit.iter().map(|f| f.len() as u64).sum::<u64>(), "{what}: {v}");
        assert_eq!(
            (v["skipped"].as_u64(), v["skipped_above_mtu"].as_u64(), v["skipped_too_short"].as_u64()),
            (Some(over + 1), Some(over), Some(1)),
            "{what}: {v}"
        );
        assert_eq!(v["stop"], "end of input", "{what}: {v}");
        assert!(v["error"].is_null(), "{what}: {v}");
    }
}

#[test]
#[ignore = "needs root: weir replay on a veth test bed, captured by tcpdump"]
fn pps_paces_the_sending() {
    let bed = Bed::new();
    let frames: Vec<Vec<u8>> = (0..2000).map(|i| bed.udp(i, 9, 100)).collect();
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &frames);
    let cap = bed.capture(&bed.path("out.pcap"), frames.len());
    let start = Instant::now();
    let v = json(&bed.replay(&t, &["--pps", "2000"]).output().unwrap());
    let wall = start.elapsed().as_secs_f64();
    let got = cap.timed(Duration::from_secs(10));
    assert_eq!(got.len(), 2000);
    assert!(got.iter().enumerate().all(|(i, (_, g))| seq(g) == i as u32), "out of order");
    let secs = v["elapsed_s"].as_f64().unwrap();
    // 2000 packets at 2000/s: the last is due at 0.9995 s.
    assert!((0.7..3.0).contains(&secs), "took {secs} s (wall {wall} s)");
    assert!(wall < 4.0, "wall {wall} s");
    assert_eq!((v["packets"].as_u64(), v["halted"].as_u64()), (Some(2000), Some(0)));
    // Paced packet by packet, not in bursts: most gaps on the wire are near 500 µs.
    let mut gaps: Vec<u64> = got.windows(2).map(|w| w[1].0.saturating_sub(w[0].0)).collect();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!((350_000..650_000).contains(&median), "median gap {median} ns");
}

#[test]
#[ignore = "needs root: weir replay on a veth test bed, captured by tcpdump"]
fn loop_sends_the_trace_again() {
    let bed = Bed::new();
    let frames: Vec<Vec<u8>> = (0..200).map(|i| bed.udp(i, 9, 64 + i as usize)).collect();
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &frames);
    let cap = bed.capture(&bed.path("out.pcap"), 600);
    let v = json(&bed.replay(&t, &["--loop", "3"]).output().unwrap());
    let got = cap.packets(Duration::from_secs(10));
    assert_eq!(got.len(), 600);
    for (i, g) in got.iter().enumerate() {
        assert!(g == &frames[i % 200], "frame {i}: seq {}", seq(g));
    }
    assert_eq!((v["packets"].as_u64(), v["passes"].as_u64()), (Some(600), Some(3)));

    // -c counts across passes.
    let v = json(&bed.replay(&t, &["--loop", "0", "-c", "450"]).output().unwrap());
    assert_eq!((v["packets"].as_u64(), v["passes"].as_u64()), (Some(450), Some(3)));
    assert_eq!(v["stop"], "packet limit reached");
}

#[test]
#[ignore = "needs root: weir replay on a veth test bed, captured by tcpdump"]
fn filter_sends_only_matching_packets() {
    let bed = Bed::new();
    let frames: Vec<Vec<u8>> = (0..300).map(|i| bed.udp(i, if i % 3 == 0 { 53 } else { 9 }, 120)).collect();
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &frames);
    let cap = bed.capture(&bed.path("out.pcap"), 100);
    let v = json(&bed.replay(&t, &["-f", "udp dst port 53"]).output().unwrap());
    let got = cap.packets(Duration::from_secs(10));
    let want: Vec<&Vec<u8>> = frames.iter().filter(|f| f[36..38] == [0, 53]).collect();
    assert_eq!(want.len(), 100);
    assert_eq!(got.len(), 100);
    assert!(got.iter().zip(&want).all(|(g, w)| &g == w), "not the matching packets, in order");
    assert_eq!((v["packets"].as_u64(), v["filtered"].as_u64()), (Some(100), Some(200)));
}

/// Every thread of process `pid` runs as nobody (all four uids and gids).
fn runs_as_nobody(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    let mut seen = 0;
    for t in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else { continue };
        let ids =
            |k: &str| status.lines().find(|l| l.starts_with(k)).map(|l| l.split_whitespace().skip(1).map(String::from).collect::<Vec<_>>());
        let nobody = Some(vec![NOBODY.to_string(); 4]);
        if ids("Uid:") != nobody || ids("Gid:") != nobody {
            return false;
        }
        seen += 1;
    }
    seen > 0
}

#[test]
#[ignore = "needs root: weir replay -Z nobody on a veth test bed"]
fn drops_privileges_with_z() {
    let bed = Bed::new();
    // The trace is opened after the switch: nobody must be able to read it.
    std::fs::set_permissions(bed.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let frames: Vec<Vec<u8>> = (0..50).map(|i| bed.udp(i, 9, 100)).collect();
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &frames);

    let v = json(&bed.replay(&t, &["-Z", "nobody"]).output().unwrap());
    assert_eq!(v["uid"], serde_json::json!([NOBODY, NOBODY, NOBODY]));
    assert_eq!(v["gid"], serde_json::json!([NOBODY, NOBODY, NOBODY]));
    assert_eq!(v["packets"], 50, "the socket opened as root still sends");

    // While it runs, every thread is nobody; Ctrl-C still stops it cleanly.
    let before = bed.tb.rx_link_packets();
    let child =
        bed.replay(&t, &["-Z", "nobody", "--loop", "0", "--pps", "1000"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !runs_as_nobody(child.id()) {
        assert!(Instant::now() < until, "weir never ran as nobody");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(runs_as_nobody(child.id()), "a thread runs as another user");
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    assert_eq!(v["stop"], "stopped on request");
    assert!(v["packets"].as_u64().unwrap() > 50, "{v}");
    assert!(bed.tb.rx_link_packets() >= before + v["packets"].as_u64().unwrap());

    // A user that does not exist is the user's mistake.
    let out = bed.replay(&t, &["-Z", "no-such-user-weir"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no user \"no-such-user-weir\""), "{}", text(&out.stderr));
}

#[test]
#[ignore = "needs root: weir replay on a veth test bed"]
fn bad_interface_namespace_or_trace_exit_2() {
    let bed = Bed::new();
    let t = bed.path("t.pcap");
    write_trace(&t, LinkType::ETHERNET, &[bed.udp(0, 9, 100)]);
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_weir")).arg("replay").args(args).stdin(Stdio::null()).output().unwrap();
    let ts = t.to_str().unwrap();

    let out = run(&[ts, "-o", "nosuch0", "--netns", &bed.tb.tx_ns]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("no network interface \"nosuch0\" in network namespace"), "{err}");

    let out = run(&[ts, "-o", &bed.tb.tx_if, "--netns", "weir-no-such-ns"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("weir-no-such-ns"), "{}", text(&out.stderr));

    let raw = bed.path("raw.pcap");
    write_trace(&raw, LinkType::RAW, &[bed.udp(0, 9, 100)[14..].to_vec()]);
    let out = run(&[raw.to_str().unwrap(), "-o", &bed.tb.tx_if, "--netns", &bed.tb.tx_ns]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("link type RAW") && err.contains("only Ethernet"), "{err}");

    let out = run(&[&format!("{ts}@0-1"), "-o", &bed.tb.tx_if, "--netns", &bed.tb.tx_ns]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("weir replay sends one"), "{}", text(&out.stderr));

    let out = run(&["-", "-o", &bed.tb.tx_if, "--netns", &bed.tb.tx_ns, "--loop", "2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("standard input can be read only once"), "{}", text(&out.stderr));
}
