//! The kernel cutoff on the veth test bed: the same replay of a synthesized
//! trace (`weir synth`: complete TCP handshakes and teardowns, UDP, clients
//! in 198.18.0.0/16 and servers in 198.19.0.0/16) captured with
//! `--kernel-cutoff on` and `off` must give the same records, while far
//! fewer packets reach weir's pool with it on: the kernel dropped the rest
//! and counted them in its flow map.
//!
//! - `weir flows`, on afpacket (socket filter) and afxdp (XDP program):
//!   exported over IPFIX to an nfcapd, read back with nfdump; every flow's
//!   5-tuple, packets, bytes and TCP flags equal.
//! - `weir streams --cutoff 2000` on both: every stream's JSON record
//!   equal (packets, bytes delivered, discarded past the cutoff, gaps,
//!   duplicates, close reason), but for its times and queue.
//!
//! - `weir inspect --streams --cutoff 2000` on both: the same alerts.
//! - With `--filter`, the kernel cutoff stays off on both (nothing
//!   installed) and the records are those of `--kernel-cutoff off`.
//! - `weir sensor` with `[flows]` alone and `kernel-cutoff` in
//!   `[capture]`, on afpacket and afxdp: the same flows, on and off.
//!
//! Each run also holds the totals to each other: the packets that reached
//! weir plus those the kernel dropped are the packets of the run without the
//! cutoff. The shares are printed (`--nocapture`). Root only: ignored by a
//! plain `cargo test`, run by `make test`'s privileged step; tcpreplay,
//! nfcapd and nfdump come from scripts/setup.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use testbed::TestBed;

#[path = "support/collector.rs"]
mod collector;
use collector::{text, Collector};

/// One test bed at a time: two replays at once on two cores would lose
/// packets, and the runs compare packet for packet.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Packets of the synthesized trace, and the replay rate: low enough for a
/// debug build on a shared machine to capture without loss, either way.
const PACKETS: &str = "20000";
const PPS: &str = "10000";

/// The trace, written into `dir`.
fn trace(dir: &Path) -> String {
    let path = dir.join("t.pcap").to_str().unwrap().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["synth", "-o", &path, "-n", PACKETS, "-c", "100", "--mbps", "50", "-s", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "weir synth: {}", text(&o.stderr));
    path
}

/// The flows an nfcapd stored: 5-tuple → (packets, bytes, flags), each
/// 5-tuple's records in order.
fn flows_of(c: Collector) -> BTreeMap<String, Vec<String>> {
    let mut flows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (lines, _) = c.finish_as("fmt:%pr|%sa|%sp|%da|%dp|%pkt|%byt|%flg");
    for line in lines {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        flows.entry(f[..5].join(" ")).or_default().push(f[5..].join(" "));
    }
    flows
}

/// Runs `weir ARGS` (a capture of the receiving end, opened in its
/// namespace with --netns so the export goes to the root namespace's
/// loopback), replays the trace while it listens, stops it with SIGINT,
/// and returns its stdout and the `--stats` JSON (or, without `stats`,
/// stdout as JSON lines, the last of them: `weir inspect --json`'s summary).
fn capture(tb: &TestBed, trace: &str, args: &[&str], stats: Option<&Path>) -> (String, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--netns", &tb.rx_ns, "--take-host-traffic"])
        .args(stats.iter().flat_map(|s| ["--stats", s.to_str().unwrap()]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out, &mut s).unwrap();
        s
    });
    let stderr = replay_into(tb, trace, child, &format!("weir {args:?}"));
    let stdout = reader.join().unwrap();
    println!("weir {}: {stderr}", args.join(" "));
    let json = match stats {
        Some(path) => std::fs::read_to_string(path).unwrap(),
        None => stdout.lines().last().unwrap_or_default().to_string(),
    };
    (stdout, serde_json::from_str(&json).unwrap())
}

/// Replays the trace into `child` (a capture of the receiving end, its
/// stderr piped) once it listens, stops it with SIGINT once the replay is
/// through, and returns what it said on stderr; it must exit 0.
fn replay_into(tb: &TestBed, trace: &str, mut child: std::process::Child, what: &str) -> String {
    let lines = testbed::wait_listening(&mut child, what);
    let err = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let replay = tb.in_tx("tcpreplay").args(["-q", "-i", &tb.tx_if, "--pps", PPS, trace]).output().expect("tcpreplay runs");
    assert!(replay.status.success(), "tcpreplay: {}", text(&replay.stderr));
    std::thread::sleep(Duration::from_millis(1000));
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    let stderr = err.join().unwrap();
    assert!(status.success(), "{what} failed: {stderr}");
    stderr
}

/// Every flow of the run without the kernel cutoff has the same records in
/// the run with it, and there are no others.
fn assert_same_flows(off: &BTreeMap<String, Vec<String>>, on: &BTreeMap<String, Vec<String>>) {
    assert!(off.len() > 400, "the replay makes hundreds of flows: {}", off.len());
    let differ: Vec<_> =
        off.iter().filter(|(k, v)| on.get(*k) != Some(v)).map(|(k, v)| format!("{k}: off {v:?}, on {:?}", on.get(k))).collect();
    assert!(differ.is_empty() && on.len() == off.len(), "{} flows differ: {differ:#?}", differ.len());
}

/// The totals of a run with the kernel cutoff and one without agree: every
/// packet reached weir or was counted by the kernel. Returns the share of
/// the packets that reached weir with the cutoff.
fn totals_agree(what: &str, on: &Value, off: &Value) -> f64 {
    let k = &on["kernel_cutoff"];
    let (seen_on, seen_off, dropped) = (on["packets"].as_u64().unwrap(), off["packets"].as_u64().unwrap(), k["packets"].as_u64().unwrap());
    assert_eq!(seen_on + dropped, seen_off, "{what}: packets seen with the cutoff plus those the kernel dropped: {k}");
    assert_eq!(seen_off, PACKETS.parse::<u64>().unwrap(), "{what}: without the cutoff weir saw the whole replay");
    assert_eq!(off["kernel_cutoff"]["installed"].as_u64(), Some(0), "{what}: off installs nothing");
    assert!(k["installed"].as_u64().unwrap() > 0 && k["in_map"].as_u64() == Some(0) && k["lost"].as_u64() == Some(0), "{what}: {k}");
    for f in ["bytes", "discarded_bytes", "delivered_bytes", "gap_bytes", "duplicate_bytes", "streams", "connections"] {
        assert_eq!(on[f], off[f], "{what}: {f}");
    }
    let share = seen_on as f64 / seen_off as f64;
    println!("{what}: {seen_on} of {seen_off} packets reached weir's pool with the kernel cutoff ({:.1}%), {dropped} dropped and counted in the kernel", share * 100.0);
    share
}

/// Directions are installed at their first packet past the cutoff, so the
/// replay's short connections go through the kernel too and their records
/// are held to the ones without it (the default waits for 16 packets).
const AFTER: &str = "1";

fn flows(tb: &TestBed, trace: &str, source: &str, cutoff: &str, dir: &Path) -> (BTreeMap<String, Vec<String>>, Value) {
    let c = Collector::start();
    let collector = c.addr();
    let stats = dir.join(format!("flows-{cutoff}.json"));
    let (_, s) = capture(
        tb,
        trace,
        &["flows", source, "-q", "-n", &collector, "--kernel-cutoff", cutoff, "--kernel-install-after", AFTER],
        Some(&stats),
    );
    (flows_of(c), s)
}

fn streams(tb: &TestBed, trace: &str, source: &str, cutoff: &str, dir: &Path) -> (Vec<String>, Value) {
    let stats = dir.join(format!("streams-{cutoff}.json"));
    let (out, s) = capture(
        tb,
        trace,
        &["streams", source, "--json", "--cutoff", "2000", "--kernel-cutoff", cutoff, "--kernel-install-after", AFTER],
        Some(&stats),
    );
    let mut records: Vec<String> = out
        .lines()
        .map(|l| {
            let mut j: Value = serde_json::from_str(l).unwrap();
            for k in ["first_ns", "last_ns", "queue"] {
                j.as_object_mut().unwrap().remove(k);
            }
            j.to_string()
        })
        .collect();
    records.sort();
    (records, s)
}

fn check_flows(source_kind: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    testbed::require_tools(&["tcpreplay", "nfcapd", "nfdump"]);
    let tb = TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let source = format!("{source_kind}:{}", tb.rx_if);
    let (off, s_off) = flows(&tb, &trace, &source, "off", dir.path());
    let (on, s_on) = flows(&tb, &trace, &source, "on", dir.path());
    assert_same_flows(&off, &on);
    let share = totals_agree(&format!("weir flows {source_kind}"), &s_on, &s_off);
    assert!(share < 0.5, "most packets stay in the kernel: {:.1}% reached weir", share * 100.0);
}

fn check_streams(source_kind: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    testbed::require_tools(&["tcpreplay"]);
    let tb = TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let source = format!("{source_kind}:{}", tb.rx_if);
    let (off, s_off) = streams(&tb, &trace, &source, "off", dir.path());
    let (on, s_on) = streams(&tb, &trace, &source, "on", dir.path());
    assert!(off.len() > 400, "the replay makes hundreds of streams: {}", off.len());
    let differ: Vec<_> = off.iter().zip(&on).filter(|(a, b)| a != b).collect();
    assert!(differ.is_empty() && on.len() == off.len(), "{} stream records differ: {differ:#?}", differ.len());
    assert!(s_off["discarded_bytes"].as_u64().unwrap() > 0, "the cutoff discards bytes: {s_off}");
    let share = totals_agree(&format!("weir streams --cutoff 2000 {source_kind}"), &s_on, &s_off);
    assert!(share < 0.8, "packets past the cutoff stay in the kernel: {:.1}% reached weir", share * 100.0);
}

#[test]
#[ignore = "needs root: weir flows on afpacket with and without the kernel cutoff, on a veth test bed with tcpreplay"]
fn afpacket_flows_are_the_same_with_the_kernel_cutoff() {
    check_flows("afpacket");
}

#[test]
#[ignore = "needs root: weir flows on afxdp with and without the kernel cutoff, on a veth test bed with tcpreplay"]
fn afxdp_flows_are_the_same_with_the_kernel_cutoff() {
    check_flows("afxdp");
}

#[test]
#[ignore = "needs root: weir flows on xdp with and without the kernel cutoff, on a veth test bed with tcpreplay"]
fn xdp_flows_are_the_same_with_the_kernel_cutoff() {
    check_flows("xdp");
}

#[test]
#[ignore = "needs root: weir streams --cutoff on afpacket with and without the kernel cutoff, on a veth test bed"]
fn afpacket_streams_past_their_cutoff_are_the_same_with_the_kernel_cutoff() {
    check_streams("afpacket");
}

#[test]
#[ignore = "needs root: weir streams --cutoff on afxdp with and without the kernel cutoff, on a veth test bed"]
fn afxdp_streams_past_their_cutoff_are_the_same_with_the_kernel_cutoff() {
    check_streams("afxdp");
}

#[test]
#[ignore = "needs root: weir streams --cutoff on xdp with and without the kernel cutoff, on a veth test bed"]
fn xdp_streams_past_their_cutoff_are_the_same_with_the_kernel_cutoff() {
    check_streams("xdp");
}

/// With a libpcap filter the kernel cutoff is off (a filter may tell apart
/// packets of one stream, which the kernel's counts could not; an afpacket
/// socket holds one filter, which stays the user's): nothing is installed,
/// every packet the filter keeps reaches weir, and the records are those of
/// `--kernel-cutoff off`.
fn check_filter_turns_it_off(source_kind: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    testbed::require_tools(&["tcpreplay", "nfcapd", "nfdump"]);
    let tb = TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let source = format!("{source_kind}:{}", tb.rx_if);
    let run = |cutoff: &str| {
        let c = Collector::start();
        let collector = c.addr();
        let stats = dir.path().join(format!("filtered-{cutoff}.json"));
        let args = ["flows", &source, "-q", "-n", &collector, "-f", "tcp", "--kernel-cutoff", cutoff];
        let (_, s) = capture(&tb, &trace, &args, Some(&stats));
        (flows_of(c), s)
    };
    let (off, s_off) = run("off");
    let (on, s_on) = run("on");
    assert!(off.len() > 300 && off.keys().all(|k| k.starts_with("TCP")), "the filter keeps TCP only: {} flows", off.len());
    assert_eq!(on, off, "records with and without the kernel cutoff under a filter");
    let k = &s_on["kernel_cutoff"];
    assert_eq!((k["installed"].as_u64(), k["packets"].as_u64()), (Some(0), Some(0)), "{k}");
    assert_eq!(s_on["packets"], s_off["packets"], "every packet the filter keeps reaches weir");
}

#[test]
#[ignore = "needs root: weir flows --filter on afpacket with the kernel cutoff asked for, on a veth test bed"]
fn afpacket_with_a_filter_keeps_the_user_space_cutoff() {
    check_filter_turns_it_off("afpacket");
}

#[test]
#[ignore = "needs root: weir flows --filter on afxdp with the kernel cutoff asked for, on a veth test bed"]
fn afxdp_with_a_filter_keeps_the_user_space_cutoff() {
    check_filter_turns_it_off("afxdp");
}

/// `weir inspect --streams --cutoff 2000`: the same alerts (but for their
/// times) and the same stream-layer byte counts with the kernel cutoff on
/// and off; the alerts are written to a file, the summary is `--json`.
fn check_inspect(source_kind: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    testbed::require_tools(&["tcpreplay"]);
    let tb = TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let source = format!("{source_kind}:{}", tb.rx_if);
    let run = |cutoff: &str| {
        let alerts = dir.path().join(format!("alerts-{cutoff}.json"));
        let args = [
            "inspect",
            &source,
            "--streams",
            "--cutoff",
            "2000",
            "--json",
            "-o",
            alerts.to_str().unwrap(),
            "--kernel-cutoff",
            cutoff,
            "--kernel-install-after",
            AFTER,
        ];
        let (_, summary) = capture(&tb, &trace, &args, None);
        let mut lines: Vec<String> = std::fs::read_to_string(&alerts)
            .unwrap()
            .lines()
            .map(|l| {
                let mut j: Value = serde_json::from_str(l).unwrap();
                j.as_object_mut().unwrap().remove("first_ns");
                j.to_string()
            })
            .collect();
        lines.sort();
        (lines, summary["stream_layer"].clone())
    };
    let (off, s_off) = run("off");
    let (on, s_on) = run("on");
    assert!(off.len() > 100, "the built-in rules find content in the replay: {} alerts", off.len());
    assert_eq!(on, off, "alerts with and without the kernel cutoff");
    totals_agree(&format!("weir inspect --streams --cutoff 2000 {source_kind}"), &s_on, &s_off);
}

#[test]
#[ignore = "needs root: weir inspect --streams --cutoff on afpacket with and without the kernel cutoff, on a veth test bed"]
fn afpacket_inspect_alerts_are_the_same_with_the_kernel_cutoff() {
    check_inspect("afpacket");
}

#[test]
#[ignore = "needs root: weir inspect --streams --cutoff on afxdp with and without the kernel cutoff, on a veth test bed"]
fn afxdp_inspect_alerts_are_the_same_with_the_kernel_cutoff() {
    check_inspect("afxdp");
}

/// A `weir sensor` with `[flows]` alone (exported to an nfcapd) on the test
/// bed, the kernel cutoff `on` or `off` in `[capture]`: the flows the
/// collector stored, and the packets that reached the flows layer and that
/// the kernel dropped, from the sensor's log.
fn sensor_flows(tb: &TestBed, trace: &str, source: &str, cutoff: &str, dir: &Path) -> (BTreeMap<String, Vec<String>>, u64, u64) {
    let c = Collector::start();
    let config = dir.join(format!("sensor-{cutoff}.toml"));
    std::fs::write(
        &config,
        format!(
            "[sensor]\nname = \"k\"\nstatus-interval = 0\n\n[capture]\nsource = \"{source}\"\nnetns = \"{}\"\ntake-host-traffic = true\n\
             kernel-cutoff = \"{cutoff}\"\nkernel-install-after = {AFTER}\n\n[flows]\ncollector = [\"{}\"]\n",
            tb.rx_ns,
            c.addr()
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["sensor", config.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = replay_into(tb, trace, child, "weir sensor");
    println!("weir sensor, kernel cutoff {cutoff}: {err}");
    let number_before = |what: &str| -> u64 {
        let Some(at) = err.find(what) else { return 0 };
        err[..at].rsplit(|c: char| !c.is_ascii_digit()).find(|w| !w.is_empty()).unwrap().parse().unwrap()
    };
    let flows_packets = number_before(" packets (0 filtered out)");
    let kernel = err.split("kernel cutoff: ").nth(1).map_or(0, |l| l.split(' ').next().unwrap().parse().unwrap());
    (flows_of(c), flows_packets, kernel)
}

fn check_sensor_flows(source_kind: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    testbed::require_tools(&["tcpreplay", "nfcapd", "nfdump"]);
    let tb = TestBed::new(1);
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path());
    let source = format!("{source_kind}:{}", tb.rx_if);
    let (off, seen_off, kernel_off) = sensor_flows(&tb, &trace, &source, "off", dir.path());
    let (on, seen_on, kernel_on) = sensor_flows(&tb, &trace, &source, "on", dir.path());
    assert_same_flows(&off, &on);
    let packets: u64 = PACKETS.parse().unwrap();
    assert_eq!((seen_off, kernel_off), (packets, 0), "off: every packet reaches the flows layer");
    assert_eq!(seen_on + kernel_on, packets, "on: the packets that reached weir and those the kernel dropped");
    assert!(seen_on < packets / 2, "most packets stay in the kernel: {seen_on} of {packets} reached weir");
    println!("weir sensor [flows] {source_kind}: {seen_on} of {packets} packets reached weir with the kernel cutoff, {kernel_on} dropped and counted in the kernel");
}

#[test]
#[ignore = "needs root: weir sensor's [flows] on afpacket with and without the kernel cutoff, on a veth test bed with tcpreplay"]
fn afpacket_sensor_flows_are_the_same_with_the_kernel_cutoff() {
    check_sensor_flows("afpacket");
}

#[test]
#[ignore = "needs root: weir sensor's [flows] on afxdp with and without the kernel cutoff, on a veth test bed with tcpreplay"]
fn afxdp_sensor_flows_are_the_same_with_the_kernel_cutoff() {
    check_sensor_flows("afxdp");
}
