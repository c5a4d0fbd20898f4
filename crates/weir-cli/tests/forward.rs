//! `weir forward` inline between two namespaces of a test bed of its own:
//!
//! ```text
//!  ns <s>          ns <f>: weir forward IN OUT          ns <r>
//!  s ═══════════ in                 out ═══════════ r
//!  weir replay                                      weir record
//! ```
//!
//! No interface carries an address: a bump in the wire has none. A trace made
//! from real traces (`weir synth --from` over Zeek's, re-addressed into
//! 198.18.0.0/15) is sent with `weir replay`; what `weir record` captures behind the
//! forwarder must be, byte for byte and in order, the trace's frames that the
//! filter passes (judged by the system's libpcap), and the forwarder's counts
//! must say exactly that. Table-driven over the three backends, in both
//! directions, back out of the same interface, and with the Rust API's
//! verdicts. Root only: `#[ignore]`d, run by `make test`'s privileged step.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use weir::filter::oracle::Oracle;
use weir::filter::Filter;
use weir::forward::{Backend, Direction, ForwardOptions, Forwarder, Verdict};
use weir::LinkType;

static NEXT: AtomicU32 = AtomicU32::new(0);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), text(&out.stderr));
}

/// Three namespaces joined by two veth pairs, removed when dropped.
struct Bed {
    s_ns: String,
    f_ns: String,
    r_ns: String,
    /// The sender's end, the forwarder's IN and OUT, the receiver's end.
    s: String,
    input: String,
    output: String,
    r: String,
    dir: tempfile::TempDir,
}

impl Bed {
    fn new() -> Bed {
        testbed::require_root();
        let id = format!("{}{}", std::process::id() % 100_000, NEXT.fetch_add(1, Ordering::Relaxed));
        let b = Bed {
            s_ns: format!("wfs-{id}"),
            f_ns: format!("wff-{id}"),
            r_ns: format!("wfr-{id}"),
            s: format!("wfs{id}"),
            input: format!("wfi{id}"),
            output: format!("wfo{id}"),
            r: format!("wfr{id}"),
            dir: tempfile::tempdir().unwrap(),
        };
        for ns in [&b.s_ns, &b.f_ns, &b.r_ns] {
            ip(&["netns", "add", ns]);
            // No IPv6: its neighbour discovery would put frames on the wire no test sent.
            let st = Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]).status();
            assert!(st.unwrap().success());
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        ip(&["link", "add", &b.s, "type", "veth", "peer", "name", &b.input]);
        ip(&["link", "add", &b.output, "type", "veth", "peer", "name", &b.r]);
        for (iface, ns) in [(&b.s, &b.s_ns), (&b.input, &b.f_ns), (&b.output, &b.f_ns), (&b.r, &b.r_ns)] {
            ip(&["link", "set", iface, "netns", ns]);
            ip(&["-n", ns, "link", "set", iface, "up"]);
        }
        b
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A trace of `packets` frames of the IPv4 TCP and UDP flows of a few of
    /// Zeek's real traces, re-addressed into 198.18.0.0/15 by `weir synth`.
    fn trace(&self, packets: u32) -> PathBuf {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
        assert!(corpus.is_dir(), "this test needs the corpus at {}", corpus.display());
        let from = self.path("from");
        std::fs::create_dir(&from).unwrap();
        for f in ["smtp.pcap", "dns-edns-ecs.pcap", "wikipedia.pcap", "var-services-std-ports.pcap", "ncp.pcap"] {
            std::os::unix::fs::symlink(corpus.join(f), from.join(f)).unwrap();
        }
        let t = self.path("trace.pcap");
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["synth", "--from", from.to_str().unwrap(), "-o", t.to_str().unwrap(), "--flows", "50", "--seed", "7"])
            .args(["--packets", &packets.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "weir synth: {}", text(&out.stderr));
        t
    }

    /// `weir record` of the frames coming in on an end of the bed (not what a
    /// replay sends out of it), once it listens. Behind the xdp backend the
    /// recorder is afxdp: frames redirected by XDP reach a veth only if it
    /// has an XDP program (or GRO, which would merge TCP segments); afxdp sees
    /// only what comes in. Otherwise afpacket, with `inbound`.
    fn capture(&self, ns: &str, iface: &str, out: &Path, backend: &str) -> Cap {
        let source = if backend == "xdp" {
            vec![format!("afxdp:{iface}")]
        } else {
            vec![format!("afpacket:{iface}"), "-f".into(), "inbound".into()]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["record", "-q", "--netns", ns])
            .args(&source)
            .args(["--block-timeout", "10", "-w"])
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("weir record runs");
        let lines = testbed::wait_listening(&mut child, "weir record");
        let said = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("; "));
        Cap { child, said }
    }

    /// `weir replay TRACE` out of `iface` in `ns`, to its end.
    fn replay(&self, ns: &str, iface: &str, trace: &Path) {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["replay", "-q", "--netns", ns, "-o", iface])
            .arg(trace)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "weir replay: {}", text(&out.stderr));
    }

    /// `weir forward ARGS --netns <f> --json`, once it listens.
    fn forward(&self, args: &[&str]) -> Child {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("forward")
            .args(args)
            .args(["--netns", &self.f_ns, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = testbed::wait_listening(&mut child, "weir forward");
        std::thread::spawn(move || lines.for_each(drop));
        child
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for ns in [&self.s_ns, &self.f_ns, &self.r_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The frames of a trace that `weir replay` sends on the bed's 1500-byte MTU
/// (real traces hold some longer ones, captured before segmentation offload
/// cut them up; replay skips and counts those).
fn sendable(path: &Path) -> Vec<Vec<u8>> {
    frames(path).into_iter().filter(|f| f.len() <= 1514).collect()
}

/// The frames of a capture file, in order.
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let mut h = Oracle::system().unwrap().open_offline(path).unwrap();
    let mut v = Vec::new();
    while let Some(p) = h.next_packet().unwrap() {
        v.push(p.data);
    }
    v
}

/// The frames libpcap's own `bpf_filter` passes with the program libpcap compiles of `expr`.
fn passing(all: &[Vec<u8>], expr: Option<&str>) -> Vec<Vec<u8>> {
    let Some(expr) = expr else { return all.to_vec() };
    let prog = Filter::compile(expr, LinkType::ETHERNET, 65535).unwrap();
    let lib = Oracle::system().unwrap();
    all.iter().filter(|f| lib.offline_filter(prog.program(), f, f.len() as u32)).cloned().collect()
}

/// Wait for `child` to end by itself (its -c limit), at most `limit`; its stdout as JSON.
fn finished(child: Child, limit: Duration) -> serde_json::Value {
    let id = child.id();
    let until = Instant::now() + limit;
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if Instant::now() > until {
            let _ = Command::new("kill").args(["-INT", &id.to_string()]).status();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = waiter.join().unwrap();
    assert!(out.status.success(), "weir forward failed: {}\n{}", text(&out.stderr), text(&out.stdout));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// Whole records in a pcap file still being written.
fn records(path: &Path) -> usize {
    let d = std::fs::read(path).unwrap_or_default();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
        if at + 16 + caplen > d.len() {
            break;
        }
        at += 16 + caplen;
        n += 1;
    }
    n
}

/// Wait (at most 10 s) until the recorder has written `expect` frames, a
/// moment more for any that should not be there, then stop it and read what
/// it captured.
fn stop_capture(mut c: Cap, out: &Path, expect: usize) -> Vec<Vec<u8>> {
    let until = Instant::now() + Duration::from_secs(10);
    while records(out) < expect && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill").args(["-INT", &c.child.id().to_string()]).status();
    let _ = c.child.wait();
    let said = c.said.join().unwrap_or_default();
    let got = frames(out);
    if got.len() != expect {
        eprintln!("weir record wrote {} of {expect}: {said}", got.len());
    }
    got
}

/// The recorder at work, and what it says on stderr once it stops.
struct Cap {
    child: Child,
    said: std::thread::JoinHandle<String>,
}

/// The counts of a finished forwarder against what the trace says.
fn check_counts(v: &serde_json::Value, sent: usize, passed: usize, what: &str) {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{what}: no {k} in {v}"));
    assert_eq!(n("received"), sent as u64, "{what}: {v}");
    assert_eq!(n("forwarded"), passed as u64, "{what}: {v}");
    assert_eq!(n("filtered"), (sent - passed) as u64, "{what}: exactly what the filter rejects is dropped by policy: {v}");
    assert_eq!((n("dropped"), n("tx_failed"), n("in_flight"), n("kernel_drops")), (0, 0, 0, 0), "{what}: {v}");
    assert_eq!(v["balanced"], true, "{what}: {v}");
}

#[test]
#[ignore = "needs root and the corpus: weir forward on a three-namespace veth test bed, weir replay and weir record"]
fn forward_passes_a_replayed_trace_unchanged_and_drops_exactly_what_the_filter_rejects() {
    let bed = Bed::new();
    let t = bed.trace(3000);
    let all = sendable(&t);
    assert!(all.len() > 2900, "{} of 3000 frames fit the MTU", all.len());
    let count = all.len().to_string();
    for backend in ["afxdp", "afpacket", "xdp"] {
        for filter in [None, Some("tcp and not port 80")] {
            let what = format!("{backend}, filter {filter:?}");
            let want = passing(&all, filter);
            assert!(!want.is_empty() && (filter.is_none() || want.len() < all.len()), "{what}: the filter must pass some and not all");
            let out = bed.path(&format!("{backend}-{}.pcap", filter.is_some()));
            let cap = bed.capture(&bed.r_ns, &bed.r, &out, backend);
            let mut args = vec!["--backend", backend, &bed.input, &bed.output, "-c", &count];
            if let Some(f) = filter {
                args.extend(["-f", f]);
            }
            let fwd = bed.forward(&args);
            bed.replay(&bed.s_ns, &bed.s, &t);
            let v = finished(fwd, Duration::from_secs(20));
            let got = stop_capture(cap, &out, want.len());
            assert_eq!(got.len(), want.len(), "{what}: captured {} behind the forwarder, {} pass: {v}", got.len(), want.len());
            assert!(got == want, "{what}: the frames behind the forwarder differ from the trace's (bytes or order)");
            check_counts(&v, all.len(), want.len(), &what);
        }
    }
}

#[test]
#[ignore = "needs root and the corpus: weir forward on a three-namespace veth test bed, weir replay and weir record"]
fn forward_works_both_ways_and_back_out_of_the_same_interface() {
    let bed = Bed::new();
    let t = bed.trace(2000);
    let all = sendable(&t);
    let (one, two) = (all.len().to_string(), (2 * all.len()).to_string());
    for backend in ["afxdp", "afpacket", "xdp"] {
        // Both ways at once: each end receives what the other sent.
        let (at_r, at_s) = (bed.path(&format!("{backend}-r.pcap")), bed.path(&format!("{backend}-s.pcap")));
        let (cap_r, cap_s) = (bed.capture(&bed.r_ns, &bed.r, &at_r, backend), bed.capture(&bed.s_ns, &bed.s, &at_s, backend));
        let fwd = bed.forward(&["--backend", backend, "--bidirectional", &bed.input, &bed.output, "-c", &two]);
        std::thread::scope(|s| {
            s.spawn(|| bed.replay(&bed.s_ns, &bed.s, &t));
            s.spawn(|| bed.replay(&bed.r_ns, &bed.r, &t));
        });
        let v = finished(fwd, Duration::from_secs(20));
        assert!(stop_capture(cap_r, &at_r, all.len()) == all, "{backend}: IN to OUT, unchanged and in order");
        assert!(stop_capture(cap_s, &at_s, all.len()) == all, "{backend}: OUT to IN, unchanged and in order");
        check_counts(&v, 2 * all.len(), 2 * all.len(), &format!("{backend} both ways"));
        let lanes = v["lanes"].as_array().unwrap();
        assert_eq!(lanes.len(), 2, "{v}");
        assert!(lanes.iter().all(|l| l["received"] == all.len() && l["forwarded"] == all.len()), "{backend}: per direction: {v}");

        // IN = OUT: every frame comes back to the sender.
        let back = bed.path(&format!("{backend}-back.pcap"));
        let cap = bed.capture(&bed.s_ns, &bed.s, &back, backend);
        let fwd = bed.forward(&["--backend", backend, &bed.input, &bed.input, "-c", &one]);
        bed.replay(&bed.s_ns, &bed.s, &t);
        let v = finished(fwd, Duration::from_secs(20));
        assert!(stop_capture(cap, &back, all.len()) == all, "{backend}: back out of IN, unchanged and in order");
        check_counts(&v, all.len(), all.len(), &format!("{backend} back out"));
    }
}

/// A filter on where a packet came in is bound to each lane's input: with
/// `ifindex` of IN, both ways at once, every frame from the sender passes and
/// every frame from the receiver's side is dropped by policy. Without the
/// binding the index load fails off the kernel and rejects both ways; bound to
/// one interface only it would pass both or neither.
#[test]
#[ignore = "needs root and the corpus: weir forward on a three-namespace veth test bed, weir replay and weir record"]
fn a_filter_on_the_arrival_interface_is_bound_to_each_directions_input() {
    let bed = Bed::new();
    let t = bed.trace(1000);
    let all = sendable(&t);
    let (one, two) = (all.len() as u64, (2 * all.len()).to_string());
    let only_in = format!("ifindex {}", testbed::link_of(&bed.f_ns, &bed.input).0);
    for backend in ["afxdp", "afpacket"] {
        let (at_r, at_s) = (bed.path(&format!("{backend}-if-r.pcap")), bed.path(&format!("{backend}-if-s.pcap")));
        let (cap_r, cap_s) = (bed.capture(&bed.r_ns, &bed.r, &at_r, backend), bed.capture(&bed.s_ns, &bed.s, &at_s, backend));
        let fwd = bed.forward(&["--backend", backend, "--bidirectional", "-f", &only_in, &bed.input, &bed.output, "-c", &two]);
        std::thread::scope(|s| {
            s.spawn(|| bed.replay(&bed.s_ns, &bed.s, &t));
            s.spawn(|| bed.replay(&bed.r_ns, &bed.r, &t));
        });
        let v = finished(fwd, Duration::from_secs(20));
        assert!(stop_capture(cap_r, &at_r, all.len()) == all, "{backend}: IN to OUT passes {only_in}, unchanged and in order");
        assert!(stop_capture(cap_s, &at_s, 0).is_empty(), "{backend}: OUT to IN came in on OUT: {v}");
        let lanes = v["lanes"].as_array().unwrap();
        // A lane is named `FROM@q -> TO@q`, or `FROM -> TO` where there is one queue.
        let sum = |from: &str, k: &str| -> u64 {
            let of = |l: &&serde_json::Value| l["lane"].as_str().and_then(|n| n.split([' ', '@']).next()) == Some(from);
            lanes.iter().filter(of).map(|l| l[k].as_u64().unwrap_or_else(|| panic!("no {k} in {l}"))).sum()
        };
        assert_eq!((sum(&bed.input, "forwarded"), sum(&bed.input, "filtered")), (one, 0), "{backend}: {v}");
        assert_eq!((sum(&bed.output, "forwarded"), sum(&bed.output, "filtered")), (0, one), "{backend}: {v}");
        assert_eq!(v["balanced"], true, "{backend}: {v}");
    }
}

/// In the kernel, what OUT gives back is counted, not lost: with no XDP
/// program and no GRO on OUT's peer, a veth refuses every redirected frame,
/// and the forwarder's counts must say so from the kernel's tracepoint.
#[test]
#[ignore = "needs root and the corpus: weir forward on a three-namespace veth test bed, weir replay"]
fn xdp_counts_every_frame_out_gives_back_as_a_tx_failure() {
    let bed = Bed::new();
    let t = bed.trace(1000);
    let all = sendable(&t);
    let fwd = bed.forward(&["--backend", "xdp", &bed.input, &bed.output, "-c", &all.len().to_string()]);
    bed.replay(&bed.s_ns, &bed.s, &t);
    let v = finished(fwd, Duration::from_secs(20));
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert_eq!((n("received"), n("forwarded"), n("tx_failed"), n("in_flight")), (all.len() as u64, 0, all.len() as u64, 0), "{v}");
    assert_eq!((n("forwarded_bytes"), v["balanced"].as_bool()), (0, Some(true)), "{v}");
}

/// OUT's MTU (500) below IN's (1500): every backend counts the frames OUT
/// cannot carry (longer than its MTU plus 14 bytes, 18 tagged) as tx_failed,
/// and forwards exactly the rest, which the receiver gets. On xdp the check is
/// the program's (a veth takes 4 bytes more on untagged frames too), with no
/// filter and after a filter's accept, which is its own code path.
#[test]
#[ignore = "needs root and the corpus: weir forward on a three-namespace veth test bed, weir replay and weir record"]
fn frames_longer_than_outs_mtu_are_tx_failed_on_every_backend() {
    let bed = Bed::new();
    ip(&["-n", &bed.f_ns, "link", "set", &bed.output, "mtu", "500"]);
    ip(&["-n", &bed.r_ns, "link", "set", &bed.r, "mtu", "500"]);
    let t = bed.trace(2000);
    let all = sendable(&t);
    let tagged = |f: &[u8]| matches!(u16::from_be_bytes([f[12], f[13]]), 0x8100 | 0x88a8);
    let fits = |f: &Vec<u8>| f.len() <= 514 + if tagged(f) { 4 } else { 0 };
    let count = all.len().to_string();
    for (backend, filter) in [("afpacket", None), ("afxdp", None), ("xdp", None), ("xdp", Some("tcp"))] {
        let what = format!("{backend} -f {filter:?}");
        let passed = passing(&all, filter);
        let fit: Vec<Vec<u8>> = passed.iter().filter(|f| fits(f)).cloned().collect();
        assert!(
            fit.len() > 100 && passed.len() - fit.len() > 50,
            "{what}: {} of {} frames fit: the trace must have both",
            fit.len(),
            passed.len()
        );
        // What only weir's own check refuses on xdp: untagged frames a veth takes although OUT's MTU does not.
        let veth_would_take = passed.iter().filter(|f| !tagged(f) && (515..=518).contains(&f.len())).count();
        assert!(veth_would_take > 0, "{what}: the trace must have untagged frames of 515 to 518 bytes");
        let out = bed.path(&format!("{backend}-{}-mtu.pcap", filter.is_some()));
        let cap = bed.capture(&bed.r_ns, &bed.r, &out, backend);
        let mut args = vec!["--backend", backend, &bed.input, &bed.output, "-c", &count];
        if let Some(f) = filter {
            args.extend(["-f", f]);
        }
        let fwd = bed.forward(&args);
        bed.replay(&bed.s_ns, &bed.s, &t);
        let v = finished(fwd, Duration::from_secs(20));
        let got = stop_capture(cap, &out, fit.len());
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{what}: no {k} in {v}"));
        assert_eq!(
            (n("received"), n("filtered"), n("forwarded"), n("tx_failed"), n("in_flight")),
            (all.len() as u64, (all.len() - passed.len()) as u64, fit.len() as u64, (passed.len() - fit.len()) as u64, 0),
            "{what} ({veth_would_take} untagged frames of 515 to 518 bytes): {v}"
        );
        assert_eq!(v["balanced"], true, "{what}: {v}");
        assert_eq!(got.len(), fit.len(), "{what}: captured {} behind the forwarder, {} fit", got.len(), fit.len());
        assert!(got == fit, "{what}: the frames behind the forwarder differ from those that fit");
    }
}

/// The Rust API: a judge that drops every UDP packet; the counts and the
/// frames behind the forwarder say exactly that, on both backends.
#[test]
#[ignore = "needs root and the corpus: weir::forward on a three-namespace veth test bed, weir replay and weir record"]
fn a_judge_drops_by_verdict_through_the_rust_api() {
    let bed = Bed::new();
    let t = bed.trace(2000);
    let all = sendable(&t);
    let udp = |f: &[u8]| f.len() > 23 && f[12..14] == [8, 0] && f[23] == 17;
    let want: Vec<Vec<u8>> = all.iter().filter(|f| !udp(f)).cloned().collect();
    assert!(!want.is_empty() && want.len() < all.len());
    for backend in [Backend::AfXdp, Backend::AfPacket] {
        let out = bed.path(&format!("{backend}-api.pcap"));
        let cap = bed.capture(&bed.r_ns, &bed.r, &out, &backend.to_string());
        let opts = ForwardOptions {
            input: bed.input.clone(),
            output: bed.output.clone(),
            backend,
            netns: Some(bed.f_ns.clone().into()),
            packet_limit: Some(all.len() as u64),
            time_limit: Some(Duration::from_secs(20)),
            ..ForwardOptions::default()
        };
        let fwd = Forwarder::open(opts).unwrap();
        let running = fwd
            .start(|dir, _| {
                assert_eq!(dir, Direction::InToOut);
                move |p: &weir::Packet<'_>| if udp(p.data()) { Verdict::Drop } else { Verdict::Pass }
            })
            .unwrap();
        bed.replay(&bed.s_ns, &bed.s, &t);
        let report = running.join();
        assert!(report.error.is_none(), "{backend}: {:?}", report.error);
        let s = weir::forward::LaneStats::sum("total", &report.lanes);
        assert_eq!(s.received, all.len() as u64, "{backend}: {s:?}");
        assert_eq!(s.dropped, (all.len() - want.len()) as u64, "{backend}: the judge's drops: {s:?}");
        assert_eq!((s.forwarded, s.filtered, s.tx_failed, s.in_flight), (want.len() as u64, 0, 0, 0), "{backend}: {s:?}");
        assert!(s.balanced(), "{backend}: {s:?}");
        assert!(stop_capture(cap, &out, want.len()) == want, "{backend}: the frames the judge passed, unchanged and in order");
    }
    // In the kernel no judge can see packets: refused at start, before any is forwarded.
    let opts = ForwardOptions {
        input: bed.input.clone(),
        output: bed.output.clone(),
        backend: Backend::Xdp,
        netns: Some(bed.f_ns.clone().into()),
        ..ForwardOptions::default()
    };
    let refused =
        Forwarder::open(opts).unwrap().start(|_, _| |_: &weir::Packet<'_>| Verdict::Pass).err().expect("a judge on xdp is refused");
    assert!(refused.to_string().contains("no application verdict can run"), "{refused}");
}

/// What `weir forward` cannot do is refused with exit 2 and the cause named,
/// before anything is attached.
#[test]
#[ignore = "needs root: weir forward on a three-namespace veth test bed"]
fn forward_refuses_what_it_cannot_do() {
    let bed = Bed::new();
    let refused = |args: &[&str], expect: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("forward")
            .args(args)
            .args(["--netns", &bed.f_ns])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: expected {expect:?} in: {err}");
    };
    refused(&["weir-nope0", &bed.output], "no network interface \"weir-nope0\"");
    refused(&["--bidirectional", &bed.input, &bed.input], "--bidirectional forwards between two interfaces");
    refused(&["-f", "tcp port", &bed.input, &bed.output], "tcp port");
    ip(&["-n", &bed.f_ns, "link", "set", &bed.input, "mtu", "3000"]);
    refused(&[&bed.input, &bed.output], "does not fit a UMEM frame of 2048 bytes");
    ip(&["-n", &bed.f_ns, "link", "set", &bed.input, "mtu", "1500"]);
    // An interface the host uses: afxdp would take its traffic.
    ip(&["-n", &bed.f_ns, "addr", "add", "198.18.250.1/24", "dev", &bed.input]);
    refused(&[&bed.input, &bed.output], "has IP address 198.18.250.1");
    ip(&["-n", &bed.f_ns, "addr", "flush", "dev", &bed.input]);
    ip(&["-n", &bed.f_ns, "link", "set", &bed.output, "down"]);
    for backend in ["afxdp", "afpacket", "xdp"] {
        refused(&["--backend", backend, &bed.input, &bed.output], &format!("interface {} is down", bed.output));
    }
    ip(&["-n", &bed.f_ns, "link", "set", &bed.output, "up"]);
    // protochain walks headers with a backward jump, which the kernel's verifier cannot bound.
    refused(&["--backend", "xdp", "-f", "ip protochain 17", &bed.input, &bed.output], "the filter cannot run in the kernel");
    // In the kernel one filter serves both ways, so it cannot be bound to each input.
    refused(&["--backend", "xdp", "--bidirectional", "-f", "inbound", &bed.input, &bed.output], "runs one filter for both directions");
}
