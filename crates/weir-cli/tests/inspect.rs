//! `weir inspect`: the same alerts and per-flow counters, byte for byte, with the
//! locality buffer on and off, on every balance mode, on a synthesized trace and
//! on real ones; rule files with mistakes are refused with the line named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run inspect on `source` with `extra` options; return what it wrote.
fn inspect(dir: &Path, source: &str, extra: &[&str]) -> String {
    let out = dir.join("out.jsonl");
    let mut args = vec!["inspect", "-q", source, "-o", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = weir(&args);
    assert!(o.status.success(), "weir {args:?}: {}", text(&o.stderr));
    std::fs::read_to_string(out).unwrap()
}

fn corpus() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
    p.is_dir().then_some(p)
}

#[test]
fn alerts_and_flow_counters_are_the_same_with_the_locality_buffer_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", "40000", "-c", "3000"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = trace.to_str().unwrap();
    let off = inspect(dir.path(), t, &[]);
    let alerts = off.lines().filter(|l| l.starts_with("{\"alert\"")).count();
    let flows = off.lines().filter(|l| l.starts_with("{\"alerts\"")).count();
    assert!(alerts > 100 && flows > 1000, "{alerts} alerts, {flows} flows: the workload must do something");
    let split = format!("{t}@0-1");
    for (source, extra) in [
        (t, vec!["--locality", "1000"]),
        (t, vec!["--locality", "8000", "--locality-double"]),
        (split.as_str(), vec!["--locality", "500", "--balance", "rebalance"]),
        (split.as_str(), vec!["--locality", "500", "--balance", "offload:50"]),
        (split.as_str(), vec![]),
    ] {
        assert!(inspect(dir.path(), source, &extra) == off, "{source} {extra:?}: output differs from the buffer off");
    }
    // The automata are a choice of speed and memory, not of what matches.
    for extra in [vec!["--automaton", "nfa"], vec!["--split-any"], vec!["--automaton", "nfa", "--split-any", "--locality", "1000"]] {
        assert!(inspect(dir.path(), t, &extra) == off, "{extra:?}: output differs from the default automata");
    }
    // The flow-table workload alone writes the same counters, without alerts.
    let flows_only = inspect(dir.path(), t, &["--work", "flows", "--locality", "1000"]);
    assert_eq!(flows_only.lines().count(), flows);
}

#[test]
fn real_traces_give_the_same_output_with_the_buffer_on() {
    let Some(dir) = corpus() else {
        println!("skipping: no ../shared/corpus");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut tried = 0;
    for name in ["http/bro.org.pcap", "http-vlan-0.pcap", "dns-caa.pcap", "smtp.pcap", "ssl-and-ssh-using-sslh.pcap"] {
        let p = dir.join(name);
        if !p.is_file() {
            continue;
        }
        tried += 1;
        let s = p.to_str().unwrap();
        assert_eq!(inspect(tmp.path(), s, &["--locality", "64"]), inspect(tmp.path(), s, &[]), "{name}");
    }
    assert_eq!(tried, 5, "a trace named here is missing from the corpus");
}

#[test]
fn a_rule_file_with_a_mistake_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, "# ok\n1 80 \"GET\"\n2 80 GET\n").unwrap();
    let o = weir(&["inspect", "--rules", rules.to_str().unwrap(), "/dev/null"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("r.rules:3") && text(&o.stderr).contains("double quotes"), "{}", text(&o.stderr));
    let p = weir(&["inspect", "--print-rules"]);
    assert!(p.status.success() && text(&p.stdout).lines().count() > 4000);
}
