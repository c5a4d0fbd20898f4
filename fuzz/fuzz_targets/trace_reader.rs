//! Arbitrary bytes through the trace `Walker`, split between calls as the
//! fuzzer chooses.
//!
//! Input: one byte choosing the chunking and the base file offset, then the
//! file. The walker must never panic, must keep its contract on every step
//! (ranges inside the buffer, `consumed > 0` for every step but `Need`, `Need`
//! satisfiable and never at end of input, no endless calls), and must give the
//! same steps in any chunking as with the whole file in one buffer.

#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::tracefile::{FormatError, Step, TraceHeader, Walker, MAX_CAPLEN, MAX_RECORD_BYTES};

/// Everything a walk produced, positions absolute, for comparing chunkings.
#[derive(Debug, PartialEq, Eq)]
struct Walk {
    steps: Vec<(usize, Step)>,
    header: Option<TraceHeader>,
    end: Result<(), FormatError>,
}

/// Walk `bytes` whose first byte is at file offset `base`. The caller's window
/// starts empty and, on `Need`, grows by `grow(need, have)` bytes (at least one).
fn walk(bytes: &[u8], base: u64, mut grow: impl FnMut(usize, usize) -> usize) -> Walk {
    let mut walker = Walker::new();
    let (mut pos, mut limit) = (0usize, 0usize);
    let mut steps = Vec::new();
    let mut calls = 0usize;
    loop {
        calls += 1;
        assert!(calls <= 2 * bytes.len() + 16, "no progress at byte {pos}");
        let window = &bytes[pos..limit];
        let eof = limit == bytes.len();
        let offset = base.wrapping_add(pos as u64);
        let had_header = walker.header().cloned();
        let step = match walker.next(window, offset, eof) {
            Ok(step) => step,
            Err(e) => {
                assert_eq!(walker.next(window, offset, eof).err(), Some(e.clone()), "a repeated call must fail alike");
                return Walk { steps, header: walker.header().cloned(), end: Err(e) };
            }
        };
        let consumed = match &step {
            Step::Need { need } => {
                assert!(!eof, "Need at end of input");
                assert!(*need > window.len() && *need <= MAX_RECORD_BYTES, "Need {need} with {} bytes", window.len());
                limit = limit.saturating_add(grow(*need, window.len()).max(1)).min(bytes.len());
                continue;
            }
            Step::End => {
                assert!(eof && window.is_empty() && had_header.is_some(), "End too early");
                return Walk { steps, header: had_header, end: Ok(()) };
            }
            Step::Header { consumed } => {
                assert!(had_header.is_none() && walker.header().is_some(), "Header must come once and set the header");
                *consumed
            }
            Step::Skip { consumed } => *consumed,
            Step::Packet(r) => {
                assert!(had_header.is_some(), "packet before the header");
                assert!(r.data.start <= r.data.end && r.data.end <= r.consumed, "data outside the record");
                assert!(r.data.len() <= MAX_CAPLEN, "caplen {}", r.data.len());
                r.consumed
            }
        };
        assert!(consumed > 0 && consumed <= window.len(), "consumed {consumed} of {}", window.len());
        if had_header.is_some() {
            assert_eq!(walker.header(), had_header.as_ref(), "the header changed");
        }
        steps.push((pos, step));
        pos += consumed;
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&choice, bytes)) = input.split_first() else { return };
    // Offsets near the top of the range must not overflow anything.
    let base = if choice & 0x80 != 0 { u64::MAX - 64 } else { 0 };
    let whole = walk(bytes, base, |_, have| bytes.len() - have);
    let mut state = u32::from(choice) | 1;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state as usize
    };
    let chunked = match choice & 0x3 {
        0 => walk(bytes, base, |need, have| need - have),
        1 => walk(bytes, base, |_, _| 1),
        2 => walk(bytes, base, |_, _| random() % 64 + 1),
        _ => walk(bytes, base, |need, have| (need - have) / 2 + random() % 3),
    };
    assert_eq!(chunked, whole, "chunking changed the result");
});
