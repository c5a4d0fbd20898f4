//! Shared by the trace-reader integration tests: the corpus, a reference caller
//! of `Walker` that can feed it in any chunking, and libpcap read the same way.
//!
//! Both readers boil a file down to a [`Trace`] (did it open, which packets,
//! how did it end) so the two can be compared with `==` and a mismatch reported
//! at the first packet that differs.

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

pub mod frames;

use std::path::{Path, PathBuf};
use weir::filter::oracle::Oracle;
use weir::tracefile::{FormatError, Step, TraceHeader, Walker, MAX_CAPLEN, MAX_RECORD_BYTES};

/// `../shared/corpus` (beside the checkout). The tests that read it are
/// `#[ignore = "needs the corpus in ../shared/corpus"]`; asked for without it,
/// they fail here and say where they looked.
pub fn corpus_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus");
    assert!(root.is_dir(), "this test needs the corpus, and ../shared/corpus is not there (looked at {})", root.display());
    root
}

/// Every file under `dir`, recursively, in a stable order.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap_or_else(|e| panic!("{}: {e}", d.display())).path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A name or first bytes that say "packet trace", whoever can read it.
pub fn looks_like_trace(path: &Path, bytes: &[u8]) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    let by_name = [".pcap", ".pcapng", ".cap", ".gz"].iter().any(|ext| name.ends_with(ext)) || name.contains(".pcap.");
    let magics: [[u8; 4]; 8] = [
        [0xD4, 0xC3, 0xB2, 0xA1],
        [0xA1, 0xB2, 0xC3, 0xD4],
        [0x4D, 0x3C, 0xB2, 0xA1],
        [0xA1, 0xB2, 0x3C, 0x4D],
        [0x34, 0xCD, 0xB2, 0xA1],
        [0xA1, 0xB2, 0xCD, 0x34],
        [0x0A, 0x0D, 0x0D, 0x0A],
        [0x1F, 0x8B, 0x08, 0x00],
    ];
    let by_magic = bytes.len() >= 4 && (magics.iter().any(|m| bytes[..4] == m[..]) || bytes[..2] == [0x1F, 0x8B]);
    by_name || by_magic
}

/// One packet as a reader delivered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pkt {
    pub ts_ns: u64,
    pub wire_len: u32,
    pub data: Vec<u8>,
}

/// A whole file as one reader saw it.
#[derive(Clone, Debug)]
pub struct Trace {
    /// The DLT_ number, or why the file could not be opened.
    pub open: Result<u32, String>,
    pub packets: Vec<Pkt>,
    /// Clean end, or the message of the error that stopped the reading.
    pub end: Result<(), String>,
}

impl Trace {
    /// How `other` differs from `self`, if it does (messages may differ: each
    /// reader words its own).
    pub fn difference(&self, other: &Trace) -> Option<String> {
        match (&self.open, &other.open) {
            (Ok(a), Ok(b)) if a != b => return Some(format!("link type {a} vs {b}")),
            (Ok(_), Err(e)) => return Some(format!("only the first opened it; the second said: {e}")),
            (Err(e), Ok(_)) => return Some(format!("only the second opened it; the first said: {e}")),
            _ => {}
        }
        if let Some(i) = (0..self.packets.len().min(other.packets.len())).find(|&i| self.packets[i] != other.packets[i]) {
            let (a, b) = (&self.packets[i], &other.packets[i]);
            return Some(format!(
                "packet {i} differs: ts {} vs {}, wire_len {} vs {}, caplen {} vs {}",
                a.ts_ns,
                b.ts_ns,
                a.wire_len,
                b.wire_len,
                a.data.len(),
                b.data.len()
            ));
        }
        if self.packets.len() != other.packets.len() {
            return Some(format!("{} vs {} packets (ends: {:?} vs {:?})", self.packets.len(), other.packets.len(), self.end, other.end));
        }
        match (&self.end, &other.end) {
            (Ok(()), Err(e)) => Some(format!("only the second stopped with an error: {e}")),
            (Err(e), Ok(())) => Some(format!("only the first stopped with an error: {e}")),
            _ => None,
        }
    }
}

/// The DLT_ number Linux libpcap reports for a LINKTYPE_ number.
pub fn linux_dlt(link_type: u32) -> u32 {
    weir::LinkType(link_type).dlt()
}

/// Read `path` with the system libpcap, nanosecond precision.
pub fn libpcap_trace(lib: &Oracle, path: &Path) -> Trace {
    let mut handle = match lib.open_offline(path) {
        Ok(h) => h,
        Err(e) => return Trace { open: Err(e.to_string()), packets: Vec::new(), end: Ok(()) },
    };
    let open = Ok(handle.link_type());
    let mut packets = Vec::new();
    loop {
        match handle.next_packet() {
            Ok(Some(p)) => packets.push(Pkt { ts_ns: p.ts_ns, wire_len: p.wire_len, data: p.data }),
            Ok(None) => return Trace { open, packets, end: Ok(()) },
            Err(e) => return Trace { open, packets, end: Err(e.to_string()) },
        }
    }
}

/// What `walk` saw besides the trace: the header and the raw error.
pub struct Walked {
    pub trace: Trace,
    pub header: Option<TraceHeader>,
    pub error: Option<FormatError>,
}

/// Feed `bytes` to a `Walker` as a caller would, checking the walker's contract
/// on every step. The caller's window starts empty; on `Need` it grows by
/// `grow(need, have)` bytes (at least one), which may be less than asked for.
pub fn walk(bytes: &[u8], mut grow: impl FnMut(usize, usize) -> usize) -> Walked {
    let mut walker = Walker::new();
    let (mut pos, mut limit) = (0usize, 0usize);
    let mut packets = Vec::new();
    let mut calls = 0u64;
    // Each call either consumes a byte or adds one to the window.
    let max_calls = 2 * bytes.len() as u64 + 16;
    let finish = |walker: &Walker, packets, end: Result<(), FormatError>| {
        let header = walker.header().cloned();
        let open = match (&header, &end) {
            (Some(h), _) => Ok(linux_dlt(h.link_type.0)),
            (None, Err(e)) => Err(e.to_string()),
            (None, Ok(())) => panic!("walker ended without a header"),
        };
        let error = end.as_ref().err().cloned();
        let end = if header.is_some() { end.map_err(|e| e.to_string()) } else { Ok(()) };
        Walked { trace: Trace { open, packets, end }, header, error }
    };
    loop {
        calls += 1;
        assert!(calls <= max_calls, "no progress after {calls} calls at byte {pos}");
        let window = &bytes[pos..limit];
        let eof = limit == bytes.len();
        let had_header = walker.header().is_some();
        let step = match walker.next(window, pos as u64, eof) {
            Ok(step) => step,
            Err(e) => {
                let again = walker.next(window, pos as u64, eof);
                assert_eq!(again.as_ref().err(), Some(&e), "a repeated call must give the same error");
                return finish(&walker, packets, Err(e));
            }
        };
        match step {
            Step::Need { need } => {
                assert!(!eof, "Need at end of input");
                assert!(need > window.len() && need <= MAX_RECORD_BYTES, "unsatisfiable Need {need} with {} bytes", window.len());
                limit = (limit + grow(need, window.len()).max(1)).min(bytes.len());
            }
            Step::End => {
                assert!(eof && window.is_empty(), "End before the end of input");
                assert!(had_header, "End before the header");
                return finish(&walker, packets, Ok(()));
            }
            Step::Header { consumed } => {
                assert!(!had_header && walker.header().is_some(), "Header must come once and set the header");
                assert!(consumed > 0 && consumed <= window.len());
                pos += consumed;
            }
            Step::Skip { consumed } => {
                assert!(consumed > 0 && consumed <= window.len());
                pos += consumed;
            }
            Step::Packet(r) => {
                assert!(had_header, "packet before the header");
                assert!(r.consumed > 0 && r.consumed <= window.len(), "record overruns the window");
                assert!(r.data.start <= r.data.end && r.data.end <= r.consumed, "data outside the record");
                assert!(r.data.len() <= MAX_CAPLEN);
                packets.push(Pkt { ts_ns: r.ts_ns, wire_len: r.wire_len, data: window[r.data.clone()].to_vec() });
                pos += r.consumed;
            }
        }
    }
}

/// The whole file in one window, as a caller with a large buffer sees it.
pub fn walk_whole(bytes: &[u8]) -> Walked {
    walk(bytes, |_, have| bytes.len() - have)
}

/// A small deterministic generator, so chunkings are reproducible from a seed.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
