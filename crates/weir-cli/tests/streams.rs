//! `weir streams` on a synthesized trace: the same stream files whatever the
//! queues and locality, cutoffs that discard exactly what they say, the
//! accounting in `--stats`, and clear refusals.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn synth(dir: &Path) -> PathBuf {
    let trace = dir.join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", "30000", "-c", "800", "--seed", "3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    trace
}

/// Runs `weir streams` with `extra`, writing files to a fresh directory;
/// returns the files (name → bytes) and the `--stats` totals.
fn streams(dir: &Path, name: &str, source: &str, extra: &[&str]) -> (BTreeMap<String, Vec<u8>>, Value) {
    let out = dir.join(name);
    let stats = dir.join(format!("{name}.json"));
    let mut args = vec!["streams", source, "-q", "-o", out.to_str().unwrap(), "--stats", stats.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = weir(&args);
    assert!(o.status.success(), "weir {args:?}: {}", text(&o.stderr));
    let files = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    (files, serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap())
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// Every packet in one category, every payload byte in one category.
fn adds_up(s: &Value) {
    let packets = ["not_ip", "malformed", "fragments", "untracked", "to_stream", "discarded_packets", "dropped_packets"];
    assert_eq!(n(s, "packets"), packets.iter().map(|k| n(s, k)).sum::<u64>(), "{s}");
    let bytes = ["delivered_bytes", "duplicate_bytes", "discarded_bytes", "dropped_bytes", "refused_bytes"];
    assert_eq!(n(s, "bytes"), bytes.iter().map(|k| n(s, k)).sum::<u64>(), "{s}");
}

#[test]
fn the_same_streams_whatever_the_queues_and_locality() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let t = trace.to_str().unwrap();
    let two = format!("{t}@0-1");
    let (one_q, s1) = streams(dir.path(), "one", t, &[]);
    assert!(one_q.len() > 500, "{} files", one_q.len());
    assert_eq!(n(&s1, "packets"), 30_000);
    assert!(n(&s1, "delivered_bytes") > 1_000_000, "{s1}");
    adds_up(&s1);
    for (name, source, extra) in [
        ("two", two.as_str(), &[][..]),
        ("two-locality", two.as_str(), &["--locality", "256"][..]),
        ("two-rebalance", two.as_str(), &["--balance", "rebalance"][..]),
        ("two-rebalance-locality", two.as_str(), &["--balance", "rebalance", "--locality", "256"][..]),
        ("pieces", t, &["--piece", "100", "--piece-overlap", "10"][..]),
        ("inline", t, &["--inline"][..]),
        ("two-inline", two.as_str(), &["--inline"][..]),
    ] {
        let (files, s) = streams(dir.path(), name, source, extra);
        adds_up(&s);
        assert_eq!(files.keys().collect::<Vec<_>>(), one_q.keys().collect::<Vec<_>>(), "{name}: other files");
        for (f, bytes) in &files {
            assert!(one_q[f] == *bytes, "{name}: {f} differs");
        }
        assert_eq!(n(&s, "delivered_bytes"), n(&s1, "delivered_bytes"), "{name}");
    }
}

#[test]
fn a_cutoff_keeps_the_first_bytes_of_each_stream_and_counts_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let t = trace.to_str().unwrap();
    let (all, s_all) = streams(dir.path(), "all", t, &[]);
    let (cut, s_cut) = streams(dir.path(), "cut", t, &["--cutoff", "1000"]);
    adds_up(&s_cut);
    for (f, bytes) in &cut {
        let whole = &all[f];
        assert_eq!(bytes[..], whole[..whole.len().min(1000)], "{f}");
    }
    let kept: u64 = cut.values().map(|b| b.len() as u64).sum();
    let whole: u64 = all.values().map(|b| b.len() as u64).sum();
    // Every byte the cutoff took from a file is counted as discarded (UDP
    // streams, which have no files, discard too).
    assert!(n(&s_cut, "discarded_bytes") >= whole - kept, "{s_cut}");
    assert_eq!(n(&s_cut, "delivered_bytes") + n(&s_cut, "discarded_bytes"), n(&s_all, "delivered_bytes"));
    // Statistics only: nothing delivered, everything discarded, no file.
    let (none, s0) = streams(dir.path(), "zero", t, &["--cutoff", "0"]);
    assert!(none.is_empty());
    assert_eq!(n(&s0, "delivered_bytes"), 0);
    assert_eq!(n(&s0, "discarded_bytes"), n(&s_all, "delivered_bytes"));
    assert_eq!(n(&s0, "streams"), n(&s_all, "streams"));
    // A class: port 443 keeps 10 bytes, the rest everything.
    let (class, _) = streams(dir.path(), "class", t, &["--cutoff-class", "tcp port 443=10"]);
    let https = class.keys().filter(|f| f.contains(".00443")).count();
    assert!(https > 10, "the synth mix has HTTPS");
    for (f, bytes) in &class {
        let want = if f.contains(".00443") { all[f].len().min(10) } else { all[f].len() };
        assert_eq!(bytes.len(), want, "{f}");
    }
}

#[test]
fn a_class_in_packets_mode_writes_no_bytes_and_classes_go_in_the_order_given() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let t = trace.to_str().unwrap();
    let (all, s_all) = streams(dir.path(), "all", t, &[]);
    // --class and its short form --cutoff-class are one list: the port 443
    // class given first wins over the `tcp` one for HTTPS streams.
    let (files, s) = streams(
        dir.path(),
        "classes",
        t,
        &["--cutoff", "0", "--class", "tcp port 443;mode=packets,priority=3", "--cutoff-class", "tcp=20", "--class", "udp ;cutoff=none"],
    );
    adds_up(&s);
    assert!(all.keys().filter(|f| f.contains(".00443")).count() > 10, "the synth mix has HTTPS");
    assert!(!files.keys().any(|f| f.contains(".00443")), "a packets-mode class writes no files");
    for (f, bytes) in &files {
        assert_eq!(bytes[..], all[f][..all[f].len().min(20)], "{f}");
    }
    assert_eq!(files.len(), all.keys().filter(|f| !f.contains(".00443")).count());
    assert_eq!(n(&s, "bytes"), n(&s_all, "bytes"));
    // Every HTTPS byte is counted as discarded, none delivered.
    let o = weir(&["streams", t, "--json", "--class", "tcp port 443;mode=packets,priority=3", "--class", "udp;priority=1,mode=tcp-strict"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let records: Vec<Value> = text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let https: Vec<&Value> = records.iter().filter(|r| r["proto"] == 6 && (r["sport"] == 443 || r["dport"] == 443)).collect();
    assert!(https.iter().any(|r| n(r, "bytes") > 0));
    for r in &https {
        assert_eq!((&r["mode"], n(r, "priority"), n(r, "delivered")), (&Value::from("packets"), 3, 0), "{r}");
        assert_eq!(n(r, "discarded"), n(r, "bytes") - n(r, "refused") - n(r, "duplicate"), "{r}");
    }
    for r in records.iter().filter(|r| r["proto"] == 17) {
        assert_eq!((&r["mode"], n(r, "priority")), (&Value::from("tcp-strict"), 1), "{r}");
    }
    for r in records.iter().filter(|r| r["proto"] == 6 && r["sport"] != 443 && r["dport"] != 443) {
        assert_eq!((&r["mode"], n(r, "priority")), (&Value::from("tcp-fast"), 0), "{r}");
    }
}

#[test]
fn json_records_describe_every_stream() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let o = weir(&["streams", trace.to_str().unwrap(), "--json", "--mode", "tcp-strict"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let records: Vec<Value> = text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(records.len() > 1000);
    for r in &records {
        let sum: u64 = ["delivered", "duplicate", "discarded", "dropped", "refused"].iter().map(|k| n(r, k)).sum();
        assert_eq!(n(r, "bytes"), sum, "{r}");
        assert!(r["close"].is_string(), "{r}");
        assert!(n(r, "first_ns") <= n(r, "last_ns"));
    }
    assert!(records.iter().any(|r| r["proto"] == 17), "UDP streams are recorded too");
    assert!(records.iter().any(|r| r["close"] == "fin"));
}

#[test]
fn bad_settings_and_offloading_which_would_split_streams_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let t = trace.to_str().unwrap();
    let two = format!("{t}@0-1");
    for (args, says) in [
        (vec!["streams", two.as_str(), "--balance", "offload:50"], "two workers at once"),
        (vec!["streams", two.as_str(), "--balance", "rebalance:50"], "two workers at once"),
        (vec!["streams", t, "--piece", "0"], "piece size"),
        (vec!["streams", t, "--piece", "100", "--piece-overlap", "100"], "overlap"),
        (vec!["streams", t, "--cutoff-class", "tcp port=5"], "tcp port"),
        (vec!["streams", t, "--cutoff-class", "tcp"], "EXPR=BYTES"),
        (vec!["streams", t, "--class", "tcp;mode=fast"], "`fast` is not a stream mode"),
        (vec!["streams", t, "--class", "tcp;priority=4"], "priority `4` in `tcp;priority=4` is not one of 0 to 3"),
        (vec!["streams", t, "--class", "tcp;cutoff=1,colour=red"], "`colour` in `tcp;cutoff=1,colour=red` is not a class setting"),
        (vec!["streams", t, "--class", "tcp;cutoff=1,cutoff=2"], "`cutoff` is given twice"),
        (vec!["streams", t, "--class", "tcp;"], "no settings after the `;`"),
        (vec!["streams", t, "--class", "tcp prt 80;cutoff=1"], "class `tcp prt 80`"),
        (vec!["streams", t, "--mode", "udp"], "stream mode"),
        (vec!["streams", t, "--hold-limit", "2000000000"], "hold limit"),
    ] {
        let o = weir(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains(says), "{args:?}: {}", text(&o.stderr));
    }
    let o = weir(&["streams", "/nonexistent.pcap"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The `--json` records of every stream, without the queue that ran it, sorted.
fn records(source: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["streams", source, "--json"];
    args.extend_from_slice(extra);
    let o = weir(&args);
    assert!(o.status.success(), "weir {args:?}: {}", text(&o.stderr));
    let mut lines: Vec<String> = text(&o.stdout)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("queue");
            v.to_string()
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn json_records_are_the_same_under_rebalancing_apart_from_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synth(dir.path());
    let t = trace.to_str().unwrap();
    let two = format!("{t}@0-1");
    let one = records(t, &[]);
    assert!(one.len() > 500, "{} records", one.len());
    for extra in [&["--balance", "rebalance"][..], &["--balance", "rebalance", "--locality", "256"][..]] {
        assert!(records(&two, extra) == one, "{extra:?}: other records");
    }
}

/// `--stats FILE` that cannot be written is refused before the run, as `-o`
/// is (exit 2, naming it), not after the whole capture: the paced run here
/// would take 20 s.
#[test]
fn a_stats_file_that_cannot_be_written_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let t = synth(dir.path());
    let bad = dir.path().join("no/such/dir/s.json");
    for command in ["streams", "flows"] {
        let started = std::time::Instant::now();
        let mut args = vec![command, t.to_str().unwrap(), "-q", "--pps", "1500", "--stats", bad.to_str().unwrap()];
        if command == "flows" {
            args.extend(["-w", "/dev/null"]);
        }
        let o = weir(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "weir {args:?}: {err}");
        assert!(err.contains(&format!("--stats {}", bad.display())) && err.contains("No such file or directory"), "{err}");
        assert!(started.elapsed().as_secs() < 10, "weir {command} ran {:?} before refusing --stats", started.elapsed());
    }
}
