//! The `community_id` of the JSON records of `weir streams --json` and
//! `weir inspect` (flow records and alerts) against the reference
//! implementation, the `communityid` package on PyPI (scripts/setup installs
//! it), on corpus traces of every protocol the spec names: each record's ID
//! is the reference's for its addresses, protocol and ports, and a record
//! without one (null) is one whose key lacks what the hash needs (ICMP,
//! keyed by addresses in these modes; a fragment's ports).

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir")).args(args).stdin(Stdio::null()).output().expect("weir runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `../shared/corpus/zeek-traces`; a test asked for without it fails and says where it looked.
fn corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/zeek-traces");
    assert!(p.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", p.display());
    p
}

/// Traces of each kind the spec hashes: the corpus's Community ID traces
/// (TCP, UDP, SCTP, ICMP, ICMPv6, IPv6, ARP) and IPv6 fragments.
fn traces() -> Vec<PathBuf> {
    let c = corpus();
    let mut v: Vec<PathBuf> = std::fs::read_dir(c.join("communityid")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v.extend(["ipv6-fragmented-dns.pcap", "ipv6-http-atomic-frag.pcap", "icmp_dot1q.pcap", "wikipedia.pcap"].map(|t| c.join(t)));
    v
}

/// A record's flow as the reference takes it: protocol, source and
/// destination addresses, source and destination ports.
type Flow = (u8, String, String, u16, u16);

/// A record's `community_id` (a string or null) and its flow.
type Record = (Value, Flow);

/// The reference's ID of each flow.
fn reference(flows: &[Flow]) -> Vec<String> {
    const SCRIPT: &str = r#"
import sys
import communityid
c = communityid.CommunityID()
for line in sys.stdin:
    proto, src, dst, sport, dport = line.split()
    proto = int(proto)
    if proto in (1, 6, 17, 58, 132):
        t = communityid.FlowTuple(proto, src, dst, int(sport), int(dport))
    else:
        t = communityid.FlowTuple(proto, src, dst)
    print(c.calc(t))
"#;
    let mut py = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let input: String = flows.iter().map(|(p, s, d, sp, dp)| format!("{p} {s} {d} {sp} {dp}\n")).collect();
    let mut stdin = py.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = py.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "the reference (pip install communityid==1.5.0; scripts/setup installs it): {}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// Holds each record's `community_id` to the reference; `nullable` says
/// which records may have none. Returns how many had one.
fn check(what: &str, records: &[Record], nullable: impl Fn(u8) -> bool) -> usize {
    let with: Vec<&Record> = records.iter().filter(|(id, _)| !id.is_null()).collect();
    for (id, f) in records.iter().filter(|(id, _)| id.is_null()) {
        assert!(nullable(f.0), "{what}: no community_id for {f:?} ({id})");
    }
    let want = reference(&with.iter().map(|(_, f)| f.clone()).collect::<Vec<_>>());
    for ((id, f), want) in with.iter().zip(&want) {
        assert_eq!(id.as_str(), Some(want.as_str()), "{what}: {f:?}");
    }
    with.len()
}

/// `ADDR:PORT` or `[ADDR]:PORT`.
fn endpoint(s: &str) -> (String, u16) {
    let (a, p) = s.rsplit_once(':').unwrap();
    (a.trim_start_matches('[').trim_end_matches(']').to_string(), p.parse().unwrap())
}

#[test]
#[ignore = "needs the corpus in ../shared/corpus"]
fn streams_and_inspect_records_carry_the_reference_community_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut streams, mut inspect) = (0, 0);
    let mut protocols = std::collections::BTreeSet::new();
    for trace in traces() {
        let t = trace.to_str().unwrap();
        // weir streams --json: a record per stream direction.
        let o = weir(&["streams", t, "-q", "--json"]);
        assert!(o.status.success(), "{t}: {}", text(&o.stderr));
        let records: Vec<Record> = text(&o.stdout)
            .lines()
            .map(|l| {
                let j: Value = serde_json::from_str(l).unwrap();
                let f = (
                    j["proto"].as_u64().unwrap() as u8,
                    j["src"].as_str().unwrap().to_string(),
                    j["dst"].as_str().unwrap().to_string(),
                    j["sport"].as_u64().unwrap() as u16,
                    j["dport"].as_u64().unwrap() as u16,
                );
                protocols.insert(f.0);
                (j["community_id"].clone(), f)
            })
            .collect();
        // Streams mode keys ICMP by its addresses: no type, no ID.
        streams += check(&format!("streams {t}"), &records, |p| p == 1 || p == 58);
        // weir inspect --work flows: a record per flow of its table.
        let out = dir.path().join("flows.jsonl");
        let o = weir(&["inspect", t, "-q", "--work", "flows", "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{t}: {}", text(&o.stderr));
        let records: Vec<Record> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| {
                let j: Value = serde_json::from_str(l).unwrap();
                let flow: Vec<&str> = j["flow"].as_str().unwrap().split(' ').collect();
                let ((src, sport), (dst, dport)) = (endpoint(flow[0]), endpoint(flow[1]));
                (j["community_id"].clone(), (flow[2].parse().unwrap(), src, dst, sport, dport))
            })
            .collect();
        // The packet's tuple: ICMP without its type, fragments without ports.
        inspect += check(&format!("inspect {t}"), &records, |p| matches!(p, 1 | 6 | 17 | 58 | 132));
    }
    assert!(streams > 20 && inspect > 20, "{streams} stream and {inspect} inspect records had an ID");
    assert!([6, 17, 132].iter().all(|p| protocols.contains(p)), "{protocols:?}");
}
