//! Arbitrary segments, flushes, cutoff changes, receiver windows and closes through one
//! direction's TCP reassembler (`weir::stream::reassembly`).
//!
//! Input: a configuration (mode, midstream, window check, hold limit, cutoff, initial
//! sequence number), then operations of four bytes each, `kind, lo, hi,
//! len`, a segment's payload (`len` bytes) following each segment. The
//! reassembler must never panic (its own debug assertions check its held
//! segments and its counters after every call, and fuzz builds keep them), it
//! must report data and gaps in stream order, each starting where the last
//! ended, nothing after the end, and every payload byte must be counted in
//! exactly one category after every call: `received = delivered + duplicate +
//! discarded_cutoff + refused + held`, with `delivered + gap` the next offset.
//! After a close nothing is held.

#![no_main]

use libfuzzer_sys::fuzz_target;

use weir::stream::reassembly::{Config, Cutoff, EndReason, Flags, HoldLimit, Mode, Reassembler, Segment, Sink};

/// Checks what the reassembler reports, as an application would rely on it.
#[derive(Default)]
struct Checker {
    at: u64,
    ended: bool,
}

impl Sink for Checker {
    fn data(&mut self, offset: u64, bytes: &[u8]) {
        assert!(!self.ended && offset == self.at && !bytes.is_empty(), "data out of order, empty, or after the end");
        self.at += bytes.len() as u64;
    }

    fn gap(&mut self, offset: u64, len: u64) {
        assert!(!self.ended && offset == self.at && len > 0, "gap out of order, empty, or after the end");
        self.at += len;
    }

    fn end(&mut self, _reason: EndReason) {
        assert!(!self.ended, "two ends");
        self.ended = true;
    }
}

fn check(r: &Reassembler, sink: &Checker) {
    let c = r.counters();
    assert_eq!(c.received, c.delivered + c.duplicate + c.discarded_cutoff + c.refused + c.held, "{c:?}");
    assert_eq!(r.next_offset(), c.delivered + c.gap, "{c:?}");
    assert_eq!(r.next_offset(), sink.at, "the counters and the reports disagree");
    assert_eq!(r.is_ended(), sink.ended);
}

fuzz_target!(|input: &[u8]| {
    let Some((head, mut rest)) = input.split_first_chunk::<9>() else { return };
    let mode = if head[0] & 1 == 0 { Mode::TcpFast } else { Mode::TcpStrict };
    let midstream = head[0] & 2 != 0;
    let receive_window = head[0] & 4 != 0;
    // Small limits and cutoffs, where the interesting cases are.
    let hold_limit = HoldLimit::new(u64::from(u16::from_le_bytes([head[1], head[2]])) % 2048).expect("within the limit's range");
    let cutoff = match u16::from_le_bytes([head[3], head[4]]) {
        0xffff => Cutoff::NONE,
        c => Cutoff::after(u64::from(c) % 4096),
    };
    let isn = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
    let mut r = Reassembler::new(Config { mode, hold_limit, cutoff, midstream, receive_window, ..Config::default() });
    let mut sink = Checker::default();
    while let Some((op, tail)) = rest.split_first_chunk::<4>() {
        let [kind, lo, hi, len] = *op;
        let payload = &tail[..usize::from(len).min(tail.len())];
        rest = &tail[payload.len()..];
        let distance = u32::from(u16::from_le_bytes([lo, hi]));
        match kind >> 5 {
            0 => r.flush_gap(&mut sink),
            1 if lo & 1 == 0 => r.close(EndReason::Timeout, &mut sink),
            1 if lo & 2 == 0 => r.set_cutoff(if hi == 0xff { Cutoff::NONE } else { Cutoff::after(u64::from(hi) * 16) }, &mut sink),
            // A window from the receiver, its acknowledgment near the start.
            1 => r.advertise(isn.wrapping_add(u32::from(hi) * 16), u64::from(len) * 8),
            kind_high => {
                // Mostly near the initial sequence number, where segments
                // meet and overlap; sometimes behind it, or anywhere.
                let seq = match kind_high {
                    2 => isn.wrapping_sub(distance),
                    3 => distance.wrapping_mul(0x0001_0001).wrapping_add(isn.rotate_left(7)),
                    _ => isn.wrapping_add(distance),
                };
                let flags = Flags { syn: kind & 1 != 0, fin: kind & 2 != 0, rst: kind & 4 != 0 };
                r.segment(Segment { seq, payload, flags }, &mut sink);
            }
        }
        check(&r, &sink);
    }
    r.close(EndReason::EndOfInput, &mut sink);
    check(&r, &sink);
    assert_eq!(r.counters().held, 0, "bytes held after the close");
    assert!(sink.ended);
});
