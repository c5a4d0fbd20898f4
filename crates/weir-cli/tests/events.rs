//! `weir flows --events`: every record the exporters are handed is one EVE
//! `flow` event, each valid against `schema/eve.schema.json` (checked by the
//! `jsonschema` package from PyPI, formats included), each `community_id`
//! the reference implementation's (`communityid` from PyPI), the packets of
//! the events those of the records, and a device that cannot be written
//! named and counted. scripts/setup installs both packages.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

#[path = "support/eve.rs"]
mod eve;
use eve::check;
use std::process::{Command, Output, Stdio};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Packets the events hold, both directions.
fn event_packets(events: &Path) -> u64 {
    std::fs::read_to_string(events)
        .unwrap()
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            e["flow"]["pkts_toserver"].as_u64().unwrap() + e["flow"]["pkts_toclient"].as_u64().unwrap()
        })
        .sum()
}

/// Packets of the stream layer that are in a flow record: every IP packet
/// but the fragments of datagrams that never completed.
fn packets_in_records(s: &Value) -> u64 {
    let f = &s["ip_fragments"];
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    n(s, "packets") - n(s, "not_ip") - n(s, "malformed") - n(s, "untracked") - (n(f, "fragments") - n(f, "fragments_reassembled"))
}

fn runs(dir: &Path, trace: &str) -> u64 {
    let mut events_seen = 0;
    for extra in [&[][..], &["--biflow"], &["--export", "per-queue"]] {
        let (events, stats) = (dir.join("events.json"), dir.join("stats.json"));
        let mut args = vec!["flows", trace, "-q", "-w", "/dev/null", "--events", events.to_str().unwrap()];
        if extra.contains(&"per-queue") {
            args = vec!["flows", trace, "-q", "-n", "127.0.0.1:9", "--events", events.to_str().unwrap()];
        }
        args.extend_from_slice(&["--stats", stats.to_str().unwrap()]);
        args.extend_from_slice(extra);
        let o = weir(&args);
        let stderr = text(&o.stderr);
        // Port 9 of loopback bounces the datagrams of the per-queue run: exit 1, the events still written.
        assert!(o.status.success() || extra.contains(&"per-queue"), "weir {args:?}: {stderr}");
        let s: Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        let exported = s["export"]["exported"].as_u64().unwrap();
        assert_eq!(s["events"]["written"].as_u64(), Some(exported), "{args:?}: {s}");
        assert_eq!(s["events"]["unwritten"].as_u64(), Some(0), "{args:?}: {s}");
        assert_eq!(check(&events), exported, "{args:?}");
        assert_eq!(event_packets(&events), packets_in_records(&s), "{args:?}");
        events_seen += exported;
    }
    events_seen
}

#[test]
fn every_exported_record_is_one_valid_event_with_the_reference_community_id() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", "20000", "-c", "600", "--seed", "5"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t = format!("{}@0-1", trace.display());
    assert!(runs(dir.path(), &t) > 1000);
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn corpus_flows_of_every_protocol_are_valid_events_with_the_reference_community_id() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
    assert!(corpus.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", corpus.display());
    let dir = tempfile::tempdir().unwrap();
    let mut traces: Vec<PathBuf> = std::fs::read_dir(corpus.join("communityid")).unwrap().map(|e| e.unwrap().path()).collect();
    traces.extend(["ipv6-fragmented-dns.pcap", "icmp_dot1q.pcap", "icmp_nd_dnssl.pcap", "wikipedia.pcap"].map(|t| corpus.join(t)));
    let mut seen = 0;
    for t in &traces {
        seen += runs(dir.path(), t.to_str().unwrap());
    }
    assert!(seen > 100, "{seen}");
}

#[test]
fn a_device_that_cannot_be_written_is_named_and_every_event_counted() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pcap");
    let o = weir(&["synth", "-o", trace.to_str().unwrap(), "-n", "20000", "-c", "600"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stats = dir.path().join("stats.json");
    let o = weir(&["flows", trace.to_str().unwrap(), "-q", "-w", "/dev/null", "--events", "/dev/full", "--stats", stats.to_str().unwrap()]);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write events to /dev/full: No space left on device"), "{stderr}");
    let s: Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let exported = s["export"]["exported"].as_u64().unwrap();
    assert_eq!((s["events"]["written"].as_u64(), s["events"]["unwritten"].as_u64()), (Some(0), Some(exported)), "{s}");
    // A folder that does not exist is refused before the run.
    let o = weir(&["flows", trace.to_str().unwrap(), "-w", "/dev/null", "--events", "/no/such/dir/e.json"]);
    assert!(o.status.code() == Some(2) && text(&o.stderr).contains("--events /no/such/dir/e.json"), "{}", text(&o.stderr));
    let _ = std::io::stderr().flush();
}
