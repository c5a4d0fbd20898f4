//! `weir count` and `weir record` as a user runs them: real trace files in, real
//! files out, read back by libpcap, capinfos and tshark; exit codes and messages
//! for bad input; a clean stop on Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use weir::filter::oracle::Oracle;
use weir::sink::{FileFormat, TraceWriter, TsPrecision};
use weir::LinkType;

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

fn run(args: &[&str]) -> Output {
    weir().args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `n` UDP and TCP packets between a few hosts, sizes varying; returns (path, total wire bytes).
fn trace(dir: &Path, name: &str, n: u32) -> (PathBuf, u64) {
    let path = dir.join(name);
    let mut w =
        TraceWriter::new(std::fs::File::create(&path).unwrap(), FileFormat::Pcap, LinkType::ETHERNET, 65535, TsPrecision::Micro).unwrap();
    let mut bytes = 0;
    for i in 0..n {
        let udp = i % 3 == 0;
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0];
        let len = 60 + (i as usize * 37) % 1400;
        let ip_len = (len - 14) as u16;
        f.extend_from_slice(&[0x45, 0, (ip_len >> 8) as u8, ip_len as u8, 0, 0, 0, 0, 64, if udp { 17 } else { 6 }, 0, 0]);
        f.extend_from_slice(&[198, 18, 0, (i % 7) as u8, 198, 19, 0, (i % 5) as u8]);
        f.extend_from_slice(&(1000 + (i % 11) as u16).to_be_bytes());
        f.extend_from_slice(&(if udp { 53u16 } else { 443 }).to_be_bytes());
        f.resize(len, i as u8);
        w.write_packet(1_600_000_000_000_000_000 + u64::from(i) * 1_000_000, &f, len as u32).unwrap();
        bytes += len as u64;
    }
    w.finish().unwrap();
    (path, bytes)
}

/// Packets as libpcap reads them: (ts_ns, wire_len, data).
fn libpcap_read(path: &Path) -> Vec<(u64, u32, Vec<u8>)> {
    let lib = Oracle::system().unwrap();
    let mut h = lib.open_offline(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = h.next_packet().unwrap() {
        out.push((p.ts_ns, p.wire_len, p.data));
    }
    out
}

#[test]
fn count_json_has_the_promised_fields() {
    let dir = tempfile::tempdir().unwrap();
    let (t, bytes) = trace(dir.path(), "t.pcap", 5_000);
    let out = run(&["count", "--json", &format!("{}@0-1", t.display())]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets"], 5_000);
    assert_eq!(v["bytes"], bytes);
    assert!(v["elapsed_s"].as_f64().unwrap() > 0.0);
    let queues = v["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 2);
    let mut sum = 0;
    for (i, q) in queues.iter().enumerate() {
        assert_eq!(q["queue"], i);
        for k in ["received", "delivered", "filtered", "capture_drops", "delivery_drops"] {
            assert!(q[k].is_u64(), "queue field {k} missing: {q}");
        }
        // The one shape of a queue's counters, as WEIR_STATS_FILE writes them.
        let mut keys: Vec<&str> = q.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec!["queue"];
        want.extend(weir::stats::QueueStats::default().fields().map(|(k, _)| k));
        keys.sort_unstable();
        want.sort_unstable();
        assert_eq!(keys, want, "{q}");
        assert_eq!(q["received"], q["delivered"]);
        sum += q["delivered"].as_u64().unwrap();
    }
    assert_eq!(sum, 5_000);

    let out = run(&["count", "--json", "-f", "udp", t.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets"], 1_667);
    assert_eq!(v["queues"][0]["filtered"], 3_333);
}

#[test]
fn count_table_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 1_000);
    let out = run(&["count", &format!("{}@0-2", t.display())]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(s.contains("capture_drops") && s.contains("total") && s.contains("1000 packets"), "{s}");
}

#[test]
fn bad_input_exits_2_with_a_message_that_says_what() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 100);
    let ts = t.to_str().unwrap();

    let out = run(&["count", "-f", "tcp port eighty", ts]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("eighty"), "libpcap's message: {}", text(&out.stderr));

    let out = run(&["count", "/nonexistent/trace.pcap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/trace.pcap"));

    let out = run(&["count", "--pool", "0,4", ts]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cells per chunk"));

    let out = run(&["count", "--pps", "-5", ts]);
    assert_eq!(out.status.code(), Some(2));

    let not_a_trace = dir.path().join("notes.txt");
    std::fs::write(&not_a_trace, b"hello, this is not a capture file at all").unwrap();
    let out = run(&["count", not_a_trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("notes.txt"), "{}", text(&out.stderr));

    // Truncated: the packets before the damage are still counted.
    let full = std::fs::read(&t).unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &full[..full.len() - 10]).unwrap();
    let out = run(&["count", "--json", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets"], 99);
    let err = text(&out.stderr);
    assert!(err.contains("cut.pcap") && err.contains("byte offset"), "{err}");
}

#[test]
fn ctrl_c_stops_cleanly_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 50_000);
    let child = weir()
        .args(["count", "--json", "--pps", "10000", &format!("{}@0-1", t.display())])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stop"], "stopped on request");
    let n = v["packets"].as_u64().unwrap();
    assert!(n > 0 && n < 50_000, "{n}");
    for q in v["queues"].as_array().unwrap() {
        assert_eq!(q["in_flight"], 0);
    }
}

#[test]
fn record_writes_what_was_read_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let (t, bytes) = trace(dir.path(), "in.pcap", 3_000);
    let want = libpcap_read(&t);
    for out_name in ["out.pcap", "out.pcapng"] {
        let out = dir.path().join(out_name);
        let r = run(&["record", "-q", t.to_str().unwrap(), "-w", out.to_str().unwrap()]);
        assert!(r.status.success(), "{}", text(&r.stderr));
        assert_eq!(libpcap_read(&out), want, "{out_name}: packets differ from the input");
        check_with_wireshark_tools(&out, 3_000, bytes);
    }
}

/// capinfos and tshark must agree on the packet count and data bytes. Both come
/// with scripts/setup (Debian's tshark); without them this fails, never skips.
fn check_with_wireshark_tools(path: &Path, packets: u64, bytes: u64) {
    let ci = Command::new("capinfos")
        .args(["-M", "-c", "-d", "-T", "-r"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("capinfos (Debian's tshark, which scripts/setup installs) could not run: {e}"));
    let s = text(&ci.stdout);
    let fields: Vec<&str> = s.trim().split('\t').collect();
    assert_eq!(fields.len(), 3, "capinfos said {s:?} {}", text(&ci.stderr));
    assert_eq!(fields[1].parse::<u64>().unwrap(), packets, "capinfos packet count");
    assert_eq!(fields[2].parse::<u64>().unwrap(), bytes, "capinfos data bytes");
    let ts = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-T", "fields", "-e", "frame.len"])
        .output()
        .unwrap_or_else(|e| panic!("tshark (which scripts/setup installs) could not run: {e}"));
    assert!(ts.status.success(), "{}", text(&ts.stderr));
    let lens: Vec<u64> = text(&ts.stdout).lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(lens.len() as u64, packets, "tshark packet count");
    assert_eq!(lens.iter().sum::<u64>(), bytes, "tshark bytes");
}

#[test]
fn record_from_several_queues_with_a_filter_keeps_the_matching_multiset() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "in.pcap", 4_000);
    let out = dir.path().join("udp.pcap");
    let r = run(&["record", "-q", "-f", "udp", &format!("{}@0-2", t.display()), "-w", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let mut want: Vec<_> = libpcap_read(&t).into_iter().filter(|p| p.2[23] == 17).collect();
    let mut got = libpcap_read(&out);
    want.sort();
    got.sort();
    assert_eq!(got.len(), 1_334);
    assert_eq!(got, want);
}

#[test]
fn record_rotates_and_keeps_the_newest_files() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "in.pcap", 1_000);
    let pattern = dir.path().join("part.pcap");
    let r = run(&["record", "-q", t.to_str().unwrap(), "-w", pattern.to_str().unwrap(), "--file-packets", "300", "-W", "2"]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("part"))
        .collect();
    names.sort();
    assert_eq!(names, ["part.2.pcap", "part.3.pcap"]);
    assert_eq!(libpcap_read(&dir.path().join("part.2.pcap")).len(), 300);
    assert_eq!(libpcap_read(&dir.path().join("part.3.pcap")).len(), 100);

    let r = run(&["record", "-q", t.to_str().unwrap(), "-w", dir.path().join("x-%Q.pcap").to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2), "bad strftime pattern");
}

#[test]
fn help_teaches() {
    for cmd in [&["--help"][..], &["count", "--help"], &["record", "--help"]] {
        let out = run(cmd);
        assert!(out.status.success());
        let s = text(&out.stdout);
        assert!(s.contains("Examples") || s.contains("SOURCE"), "{cmd:?}: {s}");
    }
}

/// Every balance mode counts every packet once, by the queue that captured it,
/// also when chunks are offloaded to the other queue's worker.
#[test]
fn count_under_every_balance_mode_delivers_every_packet() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "b.pcap", 20_000);
    let src = format!("{}@0-1", t.display());
    for mode in ["basic", "offload:10", "rebalance", "rebalance:50"] {
        let out = run(&["count", "--json", "--pool", "8,4", "--balance", mode, &src]);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["packets"], 20_000, "{mode}: {v}");
        assert_eq!(v["received"], 20_000, "{mode}: {v}");
    }
    let out = run(&["count", "--balance", "offload:100", &src]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--balance"), "{}", text(&out.stderr));
    let out = run(&["count", "--balance", "rebalance", &format!("{}@1", t.display())]);
    assert_eq!(out.status.code(), Some(2), "rebalancing one queue of two: {}", text(&out.stderr));
    assert!(text(&out.stderr).contains("needs all of them opened (@0-1)"), "{}", text(&out.stderr));
}

/// A reader that closes its end (`weir count t.pcap | head -1`) ends weir as
/// SIGPIPE ends other tools (141), not with a panic.
#[test]
fn a_closed_standard_output_ends_weir_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 500);
    for args in [&["count", "--json"][..], &["count"], &["inspect", "--group-rules", "4"]] {
        let mut child = weir().args(args).arg(&t).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "weir {args:?}: {err}");
        assert!(!err.contains("panicked"), "weir {args:?}: {err}");
    }
}

/// Each error says its cause once, with the exit code of whose fault it is:
/// 2 for what the user named, 1 for the system (a full disk).
#[test]
fn every_error_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 20);
    let t = t.to_str().unwrap();
    let missing = dir.path().join("missing.pcap");
    let m = missing.to_str().unwrap();
    let d = dir.path().to_str().unwrap();
    let (fm, under) = (format!("file:{m}"), format!("{m}/x/y.pcap"));
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["count", m], 2, "no such file or network interface"),
        (vec!["count", &fm], 2, "No such file or directory"),
        (vec!["count", "file:"], 2, "names no file"),
        (vec!["count", d], 2, "is a directory"),
        (vec!["count", "-f", "tcp port", t], 2, "syntax error"),
        (vec!["record", t, "-w", "/dev/full"], 1, "No space left on device"),
        (vec!["record", t, "-w", "/proc/weir-test.pcap"], 2, "/proc/weir-test.pcap"),
        (vec!["record", t, "-w", &under], 2, "No such file or directory"),
    ];
    for (args, code, cause) in cases {
        let out = run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "weir {args:?}: {err}");
        assert_eq!(err.matches(cause).count(), 1, "weir {args:?} should say {cause:?} once: {err}");
        assert!(err.matches("(os error").count() <= 1, "weir {args:?} repeats its OS error: {err}");
    }
}

/// The library names the setting an error is about; weir says it with its flag,
/// once, and exits 2 (the libpcap library says the same with its variables).
#[test]
fn a_refused_setting_is_named_by_its_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (t, _) = trace(dir.path(), "t.pcap", 20);
    let t = t.to_str().unwrap();
    let second = format!("{t}@1");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["count", "--cpus", "4096", t], "weir: --cpus: CPU 4096 is not available to this process"),
        (vec!["count", "--cpus", "2-1", t], "weir: --cpus: \"2-1\": expected `auto` or a list"),
        (
            vec!["count", "--locality", "481", "--pool", "32,16", t],
            "weir: --locality: a batch of 481 packets needs more than the pool's 16 chunks",
        ),
        (vec!["count", "--balance", "offload:100", t], "weir: --balance: offload threshold 100%: must be from 1 to 99"),
        (vec!["count", "--fanout", "rr", t], "weir: --fanout: \"rr\": expected hash, cpu, qm, lb or buckets"),
        (vec!["count", "--balance", "rebalance", &second], "weir: --balance: rebalancing moves buckets between every queue"),
    ];
    for (args, said) in cases {
        let out = run(&args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "weir {args:?}: {err}");
        assert!(err.starts_with(said), "weir {args:?} should say {said:?}: {err}");
        assert_eq!(err.matches("--").count(), said.matches("--").count(), "weir {args:?} names one flag: {err}");
    }
}

/// `inbound` asks the kernel's packet metadata, which a trace has not: the
/// filter rejects every packet, as libpcap's offline filter does, and the
/// user is told why at the start instead of finding an empty count.
#[test]
fn a_filter_on_kernel_metadata_is_explained_where_it_cannot_match() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = trace(dir.path(), "t.pcap", 30);
    let p = path.to_str().unwrap();
    let out = run(&["count", "--json", "-f", "inbound", p]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!((v["filtered"].as_u64(), v["packets"].as_u64()), (Some(30), Some(0)), "{v}");
    let err = text(&out.stderr);
    assert!(err.contains("asks the kernel's packet metadata") && err.contains("pcap_offline_filter"), "{err}");
    let out = run(&["count", "--json", "-f", "udp", p]);
    assert!(!text(&out.stderr).contains("packet metadata"), "a filter on the packet's bytes says nothing: {}", text(&out.stderr));
}
