//! One direction of a connection as the stream table keeps it, sized to
//! what its mode needs.
//!
//! The contract:
//! - A [`Dir`] lives inline in its connection's table slot: no allocation
//!   per flow. It holds what every mode counts on every packet (times,
//!   packets, bytes, IP octets, discarded bytes, flags) and what identifies
//!   the direction within the connection (its side of the key, initiator or
//!   responder). A cutoff of 0 (flow statistics) is a bit; any other cutoff
//!   is kept in the delivery. Its addresses, ports and protocol are the
//!   connection's key, and its queue is the layer's: a [`Stream`] record is
//!   made from the three when the application is to see it ([`Dir::stream`]).
//! - What only a direction that delivers data needs (the reassembler, the
//!   piece being filled, the counts of delivered, gap, duplicate, dropped
//!   and refused bytes, a cutoff other than 0) is a [`Delivery`], boxed,
//!   made the first time it is needed. Flow statistics (packets mode at
//!   cutoff 0) never make one but for a closed direction's refused bytes.
//! - A direction without a `Delivery` has delivered, gap, duplicate,
//!   dropped and refused counts of 0.
//!
//! Issue 44 set at most 128 bytes a direction for flow statistics, table
//! and index included: a direction inline is 72 bytes (checked below at
//! compile time), where a boxed `Stream` and its state took 256.

use super::super::api::{ByteCounts, Requests};
use super::super::config::Mode;
use super::super::reassembly::{self, Reassembler};
use super::super::{CloseReason, Direction, Stream};
use crate::wire::FlowTuple;
use crate::QueueId;

/// The counts of a direction that every mode keeps, per packet.
#[derive(Clone, Copy)]
pub(super) struct Rec {
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) octets: u64,
    pub(super) discarded: u64,
    pub(super) tcp_flags: u8,
    pub(super) priority: u8,
    pub(super) mode: Mode,
    pub(super) closed: Option<CloseReason>,
    pub(super) direction: Direction,
}

impl Rec {
    /// A record of no packets yet, from packet time `ts`.
    pub(super) fn new(ts: u64, direction: Direction, mode: Mode, priority: u8) -> Rec {
        Rec {
            first_ns: ts,
            last_ns: ts,
            packets: 0,
            bytes: 0,
            octets: 0,
            discarded: 0,
            tcp_flags: 0,
            priority,
            mode,
            closed: None,
            direction,
        }
    }
}

/// What a direction that delivers data keeps besides its [`Rec`].
#[derive(Default)]
pub(super) struct Delivery {
    /// `None` for datagram streams. Boxed: the reassembler is taken out for
    /// each segment (its sink borrows the rest of the direction), and a
    /// pointer moves where its 150 bytes would.
    pub(super) reasm: Option<Box<Reassembler>>,
    /// The piece being filled, from stream offset `piece_at`; its first
    /// `carried` bytes repeat the end of the previous piece.
    pub(super) piece: Vec<u8>,
    pub(super) piece_at: u64,
    pub(super) carried: usize,
    /// Packet time of the oldest byte waiting in `piece` past the carried ones.
    pub(super) piece_since_ns: u64,
    /// Held bytes last counted into the arena.
    pub(super) held: u64,
    /// What callbacks asked for while the reassembler was busy.
    pub(super) pending: Requests,
    /// Whether the flush queue has an entry for it.
    pub(super) flush_queued: bool,
    pub(super) delivered: u64,
    pub(super) gap: u64,
    pub(super) duplicate: u64,
    pub(super) dropped: u64,
    pub(super) refused: u64,
    /// The direction's cutoff, unless [`Bits::ZERO_CUTOFF`] says it is 0.
    cutoff: Option<u64>,
}

impl Delivery {
    /// Whether bytes wait in the piece past the carried ones.
    pub(super) fn waiting(&self) -> bool {
        self.piece.len() > self.carried
    }
}

/// A direction's yes-or-no facts, one bit each: the direction is 72 bytes
/// with them packed, 80 with a bool each.
#[derive(Clone, Copy, Default)]
pub(super) struct Bits(u8);

impl Bits {
    /// It is the connection key's reverse (side 1 of the connection).
    pub(super) const REVERSED: u8 = 1;
    /// The application asked for its packets.
    pub(super) const PACKETS: u8 = 2;
    /// Installed in the kernel cutoff's flow map (`kernel.rs`).
    pub(super) const IN_KERNEL: u8 = 4;
    /// Its install was refused (map full): not tried again for this record,
    /// so a full map costs one bpf(2) call per stream, not one per packet.
    pub(super) const KERNEL_REFUSED: u8 = 8;
    /// [`Dir::isn`] holds a SYN's sequence number.
    pub(super) const ISN: u8 = 16;
    /// Its cutoff is 0: flow statistics, kept without a [`Delivery`].
    pub(super) const ZERO_CUTOFF: u8 = 32;

    pub(super) fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    pub(super) fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }
}

/// A window scale of "none seen" in [`Dir::window_scale`] (a shift count is
/// at most 255 on the wire, and a usable one at most 14).
const NO_WINDOW_SCALE: u8 = u8::MAX;

/// One direction of a connection.
pub(super) struct Dir<S> {
    pub(super) rec: Rec,
    /// Made when the direction first needs it (see the module's contract).
    pub(super) delivery: Option<Box<Delivery>>,
    /// The SYN's sequence number, when [`Bits::ISN`] says one was seen.
    isn: u32,
    /// The window scale option of that SYN: the shift count of the windows
    /// this direction's sender advertises, if the other SYN has one too.
    window_scale: u8,
    pub(super) bits: Bits,
    /// The application's state; `None` once the direction is closed.
    pub(super) state: Option<S>,
}

// The budget of issue 44: two directions, the connection's key, times and
// links, and the index's buckets, in at most 256 bytes a connection.
const _: () = assert!(std::mem::size_of::<Option<Dir<()>>>() <= 72);

impl<S> Dir<S> {
    /// A direction of no packets yet, with no application state yet;
    /// `reversed` when its packets carry the connection key reversed.
    pub(super) fn new(rec: Rec, reversed: bool, delivery: Option<Box<Delivery>>) -> Dir<S> {
        let mut bits = Bits::default();
        bits.set(Bits::REVERSED, reversed);
        Dir { rec, delivery, isn: 0, window_scale: NO_WINDOW_SCALE, bits, state: None }
    }

    /// The SYN's sequence number, when one was seen.
    pub(super) fn isn(&self) -> Option<u32> {
        self.bits.has(Bits::ISN).then_some(self.isn)
    }

    pub(super) fn window_scale(&self) -> Option<u8> {
        Some(self.window_scale).filter(|&w| w != NO_WINDOW_SCALE)
    }

    /// Notes a SYN's sequence number and window scale option.
    pub(super) fn saw_syn(&mut self, isn: u32, window_scale: Option<u8>) {
        self.isn = isn;
        self.bits.set(Bits::ISN, true);
        self.window_scale = window_scale.unwrap_or(NO_WINDOW_SCALE).min(NO_WINDOW_SCALE - 1);
    }

    /// Its packets' tuple, as sent: the connection's `key`, or its reverse.
    pub(super) fn tuple(&self, key: &FlowTuple) -> FlowTuple {
        if self.bits.has(Bits::REVERSED) {
            key.reversed()
        } else {
            *key
        }
    }

    /// Its cutoff now (`None`: the whole stream).
    pub(super) fn cutoff(&self) -> Option<u64> {
        if self.bits.has(Bits::ZERO_CUTOFF) {
            Some(0)
        } else {
            self.delivery.as_ref().and_then(|x| x.cutoff)
        }
    }

    /// Sets its cutoff; one other than 0 or none needs a delivery to be kept
    /// in, taken from `spare` if it has none.
    pub(super) fn set_cutoff(&mut self, cutoff: Option<u64>, spare: &mut Spare) {
        self.bits.set(Bits::ZERO_CUTOFF, cutoff == Some(0));
        match cutoff {
            Some(0) => {}
            None => {
                if let Some(x) = self.delivery.as_mut() {
                    x.cutoff = None;
                }
            }
            Some(c) => self.delivery.get_or_insert_with(|| spare.delivery()).cutoff = Some(c),
        }
    }

    /// Whether bytes wait in its piece past the carried ones.
    pub(super) fn waiting(&self) -> bool {
        self.delivery.as_ref().is_some_and(|x| x.waiting())
    }

    /// Its byte counts, as its [`Stream`] record would say them.
    pub(super) fn byte_counts(&self) -> ByteCounts {
        let (delivered, gap, duplicate, dropped, refused) =
            self.delivery.as_deref().map_or((0, 0, 0, 0, 0), |x| (x.delivered, x.gap, x.duplicate, x.dropped, x.refused));
        ByteCounts { bytes: self.rec.bytes, delivered, gap, duplicate, discarded: self.rec.discarded, dropped, refused }
    }

    /// The record the application sees, of the connection `key` on `queue`.
    pub(super) fn stream(&self, key: &FlowTuple, queue: QueueId) -> Stream {
        let t = self.tuple(key);
        let (src, dst, sport, dport) = t.endpoints();
        let proto = t.protocol();
        let r = &self.rec;
        // Read in place: a `Delivery::default()` standing in for a missing
        // delivery was built (a Vec, the requests) and dropped for each
        // record of a direction without one (flows mode, --cutoff 0), about
        // 300 instructions a record (cachegrind, 200,000 packets: 2.6% of
        // `streams --cutoff 0`'s, 1.5% of `flows`').
        let ByteCounts { bytes, delivered, gap, duplicate, discarded, dropped, refused } = self.byte_counts();
        Stream {
            src,
            dst,
            sport,
            dport,
            proto,
            direction: r.direction,
            queue,
            first_ns: r.first_ns,
            last_ns: r.last_ns,
            packets: r.packets,
            bytes,
            octets: r.octets,
            tcp_flags: r.tcp_flags,
            delivered,
            gap,
            duplicate,
            discarded,
            dropped,
            refused,
            cutoff: self.cutoff(),
            priority: r.priority,
            mode: r.mode,
            closed: r.closed,
        }
    }
}

/// Deliveries (and reassemblers) kept for reuse by [`Spare`], at most.
const SPARE: usize = 1024;

/// The boxes of closed directions' deliveries and their reassemblers, kept
/// for the streams that come next: at 10^5 short streams, a malloc and a
/// free for each direction were a tenth of the layer's instructions
/// (cachegrind).
pub(super) struct Spare {
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: a direction holds its delivery boxed")]
    pub(super) deliveries: Vec<Box<Delivery>>,
    /// Deliveries kept at most: [`SPARE`], or the preallocated number if larger.
    room: usize,
    #[expect(clippy::vec_box, reason = "the boxes are what is kept: a delivery holds its reassembler boxed")]
    reasms: Vec<Box<Reassembler>>,
}

impl Spare {
    /// Boxes for `n` deliveries, made and written now (the memory faulted in
    /// before the first packet, as libnids links its whole stream pool at
    /// start): a direction's first touch of fresh memory was a third of a
    /// live worker's time at 10^5 new connections (clear_page).
    pub(super) fn preallocated(n: usize) -> Spare {
        let deliveries = (0..n).map(|_| Box::default()).collect();
        Spare { deliveries, room: n.max(SPARE), reasms: Vec::new() }
    }

    /// An empty delivery.
    pub(super) fn delivery(&mut self) -> Box<Delivery> {
        self.deliveries.pop().unwrap_or_default()
    }

    pub(super) fn reassembler(&mut self, config: reassembly::Config) -> Box<Reassembler> {
        match self.reasms.pop() {
            Some(mut b) => {
                *b = Reassembler::new(config);
                b
            }
            None => Box::new(Reassembler::new(config)),
        }
    }

    /// Keeps a closed direction's boxes, unless enough are kept already.
    pub(super) fn keep<S>(&mut self, d: Dir<S>) {
        debug_assert!(d.state.is_none(), "only closed directions are kept");
        let Some(mut x) = d.delivery else { return };
        debug_assert!(x.piece.capacity() == 0, "a closed direction's piece is given back");
        if let Some(r) = x.reasm.take().filter(|_| self.reasms.len() < SPARE) {
            self.reasms.push(r);
        }
        if self.deliveries.len() < self.room {
            *x = Delivery::default();
            self.deliveries.push(x);
        }
    }
}

/// The bytes a direction takes besides its table slot, at most, in a mode
/// that delivers data (for the memory plan).
pub(super) const DELIVERY_BYTES: u64 = std::mem::size_of::<Delivery>() as u64;

/// Deliveries kept for reuse beyond the open directions' (for the memory plan).
pub(super) const SPARE_DELIVERIES: u64 = SPARE as u64;
