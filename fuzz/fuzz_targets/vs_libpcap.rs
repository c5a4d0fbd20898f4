//! Arbitrary bytes read by weir's `Walker` and by the system libpcap, which
//! must agree: the same files opened or refused, the same link type, packets
//! and timestamps, and an error at the end exactly when libpcap stops with one.
//!
//! Build without a sanitizer (`cargo fuzz run -s none vs_libpcap`): the oracle
//! is loaded with `RTLD_DEEPBIND`, which AddressSanitizer refuses. Where weir
//! knowingly differs (packets past its size limits, pseudo-headers libpcap
//! rewrites into host order) the input is not compared.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use weir::filter::oracle::Oracle;
use weir::tracefile::{FormatError, FormatErrorKind, Step, Walker};

/// DLT_ values whose packets libpcap rewrites or re-measures.
const REWRITTEN: [u32; 6] = [113, 117, 189, 220, 239, 276];

type Packet = (u64, u32, Vec<u8>);

fn weir(bytes: &[u8]) -> (Option<u32>, Vec<Packet>, Option<FormatError>) {
    let mut walker = Walker::new();
    let (mut pos, mut packets) = (0, Vec::new());
    let error = loop {
        match walker.next(&bytes[pos..], pos as u64, true) {
            Ok(Step::Packet(r)) => {
                packets.push((r.ts_ns, r.wire_len, bytes[pos..][r.data.clone()].to_vec()));
                pos += r.consumed;
            }
            Ok(Step::Header { consumed } | Step::Skip { consumed }) => pos += consumed,
            Ok(Step::End) => break None,
            Ok(Step::Need { need }) => panic!("Need {need} at end of input"),
            Err(e) => break Some(e),
        }
    };
    (walker.header().map(|h| h.link_type.dlt()), packets, error)
}

fn libpcap(path: &Path) -> (Option<u32>, Vec<Packet>, Option<String>) {
    let lib = Oracle::system().unwrap_or_else(|e| panic!("the oracle is missing: {e}"));
    let Ok(mut handle) = lib.open_offline(path) else { return (None, Vec::new(), None) };
    let mut packets = Vec::new();
    loop {
        match handle.next_packet() {
            Ok(Some(p)) => packets.push((p.ts_ns, p.wire_len, p.data)),
            Ok(None) => return (Some(handle.link_type()), packets, None),
            Err(e) => return (Some(handle.link_type()), packets, Some(e.message)),
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    let path = std::env::temp_dir().join(format!("weir-vs-libpcap.{}", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let expected = libpcap(&path);
    let _ = std::fs::remove_file(&path);
    let (dlt, packets, error) = weir(bytes);
    let beyond_limits = matches!(
        error.as_ref().map(|e| &e.kind),
        Some(FormatErrorKind::CaplenOverWeirLimit { .. } | FormatErrorKind::BlockOverWeirLimit { .. })
    );
    if beyond_limits {
        return;
    }
    assert_eq!(dlt, expected.0, "link type (None: refused); weir says {error:?}");
    match dlt {
        None => return,
        Some(d) if REWRITTEN.contains(&d) => return,
        Some(_) => {}
    }
    assert_eq!(packets.len(), expected.1.len(), "packets; libpcap ends with {:?}, weir with {error:?}", expected.2);
    for (i, (ours, theirs)) in packets.iter().zip(&expected.1).enumerate() {
        assert!(ours == theirs, "packet {i}: weir {:?}, libpcap {:?}", (ours.0, ours.1), (theirs.0, theirs.1));
    }
    assert_eq!(error.is_some(), expected.2.is_some(), "end: libpcap {:?}, weir {error:?}", expected.2);
});
