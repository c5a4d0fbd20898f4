//! Reads IPFIX files with ipfixDump (libfixbuf-tools): an independent
//! reader of the files `weir flows -w` writes.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use super::collector::{text, tool};
use std::collections::BTreeMap;
use std::path::Path;

/// One IPFIX message as ipfixDump prints it: its header, how many template
/// records it holds, and its data records (field name to value).
#[derive(Debug, Default)]
pub struct Message {
    pub domain: u32,
    pub sequence: u32,
    pub templates: usize,
    /// Whether a template record came before any data record.
    pub templates_first: bool,
    pub records: Vec<BTreeMap<String, String>>,
}

/// Reads an IPFIX file with ipfixDump (libfixbuf-tools), which must take it
/// without complaint: exit status 0 and nothing on standard error (it
/// reports a cut or malformed message there, and still exits 0).
pub fn ipfix_dump(file: &Path) -> Vec<Message> {
    let o = tool("ipfixDump").args(["--in", file.to_str().unwrap()]).output().unwrap();
    assert!(o.status.success() && o.stderr.is_empty(), "ipfixDump --in {}: {}", file.display(), text(&o.stderr));
    let mut msgs: Vec<Message> = Vec::new();
    let number = |line: &str, after: &str| -> u64 {
        let rest = &line[line.find(after).unwrap_or_else(|| panic!("`{after}` in `{line}`")) + after.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    for line in text(&o.stdout).lines() {
        if line.starts_with("--- Message Header ---") {
            msgs.push(Message::default());
            continue;
        }
        let m = msgs.last_mut().expect("a message header comes first");
        if line.contains("observation domain id:") {
            m.domain = number(line, "observation domain id:") as u32;
        }
        if line.contains("sequence number:") {
            m.sequence = number(line, "sequence number:") as u32;
        }
        if line.starts_with("--- template record ---") {
            m.templates += 1;
            m.templates_first |= m.records.is_empty();
        } else if line.starts_with("--- data record") {
            m.records.push(BTreeMap::new());
        } else if let (Some(r), Some((name, value))) =
            (m.records.last_mut(), line.trim_start().strip_prefix('(').and_then(|l| l.split_once(" : ")))
        {
            let name = name.split_once(')').expect("(id) name").1.trim();
            r.insert(name.to_string(), value.trim().to_string());
        }
    }
    msgs
}
