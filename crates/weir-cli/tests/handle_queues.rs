//! `weir handle` and `weir queues` as a user runs them, on small traces made by
//! `weir synth`: every packet handled whatever `-x` is, a bad work filter refused
//! with exit 2 and libpcap's message, the per-bin CSV checked bin by bin against
//! the trace as libpcap reads it and against `weir count`'s per-queue counts, and
//! a real PNG written, with or without the font for its text.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use weir::filter::oracle::Oracle;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const PACKETS: u64 = 3_000;

/// A synthesized trace of PACKETS packets over about two seconds (10 Mbit/s), many flows
/// so that both queues of a two-way split get some.
fn trace(dir: &Path) -> PathBuf {
    let path = dir.join("t.pcap");
    let out = run(&["synth", "-o", path.to_str().unwrap(), "--packets", &PACKETS.to_string(), "--flows", "64", "--mbps", "10"]);
    assert!(out.status.success(), "weir synth: {}", text(&out.stderr));
    path
}

/// Run weir with `--json` and parse its one JSON object, insisting on exit 0.
fn json(args: &[&str]) -> serde_json::Value {
    let out = run(args);
    assert!(out.status.success(), "weir {args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("weir {args:?}: not JSON ({e}): {}", text(&out.stdout)))
}

fn per_queue_delivered(v: &serde_json::Value) -> Vec<u64> {
    v["queues"].as_array().unwrap().iter().map(|q| q["delivered"].as_u64().unwrap()).collect()
}

#[test]
fn handle_delivers_every_packet_to_the_work_on_two_queues() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let src = format!("{}@0-1", t.display());
    let v = json(&["handle", "-x", "3", "--json", &src]);
    assert_eq!(v["packets"], PACKETS);
    assert_eq!(v["times"], 3);
    assert_eq!(v["filter_expr"], "tcp or udp");
    let delivered = per_queue_delivered(&v);
    assert_eq!(delivered.len(), 2);
    assert!(delivered.iter().all(|&d| d > 0), "both queues get flows: {delivered:?}");
    assert_eq!(delivered.iter().sum::<u64>(), PACKETS);
    for q in v["queues"].as_array().unwrap() {
        assert_eq!(q["filtered"], 0, "the work filter never drops: {q}");
        assert_eq!(q["received"], q["delivered"]);
    }
    let workers = v["workers"].as_array().unwrap();
    assert_eq!(workers.iter().map(|w| w["packets"].as_u64().unwrap()).sum::<u64>(), PACKETS);
    // The work's verdicts are libpcap's: as many matches as `weir count` keeps with that filter.
    let kept = json(&["count", "--json", "-f", "tcp or udp", &src]);
    assert_eq!(v["matched"], kept["packets"]);
    let ns = v["ns_per_packet"].as_f64().expect("a CPU figure");
    assert!(ns > 0.0 && ns < 1e7, "{ns} ns/packet");

    // The table says what to feed the simulator.
    let out = run(&["handle", "-x", "3", "-f", "udp", &src]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(
        s.contains("weir sim run --engine B-256,128 --burst 100000 --cost-ns ")
            && s.contains("ns/packet")
            && s.contains(&format!("{PACKETS} packets")),
        "{s}"
    );
}

#[test]
fn handle_with_no_work_still_delivers_everything() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let v = json(&["handle", "-x", "0", "--json", &format!("{}@0-1", t.display())]);
    assert_eq!(v["packets"], PACKETS);
    assert_eq!(v["times"], 0);
    assert!(v["matched"].is_null(), "nothing was matched when the filter never ran: {}", v["matched"]);
}

/// `--filter-engine`: the JIT and the interpreter keep and match the same
/// packets, in `count` (the engine's filter) and `handle` (the work), and a
/// name that is neither is refused before anything runs.
#[test]
fn both_filter_engines_give_the_same_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let src = format!("{}@0-1", t.display());
    let expr = "udp and (port 53 or len > 300) or tcp[tcpflags] & tcp-syn != 0";
    let count = |engine: &str| json(&["count", "--json", "-f", expr, "--filter-engine", engine, &src]);
    let (jit, interp) = (count("jit"), count("interp"));
    assert_eq!(jit["packets"], interp["packets"]);
    let kept = jit["packets"].as_u64().unwrap();
    assert!(kept > 0 && kept < PACKETS, "the filter tells packets apart: {kept} of {PACKETS}");
    let handle = |engine: &str| json(&["handle", "-x", "2", "--json", "-f", expr, "--filter-engine", engine, &src]);
    let (jit, interp) = (handle("jit"), handle("interp"));
    assert_eq!(jit["filter_engine"], if cfg!(target_arch = "x86_64") { "jit" } else { "interp" });
    assert_eq!(interp["filter_engine"], "interp");
    assert_eq!(jit["matched"], interp["matched"]);
    assert_eq!(jit["matched"].as_u64(), Some(kept));
    let out = run(&["count", "-f", "udp", "--filter-engine", "bpf", &src]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("jit or interp"), "{}", text(&out.stderr));
}

/// Where the JIT cannot have executable memory, the filter runs on the
/// interpreter, the user is told why, and the verdicts are the JIT's. The
/// kernel's memory-deny-write-execute (prctl PR_SET_MDWE, Linux 6.3+, kept
/// across execve) refuses the JIT's mprotect to read+execute, as a hardened
/// system would.
#[test]
#[cfg(target_arch = "x86_64")]
fn without_executable_memory_the_filter_is_interpreted_and_the_user_told() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let src = format!("{}@0-1", t.display());
    let expr = "udp and (port 53 or len > 300) or tcp[tcpflags] & tcp-syn != 0";
    // prctl(PR_SET_MDWE = 65, PR_MDWE_REFUSE_EXEC_GAIN = 1), then become weir.
    const MDWE: &str = "import ctypes, os, sys\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        if libc.prctl(65, 1, 0, 0, 0) != 0:\n    sys.exit('PR_SET_MDWE refused: errno %d' % ctypes.get_errno())\n\
        os.execv(sys.argv[1], sys.argv[1:])\n";
    let out = Command::new("python3")
        .args(["-c", MDWE, env!("CARGO_BIN_EXE_weir"), "handle", "-x", "2", "--json", "-f", expr, "--filter-engine", "jit", &src])
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("the filter runs on the interpreter") && err.contains("executable"), "the user is told why: {err}");
    let denied: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(denied["filter_engine"], "interp");
    let jit = json(&["handle", "-x", "2", "--json", "-f", expr, "--filter-engine", "jit", &src]);
    assert_eq!(jit["filter_engine"], "jit");
    assert_eq!(denied["matched"], jit["matched"]);
    assert!(jit["matched"].as_u64().unwrap() > 0);
}

#[test]
fn handle_refuses_a_bad_filter_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let out = run(&["handle", "-x", "2", "-f", "tcp port eighty", t.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("filter") && err.contains("eighty"), "says which filter and why: {err}");
    assert!(out.stdout.is_empty(), "nothing was run: {}", text(&out.stdout));
}

/// The CSV as (t_ms column, one column per queue), with the header checked.
fn read_csv(path: &Path, queues: usize) -> (Vec<u64>, Vec<Vec<u64>>) {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = s.lines();
    let header: Vec<String> = std::iter::once("t_ms".to_string()).chain((0..queues).map(|q| format!("q{q}"))).collect();
    assert_eq!(lines.next(), Some(header.join(",").as_str()));
    let mut t = Vec::new();
    let mut cols = vec![Vec::new(); queues];
    for line in lines {
        let f: Vec<u64> = line.split(',').map(|x| x.parse().unwrap_or_else(|_| panic!("not a number in {line:?}"))).collect();
        assert_eq!(f.len(), queues + 1, "{line:?}");
        t.push(f[0]);
        for (c, &n) in cols.iter_mut().zip(&f[1..]) {
            c.push(n);
        }
    }
    (t, cols)
}

/// Packets per `ms`-wide bin from the first timestamp, as the CSV should have them.
fn histogram(ts: &[u64], ms: u64) -> Vec<u64> {
    let mut bins = Vec::new();
    for &x in ts {
        assert!(x >= ts[0], "synth writes in time order");
        let i = ((x - ts[0]) / (ms * 1_000_000)) as usize;
        if bins.len() <= i {
            bins.resize(i + 1, 0u64);
        }
        bins[i] += 1;
    }
    bins
}

fn assert_png(path: &Path) {
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(png.len() > 1000, "a 1280x720 plot is more than {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
}

#[test]
fn queues_bins_match_the_trace_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());

    // One queue: the bins must be the trace's own histogram, bin by bin.
    let prefix = dir.path().join("one");
    let out = run(&["queues", "-q", t.to_str().unwrap(), "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lib = Oracle::system().expect("system libpcap");
    let mut h = lib.open_offline(&t).unwrap();
    let mut ts = Vec::new();
    while let Some(p) = h.next_packet().unwrap() {
        ts.push(p.ts_ns);
    }
    assert_eq!(ts.len() as u64, PACKETS);
    let expect = histogram(&ts, 10);
    assert!(expect.len() > 20, "the trace spans many bins: {}", expect.len());
    let (times, cols) = read_csv(&with_ext(&prefix, "csv"), 1);
    assert_eq!(cols[0], expect, "per-bin counts of queue 0");
    assert_eq!(times, (0..expect.len() as u64).map(|i| i * 10).collect::<Vec<_>>(), "consecutive 10 ms bins from 0");
    assert_png(&with_ext(&prefix, "png"));

    // Two queues: each column sums to what `weir count` delivers on that queue.
    let src = format!("{}@0-1", t.display());
    let prefix = dir.path().join("two");
    let out = run(&["queues", "-q", &src, "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("two.csv"), "says where it wrote: {}", text(&out.stdout));
    let counted = per_queue_delivered(&json(&["count", "--json", &src]));
    let (times, cols) = read_csv(&with_ext(&prefix, "csv"), 2);
    let sums: Vec<u64> = cols.iter().map(|c| c.iter().sum()).collect();
    assert_eq!(sums, counted);
    assert!(sums.iter().all(|&s| s > 0), "{sums:?}");
    assert!(times.windows(2).all(|w| w[1] == w[0] + 10) && times[0] == 0, "consecutive 10 ms bins: {times:?}");
    // Both queues together are the whole trace's histogram: the bins start at the trace's
    // first record, whichever worker starts first.
    let together: Vec<u64> = (0..times.len()).map(|i| cols[0][i] + cols[1][i]).collect();
    assert_eq!(together, expect);
    assert_png(&with_ext(&prefix, "png"));

    // Narrow bins: many are empty, and each still has its row.
    let prefix = dir.path().join("narrow");
    let out = run(&["queues", "-q", "--bin-ms", "1", t.to_str().unwrap(), "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let narrow = histogram(&ts, 1);
    assert!(narrow.contains(&0), "some 1 ms bins of the trace are empty");
    let (times, cols) = read_csv(&with_ext(&prefix, "csv"), 1);
    assert_eq!(cols[0], narrow);
    assert_eq!(times, (0..narrow.len() as u64).collect::<Vec<_>>());

    // Wider bins: fewer rows, same totals.
    let prefix = dir.path().join("wide");
    let out = run(&["queues", "-q", "--bin-ms", "100", t.to_str().unwrap(), "-o", prefix.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (times, cols) = read_csv(&with_ext(&prefix, "csv"), 1);
    assert_eq!(cols[0].iter().sum::<u64>(), PACKETS);
    assert!(times.windows(2).all(|w| w[1] == w[0] + 100));
    assert_eq!(times.len(), (expect.len() - 1) / 10 + 1);
}

#[test]
fn queues_without_the_font_still_plots_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let prefix = dir.path().join("nofont");
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["queues", "-q", t.to_str().unwrap(), "-o", prefix.to_str().unwrap()])
        .env("WEIR_FONT", "/nonexistent/font.ttf")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("/nonexistent/font.ttf") && err.contains("fonts-dejavu-core"), "{err}");
    assert_png(&with_ext(&prefix, "png"));
    let (_, cols) = read_csv(&with_ext(&prefix, "csv"), 1);
    assert_eq!(cols[0].iter().sum::<u64>(), PACKETS);
}

#[test]
fn queues_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let prefix = dir.path().join("q");
    let out = run(&["queues", "--bin-ms", "0", t.to_str().unwrap(), "-o", prefix.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--bin-ms"), "{}", text(&out.stderr));
    let out = run(&["queues", "/nonexistent/trace.pcap", "-o", prefix.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/trace.pcap"));
}

/// Help text with its line wrapping undone, so phrases can be looked for.
fn help(cmd: &str) -> String {
    let out = run(&[cmd, "--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn help_teaches() {
    let s = help("handle");
    for want in ["-x", "pkt_handler", "Examples", "weir sim run", "--cost-ns", "tcp or udp"] {
        assert!(s.contains(want), "handle --help lacks {want:?}: {s}");
    }
    let s = help("queues");
    for want in ["PREFIX.csv", "PREFIX.png", "--bin-ms", "Examples", "fonts-dejavu-core"] {
        assert!(s.contains(want), "queues --help lacks {want:?}: {s}");
    }
}

fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    PathBuf::from(format!("{}.{ext}", prefix.display()))
}
