//! Checks a file of EVE events (`weir flows --events`, the sensor's
//! `[events]`): every line valid against `schema/eve.schema.json` (the
//! `jsonschema` package from PyPI, formats included), and every
//! `community_id` the reference implementation's (`communityid` from
//! PyPI). scripts/setup installs both packages.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schema/eve.schema.json")
}

/// Validates every line of `events` against the schema and holds each
/// community_id to the reference; prints the complaints, one line each
/// (none when all is well), then the number of events checked.
const CHECK: &str = r#"
import json, sys
import communityid, jsonschema
schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
ids = communityid.CommunityID()
protos = {"TCP": 6, "UDP": 17, "SCTP": 132, "ICMP": 1, "IPv6-ICMP": 58}
n = 0
for line in open(sys.argv[2]):
    e = json.loads(line)
    for err in validator.iter_errors(e):
        print(f"schema: {err.message} at {list(err.absolute_path)}: {line.strip()}")
    n += 1
    if e["event_type"] == "stats":
        continue
    proto = protos.get(e["proto"]) or int(e["proto"])
    if "src_port" in e:
        t = communityid.FlowTuple(proto, e["src_ip"], e["dest_ip"], e["src_port"], e["dest_port"])
    elif "icmp_type" in e:
        t = communityid.FlowTuple(proto, e["src_ip"], e["dest_ip"], e["icmp_type"], e["icmp_code"])
    elif proto in (1, 58):
        # A stream event keys ICMP by addresses only: no ID.
        if e["community_id"] is not None:
            print(f"community_id: an ICMP event without type and code has an ID: {line.strip()}")
        continue
    else:
        t = communityid.FlowTuple(proto, e["src_ip"], e["dest_ip"])
    if e["community_id"] != ids.calc(t):
        print(f"community_id: {ids.calc(t)} by the reference: {line.strip()}")
print(f"checked {n}")
"#;

/// Runs the check over `events`: the number of events checked.
pub fn check(events: &Path) -> u64 {
    let out = Command::new("python3").args(["-c", CHECK]).arg(schema()).arg(events).output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the check needs communityid and jsonschema (scripts/setup installs them): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (complaints, last) = stdout.trim_end().rsplit_once('\n').unwrap_or(("", stdout.trim_end()));
    assert!(complaints.is_empty(), "{}: {complaints}", events.display());
    last.strip_prefix("checked ").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{stdout}"))
}
