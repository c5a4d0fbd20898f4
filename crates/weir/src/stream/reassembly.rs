//! One direction of a TCP stream, reassembled from its segments.
//!
//! A [`Reassembler`] turns segments taken in arrival order into the stream's
//! bytes in order, reported to a [`Sink`] as data, gaps and the end (the
//! contract is in the [module above](super)).
//!
//! Positions: a segment's 32-bit sequence number is turned into a 64-bit
//! stream offset by serial-number arithmetic (RFC 1982) against the next
//! offset the reassembler expects, so a stream crosses 2^32 as if the
//! numbers did not wrap. A sequence number more than 2^31 away from the next
//! expected one is read as lying behind it, as a receiving TCP would.
//!
//! In [`Mode::TcpStrict`] with [`Config::receive_window`], data is also held
//! to the receiver's window (RFC 9293 3.10.7.4, segment acceptability): the
//! caller reports each window the receiver advertises
//! ([`Reassembler::advertise`]), and bytes at or past the furthest right edge
//! advertised so far are refused, as a receiving TCP trims them off (a FIN
//! there is not taken either). The furthest edge rather than the latest: RFC
//! 9293 (3.8.6) strongly discourages shrinking a window, and a sender may
//! still fill an edge advertised before a smaller window reached it, so only
//! bytes past every edge are certainly refused by the receiver. Until a
//! window is reported, nothing is refused for it.
//!
//! Held segments are kept in a map by offset, never overlapping one another:
//! a segment that overlaps held or delivered bytes keeps only the parts no
//! earlier copy covered ([`OverlapPolicy::FirstCopyWins`]).

// Written by hand, line by line, and not adapted from another reassembler:
// this is the heart of weir's stream layer, where every byte an application
// sees, or is told it missed, is decided. Its rules (what wins an overlap,
// when a hole turns into a gap, which category a byte is counted in) are
// weir's own contract, and each line is meant to be checked against that
// contract by a reader, the table of cases and the byte-map model in the
// tests, and the fuzz target.

use crate::{Setting, SettingError};
use std::collections::BTreeMap;

/// How much the reassembler checks before it accepts data.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Picks a stream up at the first segment seen (after its SYN if that is
    /// the first), and delivers in-order bytes as they come.
    #[default]
    TcpFast,
    /// Accepts data only after the SYN, unless [`Config::midstream`] allows
    /// picking the stream up at its first segment; after that, the same
    /// acceptance as [`Mode::TcpFast`].
    TcpStrict,
}

/// Which copy of a byte wins when segments overlap with different contents.
///
/// Only one policy exists; the enum names it so that a setting can choose
/// among more later (targets differ: some operating systems keep the last
/// copy, and an IDS may want to follow a given target's policy).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum OverlapPolicy {
    /// The first copy of each byte to arrive is the one delivered; later
    /// copies of that byte are counted as duplicates and dropped, whatever
    /// their contents. This is what the reassembler needs no extra memory
    /// for: it never has to replace bytes it holds or has delivered.
    #[default]
    FirstCopyWins,
}

/// The most bytes of one stream held out of order, waiting for a hole to be
/// filled. Past it, the first hole is given up as a gap.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HoldLimit(u64);

impl HoldLimit {
    /// The largest limit: the default size of the whole reassembly arena of
    /// the design, so one stream can never be allowed more than all of them.
    pub const MAX: u64 = 1 << 30;

    /// A limit of `bytes`, from 0 (nothing is held: any hole is a gap at
    /// once) to [`HoldLimit::MAX`].
    pub fn new(bytes: u64) -> Result<HoldLimit, SettingError> {
        if bytes > HoldLimit::MAX {
            let problem = format!("the out-of-order hold limit must be from 0 to {} bytes, not {bytes}", HoldLimit::MAX);
            return Err(SettingError::new(Setting::Streams, problem));
        }
        Ok(HoldLimit(bytes))
    }

    /// The limit in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl Default for HoldLimit {
    /// 256 KiB: more than a TCP receive window of the usual default size, so
    /// an ordinary reordering is waited for.
    fn default() -> HoldLimit {
        HoldLimit(256 * 1024)
    }
}

/// The stream offset from which bytes are discarded: counted, not copied.
///
/// It counts offsets, gaps included, so a retransmission can neither move it
/// nor make a byte past it count twice.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Cutoff(Option<u64>);

impl Cutoff {
    /// No cutoff: the whole stream is delivered.
    pub const NONE: Cutoff = Cutoff(None);

    /// Deliver the first `bytes` offsets of the stream, discard the rest.
    pub fn after(bytes: u64) -> Cutoff {
        Cutoff(Some(bytes))
    }

    fn offset(self) -> u64 {
        self.0.unwrap_or(u64::MAX)
    }
}

/// How one direction is reassembled.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Config {
    /// Fast or strict acceptance.
    pub mode: Mode,
    /// Which copy of an overlapped byte wins.
    pub overlap: OverlapPolicy,
    /// Bytes held out of order before a hole is given up as a gap.
    pub hold_limit: HoldLimit,
    /// Where the stream's delivered bytes stop.
    pub cutoff: Cutoff,
    /// In [`Mode::TcpStrict`], pick the stream up at its first segment when
    /// its SYN was not seen. [`Mode::TcpFast`] always does.
    pub midstream: bool,
    /// In [`Mode::TcpStrict`], refuse bytes at or past the right edge of the
    /// receiver's advertised window, as [`Reassembler::advertise`] reports
    /// it. [`Mode::TcpFast`] never checks the window.
    pub receive_window: bool,
}

/// The TCP flags that matter to reassembly.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Flags {
    /// SYN: the segment's sequence number is the one before offset 0.
    pub syn: bool,
    /// FIN: the stream ends after this segment's payload.
    pub fin: bool,
    /// RST: the stream ends now; the segment's payload is not data.
    pub rst: bool,
}

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags { syn: false, fin: false, rst: false };
    /// SYN alone.
    pub const SYN: Flags = Flags { syn: true, fin: false, rst: false };
    /// FIN alone.
    pub const FIN: Flags = Flags { syn: false, fin: true, rst: false };
    /// RST alone.
    pub const RST: Flags = Flags { syn: false, fin: false, rst: true };
}

/// One TCP segment of the direction, as it arrived.
#[derive(Copy, Clone, Debug)]
pub struct Segment<'a> {
    /// The sequence number of the segment (of its SYN if it has one, else of
    /// its first payload byte).
    pub seq: u32,
    /// The TCP payload.
    pub payload: &'a [u8],
    /// SYN, FIN, RST.
    pub flags: Flags,
}

/// Why a stream ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// Every offset up to the FIN (or the cutoff) was delivered or reported
    /// as a gap.
    Fin,
    /// A RST arrived.
    Rst,
    /// The caller closed it after no segment came for too long.
    Timeout,
    /// The caller closed it to make room in its stream table.
    Evicted,
    /// The input ended.
    EndOfInput,
}

/// Where the reassembled stream goes. Calls come in stream order: each
/// `data` or `gap` starts at the offset where the one before ended, and
/// `end` comes once, last.
pub trait Sink {
    /// Bytes of the stream at `offset`, never empty.
    fn data(&mut self, offset: u64, bytes: &[u8]);
    /// `len` offsets from `offset` whose bytes were never seen; never 0.
    fn gap(&mut self, offset: u64, len: u64);
    /// The stream is over.
    fn end(&mut self, reason: EndReason);
}

/// Where every payload byte handed to a [`Reassembler`] went, and the offsets
/// it gave up as gaps. `received = delivered + duplicate + discarded_cutoff +
/// refused + held` at all times.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Counters {
    /// Payload bytes handed in.
    pub received: u64,
    /// Bytes handed to the sink as data.
    pub delivered: u64,
    /// Offsets reported as gaps (not bytes that arrived: bytes that never did).
    pub gap: u64,
    /// Bytes whose offset was already delivered, reported as a gap, or held.
    pub duplicate: u64,
    /// Bytes at or past the cutoff.
    pub discarded_cutoff: u64,
    /// Bytes that are not stream data: before the SYN in strict mode, before
    /// offset 0, past the FIN, past the receiver's window in strict mode,
    /// with or after a RST, after the end.
    pub refused: u64,
    /// Bytes held now, out of order.
    pub held: u64,
}

/// Where a reassembler is in the life of its stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    /// No segment has given offset 0 a sequence number yet.
    Waiting,
    /// Offsets are known; data flows.
    Open,
    /// The sink has been told the end. After a FIN, later bytes are sorted
    /// as before (a retransmission is a duplicate); after any other end,
    /// every later byte is refused.
    Ended(EndReason),
}

/// One direction of a TCP stream being reassembled.
#[derive(Debug)]
pub struct Reassembler {
    config: Config,
    state: State,
    /// The sequence number of offset 0.
    base: u32,
    /// The next offset to report: everything before it was delivered or
    /// reported as a gap, nothing after it was.
    next: u64,
    /// Bytes held out of order, by offset: none overlaps another, none starts
    /// at or before `next`, none reaches past the FIN or the cutoff.
    held: BTreeMap<u64, Vec<u8>>,
    /// The offset of the FIN once one arrived: the end of the stream.
    fin: Option<u64>,
    /// The offset of the first FIN seen, taken or not (one past the window
    /// is refused): its sequence number is not a byte, so a bare ACK after
    /// it does not make that offset a gap.
    fin_heard: Option<u64>,
    /// The end of the furthest bytes (or FIN) seen, cutoff or not, never past
    /// the FIN: a flush knows the offsets before it exist, so the ones never
    /// seen there are a gap.
    seen_end: u64,
    /// The furthest right edge of the receiver's window advertised so far,
    /// as an offset, when the window is checked and one was advertised.
    edge: Option<u64>,
    counters: Counters,
}

impl Reassembler {
    /// A reassembler for one direction that has seen nothing yet.
    pub fn new(config: Config) -> Reassembler {
        Reassembler {
            config,
            state: State::Waiting,
            base: 0,
            next: 0,
            held: BTreeMap::new(),
            fin: None,
            fin_heard: None,
            seen_end: 0,
            edge: None,
            counters: Counters::default(),
        }
    }

    /// Where every byte went so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The next stream offset to be reported: delivered plus gap bytes.
    pub fn next_offset(&self) -> u64 {
        self.next
    }

    /// Whether a segment's payload would be held (it starts past the next
    /// offset while the stream is open): the bytes that need memory.
    pub fn would_hold(&self, seq: u32, syn: bool) -> bool {
        let first_seq = if syn { seq.wrapping_add(1) } else { seq };
        let at = self.offset_of(first_seq);
        self.state == State::Open && at > self.next as i64 && self.in_window(at)
    }

    /// Whether the receiver's window is checked: the caller need only
    /// [`advertise`](Self::advertise) windows when it is.
    pub fn checks_window(&self) -> bool {
        self.config.mode == Mode::TcpStrict && self.config.receive_window
    }

    /// Takes a window the receiver advertised: its acknowledgment number and
    /// its window in bytes (scaled). The right edge only moves forward. It is
    /// ignored until the stream has its offset 0 (the sequence numbers mean
    /// nothing before), and when the window is not checked.
    pub fn advertise(&mut self, ack: u32, window: u64) {
        if !self.checks_window() || self.state != State::Open {
            return;
        }
        // A window is at most 2^30 (65535 << 14): no overflow in i64.
        let edge = u64::try_from(self.offset_of(ack) + window as i64).unwrap_or(0);
        self.edge = Some(self.edge.map_or(edge, |e| e.max(edge)));
    }

    /// Whether the sink has been told the end.
    pub fn is_ended(&self) -> bool {
        matches!(self.state, State::Ended(_))
    }

    /// Takes one segment in arrival order and reports to `sink` what it makes
    /// reportable: in-order data, data it unblocks, gaps when the held bytes
    /// pass their limit, the end.
    pub fn segment(&mut self, segment: Segment<'_>, sink: &mut impl Sink) {
        let len = segment.payload.len() as u64;
        self.counters.received += len;
        match self.state {
            State::Ended(EndReason::Fin) if !segment.flags.rst => {
                // Every offset up to the FIN (or the cutoff) has been
                // reported, so nothing can be delivered or held: this only
                // counts a late copy as a duplicate, bytes past the FIN as
                // refused, past the cutoff as discarded.
                let first_seq = if segment.flags.syn { segment.seq.wrapping_add(1) } else { segment.seq };
                self.place(self.offset_of(first_seq), segment.payload, sink);
                self.check();
                return;
            }
            State::Ended(_) => {
                self.counters.refused += len;
                return;
            }
            State::Waiting => {
                if segment.flags.syn {
                    self.base = segment.seq.wrapping_add(1);
                } else if segment.flags.rst || (self.config.mode == Mode::TcpStrict && !self.config.midstream) {
                    // Strict mode takes nothing before the handshake; a RST
                    // on a stream not yet picked up only ends it (below).
                    if !segment.flags.rst {
                        self.counters.refused += len;
                        return;
                    }
                } else {
                    self.base = segment.seq;
                }
                self.state = State::Open;
            }
            State::Open => {}
        }
        if segment.flags.rst {
            // Data after a RST is ignored, and the RST's own payload (a
            // diagnostic some stacks send) is not stream data either.
            self.counters.refused += len;
            self.close(EndReason::Rst, sink);
            return;
        }
        // A SYN takes one sequence number before the first payload byte.
        let first_seq = if segment.flags.syn { segment.seq.wrapping_add(1) } else { segment.seq };
        let start = self.offset_of(first_seq);
        let end = start + len as i64;
        // The FIN takes the sequence number after the payload: past the
        // window, the receiver does not take it either.
        if segment.flags.fin && self.fin_heard.is_none() {
            self.fin_heard = u64::try_from(end).ok();
        }
        if segment.flags.fin && self.fin.is_none() && self.in_window(end) {
            // The first FIN decides where the stream ends; a later FIN that
            // says otherwise is a conflicting copy and loses, as data does.
            // One that points behind what was already reported ends the
            // stream where it stands.
            self.set_fin(u64::try_from(end).unwrap_or(0).max(self.next));
        }
        self.place(start, segment.payload, sink);
        self.drain(sink);
        self.enforce_limit(sink);
        self.end_if_complete(sink);
        self.check();
    }

    /// Gives up every hole now (the caller's timeout): each becomes a gap and
    /// the held bytes after it are delivered. The offsets that never came
    /// before the furthest byte seen (even past the cutoff) or the FIN become
    /// a last gap; after the FIN, the stream ends. Offsets past anything seen
    /// are not reported: the stream may not reach them.
    pub fn flush_gap(&mut self, sink: &mut impl Sink) {
        if self.state != State::Open {
            return;
        }
        while let Some(&first) = self.held.keys().next() {
            self.gap(first - self.next, sink);
            self.drain(sink);
        }
        // Offsets before the furthest byte or FIN seen exist, whether their
        // bytes were kept or discarded past the cutoff, so the ones still
        // missing are a gap; the offsets after it may never exist.
        let end = self.seen_end.min(self.config.cutoff.offset());
        if end > self.next {
            self.gap(end - self.next, sink);
        }
        self.end_if_complete(sink);
        self.check();
    }

    /// Ends the stream for `reason`: what is held is delivered, the holes
    /// before it become gaps (as [`Reassembler::flush_gap`]), and the sink is
    /// told the end. Nothing is reported after it.
    pub fn close(&mut self, reason: EndReason, sink: &mut impl Sink) {
        if self.is_ended() {
            return;
        }
        self.flush_gap(sink);
        if !self.is_ended() {
            self.state = State::Ended(reason);
            sink.end(reason);
        }
        self.check();
    }

    /// Moves the cutoff while the stream runs (an application raising,
    /// lowering, or with `Cutoff::after(0)` discarding the rest of a stream
    /// from a callback). Reported bytes cannot be taken back, so a cutoff
    /// below the next offset is put at it. Held bytes past the new cutoff are
    /// discarded now. Bytes discarded before a raise are gone: their offsets
    /// become a gap when flushed. After the end it changes nothing: an ended
    /// stream stays ended, even if the FIN was reached only through the
    /// cutoff.
    pub fn set_cutoff(&mut self, cutoff: Cutoff, sink: &mut impl Sink) {
        if self.is_ended() {
            return;
        }
        self.config.cutoff = match cutoff.0 {
            None => Cutoff::NONE,
            Some(at) => Cutoff::after(at.max(self.next)),
        };
        let cut = self.release_held_from(self.config.cutoff.offset());
        self.counters.discarded_cutoff += cut;
        self.end_if_complete(sink);
        self.check();
    }

    /// The stream offset of sequence number `seq`, read as the nearest one to
    /// the next expected offset (serial-number arithmetic): negative when it
    /// lies before offset 0.
    fn offset_of(&self, seq: u32) -> i64 {
        // Truncating `next` to 32 bits is the sequence space's own modulo.
        let next_seq = self.base.wrapping_add(self.next as u32);
        let distance = seq.wrapping_sub(next_seq) as i32;
        self.next as i64 + i64::from(distance)
    }

    /// Whether offset `at` lies before the receiver's right edge (always, when
    /// no window was advertised or it is not checked).
    fn in_window(&self, at: i64) -> bool {
        self.edge.is_none_or(|edge| at < edge as i64)
    }

    /// Sorts the payload starting at offset `start` into its categories, and
    /// delivers or holds what is new stream data.
    fn place(&mut self, start: i64, payload: &[u8], sink: &mut impl Sink) {
        let end = start + payload.len() as i64;
        if let Ok(end) = u64::try_from(end) {
            // Bytes past the window are refused, so they do not make the
            // offsets before them exist either. A segment without payload
            // (a bare ACK) says the offsets before its sequence number exist,
            // but after a FIN one of those numbers was the FIN's.
            let limit = self.fin.unwrap_or(u64::MAX).min(self.edge.unwrap_or(u64::MAX));
            let limit = if payload.is_empty() { limit.min(self.fin_heard.unwrap_or(u64::MAX)) } else { limit };
            self.seen_end = self.seen_end.max(end.min(limit));
        }
        let mut lo = start;
        let mut hi = end;
        if lo < 0 {
            let n = hi.min(0) - lo;
            self.counters.refused += n as u64;
            lo += n;
        }
        let next = self.next as i64;
        if lo < next {
            let n = hi.min(next) - lo;
            self.counters.duplicate += n as u64;
            lo += n;
        }
        if let Some(fin) = self.fin {
            let fin = fin as i64;
            if hi > fin {
                let n = hi - lo.max(fin);
                self.counters.refused += n as u64;
                hi -= n;
            }
        }
        if let Some(edge) = self.edge {
            let edge = edge as i64;
            if hi > edge {
                let n = hi - lo.max(edge);
                self.counters.refused += n as u64;
                hi -= n;
            }
        }
        let cutoff = i64::try_from(self.config.cutoff.offset()).unwrap_or(i64::MAX);
        if hi > cutoff {
            let n = hi - lo.max(cutoff);
            self.counters.discarded_cutoff += n as u64;
            hi -= n;
        }
        if lo >= hi {
            return;
        }
        let bytes = &payload[(lo - start) as usize..(hi - start) as usize];
        let (lo, hi) = (lo as u64, hi as u64);
        if lo == self.next {
            // In order: straight from the segment to the sink, no copy, up to
            // the first held byte (which arrived first, so it wins).
            let upto = self.held.keys().next().map_or(hi, |&first| first.min(hi));
            self.deliver(&bytes[..(upto - lo) as usize], sink);
            if upto < hi {
                self.hold(upto, &bytes[(upto - lo) as usize..]);
            }
        } else {
            self.hold(lo, bytes);
        }
    }

    /// Holds the parts of `bytes` (at offset `lo`, all past `next`) that no
    /// held segment covers; the rest are duplicates.
    fn hold(&mut self, lo: u64, bytes: &[u8]) {
        let hi = lo + bytes.len() as u64;
        let mut cursor = lo;
        if let Some((&start, before)) = self.held.range(..lo).next_back() {
            cursor = cursor.max((start + before.len() as u64).min(hi));
        }
        // Walk the held segments from `cursor`, filling what lies between
        // them; each look-up starts afresh, so the map can be changed as we go.
        let mut new = 0;
        while cursor < hi {
            let next_held = self.held.range(cursor..hi).next().map(|(&start, held)| (start, start + held.len() as u64));
            let fill_to = match next_held {
                Some((start, end)) if start == cursor => {
                    cursor = end.min(hi);
                    continue;
                }
                Some((start, _)) => start,
                None => hi,
            };
            self.held.insert(cursor, bytes[(cursor - lo) as usize..(fill_to - lo) as usize].to_vec());
            new += fill_to - cursor;
            cursor = fill_to;
        }
        self.counters.held += new;
        self.counters.duplicate += (hi - lo) - new;
    }

    fn deliver(&mut self, bytes: &[u8], sink: &mut impl Sink) {
        if bytes.is_empty() {
            return;
        }
        sink.data(self.next, bytes);
        self.next += bytes.len() as u64;
        self.counters.delivered += bytes.len() as u64;
    }

    fn gap(&mut self, len: u64, sink: &mut impl Sink) {
        debug_assert!(len > 0, "a gap is never empty");
        sink.gap(self.next, len);
        self.next += len;
        self.counters.gap += len;
    }

    /// Delivers the held segments that now start at `next`.
    fn drain(&mut self, sink: &mut impl Sink) {
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() != self.next {
                debug_assert!(*entry.key() > self.next, "a held segment behind the next offset");
                break;
            }
            let bytes = entry.remove();
            self.counters.held -= bytes.len() as u64;
            self.deliver(&bytes, sink);
        }
    }

    /// Gives up holes, first to last, until the held bytes fit their limit.
    fn enforce_limit(&mut self, sink: &mut impl Sink) {
        while self.counters.held > self.config.hold_limit.bytes() {
            let Some(&first) = self.held.keys().next() else { break };
            self.gap(first - self.next, sink);
            self.drain(sink);
        }
    }

    /// Records where the FIN puts the end of the stream; held bytes past it
    /// are not stream data after all.
    fn set_fin(&mut self, fin: u64) {
        self.fin = Some(fin);
        self.seen_end = fin;
        let cut = self.release_held_from(fin);
        self.counters.refused += cut;
    }

    /// Lets go of the held bytes at and past offset `at` and returns how many,
    /// for the caller to count where they now belong.
    fn release_held_from(&mut self, at: u64) -> u64 {
        let past = self.held.split_off(&at);
        let mut cut: u64 = past.values().map(|bytes| bytes.len() as u64).sum();
        if let Some((&start, bytes)) = self.held.range_mut(..at).next_back() {
            let keep = (at - start) as usize;
            if bytes.len() > keep {
                cut += (bytes.len() - keep) as u64;
                bytes.truncate(keep);
            }
        }
        self.counters.held -= cut;
        cut
    }

    /// Ends the stream once every offset up to the FIN (or the cutoff, if the
    /// FIN lies past it) has been reported.
    fn end_if_complete(&mut self, sink: &mut impl Sink) {
        if let (State::Open, Some(fin)) = (self.state, self.fin) {
            if self.next >= fin.min(self.config.cutoff.offset()) {
                debug_assert!(self.held.is_empty(), "held bytes at the end of the stream");
                self.state = State::Ended(EndReason::Fin);
                sink.end(EndReason::Fin);
            }
        }
    }

    /// The invariants, checked in debug builds after every public call.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let c = &self.counters;
        debug_assert_eq!(c.received, c.delivered + c.duplicate + c.discarded_cutoff + c.refused + c.held, "a byte in no category: {c:?}");
        debug_assert_eq!(self.next, c.delivered + c.gap, "offsets reported are not delivered + gap");
        let limit = self.fin.unwrap_or(u64::MAX).min(self.config.cutoff.offset());
        debug_assert!(self.next <= limit, "reported past the FIN or the cutoff");
        debug_assert!(self.next <= self.seen_end, "reported offsets never seen");
        let mut at = self.next + 1;
        let mut held = 0;
        for (&start, bytes) in &self.held {
            debug_assert!(start >= at, "held segments overlap, touch the next offset, or are out of order");
            debug_assert!(!bytes.is_empty(), "an empty held segment");
            at = start + bytes.len() as u64;
            held += bytes.len() as u64;
        }
        debug_assert!(self.held.is_empty() || at <= limit, "held bytes past the FIN or the cutoff");
        debug_assert_eq!(held, c.held, "the held counter is not what is held");
        debug_assert!(!self.is_ended() || self.held.is_empty(), "bytes held after the end");
    }
}
