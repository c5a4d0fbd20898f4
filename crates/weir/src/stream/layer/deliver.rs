//! A direction's data on its way to the application: TCP segments through
//! the reassembler, datagram payloads, the pieces they fill and what
//! callbacks ask for meanwhile.
//!
//! Every function here works on a direction that has a [`Delivery`] (or
//! makes it, [`delivery`]), and counts each byte it is handed in exactly one
//! of the record's categories (the contract in `stream/mod.rs`).

use super::dir::{Bits, Delivery, Dir};
use super::Env;
use crate::stream::api::Requests;
use crate::stream::arena::Arena;
use crate::stream::config::Mode;
use crate::stream::reassembly::{Cutoff, EndReason, Flags, Reassembler, Segment, Sink};
use crate::stream::{CloseReason, Piece, StreamCtl, StreamHandler};
use crate::wire::field;

/// Bytes a piece's buffer grows by at least, up to the piece size.
const PIECE_STEP: usize = 2048;

/// `d`'s delivery, made now if it has none.
pub(super) fn delivery<'d, S>(d: &'d mut Dir<S>, env: &mut Env<'_, impl StreamHandler>) -> &'d mut Delivery {
    d.delivery.get_or_insert_with(|| env.spare.delivery())
}

/// The delivery of a direction known to have one.
fn made<S>(d: &mut Dir<S>) -> &mut Delivery {
    d.delivery.as_deref_mut().expect("a direction that delivers has a delivery")
}

/// The largest window shift count (RFC 7323 2.3: a larger one is taken as 14).
const MAX_WINDOW_SHIFT: u8 = 14;

/// Hands the window that `receiver`'s segment advertises (its ACK number and
/// window field) to the reassembler of the data it receives, `data`'s, when
/// that one checks the window. The window is scaled as RFC 7323 says: never
/// on a SYN, by the receiver's shift count when both SYNs carried the
/// option, not at all when either lacked it. When a SYN was not seen the
/// shift is not known, and the check is made permissive rather than wrong:
/// the largest shift, 14, so only bytes no receiver could have taken are
/// refused.
pub(super) fn advertise<S>(receiver: &Dir<S>, data: &mut Dir<S>, flags: u8, ack: u32, window: u16) {
    let (data_isn, data_scale) = (data.isn(), data.window_scale());
    let Some(r) = data.delivery.as_mut().and_then(|x| x.reasm.as_mut()).filter(|r| r.checks_window()) else { return };
    if flags & field::tcp::ACK == 0 || flags & field::tcp::RST != 0 {
        // No window without ACK; a RST's ends the stream anyway.
        return;
    }
    let shift = if flags & field::tcp::SYN != 0 {
        0
    } else if receiver.isn().is_none() || data_isn.is_none() {
        MAX_WINDOW_SHIFT
    } else {
        match (receiver.window_scale(), data_scale) {
            (Some(shift), Some(_)) => shift.min(MAX_WINDOW_SHIFT),
            _ => 0,
        }
    };
    r.advertise(ack, u64::from(window) << shift);
}

/// One TCP segment of a direction that is reassembled.
pub(super) fn tcp_segment<H: StreamHandler>(
    d: &mut Dir<H::State>,
    opposite: Option<&Dir<H::State>>,
    seq: u32,
    f: Flags,
    payload: &[u8],
    env: &mut Env<'_, H>,
) {
    let mut r = made(d).reasm.take().expect("reassembled");
    let len = payload.len() as u64;
    let admitted = len == 0 || !r.would_hold(seq, f.syn) || env.arena.admit(d.rec.priority, r.next_offset(), len);
    if admitted {
        r.segment(Segment { seq, payload, flags: f }, &mut PieceSink { d, opposite, env });
    } else {
        // No memory to hold it: its bytes are dropped (counted), its flags
        // still count, and the holes before it are given up so the stream
        // goes on instead of waiting for bytes it could not keep anyway.
        made(d).dropped += len;
        let seq = if f.syn { seq } else { seq.wrapping_add(len as u32) };
        let mut sink = PieceSink { d, opposite, env };
        r.segment(Segment { seq, payload: &[], flags: f }, &mut sink);
        r.flush_gap(&mut sink);
    }
    sync(d, &r, env.arena);
    made(d).reasm = Some(r);
    if env.arena.pressed() && d.waiting() {
        emit(d, opposite, env);
    }
}

/// Ends a reassembled direction's reassembly for `reason`: what it holds is
/// delivered, and its holes become gaps.
pub(super) fn close_reassembly<H: StreamHandler>(
    d: &mut Dir<H::State>,
    opposite: Option<&Dir<H::State>>,
    reason: CloseReason,
    env: &mut Env<'_, H>,
) {
    let Some(mut r) = d.delivery.as_mut().and_then(|x| x.reasm.take()) else { return };
    let why = match reason {
        CloseReason::Rst => EndReason::Rst,
        CloseReason::Idle => EndReason::Timeout,
        CloseReason::Evicted | CloseReason::Reused => EndReason::Evicted,
        CloseReason::Fin | CloseReason::EndOfInput => EndReason::EndOfInput,
    };
    r.close(why, &mut PieceSink { d, opposite, env });
    sync(d, &r, env.arena);
    made(d).reasm = Some(r);
}

/// Copies the reassembler's counts into the record and its held bytes into
/// the arena.
fn sync<S>(d: &mut Dir<S>, r: &Reassembler, arena: &mut Arena) {
    let c = r.counters();
    d.rec.discarded = c.discarded_cutoff;
    let x = made(d);
    if c.held > x.held {
        arena.take(c.held - x.held);
    } else {
        arena.release(x.held - c.held);
    }
    x.held = c.held;
    x.delivered = c.delivered;
    x.gap = c.gap;
    x.duplicate = c.duplicate;
    x.refused = c.refused;
}

/// A datagram's payload, appended to its stream up to the cutoff.
pub(super) fn datagram_payload<H: StreamHandler>(
    d: &mut Dir<H::State>,
    opposite: Option<&Dir<H::State>>,
    payload: &[u8],
    env: &mut Env<'_, H>,
) {
    let at = d.rec.bytes - payload.len() as u64;
    let keep = count_unbuffered(d, payload.len() as u64);
    if keep > 0 {
        delivery(d, env).delivered += keep;
        PieceSink { d, opposite, env }.data(at, &payload[..keep as usize]);
    }
    if env.arena.pressed() && d.waiting() {
        emit(d, opposite, env);
    }
}

/// The last `len` bytes the record counted, without reassembly: those past
/// the cutoff are counted as discarded; returns how many are within it.
fn count_unbuffered<S>(d: &mut Dir<S>, len: u64) -> u64 {
    let at = d.rec.bytes - len;
    let keep = d.cutoff().map_or(len, |c| c.saturating_sub(at).min(len));
    d.rec.discarded += len - keep;
    keep
}

/// The last `len` bytes of a stream without a reassembler (packets mode, or
/// a TCP cutoff of 0): none becomes data, so all are counted as discarded.
/// Returns those within the cutoff, which only packets mode has.
pub(super) fn not_reassembled<S>(d: &mut Dir<S>, len: u64) -> u64 {
    let keep = count_unbuffered(d, len);
    d.rec.discarded += keep;
    keep
}

/// The offset the stream's next byte would have: what its cutoff counts.
pub(super) fn offered<S>(d: &Dir<S>) -> u64 {
    d.delivery.as_ref().and_then(|x| x.reasm.as_ref()).map_or(d.rec.bytes, |r| r.next_offset())
}

/// Whether `d` has a reassembler.
pub(super) fn reassembled<S>(d: &Dir<S>) -> bool {
    d.delivery.as_ref().is_some_and(|x| x.reasm.is_some())
}

/// Delivers the bytes waiting in the piece (a full piece, or a partial one
/// flushed early), keeping the overlap for the next.
pub(super) fn emit<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Dir<H::State>>, env: &mut Env<'_, H>) {
    if d.state.is_none() {
        return;
    }
    let (stream, other) = env.records(d, opposite);
    let (Some(x), Some(state)) = (d.delivery.as_deref_mut(), d.state.as_mut()) else { return };
    let mut ctl = StreamCtl::new(&stream, other.as_ref());
    env.handler.data(&mut ctl, state, &Piece { offset: x.piece_at, data: &x.piece, overlap: x.carried });
    env.stats.pieces += 1;
    let req = ctl.requests();
    let cap = x.piece.capacity();
    let keep = env.overlap.min(x.piece.len());
    let cut = x.piece.len() - keep;
    x.piece.drain(..cut);
    x.piece_at += cut as u64;
    x.carried = keep;
    if env.arena.pressed() {
        x.piece.shrink_to_fit();
    }
    env.arena.release((cap - x.piece.capacity()) as u64);
    x.pending.merge(req);
}

/// Applies what callbacks asked for while the direction was being worked on.
pub(super) fn apply_pending<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Dir<H::State>>, env: &mut Env<'_, H>) {
    let Some(x) = d.delivery.as_mut() else { return };
    let req = std::mem::take(&mut x.pending);
    if req != Requests::default() {
        apply(d, opposite, req, env);
    }
}

/// Applies what a callback asked for.
pub(super) fn apply<H: StreamHandler>(d: &mut Dir<H::State>, opposite: Option<&Dir<H::State>>, req: Requests, env: &mut Env<'_, H>) {
    if let Some(p) = req.priority {
        d.rec.priority = p;
    }
    if let Some(p) = req.packets {
        d.bits.set(Bits::PACKETS, p);
    }
    // A TCP stream made with cutoff 0 has no reassembler to deliver with
    // (see where streams are made): its cutoff stays 0.
    let stateless = !reassembled(d) && env.key.protocol() == 6 && d.rec.mode != Mode::Packets;
    if let Some(cutoff) = req.cutoff.filter(|_| !stateless) {
        let cutoff = cutoff.map(|c| c.max(offered(d)));
        d.set_cutoff(cutoff, env.spare);
        if let Some(mut r) = d.delivery.as_mut().and_then(|x| x.reasm.take()) {
            r.set_cutoff(cutoff.map_or(Cutoff::NONE, Cutoff::after), &mut PieceSink { d, opposite, env });
            sync(d, &r, env.arena);
            made(d).reasm = Some(r);
        }
    }
}

/// Where a reassembler's output goes: into the direction's piece, and from
/// there to the application.
struct PieceSink<'d, 'e, 'h, H: StreamHandler> {
    d: &'d mut Dir<H::State>,
    opposite: Option<&'d Dir<H::State>>,
    env: &'e mut Env<'h, H>,
}

impl<H: StreamHandler> Sink for PieceSink<'_, '_, '_, H> {
    fn data(&mut self, offset: u64, mut bytes: &[u8]) {
        let size = self.env.piece;
        let now = self.env.now;
        let x = delivery(self.d, self.env);
        if x.piece.len() == x.carried {
            x.piece_at = offset - x.carried as u64;
            x.piece_since_ns = now;
        }
        // Whole pieces straight from the packet when nothing waits: no copy.
        if x.piece.is_empty() {
            while bytes.len() >= size && self.env.overlap == 0 && self.d.state.is_some() {
                let (stream, other) = self.env.records(self.d, self.opposite);
                let (Some(x), Some(state)) = (self.d.delivery.as_deref_mut(), self.d.state.as_mut()) else { break };
                let mut ctl = StreamCtl::new(&stream, other.as_ref());
                self.env.handler.data(&mut ctl, state, &Piece { offset: x.piece_at, data: &bytes[..size], overlap: 0 });
                self.env.stats.pieces += 1;
                let req = ctl.requests();
                x.piece_at += size as u64;
                bytes = &bytes[size..];
                x.pending.merge(req);
            }
        }
        while !bytes.is_empty() {
            let x = made(self.d);
            let room = size - x.piece.len();
            let n = room.min(bytes.len());
            let cap = x.piece.capacity();
            let want = x.piece.len() + n;
            if want > cap {
                // Grown in steps of at least PIECE_STEP, doubling, never past
                // the piece size: Vec's own doubling from a few bytes made a
                // stream's first piece cost a dozen reallocations and copies.
                let to = want.max(cap * 2).max(PIECE_STEP).min(size);
                x.piece.reserve_exact(to - x.piece.len());
            }
            x.piece.extend_from_slice(&bytes[..n]);
            self.env.arena.take((x.piece.capacity() - cap) as u64);
            bytes = &bytes[n..];
            if x.piece.len() == size {
                emit(self.d, self.opposite, self.env);
            }
        }
    }

    fn gap(&mut self, offset: u64, len: u64) {
        if self.d.waiting() {
            emit(self.d, self.opposite, self.env);
        }
        // The overlap is not carried across a gap: the bytes are not adjacent.
        let x = delivery(self.d, self.env);
        x.piece.clear();
        x.carried = 0;
        if self.d.state.is_some() {
            let (stream, other) = self.env.records(self.d, self.opposite);
            let state = self.d.state.as_mut().expect("open");
            let mut ctl = StreamCtl::new(&stream, other.as_ref());
            self.env.handler.gap(&mut ctl, state, offset, len);
            made(self.d).pending.merge(ctl.requests());
        }
    }

    fn end(&mut self, reason: EndReason) {
        if self.d.rec.closed.is_none() {
            self.d.rec.closed = Some(match reason {
                EndReason::Fin => CloseReason::Fin,
                EndReason::Rst => CloseReason::Rst,
                EndReason::Timeout => CloseReason::Idle,
                EndReason::Evicted => CloseReason::Evicted,
                EndReason::EndOfInput => CloseReason::EndOfInput,
            });
        }
    }
}
